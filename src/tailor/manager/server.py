"""``tailor manager``: build the config from the command line and run uvicorn."""

from __future__ import annotations

import argparse
import logging
import os

from tailor.errors import check, param_error
from tailor.manager import logs
from tailor.manager.config import OVERRIDE_ROLLBACK, ManagerConfig, config_value, read_config_file
from tailor.policies.base import parse_policy_params  # noqa: F401 (the manager's --policy-param)

# the dests of the flags the command line gave (argparse alone cannot tell a given flag from its default)
GIVEN = "_manager_flags_given"


def add_arguments(p) -> None:
    _track_given(p)  # first: every flag added below notes that the command line gave it
    p.add_argument("--config", metavar="FILE",
                   help="TOML file whose keys are these flags' names without the dashes (update-freq = 10); "
                        "flags given on the command line win; credentials stay in the environment (deploy/manager.toml)")
    p.add_argument("--listen", default="127.0.0.1:8470", help="HOST:PORT (default 127.0.0.1:8470)")
    p.add_argument("--data", default=None, help="data directory (DuckDB store and learned state; required, "
                                                "here or as `data` in --config)")
    p.add_argument("--policy", default="tailor", help="registered policy name (default tailor)")
    p.add_argument("--space", default="core", help="named configuration space (default core)")
    p.add_argument("--allowed", default="", help="AllowedConfig, e.g. NoBBR,NoHighICW,tcp.initial_cwnd<=32")
    p.add_argument("--update-freq", type=float, default=10.0, help="seconds between update cycles (default 10)")
    p.add_argument("--holdback", type=float, default=0.2, help="share of connections kept on the default (0.2)")
    p.add_argument("--retention-days", type=float, default=7.0, help="telemetry retention in days (default 7)")
    p.add_argument("--explore-budget", type=float, default=0.1, help="max non-greedy mass per group (0.1)")
    p.add_argument("--seed", type=int, default=0, help="seed of the policy (default 0)")
    p.add_argument("--cohort-salt", default=None, metavar="HEX",
                   help="32 hex digits keying client cohorts (holdback membership, arms; spec/decision.md); "
                        "default: random at the first start, kept in --data")
    p.add_argument("--policy-param", action="append", default=[], metavar="KEY=VALUE",
                   help="a parameter of the policy, e.g. epsilon=0.3 for mab-nc (repeatable)")
    p.add_argument("--insecure-dev", action="store_true",
                   help="no credentials at all (development only; refuses a non-loopback --listen)")
    p.add_argument("--open-reads", action="store_true",
                   help="table, audit, edges report and dashboard readable without a credential")
    p.add_argument("--allowed-origin", action="append", default=[], metavar="ORIGIN",
                   help="an Origin a write may carry (browsers send one; repeatable; default none)")
    p.add_argument("--signing-key", help="PEM Ed25519 private key signing the tables (default <data>/signing.key, "
                                         "created on first start; public half in <data>/signing.pub)")
    p.add_argument("--tls-cert", help="PEM certificate chain: serve HTTPS (with --tls-key)")
    p.add_argument("--tls-key", help="PEM private key of --tls-cert")
    p.add_argument("--site", action="append", default=[], metavar="SNI",
                   help="a website (SNI) learned on its own from its first record (repeatable)")
    p.add_argument("--site-min-records", type=int, default=500,
                   help="records before an SNI not listed with --site becomes a site of its own (default 500)")
    p.add_argument("--max-sites", type=int, default=1000, help="cap on the SNIs ever keyed (default 1000)")
    p.add_argument("--max-rules", type=int, default=500_000, help="rule budget of a published table (default 500000)")
    p.add_argument("--max-connections", type=int, default=1024,
                   help="open HTTP connections at most; one more is closed at accept and counted (default 1024)")
    p.add_argument("--max-connections-per-address", type=int, default=128,
                   help="open HTTP connections from one client address at most (one more is closed at accept and "
                        "counted; 0: no bound; behind a reverse proxy or NAT every client has its address) "
                        "(default 128)")
    p.add_argument("--header-timeout", type=float, default=10.0,
                   help="seconds a client has for a request's headers, from its connection or the previous response; "
                        "later: 408, closed and counted (default 10)")
    p.add_argument("--body-timeout", type=float, default=30.0,
                   help="seconds a client has for a request's body after its headers; later: 408, closed and counted "
                        "(default 30)")
    p.add_argument("--write-timeout", type=float, default=30.0,
                   help="seconds a client the server waits on (its answers piling up unread, or a close with output "
                        "still buffered) has to take at least 64 KiB of it; later: aborted and counted (default 30)")
    p.add_argument("--ope-gate", action="store_true",
                   help="publish a learned table only when its off-policy estimate from the last hour's telemetry "
                        "(SNIPS upper 95%% confidence bound of the mean completion time) is no worse than the current "
                        "table's (1%% tolerance); otherwise keep the current table (audit entry 'ope-gate')")
    p.add_argument("--override-rollback", choices=OVERRIDE_ROLLBACK, default="alert",
                   help="under an operator's override, when the rollback test finds a configuration the pinned "
                        "table serves significantly slower than holdback since the override began: alert (audit entry 'override-regression', "
                        "tailor_override_regressions_total, /healthz, log; the pinned table is left as it is) or "
                        "apply (also move that configuration's mass to the default in the group and republish, "
                        "still pinned; audited 'rollback'); default alert")
    p.add_argument("--geoip-asn", metavar="FILE",
                   help="MaxMind-format ASN database (GeoLite2-ASN layout): the client's ASN when a record carries none")
    p.add_argument("--geoip-region", metavar="FILE",
                   help="MaxMind-format City or Country database: the client's region (CC or CC-SUB, ISO 3166) when "
                        "a record carries none")
    p.add_argument("--bus", metavar="nats://HOST:PORT[,...]",
                   help="run as one shard of a scaled-out manager on NATS JetStream (docs/bus.md): telemetry, tables "
                        "and learned state travel through the bus; no API listener (--listen is ignored; see --metrics-listen)")
    p.add_argument("--shard-id", metavar="ID", help="this shard's name, [A-Za-z0-9_-]{1,64} (required with --bus)")
    p.add_argument("--bus-replicas", type=int, default=1, metavar="R",
                   help="with --bus: copies of the telemetry stream, buckets and state store on a JetStream cluster's "
                        "servers, when this shard creates them (existing ones keep theirs; 3 on a three-node cluster: "
                        "one server may fail without losing acknowledged telemetry) (default 1)")
    p.add_argument("--metrics-listen", metavar="HOST:PORT",
                   help="with --bus: serve the shard's Prometheus metrics (GET /metrics, its counters and every "
                        "partition's manager metrics) and GET /healthz, read-only, on HOST:PORT (default: none)")
    p.add_argument("--bus-user", metavar="NAME", help="NATS user (with --bus-password-file)")
    p.add_argument("--bus-password-file", metavar="FILE", help="file holding the NATS user's password")
    p.add_argument("--bus-ca", metavar="FILE",
                   help="with --bus: PEM file of the CA certificate(s) the bus servers' certificates chain to; the "
                        "connection is then TLS and verifies the server (docs/bus.md, Security) (default: no TLS, "
                        "or the system's CAs for tls:// URLs)")
    p.add_argument("--partitions", type=int, default=None,
                   help="partition count when this shard creates the cluster document (default 6, at most 256); "
                        "a shard given a count the existing document does not say stops with an error")
    p.add_argument("--bus-ack-wait", type=float, default=30.0, help=argparse.SUPPRESS)  # tests: consumers' ack wait


