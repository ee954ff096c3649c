"""Configanator (NSDI'22) §3: network classes + a three-armed contextual bandit, and its ablations.

Arms (§3.1), per website x network class ("pair"):

* GP arm -- one :class:`tailor.learn.BOSearch` per pair: bootstrap of ``init_samples`` = 4 (the
  exploitation arm's prediction for the connection that opened the pair, then Latin-hypercube points),
  then EI-directed search until EI < ``ei_threshold`` (8 %) of the incumbent with >= ``min_samples`` (7)
  configurations tested (§5). Decision arms ``bootstrap`` / ``explore``.
* epsilon arm -- with probability ``epsilon`` a uniformly random configuration among the pair's data
  points (every configuration its config-performance curve holds): "randomly re-samples the data
  points" (§3.1), "randomly re-sampling old configurations ... the re-evaluation of data samples"
  (§1.2). Operator-bounded by ``epsilon``; it never stops. Arm ``epsilon``.
* DT arm -- one CART tree over *all* pairs (:class:`tailor.learn.dtree.ConfigTree`), trained at plan()
  on observed connections labelled with their pair's best configuration so far; maps {website,
  device, RTT / goodput / loss, region} to a configuration, so it also serves classes it has no label
  for. Arm ``exploit``. It also seeds every new pair's bootstrap (ConfigTron §4.1.2: "When a new NC
  shows up, the exploitation arm predicts a candidate configuration ... used as one of the initial
  samples in bootstrapping the Gaussian process bandit for the new NC"; §4.3).

Context-based switching: a pair whose GP search has not met its stopping rule is in *bootstrap* mode
(GP arm only, deterministic); once it has, it is in *steady state*: epsilon arm with probability
``epsilon``, DT arm otherwise (§3.1: "random exploration through epsilon-bandit continues after EI
threshold is met"). Unknown /24s get the default (Fig. 3 steps 1-2), and the telemetry of that
connection (goodput, loss, handshake RTT) classifies it, so the default's PLT reaches both the pair's
data and the NCSpread lists. Before the first tree (and in the NoDT ablation, which has none) a new
pair's first bootstrap sample is the default configuration instead.

Best configuration of a pair (the DT labels): the lowest mean log-PLT over PerfMemory, shrunk towards
the pair's mean by one pseudo-observation, so one lucky page load does not crown a configuration
(PLT noise is right-skewed, App. F.7). Ablations (§6.3): ``configanator-nogp`` skips the EI search
(bootstrap, then steady state); ``configanator-nodt`` exploits each pair's own best instead of
the tree (and, having no tree, seeds bootstraps with the default).
"""

from __future__ import annotations

import math
from collections import deque

import numpy as np

from tailor.grouping.nc import DEVICES, STRATEGIES, SpreadClasses
from tailor.learn import BOSearch
from tailor.learn.dtree import ConfigTree
from tailor.learn.search import EXPLOIT
from tailor.policies.base import Context, Decision, Outcome, Policy, register

NOISE_VAR = 0.04  # prior variance of one page load's log-PLT around its configuration's mean (~20 %)


def shrinkage_weight(means: np.ndarray, n: np.ndarray, noise_var: float) -> float:
    """Empirical-Bayes pseudo-count sigma^2 / tau^2: how many page loads the pair's mean is worth.

    tau^2 (spread of true configuration means) = variance of observed means minus their noise part;
    noisy pairs with similar configurations shrink hard, clear-cut pairs barely (clipped to [0.5, 20]).
    """
    if len(means) < 2:
        return 1.0
    tau2 = float(np.var(means) - noise_var * np.mean(1.0 / n))
    return float(np.clip(noise_var / max(tau2, 1e-6), 0.5, 20.0))


def _int(low: int):
    return (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= low, f"an integer >= {low}")


def _frac():
    return (lambda v: isinstance(v, float) and 0.0 <= v < 1.0, "a float in [0, 1)")


