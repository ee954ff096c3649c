"""Scenario generators: client sessions drawn from published network figures (see ``facts.py``).

``generate(name, n_sessions, seed, websites)`` builds a population of clients (``population.py``) from
the tiers of a family (``families.py``), lets sessions arrive as a Poisson process over a few hours of
scenario time, and gives each session

* a piecewise-constant condition series in ChunkSize steps: stationary segments of tens of seconds
  to minutes (Configanator App. F.1), each a lognormal perturbation around the tier's published
  point, with regime shifts at the peak-hour boundary (FCC+ peak/off-peak rows) and, for LTE, an
  occasional handover to 3G; or, for trace-driven sessions, the bandwidth of a shipped trace;
* page loads every few seconds to a minute, drawn from the client's favourite websites.

Every random draw comes from one ``numpy.random.Generator`` seeded by ``seed``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from functools import lru_cache

import numpy as np

from tailor import paths
from tailor.errors import ScenarioError, check
from tailor.scenario import facts
from tailor.scenario.families import MIXED_WEIGHTS, SEARCH_RESPONSE_PREFIX, Tier, family_tiers
from tailor.scenario.importers import MIN_BW_MBPS, load_trace
from tailor.scenario.model import ConditionSeries, Scenario, Session
from tailor.scenario.population import (Client, Spreads, build_clients, lognormal_factor, sessions_per_client,
                                        site_popularity)

BUILTIN_SCENARIOS = ("default", "mixed-global", "broadband-us", "cellular", "satellite", "developing",
                     "workshop-grid", "mobile-search", "mobile-search-day")
# Placeholder workloads for when no oracle is at hand; callers normally pass the oracle's website names.
DEFAULT_WEBSITES = ("page-light-1", "page-medium-1", "page-heavy-1", "object-10KB", "object-1MB")
TRACE_DIR = paths.DATA_DIR / "traces"


@dataclass(frozen=True)
class GeneratorSettings:
    """Knobs of the generators (defaults are ASSUMPTIONS unless a source is named)."""

    chunk_s: float = facts.CHUNK_S  # Configanator ChunkSize (§6.1)
    horizon_s: float = 4 * 3600.0  # sessions arrive over this much scenario time
    start_hour: float = 17.0  # local clock at t=0: a 4-h scenario covers off-peak and the 19-23 h peak
    sessions_per_client: float = 3.0
    clients_per_prefix: float = 4.0
    loads_per_session: float = 10.0  # mean of a geometric count (>= 1)
    think_median_s: float = 12.0  # gap between page loads: lognormal, clipped to think_range_s
    think_sigma: float = 0.8
    think_range_s: tuple[float, float] = (2.0, 90.0)
    segment_median_s: float = 60.0  # stationary segment length: lognormal (App. F.1: tens of s to minutes)
    segment_sigma: float = 0.8
    favourite_share: float = 0.7  # share of loads that go to one of the client's favourite websites
    isps_per_pool: int = 0  # ISPs per (family, access, region) pool; 0: one more per CLIENTS_PER_ISP clients, >= 2

    def __post_init__(self):
        for name in ("chunk_s", "horizon_s", "sessions_per_client", "clients_per_prefix", "loads_per_session",
                     "think_median_s", "segment_median_s"):
            value = getattr(self, name)
            check(value > 0, "GeneratorSettings", name, "> 0", value)
        check(isinstance(self.isps_per_pool, int) and self.isps_per_pool >= 0, "GeneratorSettings", "isps_per_pool",
              "an integer >= 0", self.isps_per_pool)
        check(self.loads_per_session >= 1, "GeneratorSettings", "loads_per_session", ">= 1", self.loads_per_session)
        check(0 <= self.favourite_share <= 1, "GeneratorSettings", "favourite_share", "in [0, 1]",
              self.favourite_share)


# SmartIW's mobile search service (seed 004): a search session is a burst of queries (ASSUMPTION [M]: 8 on average,
# 20 s apart at the median); the sessions arrive over two hours. Each province has three ISPs per access, as §IV-B's
# example has three in Beijing (CMNET, UNICOM, CHINANET), whatever the number of clients (a carrier, not a pool of
# 600 clients): 45 ISPs. The default count gives about 12,000 responses per 10-minute bin, so that a province x ISP
# group of average size (1/45 of the traffic, ~270 per bin) holds S_min = 100 responses in every bin, as SmartIW's
# RL requirement asks (§IV-B, §VI-A), and the smaller ones (3G in the far provinces) do not. At a quarter of that
# (the scenario before 2026-12-03) no province x ISP group met it in every bin (docs/smartiw.md).
SEARCH_SETTINGS = GeneratorSettings(horizon_s=2 * 3600.0, loads_per_session=8.0, think_median_s=20.0,
                                    think_range_s=(2.0, 120.0), favourite_share=0.0, isps_per_pool=3)
# mobile-search-day: the same service over one day, the span of SmartIW's testbed replay (§VII-A: "one day of data
# traces"), at the same volume per 10-minute bin (12 x the sessions); SmartIW's sliding arm lists move one ladder
# step per 10-minute iteration at most, so the span decides how far they can travel (docs/smartiw.md)
SEARCH_DAY_SETTINGS = replace(SEARCH_SETTINGS, horizon_s=24 * 3600.0)
DEFAULT_SESSIONS = {"mobile-search": 18000, "mobile-search-day": 216000}
SEARCH_SCENARIOS = {"mobile-search": SEARCH_SETTINGS, "mobile-search-day": SEARCH_DAY_SETTINGS}


def generate(name: str = "default", n_sessions: int | None = None, seed: int = 0, websites=None,
             settings: GeneratorSettings | None = None, tiers: tuple[tuple[str, Tier], ...] | None = None) -> Scenario:
    """A built-in scenario with ``n_sessions`` sessions (default: the scenario's own, 1,500 for most); the same
    arguments give the same scenario.

    ``mobile-search`` loads the search responses among ``websites`` (names starting ``search-``; the model
    oracle's catalog has them), each equally likely; every other scenario loads the rest, by Zipf popularity.

    ``tiers``: a population of the caller's own, (family, tier) pairs with weights summing to 1, in place of a
    built-in family's (``name`` then only names the scenario; its traces are paths, absolute or under
    ``data/traces``); how ``bench/tailor_unseen.py`` builds populations from throughput series outside the tuning
    set."""
    if tiers is not None:
        check(len(tiers) > 0 and all(isinstance(t, Tier) for _, t in tiers), "generate", "tiers",
              "a non-empty tuple of (family, Tier) pairs", tiers)
        check(abs(sum(t.weight for _, t in tiers) - 1.0) < 1e-9, "generate", "tiers", "weights summing to 1",
              sum(t.weight for _, t in tiers))
        check(isinstance(name, str) and name not in BUILTIN_SCENARIOS, "generate", "name",
              "a name that is not a built-in scenario's when tiers are given", name)
    elif name not in BUILTIN_SCENARIOS:
        raise ScenarioError(f"unknown built-in scenario {name!r}; known: {', '.join(BUILTIN_SCENARIOS)}")
    n_sessions = DEFAULT_SESSIONS.get(name, 1500) if n_sessions is None else n_sessions
    check(isinstance(n_sessions, (int, np.integer)) and n_sessions >= 1, "generate", "n_sessions",
          "an integer >= 1", n_sessions)
    search = name in SEARCH_SCENARIOS
    if websites is None and search:
        from tailor.oracle.websites import search_catalog  # the model oracle's search responses (no import cycle)
        websites = sorted(search_catalog())
    websites = list(DEFAULT_WEBSITES if websites is None else websites)
    check(len(websites) > 0 and all(isinstance(w, str) and w for w in websites), "generate", "websites",
          "a non-empty list of website names", websites)
    websites = [w for w in websites if w.startswith(SEARCH_RESPONSE_PREFIX) == search]
    if not websites:
        raise ScenarioError(f"scenario {name!r} loads {'search responses' if search else 'pages and objects'} "
                            f"(website names {'starting' if search else 'not starting'} with "
                            f"{SEARCH_RESPONSE_PREFIX!r}) and the oracle's websites have none; the model oracle's "
                            f"catalog has both")
    s = settings or SEARCH_SCENARIOS.get(name) or GeneratorSettings()
    rng = np.random.default_rng(seed)
    own = tiers is not None
    if not own:
        tiers = family_tiers("mobile-search" if search else name)  # mobile-search-day: the same population
    popularity = np.full(len(websites), 1.0 / len(websites)) if search else site_popularity(rng, len(websites))
    n_clients = max(1, min(n_sessions, round(n_sessions / s.sessions_per_client)))
    clients = build_clients(rng, tiers, n_clients, s.clients_per_prefix, popularity, isps_per_pool=s.isps_per_pool)
    owners = np.repeat(np.arange(n_clients), sessions_per_client(rng, n_clients, n_sessions))
    owners = rng.permutation(owners)
    starts = np.sort(rng.uniform(0.0, s.horizon_s, n_sessions))  # Poisson arrivals given their count
    sessions = tuple(_session(rng, f"s{i + 1:05d}", clients[c], float(round(t, 3)), websites, popularity, s)
                     for i, (c, t) in enumerate(zip(owners, starts)))
    description = f"'{name}': a population of {len(tiers)} tiers given by the caller" if own else _description(name)
    return Scenario(name, sessions, s.chunk_s, description, _provenance(name, seed, n_sessions, s, tiers, own))


def _session(rng, sid: str, client: Client, start_s: float, websites, popularity, s: GeneratorSettings) -> Session:
    offsets = _load_offsets(rng, s)
    sites = _pick_sites(rng, client, popularity, len(offsets), s.favourite_share)
    duration = max(s.chunk_s, math.ceil((offsets[-1] + 10.0) / s.chunk_s) * s.chunk_s)
    conditions = _conditions(rng, client, start_s, duration, s)
    return Session(sid, client.info, start_s, conditions, tuple((float(t), websites[i]) for t, i in zip(offsets, sites)))


def _load_offsets(rng, s: GeneratorSettings) -> np.ndarray:
    """Geometric number of loads (mean ``loads_per_session``), lognormal think times between them."""
    n = int(rng.geometric(1.0 / s.loads_per_session))
    gaps = np.clip(rng.lognormal(math.log(s.think_median_s), s.think_sigma, n - 1), *s.think_range_s)
    first = rng.uniform(0.0, 2.0)
    return np.round(first + np.concatenate([[0.0], np.cumsum(gaps)]), 3)


def _pick_sites(rng, client: Client, popularity: np.ndarray, n: int, favourite_share: float) -> np.ndarray:
    """Each load revisits a favourite (weighted by popularity) or, otherwise, any site by popularity."""
    fav_p = popularity[client.favourites] / popularity[client.favourites].sum()
    fav = client.favourites[rng.choice(len(fav_p), size=n, p=fav_p)]
    other = rng.choice(len(popularity), size=n, p=popularity)
    return np.where(rng.random(n) < favourite_share, fav, other)


def time_category(abs_s: float, start_hour: float = 17.0) -> str:
    """'peak' inside the FCC MBA peak hours (19-23 h local), else 'offpeak'; t=0 is ``start_hour``."""
    hour = (start_hour + abs_s / 3600.0) % 24.0
    return "peak" if facts.PEAK_HOURS[0] <= hour < facts.PEAK_HOURS[1] else "offpeak"


def _segment_starts(rng, start_s: float, duration: float, s: GeneratorSettings) -> np.ndarray:
    """Chunk-aligned starts of stationary segments, plus a boundary where the peak period begins or ends."""
    starts, t = [0.0], 0.0
    while True:
        t += max(s.chunk_s, round(rng.lognormal(math.log(s.segment_median_s), s.segment_sigma) / s.chunk_s) * s.chunk_s)
        if t >= duration:
            break
        starts.append(t)
    for hour in facts.PEAK_HOURS:
        offset = ((hour - s.start_hour) % 24.0) * 3600.0 - start_s
        if 0 < offset < duration:
            starts.append(math.ceil(offset / s.chunk_s) * s.chunk_s)
    return np.unique([x for x in starts if x < duration])


def _conditions(rng, client: Client, start_s: float, duration: float, s: GeneratorSettings) -> ConditionSeries:
    tier = client.tier
    seg_starts = _segment_starts(rng, start_s, duration, s)
    t = np.arange(0.0, duration, s.chunk_s)
    seg = np.searchsorted(seg_starts, t, side="right") - 1
    values = np.array([_segment_value(rng, client, start_s + a, s.start_hour) for a in seg_starts])
    bw, rtt, loss = (values[seg, k] for k in range(3))
    if tier.traces and rng.random() < tier.trace_share:
        bw = _trace_bandwidth(rng, tier, len(t), s.chunk_s)
    # Loss is capped at 20%: beyond that pages effectively do not load, and no source reports more.
    return _compress(t, np.maximum(bw, MIN_BW_MBPS), np.maximum(rtt, 1.0), np.clip(loss, 0.0, 0.2), tier.buffer_bdp)


def _segment_value(rng, client: Client, abs_s: float, start_hour: float) -> tuple[float, float, float]:
    """The tier's point for the time category (or its regime shift), perturbed for this client and segment."""
    tier: Tier = client.tier
    base = tier.peak if time_category(abs_s, start_hour) == "peak" else tier.offpeak
    if tier.shift is not None and rng.random() < tier.shift_p:
        base = tier.shift
    noise = lognormal_factor(rng, Spreads().segment, tier.spread)
    bw, rtt, loss = np.array([base.bw_mbps, base.rtt_ms, base.loss]) * client.factor * noise
    return min(bw, tier.bw_cap_mbps or np.inf), rtt, loss


def _trace_bandwidth(rng, tier: Tier, n: int, chunk_s: float) -> np.ndarray:
    """``n`` chunks of a shipped trace, starting at a random chunk and looping (as mm-link does)."""
    name = tier.traces[rng.integers(len(tier.traces))]
    bw = _load_shipped_trace(name, chunk_s)
    return bw[(rng.integers(len(bw)) + np.arange(n)) % len(bw)]


@lru_cache(maxsize=64)
def _load_shipped_trace(name: str, chunk_s: float) -> np.ndarray:
    bw = load_trace(TRACE_DIR / name, chunk_s)[1]
    bw.setflags(write=False)
    return bw


def _sig(x: np.ndarray, digits: int = 4) -> np.ndarray:
    return np.array([float(f"{v:.{digits}g}") for v in x])


def _compress(t, bw, rtt, loss, buffer_bdp: float) -> ConditionSeries:
    """Round to 4 significant digits and keep only the steps at which something changes."""
    bw, rtt, loss = _sig(bw), _sig(rtt), _sig(loss, 3)
    keep = np.ones(len(t), dtype=bool)
    keep[1:] = (np.diff(bw) != 0) | (np.diff(rtt) != 0) | (np.diff(loss) != 0)
    return ConditionSeries(t[keep], bw[keep], rtt[keep], loss[keep], buffer_bdp)


def _description(name: str) -> str:
    if name in ("default", "mixed-global"):
        mix = ", ".join(f"{k} {v:.0%}" for k, v in MIXED_WEIGHTS.items())
        return f"Mixed global client population ({mix}) from published figures"
    if name in SEARCH_SCENARIOS:
        hours = SEARCH_SCENARIOS[name].horizon_s / 3600.0
        return (f"SmartIW's mobile search service over {hours:g} hours: phones on 4G, Wi-Fi and 3G in five provinces fetching "
                f"search responses of {facts.SEARCH_MEAN_RESPONSE_BYTES // 1024} KB on average from a data centre in Beijing "
                f"({facts.SMARTIW_SOURCE})")
    return f"Built-in '{name}' client population from published figures"


def _provenance(name: str, seed: int, n_sessions: int, s: GeneratorSettings, tiers, own: bool = False) -> dict:
    sources = sorted({c.source for _, t in tiers for c in (t.offpeak, t.peak) + ((t.shift,) if t.shift else ())})
    traces = sorted({f for _, t in tiers for f in t.traces})
    trace_sources = {tf.file: tf.source for tf in facts.TRACES if tf.file in traces}
    trace_sources.update({p.trace: facts.PANTHEON_SOURCE for p in facts.PANTHEON if p.trace in traces})
    return {
        "generator": "tailor.scenario.generate", "scenario": name, "seed": int(seed), "n_sessions": int(n_sessions),
        "settings": {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(s).items()},
        "clock": {"start_hour": s.start_hour, "peak_hours": list(facts.PEAK_HOURS), "source": "FCC MBA peak period"},
        "families": ({f: round(sum(t.weight for g, t in tiers if g == f), 6) for f, _ in tiers} if own
                     else dict(MIXED_WEIGHTS) if name in ("default", "mixed-global") else {name: 1.0}),
        "sources": sources + [facts.CONFIGANATOR_SOURCE],
        "traces": ({f: f"data/traces/{f}" for f in traces} if own else
                   {f: f"data/traces/{f} ({src})" for f, src in sorted(trace_sources.items())}),
        "assumptions": "tier weights, device shares, unsourced losses and spreads: tailor/scenario/families.py, "
                       "population.py; see docs/scenarios.md",
    }
