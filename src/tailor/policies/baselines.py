"""Baselines of Configanator §6.1: Default, Random, Optimal (fresh / stale view), Brute, Brute+NC, MAB+NC;
and two one-size-fits-all servers: a modern CDN's static configuration and the best static one in hindsight."""

from __future__ import annotations

import warnings

import numpy as np

from tailor.policies.base import Context, Decision, Outcome, Policy, register
from tailor.policies.learners import ArmStats, KeyedLearner

_POS_INT = (lambda v: isinstance(v, int) and v >= 1, "an integer >= 1")
_MEMORY = (lambda v: isinstance(v, int) and v >= 0, "an integer >= 0 (0 = unbounded)")


@register("default")
class DefaultPolicy(Policy):
    """Linux/Apache defaults for everyone (cubic, IW 10, HTTP/1.1, RTO min 200 ms)."""

    def _select(self, ctx: Context) -> Decision:
        return Decision(self.space.default_index, 1.0, "default", "default")


CDN_STATIC = {"tcp.congestion_control": "bbr", "tcp.initial_cwnd": 32, "http.version": "2"}


def cdn_static_index(space) -> int:
    """Index of :data:`CDN_STATIC` in ``space``; in a space that lacks one of its values, the nearest
    configuration, with a warning naming each missing knob value."""
    from tailor.space import Configuration

    want = {k: v for k, v in CDN_STATIC.items() if k in space.registry}
    target = Configuration(want, space.registry)
    try:
        index = space.index_of(target)
    except Exception:  # noqa: BLE001 - ParameterError: not in the space; take the nearest point
        index = space._nearest(target, exclude=[])
    chosen = space.configs[index]
    for knob, value in want.items():
        if chosen[knob] != value:
            warnings.warn(f"cdn-static: {knob}={value} is not in the evaluated space ({space.name}, "
                          f"{space.allowed or 'all allowed'}); using {knob}={chosen[knob]}", stacklevel=3)
    return index


@register("cdn-static")
class CDNStaticPolicy(Policy):
    """What large CDNs run for everyone today: BBR, IW 32, HTTP/2, every other knob at its default.

    In a space that lacks one of these values (e.g. ``--allowed NoBBR``, or a space without the HTTP
    version), the nearest configuration of the space, with a warning naming each missing knob value.
    """

    def _init_state(self) -> None:
        self._index = cdn_static_index(self.space)

    def _select(self, ctx: Context) -> Decision:
        return Decision(self._index, 1.0, "all", "static")

    def group_of(self, ctx: Context) -> str:
        return "all"

    def table_groups(self):
        return {"all": {self._index: 1.0}}

    def table_rules(self):
        return [{"prefix": "0.0.0.0/0", "group": "all"}, {"prefix": "::/0", "group": "all"}]


@register("best-static")
class BestStaticPolicy(CDNStaticPolicy):
    """The one configuration with the lowest total noise-free time over every page load of the run, chosen
    in hindsight: the ceiling of any one-size-fits-all server. Sees the truth (an oracle baseline)."""

    needs_oracle = True

    def _init_state(self) -> None:
        tensor = self.env.oracle
        cells, sites = self.env.hindsight if self.env.hindsight is not None else ((), ())
        total = np.zeros(len(self.space))
        for c, s in zip(cells, sites):
            total += tensor.mode(int(c), int(s))
        self._index = int(np.argmin(total)) if len(cells) else self.space.default_index


@register("random")
class RandomPolicy(Policy):
    """A uniformly random allowed configuration per connection."""

    def _select(self, ctx: Context) -> Decision:
        n = len(self.space)
        return Decision(int(self._rng.integers(n)), 1.0 / n, "all", "random")

    def table_groups(self):
        n = len(self.space)
        return {"all": {i: 1.0 / n for i in range(n)}}

    def table_rules(self):
        return [{"prefix": "0.0.0.0/0", "group": "all"}, {"prefix": "::/0", "group": "all"}]


@register("optimal")
class OptimalPolicy(Policy):
    """Oracle upper bound: the configuration with the lowest ground truth for the current condition.

    ``view='fresh'`` uses the true current condition; ``view='stale'`` uses the condition the prefix
    archive last reported (ConfigTron's stale-view oracle), falling back to the default when unknown.
    """

    needs_oracle = True
    parameters = {"view": ("fresh", lambda v: v in ("fresh", "stale"), "'fresh' or 'stale'")}

    def _select(self, ctx: Context) -> Decision:
        cell = ctx.cell if self.view == "fresh" else ctx.stale_cell
        if cell < 0:
            return Decision(self.space.default_index, 1.0, "unknown", "default")
        tensor = self.env.oracle
        return Decision(int(np.argmin(tensor.mode(cell, tensor.site_index[ctx.website]))), 1.0, "oracle", "oracle")

    def group_of(self, ctx: Context) -> str:
        """Without evaluating the oracle (its cache is part of the pickled state; the site may be unknown)."""
        return "unknown" if (ctx.cell if self.view == "fresh" else ctx.stale_cell) < 0 else "oracle"


@register("optimal-stale")
class OptimalStalePolicy(OptimalPolicy):
    parameters = {"view": ("stale", lambda v: v in ("fresh", "stale"), "'fresh' or 'stale'")}


