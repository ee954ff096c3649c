"""Bayesian-optimisation building blocks, kept apart the BoTorch way so policies can mix them.

* :mod:`tailor.learn.gp` -- the surrogate (a GP over encoded configurations, log completion time),
* :mod:`tailor.learn.acquisition` -- expected improvement (and its relative form for stopping),
* :mod:`tailor.learn.optimize` -- maximising an acquisition over the enumerated, allowed space,
* :mod:`tailor.learn.search` -- :class:`BOSearch`, the per-key bootstrap / explore / exploit controller.

The BO baselines (``tailor.policies.bo``) use all four; the Configanator policy reuses the GP arm.
"""

from tailor.learn.acquisition import expected_improvement, lognormal_expected_improvement, relative_ei
from tailor.learn.gp import GPSurrogate
from tailor.learn.optimize import candidate_indices, maximize, propose
from tailor.learn.search import BOSearch, ConfigStats

__all__ = ["BOSearch", "ConfigStats", "GPSurrogate", "candidate_indices", "expected_improvement", "lognormal_expected_improvement",
           "maximize", "propose", "relative_ei"]
