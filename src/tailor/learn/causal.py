"""Causal inference for Config-Snob (ATC'24 §3.3): the effect of configuration changes on completion time.

The six steps of §3.3.1, as implemented here:

1. *Treatment* -- the configuration as a vector relative to the default (:class:`TreatmentEncoder`):
   one indicator per non-default value of a categorical knob, the scaled distance from the default
   for a numeric knob. With a continuous multi-dimensional treatment, ``CausalForestDML`` learns a
   CATE theta(X) that is *linear in the treatment*, so the effect of any configuration c is
   theta(X) . T(c): one forest prices all configurations (no knob interactions -- a limit).
2. *Normalise / standardise* -- outcome is the log normalised completion time; covariates are
   standardised before the propensity model.
3. *Covariate selection* -- :func:`select_covariates`: a CovSel-style screen (keep a candidate that is
   associated with the outcome or with a treatment column, Spearman |rho| >= 0.05) united with the
   domain-expert set the paper names (max estimated bandwidth, minRTT, bytes sent -> our goodput, RTT
   and response bytes).
4. *Overlap and matching* -- propensity matching needs one binary contrast, so treated = "the knob
   column with the most balanced split moved away from the default"; a logistic propensity e(X); samples outside e in [0.05, 0.95] are trimmed
   (Crump et al. 2009); if either arm keeps fewer than ``min_arm`` samples the overlap check fails and
   no forest is fitted. Then 1:1 nearest-neighbour propensity-score matching with replacement on the
   logit, caliper 0.2 SD (Austin 2011); the forest is trained on the matched units.
5. *Causal forest* -- econml ``CausalForestDML`` with 100 trees (§4.2); nuisance models are small
   random forests (cheap, nonlinear, multi-output for the treatment).
6. *Evaluation against ground truth* -- done in ``tailor.eval.figures_configsnob``, never here.
"""

from __future__ import annotations

import warnings

import numpy as np
from scipy.special import logsumexp
from scipy.stats import spearmanr
from sklearn.ensemble import RandomForestRegressor
from sklearn.linear_model import LogisticRegression
from sklearn.preprocessing import StandardScaler

from tailor.errors import check
from tailor.space import ConfigSpace

CANDIDATES = ("log_goodput", "log_loss", "log_rtt", "log_bytes")
EXPERT = ("log_goodput", "log_rtt", "log_bytes")  # §3.3.1: max estimated bandwidth, minRTT, bytes sent


NUMERIC = ("linear", "hinge")


class TreatmentEncoder:
    """Configuration index -> treatment row relative to the default (the default encodes to zeros).

    A numeric knob is its scaled distance from the default: ``numeric="linear"``, one column, so its effect is one
    slope through the default; ``"hinge"``, one column per side of the default (the distance below it, the distance
    above it; a side no value reaches has no column), so that values below and above the default can both be
    slower than it: an initial window of 4 and one of 64 on a slow shallow path, which one slope would price with
    opposite signs."""

    def __init__(self, space: ConfigSpace, numeric: str = "linear"):
        check(numeric in NUMERIC, "TreatmentEncoder", "numeric", "'linear' or 'hinge'", numeric)
        cols = []
        self._knobs: list[tuple[bool, np.ndarray]] = []  # per knob: (numeric, every configuration's value)
        for name, values in space.grid.items():
            knob = space.registry[name]
            col = [c[name] for c in space.configs]
            numeric_knob = knob.type not in ("categorical", "boolean")
            self._knobs.append((numeric_knob, np.array(col, dtype=float if numeric_knob else object)))
            if knob.type in ("categorical", "boolean"):
                cols.extend(np.array([v == level for v in col], dtype=float) for level in values if level != knob.default)
                continue
            scale = np.log if min(values) > 0 and max(values) / min(values) > 8 else (lambda x: np.asarray(x, float))
            lo, hi = scale(float(min(values))), scale(float(max(values)))
            d = (scale(np.array(col, dtype=float)) - scale(float(knob.default))) / max(hi - lo, 1e-12)
            if numeric == "linear":
                cols.append(d)
            else:
                cols.extend(side for side in (np.minimum(d, 0.0), np.maximum(d, 0.0)) if np.any(side != 0))
        self.matrix = np.column_stack(cols) if cols else np.zeros((len(space), 0))

    def __call__(self, configs) -> np.ndarray:
        return self.matrix[np.asarray(configs, dtype=int)]

    def __setstate__(self, state: dict) -> None:
        # an encoder pickled before ``covered``: no knob values kept, so it reads every configuration as covered
        self.__dict__.update({"_knobs": [], **state})

    def covered(self, configs) -> np.ndarray:
        """Which configurations of the space the treatments ``configs`` cover, knob by knob: a numeric knob's value
        within the range the sample's values span, a categorical knob's level among the sample's levels. The
        forest's price of a configuration outside is an extrapolation of slopes fitted elsewhere (an initial window
        of 4 priced from 10-64 alone), not an evaluation."""
        rows = np.unique(np.asarray(configs, dtype=int))
        out = np.ones(len(self.matrix), dtype=bool)
        for numeric, values in self._knobs:
            seen = values[rows]
            if numeric:
                out &= (values >= seen.min()) & (values <= seen.max()) if len(rows) else False
            else:
                out &= np.isin(values, seen)
        return out


