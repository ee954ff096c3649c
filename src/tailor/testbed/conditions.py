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
import os
from dataclasses import asdict, dataclass

from tailor import paths
from tailor.errors import check

MTU_BYTES = 1500
TRACES_DIR = str(paths.DATA_DIR / "traces")  # mahimahi / pantheon traces; data/traces/README.md gives every file's origin
_OPTIONAL = ("up_loss", "queue", "down_trace", "up_trace")
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
    up_loss: float | None = None  # uplink (client -> server) loss when it differs from ``loss`` (Pantheon rows)
    queue: int | None = None  # explicit drop-tail limit in packets (Pantheon's calibrated queues), else 1 BDP
    down_trace: str | None = None  # mahimahi trace file (relative to TRACES_DIR) replacing the fixed down rate
    up_trace: str | None = None  # same for the up direction

    def __post_init__(self):
        rates = (self.down_mbps, self.up_mbps)
        check(min(rates) > 0, "Condition", "down_mbps/up_mbps", "> 0", rates)
        check(0 < self.rtt_ms <= 4000, "Condition", "rtt_ms", "in (0, 4000]", self.rtt_ms)
        check(0 <= self.loss < 0.2, "Condition", "loss", "in [0, 0.2)", self.loss)
        if self.up_loss is not None:
            check(0 <= self.up_loss < 0.2, "Condition", "up_loss", "in [0, 0.2)", self.up_loss)
        if self.queue is not None:
            check(4 <= self.queue <= 100_000, "Condition", "queue", "in [4, 100000] packets", self.queue)
        for fld in ("down_trace", "up_trace"):
            name = getattr(self, fld)
            check(name is None or (isinstance(name, str) and ".." not in name and not name.startswith("/")),
                  "Condition", fld, f"a trace file name relative to {TRACES_DIR}", name)

    @property
    def uplink_loss(self) -> float:
        return self.loss if self.up_loss is None else self.up_loss

    def trace_path(self, direction: str) -> str | None:
        """Absolute path of the down/up trace (``$TAILOR_TRACES`` overrides the repository's data/traces)."""
        name = self.down_trace if direction == "down" else self.up_trace
        return None if name is None else os.path.join(os.environ.get("TAILOR_TRACES", TRACES_DIR), name)

    @property
    def delay_ms(self) -> float:
        return self.rtt_ms / 2.0

    def queue_packets(self) -> int:
        """Drop-tail limit: ``queue`` if given, else ``buffer_bdp`` x BDP of the down link in MTU packets (floor)."""
        if self.queue is not None:
            return int(self.queue)
        bdp = self.down_mbps * 1e6 / 8 * self.rtt_ms / 1000 / MTU_BYTES
        return max(QUEUE_FLOOR_PACKETS, int(math.ceil(self.buffer_bdp * bdp)))

    def to_dict(self) -> dict:
        """Plain fields; the optional ones only when set, so tb-v1 plans and rows round-trip unchanged."""
        d = asdict(self)
        return {k: v for k, v in d.items() if v is not None or k not in _OPTIONAL}


def _c(name, down, up, rtt, loss, family, source) -> Condition:
    return Condition(name, float(down), float(up), float(rtt), float(loss), family, source)


_FCC = "Config-Snob App. A Table 4 (FCC+ rows), seed 002"
_WPT = "FACTS.md 1.4 WebPageTest connectivity presets"
_LH = "FACTS.md 1.4 Lighthouse throttling constants"
_ATC = "FACTS.md 1.4 Facebook ATC profiles"
_WS = "Configtron workshop grid (bw {0.3,1,5} x loss {0,1,2.5,5}% x delay), seed 003 s3.1"
_SAT = "FACTS.md 1.2 Ookla Q2/Q4-2021 satellite rows"
_MM = "Mahimahi cellular trace (data/traces/mahimahi, FACTS.md 1.6); RTT from FACTS.md 1.4 Akamai latency quantiles"
_PAN = "Pantheon calibrated emulator (FACTS.md 1.5, data/traces/README.md 2)"


