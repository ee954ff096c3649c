"""Sufficient statistics of log completion times and an always-valid two-sample test.

Completion times are heavy-tailed and multiplicative, so everything works on ``log(ms)``: a
difference of means ``d`` is a ratio ``exp(d)`` of geometric means.

The test is the normal-mixture sequential probability ratio test (mSPRT; Robbins 1970, Johari et
al. "Always valid inference", 2017) on the difference of two means with a plug-in variance. With
mixing variance ``tau2`` and estimate ``d`` of variance ``v``:

    Lambda = sqrt(v / (v + tau2)) * exp(tau2 * d^2 / (2 v (v + tau2)))

Rejecting when ``Lambda >= 1/alpha`` keeps the type-I error below ``alpha`` however often the
statistic is looked at (every update cycle), which a fixed-sample t-test does not. The one-sided use
below (reject only when ``d`` is on the tested side of the margin) keeps that guarantee.

>>> a, b = LogStats(), LogStats()
>>> for x in (100, 110, 90, 105, 95) * 10: a.add(x); b.add(2 * x)
>>> round(a.ratio_to(b), 3), msprt_reject(b, a, margin=0.0, alpha=0.05, tau2=0.01)
(0.5, True)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

MIN_SAMPLES = 30  # below this the plug-in variance is too rough to test anything
VAR_FLOOR = 1e-4  # per-sample log variance floor: identical samples do not make infinite evidence


@dataclass
class LogStats:
    """Count, sum and sum of squares of log completion times."""

    n: int = 0
    s: float = 0.0
    ss: float = 0.0

    def add(self, ms: float) -> None:
        x = math.log(max(ms, 1e-3))
        self.n += 1
        self.s += x
        self.ss += x * x

    def merge(self, other: LogStats) -> LogStats:
        return LogStats(self.n + other.n, self.s + other.s, self.ss + other.ss)

    def since(self, earlier: LogStats | None) -> LogStats:
        """The statistics of what was added after ``earlier`` (a copy of these statistics at an earlier moment)."""
        if earlier is None or not earlier.n:
            return LogStats(self.n, self.s, self.ss)
        return LogStats(self.n - earlier.n, self.s - earlier.s, self.ss - earlier.ss)

    @property
    def mean(self) -> float:
        return self.s / self.n if self.n else float("nan")

    @property
    def var(self) -> float:
        """Unbiased sample variance of the logs, floored at VAR_FLOOR."""
        if self.n < 2:
            return float("inf")
        return max((self.ss - self.s * self.s / self.n) / (self.n - 1), VAR_FLOOR)

    def ratio_to(self, other: LogStats) -> float:
        """Geometric-mean ratio self/other (e.g. 0.9 = 10% faster than ``other``)."""
        if not self.n or not other.n:
            return float("nan")
        return math.exp(self.mean - other.mean)


def msprt_lambda(d: float, v: float, tau2: float) -> float:
    """Normal-mixture likelihood ratio of an estimate ``d`` with variance ``v`` against mean 0."""
    if not math.isfinite(v) or v <= 0:
        return 0.0
    return math.sqrt(v / (v + tau2)) * math.exp(min(tau2 * d * d / (2.0 * v * (v + tau2)), 700.0))


def msprt_reject(worse: LogStats, better: LogStats, margin: float, alpha: float, tau2: float) -> bool:
    """True when ``worse`` is slower than ``better`` by more than ``margin`` (log scale), always-valid at ``alpha``.

    Needs MIN_SAMPLES on both sides.
    """
    if worse.n < MIN_SAMPLES or better.n < MIN_SAMPLES:
        return False
    d = worse.mean - better.mean - margin
    if d <= 0:
        return False
    v = worse.var / worse.n + better.var / better.n
    return msprt_lambda(d, v, tau2) >= 1.0 / alpha
