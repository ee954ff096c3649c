"""BOSearch: one Bayesian-optimisation search (one learner key: a client or a network class x website).

Life cycle (Configanator §3 / App. D, CherryPick §3):

1. *bootstrap* -- the ``init_samples`` Latin-hypercube configurations (Configanator App. D: LHS
   bootstrapping needed 2-3x fewer steps than random or ranked starts), in order, each until observed;
2. *explore* -- the allowed, untried configuration with the largest expected improvement over the
   incumbent under a GP fitted to the mean log completion time of every tried configuration;
3. *exploit* -- once the best EI is below ``ei_threshold`` x incumbent and at least ``min_samples``
   distinct configurations were tried (or every configuration was), the configuration with the lowest
   mean observed completion time, for good: BO never re-evaluates a finished search (Configanator §1).

The search state changes only in :meth:`observe`; :meth:`suggest` repeats the cached choice until the
next observation, and the GP is refitted lazily at the first ``suggest`` after an observation. So a
key costs nothing between its own page loads, and concurrent connections of one key before the
feedback arrives get (and re-measure) the same configuration.
"""

from __future__ import annotations

import math
from collections import deque

import numpy as np

from tailor.errors import check
from tailor.learn.acquisition import lognormal_expected_improvement, relative_ei
from tailor.learn.gp import GPSurrogate
from tailor.learn.optimize import propose
from tailor.space import ConfigSpace

BOOTSTRAP, EXPLORE, EXPLOIT = "bootstrap", "explore", "exploit"


