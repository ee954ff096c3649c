"""Published network figures the scenario generators draw from; every row names its source.

Tags follow the project's published-figures sheet (docs/references/FACTS.md): [V] read in the cited source, [D] computed from a trace file.
Figures here are *facts*; the modelling choices built on them (mix weights, spreads, device shares)
live in ``families.py`` and are marked there as assumptions.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Condition:
    """One published operating point: downlink bandwidth, base RTT, random loss (fraction)."""

    bw_mbps: float
    rtt_ms: float
    loss: float
    source: str


def _pct(x: float) -> float:
    return x / 100.0


# --- Fixed broadband and cellular, FCC+ (Config-Snob, seed 002 App. A Table 4, "FCC+ Simulated
# Networks"); columns: access, tier (Mbps), time category, BW Mbps, loss %, RTT ms. [V]
FCC_PLUS_SOURCE = "Config-Snob App. A Table 4 (FCC+ Simulated Networks), seed 002"
FCC_PLUS_TABLE4 = (
    ("dsl", 10, "offpeak", 10, 0.14, 38), ("dsl", 10, "peak", 10, 0.25, 40),
    ("dsl", 25, "peak", 25, 0.21, 31), ("dsl", 25, "offpeak", 25, 0.10, 30),
    ("cable", 50, "peak", 50, 0.10, 21.5), ("cable", 50, "offpeak", 50, 0.11, 20),
    ("cable", 100, "peak", 100, 0.09, 23.5), ("cable", 100, "offpeak", 100, 0.07, 23),
    ("fiber", 100, "peak", 100, 0.04, 12.5), ("fiber", 100, "offpeak", 100, 0.04, 12.5),
    ("fiber", 500, "peak", 500, 0.01, 8), ("fiber", 500, "offpeak", 500, 0.02, 8),
    ("lte", 10, "offpeak", 10, 0.10, 70), ("lte", 10, "peak", 10, 0.15, 100),
    ("3g", 3.54, "offpeak", 3.54, 0.10, 90), ("3g", 3.54, "peak", 3.54, 0.15, 120),
)


def fcc_plus(access: str, tier: float, time: str) -> Condition:
    """The FCC+ row for (access, tier, peak|offpeak)."""
    for acc, t, tc, bw, loss_pct, rtt in FCC_PLUS_TABLE4:
        if (acc, t, tc) == (access, tier, time):
            return Condition(bw, rtt, _pct(loss_pct), FCC_PLUS_SOURCE)
    raise KeyError((access, tier, time))


# FCC MBA peak period is 7 pm - 11 pm local time; FCC+ splits rows into Peak / Offpeak by it. [M]
PEAK_HOURS = (19.0, 23.0)

# --- Satellite, Ookla Q2/Q4-2021 US speed tests (FACTS.md §1.2) [V]. Loss is not published: see families.
_OOKLA = "Ookla Q2/Q4-2021 US satellite report (ookla.com; mobileworldlive.com), FACTS.md §1.2"
SATELLITE = {
    "starlink-q2-2021": Condition(97.23, 45, 0.0, _OOKLA),
    "starlink-q4-2021": Condition(104.97, 40, 0.0, _OOKLA),
    "hughesnet-q2-2021": Condition(19.73, 724, 0.0, _OOKLA),
    "hughesnet-q4-2021": Condition(20.92, 725, 0.0, _OOKLA),
    "viasat-q2-2021": Condition(18.13, 630, 0.0, _OOKLA),
    "viasat-q4-2021": Condition(21.81, 627, 0.0, _OOKLA),
    "ses-q4-2021": Condition(2.19, 613, 0.0, _OOKLA),
}

# --- Cellular presets (FACTS.md §1.3-1.4) [V]. ATC delays are one-way per direction: RTT = down + up.
_WPT = "WebPageTest connectivity.ini.sample, FACTS.md §1.4"
_LH = "Lighthouse config/constants.js throttling presets, FACTS.md §1.4"
_ATC = "facebookarchive/augmented-traffic-control utils/profiles, FACTS.md §1.4"
CELLULAR = {
    "lte": {
        "ofcom-4g-2014": Condition(14.7, 53.1, 0.0, "Ofcom UK 2014 via smartchimps.com, FACTS.md §1.3"),
        "opensignal-us-2016": Condition(14.0, 53.1, 0.0, "OpenSignal State of LTE Nov-2016 (US); RTT from Ofcom"),
        "lighthouse-dense4g": Condition(10.24, 40, 0.0, _LH),
        "lighthouse-slow4g": Condition(1.6384, 150, 0.0, _LH),
    },
    "3g": {
        "ofcom-3g-2014": Condition(5.9, 120, 0.0, "Ofcom UK 2014 (bw); RTT = FCC+ 3G peak row"),
        "wpt-3gfast": Condition(1.6, 150, 0.0, _WPT),
        "wpt-3g": Condition(1.6, 300, 0.0, _WPT),
        "wpt-3gslow": Condition(0.78, 200, 0.0, _WPT),
        "atc-3g-average": Condition(0.78, 200, 0.0, _ATC),
        "atc-3g-good": Condition(0.85, 190, 0.0, _ATC),
        "lighthouse-regular3g": Condition(0.70, 300, 0.0, _LH),
    },
    "2g": {
        "atc-2g-developing-rural": Condition(0.020, 1300, 0.02, _ATC),
        "atc-2g-developing-urban": Condition(0.035, 1300, 0.0, _ATC),
        "atc-edge-good": Condition(0.250, 720, 0.0, _ATC),
        "atc-edge-average": Condition(0.240, 840, 0.0, _ATC),
        "atc-edge-lossy": Condition(0.240, 840, 0.01, _ATC),
        "wpt-edge": Condition(0.240, 840, 0.0, _WPT),
        "wpt-2g": Condition(0.035, 1300, 0.0, _WPT),
    },
}


@dataclass(frozen=True)
class PantheonPath:
    """A Pantheon calibrated emulator (Yan et al. ATC'18): rate, one-way delay, loss, droptail queue."""

    name: str
    region: str  # client side of the path
    access: str
    rate_mbps: float
    delay_ms: float  # mm-delay, one way: RTT = 2 * delay
    loss: float  # data-direction loss (mm-link "uplink" of the run scripts = sender side)
    queue_pkts: int
    trace: str | None = None  # bandwidth trace copied into data/traces/, if any

    @property
    def rtt_ms(self) -> float:
        return 2.0 * self.delay_ms

    @property
    def buffer_bdp(self) -> float:
        """Queue size in multiples of the path's BDP (1500-byte packets)."""
        bdp_pkts = self.rate_mbps * 1e6 * self.rtt_ms / 1e3 / (1500 * 8)
        return self.queue_pkts / bdp_pkts


PANTHEON_SOURCE = ("StanfordSNR/pantheon run_indigo_in_{cellular,wired}_emu.sh @10488e0 and .travis.yml @71c2ada, "
                   "data/traces/README.md §2, FACTS.md §1.5")
PANTHEON = (
    PantheonPath("nepal-wireless", "np", "cellular", 0.57, 28, 0.0477, 14, "0.57mbps-poisson.trace"),
    PantheonPath("mexico-cellular", "mx", "cellular", 2.64, 88, 0.0, 130, "2.64mbps-poisson.trace"),
    PantheonPath("colombia-cellular", "co", "cellular", 3.04, 130, 0.0, 426, "3.04mbps-poisson.trace"),
    PantheonPath("india-wired", "in", "wired", 100.42, 27, 0.0, 173),
    PantheonPath("china-wired", "cn", "wired", 77.72, 51, 0.0006, 94),
    PantheonPath("mexico-wired", "mx", "wired", 114.68, 45, 0.0, 450),
    PantheonPath("china-ppp0-to-aws-korea", "cn", "cellular", 6.25, 152, 0.0025, 362),
    PantheonPath("aws-brazil-to-colombia-ppp0", "co", "cellular", 5.65, 88, 0.0026, 3665),
    PantheonPath("nepal-to-aws-india", "np", "wired", 13.38, 32, 0.003, 37),  # interface not named: assumed wired
)

# --- Configtron workshop grid (seed 003 §3.1) [V]: Mahimahi shells, bw x loss x delay. mm-delay is one
# way, so the RTT is 2 * delay (our reading; the paper says only "delay").
WORKSHOP_SOURCE = "ConfigTron workshop paper §3.1 (seed 003): bw {0.3,1,5} Mbps x loss {0,1,2.5,5}% x delay {50,150,250,500} ms"
WORKSHOP_BW_MBPS = (0.3, 1.0, 5.0)
WORKSHOP_LOSS = (0.0, 0.01, 0.025, 0.05)
WORKSHOP_DELAY_MS = (50, 150, 250, 500)


@dataclass(frozen=True)
class TraceFile:
    """A bandwidth trace copied (or derived) into data/traces/, with its published mean."""

    file: str
    access: str
    mean_mbps: float  # FACTS.md §1.6 [D] (or computed from the file, see data/traces/README.md)
    source: str


_MM = "ravinet/mahimahi traces/ @ae477d4 (GPL-3+), Sprout/Saturator NSDI'13"
_NORWAY = "confiwent/Real-world-bandwidth-traces cooked_3gp/ @d28c4fd (MIT), Riiser et al. MMSys'13"
TRACES = (
    TraceFile("TMobile-LTE-short.down.1s.tsv", "lte", 16.70, _MM + "; 1-s capacity series derived from the .down file"),
    TraceFile("ATT-LTE-driving.down.1s.tsv", "lte", 5.17, _MM + "; 1-s capacity series derived from the .down file"),
    TraceFile("Verizon-EVDO-driving.down", "3g", 0.52, _MM),
    TraceFile("norway_tram_21", "3g", 0.75, _NORWAY),
    TraceFile("norway_bus_11", "3g", 1.27, _NORWAY),
    TraceFile("norway_bus_20", "3g", 1.83, _NORWAY),
)

# Configanator (seed 000) §6.1 and App. F.1: ChunkSize 5 s; testbed bottleneck buffer = 1 BDP; sessions
# are piece-wise stationary with segments "in the order of tens of seconds to minutes".
CONFIGANATOR_SOURCE = "Configanator NSDI'22 §6.1, App. F.1 (seed 000)"
CHUNK_S = 5.0
BROADBAND_BUFFER_BDP = 1.0

# SmartIW (seed 004): the mobile search service of search company B, one production data centre in Beijing.
SMARTIW_SOURCE = "SmartIW (Nie et al.) §I Table I, §VI-A, §VII-A (seed 004)"
SEARCH_MEAN_RESPONSE_BYTES = 120 * 1024  # Table I caption: "The average flow size is about 120KB"
SEARCH_SLOW_START_SHARE = 0.8027  # Table I: flows still in slow start when they end, at IW 10 (Cubic)
SMARTIW_S_MIN = 100  # §VI-A: samples per 10-minute bin a user group needs
SMARTIW_GROUPS_FOUND = 19  # §VI-C: 3 provinces + 15 province x ISP + Others, from about 1.5M client IPs
LTE_2017 = Condition(16.6, 53.1, 0.0, "OpenSignal State of LTE Nov-2017 (global 4G average download 16.6 "
                     "Mbit/s) and Ofcom 2014 (4G latency 53.1 ms average), FACTS.md §1.3")
CHINA_WIRED = Condition(77.72, 102.0, 0.0006, "Pantheon 'China wired' calibrated path (77.72 Mbit/s, 51 ms one "
                        "way, 0.06% loss), FACTS.md §1.5")