def select_covariates(X: np.ndarray, T: np.ndarray, y: np.ndarray, names=CANDIDATES, rho: float = 0.05) -> list[int]:
    """Columns of X to use: the expert set plus any candidate related to y or a treatment column."""
    keep = []
    for j, name in enumerate(names):
        if name in EXPERT:
            keep.append(j)
            continue
        x = X[:, j]
        if np.ptp(x) == 0:
            continue
        scores = [abs(spearmanr(x, v)[0]) for v in (y, *T.T) if np.ptp(v) > 0]
        if scores and np.nanmax(scores) >= rho:
            keep.append(j)
    return keep


def propensity_match(X: np.ndarray, treated: np.ndarray, min_arm: int = 20, trim: float = 0.05,
                     caliper_sd: float = 0.2) -> tuple[np.ndarray | None, dict]:
    """(indices of the matched sample or None when overlap fails, diagnostics)."""
    treated = np.asarray(treated, dtype=bool)
    info = {"n": len(treated), "treated": int(treated.sum())}
    if treated.sum() < min_arm or (~treated).sum() < min_arm:
        return None, {**info, "overlap": False, "reason": "an arm is too small"}
    z = StandardScaler().fit_transform(X)
    e = LogisticRegression(max_iter=200).fit(z, treated).predict_proba(z)[:, 1]
    inside = (e >= trim) & (e <= 1 - trim)
    info.update(kept_share=float(inside.mean()))
    if (inside & treated).sum() < min_arm or (inside & ~treated).sum() < min_arm:
        return None, {**info, "overlap": False, "reason": "propensity overlap too thin"}
    logit = np.log(e / (1 - e))
    caliper = caliper_sd * float(np.std(logit[inside]))
    chosen = set()
    for a, b in ((treated, ~treated), (~treated, treated)):
        src, dst = np.flatnonzero(inside & a), np.flatnonzero(inside & b)
        order = np.argsort(logit[dst])
        pos = np.clip(np.searchsorted(logit[dst][order], logit[src]), 1, len(dst) - 1)
        left, right = dst[order][pos - 1], dst[order][pos]
        near = np.where(np.abs(logit[left] - logit[src]) <= np.abs(logit[right] - logit[src]), left, right)
        ok = np.abs(logit[near] - logit[src]) <= caliper
        chosen.update(src[ok].tolist())
        chosen.update(near[ok].tolist())
    idx = np.array(sorted(chosen), dtype=int)
    if len(idx) < 2 * min_arm:
        return None, {**info, "overlap": False, "reason": "too few matched pairs", "matched": len(idx)}
    return idx, {**info, "overlap": True, "matched": len(idx)}


LOG_REWARD_BOUND = 700.0  # exp(700) ~ 1e304: finite in float64, far beyond any real completion-time ratio


def _nuisance(seed: int) -> RandomForestRegressor:
    return RandomForestRegressor(n_estimators=30, min_samples_leaf=20, max_depth=8, n_jobs=1, random_state=seed)


