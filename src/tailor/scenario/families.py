"""Client populations ("families") built from the published figures in ``facts.py``.

A family is a weighted list of *tiers*; a tier is one kind of client line (e.g. "cable 100 Mbps" or
"Pantheon Mexico cellular"): its condition off-peak and at peak, bottleneck buffer, regions, device
mix, optional bandwidth traces and an optional regime shift (e.g. an LTE -> 3G handover).

Figures come from ``facts.py``; everything else here is a modelling ASSUMPTION, marked as such:
tier weights, device shares, loss where no source gives one, and the perturbation spreads.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from tailor.scenario import facts
from tailor.scenario.facts import Condition


@dataclass(frozen=True)
class Tier:
    name: str
    access: str  # ClientInfo.access
    weight: float  # relative share of clients within the family
    offpeak: Condition
    peak: Condition
    buffer_bdp: float
    regions: tuple[str, ...]
    devices: tuple[tuple[str, float], ...]  # (device class, share)
    traces: tuple[str, ...] = ()  # data/traces files giving the bandwidth of trace-driven sessions
    trace_share: float = 0.0  # share of this tier's sessions that are trace-driven
    shift: Condition | None = None  # regime-shift condition (handover), entered per segment w.p. shift_p
    shift_p: float = 0.0
    spread: float = 1.0  # scales the perturbation sigmas of generate.py (0 = exact published point)
    own_isps: bool = False  # True: the tier's clients get ISPs (ASNs, prefixes) of their own
    bw_cap_mbps: float | None = None  # a subscribed speed tier caps the perturbed bandwidth


# ASSUMPTION [M]: device shares. Home broadband: mostly desktops plus phones on Wi-Fi; mobile in US/EU
# about 60/40 Android/iOS; developing regions overwhelmingly Android (StatCounter-style figures, unverified).
DEVICES_HOME = (("desktop", 0.55), ("android", 0.25), ("ios", 0.20))
DEVICES_MOBILE = (("android", 0.60), ("ios", 0.40))
DEVICES_DEVELOPING_MOBILE = (("android", 0.85), ("ios", 0.05), ("desktop", 0.10))
DEVICES_DEVELOPING_WIRED = (("desktop", 0.50), ("android", 0.45), ("ios", 0.05))

US_REGIONS = ("us-east", "us-central", "us-south", "us-west")
MOBILE_REGIONS = ("us-east", "us-west", "eu-west")


def _pantheon_cellular_buffer() -> float:
    """Median queue/BDP of Pantheon's calibrated cellular paths (Nepal 5.3, Mexico 3.4, Colombia 6.5)."""
    paths = [p for p in facts.PANTHEON if p.access == "cellular" and p.trace]
    return round(float(np.median([p.buffer_bdp for p in paths])), 2)


CELLULAR_BUFFER_BDP = _pantheon_cellular_buffer()


def _with_loss(c: Condition, loss: float) -> Condition:
    return replace(c, loss=loss, source=c.source + f"; loss {loss:.2%} assumed (see families.py)")


# ASSUMPTION [M]: FCC MBA reports find most ISPs deliver about 100-120% of the advertised speed.
TIER_HEADROOM = 1.2


def broadband_us() -> tuple[Tier, ...]:
    """FCC+ DSL/cable/fiber tiers. ASSUMPTION [M]: technology shares cable 60%, DSL 20%, fiber 20%."""
    shares = {("dsl", 10): 0.10, ("dsl", 25): 0.10, ("cable", 50): 0.30, ("cable", 100): 0.30,
              ("fiber", 100): 0.12, ("fiber", 500): 0.08}
    return tuple(
        Tier(f"{acc}-{tier}", acc, w, facts.fcc_plus(acc, tier, "offpeak"), facts.fcc_plus(acc, tier, "peak"),
             facts.BROADBAND_BUFFER_BDP, US_REGIONS, DEVICES_HOME, bw_cap_mbps=TIER_HEADROOM * tier)
        for (acc, tier), w in shares.items())


def _cell_tier(name: str, access: str, w: float, c: Condition, **kw) -> Tier:
    """A cellular preset: presets carry no loss, so off-peak/peak loss come from the FCC+ row of the access."""
    if access == "2g":
        off, peak = c, c  # ATC profiles state their own loss (0 / 1% / 2%)
    else:
        tier = 10 if access == "lte" else 3.54
        off = _with_loss(c, facts.fcc_plus(access, tier, "offpeak").loss)
        peak = _with_loss(c, facts.fcc_plus(access, tier, "peak").loss)
    return Tier(name, access, w, off, peak, CELLULAR_BUFFER_BDP, MOBILE_REGIONS, DEVICES_MOBILE, **kw)