def _track_given(p) -> None:
    for name in (None, "store", "store_true", "append"):
        base = p._registry_get("action", name)

        class Given(base):
            def __call__(self, parser, namespace, values, option_string=None):
                setattr(namespace, GIVEN, getattr(namespace, GIVEN, frozenset()) | {self.dest})
                super().__call__(parser, namespace, values, option_string)

        p.register("action", name, Given)


def with_config_file(args) -> argparse.Namespace:
    """``args`` with the ``--config`` file's value for every flag the command line did not give.

    Keys are the flags' long names without ``--``; an unknown key, a table, or a value of the wrong type is
    one error naming the key and the reason. Idempotent: the result has ``config`` None."""
    path = getattr(args, "config", None)
    if not path:
        return args
    doc = read_config_file(path)
    parser = argparse.ArgumentParser(add_help=False)
    add_arguments(parser)
    flags = {a.option_strings[-1][2:]: a for a in parser._actions if a.dest != "config"}
    given = getattr(args, GIVEN, frozenset())
    out = argparse.Namespace(**vars(args))
    out.config = None
    for key, value in doc.items():
        action = flags.get(key)
        if action is None:
            raise _unknown_key(path, key, flags)
        value = config_value(path, key, value, *_kind(action))
        if action.dest not in given:
            setattr(out, action.dest, value)
    return out


