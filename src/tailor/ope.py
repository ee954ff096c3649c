"""Off-policy evaluation: estimate the mean cost per connection a target policy would have had, from logs of another.

Shared by the offline evaluation (``tailor evaluate``) and the live manager. Costs are page-load or completion
times (lower is better); a policy's *value* is its expected cost per record (connection).

Estimators
  * SNIPS, self-normalised inverse propensity scoring (Swaminathan & Joachims, "The Self-Normalized Estimator
    for Counterfactual Learning", NeurIPS 2015): ``sum(w c) / sum(w)`` with ``w = target_p / logged_p``;
    interval by the delta method.
  * Doubly robust (Dudík, Langford & Li, "Doubly Robust Policy Evaluation and Learning", ICML 2011): the
    direct-method value of each record plus the importance-weighted residual of the logged cost; unbiased if
    either the propensities or the cost model are right. Optionally with the self-normalised correction.
  * Direct method: the mean of the cost model's predictions under the target policy (biased if the model is).

Assumptions the caller must meet
  * ``logged_p[i]`` is the true probability with which the logging policy chose the action actually taken in
    record ``i`` (given that record's context), and ``target_p[i]`` the target policy's probability of that
    same action; records are independent draws.
  * Positivity: the target policy puts probability only on actions the logging policy could take
    (``target_p > 0`` only where ``logged_p > 0``). Passing ``logged_p`` of the action actually taken
    guarantees ``logged_p > 0`` here, but actions the logger never takes are invisible to SNIPS and DR.

Intervals are normal (CLT) intervals from per-record influence terms; ``bootstrap_interval`` cross-checks them.

Decision tables (what the evaluation and the manager share)
  * :class:`Logs`: logged connections (client address, SNI, device, logged configuration id, its logged marginal
    probability, completion time, optional context features for a cost model).
  * :func:`target_probabilities`: the marginal probability that a decision table gives each configuration to
    each logged connection, by the rule of spec/decision.md (resolved group, holdback ``h``:
    ``(1 - h) pi_g(c) + h [c = default]``; no group: the default with probability 1), vectorised over the
    distinct (client, SNI, device) of the logs.
  * :func:`table_value`: SNIPS (and with a cost model DR and DM) of a table's mean cost per connection.
  * :func:`fit_q_model`: a generic cross-fitted cost model for DR (:class:`QModel`: log cost from boosted trees
    over the context and, given the configurations' knob values, those values' effects; back-transformed per
    decile of the prediction by the decile's observed over predicted total).
  * :func:`ope_gate`: the manager's publication rule (``tailor manager --ope-gate``).

>>> est = snips([1.0, 2.0, 3.0, 4.0], [0.5, 0.5, 0.25, 0.25], [0.5, 0.5, 0.5, 0.5])
>>> print(f"{est.estimator} {est.value:.3f} n={est.n} ess={est.ess:.2f}")
snips 2.833 n=4 ess=3.60
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.stats import norm, t as student_t
from threadpoolctl import threadpool_limits

__all__ = ["Estimate", "importance_weights", "snips", "doubly_robust", "direct_method", "bootstrap_interval", "Logs",
           "TargetProbs", "target_probabilities", "cohort_clusters", "table_value", "QModel", "fit_q_model", "ope_gate"]


@dataclass(frozen=True)
class Estimate:
    """An off-policy estimate of the mean cost per record under the target policy."""

    estimator: str  # "snips" | "dr" | "dm"
    value: float  # estimated mean cost per record under the target policy
    low: float  # confidence interval at `level`
    high: float
    n: int  # records used
    ess: float  # effective sample size of the importance weights, (sum w)^2 / sum w^2
    level: float
    # SNIPS only: the mean importance weight and its upper confidence bound. It is 1 in expectation where the logger
    # could give every configuration the target gives; the share of the target's choices no logged record could show
    # lowers it (1 - support), and self-normalisation values the target on the rest of the records alone
    support: float = float("nan")
    support_high: float = float("nan")


def _array(name: str, x: Any) -> np.ndarray:
    try:
        a = np.asarray(x, dtype=float)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{name}: must be an array of numbers ({e})") from None
    if a.ndim != 1:
        raise ValueError(f"{name}: must be 1-D, got shape {a.shape}")
    if a.size == 0:
        raise ValueError(f"{name}: must not be empty")
    bad = np.flatnonzero(~np.isfinite(a))
    if bad.size:
        raise ValueError(f"{name}: must be finite, got {a[bad[0]]} at index {bad[0]}")
    return a


def _in_range(name: str, a: np.ndarray, ok: np.ndarray, what: str) -> None:
    bad = np.flatnonzero(~ok)
    if bad.size:
        raise ValueError(f"{name}: must be {what}, got {a[bad[0]]} at index {bad[0]}")


def _arrays(**named: Any) -> dict[str, np.ndarray]:
    """Validate 1-D, non-empty, finite, equal-length arrays (the first one names the reference length)."""
    out = {k: _array(k, v) for k, v in named.items()}
    first, ref = next(iter(out.items()))
    for k, a in out.items():
        if a.size != ref.size:
            raise ValueError(f"{k}: length {a.size} does not match {first} length {ref.size}")
    if "cost" in out:
        _in_range("cost", out["cost"], out["cost"] >= 0, ">= 0")
    return out


def _check_level(level: float) -> float:
    if not (isinstance(level, (int, float, np.floating)) and 0.0 < float(level) < 1.0):
        raise ValueError(f"level: must be in (0, 1), got {level!r}")
    return float(level)


def _ess(w: np.ndarray) -> float:
    s2 = float(np.sum(w * w))
    return float(np.sum(w)) ** 2 / s2 if s2 > 0 else 0.0


def _quantile(level: float, dof: float | None) -> float:
    """The two-sided interval's quantile: normal, or Student's t with ``dof`` degrees of freedom (nan below 1)."""
    if dof is None:
        return float(norm.ppf(0.5 + level / 2))
    return float(student_t.ppf(0.5 + level / 2, dof)) if dof >= 1.0 else float("nan")


def _normal(estimator: str, terms: np.ndarray, value: float, ess: float, level: float,
            dof: float | None = None) -> Estimate:
    """Estimate whose interval is value ± q * sd(terms) / sqrt(n) (terms: per-record influence terms); q is the
    normal quantile, or Student's t with ``dof`` degrees of freedom (no interval below 1)."""
    n = terms.size
    if n < 2 or not np.isfinite(value):
        low = high = float("nan")
    else:
        half = _quantile(level, dof) * float(np.std(terms, ddof=1)) / np.sqrt(n)
        low, high = value - half, value + half
    return Estimate(estimator, float(value), float(low), float(high), int(n), float(ess), level)


