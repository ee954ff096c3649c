"""Telemetry rows -> what policies see: Context, Decision, Outcome, in the simulator's order.

The mapping (documented in docs/manager.md, computed in SQL by :data:`FEED_SQL` so a cycle reads
only derived columns):

* completion time: ``plt_ms`` for kind ``pageload``, ``ttlb_ms`` for ``response``,
  ``duration_ms`` for ``connection`` from tailor-agent; a record without it updates the prefix archive
  only. ``connection`` records from tailor-edge (they carry ``alpn`` or ``tls_fingerprint``, which the
  agent cannot see) are archive-only too: the edge reports each of the connection's responses, and their
  ``duration_ms`` includes keep-alive idle time.
* RTT: ``handshake_rtt_ms``, else ``min_rtt_ms``, else ``srtt_ms``.
* goodput (Mbit/s): ``max_delivery_rate_Bps`` x 8 / 1e6, else ``bytes_acked`` x 8 / ``duration_ms``,
  else ``object_bytes`` x 8 / ``ttlb_ms``.
* loss: ``bytes_retrans / bytes_sent``; unknown -> the prefix's archived loss (0 for a new prefix).
* Context: client id = ``client_addr`` or the prefix's network address; website = ``sni`` ("" when
  absent); device = ``device``; ASN and region (each on its own): the record's ``asn`` (when not 0) and
  ``region``, else the manager's lookup of the client id in its MaxMind-format databases
  (:mod:`tailor.enrich`, ``--geoip-asn`` / ``--geoip-region``), else unknown (0, ""); access type "" (no
  source yet); history = the per-prefix archive *before* this record (the edge
  decided at the handshake), then the archive is updated with this record, then ``policy.observe``.
* Decision: config index of ``config_id`` in the manager's space (records with a configuration
  outside the space feed the archive only), ``probability`` (1 when absent), arm ``holdback`` for
  ``holdback: true`` records (policies ignore them, as in the simulator) and ``table`` otherwise.
  Group: the record's ``group`` when it is a group of the policy's last table; otherwise the group
  the policy itself assigns to this context (``policy.select(ctx).group``, the simulator's online
  path). Without this, a keyed learner fed only table groups never sees its own class keys and
  never publishes a rule (the simulator's ``--mode table`` has exactly that problem).

Poison guard: every derived value is made finite and clipped to a physical range before it reaches the
archive, the guardrails or a policy (:data:`BOUNDS`); a completion time that is not positive and finite is
no outcome. The schema already bounds the raw fields, but ratios of them (bytes over a tiny duration) can
still overflow.

Guardrail statistics use the *table's* group (what the edge applied): the record's ``group``, or for
holdback records without one the group the current table puts their client in, else "default". They keep
groups of the policy's or the current table and configurations of the space or of the current table (an
operator's override may serve one outside the space), so the override's rollback test has its evidence.
"""

from __future__ import annotations

import ipaddress
import math
from dataclasses import dataclass, field

from tailor.context import Context, Decision, Outcome
from tailor.manager.guardrails import GuardState
from tailor.manager.sequential import LogStats
from tailor.scenario.model import ClientInfo
from tailor.table import IPV4_MAPPED

FEED_SQL = """
SELECT seq, time, client_prefix, client_addr, "group", config_id, coalesce(probability, 1.0), coalesce(holdback, false),
       coalesce(sni, ''), coalesce(device, ''),
       CASE WHEN kind = 'pageload' THEN plt_ms WHEN kind = 'response' THEN ttlb_ms
            WHEN alpn IS NULL AND tls_fingerprint IS NULL THEN duration_ms END,
       coalesce(handshake_rtt_ms, min_rtt_ms, srtt_ms),
       coalesce(max_delivery_rate_Bps * 8 / 1e6,
                CASE WHEN duration_ms > 0 THEN bytes_acked * 8 / duration_ms / 1e3 END,
                CASE WHEN ttlb_ms > 0 THEN object_bytes * 8 / ttlb_ms / 1e3 END),
       CASE WHEN bytes_sent > 0 THEN bytes_retrans / bytes_sent END,
       coalesce(object_bytes, bytes_acked, bytes_sent, 0), asn, region, table_version
FROM telemetry WHERE seq > ? AND seq <= ? ORDER BY time, seq
"""


# (lo, hi) physical bounds of what reaches a learner; values outside are clipped (non-finite -> unknown)
BOUNDS = {"done_ms": (0.01, 8.64e7), "rtt_ms": (0.0, 600_000.0), "goodput_mbps": (0.0, 1e6), "loss": (0.0, 1.0),
          "bytes": (0, 1 << 50)}