def cellular() -> tuple[Tier, ...]:
    """4G 60% / 3G 28% / 2G 12% of clients (ASSUMPTION: US/EU-weighted mix with a 2G tail).

    30% of LTE and 3G sessions take their bandwidth from a shipped trace; LTE segments hand over to
    the FCC+ 3G peak condition with probability 0.08 (ASSUMPTION).
    """
    lte_traces = tuple(t.file for t in facts.TRACES if t.access == "lte")
    g3_traces = tuple(t.file for t in facts.TRACES if t.access == "3g")
    handover = facts.fcc_plus("3g", 3.54, "peak")
    lte_kw = dict(traces=lte_traces, trace_share=0.3, shift=handover, shift_p=0.08)
    tiers = [Tier("lte-fccplus", "lte", 0.25, facts.fcc_plus("lte", 10, "offpeak"), facts.fcc_plus("lte", 10, "peak"),
                  CELLULAR_BUFFER_BDP, MOBILE_REGIONS, DEVICES_MOBILE, **lte_kw),
             Tier("3g-fccplus", "3g", 0.10, facts.fcc_plus("3g", 3.54, "offpeak"), facts.fcc_plus("3g", 3.54, "peak"),
                  CELLULAR_BUFFER_BDP, MOBILE_REGIONS, DEVICES_MOBILE, traces=g3_traces, trace_share=0.3)]
    for name, c in facts.CELLULAR["lte"].items():
        tiers.append(_cell_tier(f"lte-{name}", "lte", 0.35 / 4, c, **lte_kw))
    for name, c in facts.CELLULAR["3g"].items():
        tiers.append(_cell_tier(f"3g-{name}", "3g", 0.18 / 7, c, traces=g3_traces, trace_share=0.3))
    for name, c in facts.CELLULAR["2g"].items():
        tiers.append(_cell_tier(f"2g-{name}", "2g", 0.12 / 7, c))
    return tuple(tiers)


def satellite() -> tuple[Tier, ...]:
    """GEO and LEO providers (Ookla 2021). ASSUMPTIONS: loss 0.2% (GEO) / 0.5% (LEO), no source gives
    one; buffer 1 BDP; provider shares Starlink 40%, Viasat 30%, HughesNet 25%, SES 5%."""
    share = {"starlink": 0.40, "viasat": 0.30, "hughesnet": 0.25, "ses": 0.05}
    tiers = []
    for name, c in facts.SATELLITE.items():
        provider = name.split("-")[0]
        leo = provider == "starlink"
        access = "leo-satellite" if leo else "geo-satellite"
        c = _with_loss(c, 0.005 if leo else 0.002)
        n_quarters = sum(k.startswith(provider) for k in facts.SATELLITE)
        tiers.append(Tier(name, access, share[provider] / n_quarters, c, c, 1.0, ("us-rural",), DEVICES_HOME))
    return tuple(tiers)


def _grid_access(bw: float) -> str:
    """Label a grid point by its bandwidth: Edge-class <= 0.3, 3G-class <= 1 Mbps (FACTS §1.4 presets)."""
    return "2g" if bw <= 0.3 else "3g" if bw <= 1.0 else "lte"


def workshop_grid(spread: float = 0.0) -> tuple[Tier, ...]:
    """One tier per ConfigTron grid point (48), equal weights, exact values unless ``spread`` > 0."""
    tiers = []
    for bw in facts.WORKSHOP_BW_MBPS:
        for loss in facts.WORKSHOP_LOSS:
            for delay in facts.WORKSHOP_DELAY_MS:
                c = Condition(bw, 2.0 * delay, loss, facts.WORKSHOP_SOURCE)
                name = f"grid-{bw:g}mbps-{loss * 100:g}pct-{delay}ms"
                tiers.append(Tier(name, _grid_access(bw), 1.0, c, c, facts.BROADBAND_BUFFER_BDP, ("grid",),
                                  DEVICES_DEVELOPING_MOBILE, spread=spread, own_isps=spread == 0))
    return tuple(tiers)


def developing() -> tuple[Tier, ...]:
    """Pantheon calibrated paths 55%, ATC 2G developing 15%, perturbed workshop grid 30% (ASSUMPTION)."""
    tiers = []
    for p in facts.PANTHEON:
        c = Condition(p.rate_mbps, p.rtt_ms, p.loss, facts.PANTHEON_SOURCE)
        devices = DEVICES_DEVELOPING_MOBILE if p.access == "cellular" else DEVICES_DEVELOPING_WIRED
        tiers.append(Tier(f"pantheon-{p.name}", p.access, 0.55 / len(facts.PANTHEON), c, c, round(p.buffer_bdp, 2),
                          (p.region,), devices, traces=(p.trace,) if p.trace else (), trace_share=1.0 if p.trace else 0))
    for where in ("rural", "urban"):
        c = facts.CELLULAR["2g"][f"atc-2g-developing-{where}"]
        tiers.append(Tier(f"atc-2g-developing-{where}", "2g", 0.075, c, c, CELLULAR_BUFFER_BDP,
                          (f"dev-{where}",), DEVICES_DEVELOPING_MOBILE))
    grid = workshop_grid(spread=1.0)
    tiers += [replace(t, weight=0.30 / len(grid)) for t in grid]
    return tuple(tiers)