def _t(name, mean_down, up, rtt, family, source, down_trace, up_trace=None, loss=0.0, up_loss=None, queue=None):
    """A trace-driven condition; ``mean_down`` is the trace's mean capacity (FACTS.md 1.6), used for sizing only."""
    return Condition(name, float(mean_down), float(up), float(rtt), float(loss), family, source, 1.0,
                     up_loss, queue, down_trace, up_trace)

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
    # --- added for tb-v2 (issue 3: 40+ conditions, trace-driven cellular, developing regions, satellite) ---
    _t("mm-att-lte-driving", 5.17, 1.0, 40, "cellular-trace", _MM + " (p50 39 ms)",
       "mahimahi/ATT-LTE-driving.down", "mahimahi/ATT-LTE-driving.up"),
    _t("mm-tmobile-lte-short", 16.70, 5.0, 52, "cellular-trace", _MM + " (p75 52 ms)",
       "mahimahi/TMobile-LTE-short.down", "mahimahi/TMobile-LTE-short.up"),
    _t("mm-tmobile-lte-driving", 12.77, 5.0, 90, "cellular-trace", _MM + " (p90 90 ms; no up trace, up fixed 5)",
       "mahimahi/TMobile-LTE-driving.down"),
    _t("mm-verizon-evdo", 0.52, 0.3, 150, "cellular-trace",
       _MM.replace("Akamai latency quantiles", "WPT 3G Fast (150 ms)"),
       "mahimahi/Verizon-EVDO-driving.down", "mahimahi/Verizon-EVDO-driving.up"),
    _t("pan-nepal-wireless", 0.57, 0.57, 56, "developing-trace", _PAN + " nepal-wireless",
       "pantheon_calibrated/0.57mbps-poisson.trace", "pantheon_calibrated/0.57mbps-poisson.trace",
       up_loss=0.0477, queue=14),
    _t("pan-mexico-cellular", 2.64, 2.64, 176, "developing-trace", _PAN + " mexico-cellular",
       "pantheon_calibrated/2.64mbps-poisson.trace", "pantheon_calibrated/2.64mbps-poisson.trace", queue=130),
    _t("pan-colombia-cellular", 3.04, 3.04, 260, "developing-trace", _PAN + " colombia-cellular",
       "pantheon_calibrated/3.04mbps-poisson.trace", "pantheon_calibrated/3.04mbps-poisson.trace", queue=426),
    _t("pan-china-korea", 6.25, 6.25, 304, "developing-trace", _PAN + " China ppp0 -> AWS Korea",
       "pantheon_calibrated/2016-12-30T21-38-China-ppp0-to-AWS-Korea-10-runs__6.25mbps.trace",
       "pantheon_calibrated/2016-12-30T21-38-China-ppp0-to-AWS-Korea-10-runs__6.25mbps.trace",
       up_loss=0.0025, queue=362),
    _t("pan-brazil-colombia", 5.65, 5.65, 176, "developing-trace", _PAN + " AWS Brazil -> Colombia ppp0 (bufferbloat)",
       "pantheon_calibrated/2016-12-30T22-50-AWS-Brazil-2-to-Colombia-ppp0-10-runs__5.65mbps.trace",
       "pantheon_calibrated/2016-12-30T22-50-AWS-Brazil-2-to-Colombia-ppp0-10-runs__5.65mbps.trace",
       loss=0.0001, up_loss=0.0026, queue=3665),
    _t("pan-nepal-india", 13.38, 13.38, 64, "developing-trace", _PAN + " Nepal -> AWS India",
       "pantheon_calibrated/2017-01-03T21-30-Nepal-to-AWS-India-10-runs__13.38mbps.trace",
       "pantheon_calibrated/2017-01-03T21-30-Nepal-to-AWS-India-10-runs__13.38mbps.trace",
       up_loss=0.003, queue=37),
    _c("wpt-fios", 20, 5, 4, 0.0, "broadband", _WPT + " (FIOS)"),
    _c("atc-dsl", 2, 0.256, 10, 0.0, "broadband", _ATC + " (DSL, 5 ms each way)"),
    _c("wpt-3gslow", 0.78, 0.33, 200, 0.0, "cellular", _WPT + " (3GSlow)"),
    _c("peru-entel-lte", 19, 5, 31, 0.0, "developing", "FACTS.md 1.3 Peru 2016 Entel LTE (up 5 assumed)"),
    _c("dev-1m-1pct", 1, 0.5, 150, 0.01, "developing", _WS),
    _c("geo-viasat", 18.13, 3.38, 630, 0.0, "satellite", _SAT + " (Viasat Q2-2021)"),
)
NEW_IN_TB_V2 = tuple(c.name for c in CONDITIONS[25:])

CATALOG: dict[str, Condition] = {c.name: c for c in CONDITIONS}


def condition_from_dict(d: dict) -> Condition:
    """Rebuild a condition stored in a plan or dataset (unknown keys are an error, not ignored)."""
    return Condition(**d)