def bounded(x, name: str):
    """``x`` clipped to ``BOUNDS[name]``; None when unknown or NaN (inf is clipped to the bound)."""
    if x is None or x != x:
        return None
    lo, hi = BOUNDS[name]
    return lo if x < lo else hi if x > hi else x


@dataclass
class FeedReport:
    rows: int = 0
    observed: int = 0  # fed to policy.observe with an outcome (treated and holdback)
    foreign: int = 0  # configuration outside the manager's space
    unknown_group: int = 0  # a group neither the published table nor the policy's has: not kept by the guardrails
    no_outcome: int = 0  # no completion time for the record's kind
    last_seq: int = 0
    treated: LogStats = field(default_factory=LogStats)
    holdback: LogStats = field(default_factory=LogStats)

    @property
    def improvement(self) -> float:
        """This cycle's 1 - treated/holdback geometric-mean completion time (nan without both)."""
        return 1.0 - self.treated.ratio_to(self.holdback)


def client_id(prefix: str, addr: str | None) -> str:
    return addr if addr else prefix.split("/", 1)[0]


def normalize_prefix(text: str) -> str | None:
    """Canonical CIDR (host bits cleared) or None when ``text`` is not an address or prefix.

    Zoned IPv6 addresses (``fe80::1%eth0``) are refused: a zone means nothing beyond one host's link,
    and a prefix spelled with one is not a valid decision-table prefix.
    """
    if "%" in text:
        return None
    try:
        net = ipaddress.ip_network(text, strict=False)
    except ValueError:
        return None
    if net.version == 6 and net.subnet_of(IPV4_MAPPED):
        # an IPv4-mapped prefix is the IPv4 prefix (edges unmap client addresses); Python spells it '::ffff:a01:200/120'
        # where Go's edges want '::ffff:10.1.2.0/120', so one forged record put a rule every edge refused into every
        # table until 2026-12-07 (found by review)
        return str(ipaddress.IPv4Network((int(net.network_address) & 0xFFFFFFFF, net.prefixlen - 96)))
    return str(net)



