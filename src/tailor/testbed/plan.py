"""Measurement plans: which (condition, workload, configuration) points to measure, and how often.

A plan is a JSON file. A *job* is one emulator run for one (condition, transport configuration): transport
knobs are per route, so they are fixed for the life of a link, while the HTTP version and the object are
chosen per fetch. Inside a job fetches are interleaved (repetition-major) so that slow drift of the shared
machine's load spreads over every point instead of biasing one. Every fetch has a stable *key*; a resumed
run skips keys already stored.

>>> plan = Plan.from_dict({"conditions": ["wpt-cable"], "sizes": [10240], "reps": 2,
...                        "configs": [{"cc": "cubic", "iw": 10}], "http": ["1.1", "2"]})
>>> [len(j.fetches) for j in plan.jobs()]
[4]
>>> plan.jobs()[0].fetches[0].key
'wpt-cable|cubic|iw10|rto200|h1.1|10240|r0'
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from pathlib import Path

from tailor.errors import ParameterError, check
from tailor.testbed.conditions import CATALOG, Condition, condition_from_dict

CCS = ("cubic", "bbr", "reno")  # built into this kernel (spec/knobs.json tcp.congestion_control)
HTTP_VERSIONS = ("1.1", "2")
KB = 1024


@dataclass(frozen=True)
class Transport:
    """Per-route transport knobs of one job (``ip route ... congctl/initcwnd/rto_min``), and the server
    namespace's ``net.ipv4.tcp_slow_start_after_idle`` (``ssai``; the kernel's default 1 restarts a congestion
    control without its own ``cong_control`` hook, CUBIC and Reno but not BBR, from the initial window after an
    idle time longer than the RTO), and its ``net.ipv4.tcp_notsent_lowat`` (``notsent_lowat`` bytes; 0 = the
    kernel's default, no limit on the unsent bytes a socket queues)."""

    cc: str = "cubic"
    iw: int = 10
    rto_min_ms: int = 200
    ssai: int = 1
    notsent_lowat: int = 0

    def __post_init__(self):
        check(self.cc in CCS, "Transport", "cc", f"one of {CCS}", self.cc)
        check(1 <= self.iw <= 256, "Transport", "iw", "in [1, 256]", self.iw)
        check(8 <= self.rto_min_ms <= 200, "Transport", "rto_min_ms", "in [8, 200]", self.rto_min_ms)
        check(self.ssai in (0, 1), "Transport", "ssai", "0 or 1", self.ssai)
        check(self.notsent_lowat == 0 or 1024 <= self.notsent_lowat <= 1 << 24, "Transport", "notsent_lowat",
              "0 or in [1024, 16777216]", self.notsent_lowat)

    def route_opts(self) -> str:
        opts = f"initcwnd {self.iw} congctl {self.cc}"
        return opts + (f" rto_min {self.rto_min_ms}ms" if self.rto_min_ms != 200 else "")

    def tag(self) -> str:
        return (f"{self.cc}|iw{self.iw}|rto{self.rto_min_ms}" + ("" if self.ssai else "|ssai0")
                + (f"|nsl{self.notsent_lowat}" if self.notsent_lowat else ""))

    def server_sysctl(self) -> str:
        """The server namespace's sysctls: no TCP metrics caching; slow start after idle and the unsent-bytes limit
        where the job sets them."""
        out = "sysctl -qw net.ipv4.tcp_no_metrics_save=1"
        out += "" if self.ssai else " && sysctl -qw net.ipv4.tcp_slow_start_after_idle=0"
        return out + (f" && sysctl -qw net.ipv4.tcp_notsent_lowat={self.notsent_lowat}" if self.notsent_lowat else "")


@dataclass(frozen=True)
class Fetch:
    """One curl fetch inside a job."""

    key: str
    http: str
    size: int
    rep: int
    page: str = ""  # a catalog page loaded by Chromium (``size`` = its bytes); "" = a single object fetched by curl


@dataclass(frozen=True)
class Job:
    condition: Condition
    transport: Transport
    fetches: tuple[Fetch, ...]

    @property
    def name(self) -> str:
        return f"{self.condition.name}|{self.transport.tag()}"

    @property
    def is_pages(self) -> bool:
        return bool(self.fetches) and bool(self.fetches[0].page)

    def estimate_s(self) -> float:
        return sum(estimate_load_s(self.condition, f) for f in self.fetches) + (4.0 if self.is_pages else 1.5)


def estimate_load_s(c: Condition, f: Fetch) -> float:
    return estimate_page_s(c, f.page, f.size) if f.page else estimate_fetch_s(c, f.size)


def estimate_page_s(c: Condition, page: str, size: int) -> float:
    """Rough page-load wall time: handshakes + 3 discovery levels of RTTs + serialization, plus browser work."""
    return (8 * c.rtt_ms / 1000 + size * 8 / (c.down_mbps * 1e6) * 1.15) * (1 + 30 * c.loss) + 0.5


def estimate_fetch_s(c: Condition, size: int) -> float:
    """Rough wall time of one fetch: 4 RTT (TCP, TLS, request, slow start) + serialization, inflated by loss."""
    return (4 * c.rtt_ms / 1000 + size * 8 / (c.down_mbps * 1e6) * 1.05) * (1 + 30 * c.loss) + 0.05


@dataclass
class Plan:
    conditions: list[Condition]
    sizes: list[int]
    transports: list[Transport]
    http: list[str] = field(default_factory=lambda: list(HTTP_VERSIONS))
    reps: int = 3
    max_fetch_s: float = 60.0  # skip a (condition, size) whose estimated fetch is longer (recorded as missing)
    seed: int = 1
    pages: list[str] = field(default_factory=list)  # catalog pages for Chromium; when set, ``sizes`` is unused

    @classmethod
    def from_dict(cls, d: dict) -> Plan:
        conds = [CATALOG[c] if isinstance(c, str) and c in CATALOG else _cond(c) for c in d["conditions"]]
        transports = [Transport(c.get("cc", "cubic"), int(c.get("iw", 10)), int(c.get("rto_min_ms", 200)),
                                int(c.get("slow_start_after_idle", 1)), int(c.get("notsent_lowat", 0)))
                      for c in d["configs"]]
        plan = cls(conds, [int(s) for s in d.get("sizes", [])], transports,
                   [str(h) for h in d.get("http", HTTP_VERSIONS)], int(d.get("reps", 3)),
                   float(d.get("max_fetch_s", 60.0)), int(d.get("seed", 1)), [str(p) for p in d.get("pages", [])])
        plan.validate()
        return plan

    @classmethod
    def load(cls, path: str | Path) -> Plan:
        try:
            return cls.from_dict(json.loads(Path(path).read_text()))
        except (OSError, json.JSONDecodeError, KeyError, TypeError) as err:
            raise ParameterError(f"The 'plan' parameter of testbed measure must be a readable plan JSON file. "
                                 f"Got {str(path)!r} ({type(err).__name__}: {err}).") from None

    def validate(self) -> None:
        check(len(self.conditions) > 0, "Plan", "conditions", "non-empty", self.conditions)
        if self.pages:
            from tailor.testbed.pages import catalog_pages

            catalog_pages(self.pages)  # unknown page names are an error naming them
        else:
            sizes_ok = bool(self.sizes) and all(0 < s <= 64 * 1024 * KB for s in self.sizes)
            check(sizes_ok, "Plan", "sizes", "non-empty, each in (0, 64 MB]", self.sizes)
        http_ok = bool(self.http) and set(self.http) <= set(HTTP_VERSIONS)
        check(http_ok, "Plan", "http", f"a non-empty subset of {HTTP_VERSIONS}", self.http)
        check(1 <= self.reps <= 50, "Plan", "reps", "in [1, 50]", self.reps)

    def sizes_for(self, c: Condition) -> list[int]:
        return [s for s in self.sizes if estimate_fetch_s(c, s) <= self.max_fetch_s]

    def page_sizes(self) -> dict[str, int]:
        from tailor.testbed.pages import catalog_pages

        return {n: s.total_bytes for n, s in catalog_pages(self.pages).items()}

    def pages_for(self, c: Condition) -> list[str]:
        return [p for p, size in self.page_sizes().items() if estimate_page_s(c, p, size) <= self.max_fetch_s]

    def jobs(self) -> list[Job]:
        out = []
        sizes = self.page_sizes() if self.pages else {}
        for cond, tr in itertools.product(self.conditions, self.transports):
            if self.pages:
                fetches = tuple(Fetch(fetch_key(cond.name, tr, h, p, r), h, sizes[p], r, p)
                                for r in range(self.reps) for p in self.pages_for(cond) for h in self.http)
            else:
                fetches = tuple(Fetch(fetch_key(cond.name, tr, h, s, r), h, s, r)
                                for r in range(self.reps) for s in self.sizes_for(cond) for h in self.http)
            if fetches:
                out.append(Job(cond, tr, fetches))
        return out

    def to_dict(self) -> dict:
        return {"conditions": [c.to_dict() for c in self.conditions], "sizes": self.sizes,
                "configs": [{"cc": t.cc, "iw": t.iw, "rto_min_ms": t.rto_min_ms,
                             **({} if t.ssai else {"slow_start_after_idle": 0}),
                             **({"notsent_lowat": t.notsent_lowat} if t.notsent_lowat else {})} for t in self.transports],
                "http": self.http, "reps": self.reps, "max_fetch_s": self.max_fetch_s, "seed": self.seed,
                **({"pages": self.pages} if self.pages else {})}


def fetch_key(cond: str, tr: Transport, http: str, size: int | str, rep: int) -> str:
    return f"{cond}|{tr.tag()}|h{http}|{size}|r{rep}"


def _cond(d) -> Condition:
    if isinstance(d, str):
        raise ParameterError(f"The 'conditions' parameter of Plan must name catalog conditions {sorted(CATALOG)} "
                             f"or be objects. Got {d!r}.")
    return condition_from_dict(d)
