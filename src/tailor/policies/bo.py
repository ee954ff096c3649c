"""Bayesian-optimisation baselines of Configanator §6.1: BO, BO+NC and CherryPick+NC.

"Bayesian Optimization is used to explore the configuration space and the best-explored option is
exploited once BO-specific thresholds are met" -- one :class:`tailor.learn.BOSearch` per learner key:

* ``bo`` -- per client x website (Configanator: "BO learns per client");
* ``bo-nc`` -- per network class x website, Configanator §5 thresholds: init_sample=4,
  min_sample_tested=7, EI=8%;
* ``cherrypick-nc`` -- BO+NC "with hyper-parameters specified in [4]" (CherryPick, NSDI'17):
  Matern 5/2 GP with EI (as every variant here), 3 initial quasi-random samples (LHS here; CherryPick
  used a quasi-random sequence), stop once EI < 10% of the best and at least N=6 samples were tried.

Connections of a prefix the archive does not know yet (no network class) get the default
configuration, as in Configanator's workflow (Fig. 3), at every granularity (per-client too, as
the policy contract requires). Every choice is deterministic (probability 1).

``noisy_ei`` (default True) scores EI with the noisy predictive std as GPyOpt does (what the paper
ran); False gives textbook latent EI, which on noisy PLTs stops at about ``min_samples``.
GP refits are lazy: a key's GP is refitted at its first connection after one of its own
observations, never otherwise (see :class:`tailor.learn.BOSearch`).
"""

from __future__ import annotations

from tailor.learn import BOSearch
from tailor.policies.base import Context, Decision, Outcome, register
from tailor.policies.learners import KeyedLearner


def _int_at_least(low: int):
    return (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= low, f"an integer >= {low}")


_FRACTION = (lambda v: isinstance(v, float) and 0.0 <= v < 1.0, "a float in [0, 1)")


def _parameters(init_samples: int, min_samples: int, ei_threshold: float) -> dict:
    return {
        "init_samples": (init_samples, *_int_at_least(1)),
        "min_samples": (min_samples, *_int_at_least(1)),
        "ei_threshold": (ei_threshold, *_FRACTION),
        "perf_memory": (0, *_int_at_least(0)),
        "classes": (8, *_int_at_least(1)),
        "max_points": (60, *_int_at_least(2)),
        "noisy_ei": (True, lambda v: isinstance(v, bool), "True or False"),
    }


class _BOBase(KeyedLearner):
    """One BOSearch per learner key, created at the key's first connection."""

    parameters = _parameters(4, 7, 0.08)

    def _init_state(self) -> None:
        super()._init_state()
        self._searches: dict[str, BOSearch] = {}

    def _search(self, key: str) -> BOSearch:
        search = self._searches.get(key)
        if search is None:
            search = self._searches[key] = BOSearch(
                self.space, self._rng, init_samples=self.init_samples, min_samples=self.min_samples,
                ei_threshold=self.ei_threshold, perf_memory=self.perf_memory, max_points=self.max_points,
                noisy_ei=self.noisy_ei)
        return search

    def _select(self, ctx: Context) -> Decision:
        key = self.key(ctx)
        if key is None:
            return Decision(self.space.default_index, 1.0, "unknown", "default")
        config, phase = self._search(key).suggest()
        return Decision(config, 1.0, key, phase)

    def _observe(self, ctx: Context, decision: Decision, outcome: Outcome) -> None:
        self._observe_classes(ctx)
        if decision.group == "unknown":
            return
        self._search(decision.group).observe(decision.config, outcome.completion_ms)

    def table_groups(self) -> dict[str, dict[int, float]]:
        """Each key's current choice (no GP work: a stale key publishes its cached suggestion)."""
        groups = {key: {search.peek(): 1.0} for key, search in self._searches.items()}
        return {"default": {self.space.default_index: 1.0}, **groups}

    def fit_stats(self) -> dict[str, float]:
        """GP work so far: fits, hyper-parameter optimisations, seconds, stopped keys (for reports)."""
        fits = sum(s.surrogate.n_fits for s in self._searches.values())
        seconds = sum(s.surrogate.fit_seconds for s in self._searches.values())
        return {"keys": len(self._searches), "stopped": sum(s.stopped for s in self._searches.values()),
                "fits": fits, "optimized": sum(s.surrogate.n_optimized for s in self._searches.values()),
                "fit_seconds": seconds, "ms_per_fit": 1e3 * seconds / fits if fits else 0.0}


@register("bo")
class BOPolicy(_BOBase):
    granularity = "client"


@register("bo-nc")
class BONCPolicy(_BOBase):
    granularity = "nc"


@register("cherrypick-nc")
class CherryPickNCPolicy(_BOBase):
    granularity = "nc"
    parameters = _parameters(3, 6, 0.10)