def importance_weights(logged_p: Any, target_p: Any, clip: float | None = None) -> np.ndarray:
    """w_i = target_p_i / logged_p_i, optionally clipped from above at ``clip``."""
    a = _arrays(logged_p=logged_p, target_p=target_p)
    lp, tp = a["logged_p"], a["target_p"]
    _in_range("logged_p", lp, (lp > 0) & (lp <= 1), "in (0, 1]")
    _in_range("target_p", tp, (tp >= 0) & (tp <= 1), "in [0, 1]")
    w = tp / lp
    if clip is not None:
        if not (isinstance(clip, (int, float, np.floating)) and np.isfinite(clip) and clip > 0):
            raise ValueError(f"clip: must be a finite number > 0 or None, got {clip!r}")
        w = np.minimum(w, float(clip))
    return w


# Optimistic shrinkage of the doubly robust correction's weights (table_value's default): a weight w counts as
# lambda w / (w^2 + lambda), at most sqrt(lambda) / 2 = 50, so one record logged at probability 1/600 cannot move the
# estimate by 600 residuals (cellular x model seed 3 on model-tcp-v6: +43% from one 25-minute page load). Chosen on
# held-out seeds 100-103 of the ten acceptance cells among clips 100 / 50 / 20 and lambda 1e2 / 1e3 / 1e4, the
# lowest mean absolute error with ties to the weakest change (docs/tailor.md, "Shrunk weights").
DR_SHRINK = 1e4


def shrunk_weights(w: np.ndarray, shrink: float | None) -> np.ndarray:
    """Optimistic shrinkage of importance weights (Su, Dimakopoulou, Krishnamurthy and Dudik, ICML 2020):
    w' = lambda w / (w^2 + lambda), which keeps a weight much below sqrt(lambda) and pulls a larger one towards 0,
    so that a doubly robust estimate leans on its cost model where the logs barely support the target. ``None``:
    ``w`` unchanged (lambda -> infinity)."""
    if shrink is None:
        return w
    if not (isinstance(shrink, (int, float, np.floating)) and np.isfinite(shrink) and shrink > 0):
        raise ValueError(f"shrink: must be a finite number > 0 or None, got {shrink!r}")
    return float(shrink) * w / (w * w + float(shrink))


def snips(cost: Any, logged_p: Any, target_p: Any, *, level: float = 0.95, clip: float | None = None) -> Estimate:
    """Self-normalised IPS, sum(w c) / sum(w), with a delta-method interval.

    Influence term of record i: w_i (c_i - v) / mean(w). If every weight is 0 the value is undefined: nan, with
    interval (nan, nan) and ess 0. The interval's quantile is Student's t with ess - 1 degrees of freedom: the value
    rests on the records that carry the weight, and with one of them (ess 1) there is no interval (until 2026-12-07
    the normal quantile on n records: one record with weight gave a zero-width interval; found by review).
    """
    level = _check_level(level)
    c = _arrays(cost=cost, logged_p=logged_p, target_p=target_p)["cost"]
    w = importance_weights(logged_p, target_p, clip)
    sw = float(np.sum(w))
    if sw == 0:
        return Estimate("snips", float("nan"), float("nan"), float("nan"), int(c.size), 0.0, level, 0.0, 0.0)
    v = float(np.sum(w * c)) / sw
    support = _normal("support", w, float(np.mean(w)), 0.0, level)
    ess = _ess(w)
    return dataclasses.replace(_normal("snips", w * (c - v) / np.mean(w), v, ess, level, dof=ess - 1.0), support=support.value,
                               support_high=support.high)


def doubly_robust(
    cost: Any,
    logged_p: Any,
    target_p: Any,
    q_logged: Any,
    q_target: Any,
    *,
    level: float = 0.95,
    clip: float | None = None,
    self_normalise: bool = True,
    shrink: float | None = None,
) -> Estimate:
    """Doubly robust estimate: mean of q_target_i + w_i (c_i - q_logged_i).

    ``q_logged[i]``: the cost model's prediction for the logged action of record i; ``q_target[i]``: the
    direct-method value of record i, sum_a pi_target(a | x_i) qhat(x_i, a). With ``self_normalise`` the
    correction is sum(w r) / sum(w) instead of mean(w r) (r = c - q_logged); if every weight is 0 it is taken
    as 0, i.e. the estimate falls back to the direct method (ess 0 flags this). The interval comes from the
    sample variance of the per-record (influence) terms. ``shrink``: the correction's weights shrunk as in
    :func:`shrunk_weights` (the ess reported is the unshrunk weights').
    """
    level = _check_level(level)
    a = _arrays(cost=cost, logged_p=logged_p, target_p=target_p, q_logged=q_logged, q_target=q_target)
    raw = importance_weights(logged_p, target_p, clip)
    w = shrunk_weights(raw, shrink)
    r = a["cost"] - a["q_logged"]
    qt = a["q_target"]
    if not self_normalise:  # t on ess - 1 too: no interval where no record supports the target (the direct method)
        terms = qt + w * r
        ess = _ess(raw)
        return _normal("dr", terms, float(np.mean(terms)), ess, level, dof=ess - 1.0)
    sw = float(np.sum(w))
    if sw == 0:
        return _normal("dr", qt, float(np.mean(qt)), 0.0, level)
    corr = float(np.sum(w * r)) / sw
    terms = qt + corr + w * (r - corr) / np.mean(w)
    ess = _ess(raw)  # the self-normalised correction rests on the weighted records, as SNIPS does: t on ess - 1
    return _normal("dr", terms, float(np.mean(qt)) + corr, ess, level, dof=ess - 1.0)


def direct_method(q_target: Any, *, level: float = 0.95) -> Estimate:
    """Direct method: mean of the model's per-record target values (ess = n: no importance weights)."""
    level = _check_level(level)
    qt = _arrays(q_target=q_target)["q_target"]
    return _normal("dm", qt, float(np.mean(qt)), float(qt.size), level)