def _kind(action) -> tuple:
    """(kind, choices, convert) of a flag for :func:`tailor.manager.config.config_value`."""
    if action.nargs == 0:
        return "flag", None, None
    if isinstance(action, argparse._AppendAction):
        return "list", action.choices, action.type
    kind = {int: "int", float: "float"}.get(action.type, "str")
    return kind, action.choices, None if kind != "str" else action.type


def _unknown_key(path: str, key: str, flags: dict) -> Exception:
    if "token" in key.lower():
        rule = "absent: credentials come from the environment (TAILOR_OPERATOR_TOKEN, TAILOR_EDGE_TOKENS), not a file"
    elif key.replace("_", "-") in flags:
        rule = f"a flag's name without the dashes (did you mean {key.replace('_', '-')!r}?)"
    else:
        rule = f"a flag's name without the dashes, one of {', '.join(sorted(flags))}"
    return param_error(f"tailor manager --config {path}", key, rule, key)


def parse_listen(text: str, flag: str = "listen") -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    check(bool(host) and port.isdigit() and 0 < int(port) < 65536, "tailor manager", flag, "HOST:PORT", text)
    return host.strip("[]"), int(port)




def config_from_args(args, environ=os.environ) -> ManagerConfig:
    """Credentials come from the environment: TAILOR_OPERATOR_TOKEN (TAILOR_TOKEN is read when it is unset)
    and TAILOR_EDGE_TOKENS (comma-separated; several during a rotation)."""
    args = with_config_file(args)
    check(bool(args.data), "tailor manager", "data", "given (--data DIR, or data = \"DIR\" in --config)", args.data)
    operator = environ.get("TAILOR_OPERATOR_TOKEN") or environ.get("TAILOR_TOKEN") or None
    edges = tuple(t.strip() for t in environ.get("TAILOR_EDGE_TOKENS", "").split(",") if t.strip())
    check(operator is None or operator not in edges, "tailor manager", "TAILOR_EDGE_TOKENS",
          "different from the operator token", "<the operator token>")
    check((args.tls_cert is None) == (args.tls_key is None), "tailor manager", "tls-key", "given with --tls-cert",
          args.tls_key or "<unset>")
    return ManagerConfig(data_dir=args.data, policy=args.policy, space=args.space, allowed=args.allowed,
                         update_freq_s=args.update_freq, holdback=args.holdback, retention_days=args.retention_days,
                         explore_budget=args.explore_budget, seed=args.seed, token=operator, edge_tokens=edges,
                         insecure_dev=args.insecure_dev, open_reads=args.open_reads,
                         allowed_origins=tuple(args.allowed_origin), signing_key=args.signing_key,
                         sites=tuple(args.site), site_min_records=args.site_min_records, max_sites=args.max_sites,
                         max_rules=args.max_rules, cohort_salt=args.cohort_salt,
                         max_connections=args.max_connections,
                         max_connections_per_address=args.max_connections_per_address,
                         header_timeout_s=args.header_timeout,
                         body_timeout_s=args.body_timeout, write_timeout_s=args.write_timeout,
                         ope_gate=bool(getattr(args, "ope_gate", False)),
                         override_rollback=getattr(args, "override_rollback", None) or "alert",
                         geoip_asn=getattr(args, "geoip_asn", None), geoip_region=getattr(args, "geoip_region", None),
                         policy_params=parse_policy_params(getattr(args, "policy_param", []) or [], "tailor manager"))