# The mobile search service of SmartIW (seed 004): one data centre in Beijing serving search responses to phones
# across provinces. ASSUMPTIONS [M]: the provinces' shares of the requests routed to Beijing (mostly northern; the
# paper's misrouted far provinces, e.g. Guangdong and Xinjiang, a smaller share) and the RTT a province adds to the
# access RTT (great-circle fibre distance to Beijing at 5 us/km, doubled, times 1.5 for routing: Guangzhou ~1,900 km,
# Urumqi ~2,400 km).
SEARCH_PROVINCES = {"beijing": (0.35, 0.0), "hebei": (0.20, 4.0), "shandong": (0.20, 8.0),
                    "guangdong": (0.15, 28.0), "xinjiang": (0.10, 36.0)}
SEARCH_RESPONSE_PREFIX = "search-"  # websites that are search responses (oracle/websites.py search_catalog)
# ASSUMPTION [M]: access shares of a 2017 mobile search service (4G most, phones on home Wi-Fi, a 3G tail) and the
# access RTT of home broadband to a data centre in the same country (20 ms; Pantheon's 102 ms "China wired" path
# ends abroad) and the random loss of 4G (0.3%) and 3G (0.5%); Wi-Fi's is Pantheon's. With them IW 10 leaves 79.6% of the
# flows in slow start when they end (Table I: 80.27%; tests/test_mobile_search.py recomputes it with the model's mechanics).
SEARCH_ACCESS = {"lte": (0.65, facts.LTE_2017, 0.003), "wifi": (0.25, facts.CHINA_WIRED, 0.0006),
                 "3g": (0.10, facts.CELLULAR["3g"]["wpt-3gfast"], 0.005)}
SEARCH_WIFI_RTT_MS = 20.0


def mobile_search() -> tuple[Tier, ...]:
    """SmartIW's mobile search clients: one tier per (access, province); the province adds RTT to the access's.

    Peak and off-peak are the same point (the paper gives no diurnal figure for the network); phones on Wi-Fi
    sit behind a home broadband line (1 BDP of buffer), cellular paths behind Pantheon's cellular buffers.
    """
    tiers = []
    for access, (aw, c, loss) in SEARCH_ACCESS.items():
        base_rtt = SEARCH_WIFI_RTT_MS if access == "wifi" else c.rtt_ms
        buffer = facts.BROADBAND_BUFFER_BDP if access == "wifi" else CELLULAR_BUFFER_BDP
        for province, (pw, extra) in SEARCH_PROVINCES.items():
            point = Condition(c.bw_mbps, base_rtt + extra, loss,
                              f"{c.source}; +{extra:g} ms to Beijing, loss {loss:.2%} (families.py, {facts.SMARTIW_SOURCE})")
            tiers.append(Tier(f"{access}-{province}", access, aw * pw, point, point, buffer, (province,),
                              DEVICES_MOBILE))
    return tuple(tiers)

# ASSUMPTION: the default mix. Configanator's GlobalCDN data come from two North-American PoPs and one
# European PoP, so fixed broadband and 4G dominate; roughly half of web page views are mobile [M]; about 2%
# of US households use satellite [M]; the developing-region and grid tail is kept at 20% so the low-bandwidth,
# high-RTT/loss conditions where Configanator saw its largest gains (14-67% vs 10-25%, §6.2) are well represented.
MIXED_WEIGHTS = {"broadband-us": 0.40, "cellular": 0.35, "developing": 0.15, "satellite": 0.04, "workshop-grid": 0.06}

FAMILIES = {
    "broadband-us": broadband_us,
    "cellular": cellular,
    "satellite": satellite,
    "developing": developing,
    "workshop-grid": workshop_grid,
    "mobile-search": mobile_search,
}


def family_tiers(name: str) -> tuple[tuple[str, Tier], ...]:
    """(family, tier) pairs with weights normalized to 1 over the whole scenario."""
    weights = MIXED_WEIGHTS if name in ("default", "mixed-global") else {name: 1.0}
    out = []
    for fam, fw in weights.items():
        # In a mix the grid stands for real clients near those points, so it is perturbed like the rest.
        tiers = workshop_grid(spread=1.0) if fam == "workshop-grid" and len(weights) > 1 else FAMILIES[fam]()
        total = sum(t.weight for t in tiers)
        out += [(fam, replace(t, weight=fw * t.weight / total)) for t in tiers]
    return tuple(out)
