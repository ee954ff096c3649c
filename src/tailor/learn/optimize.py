"""Maximise an acquisition over the enumerated configuration space.

Configuration spaces are small grids (60-240 allowed configurations), so the acquisition is scored on
every candidate instead of run through a continuous optimiser and rounded -- rounding can land on a
configuration AllowedConfig forbids; enumeration only ever proposes allowed indices.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np

from tailor.learn.acquisition import lognormal_expected_improvement

Acquisition = Callable[[np.ndarray, np.ndarray, float], np.ndarray]


def candidate_indices(n: int, tried: Iterable[int], include_tried: bool = False) -> np.ndarray:
    """Indices to score. Tried points are excluded by default: the BO baselines exploit the best
    *observed* configuration, so re-measuring one adds nothing to what they will pick."""
    if include_tried:
        return np.arange(n)
    mask = np.ones(n, dtype=bool)
    mask[list(tried)] = False
    return np.flatnonzero(mask)


def maximize(values: np.ndarray, candidates: np.ndarray, rng: np.random.Generator) -> tuple[int, float]:
    """(candidate, value) of the largest value; exact ties (e.g. EI all 0) broken by the seeded rng. A NaN value
    (a surrogate that could not score a candidate) never wins; when no value is finite, every candidate ties
    and the value is 0."""
    v = np.asarray(values, dtype=float)
    v = np.where(np.isnan(v), -np.inf, v)
    top = float(np.max(v))
    if top == -np.inf:
        return int(candidates[int(rng.integers(len(v)))]), 0.0
    best = np.flatnonzero(v == top) if top == np.inf else np.flatnonzero(v >= top - 1e-12 * max(abs(top), 1.0))
    pick = best[0] if len(best) == 1 else best[int(rng.integers(len(best)))]
    return int(candidates[pick]), top


def propose(surrogate, codes: np.ndarray, tried: Iterable[int], best: float, rng: np.random.Generator,
            acquisition: Acquisition = lognormal_expected_improvement, include_tried: bool = False,
            latent: bool = True) -> tuple[int | None, float]:
    """Next configuration and its acquisition value, or (None, 0.0) when no candidate is left.

    ``codes`` are the encoded rows of the whole (restricted) space; ``surrogate`` anything with
    ``predict(X, latent=...) -> (mean, std)``; ``best`` the incumbent in the units ``acquisition``
    expects; ``latent=False`` scores with the noisy predictive std (see :class:`tailor.learn.BOSearch`).
    """
    cand = candidate_indices(len(codes), tried, include_tried)
    if len(cand) == 0:
        return None, 0.0
    mean, std = surrogate.predict(codes[cand], latent=latent)
    return maximize(acquisition(mean, std, best), cand, rng)
