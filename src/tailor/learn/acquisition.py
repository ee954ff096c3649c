"""Acquisition functions for minimisation (completion time: lower is better).

Configanator §3 and CherryPick both use expected improvement (EI); both stop exploring when the best
EI falls below a fraction of the incumbent (8 % in Configanator §5, 10 % in CherryPick), so
:func:`relative_ei` is the quantity their thresholds apply to.
"""

from __future__ import annotations

import numpy as np
from scipy.stats import norm


def expected_improvement(mean: np.ndarray, std: np.ndarray, best: float, xi: float = 0.0) -> np.ndarray:
    """E[max(best - xi - Y, 0)] for Y ~ N(mean, std^2): the classic closed form, for minimisation.

    ``std == 0`` falls back to the deterministic improvement, so tried noise-free points score
    max(best - mean, 0) instead of NaN.
    """
    mean, std = np.asarray(mean, dtype=float), np.asarray(std, dtype=float)
    gap = best - xi - mean
    safe = np.where(std > 0, std, 1.0)
    z = gap / safe
    ei = gap * norm.cdf(z) + safe * norm.pdf(z)
    return np.maximum(np.where(std > 0, ei, np.maximum(gap, 0.0)), 0.0)


def lognormal_expected_improvement(log_mean: np.ndarray, log_std: np.ndarray, best: float) -> np.ndarray:
    """EI in the original units when the model predicts the log: E[max(best - exp(Y), 0)].

    The surrogate models log completion time (PLT noise is multiplicative and heavy-tailed), but
    the EI thresholds of the papers are fractions of the best *completion time*; for
    Y ~ N(m, s^2) and best b > 0 the closed form is b*Phi(z) - exp(m + s^2/2)*Phi(z - s) with
    z = (ln b - m) / s.
    """
    m, s = np.asarray(log_mean, dtype=float), np.asarray(log_std, dtype=float)
    if best <= 0:
        return np.zeros_like(m)
    safe = np.where(s > 0, s, 1.0)
    z = (np.log(best) - m) / safe
    # the second term in log space: exp(m + s^2/2) overflows for wide posteriors while Phi(z - s) underflows
    # to 0, and inf * 0 is NaN
    with np.errstate(over="ignore", divide="ignore"):
        ei = best * norm.cdf(z) - np.exp(m + 0.5 * safe**2 + norm.logcdf(z - safe))
    return np.maximum(np.where(s > 0, ei, np.maximum(best - np.exp(m), 0.0)), 0.0)


def relative_ei(ei: float | np.ndarray, best: float) -> float | np.ndarray:
    """EI as a fraction of the incumbent's magnitude (the papers' stopping quantity); inf when best is 0."""
    if best == 0:
        return np.full(np.shape(ei), np.inf) if np.ndim(ei) else float("inf")
    return np.asarray(ei, dtype=float) / abs(best) if np.ndim(ei) else float(ei) / abs(best)