class _BruteBase(KeyedLearner):
    """Explores every configuration once per key in a random order, then exploits the best seen."""

    parameters = {"perf_memory": (0, *_MEMORY), "classes": (8, *_POS_INT)}

    def _init_state(self) -> None:
        super()._init_state()
        self._stats: dict[str, ArmStats] = {}
        self._order: dict[str, np.ndarray] = {}

    def _select(self, ctx: Context) -> Decision:
        key = self.key(ctx)
        if key is None:
            return Decision(self.space.default_index, 1.0, "unknown", "default")
        stats = self._stats.get(key)
        if stats is None or stats.total < len(self.space):
            order = self._order.setdefault(key, self._rng.permutation(len(self.space)))
            return Decision(int(order[0 if stats is None else stats.total]), 1.0, key, "explore")
        return Decision(stats.best(), 1.0, key, "exploit")

    def _observe(self, ctx: Context, decision: Decision, outcome: Outcome) -> None:
        self._observe_classes(ctx)
        if decision.group in ("unknown",):
            return
        stats = self._stats.setdefault(decision.group, ArmStats(len(self.space), self.perf_memory))
        stats.add(decision.config, outcome.completion_ms)

    def table_groups(self):
        groups = {k: {s.best() if s.total >= len(self.space) else self.space.default_index: 1.0}
                  for k, s in self._stats.items()}
        return {"default": {self.space.default_index: 1.0}, **groups}


@register("brute")
class BrutePolicy(_BruteBase):
    granularity = "client"


@register("brute-nc")
class BruteNCPolicy(_BruteBase):
    granularity = "nc"


@register("mab-nc")
class MABNCPolicy(KeyedLearner):
    """Weighted epsilon-greedy bandit per network class x website (Vermorel & Mohri 2005).

    Exploitation picks the arm with the lowest mean completion time; exploration (probability
    ``epsilon``) draws an arm with weight 1 for untried arms and weight proportional to
    (best mean / arm mean) ** ``sharpness`` for tried ones, so it revisits promising arms more often.
    Until anything is tried for a key, the default configuration is exploited.
    """

    parameters = {
        "epsilon": (0.1, lambda v: isinstance(v, float) and 0.0 <= v <= 1.0, "in [0, 1]"),
        "sharpness": (4.0, lambda v: isinstance(v, float) and v >= 0.0, ">= 0"),
        "perf_memory": (0, *_MEMORY),
        "classes": (8, *_POS_INT),
    }

    def _init_state(self) -> None:
        super()._init_state()
        self._stats: dict[str, ArmStats] = {}
        self._cache: dict[str, tuple[int, np.ndarray, np.ndarray]] = {}  # key -> (greedy, weights, cumsum)

    def _weights(self, stats: ArmStats) -> np.ndarray:
        means = stats.means()
        best = np.nanmin(means) if stats.total else 1.0
        w = np.where(np.isnan(means), 1.0, (best / np.where(np.isnan(means), 1.0, means)) ** self.sharpness)
        return w / w.sum()

    def _choice(self, key: str) -> tuple[int, np.ndarray, np.ndarray]:
        """(greedy arm, exploration weights, their cumulative sum), recomputed only after new data."""
        cached = self._cache.get(key)
        if cached is None:
            stats = self._stats.get(key)
            if stats is None or stats.total == 0:
                w = np.full(len(self.space), 1.0 / len(self.space))
                cached = (self.space.default_index, w, np.cumsum(w))
            else:
                w = self._weights(stats)
                cached = (stats.best(), w, np.cumsum(w))
            self._cache[key] = cached
        return cached

    def _select(self, ctx: Context) -> Decision:
        key = self.key(ctx)
        if key is None:
            return Decision(self.space.default_index, 1.0, "unknown", "default")
        greedy, weights, cum = self._choice(key)
        if self._rng.random() < self.epsilon:
            arm = min(int(np.searchsorted(cum, self._rng.random() * cum[-1], side="right")), len(cum) - 1)
            how = "explore"
        else:
            arm, how = greedy, "exploit"
        prob = self.epsilon * weights[arm] + (1.0 - self.epsilon) * (arm == greedy)
        return Decision(arm, float(prob), key, how)

    def _observe(self, ctx: Context, decision: Decision, outcome: Outcome) -> None:
        self._observe_classes(ctx)
        if decision.group == "unknown":
            return
        stats = self._stats.setdefault(decision.group, ArmStats(len(self.space), self.perf_memory))
        stats.add(decision.config, outcome.completion_ms)
        self._cache.pop(decision.group, None)

    def _plan(self, now: float) -> None:
        super()._plan(now)
        self._cache.clear()  # classes may have moved

    def table_groups(self):
        groups = {}
        for key, stats in self._stats.items():
            w = self._weights(stats)
            greedy = stats.best() if stats.total else self.space.default_index
            probs = self.epsilon * w
            probs[greedy] += 1.0 - self.epsilon
            groups[key] = {i: float(p) for i, p in enumerate(probs) if p > 1e-6}
        return {"default": {self.space.default_index: 1.0}, **groups}
