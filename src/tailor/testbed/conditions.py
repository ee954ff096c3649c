"""Network conditions the testbed emulates, each citing where its figures come from.

A condition is a fixed-rate path: down/up rate, RTT (emulated as one-way delay RTT/2 in each direction),
i.i.d. loss on data and ACKs alike (the same fraction each way), and a drop-tail queue of one BDP with a
floor, sized in packets because the emulator's limit is per packet (see ``queue_packets``).

>>> c = CATALOG["4g-peak"]
>>> c.delay_ms, c.queue_packets()
(50.0, 84)
>>> CATALOG["2g-edge"].queue_packets()
16
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from tailor.errors import check

MTU_BYTES = 1500
QUEUE_FLOOR_PACKETS = 16  # a tiny-BDP link still buffers a few packets (model: 8 segments; 16 ~ one IW 10 + ACK slack)


@dataclass(frozen=True)
class Condition:
    """One emulated path. ``source`` names the FACTS.md / seed row it reproduces."""

    name: str
    down_mbps: float
    up_mbps: float
    rtt_ms: float
    loss: float
    family: str
    source: str
    buffer_bdp: float = 1.0

    def __post_init__(self):
        rates = (self.down_mbps, self.up_mbps)
        check(min(rates) > 0, "Condition", "down_mbps/up_mbps", "> 0", rates)
        check(0 < self.rtt_ms <= 4000, "Condition", "rtt_ms", "in (0, 4000]", self.rtt_ms)
        check(0 <= self.loss < 0.2, "Condition", "loss", "in [0, 0.2)", self.loss)

    @property
    def delay_ms(self) -> float:
        return self.rtt_ms / 2.0

    def queue_packets(self) -> int:
        """Drop-tail limit: ``buffer_bdp`` x BDP of the down link in MTU packets, at least the floor."""
        bdp = self.down_mbps * 1e6 / 8 * self.rtt_ms / 1000 / MTU_BYTES
        return max(QUEUE_FLOOR_PACKETS, int(math.ceil(self.buffer_bdp * bdp)))

    def to_dict(self) -> dict:
        return asdict(self)


def _c(name, down, up, rtt, loss, family, source) -> Condition:
    return Condition(name, float(down), float(up), float(rtt), float(loss), family, source)


_FCC = "Config-Snob App. A Table 4 (FCC+ rows), seed 002"
_WPT = "FACTS.md 1.4 WebPageTest connectivity presets"
_LH = "FACTS.md 1.4 Lighthouse throttling constants"
_ATC = "FACTS.md 1.4 Facebook ATC profiles"
_WS = "Configtron workshop grid (bw {0.3,1,5} x loss {0,1,2.5,5}% x delay), seed 003 s3.1"
_SAT = "FACTS.md 1.2 Ookla Q2/Q4-2021 satellite rows"

# Rates are capped at 100 Mbit/s: the emulator costs ~0.6 core at 100 Mbit on this 2-core VM (README), so the
# FCC fiber-500 rows are not emulated (the oracle answers them from the 100 Mbit rows, flagged as extrapolation).
CONDITIONS: tuple[Condition, ...] = (
    _c("dsl10-offpeak", 10, 1, 38, 0.0014, "fcc", _FCC),
    _c("dsl10-peak", 10, 1, 40, 0.0025, "fcc", _FCC),
    _c("dsl25-peak", 25, 3, 31, 0.0021, "fcc", _FCC),
    _c("cable50-peak", 50, 5, 21.5, 0.001, "fcc", _FCC),
    _c("cable100-offpeak", 100, 10, 23, 0.0007, "fcc", _FCC),
    _c("fiber100", 100, 100, 12.5, 0.0004, "fcc", _FCC),
    _c("4g-offpeak", 10, 5, 70, 0.001, "fcc-cellular", _FCC),
    _c("4g-peak", 10, 5, 100, 0.0015, "fcc-cellular", _FCC),
    _c("3g-offpeak", 3.54, 1, 90, 0.001, "fcc-cellular", _FCC),
    _c("3g-peak", 3.54, 1, 120, 0.0015, "fcc-cellular", _FCC),
    _c("wpt-cable", 5, 1, 28, 0.0, "broadband", _WPT),
    _c("wpt-dsl", 1.5, 0.384, 50, 0.0, "broadband", _WPT),
    _c("dense-4g", 10, 5, 40, 0.0, "cellular", _LH + " (desktopDense4G)"),
    _c("slow-4g", 1.6, 0.75, 150, 0.0, "cellular", _LH + " (mobileSlow4G)"),
    _c("3g-regular", 0.7, 0.7, 300, 0.0, "cellular", _LH + " (mobileRegular3G)"),
    _c("3g-good", 0.85, 0.42, 100, 0.0, "cellular", _ATC + " (3G Good)"),
    _c("2g-edge", 0.25, 0.2, 720, 0.0, "cellular-2g", _ATC + " (Edge Good 350+370 ms)"),
    _c("2g-edge-lossy", 0.24, 0.2, 880, 0.01, "cellular-2g", _ATC + " (Edge Lossy 440+440 ms, 1%)"),
    _c("dev-5m-1pct", 5, 1, 100, 0.01, "developing", _WS),
    _c("dev-5m-5pct", 5, 1, 100, 0.05, "developing", _WS),
    _c("dev-1m-2.5pct", 1, 0.5, 300, 0.025, "developing", _WS),
    _c("dev-0.3m-1pct", 0.3, 0.3, 500, 0.01, "developing", _WS),
    _c("geo-hughesnet", 20, 2.43, 724, 0.0, "satellite", _SAT + " (HughesNet)"),
    _c("geo-ses", 2.19, 1, 613, 0.0, "satellite", _SAT + " (SES)"),
    _c("leo-starlink", 50, 12, 40, 0.0, "satellite", _SAT + " (Starlink, rate capped at 50)"),
)

CATALOG: dict[str, Condition] = {c.name: c for c in CONDITIONS}


def condition_from_dict(d: dict) -> Condition:
    """Rebuild a condition stored in a plan or dataset (unknown keys are an error, not ignored)."""
    return Condition(**d)
