"""Manager settings (the ``tailor manager`` options) with house-style validation."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from tailor.errors import ParameterError, check, param_error

MiB = 1 << 20
OVERRIDE_ROLLBACK = ("alert", "apply")  # --override-rollback


@dataclass(frozen=True)
class ManagerConfig:
    data_dir: str
    policy: str = "tailor"  # Tailor's own policy (issue 12); any registered policy is selectable
    space: str = "core"
    allowed: str = ""  # AllowedConfig, e.g. "NoBBR,NoHighICW"
    update_freq_s: float = 10.0  # period of the update cycle; 0 = only on demand (POST /v1/cycle, tests)
    holdback: float = 0.2
    retention_days: float = 7.0
    seed: int = 0
    cohort_salt: str | None = None  # 32 hex digits keying client cohorts (spec/decision.md); None: random at first start
    token: str | None = None  # operator bearer token (every endpoint); None only with insecure_dev
    edge_tokens: tuple[str, ...] = ()  # edge bearer tokens: telemetry POST and table GET only (several: rotation)
    open_reads: bool = False  # table, audit and dashboard readable without a credential
    allowed_origins: tuple[str, ...] = ()  # Origin values a POST may carry (browsers send one; edges do not)
    signing_key: str | None = None  # PEM Ed25519 private key; None -> <data>/signing.key (created)
    sites: tuple[str, ...] = ()  # SNIs the operator lists: learned per site from the first record
    site_min_records: int = 500  # other SNIs become a site of their own only after this many records
    max_sites: int = 1000  # at most this many distinct SNIs are ever keyed (operator-listed ones included)
    apply_grace_s: float = 120.0  # /healthz alerts when no active edge runs the current table after this long
    max_rules: int = 500_000  # rule budget of a published table (the schema allows 1,000,000)
    insecure_dev: bool = False
    explore_budget: float = 0.1
    min_improvement: float = 0.02
    rollback_alpha: float = 0.05
    # under an operator's override the rollback test watches the operator's table; a configuration it finds slower
    # than holdback is only reported ("alert": audit, metric, /healthz, log; the pinned table is the operator's), or
    # also has its mass moved to the default in that group and the table republished, still pinned ("apply")
    override_rollback: str = "alert"
    max_body_bytes: int = 16 * MiB
    queue_records: int = 500_000  # bounded in-memory ingest queue (records); overflow is dropped and counted
    max_wait_s: float = 60.0  # cap of the long-poll ?wait=
    ack_timeout_s: float = 10.0  # a telemetry reply waits this long for its batch to be durable, else 503
    # the HTTP server's bounds (tailor.manager.httpserver): open connections (one more is closed at accept), the
    # time a client has for a request's headers (from accept or the previous response) and for its body (408, closed),
    # and the time a client the server waits on (output above the high-water mark, or a close with output buffered)
    # has to take at least 64 KiB of it (else aborted); at most max_connections_per_address of the connections from one
    # client address (0: no such bound; behind a proxy or NAT every client has its address)
    max_connections: int = 1024
    max_connections_per_address: int = 128
    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    write_timeout_s: float = 30.0
    valid_for_s: float = 3600.0
    policy_params: tuple[tuple[str, Any], ...] = ()  # extra policy parameters, e.g. (("epsilon", 0.3),)
    # publish a learned table only when its off-policy estimate (SNIPS over the telemetry of the last ope_window_s
    # seconds) passes tailor.ope.ope_gate against the current table's: candidate.high <= current.high * (1 + tol)
    ope_gate: bool = False
    ope_window_s: float = 3600.0
    ope_tolerance: float = 0.01  # 0 stalls learning: a near-identical candidate has a slightly wider interval
    ope_max_unsupported: float = 0.1  # the share of a candidate's choices the window's logs may not show (ope_gate)
    # MaxMind-format databases (tailor.enrich) for the clients' ASN and region when a record carries none; None: unknown
    geoip_asn: str | None = None  # GeoLite2-ASN layout
    geoip_region: str | None = None  # GeoLite2-City or GeoLite2-Country layout

    def __post_init__(self):
        own = "ManagerConfig"
        check(self.update_freq_s >= 0, own, "update_freq_s", ">= 0", self.update_freq_s)
        check(0.0 <= self.holdback < 1.0, own, "holdback", "in [0, 1)", self.holdback)
        check(self.retention_days > 0, own, "retention_days", "> 0", self.retention_days)
        check(bool(self.token) or self.insecure_dev, own, "token",
              "set (environment variable TAILOR_OPERATOR_TOKEN or TAILOR_TOKEN) unless --insecure-dev", "<unset>")
        check(self.override_rollback in OVERRIDE_ROLLBACK, own, "override_rollback", f"one of {list(OVERRIDE_ROLLBACK)}",
              self.override_rollback)
        check(self.max_body_bytes >= 1024, own, "max_body_bytes", ">= 1024", self.max_body_bytes)
        check(self.queue_records >= 1, own, "queue_records", ">= 1", self.queue_records)
        check(self.max_wait_s >= 0, own, "max_wait_s", ">= 0", self.max_wait_s)
        check(self.site_min_records >= 1, own, "site_min_records", ">= 1", self.site_min_records)
        check(self.max_sites >= 0, own, "max_sites", ">= 0", self.max_sites)
        check(self.cohort_salt is None or re.fullmatch(r"[0-9a-f]{32}", self.cohort_salt) is not None, own,
              "cohort_salt", "32 lower-case hex digits", self.cohort_salt)
        check(1 <= self.max_rules <= 1_000_000, own, "max_rules", "in [1, 1000000]", self.max_rules)
        check(self.ack_timeout_s > 0, own, "ack_timeout_s", "> 0", self.ack_timeout_s)
        check(self.max_connections >= 1, own, "max_connections", ">= 1", self.max_connections)
        check(self.max_connections_per_address >= 0, own, "max_connections_per_address", ">= 0 (0: no bound)",
              self.max_connections_per_address)
        check(math.isfinite(self.header_timeout_s) and self.header_timeout_s > 0, own, "header_timeout_s",
              "a finite number > 0", self.header_timeout_s)
        check(math.isfinite(self.body_timeout_s) and self.body_timeout_s > 0, own, "body_timeout_s",
              "a finite number > 0", self.body_timeout_s)
        check(math.isfinite(self.write_timeout_s) and self.write_timeout_s > 0, own, "write_timeout_s",
              "a finite number > 0", self.write_timeout_s)
        check(self.ope_window_s > 0, own, "ope_window_s", "> 0", self.ope_window_s)
        check(self.ope_tolerance >= 0, own, "ope_tolerance", ">= 0", self.ope_tolerance)
        check(0 <= self.ope_max_unsupported < 1, own, "ope_max_unsupported", "in [0, 1)", self.ope_max_unsupported)


# -- `tailor manager --config FILE`: the flags as TOML keys
def read_config_file(path: str) -> dict[str, Any]:
    """The TOML file of ``--config``: one flat table whose keys are the flags' names without the dashes
    (``update-freq = 10``). Credentials stay in the environment (TAILOR_OPERATOR_TOKEN, TAILOR_EDGE_TOKENS)."""
    import tomllib

    owner = "tailor manager"
    try:
        with open(path, "rb") as fh:
            doc = tomllib.load(fh)
    except OSError as err:
        raise ParameterError(f"The 'config' parameter of {owner} must be a readable TOML file. "
                             f"Got {path!r} ({err.strerror}).") from None
    except tomllib.TOMLDecodeError as err:
        raise ParameterError(f"The 'config' parameter of {owner} must be valid TOML. Got {path!r} ({err}).") from None
    for key, value in doc.items():
        check(not isinstance(value, dict), f"{owner} --config {path}", key,
              "a value, not a table (the file is flat: one key per flag)", "[table]")
    return doc


def config_value(path: str, key: str, value: Any, kind: str, choices=None, convert=None) -> Any:
    """``value`` of ``key`` in the --config file checked against the flag's kind: ``flag`` (true/false),
    ``int``, ``float`` (an integer is fine), ``str`` or ``list`` (of strings, for repeatable flags);
    ``convert`` is the flag's own argparse type, applied to a string as the command line would."""
    owner = f"tailor manager --config {path}"
    rule = {"flag": "true or false", "int": "an integer", "float": "a number", "str": "a string",
            "list": "a list of strings (a repeatable flag)"}[kind]
    ok = {"flag": lambda v: isinstance(v, bool),
          "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
          "float": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
          "str": lambda v: isinstance(v, str),
          "list": lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v)}[kind]
    check(ok(value), owner, key, rule, value)
    if kind == "float":
        value = float(value)
    if convert is not None:
        try:
            value = [convert(x) for x in value] if kind == "list" else convert(value)
        except (TypeError, ValueError) as err:
            raise param_error(owner, key, f"accepted by --{key} ({err})", value) from None
    check(choices is None or value in choices, owner, key, f"one of {sorted(choices or [])}", value)
    return value