def bootstrap_interval(
    fn: Callable[..., float | Estimate],
    arrays: tuple[np.ndarray, ...],
    *,
    level: float = 0.95,
    n_boot: int = 500,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile bootstrap interval of ``fn(*arrays)``, resampling records (rows of all arrays jointly).

    ``fn`` returns a number or an Estimate (its value is used). Resamples whose value is not finite are dropped;
    if none is finite the interval is (nan, nan).
    """
    level = _check_level(level)
    if not isinstance(n_boot, (int, np.integer)) or n_boot < 1:
        raise ValueError(f"n_boot: must be an integer >= 1, got {n_boot!r}")
    if not arrays:
        raise ValueError("arrays: must hold at least one array")
    arrs = [np.asarray(x) for x in arrays]
    n = arrs[0].shape[0] if arrs[0].ndim else 0
    for i, x in enumerate(arrs):
        if x.ndim == 0 or x.shape[0] != n or n == 0:
            raise ValueError(f"arrays: element {i} must have the same non-zero length as element 0 ({n})")
    rng = np.random.default_rng(seed)
    stats = np.empty(n_boot)
    for b in range(n_boot):
        idx = rng.integers(0, n, size=n)
        out = fn(*(x[idx] for x in arrs))
        stats[b] = out.value if isinstance(out, Estimate) else float(out)
    stats = stats[np.isfinite(stats)]
    if stats.size == 0:
        return float("nan"), float("nan")
    lo, hi = np.quantile(stats, [0.5 - level / 2, 0.5 + level / 2])
    return float(lo), float(hi)


# -- decision tables: what a table would have cost on logged connections

def _strings(name: str, x: Any, n: int | None, optional: bool) -> np.ndarray:
    a = np.asarray(x, dtype=object)
    if a.ndim != 1:
        raise ValueError(f"{name}: must be 1-D, got shape {a.shape}")
    if n is not None and a.size != n:
        raise ValueError(f"{name}: length {a.size} does not match client length {n}")
    for i, v in enumerate(a):
        if not (isinstance(v, str) or (optional and v is None)):
            raise ValueError(f"{name}: must be strings{' or None' if optional else ''}, got {v!r} at index {i}")
    return a


@dataclass(frozen=True, eq=False)
class Logs:
    """Logged connections, one entry per record, all arrays of the same length.

    ``client``: the client address (what a table's rules match); ``sni``, ``device``: the TLS server name and
    device class, or None when unknown; ``config``: the id of the configuration the connection got;
    ``probability``: the logged marginal probability of that configuration (in (0, 1]); ``cost``: the
    completion time (ms). ``features``: optional numeric context features for a cost model (name -> array,
    NaN = unknown), used as given: pass e.g. log RTT and log goodput rather than the raw values.
    """

    client: Any
    sni: Any
    device: Any
    config: Any
    probability: Any
    cost: Any
    features: dict[str, Any] | None = None

    def __post_init__(self):
        client = _strings("client", self.client, None, False)
        n = client.size
        if n == 0:
            raise ValueError("client: must not be empty")
        num = _arrays(probability=self.probability, cost=self.cost)
        if num["probability"].size != n:
            raise ValueError(f"probability: length {num['probability'].size} does not match client length {n}")
        p = num["probability"]
        _in_range("probability", p, (p > 0) & (p <= 1), "in (0, 1]")
        feats = {}
        for k, v in (self.features or {}).items():
            f = np.asarray(v, dtype=float)
            if f.shape != (n,):
                raise ValueError(f"features[{k!r}]: must be 1-D of length {n}, got shape {f.shape}")
            feats[str(k)] = f
        for name, value in (("client", client), ("sni", _strings("sni", self.sni, n, True)),
                            ("device", _strings("device", self.device, n, True)),
                            ("config", _strings("config", self.config, n, False)),
                            ("probability", p), ("cost", num["cost"]), ("features", feats)):
            object.__setattr__(self, name, value)

    def __len__(self) -> int:
        return int(self.client.size)

    def subset(self, index: Any) -> Logs:
        """The records selected by ``index`` (a boolean mask or integer indices)."""
        idx = np.asarray(index)
        return Logs(self.client[idx], self.sni[idx], self.device[idx], self.config[idx], self.probability[idx],
                    self.cost[idx], {k: v[idx] for k, v in self.features.items()})


@dataclass(frozen=True, eq=False)
class TargetProbs:
    """A table's marginal probabilities on logged connections.

    ``probs[row[i], k]`` is the probability that the table gives ``config_ids[k]`` to record ``i``; the rows are
    the table groups the logged connections resolve to, plus one last row for connections no rule matches (the
    default with probability 1). ``group`` names each row's group (None for the last row).
    """

    config_ids: tuple[str, ...]
    probs: np.ndarray  # (rows, K)
    row: np.ndarray  # (n,) row of probs per record
    group: tuple[str | None, ...]
    default: str

    def matrix(self) -> np.ndarray:
        """(n, K): the table's distribution over ``config_ids`` for every record."""
        return self.probs[self.row]

    def of(self, config: Any) -> np.ndarray:
        """Probability of ``config[i]`` (a configuration id per record) for record ``i``; 0 if not in the table."""
        col = {c: k for k, c in enumerate(self.config_ids)}
        cfg = np.asarray(config, dtype=object)
        ks = np.fromiter((col.get(c, -1) for c in cfg), dtype=np.int64, count=cfg.size)
        out = np.zeros(cfg.size)
        hit = ks >= 0
        out[hit] = self.probs[self.row[hit], ks[hit]]
        return out

    @property
    def matched(self) -> np.ndarray:
        """Whether a rule of the table matched each record."""
        return self.row < self.probs.shape[0] - 1


def _resolver(table: Any):
    from tailor.table import DecisionTable

    return table if isinstance(table, DecisionTable) else DecisionTable(table)


def target_probabilities(table: Any, logs: Logs) -> TargetProbs:
    """Marginal probability of each configuration of ``table`` for every logged connection (spec/decision.md).

    ``table``: a decision table document (validated here) or a :class:`tailor.table.DecisionTable`. The group of
    each distinct (client, SNI, device) is resolved once; a group's distribution is ``(1 - h) pi_g(c) +
    h [c = default]`` with the table's holdback ``h`` (the marginal over the cohort draw, which is what an edge
    logs); a connection no rule matches gets the default with probability 1. Only the groups the logs reach are
    materialised, with the configurations those groups (and the default) can give.
    """
    dt = _resolver(table)
    doc, h, default = dt.doc, dt.holdback, dt.default
    keys: dict[tuple, int] = {}
    inv = np.fromiter((keys.setdefault(k, len(keys)) for k in zip(logs.client, logs.sni, logs.device)),
                      dtype=np.int64, count=len(logs))
    groups: dict[str, int] = {}
    key_row = np.empty(len(keys), dtype=np.int64)
    for j, (addr, sni, device) in enumerate(keys):
        try:
            gid = dt.group_of(addr, sni, device)
        except ValueError as err:
            raise ValueError(f"client: {addr!r} is not an IP address ({err})") from None
        key_row[j] = -1 if gid is None else groups.setdefault(gid, len(groups))
    choices = {g["id"]: g["choices"] for g in doc["groups"] if g["id"] in groups}
    cids = list(dict.fromkeys([default] + [c["config"] for gid in groups for c in choices[gid]]))
    col = {c: k for k, c in enumerate(cids)}
    probs = np.zeros((len(groups) + 1, len(cids)))
    for gid, r in groups.items():
        for c in choices[gid]:
            probs[r, col[c["config"]]] += (1.0 - h) * c["p"]
        probs[r, 0] += h
    probs[-1, 0] = 1.0
    np.clip(probs, 0.0, 1.0, out=probs)
    key_row[key_row < 0] = len(groups)
    return TargetProbs(tuple(cids), probs, key_row[inv], tuple(groups) + (None,), default)


def cohort_clusters(clients: Any) -> np.ndarray:
    """Cluster label per record: the client's cohort unit (spec/decision.md: an IPv4 address, an IPv6 /64), the
    unit a salted table draws holdback and configuration for -- so a client's connections share them."""
    from tailor.table.decide import cohort_unit

    units: dict[str, int] = {}
    labels: dict[bytes, int] = {}
    for c in dict.fromkeys(clients):
        units[c] = labels.setdefault(cohort_unit(c), len(labels))
    return np.fromiter((units[c] for c in clients), dtype=np.int64, count=len(clients))


def _clustered(est: Estimate, terms: np.ndarray, cluster: np.ndarray, weights: np.ndarray | None = None) -> Estimate:
    """``est`` with a cluster-robust interval: from the variance of the per-cluster sums of the centred influence
    terms, with Student's t quantile on G - 1 degrees of freedom (G clusters). With importance ``weights`` G is the
    clusters' effective number, (sum of W_g)^2 / sum of W_g^2 with W_g a cluster's weight: an estimate whose
    weight sits in two clients' records rests on two clusters however many others the logs hold (Carter, Schnepel
    and Steigerwald 2017, "effective number of clusters"). Until 2026-12-07 the normal quantile on every cluster
    with records: one client carrying a candidate's weight gave a zero-width interval, and the OPE gate published a
    table 60% slower than the current one 8-15% of the time (found by review). Fewer than two (effective) clusters:
    no interval. The same interval as :func:`_normal` when every record is its own cluster."""
    n = terms.size
    if not np.isfinite(est.value) or n < 2:
        return est
    sums = np.bincount(cluster, weights=terms - np.mean(terms))
    g = int(np.count_nonzero(np.bincount(cluster)))
    eff = float(g)
    if weights is not None:
        per = np.bincount(cluster, weights=weights)
        eff = _ess(per)
    if g < 2 or not eff >= 2.0:  # (no weight at all: no interval)
        return dataclasses.replace(est, low=float("nan"), high=float("nan"))
    se = float(np.sqrt(g / (g - 1) * np.sum(sums * sums))) / n
    half = _quantile(est.level, eff - 1.0) * se
    return dataclasses.replace(est, low=est.value - half, high=est.value + half)


def table_value(table: Any, logs: Logs, *, q: Callable[[Logs, list[str]], np.ndarray] | None = None,
                level: float = 0.95, clip: float | None = None, target: TargetProbs | None = None,
                cluster: Any = None, shrink: float | None = DR_SHRINK) -> dict[str, Estimate]:
    """Estimated mean cost per connection had ``table`` been applied to the logged connections.

    Returns ``{"snips": ...}``, and with a cost model ``q`` also ``"dr"`` (doubly robust) and ``"dm"`` (direct
    method). ``q(logs, config_ids)`` returns an (n, len(config_ids)) array of predicted costs (e.g. a
    :class:`QModel` from :func:`fit_q_model`); it is asked for the table's configurations and the logged ones.

    DR is the plain (not self-normalised) form: where the logs do not support the table (contexts in which the
    logger never gave the table's configurations) it keeps the model's value instead of scaling up the
    correction measured where they do (`tailor evaluate`'s default scenario, configanator's logs: largest error
    7% against 16% self-normalised). When no logged record has a configuration the table could give it
    (positivity fails everywhere) SNIPS is nan with ess 0 and DR is the direct method (ess 0 flags it).
    ``target``: the table's :func:`target_probabilities` on these logs when the caller has them already.

    ``shrink``: DR's weights shrunk as in :func:`shrunk_weights` (``None``: plain DR; SNIPS is never shrunk).

    ``cluster``: a label per record (e.g. :func:`cohort_clusters` of the clients) for cluster-robust intervals.
    Records are otherwise taken as independent, which they are not under a salted table: a client keeps its
    holdback membership and its configuration draw for the whole table version, so its connections move
    together and independent-record intervals come out too narrow.
    """
    level = _check_level(level)
    tp = target_probabilities(table, logs) if target is None else target
    target_p = tp.of(logs.config)
    groups = None
    if cluster is not None:
        groups = np.unique(np.asarray(cluster), return_inverse=True)[1].ravel()
        if groups.size != len(logs):
            raise ValueError(f"cluster: length {groups.size} does not match the logs' {len(logs)}")
    w = importance_weights(logs.probability, target_p, clip)
    out = {"snips": snips(logs.cost, logs.probability, target_p, level=level, clip=clip)}
    if groups is not None and np.sum(w) > 0:
        out["snips"] = _clustered(out["snips"], w * (logs.cost - out["snips"].value) / np.mean(w), groups, w)
        support = _clustered(_normal("support", w, float(np.mean(w)), 0.0, level), w, groups, w)
        out["snips"] = dataclasses.replace(out["snips"], support_high=support.high)
    if q is None:
        return out
    known = set(tp.config_ids)
    logged = [c for c in dict.fromkeys(logs.config) if c not in known]
    cols = list(tp.config_ids) + logged
    qm = np.asarray(q(logs, cols), dtype=float)
    if qm.shape != (len(logs), len(cols)):
        raise ValueError(f"q: must return shape {(len(logs), len(cols))}, got {qm.shape}")
    if not np.all(np.isfinite(qm)):
        raise ValueError("q: predictions must be finite")
    index = {c: k for k, c in enumerate(cols)}
    k_logged = np.fromiter((index[c] for c in logs.config), dtype=np.int64, count=len(logs))
    q_logged = qm[np.arange(len(logs)), k_logged]
    q_target = np.einsum("ij,ij->i", tp.matrix(), qm[:, :len(tp.config_ids)])
    out["dr"] = doubly_robust(logs.cost, logs.probability, target_p, q_logged, q_target, level=level, clip=clip,
                              self_normalise=False, shrink=shrink)
    out["dm"] = direct_method(q_target, level=level)
    if groups is not None:
        # the correction's weights set the effective clusters, as for SNIPS (until 2026-12-07 every client counted:
        # a correction resting on one or two clients got a t on all of them, 48-74% coverage; found by review)
        ws = shrunk_weights(w, shrink)
        out["dr"] = _clustered(out["dr"], q_target + ws * (logs.cost - q_logged), groups, ws)
        out["dm"] = _clustered(out["dm"], q_target, groups)
    return out


# -- a generic cost model for doubly robust estimates

BACKFIT_ROUNDS = 3
EFFECTS = ("boosted", "ridge")  # how the cost model learns the configurations' effects (QModel's ``effects``)
# knob_interactions="logged": a configuration with fewer training records gets the additive model. 25 since 2026-11-29
# (50 before), chosen on held-out seeds 100-103 (docs/tailor.md, "Interactions for rarer configurations")
MIN_LOGGED = 25
LOSSES = ("log", "poisson")  # what the boosted model fits (QModel's ``loss``)
SMEARINGS = ("mean", "ratio")  # how a log-cost prediction is back-transformed (QModel's ``smearing``)
BOOSTED_ITER, RIDGE_ITER = 200, 100  # boosting iterations of f by default (boosted: f carries the knob effects too)
MAX_SITES, MAX_DEVICES = 40, 10  # one-hot levels of the cost model (the most frequent; the rest share one)


def _levels(values: np.ndarray, cap: int) -> dict:
    vals, counts = np.unique(np.array(["" if v is None else v for v in values], dtype=object).astype(str),
                             return_counts=True)
    top = vals[np.argsort(-counts, kind="stable")][:cap]
    return {v: k for k, v in enumerate(top)}


class QModel:
    """Predicted mean cost of every configuration for logged connections (the ``q`` of :func:`table_value`).

    Log cost (log1p) = f(context) + g_c(context):

    * f: a histogram gradient-boosting regressor (scikit-learn) on the context alone -- site and device
      (categorical: the most frequent ``MAX_SITES`` / ``MAX_DEVICES`` levels, the rest share one) and the numeric
      features of the logs -- fitted on every record whatever its configuration;
    * g_c: per configuration, a ridge regression of f's residuals on phi = [1, site one-hot, device one-hot,
      standardised numeric features] with penalty ``shrink`` (in records): a configuration with few records
      stays near f, one never logged gets f.
    * with ``knobs`` (configuration id -> its knob values), g_c(x) = phi(x) . (sum over c's knob values v of
      beta_v + gamma_c): every knob value has its own context-modulated effect beta_v (one ridge over all
      records, penalty ``knob_shrink``), shared by every configuration that has that value, and gamma_c is the
      configuration's own deviation from the sum (its interactions). A configuration the logger rarely or never
      gave in a context is then predicted from the configurations that share its knob values there, instead of
      from f alone (the logger's mix).
    * f and g are fitted by backfitting (``BACKFIT_ROUNDS``), so that f does not take the configurations'
      effects through contexts the logging policy treats differently.
    * ``effects="boosted"`` (the default when ``knobs`` are given): the knob values are inputs of f itself, each
      as the rank of its value, so the trees learn how a knob value's effect changes with the context (a band of
      RTTs or goodputs, an interaction with the site), which a linear-in-context beta_v cannot follow. A tree's
      branch may use the context and one knob (scikit-learn's ``interaction_cst``; everywhere with
      ``knob_interactions=False``, ``True`` lifts it), so the knobs' effects add up in log cost as beta_v's do and
      a combination the logs lack is predicted from the values it shares with logged ones. There is no beta_v,
      no gamma_c (on held-out worlds a per-configuration ridge on f's residuals only added noise: docs/tailor.md,
      "Off-policy estimate") and no backfitting; ``max_iter`` defaults to ``BOOSTED_ITER``. ``effects="ridge"``:
      the linear beta_v above.
    * ``knob_interactions="logged"`` (boosted; the default, chosen on held-out worlds: docs/tailor.md): two
      models, the additive one above and one whose branches may use several knobs; a configuration with at least
      ``min_logged`` training records is predicted by the second (its own interactions are in the logs), any
      other by the first (a combination the logs lack or hold too rarely: trees with interactions put it in the
      leaf of one of its knob values and miss the other's effect). With ``site_shrink`` (pseudo-records; None: off)
      the second model's interaction on a website where the configuration has few training records is shrunk
      towards its interaction pooled over websites (:meth:`_site_shrunk`).

    Back-transformed per decile of the predicted log cost (the noise is heteroscedastic) by the decile's observed
    over predicted total (``smearing="ratio"``, the default, chosen on held-out worlds: docs/tailor.md; cross-fitted
    predictions spread wider than the truth, and Duan's mean exp(residual), ``smearing="mean"``, then inflates the
    mean, see :func:`_smearing`); ``loss="poisson"`` (boosted) fits the mean of the cost under a log link
    instead, with no back-transformation (an option: neutral on held-out worlds, docs/tailor.md). Predictions
    clipped to the range of the logged costs. Cross-fitted (``folds``): records the model was fitted on get
    predictions from the fold model that did not see them; other logs the mean of the fold models.
    """

    def __init__(self, logs: Logs, config_ids: list[str] | None = None, *, folds: int = 2, shrink: float = 20.0,
                 max_iter: int | None = None, seed: int = 0, knobs: Mapping[str, Mapping[str, Any]] | None = None,
                 knob_shrink: float = 20.0, effects: str = "boosted", knob_interactions: bool | str = "logged",
                 loss: str = "log", min_logged: int = MIN_LOGGED, smearing: str = "ratio",
                 site_shrink: float | None = None):
        if not (isinstance(folds, (int, np.integer)) and folds >= 1):
            raise ValueError(f"folds: must be an integer >= 1, got {folds!r}")
        for name, v in (("shrink", shrink), ("knob_shrink", knob_shrink)):
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise ValueError(f"{name}: must be a finite number > 0, got {v!r}")
        if effects not in EFFECTS:
            raise ValueError(f"effects: must be one of {', '.join(EFFECTS)}, got {effects!r}")
        if loss not in LOSSES:
            raise ValueError(f"loss: must be one of {', '.join(LOSSES)}, got {loss!r}")
        if smearing not in SMEARINGS:
            raise ValueError(f"smearing: must be one of {', '.join(SMEARINGS)}, got {smearing!r}")
        self.smearing = smearing
        if not (isinstance(knob_interactions, bool) or knob_interactions == "logged"):
            raise ValueError(f"knob_interactions: must be False, True or 'logged', got {knob_interactions!r}")
        if not (isinstance(min_logged, (int, np.integer)) and min_logged >= 0):
            raise ValueError(f"min_logged: must be an integer >= 0, got {min_logged!r}")
        if site_shrink is not None and not (isinstance(site_shrink, (int, float)) and not isinstance(site_shrink, bool)
                                            and math.isfinite(site_shrink) and site_shrink > 0):
            raise ValueError(f"site_shrink: must be None or a finite number > 0, got {site_shrink!r}")
        self.site_shrink = None if site_shrink is None else float(site_shrink)
        n = len(logs)
        self.config_ids = list(dict.fromkeys(list(config_ids or []) + list(dict.fromkeys(logs.config))))
        self._col = {c: k for k, c in enumerate(self.config_ids)}
        values, described = self._knob_values(knobs)
        self._design = self._knob_design(values, described)
        # boosted: the knob values are inputs of the boosted model (their ranks, NaN where undescribed)
        self.effects = effects if self._design is not None else "ridge"
        if loss != "log" and self.effects != "boosted":
            raise ValueError(f"loss: {loss!r} needs effects='boosted' and the configurations' knob values")
        self.loss = loss
        if max_iter is None:
            max_iter = BOOSTED_ITER if self.effects == "boosted" else RIDGE_ITER
        self._codes_k = (self._knob_codes(values, described) if self.effects == "boosted"
                         else np.zeros((len(self.config_ids), 0)))
        self.knob_shrink = float(knob_shrink)
        self._sites, self._devices = _levels(logs.sni, MAX_SITES), _levels(logs.device, MAX_DEVICES)
        self._feats = sorted(logs.features)
        raw = self._numeric(logs)
        self._median = np.array([np.nanmedian(c) if np.any(np.isfinite(c)) else 0.0 for c in raw.T])
        filled = self._fill(raw)
        self._mu = filled.mean(axis=0)
        sd = filled.std(axis=0)
        self._sd = np.where(sd > 0, sd, 1.0)
        self.shrink = float(shrink)
        y = np.log1p(logs.cost)
        self._range = (float(y.min()), float(y.max()))
        x, phi = self._x(logs), self._phi(logs)
        cfg = np.fromiter((self._col[c] for c in logs.config), dtype=np.int64, count=n)
        folds = int(min(folds, max(1, n // 50)))
        self._fold = np.random.default_rng(seed).permutation(n) % folds
        x = np.hstack([x, self._codes_k[cfg]])
        cat = np.zeros(x.shape[1], dtype=bool)
        cat[:2] = True
        # (f, coefficients (d x K), smearing edges, smearing factors) per fold; with "logged" (boosted only)
        # _free holds the folds of the model with interactions, for the configurations with >= min_logged records
        self._logged = np.bincount(cfg, minlength=len(self.config_ids)) >= min_logged
        # site_shrink: training records per (configuration, site code), what a site-specific interaction rests on
        if self.site_shrink is not None:
            self._n_site = np.zeros((len(self.config_ids), len(self._sites) + 1))
            np.add.at(self._n_site, (cfg, x[:, 0].astype(np.int64)), 1.0)
        both = knob_interactions == "logged" and self.effects == "boosted"
        self._models, self._free = [], []
        with threadpool_limits(1):  # OpenMP threads cost more than they bring at this size, above all on a busy machine
            for k in range(folds):
                self._models.append(self._fit_fold(k, folds, x, phi, y, cfg, cat, max_iter, seed,
                                                   free=knob_interactions is True))
                if both:
                    self._free.append(self._fit_fold(k, folds, x, phi, y, cfg, cat, max_iter, seed, free=True))
        self._train = logs
        self._cache: dict[str, np.ndarray] = {}
        self._cache_logs: Logs | None = None

    def _fit_fold(self, k, folds, x, phi, y, cfg, cat, max_iter, seed, free) -> tuple:
        from sklearn.ensemble import HistGradientBoostingRegressor

        n = y.size
        train = self._fold != k if folds > 1 else np.ones(n, dtype=bool)
        held = ~train if folds > 1 else train
        m, d = self._codes_k.shape[1], x.shape[1] - self._codes_k.shape[1]
        # unless free, knob values interact with the context, never with each other: the effects add up in log
        # cost, so a combination the logs lack is predicted from the values it shares with logged ones
        constraints = [list(range(d)) + [d + j] for j in range(m)] if m and not free else None
        f = HistGradientBoostingRegressor(loss="squared_error" if self.loss == "log" else self.loss,
                                          max_iter=max_iter, learning_rate=0.1, max_leaf_nodes=31,
                                          min_samples_leaf=20, categorical_features=cat, early_stopping=False,
                                          random_state=seed, interaction_cst=constraints)
        xt, pt, yt, ct = x[train], phi[train], y[train], cfg[train]
        offset = np.zeros(yt.size)
        gamma = np.zeros((pt.shape[1], len(self.config_ids)))  # boosted: f has the configurations' effects
        if self.loss != "log":  # poisson: the mean of 1 + cost under a log link, no back-transformation
            f.fit(xt, np.exp(yt))
            return f, gamma, np.zeros(0), np.ones(1)
        if self.effects == "boosted":
            f.fit(xt, yt)
        for _ in range(BACKFIT_ROUNDS if self.effects == "ridge" else 0):
            # ridge: backfitting, f alone would absorb config effects its context correlates with
            f.fit(xt, yt - offset)
            r = yt - f.predict(xt)
            shared = self._fit_knobs(pt, r, ct)  # (d x K): each configuration's sum of its knob values' effects
            gamma = shared + self._fit_gamma(pt, r - np.einsum("ij,ij->i", pt, shared[:, ct].T), ct)
            offset = np.einsum("ij,ij->i", pt, gamma[:, ct].T)
        pred = self._clip(f.predict(x[held]) + np.einsum("ij,ij->i", phi[held], gamma[:, cfg[held]].T))
        edges, factors = _smearing(pred, y[held] - pred, ratio=self.smearing == "ratio")
        return f, gamma, edges, factors

    # features
    def _numeric(self, logs: Logs) -> np.ndarray:
        n = len(logs)
        cols = [logs.features[k] if k in logs.features else np.full(n, np.nan) for k in self._feats]
        return np.column_stack(cols) if cols else np.zeros((n, 0))

    def _fill(self, raw: np.ndarray) -> np.ndarray:
        return np.where(np.isfinite(raw), raw, self._median[None, :]) if raw.shape[1] else raw

    def _codes(self, values: np.ndarray, levels: dict) -> np.ndarray:
        return np.fromiter((levels.get("" if v is None else v, len(levels)) for v in values), dtype=float,
                           count=values.size)

    def _x(self, logs: Logs) -> np.ndarray:
        """The boosted model's input: site code, device code, numeric features (NaN: unknown)."""
        return np.column_stack([self._codes(logs.sni, self._sites), self._codes(logs.device, self._devices),
                                self._numeric(logs)])

    def _phi(self, logs: Logs) -> np.ndarray:
        """The per-configuration ridge's input: 1, site and device one-hot, standardised numeric features."""
        n = len(logs)
        parts = [np.ones((n, 1))]
        for values, levels in ((logs.sni, self._sites), (logs.device, self._devices)):
            oh = np.zeros((n, len(levels) + 1))
            oh[np.arange(n), self._codes(values, levels).astype(np.int64)] = 1.0
            parts.append(oh)
        if self._feats:
            parts.append((self._fill(self._numeric(logs)) - self._mu) / self._sd)
        return np.hstack(parts)

    def _knob_values(self, knobs: Mapping[str, Mapping[str, Any]] | None) -> tuple[dict, dict]:
        """({knob: its values' reprs, sorted (numbers by value, others by repr)} over the knobs that vary among the
        configurations ``knobs`` describes, {configuration: {knob: repr of its value}}); both empty without
        ``knobs``. The one reading of ``knobs`` that the ridge's indicators and the boosted model's ranks share."""
        if knobs is None:
            return {}, {}
        if not isinstance(knobs, Mapping):
            raise ValueError(f"knobs: must map configuration ids to their knob values, got {type(knobs).__name__}")
        described, seen = {}, {}
        for c in self.config_ids:
            if c not in knobs:
                continue
            kv = knobs[c]
            if not isinstance(kv, Mapping):
                raise ValueError(f"knobs[{c!r}]: must map knob names to values, got {type(kv).__name__}")
            described[c] = {str(k): repr(v) for k, v in kv.items()}
            for k, v in kv.items():
                seen.setdefault(str(k), {})[repr(v)] = v
        order = {k: sorted(vs, key=lambda r, vs=vs: (0, float(vs[r]), r) if isinstance(vs[r], (int, float))
                           else (1, 0.0, r)) for k, vs in seen.items()}
        return {k: order[k] for k in sorted(order) if len(order[k]) > 1}, described

    def _knob_design(self, values: dict, described: dict) -> np.ndarray | None:
        """(K x m) indicators of each configuration's knob values (:meth:`_knob_values`); a configuration ``knobs``
        does not describe has a row of zeros. None when no knob varies."""
        index = {(k, v): j for j, (k, v) in enumerate((k, v) for k in values for v in values[k])}
        if not index:
            return None
        design = np.zeros((len(self.config_ids), len(index)))
        for c, kv in described.items():
            for k, v in kv.items():
                j = index.get((k, v))
                if j is not None:
                    design[self._col[c], j] = 1.0
        return design

    def _knob_codes(self, values: dict, described: dict) -> np.ndarray:
        """(K x knobs) rank of each configuration's value of every knob that varies (:meth:`_knob_values`; NaN: not
        described). Ordinal inputs, not categorical: with the interaction constraints, scikit-learn's categorical
        splits did not add the knobs' effects up (a held-out combination came out 36% off in the unit test),
        threshold splits on the ranks do."""
        codes = np.full((len(self.config_ids), len(values)), np.nan)
        for c, kv in described.items():
            for j, k in enumerate(values):
                if k in kv:
                    codes[self._col[c], j] = values[k].index(kv[k])
        return codes

    def _fit_knobs(self, phi: np.ndarray, r: np.ndarray, cfg: np.ndarray) -> np.ndarray:
        """Ridge of r on phi (x) knob-value indicators, from per-configuration Gram blocks; returns the implied
        (d x K) coefficients of every configuration (zeros without a knob design)."""
        d, K = phi.shape[1], len(self.config_ids)
        if self._design is None:
            return np.zeros((d, K))
        m = self._design.shape[1]
        gram, rhs = np.zeros((m * d, m * d)), np.zeros(m * d)
        for k in np.unique(cfg):
            rows = cfg == k
            p, dk = phi[rows], self._design[k]
            if not dk.any():
                continue
            gram += np.kron(np.outer(dk, dk), p.T @ p)
            rhs += np.kron(dk, p.T @ r[rows])
        beta = np.linalg.solve(gram + self.knob_shrink * np.eye(m * d), rhs).reshape(m, d)
        return (self._design @ beta).T

    def _fit_gamma(self, phi: np.ndarray, r: np.ndarray, cfg: np.ndarray) -> np.ndarray:
        d, K = phi.shape[1], len(self.config_ids)
        gamma = np.zeros((d, K))
        order = np.argsort(cfg, kind="stable")
        bounds = np.searchsorted(cfg[order], np.arange(K + 1))
        for k in range(K):
            idx = order[bounds[k]:bounds[k + 1]]
            if idx.size:
                x = phi[idx]
                gamma[:, k] = np.linalg.solve(x.T @ x + self.shrink * np.eye(d), x.T @ r[idx])
        return gamma

    def _clip(self, logc: np.ndarray) -> np.ndarray:
        return np.clip(logc, *self._range)

    def __call__(self, logs: Logs, config_ids: list[str]) -> np.ndarray:
        """(len(logs), len(config_ids)) predicted mean costs (cross-fitted on the training logs)."""
        if self._cache_logs is not logs:
            self._cache_logs, self._cache = logs, {}
        todo = [c for c in dict.fromkeys(config_ids) if c not in self._cache]
        if todo:
            with threadpool_limits(1):
                self._predict(logs, todo)
        return np.column_stack([self._cache[c] for c in config_ids]) if config_ids else np.zeros((len(logs), 0))

    def _predict(self, logs: Logs, todo: list[str]) -> None:
        x = self._x(logs)
        phi = self._phi(logs) if self.effects == "ridge" else None  # boosted: gamma is zero
        ks = np.array([self._col.get(c, -1) for c in todo], dtype=np.int64)
        pred = np.zeros((len(logs), len(todo)))
        free = (ks >= 0) & self._logged[np.maximum(ks, 0)] if self._free else np.zeros(len(ks), dtype=bool)
        for models, cols in ((self._models, ~free), (self._free, free)):
            if cols.any():
                pred[:, cols] = self._predict_with(models, logs, x, phi, ks[cols])
        if self.site_shrink is not None and free.any():
            pred[:, free] = self._site_shrunk(pred[:, free], self._predict_with(self._models, logs, x, phi, ks[free]),
                                              x[:, 0].astype(np.int64), ks[free])
        for j, c in enumerate(todo):
            self._cache[c] = pred[:, j]

    def _site_shrunk(self, free: np.ndarray, additive: np.ndarray, site: np.ndarray, ks: np.ndarray) -> np.ndarray:
        """``site_shrink``: the interactions' predictions (n x len(ks)) with each configuration's website-specific
        interaction shrunk towards its pooled one. The interaction is I = log1p(free) - log1p(additive) per record;
        its mean over a website's records, I_s, and over all records, I_c; a configuration with n_s training records
        on the website keeps the share w = n_s / (n_s + site_shrink) of I_s - I_c: log1p(pred) = log1p(free) -
        (1 - w) (I_s - I_c). The variation of I within a website (with RTT, goodput, device) is kept."""
        inter = np.log1p(free) - np.log1p(additive)
        n_codes = self._n_site.shape[1]
        counts = np.maximum(np.bincount(site, minlength=n_codes), 1)
        out = np.empty_like(free)
        for j, k in enumerate(ks):
            by_site = np.bincount(site, weights=inter[:, j], minlength=n_codes) / counts
            w = self._n_site[k] / (self._n_site[k] + self.site_shrink)
            out[:, j] = np.expm1(np.log1p(free[:, j]) - ((1.0 - w) * (by_site - inter[:, j].mean()))[site])
        return out

    def _predict_with(self, models: list, logs: Logs, x: np.ndarray, phi: np.ndarray | None,
                      ks: np.ndarray) -> np.ndarray:
        """Predicted costs (len(logs) x len(ks)) of the configurations of column indices ``ks`` (-1: unknown) by
        one list of fold models."""
        same = logs is self._train and len(models) > 1
        pred = np.zeros((len(logs), len(ks)))
        m = self._codes_k.shape[1]
        for k, (f, gamma, edges, factors) in enumerate(models):
            rows = self._fold == k if same else slice(None)
            if m:  # the boosted model sees the configuration's knob values: one prediction per configuration
                xr = x[rows]
                base = np.column_stack([f.predict(np.hstack([xr, np.broadcast_to(
                    self._codes_k[kk] if kk >= 0 else np.full(m, np.nan), (xr.shape[0], m))])) for kk in ks])
            else:
                coef = np.where(ks[None, :] >= 0, gamma[:, np.maximum(ks, 0)], 0.0)
                base = f.predict(x[rows])[:, None] + phi[rows] @ coef
            logc = self._clip(np.log(base) if self.loss != "log" else base)  # poisson: f predicts 1 + cost
            smear = factors[np.clip(np.searchsorted(edges, logc), 0, len(factors) - 1)]
            yhat = np.expm1(logc) * smear + (smear - 1.0)  # E[exp(logc + e)] - 1
            yhat = np.clip(yhat, 0.0, np.expm1(self._range[1]))
            if same:
                pred[rows] = yhat
            else:
                pred += yhat / len(models)
        return pred


def _smearing(pred: np.ndarray, resid: np.ndarray, bins: int = 10, ratio: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """The back-transformation factor per quantile bin of the prediction: (inner edges, factors). Duan's smearing
    factor mean(exp(residual)), or with ``ratio`` (QModel's default) the ratio of the bin's observed to predicted
    totals, sum(exp(pred + residual)) / sum(exp(pred)): the residuals weighted by the predictions, so that the
    back-transformed predictions add up to the observed total in every bin even where the predictions and the
    residuals are correlated inside it (out-of-fold predictions spread wider than the truth: the highest come back
    down)."""
    def factor(p: np.ndarray, r: np.ndarray) -> float:
        if not r.size:
            return 1.0
        if not ratio:
            return float(np.mean(np.exp(r)))
        w = np.exp(p - p.max())
        return float(np.sum(w * np.exp(r)) / np.sum(w))
    if pred.size < 2 * bins:
        return np.zeros(0), np.array([factor(pred, resid)])
    edges = np.quantile(pred, np.linspace(0, 1, bins + 1)[1:-1])
    which = np.searchsorted(edges, pred)
    factors = np.array([factor(pred[which == b], resid[which == b]) for b in range(bins)])
    return edges, factors


def fit_q_model(logs: Logs, config_ids: list[str] | None = None, **kw: Any) -> QModel:
    """A cross-fitted cost model of ``logs`` for :func:`table_value` (see :class:`QModel`); ``config_ids``: the
    configurations it should know beyond the logged ones (those get the pooled prediction, or with ``knobs`` the
    effects of their knob values)."""
    return QModel(logs, config_ids, **kw)


# -- the manager's publication gate

# ope_gate: the largest share of a candidate table's choices the logs may not show (configurations no logged record
# in their context could have had): room for a table's probes of new configurations (tailor's explore_share is 0.1)
MAX_UNSUPPORTED = 0.1


def ope_gate(candidate: Estimate, current: Estimate, tolerance: float = 0.0,
             max_unsupported: float = MAX_UNSUPPORTED) -> tuple[bool, str]:
    """Whether to publish a candidate table, from estimates of its and the current table's mean completion time
    on the same logs (same estimator and level): (publish, reason).

    Rule (times: lower is better): publish when the candidate's upper confidence bound is no higher than the
    current table's, ``candidate.high <= current.high * (1 + tolerance)`` -- the candidate's pessimistic value
    is no worse than the current table's pessimistic value (equivalently, in improvement terms, the candidate's
    lower bound is no worse than the current table's). A candidate without an interval (nan: no logged record has a
    configuration it would give, or its weight rests on fewer than two clients) is kept out; a supported candidate
    is published when the current table has no interval (e.g. it gives configurations the logs do not show). Until
    2026-12-07 the current table was checked first, so logs from one client cohort (one cluster: neither table has
    an interval) published any candidate, an unsupported one too (found by review).

    Support (SNIPS estimates carry it): self-normalised IPS values a candidate on the records that could have had
    its choices, so a candidate that sends part of the traffic to configurations the logs never show there is
    valued on the rest alone, and looks as fast as that rest (a slow group moved to an unlogged configuration
    drops out of its estimate). A candidate whose mean importance weight is, at its upper confidence bound, below
    ``1 - max_unsupported`` -- more than that share of its choices unseen in the logs -- is kept out (added
    2026-12-06, found by review: such a candidate, truly 60% slower, passed).
    """
    if not (isinstance(tolerance, (int, float)) and tolerance >= 0):
        raise ValueError(f"tolerance: must be a number >= 0, got {tolerance!r}")
    if not (isinstance(max_unsupported, (int, float)) and 0 <= max_unsupported < 1):
        raise ValueError(f"max_unsupported: must be a number in [0, 1), got {max_unsupported!r}")
    cur = f"current {current.value:.1f} [{current.low:.1f}, {current.high:.1f}] (n={current.n})"
    cand = f"candidate {candidate.value:.1f} [{candidate.low:.1f}, {candidate.high:.1f}] (ess {candidate.ess:.0f})"
    if not np.isfinite(candidate.high):  # checked first: one cluster's logs give neither table an interval
        return False, f"{cand}: no interval from the logs (unsupported, or too few clients); {cur}"
    if np.isfinite(candidate.support_high) and candidate.support_high < 1.0 - max_unsupported:
        return False, (f"{cand}: the logs show only {candidate.support:.0%} of its choices (mean importance weight, "
                       f"upper bound {candidate.support_high:.2f} < {1.0 - max_unsupported:.2f}); {cur}")
    if not np.isfinite(current.high):
        return True, f"{cand}: no evidence about the current table ({cur}): published"
    bound = current.high * (1.0 + tolerance)
    if candidate.high <= bound:
        return True, f"{cand}: upper bound <= current's {bound:.1f}; {cur}"
    return False, f"{cand}: upper bound > current's {bound:.1f}; {cur}"