PARAMETERS = {
    "init_samples": (4, *_int(1)),  # §5
    "min_samples": (7, *_int(1)),  # §5 min_sample_tested
    "ei_threshold": (0.08, *_frac()),  # §5
    "epsilon": (0.1, *_frac()),  # not stated in the paper; the MAB+NC baseline's value
    "nc_spread": (0.05, *_frac()),  # §5 / App. D
    "classes": ("kmeans", lambda v: v in STRATEGIES, f"one of {STRATEGIES}"),  # App. F.6
    "max_k": (24, *_int(1)),
    "k_scale": (1.0, lambda v: isinstance(v, float) and v > 0, "a float > 0"),  # Fig. 7 study only
    "dt_leaves": (80, *_int(2)),  # §5
    "dt_leaf_mode": ("min", lambda v: v in ("max", "min"), "'max' or 'min'"),  # §5, reading: see learn/dtree.py
    "dt_window": (20000, *_int(100)),
    "perf_memory": (0, *_int(0)),  # App. F.7 / Table 4 (0 = all)
    "max_points": (60, *_int(2)),
    "noisy_ei": (True, lambda v: isinstance(v, bool), "True or False"),  # GPyOpt's EI, as the BO baselines
    "epsilon_pool": ("tried", lambda v: v in ("tried", "space"), "'tried' or 'space'"),  # §1.2, §3.1
    "seed_bootstrap": ("tree", lambda v: v in ("tree", "default"), "'tree' or 'default'"),  # ConfigTron §4.1.2
}