class CausalEstimator:
    """Fit a causal forest on logged (covariates, configuration, log reward) and price configurations."""

    def __init__(self, space: ConfigSpace, *, n_estimators: int = 100, seed: int = 0, max_samples: int = 3000,
                 min_samples: int = 200, numeric: str = "linear"):
        check(n_estimators >= 4 and n_estimators % 4 == 0, "CausalEstimator", "n_estimators",
              "a multiple of 4 (econml subforests)", n_estimators)
        self.space, self.n_estimators, self.seed = space, n_estimators, seed
        self.max_samples, self.min_samples = max_samples, min_samples
        self.encode = TreatmentEncoder(space, numeric)
        self.model = None
        self.columns: list[int] = []
        self.diagnostics: dict = {}
        self.covered: np.ndarray | None = None  # configurations whose knob values the fitted forest's sample covers

    def __setstate__(self, state: dict) -> None:
        # an estimator pickled before ``covered``: unknown, read as every configuration
        self.__dict__.update({"covered": None, **state})

    def fit(self, X: np.ndarray, configs: np.ndarray, y: np.ndarray) -> bool:
        """Steps 2-5 on the most recent ``max_samples`` rows; returns whether a forest was fitted."""
        X, configs, y = X[-self.max_samples:], np.asarray(configs)[-self.max_samples:], y[-self.max_samples:]
        if len(y) < self.min_samples:
            self.diagnostics = {"overlap": False, "reason": "too few samples", "n": len(y)}
            return False
        T = self.encode(configs)
        cols = select_covariates(X, T, y)
        idx, info = propensity_match(X[:, cols], self._contrast(T))
        self.diagnostics = {**info, "covariates": [CANDIDATES[j] for j in cols]}
        if idx is None:
            return False
        self.model = self._forest().fit(y[idx], T[idx], X=X[idx][:, cols])
        self.columns = cols
        self.covered = self.encode.covered(configs[idx])
        return True

    @staticmethod
    def _contrast(T: np.ndarray) -> np.ndarray:
        """Binary treatment for the overlap check and matching: 'this knob column moved from the
        default', for the column whose split is closest to half (matching needs one binary contrast)."""
        moved = T != 0
        j = int(np.argmin(np.abs(moved.mean(axis=0) - 0.5)))
        return moved[:, j]

    def _forest(self):
        from econml.dml import CausalForestDML

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return _Quiet(CausalForestDML(model_y=_nuisance(self.seed), model_t=_nuisance(self.seed), cv=2,
                                          n_estimators=self.n_estimators, min_samples_leaf=10, max_samples=0.45,
                                          inference=False, n_jobs=1, random_state=self.seed))

    @property
    def fitted(self) -> bool:
        return self.model is not None

    def theta(self, X: np.ndarray) -> np.ndarray:
        """Per-row CATE coefficients (one per treatment column); callers cache them per sample."""
        return self.model.const_marginal_effect(X[:, self.columns]).reshape(len(X), -1)

    def effects(self, theta: np.ndarray, q: float = 0.0, ref: int | None = None) -> np.ndarray:
        """Change of log reward from the default (or from configuration ``ref``) to every configuration for rows with
        CATE ``theta``: averaged over the rows (the group's CATE), or with ``q`` in (0, 1) its q-quantile over the rows
        (a configuration with a positive 0.9-quantile slows at least a tenth of the rows)."""
        theta = np.asarray(theta).reshape(-1, self.encode.matrix.shape[1])
        m = self.encode.matrix if ref is None else self.encode.matrix - self.encode.matrix[ref]
        if q > 0:
            return np.quantile(theta @ m.T, q, axis=0)
        return m @ theta.mean(axis=0)

    def rewards(self, theta: np.ndarray, configs: np.ndarray, y: np.ndarray) -> np.ndarray:
        """CF reward of every configuration for a group: exp(anchor + effect), where exp(anchor) is the group's mean
        reward with each sample's own configuration effect removed (§3.3.4): the arithmetic mean, as the average
        reward it stands in for is (until 2026-12-07 the mean of the log rewards, i.e. a geometric mean, which is
        lower for the same data by about half the log rewards' variance, so a configuration priced by the forest
        ranked above a measured one as fast or faster; found by review). A forest fitted where
        a treatment column barely varies can give CATE coefficients of any size; the log reward is clipped to
        +-LOG_REWARD_BOUND so that such a configuration is priced as very bad (or good), finite, and the GP that
        reads log rewards never sees an infinity."""
        delta = self.effects(theta)
        own = np.einsum("ij,ij->i", np.asarray(theta), self.encode(configs))
        r = np.clip(np.asarray(y) - own, -LOG_REWARD_BOUND, LOG_REWARD_BOUND)
        anchor = float(logsumexp(r) - np.log(len(r))) if len(r) else 0.0  # log of the mean reward
        return np.exp(np.clip(anchor + delta, -LOG_REWARD_BOUND, LOG_REWARD_BOUND))


class _Quiet:
    """Wrapper that silences econml/sklearn warnings (small leaves, convergence) on fit and predict."""

    def __init__(self, model):
        self._model = model

    def fit(self, y, T, X):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self._model.fit(y, T, X=X)
        return self

    def const_marginal_effect(self, X):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return self._model.const_marginal_effect(X)