class ConfigStats:
    """Per-configuration running means of completion time and of its log, over the last ``memory``
    observations of each configuration (PerfMemory; 0 = unbounded).

    Kept here rather than reusing ``tailor.policies.learners.ArmStats`` so that ``tailor.learn`` stays
    below ``tailor.policies`` in the import graph (policies import learn, never the reverse).
    """

    def __init__(self, n: int, memory: int = 0):
        self.memory = memory
        self.sums = np.zeros((2, n))  # row 0: ms, row 1: log ms
        self.counts = np.zeros(n, dtype=int)
        self._history: dict[int, deque] = {}

    def add(self, config: int, value_ms: float) -> None:
        pair = np.array([value_ms, math.log(value_ms)])
        self.sums[:, config] += pair
        self.counts[config] += 1
        if self.memory:
            hist = self._history.setdefault(config, deque())
            hist.append(pair)
            if len(hist) > self.memory:
                self.sums[:, config] -= hist.popleft()
                self.counts[config] -= 1

    def means(self, log: bool = False) -> np.ndarray:
        """Mean per configuration (NaN where never observed)."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.counts > 0, self.sums[int(log)] / np.maximum(self.counts, 1), np.nan)

    def best(self) -> int | None:
        """Configuration with the lowest mean completion time, or None before any observation."""
        return int(np.nanargmin(self.means())) if self.counts.any() else None


class BOSearch:
    """Bootstrap / EI-explore / exploit controller over one (AllowedConfig-restricted) space.

    Defaults are Configanator's (§5: init_sample=4, min_sample_tested=7, EI=8%); ``perf_memory``
    bounds each configuration's history (PerfMemory, App. Table 4; 0 = unbounded); ``max_points``
    caps the GP training set (the most recently observed configurations, incumbent always kept).

    EI is computed as GPyOpt computes it (Configanator's GP library, §5): the incumbent is the lowest
    posterior mean at a tried configuration (GPyOpt ``get_fmin``), and with ``noisy_ei=True`` the
    predictive std includes the learned observation noise (GPy ``predict`` default). On noisy PLTs
    that keeps EI up and the search exploring past ``min_samples`` (the paper saw per-client BO
    "explore over 90% of the space without achieving the target EI", §6.2). ``noisy_ei=False``
    scores the latent function (textbook EI), which on noisy data stops at about ``min_samples``.
    """

    def __init__(self, space: ConfigSpace, rng: np.random.Generator, *, init_samples: int = 4,
                 min_samples: int = 7, ei_threshold: float = 0.08, perf_memory: int = 0, max_points: int = 60,
                 noisy_ei: bool = True, surrogate: GPSurrogate | None = None, first: int | None = None):
        check(init_samples >= 1, "BOSearch", "init_samples", "an integer >= 1", init_samples)
        check(ei_threshold >= 0, "BOSearch", "ei_threshold", ">= 0", ei_threshold)
        self.space, self.min_samples, self.ei_threshold = space, min_samples, ei_threshold
        self.noisy_ei = noisy_ei
        self._rng = rng
        self._codes = space.encode()
        self._boot = space.lhs(init_samples, rng)
        if first is not None:  # e.g. Configanator measures the default first (per-class default PLT spread)
            self._boot = [first] + [c for c in self._boot if c != first][: init_samples - 1]
        self._stats = ConfigStats(len(space), perf_memory)  # exploitation ranks by ms, the GP models log ms
        self._last_seen: dict[int, int] = {}  # config -> sequence number of its latest observation
        self._n_obs = 0
        self._max_points = max_points
        self.surrogate = surrogate or GPSurrogate(max_points=max_points)
        self._next: int | None = None
        self._dirty = True
        self.stopped = False
        self.relative_ei = math.inf  # best EI / incumbent at the last refit

    # -- queries
    @property
    def tested(self) -> int:
        """Distinct configurations observed (what min_samples counts)."""
        return len(self._last_seen)

    @property
    def observations(self) -> int:
        return self._n_obs

    @property
    def stats(self) -> ConfigStats:
        """Per-configuration observed completion times (read-only use)."""
        return self._stats

    def best(self) -> int:
        """Lowest mean observed completion time; the default before any observation."""
        best = self._stats.best()
        return self.space.default_index if best is None else best

    def suggest(self) -> tuple[int, str]:
        """(configuration, phase) for the next connection of this key; refits the GP if stale."""
        if not self.stopped:
            boot = self.pending_bootstrap()
            if boot is not None:
                return boot, BOOTSTRAP
            if self._dirty:
                self._refresh()
        if self.stopped:
            return self.best(), EXPLOIT
        return self._next, EXPLORE

    def peek(self) -> int:
        """The current choice without any model work (for decision tables)."""
        if self.stopped:
            return self.best()
        boot = self.pending_bootstrap()
        if boot is not None:
            return boot
        return self._next if self._next is not None else self.best()

    # -- feedback
    def observe(self, config: int, completion_ms: float) -> None:
        """Record one page load; marks the GP stale (refit happens at the next suggest)."""
        self._stats.add(config, max(float(completion_ms), 1e-3))
        self._n_obs += 1
        self._last_seen[config] = self._n_obs
        self._dirty = True

    def pending_bootstrap(self) -> int | None:
        """The next bootstrap (LHS) configuration not yet observed, or None when bootstrap is done."""
        return next((c for c in self._boot if c not in self._last_seen), None)

    # -- internals
    def _training_set(self) -> list[int]:
        """Tried configurations, oldest observation first, capped to max_points (incumbent kept)."""
        order = sorted(self._last_seen, key=self._last_seen.__getitem__)
        if len(order) <= self._max_points:
            return order
        keep, best = order[-self._max_points:], self.best()
        return keep if best in keep else [best] + keep[1:]

    def _refresh(self) -> None:
        """Refit the GP, pick the max-EI untried configuration, and apply the stopping rule."""
        self._dirty = False
        tried = self._training_set()
        self.surrogate.fit(self._codes[tried], self._stats.means(log=True)[tried])
        incumbent = math.exp(float(np.min(self.surrogate.predict(self._codes[tried])[0])))
        nxt, ei = propose(self.surrogate, self._codes, self._last_seen, incumbent, self._rng,
                          acquisition=lognormal_expected_improvement, latent=not self.noisy_ei)
        self.relative_ei = 0.0 if nxt is None else relative_ei(ei, incumbent)
        if nxt is None or (self.tested >= self.min_samples and self.relative_ei < self.ei_threshold):
            self.stopped = True
            self.surrogate.release()
        self._next = nxt