def _is_loopback(host: str) -> bool:
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def run(args) -> int:
    import uvicorn

    from tailor.manager.api import create_app
    from tailor.manager.httpserver import uvicorn_settings

    args = with_config_file(args)
    if getattr(args, "bus", None):
        return run_bus(args)
    check(not getattr(args, "metrics_listen", None), "tailor manager", "metrics-listen",
          "given with --bus only (a manager without the bus serves GET /metrics on --listen)", args.metrics_listen)
    check(not getattr(args, "bus_ca", None), "tailor manager", "bus-ca", "given with --bus only", args.bus_ca)
    host, port = parse_listen(args.listen)
    cfg = config_from_args(args)
    check(not cfg.insecure_dev or _is_loopback(host), "tailor manager", "listen",
          "a loopback address with --insecure-dev", args.listen)
    logs.setup(logging.INFO)
    app = create_app(cfg)
    logs.log("manager.start", host=host, port=port, tls=bool(args.tls_cert), data=cfg.data_dir, policy=cfg.policy, space=cfg.space)
    tls = {"ssl_certfile": args.tls_cert, "ssl_keyfile": args.tls_key} if args.tls_cert else {}
    _check_descriptors(cfg.max_connections)
    # the same bounds as the test server's (tailor.manager.testing): connections, header and body deadlines
    uvicorn.run(app, host=host, port=port, **uvicorn_settings(cfg, app.state.manager.metrics), **tls)
    return 0


def _check_tls(cert: str, key: str) -> None:
    """The certificate chain and key load as a server's (else one error naming --tls-cert): a shard's metrics thread
    would otherwise die at start with a message about the port."""
    import ssl

    try:
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as err:
        raise param_error("tailor manager", "tls-cert", "a PEM certificate chain that --tls-key's key matches",
                          f"{cert} ({err})") from None


def _check_descriptors(max_connections: int) -> None:
    """Warn when the descriptor limit is below --max-connections plus room for the store and the thread pool: the
    cap would never be reached, accept() would fail instead (deploy/tailor-manager.service sets 65536)."""
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < max_connections + 64:
        logs.log("manager.fd_limit", logging.WARNING, detail=f"open-file limit {soft} < --max-connections "
                 f"{max_connections} + 64: raise it (ulimit -n, LimitNOFILE=) or lower --max-connections")


def run_bus(args) -> int:
    """``tailor manager --bus``: one shard (tailor.bus.shard); no API listener, so no credential is needed (the
    ``--metrics-listen`` endpoint is read-only)."""
    from tailor.bus import pki
    from tailor.bus.partition import MAX_PARTITIONS
    from tailor.bus.shard import ShardConfig, parse_servers, run_shard

    check(bool(args.shard_id), "tailor manager", "shard-id", "given with --bus", args.shard_id)
    check(args.partitions is None or 1 <= args.partitions <= MAX_PARTITIONS, "tailor manager", "partitions",
          f"in [1, {MAX_PARTITIONS}]", args.partitions)
    check(args.bus_ack_wait > 0, "tailor manager", "bus-ack-wait", "> 0", args.bus_ack_wait)
    check((args.bus_user is None) == (args.bus_password_file is None), "tailor manager", "bus-password-file",
          "given with --bus-user (and only then)", args.bus_password_file or "<unset>")
    password = None
    if args.bus_password_file:
        try:
            password = open(args.bus_password_file, encoding="utf-8").read(4096).strip()
        except OSError as err:
            raise param_error("tailor manager", "bus-password-file", "a readable file", f"{args.bus_password_file} ({err})") from None
        check(bool(password), "tailor manager", "bus-password-file", "a file holding a password", args.bus_password_file)
    bus_ca = pki.read_ca(args.bus_ca) if args.bus_ca else None
    base = config_from_args(argparse.Namespace(**dict(vars(args), insecure_dev=True)))
    logs.setup(logging.INFO)
    metrics_listen = parse_listen(args.metrics_listen, "metrics-listen") if args.metrics_listen else None
    metrics_tls = None
    if args.tls_cert:  # a shard serves HTTP only on --metrics-listen: that is what the certificate is for
        check(metrics_listen is not None, "tailor manager", "tls-cert",
              "given with --bus only together with --metrics-listen (a shard's one HTTP endpoint)", args.tls_cert)
        metrics_tls = (args.tls_cert, args.tls_key)
        _check_tls(*metrics_tls)
    cfg = ShardConfig(servers=parse_servers(args.bus), shard_id=args.shard_id, data_dir=args.data, base=base,
                      user=args.bus_user, password=password, partitions=args.partitions, ack_wait_s=args.bus_ack_wait,
                      metrics_listen=metrics_listen, metrics_tls=metrics_tls, replicas=args.bus_replicas,
                      bus_ca=bus_ca)
    logs.log("manager.start", bus=cfg.servers, shard=cfg.shard_id, data=cfg.data_dir, policy=base.policy,
             space=base.space)
    return run_shard(cfg)