class _Configanator(Policy):
    parameters = PARAMETERS
    use_gp = True
    use_dt = True

    def _init_state(self) -> None:
        self._nc = SpreadClasses(self.classes, self.nc_spread, self.max_k, self.k_scale, seed=self.seed)
        self._tree = ConfigTree(self.dt_leaves, self.dt_leaf_mode, seed=self.seed)
        self._pairs: dict[str, BOSearch] = {}
        self._best: dict[str, int] = {}
        self._rows: deque = deque(maxlen=self.dt_window)  # (DT feature row, pair key)
        self._last_row: dict[str, np.ndarray] = {}
        self._log_sq: dict[str, np.ndarray] = {}  # pair -> per-configuration sum of squared log-PLT
        self._prefix_region: dict[str, str] = {}
        self._sites = {s: i for i, s in enumerate(self.env.websites)}
        self._n = len(self.space)
        self._all = np.arange(self._n)

    # -- features
    def _path(self, ctx: Context, out: Outcome | None = None) -> tuple[float, float, float]:
        """(RTT, goodput, loss): handshake RTT + archive, or the connection's own telemetry when unknown."""
        if ctx.history is None:
            return out.rtt_ms, out.goodput_mbps, out.loss
        return ctx.handshake_rtt_ms, ctx.history.goodput_mbps, ctx.history.loss

    def _key(self, path, ctx: Context) -> str:
        c = ctx.client
        return f"{self._nc.classify(*path, c.device, c.region, c.prefix)}|{ctx.website}"

    def _dt_row(self, path, device: str, region: str, website: str) -> np.ndarray:
        """Website one-hot first (fixed width), then path, device, region one-hot (vocabulary grows)."""
        w = len(self._sites)
        row = np.zeros(w + 3 + len(DEVICES) + len(self._nc.regions))
        if website in self._sites:
            row[self._sites[website]] = 1.0
        rtt, goodput, loss = path
        row[w:w + 3] = (math.log(max(rtt, 0.1)), math.log(max(goodput, 0.01)), math.log1p(1000.0 * loss))
        if device in DEVICES:
            row[w + 3 + DEVICES.index(device)] = 1.0
        if region in self._nc.regions:
            row[w + 3 + len(DEVICES) + self._nc.regions[region]] = 1.0
        return row

    # -- pairs
    def _pair(self, key: str, row: np.ndarray | None = None) -> BOSearch:
        """The pair's GP search, created at its first connection with its bootstrap's first sample (below)."""
        search = self._pairs.get(key)
        if search is None:
            search = self._pairs[key] = BOSearch(
                self.space, self._rng, init_samples=self.init_samples, min_samples=self.min_samples,
                ei_threshold=self.ei_threshold, perf_memory=self.perf_memory, max_points=self.max_points,
                noisy_ei=self.noisy_ei, first=self._first_sample(row))
        return search

    def _first_sample(self, row: np.ndarray | None) -> int:
        """First bootstrap sample of a new pair: the exploitation arm's prediction for the connection that
        opened it (ConfigTron §4.1.2/§4.3: "When a new NC shows up, the exploitation arm predicts a candidate
        configuration ... used as one of the initial samples in bootstrapping the GP bandit"); the default
        before the tree exists, without a tree (NoDT) or with ``seed_bootstrap='default'``."""
        if self.seed_bootstrap == "tree" and self.use_dt and self._tree.fitted and row is not None:
            return self._tree.predict(row)
        return self.space.default_index

    def _steady(self, search: BOSearch) -> bool:
        if self.use_gp:
            return search.stopped
        return search.pending_bootstrap() is None  # NoGP: LHS bootstrap only, no EI search

    def pair_best(self, key: str) -> int:
        """Lowest empirical-Bayes mean log-PLT of the pair (see module doc); the default before any data."""
        stats = self._pairs[key].stats
        n = stats.counts.astype(float)
        tried = n > 0
        if not tried.any():
            return self.space.default_index
        means = stats.means(log=True)[tried]
        grand = float(np.average(means, weights=n[tried]))
        weight = shrinkage_weight(means, n[tried], self._noise_var(key))
        score = np.full(len(n), np.inf)
        score[tried] = (n[tried] * means + weight * grand) / (n[tried] + weight)
        return int(np.argmin(score))

    def _noise_var(self, key: str) -> float:
        """Within-configuration variance of log-PLT for this pair from its own repeats (exploitation
        repeats one configuration many times); NOISE_VAR until there are any."""
        log_sq = self._log_sq.get(key)
        stats = self._pairs[key].stats
        n = stats.counts
        rep = n > 1
        if log_sq is None or not rep.any() or self.perf_memory:  # windowed sums: no matching squares
            return NOISE_VAR
        within = log_sq[rep] - stats.sums[1][rep] ** 2 / n[rep]
        return float(max(within.sum() / (n[rep] - 1).sum(), 1e-4))

    # -- per connection
    def group_of(self, ctx: Context) -> str:
        """The (class, website) pair of the connection, without opening its search (no side effect)."""
        if ctx.history is None:
            return "unknown"
        return self._key(self._path(ctx), ctx)

    def _select(self, ctx: Context) -> Decision:
        if ctx.history is None:
            return Decision(self.space.default_index, 1.0, "unknown", "default")
        path = self._path(ctx)
        key = self._key(path, ctx)
        search = self._pairs.get(key) or self._pair(key, self._dt_row(path, ctx.client.device, ctx.client.region,
                                                                      ctx.website))
        if not self._steady(search):
            if self.use_gp:
                config, phase = search.suggest()
                if phase != EXPLOIT:
                    return Decision(config, 1.0, key, phase)
            else:
                return Decision(search.pending_bootstrap(), 1.0, key, "bootstrap")
        greedy = self._exploit(key, path, ctx)
        pool = self._epsilon_pool(search)
        if self._rng.random() < self.epsilon:
            config, arm = int(pool[self._rng.integers(len(pool))]), "epsilon"
        else:
            config, arm = greedy, "exploit"
        prob = self.epsilon * (config in pool) / len(pool) + (1.0 - self.epsilon) * (config == greedy)
        return Decision(config, float(prob), key, arm)

    def _epsilon_pool(self, search: BOSearch) -> np.ndarray:
        """Configurations the epsilon arm draws from (uniformly): the pair's data points, i.e. every
        configuration its config-performance curve holds within PerfMemory ("randomly re-samples the data
        points", §3.1; "randomly re-sampling old configurations", §1.2), or the whole allowed space with
        ``epsilon_pool='space'``."""
        if self.epsilon_pool == "space":
            return self._all
        tried = np.flatnonzero(search.stats.counts > 0)
        return tried if len(tried) else self._all

    def _exploit(self, key: str, path, ctx: Context) -> int:
        if self.use_dt and self._tree.fitted:
            return self._tree.predict(self._dt_row(path, ctx.client.device, ctx.client.region, ctx.website))
        if key not in self._best:
            self._best[key] = self.pair_best(key)
        return self._best[key]

    def _observe(self, ctx: Context, decision: Decision, outcome: Outcome) -> None:
        c = ctx.client
        path = self._path(ctx, outcome)
        default = outcome.completion_ms if decision.config == self.space.default_index else None
        self._nc.add(*path, c.device, c.region, ctx.website, default)
        self._prefix_region[c.prefix] = c.region
        # the decision's group is a pair only when this policy chose it; a manager also feeds records whose
        # group is a table's "default" (or an operator's), which are classified here like unknown ones
        key = decision.group if decision.group in self._pairs else self._key(path, ctx)
        row = self._dt_row(path, c.device, c.region, ctx.website)
        self._pair(key, row).observe(decision.config, outcome.completion_ms)
        sq = self._log_sq.setdefault(key, np.zeros(self._n))
        sq[decision.config] += math.log(max(outcome.completion_ms, 1e-3)) ** 2
        self._rows.append((row, key))
        self._last_row[key] = row

    # -- slow loop
    def _plan(self, now: float) -> None:
        """Rebuild classes, refresh every steady pair's best, retrain the tree (UpdateFreq)."""
        self._nc.refit()
        self._best = {k: self.pair_best(k) for k, s in self._pairs.items() if self._steady(s)}
        if self.use_dt:
            self._fit_tree()

    def _fit_tree(self) -> None:
        """Rows = recent connections of labelled pairs, label = their pair's best (see ConfigTree); a
        pair's best is a single point per pair, per-connection rows carry its features' actual spread."""
        labelled = [(row, self._best[key]) for row, key in self._rows if key in self._best]
        if not labelled:
            return
        width = max(len(r) for r, _ in labelled)
        X = np.array([np.pad(r, (0, width - len(r))) for r, _ in labelled])
        self._tree.fit(X, np.array([y for _, y in labelled]))

    # -- decision tables
    def _group_choice(self, key: str, search: BOSearch) -> dict[int, float]:
        if not self._steady(search):
            return {search.peek() if self.use_gp else search.pending_bootstrap(): 1.0}
        row = self._last_row.get(key)
        greedy = self._tree.predict(row) if self.use_dt and self._tree.fitted and row is not None else \
            self._best.get(key, self.space.default_index)
        pool = self._epsilon_pool(search)
        probs = np.zeros(self._n)
        probs[pool] = self.epsilon / len(pool)
        probs[greedy] += 1.0 - self.epsilon
        return {i: float(p) for i, p in enumerate(probs) if p > 0}

    def table_groups(self) -> dict[str, dict[int, float]]:
        groups = {k: self._group_choice(k, s) for k, s in self._pairs.items()}
        return {"default": {self.space.default_index: 1.0}, **groups}

    def table_rules(self) -> list[dict]:
        """One rule per archived prefix x device x website whose class has a group."""
        archive = getattr(self.env, "archive", None)
        if archive is None:
            return []
        sites = sorted({k.split("|", 1)[1] for k in self._pairs})  # sorted: the table's rule order is reproducible
        rules = []
        for prefix, h in archive.items(0.0):
            region = self._prefix_region.get(prefix, "")
            for device in DEVICES:
                cls = self._nc.classify(h.rtt_ms, h.goodput_mbps, h.loss, device, region, prefix)
                rules.extend({"prefix": prefix, "sni": s, "device": device, "group": f"{cls}|{s}"}
                             for s in sites if f"{cls}|{s}" in self._pairs)
        return rules

    def model_stats(self) -> dict:
        """Sizes for reports and the benchmark."""
        return {"k": self._nc.k, "pairs": len(self._pairs), "steady": sum(self._steady(s) for s in self._pairs.values()),
                "tree_leaves": self._tree.n_leaves, "tree_fits": self._tree.n_fits, "rows": len(self._rows)}


@register("configanator")
class ConfiganatorPolicy(_Configanator):
    """The full learner: GP bootstrap, then epsilon exploration and DT exploitation."""


@register("configanator-nogp")
class ConfiganatorNoGPPolicy(_Configanator):
    """Ablation 'NoGP' (§6.3): no guided exploration; LHS bootstrap then epsilon + DT."""

    use_gp = False


@register("configanator-nodt")
class ConfiganatorNoDTPolicy(_Configanator):
    """Ablation 'NoDT' (§6.3): no decision tree; steady state exploits each pair's own best."""

    use_dt = False