class SiteFilter:
    """Which SNIs a learner may key on: the operator's list, plus SNIs with ``min_records`` records.

    SNIs come from clients; keyed freely, each new one would add a group per class and a rule per
    prefix x device (a handshake with a made-up SNI would grow the table). An SNI that is not admitted
    reaches the policy as "" (no website). At most ``max_sites`` SNIs are ever admitted; the counts of
    candidates are bounded too (``MAX_CANDIDATES``; the smallest are forgotten first).
    """

    MAX_CANDIDATES = 20_000

    def __init__(self, listed=(), min_records: int = 500, max_sites: int = 1000):
        self.listed = frozenset(listed)
        self.min_records, self.max_sites = min_records, max_sites
        self.admitted: set[str] = set(list(self.listed)[:max_sites])
        self.counts: dict[str, int] = {}

    def __call__(self, sni: str) -> str:
        if not sni or sni in self.admitted:
            return sni
        if sni in self.listed and len(self.admitted) < self.max_sites:
            self.admitted.add(sni)
            return sni
        n = self.counts.get(sni, 0) + 1
        if n >= self.min_records and len(self.admitted) < self.max_sites:
            self.admitted.add(sni)
            self.counts.pop(sni, None)
            return sni
        if sni not in self.counts and len(self.counts) >= self.MAX_CANDIDATES:
            keep = sorted(self.counts.items(), key=lambda kv: kv[1], reverse=True)[: self.MAX_CANDIDATES // 2]
            self.counts = dict(keep)
        self.counts[sni] = n
        return ""


class Feeder:
    """Feeds stored telemetry rows to a policy, its archive and the guardrail statistics."""

    def __init__(self, policy, archive, guard: GuardState, sites: SiteFilter | None = None, enricher=None,
                 override_watch=None):
        self.policy, self.archive, self.guard = policy, archive, guard
        # () -> (the override's first table version, its base evidence) or None: a record decided under an earlier
        # table is added to the base as well, so it is not the override's evidence (check_override subtracts the base)
        self.override_watch = override_watch or (lambda: None)
        self.enricher = enricher  # tailor.enrich.Enricher or None
        self.sites = sites if sites is not None else SiteFilter(min_records=1, max_sites=1 << 30)
        self.policy_choices: dict[str, set[str]] = {}  # group id -> the configurations the policy's table gives it
        self.space = policy.space
        self._index = {c.id: i for i, c in enumerate(self.space.configs)}
        self._clients: dict[tuple, ClientInfo] = {}
        self._places: dict[str, tuple[int, str]] = {}  # prefix -> (asn, region) of its latest record's client

    def _client(self, prefix: str, addr: str | None, device: str, asn: int | None, region: str | None) -> ClientInfo:
        key = (prefix, addr, device, asn, region)
        info = self._clients.get(key)
        if info is None:
            if len(self._clients) > 200_000:
                self._clients.clear()
            cid = client_id(prefix, addr)
            if not (asn and region) and self.enricher is not None:  # the record's own values win, field by field
                place = self.enricher.lookup(cid)
                asn, region = asn or place.asn, region or place.region
            info = self._clients[key] = ClientInfo(cid, prefix, asn or 0, region or "", device, "")
        if len(self._places) > 200_000:
            self._places.clear()
        self._places[prefix] = (info.asn, info.region)
        return info

    def set_policy_table(self, table: dict) -> None:
        """The policy's own table (before the guardrails): its groups, and the configurations each may serve."""
        self.policy_choices = {g["id"]: {c["config"] for c in g["choices"]} for g in table["groups"]}

    def place_of(self, prefix: str) -> tuple[int, str]:
        """(asn, region) of a prefix's clients for the edge rules (:func:`tailor.table.add_edge_rules`): what its
        records resolved to (a restart starts afresh), else the databases' answer for its network address."""
        place = self._places.get(prefix)
        if place is None and self.enricher is not None:
            found = self.enricher.lookup(prefix)
            place = (found.asn, found.region)
        return place or (0, "")

    def feed(self, rows, resolver=None) -> FeedReport:
        """Fold stored telemetry rows: the archive and the guardrails row by row, the policy's outcomes as one
        batch (``Policy.observe_batch``) at the end."""
        report = FeedReport()
        outcomes: list[tuple] = []
        watch = self.override_watch()  # once per batch: an override does not begin or end during a feed
        for row in rows:
            self._feed_one(row, resolver, report, outcomes, watch)
        self.policy.observe_batch(outcomes)
        return report

    def _feed_one(self, row, resolver, report: FeedReport, outcomes: list[tuple], watch=None) -> None:
        seq, t, prefix, addr, group, cid, prob, hold, sni, device, done_ms, rtt, goodput, loss, nbytes, asn, region, \
            version = row
        report.rows += 1
        report.last_seq = max(report.last_seq, seq)
        done_ms = done_ms if done_ms is not None and 0 < done_ms < math.inf else None
        done_ms, rtt, goodput = bounded(done_ms, "done_ms"), bounded(rtt, "rtt_ms"), bounded(goodput, "goodput_mbps")
        loss, nbytes = bounded(loss, "loss"), bounded(nbytes, "bytes") or 0
        history = self.archive.get(prefix, t)
        if loss is None:
            loss = history.loss if history is not None else 0.0
        if goodput is not None and rtt is not None:
            self.archive.update(prefix, t, goodput, loss, rtt)
        if done_ms is None:
            report.no_outcome += 1
            return
        table_group = group
        if table_group is None and hold and resolver is not None:
            table_group = resolver.group_of(client_id(prefix, addr), sni, device)
        table_group = table_group or "default"
        index = self._index.get(cid)
        # the guardrails keep statistics only of groups a table has and configurations of the space or of the
        # current table: the group and the configuration id are an edge's strings, and until 2026-12-07 every new
        # one added an entry that nothing pruned (one edge token could grow the state without bound; found by
        # review). An operator's table may serve a configuration outside the manager's space; until 2026-12-07 its
        # records were "foreign", so the override's rollback test (check_override) never had evidence for it.
        if index is None and not (resolver is not None and cid in resolver.doc["configs"]):
            report.foreign += 1
        elif table_group != "default" and table_group not in self.policy_choices and not (
                resolver is not None and resolver.has_group(table_group)):
            report.unknown_group += 1
        else:
            self.guard.observe(table_group, cid, done_ms, hold)
            if watch is not None and version < watch[0]:  # decided under a table from before the override
                watch[1].observe(table_group, cid, done_ms, hold)
        (report.holdback if hold else report.treated).add(done_ms)
        if index is None:
            return
        ctx = Context(t, prefix, self._client(prefix, addr, device, asn, region), self.sites(sni), rtt or 0.0, history)
        mine = self.policy_choices.get(group)
        if mine is None:  # not a group of the policy's table: the learner's own group, without deciding
            group = self.policy.group_of(ctx)
            mine = self.policy_choices.get(group)
        # a configuration the policy's own table does not give this group was served by a guardrail (stickiness,
        # rollback, AllowedConfig): the policy learns from it but it was not the policy's decision ("served")
        arm = "holdback" if hold else "served" if mine is not None and cid not in mine else "table"
        decision = Decision(index, prob, group, arm)
        outcomes.append((ctx, decision, Outcome(done_ms, goodput or 0.0, rtt or 0.0, loss, int(nbytes))))
        report.observed += 1
