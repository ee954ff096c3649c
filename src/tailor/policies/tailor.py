"""Tailor's own policy: one shared model, conservative exploration, per-group change detection.

**Baseline.** The configuration the operator runs today (``baseline``): ``cdn-static`` (BBR, IW 32,
HTTP/2, :data:`tailor.policies.baselines.CDN_STATIC`) by default, or the registry's ``default``. It is
the budget's reference, the zero of the knob coding and the decision tables' fallback; the policy learns
per-group departures from it.

**Model (sharing across groups and websites).** One Bayesian linear model of the log page-load time
``log y = phi(x, c)^T w + noise`` over what the server knows at the handshake, ``x`` -- the website, the
device, the handshake RTT, the /24's archived goodput and loss (or "unknown prefix"), the hour of day,
each binned one-hot, and the website's size (``(ln bytes - ln 300 KB) / 2`` from the telemetry's byte count
of its first page load, 0 before), together ``psi(x)`` in eight blocks -- and over the configuration ``c`` in treatment coding
``e(c)`` (:func:`knob_design`: an indicator per knob value other than the baseline's and the product of
every two, so the baseline is the zero row). ``phi(x, c) = [psi(x), psi(x) (x) e(c)]``; a configuration's
effect in a context, ``delta(x, c) = log y(x, c) - log y(x, baseline) = (psi(x) (x) e(c))^T w``, is
shared by every context with one of the same feature values, and the posterior variance says how well
it is known there.

* The knob terms are fitted *within* level cells (website, device, RTT, goodput and loss bins) and epochs
  (``level_epoch``, one hour): each (cell, epoch)'s level is absorbed (fixed effects), so effects come from
  contrasts between page loads of one cell served in the same epoch, and levels, which an additive model of log
  time cannot describe, neither bias them nor count as noise. The epoch matters because decisions are not
  randomised: a configuration is played once the model favours it, later than the baseline, and a cell's
  conditions drift (its clients and their paths change); a contrast across hours takes that drift for the
  configuration's effect (docs/tailor.md, "Why the greedy arm's predictions were optimistic"). A cell's own
  page loads, which update the shared prediction for that cell (below), still count all its contrasts. The levels
  have their own additive model over psi, fitted to the cells' means (weighted least squares, the cells'
  spread around it by moments): it predicts a new cell's baseline time, which sizes the budget.
* Prior: one knob changed has an effect of sd ``prior_sd`` (log scale), half of the variance global (the
  intercept block), half spread over the six context blocks; each context block's variance (main
  effects and two-knob interactions apart) is then estimated by empirical Bayes (one EM step per
  ``plan``), so a block whose knob deviations the data do not show shrinks and its contexts share the
  global effects more tightly.
* Noise: the within-cell residual variance (empirical Bayes), and per client group its own pooled
  within-(cell, configuration) variance shrunk to it by 20 pseudo-observations.
* Client offsets: a client's persistent deviation from its cell (its path beyond the bins) is estimated
  from its earlier page loads' residuals (shrunk, the client variance by the covariance of successive
  residuals) and taken out of each new observation; it is fixed before the configuration acts and common
  to every configuration, so it only removes noise.

Between the shared model and a cell sits a *pool* (``pool``, default ``website-rtt``): per website and RTT bin,
the shared model's residual effect of every configuration, a random effect of variance ``tau_p^2`` (method of
moments) estimated from the pool's cells with their levels taken out and each cell's own page loads left out. It
holds what the additive model cannot: a knob that helps large websites at an RTT but slows a small one there (on
held-out seeds it took the satellite scenario's median gap to optimal from 3.8% to 2.7%, degraded share unchanged).

On top, each *context cell* is a random effect around the shared model and its pool: its own page loads update the
shared prediction (normal-normal; prior variance = the model's parameter variance + ``tau^2``, the
model's misfit, estimated by the method of moments per client group, shrunk to the global value, from the
contrasts of cells with >= 5 page loads of a configuration and of the baseline). The cell's level (its baseline's
log time, prior: the level model) and its effects are estimated jointly (``cell_level='joint'``), so the cell's
page loads inform an effect only through contrasts: a cell that has only ever played one configuration cannot tell
its level from that configuration's effect and keeps the effect's prior uncertainty. A calibration factor
``kappa`` >= 1 scales the standard deviations when the squared prediction errors of non-baseline configurations
exceed their predicted variance (noise + level + effect) by more than two standard errors.

**Conservative exploration (Wu et al., ICML 2016).** Per client group (RTT bin x goodput bin of the
connection's /24) the slack ``S_g = sum_s ((1 + alpha) * b_s - y_s)``, ``y_s`` the observed time of the
group's s-th page load, ``b_s`` a lower bound of the baseline configuration's time:
``y_s`` for the baseline, ``y_s * exp(-UCB)`` otherwise, ``UCB = mean + budget_z * sd`` of ``delta``
(decisions use the narrower ``beta``), recomputed at every ``plan`` with the current bounds (Wu et al.:
the played arms' confidence bounds at the current round), so an exploration learned to be faster pays
back what it was charged. With ``credit`` = ``gain`` (the default since 2026-11-27) the UCB is not floored, as in
Wu et al.'s sum of the played arms' lower bounds: time saved at the bound funds exploration; ``credit`` = ``none``
floors it at 0 (a configuration never adds more slack than the baseline would have). The condition is
``S_g >= 0``; it holds as long as the true effects lie within ``budget_z`` posterior sd (the prior's assumption:
one knob changed rarely makes a page load more than ``exp(budget_z * prior_sd)`` = 2.5x slower). With
``budget_bound='sum'`` (the default since 2026-11-27) the repricing bounds each group's sum once (Kazerouni et
al., NeurIPS 2017: the confidence bound of the played actions' summed features) instead of summing per-play bounds
(``'play'``), so independent cell errors average out (:meth:`TailorPolicy._sum_slack`). Why these two and the
default guard together: docs/tailor.md, hyper-parameters. With ``budget_unit='both'`` (the default since
2026-12-05) a second slack counts baseline page loads, ``S'_g = sum_s (1 + alpha_loads - y_s / b_s)``, ``y_s / b_s
<= exp(UCB)`` (per-play bound at every plan), and a departure must be affordable in both: the time budget alone lets
the slack a heavy page's baseline earns pay for many departures on light pages, while the evaluation counts page
loads. Per connection:

* ``safe = argmin UCB`` (the baseline has UCB 0): free, it cannot cost more than the baseline;
* the *default guard* (``guard`` = z, 1 by default since 2026-11-27; ``'off'``): a configuration is eligible only when
  ``mean - mean_default + z sqrt(sd^2 + sd_default^2) <= log 1.05``, i.e. it is not plausibly more than 5% slower
  than the registry's default configuration (the evaluation's "degraded" page load); the default always is. When
  the guard excludes the baseline, ``safe`` is the lowest UCB among the eligible, played only when the slack pays
  for it (else the baseline: the budget holds first); the greedy choice comes from the eligible too. Probes need
  only a mean within 5% of the default's (``mean - mean_default <= log 1.05``): a probe is what narrows a
  configuration's sd, so the sd test would keep whatever the model knows little about out of reach for good.
  With ``baseline='default'`` the guard is off: the budget bounds the time against the default already, and under
  the prior no other configuration would ever be eligible;
* a *probe* (at most ``explore_share`` of the group's page loads, ``probes`` per cell and
  configuration between plans): among configurations whose LCB is below the safe one's UCB by
  ``min_gain``, the one with the lowest LCB one knob away from the safe choice (``probe='local'``: a
  trust region, like SafeOpt's expansion; anywhere when none is; with ``probe_center='both'``, the default since
  2026-11-30, also one knob away from the eligible configuration with the lowest mean, so that a configuration two
  knobs from the baseline and one from a configuration the model already rates best is reachable; with
  ``probe_center='default'`` the registry default first wherever it is plausible, with ``'suspect'`` only where the
  posterior expects the baseline more than 5% slower than the default), the lowest LCB anywhere
  (``'optimistic'``) or the lowest UCB (``'cheap'``, growing the known-safe set); with ``probe_sd`` = r (1.5 since
  2026-12-05) only a configuration whose sd is at most r times the median sd of the last 200 probes chosen (no bound
  before 200): the optimistic bound's long shots, where the model knows a configuration far less than it now knows
  most, were the degraded probes on held-out measured worlds;
* otherwise, with ``exploit='greedy'``, the configuration with the lowest mean when it beats ``safe`` by
  ``min_gain``;
* a non-safe choice is played only when the slack pays its pessimistic cost
  ``B99 * (exp(UCB) - 1 - alpha)``, ``B99`` the 99th percentile of the baseline's time in the cell (its
  level's posterior and the group's noise; none before 10 page loads of the group). The cost is reserved
  at once; the outcome replaces it by the realised term.

**Change detection.** Per client group, a two-sided CUSUM (Page 1954) of standardised prediction errors
(drift ``cusum_drift``, threshold ``cusum_h``), once the model is fitted and the cell has 10 page loads.
An alarm forgets the group's cells' own data (they restart from the shared model) and widens the
group's bounds (x2, decaying over ``reopen`` page loads): exploration re-opens for that group only.

**Decisions** are deterministic given the state: probability 1, arm ``explore``, ``exploit`` or
``default`` (the baseline). Tables (the manager; the simulator's table mode) hold per table group (network class x
website x device; the cell of the loss bin with the most page loads in the last period decides for the group, so
that a group id does not change when a prefix's archived loss crosses a bin edge), with rules per archived prefix x
device x website (each also unknown: the rule without ``device``/``sni`` that tailor-agent's TCP-only connections
match), what ``select`` would do, with probabilities: the greedy or safe choice and the
cell's probe with probability ``explore_share``, each non-safe choice only when the group's slack pays, in advance,
for what edges will draw until the next plan (the cell's page loads of the last period, Poisson; the promised costs'
mean plus three standard deviations within the slack). Page loads a guardrail served instead of the policy's choice
(arm ``served``: the manager's stickiness, rollback or AllowedConfig) are learned from but not charged to the budget:
they are not the policy's decisions (held-back page loads never reach a learner).

**Cost.** Page loads are aggregated per context cell between plans (page loads and sum of log times per
configuration), so a plan costs per touched cell, not per page load: the Gram matrix's knob block is one product of
the configurations' vectorised factors (:func:`gram`) and the level corrections are applied per website x device
over the columns they touch. The manager's ingest folds a batch with :meth:`TailorPolicy._observe_batch` (vectorised:
per-cell statistics are rows of :class:`CellRows` matrices, predictions from before the batch); the simulator's
online loop observes page load by page load.

Hyper-parameters (defaults) were chosen on seeds 100-102 of the built-in scenarios, never on seeds 0-4:
``beta`` in {1, 1.5, 2}, ``explore_share`` in {0.05, 0.1, 0.2}, ``exploit`` in {safe, greedy}, ``probe`` in
{cheap, optimistic, local}, ``prior_sd`` in {0.15, 0.2, 0.3}; ``credit``, ``budget_bound`` and ``guard`` together on
seeds 100-103 of the five scenarios on both oracles; ``probe_center`` on seeds 127-132 (three trials, docs/tailor.md);
``budget_unit`` and ``alpha_loads`` on seeds 177-178 (``alpha_loads`` 0.05 chosen among 0.01, 0.05, 0.1 on seed 100);
``probe_sd`` on seeds 181-182 (1.5 from sanity runs on seed 180).
"""

from __future__ import annotations

import bisect
import math
import zlib
from collections import OrderedDict, deque
from collections.abc import Sequence
from itertools import repeat
from operator import attrgetter, is_not, itemgetter

import numpy as np
from scipy.linalg import cho_factor, cho_solve
from scipy.sparse import csr_matrix
from threadpoolctl import threadpool_limits

from tailor.errors import ParameterError
from tailor.grouping.classes import DEVICES
from tailor.policies.base import Context, Decision, Outcome, Policy, register

RTT_EDGES = (15.0, 40.0, 80.0, 160.0, 320.0, 640.0)  # ms
GOODPUT_EDGES = (0.3, 1.0, 3.0, 10.0, 30.0, 100.0)  # Mbit/s
LOSS_EDGES = (0.001, 0.005, 0.02, 0.05)
BINS = ("coarse", "fine")  # the cells' resolution of RTT, goodput and loss (``bins``)


def _split(edges: tuple) -> tuple:
    """The edges with each bin between two of them split at their geometric mean (``bins='fine'``)."""
    out = [edges[0]]
    for lo, hi in zip(edges, edges[1:]):
        out += [math.sqrt(lo * hi), hi]
    return tuple(out)


# per ``bins``: the (RTT, goodput, loss) edges of the cells. A fine bin f (the number of fine edges below a value)
# lies in coarse bin (f + 1) // 2, since the coarse edges are every other fine edge (:meth:`TailorPolicy._coarse`)
EDGES = {"coarse": (RTT_EDGES, GOODPUT_EDGES, LOSS_EDGES),
         "fine": (_split(RTT_EDGES), _split(GOODPUT_EDGES), _split(LOSS_EDGES))}
HOUR_BINS = 4
DEGRADED = math.log(1.05)  # a page load more than 5% slower than the default's is "degraded" (tailor evaluate)
SERVED = "served"  # the arm of a page load a guardrail served instead of the policy's choice: learned, not charged
PROBE_SD_WINDOW = 200  # probe_sd: the probes whose median sd sets the bound
PROBE_TIE = 1e-6  # probe ranks this close are ties (the scale of the random tie-break used until 2026-12-07)
POOL = ("none", "website", "website-rtt")  # the middle level of a cell's prior (_fit_pool)
NOISE_PRIOR_DOF = 20.0  # pseudo-observations of the shared noise variance in a group's own estimate
SIZE_CENTER, SIZE_SCALE = math.log(300e3), 2.0  # the size feature: (ln bytes - ln 300 KB) / 2, 0 if unknown
MAX_CLIENTS = 200_000  # clients whose offsets are kept (least recently seen forgotten first)
STATE_LAYOUT = 2  # the layout of the pickled state: 2 = per-cell statistics in CellRows arrays
COMP_FLOOR = 1e-4  # smallest variance component of the knob deviations (sd 0.01, log scale)
TAIL_DOF = 4.0  # degrees of freedom of context_prior='student' (a common robust choice, not fitted to any seed)
SLOPE_MIN = 200  # greedy_check='slope': departures before the slope is used (as the 2026-12-05 sanity runs; not fitted)
CHECK_PRIOR = 20.0  # greedy_check='config'/'own': pseudo page loads at the group's excess (as NOISE_PRIOR_DOF; not fitted)
# ``audit`` (not fitted to any seed; chosen before its trial): a page load's evidence halves every AUDIT_HALFLIFE of its
# group's page loads; a group's realised gain is shrunk to every group's pooled one by AUDIT_PRIOR pseudo page loads;
# the pooled estimate exists once both sides have AUDIT_MIN page loads; where a group's own gain is positive by two
# standard errors its departures are held out at AUDIT_SETTLED times the audit's share (its evidence kept fresh)
AUDIT_HALFLIFE, AUDIT_PRIOR, AUDIT_MIN, AUDIT_SETTLED = 2000.0, 50.0, 30.0, 0.25

def _FLOAT(lo, hi):
    return lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and lo <= v <= hi




def knob_design(space, reference: int | None = None) -> np.ndarray:
    """Treatment coding of the configurations relative to a reference one (the registry default unless
    ``reference``, a configuration index, is given): one indicator per value of each knob other than the
    reference's and the product of every two such indicators of different knobs (two-knob interactions).
    The reference is the zero row, and every single-knob change from it has the same prior scale."""
    return knob_terms(space, reference)[0]


def knob_terms(space, reference: int | None = None) -> tuple[np.ndarray, list[str]]:
    """:func:`knob_design` and its columns' names: ``knob=value`` for a main effect, ``a=x x b=y`` for a product."""
    cols, names, owner = [], [], []
    ref = None if reference is None else space.configs[reference]
    for name, values in space.grid.items():
        default = space.registry[name].default if ref is None else ref[name]
        for v in values:
            if v != default:
                cols.append(np.array([1.0 if c[name] == v else 0.0 for c in space.configs]))
                names.append(f"{name}={v}")
                owner.append(name)
    main = list(cols)
    for a in range(len(main)):
        for b in range(a + 1, len(main)):
            if owner[a] != owner[b]:
                cols.append(main[a] * main[b])
                names.append(f"{names[a]} x {names[b]}")
    return (np.column_stack(cols) if cols else np.zeros((len(space.configs), 1))), names


def gram(psi: np.ndarray, pint: np.ndarray, e: np.ndarray, count: np.ndarray,
         total: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``Phi^T diag(n) Phi`` and ``Phi^T t`` over every (cell, configuration) row ``phi = [psi, pint (x) e[c]]``
    without building Phi: ``count`` and ``total`` (cells x configurations) hold each row's page loads and sum of log
    times. The knob block is a sum over configurations of Kronecker products, ``sum_c (P^T W_c P) (x) e_c e_c^T``,
    computed as one product of the configurations' vectorised factors (a sum of Kronecker products is a
    rearranged matrix product), so the cost grows with cells x psi entries^2 per configuration, not with
    cells x (knob terms)^2."""
    n_psi, n_int, n_e = psi.shape[1], pint.shape[1], e.shape[1]
    dim = n_psi + n_int * n_e
    g = np.zeros((dim, dim))
    h = np.zeros(dim)
    g[:n_psi, :n_psi] = psi.T @ (psi * count.sum(axis=1)[:, None])
    h[:n_psi] = psi.T @ total.sum(axis=1)
    act = [c for c in np.flatnonzero(count.any(axis=0)) if e[c].any()]  # the reference configuration has no knob terms
    if not act:
        return g, h
    cross = np.empty((len(act), n_psi, n_int))
    knob = np.empty((len(act), n_int, n_int))
    for k, c in enumerate(act):
        sel = np.flatnonzero(count[:, c])
        pw = pint[sel] * count[sel, c][:, None]
        cross[k] = psi[sel].T @ pw
        knob[k] = cross[k] if pint is psi else pint[sel].T @ pw  # every psi entry modulating the knobs: the same
    ea = e[act]
    ee = (ea[:, :, None] * ea[:, None, :]).reshape(len(act), n_e * n_e)
    g_cross = (cross.reshape(len(act), -1).T @ ea).reshape(n_psi, n_int * n_e)  # sum_c cross_c (x) e_c^T
    g[:n_psi, n_psi:] = g_cross
    g[n_psi:, :n_psi] = g_cross.T
    g[n_psi:, n_psi:] = (knob.reshape(len(act), -1).T @ ee).reshape(n_int, n_int, n_e, n_e) \
        .transpose(0, 2, 1, 3).reshape(n_int * n_e, n_int * n_e)
    h[n_psi:] = ((pint.T @ total[:, act]) @ ea).ravel()
    return g, h


def add_block(g: np.ndarray, cols: np.ndarray, upd: np.ndarray) -> None:
    """``g[np.ix_(cols, cols)] += upd`` for sorted ``cols``, by slices over the runs of consecutive columns: psi's
    blocks and the knob terms of one psi entry are contiguous, so a level cell's columns are a few runs and the
    sum costs a few slice additions instead of a gather and a scatter of every entry (same values, same order)."""
    cut = np.flatnonzero(np.diff(cols) != 1) + 1
    if len(cut) > 64:  # scattered columns: the gather and scatter is cheaper than many small slices
        g[np.ix_(cols, cols)] += upd
        return
    lo = [0, *cut.tolist()]
    hi = [*cut.tolist(), len(cols)]
    spans = [(a, b, int(cols[a]), int(cols[b - 1]) + 1) for a, b in zip(lo, hi)]
    for a0, a1, c0, c1 in spans:
        for b0, b1, d0, d1 in spans:
            g[c0:c1, d0:d1] += upd[a0:a1, b0:b1]


def cusum_run(cusum: list[float], z: np.ndarray, drift: float, h: float) -> list[int]:
    """A two-sided CUSUM (Page 1954) over ``z`` in order from the state ``cusum`` = [upper, lower] (updated in
    place): ``S_k = max(0, S_{k-1} + z_k - drift)`` and its mirror, reset to 0 after an alarm (either side above
    ``h``); returns the positions of the alarms. Vectorised: between alarms the recursion (Lindley's) is
    ``S_k = X_k - min(-S_0, min_{j<=k} X_j)``, X the cumulative sum of ``z - drift``."""
    alarms: list[int] = []
    start = 0
    while start < len(z):
        rest = z[start:]
        sides = []
        for sign, s0 in ((1.0, cusum[0]), (-1.0, cusum[1])):
            x = np.cumsum(sign * rest - drift)
            sides.append(x - np.minimum(np.minimum.accumulate(x), -s0))
        over = np.flatnonzero((sides[0] > h) | (sides[1] > h))
        if not len(over):
            cusum[0], cusum[1] = float(sides[0][-1]), float(sides[1][-1])
            break
        alarms.append(start + int(over[0]))
        cusum[0] = cusum[1] = 0.0
        start += int(over[0]) + 1
    return alarms


class CellRows:
    """Per-configuration sums of many cells (``fields`` arrays of rows x configurations) with a key -> row
    index, in arrays that grow by doubling: a batch of page loads updates its cells' rows in one operation.
    Read like a mapping (``rows[key]`` is the tuple of the key's row views); a cleared row is all zeros."""

    def __init__(self, fields: int, width: int):
        self.index: dict[tuple, int] = {}
        self.keys_: list[tuple] = []
        self.data = np.zeros((fields, 16, width))

    def __len__(self) -> int:
        return len(self.keys_)

    def __iter__(self):
        return iter(self.keys_)

    def __contains__(self, key) -> bool:
        return key in self.index

    def __getitem__(self, key) -> tuple[np.ndarray, ...]:
        i = self.index[key]
        return tuple(self.data[:, i])

    def keys(self):
        return self.index.keys()

    def items(self):
        for key, i in self.index.items():
            yield key, tuple(self.data[:, i])

    def used(self) -> np.ndarray:
        """The arrays' rows in use (fields x rows x configurations; a view)."""
        return self.data[:, :len(self.keys_)]

    def find(self, keys: Sequence[tuple]) -> np.ndarray:
        """Each key's row, -1 where it has none."""
        return np.fromiter(map(self.index.get, keys, repeat(-1)), np.int64, len(keys))

    def rows(self, keys: Sequence[tuple]) -> np.ndarray:
        """Each key's row, new (zero) rows for the keys without one; ``keys`` distinct."""
        out = self.find(keys)
        new = np.flatnonzero(out < 0)
        if len(new):
            start = len(self.keys_)
            out[new] = np.arange(start, start + len(new))
            for k, i in zip(new.tolist(), range(start, start + len(new))):
                self.index[keys[k]] = i
                self.keys_.append(keys[k])
            self._grow(start + len(new))
        return out

    def row(self, key: tuple) -> int:
        i = self.index.get(key)
        if i is None:
            i = self.index[key] = len(self.keys_)
            self.keys_.append(key)
            self._grow(i + 1)
        return i

    def _grow(self, size: int) -> None:
        if size > self.data.shape[1]:
            data = np.zeros((self.data.shape[0], max(size, 2 * self.data.shape[1]), self.data.shape[2]))
            data[:, :self.data.shape[1]] = self.data
            self.data = data

    def snapshot(self) -> CellRows:
        """A copy of the rows in use (their arrays sized to them)."""
        out = CellRows(self.data.shape[0], self.data.shape[2])
        out.keys_, out.index = list(self.keys_), dict(self.index)
        out.data = self.used().copy()
        return out

    def clear(self) -> None:
        """Forget every row (and the arrays' memory)."""
        self.index, self.keys_ = {}, []
        self.data = np.zeros((self.data.shape[0], 16, self.data.shape[2]))

    def __getstate__(self) -> dict:
        # the rows in use, their non-zero entries only (most cells play few configurations); the index follows
        return {"keys_": self.keys_, "capacity": self.data.shape[1], "data": pack_sparse(self.used())}

    def __setstate__(self, state: dict) -> None:
        if "index" in state:  # pickled whole (before 2026-11-30)
            self.__dict__.update(state)
            return
        self.keys_ = state["keys_"]
        self.index = {k: i for i, k in enumerate(self.keys_)}
        used = unpack_sparse(state["data"])
        self.data = np.zeros((used.shape[0], state["capacity"], used.shape[2]))
        self.data[:, :used.shape[1]] = used


def pack_sparse(a: np.ndarray) -> tuple:
    """An array as (shape, flat positions of its non-zero entries, their values): exact, and small for the
    policy's sparse sums (the Gram matrix, per-cell feature sums, per-cell counts)."""
    flat = np.ascontiguousarray(a).reshape(-1)
    at = np.flatnonzero(flat)
    return (a.shape, at.astype(np.int32 if flat.size < 2 ** 31 else np.int64), flat[at])


def unpack_sparse(packed: tuple) -> np.ndarray:
    shape, at, values = packed
    out = np.zeros(int(np.prod(shape)), dtype=values.dtype)
    out[at] = values
    return out.reshape(shape)


def _pack_levels(levels: dict) -> tuple:
    """Level cells' sums (key -> (s, n, t)) as keys, one sparse matrix of their s (a cell's s is non-zero only
    on the features its rows share) and arrays of n and t."""
    keys = list(levels)
    s = np.array([levels[k][0] for k in keys]) if keys else np.zeros((0, 0))
    return (keys, pack_sparse(s), [levels[k][1] for k in keys], [levels[k][2] for k in keys])


def _unpack_levels(packed: tuple) -> dict:
    keys, s, n, t = packed
    rows = unpack_sparse(s)
    return {k: (rows[i], n[i], t[i]) for i, k in enumerate(keys)}


def _audit_pooled(t: np.ndarray) -> tuple[float, float, float]:
    """The realised gain of the departures from ``audit`` sums (one group's, or every group's summed): (held-out
    mean minus departures' mean log time, its effective weight, its standard error)."""
    md, mh = t[1] / t[0], t[4] / t[3]
    v = max(t[2] / t[0] - md * md, 0.0) / t[0] + max(t[5] / t[3] - mh * mh, 0.0) / t[3]
    return float(mh - md), float(1.0 / (1.0 / t[0] + 1.0 / t[3])), float(math.sqrt(v))


_HISTORY, _RTT, _TIME = attrgetter("history"), attrgetter("handshake_rtt_ms"), attrgetter("time_s")
_GOODPUT, _LOSS = attrgetter("goodput_mbps"), attrgetter("loss")
_WEBSITE, _DEVICE, _CLIENT_ID = attrgetter("website"), attrgetter("client.device"), attrgetter("client.client_id")
_CONFIG, _ARM, _COMPLETION = attrgetter("config"), attrgetter("arm"), attrgetter("completion_ms")


def _key(ctx: Context) -> tuple:
    return (ctx.session, ctx.load_index, ctx.time_s)



def _tiebreak(seed, n: int) -> np.ndarray:
    """The probes' tie order: one fixed uniform number per configuration, from the policy's seed (not its decision
    stream), rotated per cell by :meth:`Tailor._probe_of`."""
    return np.random.default_rng([0x7469, 0 if seed is None else int(seed)]).random(n)

def _bin(edges: tuple, value: float) -> int:
    """Index of the bin ``value`` falls in (``np.searchsorted(edges, value)``: the number of edges below it)."""
    return bisect.bisect_left(edges, value)


@register("tailor")
class TailorPolicy(Policy):
    """Shared Bayesian model + conservative exploration + per-group change detection (module docstring)."""

    parameters = {
        "baseline": ("cdn-static", lambda v: v in ("default", "cdn-static"),
                     "'default' (the registry's) or 'cdn-static' (the configuration the operator runs today: the budget's baseline)"),
        "alpha": (0.01, _FLOAT(0.0, 1.0), "in [0, 1] (budget: at most (1 + alpha) x the baseline's time per group)"),
        "beta": (1.0, _FLOAT(0.0, 10.0), "in [0, 10] (width of the confidence bounds, in posterior sd)"),
        "prior_sd": (0.3, _FLOAT(1e-3, 10.0), "in [0.001, 10] (prior sd of a knob-context coefficient, log scale)"),
        "explore_beta": (1.0, _FLOAT(0.0, 10.0), "in [0, 10] (a probe's LCB width, in posterior sd: how optimistic exploration is)"),
        "min_gain": (0.02, _FLOAT(0.0, 1.0), "in [0, 1] (a probe must be able to beat the safe choice by this, log scale)"),
        "explore_share": (0.1, _FLOAT(0.0, 1.0), "in [0, 1] (at most this share of a group's page loads probes)"),
        "probe": ("local", lambda v: v in ("cheap", "optimistic", "local"),
                  "'cheap' (lowest UCB among plausible), 'optimistic' (lowest LCB) or 'local' (lowest LCB one knob away from the safe choice, else anywhere)"),
        "exploit": ("greedy", lambda v: v in ("safe", "greedy"), "'safe' (lowest UCB) or 'greedy' (lowest mean, paid by the budget)"),
        "budget_z": (3.0, _FLOAT(0.0, 10.0), "in [0, 10] (sd multiplier of the pessimistic bound the budget uses)"),
        "interact": ("all", lambda v: v in ("all", "network"), "'all' or 'network' (context blocks that modulate knob effects)"),
        "probes": (1, lambda v: isinstance(v, int) and 1 <= v <= 1000, "an integer in [1, 1000]"),
        "cusum_drift": (0.5, _FLOAT(0.0, 10.0), "in [0, 10]"),
        "cusum_h": (12.0, _FLOAT(0.1, 1e3), "in [0.1, 1000]"),
        "reopen": (200, lambda v: isinstance(v, int) and v >= 1, "an integer >= 1"),
        "pool": ("website-rtt", lambda v: v in POOL, "one of " + ", ".join(repr(k) for k in POOL)
                 + " (a middle level between the shared model and a cell: what the model misses for a website at an RTT bin, pooled over its cells)"),
        "guard": (1.0, lambda v: v == "off" or (isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v <= 10),
                  "'off' or z in [0, 10] (default guard: only configurations not plausibly > 5% slower than the registry default at z posterior sd)"),
        "guard_base": ("same", lambda v: v == "same" or (isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v <= 10),
                       "'same' or z in [0, 10] (the default guard's z for the baseline's own test: the baseline's "
                       "effect is 0 with no sd, so at 'same' an unmeasured registry default's wide sd alone can rule the "
                       "baseline out; at 0 the baseline is ruled out only where it is expected more than 5% slower than "
                       "the registry default)"),
        "credit": ("gain", lambda v: v in ("none", "gain"),
                   "'none' (a configuration's page loads never add more slack than the baseline's would: its bound "
                   "floored at the baseline) or 'gain' (Wu et al.: a configuration bounded faster than the baseline "
                   "credits the slack with its lower bound of the time saved)"),
        "cell_level": ("joint", lambda v: v in ("joint", "known"),
                       "'joint' (a cell's level and its configurations' effects estimated together: an effect is learnt "
                       "from the cell's own page loads only through contrasts) or 'known' (the level estimated with the "
                       "shared effects taken as known; before 2026-11-26)"),
        "misfit": ("group", lambda v: v in ("group", "contrast", "level"),
                   "'group' (the misfit tau^2 per client group, from cells' contrasts with their own baseline page "
                   "loads, each shrunk to the global value by 20 pseudo-terms), 'contrast' (one global tau^2 from those "
                   "contrasts) or 'level' (one, from every cell with its level given the shared effects; before "
                   "2026-11-26)"),
        "budget_bound": ("sum", lambda v: v in ("play", "sum"),
                         "'play' (the slack repriced as the sum of each played configuration's bound, Wu et al.) or "
                         "'sum' (one bound on the group's sum, Kazerouni et al. 2017: independent cell errors average out)"),
        "budget_unit": ("both", lambda v: v in ("time", "both"),
                        "'time' (the budget holds the group's cumulative time within (1 + alpha) x the baseline's; "
                        "before 2026-12-05) or 'both' (also its page loads: the sum over page loads of time / the "
                        "baseline's time within (1 + alpha_loads) x their number, so cheap page loads cannot spend the "
                        "slack heavy ones earn)"),
        "alpha_loads": (0.05, _FLOAT(0.0, 1.0), "in [0, 1] (with budget_unit 'both': at most (1 + alpha_loads) x the "
                        "baseline's time per page load on average, per group)"),
        "level_epoch": (3600.0, _FLOAT(0.0, 1e7),
                        "in [0, 1e7] seconds (the shared model's effects come from contrasts within a level cell and an "
                        "epoch of this length, so a level that drifts between epochs is not taken for an effect of the "
                        "configurations played later; 0 = one level per cell over all time, before 2026-11-27)"),
        "cell_epoch": ("off", lambda v: v in ("off", "on", "contrast"),
                       "'on' (a cell's own page loads update its effects within the current level epoch only: the "
                       "cell's level is its own per epoch, so a level that drifts within a cell is not taken for the "
                       "effect of the configurations played later; the shared model keeps what earlier epochs taught), "
                       "'contrast' (as 'on', and each ended epoch's contrasts of a configuration with the baseline in "
                       "the cell update the cell's prior) or 'off' (one level per cell over all time)"),
        "cell_lag": ("off", lambda v: v in ("off", "plan"),
                     "'plan' (decisions read a cell's own page loads as of the last plan: an outcome changes the cell's "
                     "choice only at the next plan, so a configuration is not replayed while the conditions that made it "
                     "look fast last) or 'off' (every outcome at once)"),
        "global_em": ("off", lambda v: v in ("off", "on"),
                      "'off' (the global block's knob terms keep their prior variance, prior_sd^2 / 2 for the main "
                      "effects and for the two-knob interactions alike) or 'on' (their two variance components are "
                      "estimated by the same EM step as the context blocks', capped at the prior's: the data decide how "
                      "much of a multi-knob contrast is interaction rather than the knobs' main effects)"),
        "context_prior": ("gauss", lambda v: v in ("gauss", "student"),
                          "'gauss' (the knob terms' context deviations Gaussian, one variance per block) or 'student' "
                          "(Student-t with 4 degrees of freedom, a scale mixture fitted by EM: a context whose contrast is "
                          "far beyond its block's variance gets a wider prior of its own, so it stays in that context "
                          "instead of moving the global effects; the global block stays Gaussian)"),
        "probe_center": ("both", lambda v: v in ("safe", "both", "default", "suspect"),
                         "'safe' (a local probe changes one knob of the safe choice; before 2026-11-30), 'both' (one "
                         "knob of the safe choice or of the configuration with the lowest mean among those the guard allows) "
                         "or 'default' (as 'both', but the registry default itself, however many knobs away, is the probe "
                         "wherever its optimistic bound may beat the safe choice: its effect is what the default guard "
                         "tests every configuration against, and a page load served it is never degraded) or 'suspect' "
                         "(as 'default', only where the posterior expects the baseline more than 5% slower than the "
                         "registry default: the probe goes to the default where the baseline is suspected degraded)"),
        "probe_margin": (0.05, _FLOAT(0.0, 0.05),
                         "in [0, 0.05] (a probe's expected time may lie at most this share above the registry "
                         "default's; 0.05, the degraded threshold, is the default)"),
        "probe_sd": (1.5, lambda v: v == "off" or (isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v <= 10),
                     "'off' or r in (0, 10] (a configuration is probed only where its posterior sd is at most r times "
                     "the median sd of the last PROBE_SD_WINDOW probes chosen -- played online, placed in a table: once "
                     "the model has learned its common contexts, the long shots of the optimistic bound, where it knows "
                     "a configuration far less than usual, are left out; no bound before that many probes; 1.5, the "
                     "default since 2026-12-05)"),
        "probe_value": ("any", lambda v: v in ("any", "kg", "kg_cell"),
                        "'any' (a plausible probe is played whenever the budget pays for it), 'kg' (only when its "
                        "knowledge gradient, the expected gain in the best posterior mean from one more page load "
                        "of it, times the group's page loads so far covers its expected cost over the greedy choice) "
                        "or 'kg_cell' (the same with the context cell's own page loads so far as the horizon)"),
        "greedy_z": (0.0, _FLOAT(0.0, 10.0),
                     "in [0, 10] (the greedy choice is the eligible configuration with the lowest mean + greedy_z sd: "
                     "0 = the lowest mean; larger values discount a low mean that rests on a wide posterior, the "
                     "winner's curse of taking the lowest of many noisy means)"),
        "greedy_own": (0, lambda v: isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= 1000,
                       "an integer in [0, 1000] (a configuration may be the greedy choice only once the context's own "
                       "page loads of it, its level cell over every hour, number at least this many and, where the safe "
                       "choice has as many there, their mean log time is below the safe choice's: the shared model "
                       "proposes, the cell's own page loads confirm; 0 = no such condition)"),
        "greedy_reach": ("any", lambda v: v in ("any", "played"),
                         "'any' (the greedy choice may be any configuration the guard allows) or 'played' (only one "
                         "within one knob of the baseline or of a configuration the context's level cell has played: "
                         "an exploitation then rests on at most one knob term the cell has not tried, as a probe does)"),
        "check_by": ("group", lambda v: v in ("group", "website"),
                     "'group' (greedy_check's sums per client group) or 'website' (per website, over every client "
                     "group: a website where no configuration gains much, a small object, has departures whose "
                     "posterior promised a gain it does not have, and a per-group sum mixes that excess with the "
                     "websites whose departures pay)"),
        "greedy_check": ("off", lambda v: v in ("off", "on", "mean", "shift", "config", "own", "slope"),
                         "'on' (per client group, the prediction errors of the page loads served by a departure that "
                         "was not a probe, observed outcome minus the prediction made before it was known, are compared "
                         "with the baseline's; the departures' excess, less two standard errors, is added to the greedy "
                         "choice's mean before it must beat the safe choice: a group whose greedy choices turned out "
                         "slower than predicted needs a larger predicted gain), 'mean' (the excess itself), 'shift' (the "
                         "excess added to every configuration's effect but the baseline's, before every choice: only "
                         "leaving the baseline pays for it), 'config' (as 'shift', with each configuration's own excess: "
                         "its departures' mean error less the baseline's, shrunk towards the group's excess by "
                         f"{CHECK_PRIOR} pseudo page loads, at least 0), 'own' (as 'config', shrunk towards 0: a "
                         "configuration never served as a departure is not charged), 'slope' (every predicted gain, "
                         "a negative effect, a decision reads is multiplied by the share of their predicted gains the "
                         "departures realised, a regression through the origin of their realised effects, net of the "
                         f"baseline's mean error, on the predicted ones, clipped to [0, 1], after {SLOPE_MIN} "
                         "departures) or 'off'"),
        "audit": (0.0, _FLOAT(0.0, 0.5),
                  "in [0, 0.5] (a randomised audit of the policy's own departures, per client group: where the policy "
                  "would leave the baseline by a choice that is not a probe, it serves the baseline instead with this "
                  "probability, logged as such; the departures' realised log time against the held-out page loads' "
                  "(both net of the model's baseline level), shrunk to every group's pooled estimate, decides: a group "
                  "whose departures have not paid on average stays on the baseline until the evidence, which decays, "
                  "says otherwise; probes go on; 0 = off)"),
        "audit_scope": ("group", lambda v: v in ("group", "pool"),
                        "'group' or 'pool' (how the audit decides: 'group', each client group on its own realised gain "
                        "shrunk to the pooled one; 'pool', every group together on the pooled gain alone, which has "
                        "the power one group lacks: below 0 the departures stop everywhere but for a trickle of "
                        f"{AUDIT_SETTLED} x audit of them, kept to let the evidence reopen them; held out at that "
                        "trickle once the pooled gain is above 0 by two standard errors. A compiled table serves the "
                        "baseline where closed, without the trickle)"),
        "bins": ("coarse", lambda v: v in BINS,
                 "'coarse' (RTT, goodput and loss bins a factor 2-5 wide: RTT_EDGES, GOODPUT_EDGES, LOSS_EDGES) or "
                 "'fine' (each bin split in two at its edges' geometric mean: the cells and the shared model's network "
                 "blocks resolve conditions twice as finely, and so do the decision groups of the tables; the client "
                 "groups of the budget and the change test and the pools keep the coarse bins)"),
        "website_slots": (32, lambda v: isinstance(v, int) and 0 <= v <= 1024,
                          "an integer in [0, 1024] (websites with their own model entry when the environment lists none, as in the manager)"),
    }

    def __getstate__(self) -> dict:
        """The learned state without what is derived from it: the posterior covariance (recomputed from the Gram
        matrix, as the last refit computed it); the Gram matrix, the level cells' sums and the per-cell tables as
        their non-zero entries. A restored state decides as the saved one would (the cells' cached predictions are
        kept: one may predate its website's first outcome, bench/state_size.py)."""
        state = dict(self.__dict__)
        state.pop("_shared", None)  # a cache of predictions (_shared_many), rebuilt on use
        if "_cov_from" in state:  # else a state restored from before 2026-11-30 that has not refitted since
            del state["_cov_blocks"], state["_Q"]
        state["_G"] = pack_sparse(self._G)
        state["_level"], state["_level_past"] = _pack_levels(self._level), _pack_levels(self._level_past)
        state["_packed"] = True
        return state

    def __setstate__(self, state: dict) -> None:
        if state.get("_layout") != STATE_LAYOUT:
            raise ParameterError(f"this learned tailor state has layout {state.get('_layout', 1)}, this version reads "
                                 f"layout {STATE_LAYOUT} (per-cell statistics in arrays); start from a fresh state "
                                 "(tailor manager: a fresh --data)")
        # a state pickled before the level epochs: one level per cell over all time, as it was learned; before
        # ``credit`` and ``budget_bound``: the budget it was learned with (bounds floored, summed per play)
        state = {"global_em": "off", "greedy_reach": "any", "probe_value": "any", "greedy_check": "off", "check_by": "group", "_sel": {}, "audit": 0.0, "audit_scope": "group", "guard_base": "same", "_audit": {}, "_audit_world": None, "_sel_c": {}, "_sel_p": {}, "greedy_z": 0.0, "greedy_own": 0, "context_prior": "gauss", "probe_center": "safe", "probe_margin": 0.05, "probe_sd": "off", "_probe_cap": math.inf, "_probe_sds": deque(maxlen=PROBE_SD_WINDOW), "level_epoch": 0.0, "_level_past": {}, "_level_keys": len(state.get("_level", ())),
                 "credit": "none", "budget_bound": "play", "bins": "coarse", **state}
        if state.pop("_packed", False):
            state["_G"] = unpack_sparse(state["_G"])
            state["_level"], state["_level_past"] = _unpack_levels(state["_level"]), _unpack_levels(state["_level_past"])
        self.__dict__.update(state)
        if "_stats_now" not in state:  # before ``cell_epoch``
            self.cell_epoch, self._stats_now, self._stats_epoch = "off", CellRows(2, len(self.space)), 0
        if "_stats_past" not in state:
            self._stats_past = CellRows(2, len(self.space))
        if "_slack_n" not in state:  # before ``budget_unit``: times only (the page-load counts start at 0)
            self.budget_unit, self.alpha_loads, self._slack_n, self._reserved_n = "time", 0.05, {}, {}
            self._played.data = np.concatenate([self._played.data, np.zeros_like(self._played.data)])
        if "_stats_lag" not in state:  # before ``cell_lag``
            self.cell_lag, self._stats_lag = "off", CellRows(2, len(self.space))
        if "_cov_blocks" not in state:
            self._restore_cov()
        if "_tiebreak" not in state:  # before the probes' fixed tie order (2026-12-07)
            self._tiebreak = _tiebreak(self.seed, len(self.space))

    @property
    def _floor(self) -> float:
        """The least budget bound (log time against the baseline) a played configuration is credited with."""
        return 0.0 if self.credit == "none" else -math.inf

    # -- features
    def _init_state(self) -> None:
        space = self.space
        self._layout = STATE_LAYOUT
        # the websites' entries: those the environment lists (the simulator), else the first website_slots
        # websites observed (the manager learns them from telemetry); any other website shares the last entry
        self._sites = {s: i for i, s in enumerate(sorted(self.env.websites))}
        self._site_slots = len(self._sites) if self._sites else self.website_slots
        self._size: dict[str, float] = {}  # website -> standardised log size, from the telemetry's byte counts
        self._n_psi = self._blocks()["hour"][1]
        if self.baseline == "default":
            self._base = space.default_index
        elif self.baseline == "cdn-static":
            from tailor.policies.baselines import cdn_static_index

            self._base = cdn_static_index(space)
        self._e = knob_design(space, self._base)  # configs x n_e, zero for the baseline
        self._d = self._e  # effect directions relative to the baseline
        knobs = list(space.grid)
        values = np.array([[str(cf[k]) for k in knobs] for cf in space.configs])
        self._near = (values[:, None, :] != values[None, :, :]).sum(axis=2) == 1  # configurations one knob apart
        self._n_e = self._e.shape[1]
        # which psi blocks modulate the knobs' effects: all, or the network (RTT, goodput, loss bins) only
        blocks = self._blocks()
        keep = ("intercept", "rtt", "goodput", "loss") if self.interact == "network" else tuple(blocks)
        self._int = np.concatenate([np.arange(*blocks[b]) for b in keep])
        self._n_int = len(self._int)
        # psi's blocks are each one-hot or one scalar: a cell is its active entry per block (a "slot") and value
        self._block_start = np.array([blocks[b][0] for b in blocks])
        self._int_slots = np.array([k for k, b in enumerate(blocks) if b in keep])
        self._int_pos = np.full(self._n_psi, -1)
        self._int_pos[self._int] = np.arange(self._n_int)
        dim = self._n_psi + self._n_int * self._n_e
        # variance components of the knob terms: (context block, main effect or two-knob interaction); the
        # intercept block (the global effects) keeps its prior, the others are estimated by empirical Bayes (EM)
        n_main = sum(1 for name, values in space.grid.items() for v in values if v != space.configs[self._base][name])
        pair = np.arange(self._n_e) >= n_main
        block_of = np.concatenate([np.full(blocks[b][1] - blocks[b][0], k) for k, b in enumerate(keep)])
        self._comp = (2 * block_of[:, None] + pair[None, :]).ravel()  # per knob term, row-major (psi entry, e)
        # at first half of a knob change's prior variance is global and half spread over the context blocks
        self._comp_var = np.full(2 * len(keep), self.prior_sd ** 2 / (2.0 * max(len(keep) - 1, 1)))
        self._comp_var[:2] = self.prior_sd ** 2 / 2.0
        self._comp_cap = self._comp_var.copy()
        self._prior_prec = np.concatenate([np.full(self._n_psi, 1.0 / 9.0), 1.0 / self._comp_var[self._comp]])
        self._G = np.zeros((dim, dim))
        self._h = np.zeros(dim)
        self._yy = 0.0
        self._n = 0
        # the shared model is fitted *within* level cells (website, device, RTT, goodput and loss bins): each cell's
        # own level is absorbed (fixed effects, Frisch-Waugh), so knob effects come from contrasts inside a cell and
        # cells' levels, which an additive model of log time cannot describe, neither bias them nor count as noise.
        # Per cell: s = sum of its rows' phi, n, t = sum of log y (the rank-one correction -s s^T / n)
        self._level: dict[tuple, tuple[np.ndarray, float, float]] = {}
        self._tt = 0.0  # sum over cells of t^2 / n
        # with level_epoch: the level cells are (cell, epoch); an ended epoch's are merged per cell here (the level
        # model's input; their corrections are in the Gram already), and counted for the noise's degrees of freedom
        self._level_past: dict[tuple, tuple[np.ndarray, float, float]] = {}
        self._level_keys = 0
        self._level_var = 1.0  # variance of cells' levels around the additive level model (_fit_levels)
        # page loads since the last plan, aggregated: cell -> (count, sum of log y) per configuration; a row of the
        # design depends only on its cell and configuration, so the refit costs per cell, not per page load
        self._rows = CellRows(2, len(space))
        self._recent: dict[tuple, float] = {}  # level cell -> its page loads in the last period (table probes)
        self._mu = np.zeros(dim)
        self._cov_from: tuple[float, np.ndarray] | None = None  # (sigma^2, prior precisions) of the covariance; None: the prior's
        self._restore_cov()
        self._sigma2 = 0.1
        self._cells: dict[tuple, tuple] = {}  # cell -> (psi, mean delta, sd delta, log baseline level)
        self._shared: dict | None = None  # the same for many cells, as arrays (_shared_many)
        self._probes: dict[tuple, int] = {}
        # probe_sd: the sds of the last probes played and the bound they set on a probe's sd (none until the window fills)
        self._probe_sds: deque[float] = deque(maxlen=PROBE_SD_WINDOW)
        self._probe_cap = math.inf
        self._seen: dict[str, list[int]] = {}
        # per client group: slack, CUSUM, residual means per config, widening after an alarm
        self._slack: dict[str, float] = {}
        self._times: dict[str, tuple[int, float]] = {}  # group -> (page loads, sum of baseline-time estimates)
        self._reserved: dict[tuple, tuple[str, float]] = {}  # pending page load -> (group, reserved cost)
        # ``budget_unit='both'``: the slack in baseline page loads, sum_s (1 + alpha_loads - y_s / b_s), and its reservations
        self._slack_n: dict[str, float] = {}
        self._reserved_n: dict[tuple, float] = {}
        self._played = CellRows(2, len(space))  # context cell -> (sum of times, page loads) per config (group: _group)
        self._cusum: dict[str, list[float]] = {}
        self._stats = CellRows(2, len(space))  # cell w/o hour -> (n, sum log y) per config
        self._stats_now = CellRows(2, len(space))  # the same, the current level epoch only (``cell_epoch``)
        self._stats_lag = CellRows(2, len(space))  # the same as of the last plan (``cell_lag``)
        self._stats_epoch = 0
        # ``cell_epoch='contrast'``: per cell and configuration, the ended epochs' contrasts with the baseline:
        # their weights n_c n_b / (n_c + n_b) and weighted differences of mean log time
        self._stats_past = CellRows(2, len(space))
        self._clients: OrderedDict[str, list] = OrderedDict()  # client address -> [page loads, sum of residuals]
        self._cov_c = [0.0, 0.0]  # sum of residual x the client's earlier mean residual, count
        self._client_var = 0.0  # tau_c^2, re-estimated at plan (0 until then: no offset)
        self._gss: dict[str, tuple[float, int]] = {}  # group -> within-(cell, config) sum of squares, its dof
        self._kappa = 1.0  # calibration: sd multiplier so that prediction errors of probes have unit z^2
        # non-baseline page loads (discounted): sum and sum of squares of (squared error - predicted variance),
        # sum of the effects' variances, count
        self._z2 = [0.0, 0.0, 0.0, 0.0]
        self._tau2 = 0.01  # misfit variance of the shared model, re-estimated at plan
        self._tau2_group: dict[str, float] = {}  # the misfit per client group (misfit='group'), at plan
        self._tau2_pool = 0.01  # variance of the pools' residual effects (_fit_pool)
        # the pools' residual effects and their variances (_fit_pool): rows for the level cells (their own data left
        # out; _pool_at: row of the cell statistics -> row here), for the pools (_pool_index) and for "none"
        self._pool_d: np.ndarray | None = None
        self._pool_v: np.ndarray | None = None
        self._pool_at = np.zeros(0, dtype=np.int64)
        self._pool_index: dict[tuple, int] = {}
        self._since_alarm: dict[str, int] = {}
        # greedy_check: per client group, the prediction errors of non-probe departures and of the baseline (count,
        # sum, sum of squares each)
        self._sel: dict[str, list[float]] = {}
        self._sel_c: dict[str, np.ndarray] = {}  # greedy_check='config': group -> (count, error sum) per configuration
        # greedy_check='slope': per key, the departures' (sum p * err, sum p^2, sum p), p the predicted effect
        self._sel_p: dict[str, np.ndarray] = {}
        # audit: per client group, discounted (weight, sum, sum of squares) of the log time net of the baseline
        # level, of the departures served and of the page loads held out from departures; every group's pooled
        # realised gain and its weight (at plan)
        self._audit: dict[str, np.ndarray] = {}
        self._audit_world: tuple[float, float] | None = None
        self._alarms: list[tuple[float, str]] = []
        self._now = 0.0
        self._tiebreak = _tiebreak(self.seed, len(space))

    def _cell(self, ctx: Context) -> tuple:
        """The context cell: website, device, RTT bin, goodput bin, loss bin, hour bin (-1 = unknown)."""
        h = ctx.history
        rtt_e, gp_e, loss_e = self._edges
        rtt = _bin(rtt_e, max(ctx.handshake_rtt_ms, 0.1))
        gp = -1 if h is None else _bin(gp_e, max(h.goodput_mbps, 1e-3))
        loss = -1 if h is None else _bin(loss_e, h.loss)
        hour = int((ctx.time_s % 86400.0) // (86400.0 / HOUR_BINS))
        return (ctx.website, ctx.client.device, rtt, gp, loss, hour)

    @property
    def _edges(self) -> tuple[tuple, tuple, tuple]:
        """The cells' (RTT, goodput, loss) bin edges (``bins``)."""
        return EDGES[self.bins]

    def _coarse(self, b):
        """A bin index (or array of them) of :attr:`_edges` as the coarse bin it lies in (-1, unknown, stays)."""
        if self.bins == "coarse":
            return b
        return np.where(b < 0, b, (b + 1) // 2) if isinstance(b, np.ndarray) else (b if b < 0 else (b + 1) // 2)

    def _cells_of(self, ctxs: Sequence[Context], parts: bool = False) -> tuple:
        """:meth:`_cell` of many contexts at once: the distinct cells and each context's index into them; with
        ``parts``, also the cells' parts as arrays (:meth:`_parts`) and their integer codes."""
        m = len(ctxs)
        rtt_e, gp_e, loss_e = self._edges
        # fields read by C-level maps (attrgetter), not per-context Python expressions: the batch's hot loop
        hist = list(map(_HISTORY, ctxs))
        known = np.fromiter(map(is_not, hist, repeat(None)), bool, m)
        rtt = np.searchsorted(rtt_e, np.maximum(np.fromiter(map(_RTT, ctxs), float, m), 0.1))
        gp, loss = np.full(m, -1, dtype=np.int64), np.full(m, -1, dtype=np.int64)
        if known.any():
            have = [h for h in hist if h is not None]
            gp[known] = np.searchsorted(gp_e, np.maximum(np.fromiter(map(_GOODPUT, have), float, len(have)), 1e-3))
            loss[known] = np.searchsorted(loss_e, np.fromiter(map(_LOSS, have), float, len(have)))
        hour = (np.fromiter(map(_TIME, ctxs), float, m) % 86400.0 // (86400.0 / HOUR_BINS)).astype(np.int64)
        site_device = list(zip(map(_WEBSITE, ctxs), map(_DEVICE, ctxs)))
        names = {pair: k for k, pair in enumerate(dict.fromkeys(site_device))}  # in order of first appearance
        name = np.fromiter(map(names.__getitem__, site_device), np.int64, m)
        code = (((name * (len(rtt_e) + 1) + rtt) * (len(gp_e) + 2) + gp + 1)
                * (len(loss_e) + 2) + loss + 1) * HOUR_BINS + hour
        ucode, first, inverse = np.unique(code, return_index=True, return_inverse=True)
        pairs = list(names)
        cells = [pairs[k] + v for k, v in zip(name[first].tolist(), zip(
            rtt[first].tolist(), gp[first].tolist(), loss[first].tolist(), hour[first].tolist()))]
        if not parts:
            return cells, inverse.ravel()
        return cells, inverse.ravel(), (pairs, name[first], rtt[first], gp[first], loss[first], hour[first]), ucode

    @staticmethod
    def _parts(cells: Sequence[tuple]) -> tuple:
        """Cells as parts: the distinct (website, device) pairs, each cell's pair index and its RTT, goodput, loss
        and hour bins (arrays)."""
        names: dict[tuple, int] = {}
        name = np.fromiter((names.setdefault(c[:2], len(names)) for c in cells), np.int64, len(cells))
        bins = np.array([c[2:6] for c in cells], dtype=np.int64).reshape(len(cells), 4)
        return (list(names), name, *bins.T)

    def _group(self, cell: tuple) -> str:
        """The client group of the budget and the change test: network class = RTT bin x goodput bin (coarse)."""
        return f"r{self._coarse(cell[2])}g{self._coarse(cell[3])}"

    def _blocks(self) -> dict[str, tuple[int, int]]:
        """The blocks of psi: name -> [start, end). Each is one-hot, or one scalar (``size``); the hour comes last
        (the level model, :meth:`_fit_levels`, takes the blocks before it)."""
        rtt_e, gp_e, loss_e = self._edges
        sizes = {"intercept": 1, "website": self._site_slots + 1, "size": 1, "device": len(DEVICES) + 1, "rtt": len(rtt_e) + 1,
                 "goodput": len(gp_e) + 2, "loss": len(loss_e) + 2, "hour": HOUR_BINS}
        out, start = {}, 0
        for name, size in sizes.items():
            out[name] = (start, start + size)
            start += size
        return out

    def _slots(self, cells: Sequence[tuple], parts: tuple | None = None) -> tuple[np.ndarray, np.ndarray]:
        """psi of each cell as its active entry per block (cells x blocks) and that entry's value: 1, or the
        website's size for the size block (unknown values have their own entry). ``parts``: the cells'
        :meth:`_parts`, when at hand."""
        pairs, name, rtt, gp, loss, hour = parts if parts is not None else self._parts(cells)
        site = np.array([self._sites.get(s, self._site_slots) for s, _ in pairs], dtype=np.int64)
        size = np.array([self._size.get(s, 0.0) for s, _ in pairs])
        device = np.array([DEVICES.index(d) if d in DEVICES else len(DEVICES) for _, d in pairs], dtype=np.int64)
        idx = np.zeros((len(cells), len(self._block_start)), dtype=np.int64)
        val = np.ones(idx.shape)
        if len(pairs):
            idx[:, 1], val[:, 2], idx[:, 3] = site[name], size[name], device[name]
        idx[:, 4] = rtt
        idx[:, 5] = np.where(gp >= 0, gp, len(self._edges[1]) + 1)
        idx[:, 6] = np.where(loss >= 0, loss, len(self._edges[2]) + 1)
        idx[:, 7] = hour
        return idx + self._block_start, val

    def _psi_rows(self, cells: Sequence[tuple], slots: tuple | None = None) -> np.ndarray:
        """psi of each cell (cells x psi entries), from its :meth:`_slots` when they are at hand."""
        idx, val = slots if slots is not None else self._slots(cells)
        out = np.zeros((len(cells), self._n_psi))
        out[np.arange(len(cells))[:, None], idx] = val
        return out

    def _psi(self, cell: tuple) -> np.ndarray:
        return self._psi_rows([cell])[0]

    def _set_cov(self, cov: np.ndarray) -> None:
        """Keep the knob-term block of the posterior covariance as (psi, psi, e, e) blocks."""
        n_psi, n_int, n_e = self._n_psi, self._n_int, self._n_e
        block = cov[n_psi:, n_psi:].reshape(n_int, n_e, n_int, n_e)
        self._cov_blocks = np.ascontiguousarray(block.transpose(0, 2, 1, 3))
        # per pair of psi entries and configuration: d_c^T C_ab d_c, so a cell's effect variances are a small sum
        t = self._cov_blocks @ self._d.T  # (a, b, i, c)
        self._Q = np.einsum("ci,abic->abc", self._d, t, optimize=True)

    # -- predictions per cell
    def _predict_many(self, cells: Sequence[tuple], at: tuple[np.ndarray, np.ndarray] | None = None,
                      parts: tuple | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The shared model's prediction for each cell: psi (cells x psi entries), the mean and sd of every
        configuration's effect (cells x configurations) and the log baseline level. psi has one active entry per
        block, so a cell's effect variance is a sum over pairs of its knob-modulating slots,
        ``sum_ab p_a p_b d_c^T C_ab d_c``. With ``at`` = (cell positions, configurations), the sd only at those
        pairs (0 elsewhere): the variance is most of the cost, and folding a batch needs it only where played."""
        n_psi, n_e = self._n_psi, self._n_e
        idx, val = self._slots(cells, parts)
        psi = self._psi_rows(cells, (idx, val))
        pidx = self._int_pos[idx[:, self._int_slots]]
        pval = val[:, self._int_slots]
        w_int = self._mu[n_psi:].reshape(self._n_int, n_e)
        u = np.einsum("ms,mse->me", pval, w_int[pidx])  # pint @ w_int per cell
        mean = u @ self._d.T
        # Q's (a, b) pairs as rows (one index per gathered entry: np.take, not a fancy index per axis)
        q2 = self._Q.reshape(self._n_int * self._n_int, -1)
        if at is not None:
            var = np.zeros_like(mean)
            k, c = at
            p, q = pval[k], pidx[k]
            flat = (q[:, :, None] * self._n_int + q[:, None, :]) * q2.shape[1] + c[:, None, None]
            var[k, c] = np.einsum("ks,kt,kst->k", p, p, q2.reshape(-1).take(flat))
            level = psi @ self._mu[:n_psi] + u @ self._e[self._base]
            return psi, mean, np.sqrt(np.maximum(var, 0.0)), level
        var = np.empty_like(mean)
        for lo in range(0, len(cells), 2048):  # the gathered covariance blocks: 2048 x slots^2 x configurations
            p, q = pval[lo:lo + 2048], pidx[lo:lo + 2048]
            var[lo:lo + 2048] = np.einsum("ms,mt,mstc->mc", p, p, q2.take(q[:, :, None] * self._n_int + q[:, None, :],
                                                                          axis=0), optimize=True)
        level = psi @ self._mu[:n_psi] + u @ self._e[self._base]
        return psi, mean, np.sqrt(np.maximum(var, 0.0)), level

    def _predict(self, cell: tuple) -> tuple:
        """:meth:`_predict_many` of one cell with its pool's correction (:meth:`_pooled`), cached until the next
        plan (both are fixed between plans)."""
        hit = self._cells.get(cell)
        if hit is None:
            psi, mean, sd, level = self._predict_many([cell])
            mean, sd = self._pooled([cell], mean, sd)
            hit = self._cells[cell] = (psi[0], mean[0], sd[0], float(level[0]))
        return hit

    def _effects(self, cell: tuple, group: str, own: CellRows | None = None) -> tuple[np.ndarray, np.ndarray, float, float]:
        """:meth:`_posterior` of one cell (its pooled shared prediction cached); ``own``: as there."""
        _, mean, sd, level = self._predict(cell)
        delta, sd, base, base_var = self._posterior([cell], [group], mean[None], sd[None], np.array([level]), own=own)
        return delta[0], sd[0], float(base[0]), float(base_var[0])

    def _effects_many(self, cells: Sequence[tuple], groups: Sequence[str] | tuple[list[str], np.ndarray],
                      at: tuple[np.ndarray, np.ndarray] | None = None, parts: tuple | None = None,
                      srow: np.ndarray | None = None) -> tuple:
        """:meth:`_posterior` of many cells (cells x configurations, and per cell); ``at``: only at those (cell,
        configuration) pairs (the effects' means and sds as vectors over the pairs; a cell's level from all its
        configurations, :meth:`_predict_many`, :meth:`_joint_cell`); ``parts``, ``srow`` (the cells' rows of the cell
        statistics): when at hand. With ``at`` (a batch), the shared model's predictions come from
        :meth:`_shared_many`: every configuration's sd, since a cell's level weighs each configuration the cell has
        page loads of by its prior variance (:meth:`_joint_cell`; until 2026-12-06 the sds were computed at the
        batch's pairs only, 0 elsewhere, and the levels were off by up to 0.013 in log time on the bench's records)."""
        if srow is None:
            srow = self._stats.find([cell[:5] for cell in cells])
        if at is None:
            _, mean, sd, level = self._predict_many(cells, None, parts)
        else:
            mean, sd, level = self._shared_many(cells, parts)
        mean, sd = self._pooled(cells, mean, sd, srow)
        return self._posterior(cells, groups, mean, sd, level, srow, at=at)

    def _shared_many(self, cells: Sequence[tuple], parts: tuple | None = None) -> tuple:
        """:meth:`_predict_many`'s effect means, sds and log baseline levels of many cells (cells x configurations,
        and per cell), kept per cell until the model or a website's entry changes (:meth:`_plan`,
        :meth:`_learn_website`), as :meth:`_predict` keeps one cell's: a batch computes only the cells no batch
        since then has, and the plan seeds the cells it priced (:meth:`_sum_slack`). ``parts``: the cells'
        :meth:`_parts`, when at hand."""
        cache = self._shared_cache()
        index = cache["index"]
        rows = np.fromiter(map(index.get, cells, repeat(-1)), np.int64, len(cells))
        miss = np.flatnonzero(rows < 0)
        if len(miss):
            sub = [cells[i] for i in miss.tolist()]
            _, mean, sd, level = self._predict_many(sub, None, None if parts is None else
                                                    (parts[0], *(a[miss] for a in parts[1:])))
            rows[miss] = self._shared_add(sub, mean, sd, level)
        return cache["mean"][rows], cache["sd"][rows], cache["level"][rows]

    def _shared_cache(self) -> dict:
        cache = self.__dict__.get("_shared")
        if cache is None:
            n_cfg = len(self.space)
            cache = self._shared = {"index": {}, "mean": np.zeros((0, n_cfg)), "sd": np.zeros((0, n_cfg)),
                                    "level": np.zeros(0)}
        return cache

    def _shared_add(self, cells: Sequence[tuple], mean: np.ndarray, sd: np.ndarray, level: np.ndarray) -> np.ndarray:
        """Keep the shared model's predictions of cells new to :meth:`_shared_many`'s cache; their rows."""
        cache = self._shared_cache()
        index, start = cache["index"], len(cache["index"])
        if start + len(cells) > len(cache["level"]):  # capacity doubles: a batch appends without copying the rest
            size = max(2 * len(cache["level"]), start + len(cells), 1024)
            for key in ("mean", "sd", "level"):
                grown = np.zeros((size,) + cache[key].shape[1:])
                grown[:start] = cache[key][:start]
                cache[key] = grown
        end = start + len(cells)
        cache["mean"][start:end], cache["sd"][start:end], cache["level"][start:end] = mean, sd, level
        index.update(zip(cells, range(start, end)))
        return np.arange(start, end)

    def _own(self) -> CellRows:
        """The statistics a cell's posterior reads its own page loads from (:meth:`_posterior`): the current level
        epoch's with ``cell_epoch`` 'on' or 'contrast', else all time's (``_select`` with ``cell_lag`` 'plan' reads
        their snapshot at the last plan instead, ``_stats_lag``)."""
        return self._stats_now if self.cell_epoch != "off" and self.level_epoch > 0 else self._stats

    def _pool_key(self, cell: tuple) -> tuple:
        return (cell[0], self._coarse(cell[2])) if self.pool == "website-rtt" else (cell[0],)

    def _pooled(self, cells: Sequence[tuple], mean: np.ndarray, sd: np.ndarray,
                srow: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The shared prediction with the pool's correction (:meth:`_fit_pool`): the cell's pool's residual
        effects without the cell's own page loads (they update the cell in :meth:`_posterior`), its variance added.
        ``srow``: the cells' rows of the cell statistics, when at hand."""
        if self._pool_d is None:
            return mean, sd
        idx = self._pool_rows(cells, srow)
        return mean + self._pool_d[idx], np.sqrt(sd ** 2 + self._pool_v[idx])

    def _pool_rows(self, cells: Sequence[tuple], srow: np.ndarray | None = None) -> np.ndarray:
        """Each cell's row of the pool's estimates (:meth:`_fit_pool`; the last row: a pool without one)."""
        if srow is None:
            srow = self._stats.find([cell[:5] for cell in cells])
        at = self._pool_at
        idx = np.where((srow >= 0) & (srow < len(at)), at[np.clip(srow, 0, max(len(at) - 1, 0))], -1) \
            if len(at) else np.full(len(cells), -1)
        for i in np.flatnonzero(idx < 0).tolist():  # a level cell new since the plan: its pool's estimate
            idx[i] = self._pool_index.get(self._pool_key(cells[i]), -1)
        return idx

    def _fit_pool(self) -> None:
        """The middle level of the hierarchy: per pool (a website, or a website at an RTT bin) and configuration,
        the shared model's residual effect -- what its additive structure misses there, e.g. that a knob which
        helps large websites at this RTT slows a small one -- as a random effect of variance tau_p^2 (method of
        moments, pools with >= 5 page loads of a configuration), estimated from the residuals of the pool's cells
        (each cell's level taken out); a cell's own page loads are left out of its estimate (they update the cell
        itself in :meth:`_posterior`), a cell with none gets the pool's."""
        self._pool_d = self._pool_v = None
        n, total = self._stats.used()
        on = np.flatnonzero(n.sum(axis=1) > 0)
        if self.pool == "none" or not len(on) or not self._n:
            return
        keys = [self._stats.keys_[i] for i in on.tolist()]
        n, total = n[on], total[on]
        _, mean, sd, level = self._predict_many([k + (0,) for k in keys])
        s2 = self._sigma2
        base, _ = self._own_level(n, total, mean, level, s2)
        resid = total - n * (base + mean)
        n = n.copy()
        n[:, self._base], resid[:, self._base] = 0.0, 0.0
        names: dict[tuple, int] = {}
        inv = np.fromiter((names.setdefault(self._pool_key(k), len(names)) for k in keys), np.int64, len(keys))
        r_g = np.zeros((len(names), n.shape[1]))
        n_g, v_g = np.zeros(r_g.shape), np.zeros(r_g.shape)
        np.add.at(r_g, inv, resid)
        np.add.at(n_g, inv, n)
        np.add.at(v_g, inv, n * sd ** 2)
        ok = n_g >= 5
        if ok.any():
            terms = (r_g[ok] / n_g[ok]) ** 2 - s2 / n_g[ok] - v_g[ok] / n_g[ok]
            self._tau2_pool = float(np.clip(np.mean(terms), 1e-4, 0.5))
        shrink = s2 / self._tau2_pool
        r_c, n_c = r_g[inv] - resid, n_g[inv] - n  # leave the cell out
        # rows: the level cells with data (by their row of the cell statistics), the pools, then "no pool"
        # (no correction, variance tau_p^2); the baseline's column has none
        self._pool_d = np.vstack([r_c / (n_c + shrink), r_g / (n_g + shrink), np.zeros((1, n.shape[1]))])
        self._pool_v = np.vstack([s2 / (n_c + shrink), s2 / (n_g + shrink), np.full((1, n.shape[1]), self._tau2_pool)])
        self._pool_d[:, self._base] = self._pool_v[:, self._base] = 0.0
        self._pool_at = np.full(len(self._stats), -1)
        self._pool_at[on] = np.arange(len(on))
        self._pool_index = {key: len(on) + g for key, g in names.items()}

    def _posterior(self, cells: Sequence[tuple], groups: Sequence[str] | tuple[list[str], np.ndarray], mean: np.ndarray,
                   sd: np.ndarray, level: np.ndarray, srow: np.ndarray | None = None, detail: bool = False,
                   own: CellRows | None = None, at: tuple[np.ndarray, np.ndarray] | None = None) -> tuple:
        """Posterior mean and sd of delta(x, c) for every configuration in each cell, the cell's log baseline level
        and that level's posterior variance: the shared model is the prior of the cell's own page loads
        (normal-normal, prior variance = the model's parameter variance + its misfit tau^2), so a cell with no
        data is the shared model and a cell with many page loads is its own data. ``detail``: also the weight of
        the prior in the posterior mean, var / v0 (cells x configurations), and the sd's scale (the alarm's
        widening times kappa, cells x 1), which the budget's bound on a sum needs (:meth:`_sum_slack`). ``own``: the
        cells' own statistics to read (default :meth:`_own`). ``at`` = (cell positions, configurations): the effects'
        means and sds only at those pairs, as vectors (the levels as always; not with ``detail``)."""
        own = self._own() if own is None else own
        row = own.find([cell[:5] for cell in cells]) if srow is None or own is not self._stats else srow
        has = row >= 0
        if has.all():  # one gather (a copy) instead of zeros and a masked assignment
            n, total = own.data[:, row]
        else:
            n = np.zeros(mean.shape)
            total = np.zeros(mean.shape)
            n[has], total[has] = own.data[:, row[has]]
        if isinstance(groups, tuple):  # (the distinct groups, each cell's index into them)
            names, gidx = groups
        else:
            index: dict[str, int] = {}
            gidx = np.fromiter((index.setdefault(g, len(index)) for g in groups), np.int64, len(groups))
            names = list(index)
        s2 = np.array([self._noise(g) for g in names])[gidx][:, None]
        default = self._base
        tau2 = self._tau2
        if getattr(self, "_tau2_group", None):
            tau2 = np.array([self._tau2_group.get(g, self._tau2) for g in names])[gidx][:, None]
        v0 = np.maximum(sd ** 2 + tau2, 1e-12)
        if self.cell_epoch == "contrast" and self.level_epoch > 0 and len(self._stats_past):
            prow = self._stats_past.find([cell[:5] for cell in cells])
            if (prow >= 0).any():  # the ended epochs' contrasts update the prior of the current epoch's joint posterior
                w, wd = np.zeros(mean.shape), np.zeros(mean.shape)
                w[prow >= 0], wd[prow >= 0] = self._stats_past.data[:, prow[prow >= 0]]
                prec = 1.0 / v0 + w / s2
                mean, v0 = (mean / v0 + wd / s2) / prec, 1.0 / prec
        if getattr(self, "cell_level", "joint") == "joint":
            base, base_var, delta, var, prior_weight = self._joint_cell(n, total, mean, v0, level, s2,
                                                                        None if detail else at)
        else:  # the level estimated with the shared effects taken as known, then the effects given that level
            base, base_var = self._own_level(n, total, mean, level, s2)
            var = 1.0 / (1.0 / v0 + n / s2)
            delta = var * (mean / v0 + (total - n * base) / s2)
            prior_weight = var / v0
        since = np.array([self._since_alarm.get(g, self.reopen) for g in names], dtype=float)
        widen = np.maximum(2.0 - since / self.reopen, 1.0)[gidx][:, None]
        if at is not None and not detail:  # vectors over the pairs (the same arithmetic, element by element)
            k, c = at
            if delta.ndim == 2:
                delta, var = delta[k, c], var[k, c]
            delta, var = np.where(c == default, 0.0, delta), np.where(c == default, 0.0, var)
            return delta, np.sqrt(var) * widen[k, 0] * self._kappa, base[:, 0], base_var[:, 0]
        delta[:, default], var[:, default] = 0.0, 0.0
        if detail:
            return delta, np.sqrt(var) * widen * self._kappa, base[:, 0], base_var[:, 0], prior_weight, widen * self._kappa
        return delta, np.sqrt(var) * widen * self._kappa, base[:, 0], base_var[:, 0]

    def _joint_cell(self, n: np.ndarray, total: np.ndarray, mean: np.ndarray, v0: np.ndarray, level: np.ndarray,
                    s2: np.ndarray, at: tuple[np.ndarray, np.ndarray] | None = None) -> tuple:
        """The joint posterior of a cell's level L and its configurations' effects (``cell_level='joint'``).

        Priors: ``L ~ N(level, level_var)`` (the level model), ``delta_c ~ N(mean_c, v0_c)`` (the shared model and
        its pool); a configuration's mean log time ``ybar_c ~ N(L + delta_c, s2 / n_c)``, the baseline's
        ``N(L, s2 / n_b)``. Integrating the effects out, ``ybar_c - mean_c ~ N(L, v0_c + s2 / n_c)``, which gives L's
        posterior (a configuration the cell has played says little about its level when its effect is uncertain);
        then ``delta_c | L`` is normal-normal and, by total variance, ``Var(delta_c) = 1 / prec_c + b_c^2 Var(L)``,
        ``b_c = (n_c / s2) / prec_c``. So an effect is learnt from the cell's own page loads only through contrasts:
        a cell that played one configuration and never the baseline keeps that effect's prior uncertainty (it cannot
        tell its level from the effect), where the earlier rule (the level estimated with the shared effects taken as
        known, the effect then given that level, ``cell_level='known'``) confirmed the shared prediction with every
        page load and shrank its sd as if the page loads measured the effect. Returns the level's posterior mean and
        variance (cells x 1), the effects' means and variances and the weight of the prior mean in the effect
        (cells x configurations; with ``at`` = (cell positions, configurations), vectors over those pairs)."""
        default, lv = self._base, self._level_var
        other = n > 0
        other[:, default] = False
        safe_n = np.maximum(n, 1.0)
        w = np.where(other, 1.0 / (v0 + s2 / safe_n), 0.0)
        r = np.where(other, total / safe_n - mean, 0.0)
        prec_l = 1.0 / lv + n[:, [default]] / s2 + w.sum(axis=1, keepdims=True)
        base_var = 1.0 / prec_l
        base = base_var * (level[:, None] / lv + total[:, [default]] / s2 + (w * r).sum(axis=1, keepdims=True))
        if at is not None:  # the effects only where asked (a batch's played pairs): the cells' levels need them all
            k, c = at
            n, total, mean, v0, s2 = n[k, c], total[k, c], mean[k, c], v0[k, c], s2[k, 0]
            cond = 1.0 / (1.0 / v0 + n / s2)
            b = cond * n / s2
            delta = cond * (mean / v0 + (total - n * base[k, 0]) / s2)
            return base, base_var, delta, cond + b * b * base_var[k, 0], cond / v0
        cond = 1.0 / (1.0 / v0 + n / s2)
        b = cond * n / s2
        delta = cond * (mean / v0 + (total - n * base) / s2)
        return base, base_var, delta, cond + b * b * base_var, cond / v0

    def _own_level(self, n: np.ndarray, total: np.ndarray, mean: np.ndarray, level: np.ndarray,
                   s2: np.ndarray | float) -> tuple[np.ndarray, np.ndarray]:
        """Each cell's log baseline level and its variance (cells x 1): the shared level model's prediction
        updated by the cell's page loads net of the configurations' effects (normal-normal, noise ``s2``)."""
        lv = self._level_var
        base_var = 1.0 / (1.0 / lv + n.sum(axis=1, keepdims=True) / s2)
        return base_var * (level[:, None] / lv + np.sum(total - n * mean, axis=1, keepdims=True) / s2), base_var

    def _noise(self, group: str) -> float:
        """The group's noise variance of log time: its pooled within-(cell, configuration) variance, shrunk to
        the shared model's by 20 pseudo-observations (noise differs between slow and fast networks)."""
        ss, dof = self._gss.get(group, (0.0, 0))
        return (ss + NOISE_PRIOR_DOF * self._sigma2) / (dof + NOISE_PRIOR_DOF)

    # -- decisions
    def budget_group(self, ctx: Context) -> str:
        """The client group whose cumulative time the budget bounds (and the change test watches)."""
        return self._group(self._cell(ctx))

    def group_of(self, ctx: Context) -> str:
        return self._gid(self._cell(ctx))

    def _gid(self, cell: tuple) -> str:
        """A cell's decision group (tables, logs): network class, website, device. Neither the loss bin nor the hour
        bin: the manager keeps per-group state (stickiness, rollback), and an id that changed whenever a prefix's
        archived loss crossed a bin edge, or every six hours, would restart it (seen in the demo: a 4G prefix's
        loss bin moved in 8 of 11 cycles)."""
        net = self._group(cell) if self.bins == "coarse" else f"r{cell[2]}g{cell[3]}f"
        return f"{net}|{cell[0]}|{cell[1]}"

    def _select(self, ctx: Context) -> Decision:
        cell = self._cell(ctx)
        group, gid = self._group(cell), self._gid(cell)
        mean, sd, level, level_var = self._effects(cell, group, self._stats_lag if self.cell_lag == "plan" else None)
        mean, charge = self._charged(mean, self._check_key(cell, group))
        default = self._base
        ucb, ok, near = self._bounds(mean, sd)
        safe = int(np.argmin(np.where(ok, ucb, np.inf)))  # with the guard on, it may cost more than the baseline
        seen = self._seen.setdefault(group, [0, 0])  # page loads, explorations
        seen[0] += 1
        best = self._greedy(mean, sd, ok)  # the greedy choice, and a probe's second centre
        if seen[1] < self.explore_share * seen[0] and (opt := self._probe_of(cell, mean, sd, ucb, safe, near, best)) is not None \
                and self._worth(mean, sd, opt, best, group, self._horizon(cell, seen[0])):
            if self._probes.get((cell, opt), 0) < self.probes:
                if self._afford(ctx, group, level, level_var, mean[opt] + self.budget_z * sd[opt]):
                    self._probes[(cell, opt)] = self._probes.get((cell, opt), 0) + 1
                    seen[1] += 1
                    self._probe_played(float(sd[opt]))
                    return Decision(opt, 1.0, gid, "explore")
        if self.exploit == "greedy":  # Wu et al.: the expected-best configuration whenever the budget can pay for it
            exploit = self._exploit_of(cell, mean, sd, ok, best)
            if exploit != safe and mean[exploit] + charge < ucb[safe] - self.min_gain and self._confirmed(cell, exploit, safe) \
                    and self._afford(ctx, group, level, level_var, mean[exploit] + self.budget_z * sd[exploit]):
                return self._audited(ctx, group, Decision(exploit, 1.0, gid, "exploit"))
        if safe == default:
            return Decision(safe, 1.0, gid, "default")
        arm = "exploit" if ucb[safe] <= 0.0 else "guard"
        # free only where its outcome cannot lower the slack: its budget bound (budget_z sd, as observe charges it)
        # within alpha of the baseline. Until 2026-12-07 a 1-sd bound at or below the baseline's made it free, and
        # observe's 3-sd charge could then take the slack below 0 with no check (found by review)
        bound = float(mean[safe] + self.budget_z * sd[safe])
        if self._free(bound) or self._afford(ctx, group, level, level_var, bound):
            return self._audited(ctx, group, Decision(safe, 1.0, gid, arm))
        return Decision(default, 1.0, gid, "default")  # the budget holds first

    def _audited(self, ctx: Context, group: str, decision: Decision) -> Decision:
        """``audit``: a departure that is not a probe, as chosen, with probability 1 - audit, else the baseline
        (arm 'audit', probability audit); the baseline (arm 'default') where the group's audit is closed. A
        reservation the departure made is returned to the group's slack when the baseline is served."""
        if not self.audit:
            return decision
        if self._audit_closed(group):
            if self.audit_scope == "pool":  # a trickle of departures goes on, so that the evidence can reopen them
                t = self.audit * AUDIT_SETTLED
                held = bool(self._rng.random() >= t)
                p, arm = (1.0 - t, "audit") if held else (t, decision.arm)
            else:
                held, p, arm = True, 1.0, "default"
        else:
            h = self._audit_share(group)
            held = bool(self._rng.random() < h)
            p, arm = (h, "audit") if held else (1.0 - h, decision.arm)
        if held:
            hit = self._reserved.pop(_key(ctx), None)
            if hit is not None:
                self._slack[hit[0]] = self._slack.get(hit[0], 0.0) + hit[1]
                self._slack_n[hit[0]] = self._slack_n.get(hit[0], 0.0) + self._reserved_n.pop(_key(ctx), 0.0)
            return Decision(self._base, p, decision.group, arm)
        return Decision(decision.config, p, decision.group, arm)

    def _audit_gain(self, group: str) -> float | None:
        """``audit``: the group's realised gain of its departures, the held-out page loads' mean log time (net of
        the baseline level) minus the departures' (positive: the departures were faster), shrunk to every
        group's pooled gain by ``AUDIT_PRIOR`` pseudo page loads; None while there is no evidence either way."""
        a, world = self._audit.get(group), self._audit_world
        if self.audit_scope == "pool":
            return None if world is None else world[0]
        gain, weight = 0.0, 0.0
        if a is not None and a[0] > 0.0 and a[3] > 0.0:
            gain, weight = a[4] / a[3] - a[1] / a[0], 1.0 / (1.0 / a[0] + 1.0 / a[3])
        if world is None:
            return gain if a is not None and min(a[0], a[3]) >= AUDIT_MIN else None
        return (weight * gain + AUDIT_PRIOR * world[0]) / (weight + AUDIT_PRIOR)

    def _audit_share(self, group: str) -> float:
        """``audit``: the share of the group's departures held out: ``audit``, or ``AUDIT_SETTLED`` times it where the
        group's own realised gain is above 0 by two standard errors (the departures have been shown to pay; a
        trickle keeps the decaying evidence fresh)."""
        if self.audit_scope == "pool":
            world = self._audit_world
            settled = world is not None and world[0] - 2.0 * world[2] > 0.0
            return self.audit * AUDIT_SETTLED if settled else self.audit
        a = self._audit.get(group)
        if a is not None and min(a[0], a[3]) >= AUDIT_MIN:
            gain, _, se = _audit_pooled(a)
            if gain - 2.0 * se > 0.0:
                return self.audit * AUDIT_SETTLED
        return self.audit

    def _audit_closed(self, group: str) -> bool:
        """``audit``: the group's departures have not paid on average (their shrunk realised gain is below 0; with
        ``audit_scope='pool'``, every group's pooled gain)."""
        gain = self._audit_gain(group) if self.audit else None
        return gain is not None and gain < 0.0

    def _audit_add(self, group: str, dep: np.ndarray, held: np.ndarray, x: np.ndarray) -> None:
        """Fold a group's page loads, in order, into its ``audit`` sums: every one ages the sums by one page load
        (half-life ``AUDIT_HALFLIFE``); the departures' and the held-out ones' ``x`` (log time net of the baseline
        level) are added at their weights."""
        k = len(x)
        if not k:
            return
        g = 0.5 ** (1.0 / AUDIT_HALFLIFE)
        w = g ** np.arange(k - 1, -1, -1, dtype=float)
        a = self._audit.setdefault(group, np.zeros(6))
        a *= g ** k
        for off, m in ((0, dep), (3, held)):
            ww, xx = w[m], x[m]
            a[off] += ww.sum()
            a[off + 1] += ww @ xx
            a[off + 2] += ww @ (xx * xx)

    def _held(self, decision: Decision) -> bool:
        """A page load held out from a departure by the ``audit``: online (arm 'audit') or drawn from a table
        whose main choice is a departure (the baseline drawn with probability below one half)."""
        return decision.config == self._base and (decision.arm == "audit"
                                                   or (decision.arm == "table" and decision.probability < 0.5))

    def _horizon(self, cell: tuple, group_loads: float) -> float:
        """The page loads a probe's lesson is priced over: the group's so far (``kg``) or, with ``kg_cell``, the
        context cell's own (level cell: website, device, RTT, goodput and loss bins), which its contrast serves
        first."""
        if self.probe_value != "kg_cell":
            return group_loads
        key = cell[:5]
        return float(self._stats[key][0].sum()) if key in self._stats else 0.0

    def _worth(self, mean: np.ndarray, sd: np.ndarray, probe: int, best: int, group: str, loads: float) -> bool:
        """``probe_value='kg'``: is one page load of ``probe`` worth its expected cost? Its knowledge gradient
        (Frazier, Powell and Dayanik 2008) is the expected fall of the lowest posterior mean after one more page load
        of it, ``s f(-|mean - mean_best| / s)`` with ``f(z) = z Phi(z) + phi(z)`` and ``s`` the sd of the change of
        its mean (its posterior variance over the root of that plus the group's noise variance); what it teaches
        serves, at most, as many page loads as the group has had. The cost is its expected excess over the greedy
        choice's mean. Always True with ``'any'``."""
        if self.probe_value == "any":
            return True
        v = float(sd[probe]) ** 2
        step = v / math.sqrt(v + self._noise(group))
        excess = float(mean[probe] - mean[best])
        if step <= 0.0:
            return excess <= 0.0
        z = -abs(excess) / step
        kg = step * (z * 0.5 * math.erfc(-z / math.sqrt(2.0)) + math.exp(-0.5 * z * z) / math.sqrt(2.0 * math.pi))
        return max(loads, 1) * kg >= max(excess, 0.0)

    def _confirmed(self, cell: tuple, config: int, against: int) -> bool:
        """``greedy_own`` k: has the context's level cell (every hour bin) played ``config`` at least k times, and,
        where it has played ``against`` (the safe choice) k times too, is its own mean log time below that one's?
        The shared model proposes the greedy choice; the cell's own page loads, which did not choose it, confirm."""
        if self.greedy_own <= 0:
            return True
        own = self._own()
        key = cell[:5]
        if key not in own:
            return False
        n, total = own[key]
        k = self.greedy_own
        if n[config] < k:
            return False
        return bool(n[against] < k or total[config] / n[config] < total[against] / n[against])

    def _check_key(self, cell: tuple, group: str) -> str:
        """The key of ``greedy_check``'s sums for a page load of this cell: its client group, or with ``check_by`` =
        'website' its website (``w:`` + name; a change alarm of a client group does not forget it)."""
        return group if self.check_by == "group" else "w:" + cell[0]

    def _optimism(self, group: str) -> float:
        """``greedy_check``: how much slower than predicted the group's non-probe departures turned out, beyond the
        baseline's own prediction errors (the difference of their mean errors, less two standard errors with 'on',
        at least 0; 0 until each side has 10 page loads, and with 'off'). The greedy choice takes the lowest of many posterior means,
        which is optimistic by construction; this measures that optimism where it is paid instead of assuming it."""
        s = self._sel.get(group) if self.greedy_check != "off" else None
        if s is None or s[0] < 10 or s[3] < 10:
            return 0.0
        md, mb = s[1] / s[0], s[4] / s[3]
        vd = max(s[2] - s[0] * md * md, 0.0) / (s[0] - 1.0)
        vb = max(s[5] - s[3] * mb * mb, 0.0) / (s[3] - 1.0)
        z = 2.0 if self.greedy_check == "on" else 0.0
        return max(0.0, md - mb - z * math.sqrt(vd / s[0] + vb / s[3]))

    def _slope(self, group: str) -> float | None:
        """``greedy_check='slope'``: the share of their predicted gains the key's departures realised: their realised
        effects ``r = err + p - mb`` (the prediction error plus the predicted effect, less the baseline's mean error
        ``mb``) regressed through the origin on the predicted ``p``, clipped to [0, 1]; None before ``SLOPE_MIN``
        departures and 10 baseline page loads, or without a predicted effect."""
        s, t = self._sel.get(group), self._sel_p.get(group)
        if s is None or t is None or s[0] < SLOPE_MIN or s[3] < 10 or t[1] <= 0.0:
            return None
        mb = s[4] / s[3]
        return float(np.clip((t[0] + t[1] - mb * t[2]) / t[1], 0.0, 1.0))

    def _charged(self, mean: np.ndarray, group: str) -> tuple[np.ndarray, float]:
        """``greedy_check``: the effects a decision reads and the charge on the greedy choice alone. 'shift' adds the
        group's measured optimism to every configuration's effect but the baseline's; 'on' and 'mean' return it as
        the greedy choice's charge; 'slope' multiplies every predicted gain by the realised share (:meth:`_slope`)."""
        if self.greedy_check == "slope":
            b = self._slope(group)
            return (mean if b is None else np.where(mean < 0.0, b * mean, mean)), 0.0
        d = self._optimism(group)
        if self.greedy_check in ("config", "own"):
            return self._charged_config(mean, group, d if self.greedy_check == "config" else 0.0), 0.0
        if not d:
            return mean, 0.0
        if self.greedy_check != "shift":
            return mean, d
        out = mean + d
        out[self._base] = mean[self._base]
        return out, 0.0

    def _charged_config(self, mean: np.ndarray, group: str, d: float) -> np.ndarray:
        """``greedy_check='config'``: every configuration's effect but the baseline's plus its own measured excess,
        (its departures' error sum less the baseline's mean error per page load, plus ``CHECK_PRIOR`` pseudo page
        loads at the group's excess ``d``; 'own' passes ``d`` = 0) over (its departures plus ``CHECK_PRIOR``), at
        least 0. Before the group's sums are ready (10 page loads a side, as ``_optimism``), the effects unchanged."""
        c, s = self._sel_c.get(group), self._sel.get(group)
        if c is None or s[0] < 10 or s[3] < 10:  # _sel_c is only written beside _sel
            return mean
        mb = s[4] / s[3]
        excess = np.maximum((c[1] - c[0] * mb + CHECK_PRIOR * d) / (c[0] + CHECK_PRIOR), 0.0)
        excess[self._base] = 0.0
        return mean + excess

    def _sel_add(self, group: str, departure: np.ndarray, baseline: np.ndarray, err: np.ndarray,
                 config: np.ndarray, pred: np.ndarray | None = None) -> None:
        """Add prediction errors of a group's page loads to its ``greedy_check`` sums (and the
        departures' per configuration with 'config' or 'own'; with 'slope', their predicted effects ``pred``)."""
        s = self._sel.setdefault(group, [0.0] * 6)
        if self.greedy_check == "slope" and departure.any():
            p, e = pred[departure], err[departure]
            self._sel_p.setdefault(group, np.zeros(3))[:] += (float(p @ e), float(p @ p), float(p.sum()))
        for k, m in ((0, departure), (3, baseline)):
            e = err[m]
            s[k], s[k + 1], s[k + 2] = s[k] + len(e), s[k + 1] + float(e.sum()), s[k + 2] + float(e @ e)
        if self.greedy_check in ("config", "own") and departure.any():
            n = len(self.space)
            c = self._sel_c.setdefault(group, np.zeros((2, n)))
            c[0] += np.bincount(config[departure], minlength=n)
            c[1] += np.bincount(config[departure], err[departure], minlength=n)

    def _departure(self, decision: Decision) -> bool:
        """A page load served off the baseline by a choice that was not a probe: the online greedy or guard
        choice, or a table's main choice (drawn with probability above one half; a table's probe has
        ``explore_share``)."""
        if decision.config == self._base:
            return False
        return decision.arm in ("exploit", "guard") or (decision.arm == "table" and decision.probability > 0.5)

    def _greedy(self, mean: np.ndarray, sd: np.ndarray, ok: np.ndarray) -> int:
        """The greedy choice among the configurations the guard allows: the lowest ``mean + greedy_z * sd``."""
        score = mean + self.greedy_z * sd if self.greedy_z else mean
        return int(np.argmin(np.where(ok, score, np.inf)))

    def _exploit_of(self, cell: tuple, mean: np.ndarray, sd: np.ndarray, ok: np.ndarray, best: int) -> int:
        """The configuration the greedy arm would exploit: ``best`` (:meth:`_greedy`), or with ``greedy_reach``
        'played' the greedy choice among those within one knob of the baseline or of a configuration the context's
        level cell has played (the baseline when none the guard allows is)."""
        if self.greedy_reach == "any":
            return best
        reach = self._near[self._base].copy()
        reach[self._base] = True
        own = self._own()
        key = cell[:5]
        if key in own:
            played = own[key][0] > 0
            reach |= played | self._near[played].any(axis=0)
        if reach[best]:
            return best
        ok = ok & reach
        return self._greedy(mean, sd, ok) if ok.any() else self._base

    def _bounds(self, mean: np.ndarray, sd: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The configurations' UCBs against the baseline (the baseline's is 0), which ones the default guard allows
        as the safe or greedy choice (not plausibly, at ``guard`` sd of the contrast, more than 5% slower than the
        registry default), and which ones it allows as probes (not *expected* to be: a probe is what narrows a
        configuration's sd, so requiring a narrow sd first would keep every configuration the model knows little
        about, and with it every gain there, out of reach). All when ``guard`` is off or the baseline is the
        registry default, which the budget then bounds against already; the registry default always. A probe's
        expectation may lie up to ``probe_margin`` above the default's (by default the degraded threshold)."""
        ucb = mean + self.beta * sd
        ucb[self._base] = 0.0
        if self.guard == "off" or self._base == self.space.default_index:
            every = np.ones(len(mean), dtype=bool)
            return ucb, every, every
        d = self.space.default_index
        z = float(self.guard)
        if self.guard_base != "same":  # the baseline's own test at its own z
            z = np.full(len(mean), z)
            z[self._base] = float(self.guard_base)
        ok = mean - mean[d] + z * np.sqrt(sd * sd + sd[d] * sd[d]) <= DEGRADED
        near = mean - mean[d] <= math.log(1.0 + self.probe_margin)
        ok[d] = near[d] = True
        return ucb, ok, near

    def _probe_played(self, sd: float) -> None:
        """``probe_sd``: note a played probe's sd; once the window is full, r times its median bounds a probe's sd."""
        if self.probe_sd != "off":
            self._probe_sds.append(sd)
            if len(self._probe_sds) == PROBE_SD_WINDOW:
                self._probe_cap = float(self.probe_sd) * float(np.median(self._probe_sds))

    def _probe_of(self, cell: tuple, mean: np.ndarray, sd: np.ndarray, ucb: np.ndarray, safe: int, near: np.ndarray,
                  best: int) -> int | None:
        """The probe of a cell, if any: among the configurations the default guard allows as probes (``near``,
        from :meth:`_bounds`) whose optimistic bound may beat the safe choice by ``min_gain``, the first by
        ``probe`` (module docstring); ties (e.g. every one-knob change under the prior) at random."""
        optimistic = mean - self.explore_beta * sd
        plausible = (optimistic < ucb[safe] - self.min_gain) & near
        if self._probe_cap < math.inf:
            plausible &= sd <= self._probe_cap
        plausible[safe] = False
        if not plausible.any():
            return None
        rank = ucb if self.probe == "cheap" else optimistic  # "cheap": the least pessimistic cost first
        d = self.space.default_index
        if plausible[d] and (self.probe_center == "default" or (
                self.probe_center == "suspect" and mean[self._base] - mean[d] > DEGRADED)):
            return d  # it answers the guard's question, and is never a degraded page load
        region = self._near[safe]
        if self.probe_center != "safe":
            region = region | self._near[best]
        if self.probe == "local" and (plausible & region).any():
            plausible = plausible & region  # a trust region: one knob changed from the safe choice
        candidates = np.flatnonzero(plausible)
        r = rank[candidates]
        tied = candidates[r <= r.min() + PROBE_TIE]
        if len(tied) == 1:
            return int(tied[0])
        # ties (every one-knob change under the prior): one fixed order per cell, those the cell may still probe
        # first, so that the decision is a function of the state and its logged probability 1 is true. Until
        # 2026-12-07 a fresh random draw per page load broke them and probability 1 was logged (found by review)
        turn = zlib.crc32(repr(cell).encode()) / 2.0 ** 32
        capped = np.array([self._probes.get((cell, int(c)), 0) >= self.probes for c in tied])
        return int(tied[np.lexsort(((self._tiebreak[tied] + turn) % 1.0, capped))[0]])

    def _cost(self, group: str, level: float, level_var: float, ucb: float) -> float:
        """The pessimistic budget cost (ms) of one page load with a configuration of this UCB in a cell: the 99th
        percentile of the cell's baseline time (its level's posterior and the group's noise; before the level
        model is fitted, the larger of the group's observed mean and the prior level, times the 99th-percentile
        noise factor) times ``exp(UCB) - 1 - alpha``."""
        n_g, sum_g = self._times.get(group, (0, 0.0))
        s2 = self._noise(group)
        if self._n:
            high = math.exp(level + 2.33 * math.sqrt(s2 + level_var))
        else:
            high = math.exp(2.33 * math.sqrt(s2)) * max(math.exp(level), sum_g / max(n_g, 1))
        return max(high * (math.exp(ucb) - 1.0 - self.alpha), 0.0)

    def _cost_n(self, ucb: float) -> float:
        """``budget_unit='both'``: the pessimistic cost of one page load in baseline page loads,
        ``exp(UCB) - 1 - alpha_loads`` (0 with the default unit)."""
        return max(math.exp(ucb) - 1.0 - self.alpha_loads, 0.0) if self.budget_unit == "both" else 0.0

    def _free(self, ucb: float) -> bool:
        """Whether a play with this budget bound can only add to the group's slack: its realised terms, y ((1 +
        alpha) exp(-UCB) - 1) and 1 + alpha_loads - exp(UCB), are then both at least 0."""
        alpha = min(self.alpha, self.alpha_loads) if self.budget_unit == "both" else self.alpha
        return ucb <= math.log1p(alpha)

    def _afford(self, ctx: Context, group: str, level: float, level_var: float, ucb: float) -> bool:
        """Whether the group's slack pays the pessimistic cost of a configuration with this UCB here (with
        ``budget_unit='both'``, its slack in page loads too); if so, the cost (:meth:`_cost`, :meth:`_cost_n`) is
        reserved until the outcome arrives. Nothing is afforded before the group has 10 page loads."""
        cost, cost_n = self._cost(group, level, level_var, ucb), self._cost_n(ucb)
        if self._times.get(group, (0, 0.0))[0] < 10 or self._slack.get(group, 0.0) < cost \
                or (cost_n > 0.0 and self._slack_n.get(group, 0.0) < cost_n):
            return False
        self._slack[group] = self._slack.get(group, 0.0) - cost
        self._reserved[_key(ctx)] = (group, cost)
        if cost_n > 0.0:
            self._slack_n[group] = self._slack_n.get(group, 0.0) - cost_n
            self._reserved_n[_key(ctx)] = cost_n
        return True

    def _offset(self, ctx: Context) -> float:
        """The client's persistent log-time offset (its path, its device beyond the cell's bins): the shrunk mean
        of its earlier page loads' residuals, ``sum r / (n + noise / tau_c^2)``. It is fixed before the page load's
        configuration acts (pre-treatment), common to every configuration, so it cancels in decisions; taking
        it out of the observations removes the clients' spread inside a cell from the noise of effects."""
        hit = self._clients.get(ctx.client.client_id)
        if hit is None or self._client_var <= 0.0:
            return 0.0
        return hit[1] / (hit[0] + self._sigma2 / self._client_var)

    def _client_update(self, ctx: Context, resid: float) -> None:
        """Record the client's residual; the client variance tau_c^2 from the product of a residual and the client's
        earlier mean residual (their covariance is tau_c^2 when noise draws are independent)."""
        ip = ctx.client.client_id
        hit = self._clients.get(ip)
        if hit is not None:
            self._cov_c[0] += resid * hit[1] / hit[0]
            self._cov_c[1] += 1.0
            self._clients.move_to_end(ip)
        else:
            hit = [0, 0.0]
            self._clients[ip] = hit
            if len(self._clients) > MAX_CLIENTS:
                self._clients.popitem(last=False)
        hit[0] += 1
        hit[1] += resid

    def _observe(self, ctx: Context, decision: Decision, outcome: Outcome) -> None:
        cell = self._cell(ctx)
        group = self._group(cell)
        y = max(outcome.completion_ms, 1e-3)
        c = decision.config
        mean, sd, level, level_var = self._effects(cell, group)
        ucb = 0.0 if c == self._base else max(float(mean[c] + self.budget_z * sd[c]), self._floor)
        if decision.arm != SERVED:  # a guardrail's choice is not in the policy's budget (held-back ones never arrive)
            # budget: the realised term y ((1 + alpha) b/y - 1), b/y >= exp(-UCB), replaces the reservation
            self._slack[group] = self._slack.get(group, 0.0) + self._reserved.pop(_key(ctx), (group, 0.0))[1] \
                + y * ((1.0 + self.alpha) * math.exp(-ucb) - 1.0)
            if self.budget_unit == "both":  # in baseline page loads: 1 + alpha_loads - y / b, y / b <= exp(UCB)
                self._slack_n[group] = self._slack_n.get(group, 0.0) + self._reserved_n.pop(_key(ctx), 0.0) \
                    + 1.0 + self.alpha_loads - math.exp(ucb)
            i = self._played.row(cell)  # (may grow the arrays: the row first)
            self._played.data[0, i, c] += y
            self._played.data[1, i, c] += 1.0
            n_g, sum_g = self._times.get(group, (0, 0.0))
            self._times[group] = (n_g + 1, sum_g + y * math.exp(-ucb))  # the baseline's time, pessimistically low
        raw = math.log(y)
        offset = self._offset(ctx)
        logy = raw - offset  # the client's persistent part, estimated from its earlier page loads, taken out
        own = self._own()
        n_cell = own[cell[:5]][0].sum() if cell[:5] in own else 0.0
        if self._n and n_cell >= 10:  # a residual means something once the model is fitted and the cell's level known
            self._client_update(ctx, raw - level - float(mean[c]))
        self._learn_website(cell[0], outcome.bytes)
        i = self._rows.row(cell)
        self._rows.data[0, i, c] += 1
        self._rows.data[1, i, c] += logy
        self._yy += logy * logy
        # the change test: standardised error of the prediction made before this page load was known
        # the change test starts once the model is fitted and the cell's level is its own data's
        s2 = self._noise(group)
        z = (logy - level - float(mean[c])) / math.sqrt(s2 + level_var + float(sd[c]) ** 2) \
            if self._n and n_cell >= 10 else 0.0
        if self.greedy_check != "off" and self._n and n_cell >= 10 and decision.arm != SERVED:
            e = np.array([logy - level - float(mean[c])])
            self._sel_add(self._check_key(cell, group), np.array([self._departure(decision)]), np.array([c == self._base]),
                          e, np.array([c]), np.array([float(mean[c])]))
        if self.audit and decision.arm != SERVED:
            on = bool(self._n and n_cell >= 10)
            self._audit_add(group, np.array([on and self._departure(decision)]), np.array([on and self._held(decision)]),
                            np.array([logy - level]))
        if c != self._base and self._n and n_cell >= 10:  # the fitted model's errors, once the cell's level is known
            # squared error of the effect, the noise and the level's uncertainty removed
            v_eff = float(sd[c] / self._kappa) ** 2
            e2 = (logy - level - float(mean[c])) ** 2 - s2 - level_var - v_eff
            self._z2[0] += e2
            self._z2[1] += e2 * e2
            self._z2[2] += v_eff
            self._z2[3] += 1.0
        cu = self._cusum.setdefault(group, [0.0, 0.0])
        cu[0] = max(0.0, cu[0] + z - self.cusum_drift)
        cu[1] = max(0.0, cu[1] - z - self.cusum_drift)
        if group in self._since_alarm:
            self._since_alarm[group] += 1
        if max(cu) > self.cusum_h:  # forget the group's own data: its cells start again from the shared model
            self._alarms.append((ctx.time_s, group))
            cu[0] = cu[1] = 0.0
            self._forget(group)
            self._since_alarm[group] = 0
        i = self._stats.row(cell[:5])
        n, total = self._stats.data[:, i]
        if n[c] > 0:  # Welford: the within-(cell, configuration) sum of squares of the group grows
            ss, dof = self._gss.get(group, (0.0, 0))
            self._gss[group] = (ss + n[c] / (n[c] + 1.0) * (logy - total[c] / n[c]) ** 2, dof + 1)
        n[c] += 1
        total[c] += logy
        if own is not self._stats:
            i = own.row(cell[:5])  # (may grow the arrays: the row first)
            n, total = own.data[:, i]
            n[c] += 1
            total[c] += logy

    def _learn_website(self, site: str, nbytes: int) -> None:
        """A website's own model entry (while entries are free) and its size, fixed at its first page load."""
        if site not in self._sites and len(self._sites) < self._site_slots:
            self._sites[site] = len(self._sites)
            self._shared = None  # the website's cells' predictions change
        if site not in self._size and nbytes > 0:
            self._size[site] = (math.log(nbytes) - SIZE_CENTER) / SIZE_SCALE
            self._shared = None

    def _forget(self, group: str) -> None:
        """A change-point alarm: the group's cells' own data, and its audit, are forgotten (their rows zeroed)."""
        self._audit.pop(group, None)
        for stats in (self._stats, self._stats_now, self._stats_past, self._stats_lag):
            rows = [i for i, key in enumerate(stats.keys_) if self._group(key) == group]
            stats.data[:, rows] = 0.0

    def _observe_batch(self, items: Sequence[tuple[Context, Decision, Outcome]]) -> None:
        with threadpool_limits(1):  # products of a few thousand rows: threads cost more than they bring
            self._fold_batch(items)

    def _fold_batch(self, items: Sequence[tuple[Context, Decision, Outcome]]) -> None:
        """Fold many outcomes at once (the manager's ingest): what :meth:`_observe` does per page load, in order,
        except that every prediction it uses (the budget's bounds, the change test's errors, the clients'
        residuals and offsets) is the state's from before the batch -- the edges decided the whole batch with one
        table. Sums (slack, the shared model's rows, the cells' statistics and the within-cell sum of squares,
        combined by Chan et al.'s formula, the clients' residual sums and covariance terms) are those of the
        sequential updates; the change test runs page load by page load (:func:`cusum_run`). Python work is per
        distinct cell, level cell, group and client; per page load only the fields are read."""
        m, n_cfg = len(items), len(self.space)
        ctxs, decs = list(map(itemgetter(0), items)), list(map(itemgetter(1), items))
        cells, inv, parts, code = self._cells_of(ctxs, parts=True)
        cfg = np.fromiter(map(_CONFIG, decs), np.int64, m)
        y = np.maximum(np.fromiter(map(_COMPLETION, map(itemgetter(2), items)), float, m), 1e-3)
        # client groups (RTT bin x goodput bin) and level cells (the cell without its hour), by their codes
        gcode = self._coarse(parts[2]) * (len(GOODPUT_EDGES) + 2) + self._coarse(parts[3]) + 1
        _, gfirst, g_cell = np.unique(gcode, return_index=True, return_inverse=True)
        names = [self._group(cells[i]) for i in gfirst.tolist()]
        gidx = g_cell[inv]
        _, lfirst, l_cell = np.unique(code // HOUR_BINS, return_index=True, return_inverse=True)
        level_cells = [cells[i][:5] for i in lfirst.tolist()]
        lrow = self._stats.find(level_cells)
        pair = inv * n_cfg + cfg
        pairs = np.unique(pair)
        mean, sd, level, level_var = self._effects_many(cells, (names, g_cell), (pairs // n_cfg, pairs % n_cfg),
                                                        parts, lrow[l_cell])
        at_pair = np.empty(len(cells) * n_cfg, dtype=np.int64)  # each page load's (cell, configuration) pair
        at_pair[pairs] = np.arange(len(pairs))
        at_pair = at_pair[pair]
        mean, sd, level, level_var = mean[at_pair], sd[at_pair], level[inv], level_var[inv]
        base = cfg == self._base
        # at the same floor as observe's (until 2026-12-07 0 here: with credit 'gain' a batch credited less slack
        # than the same page loads one by one until the next plan repriced it; found by review)
        ucb = np.where(base, 0.0, np.maximum(mean + self.budget_z * sd, self._floor))
        # budget: the realised terms replace the reservations; the groups' baseline-time estimates
        # (page loads a guardrail served are not the policy's decisions: not charged)
        decided = np.fromiter(map(SERVED.__ne__, map(_ARM, decs)), bool, m)
        term = y * ((1.0 + self.alpha) * np.exp(-ucb) - 1.0)
        if self._reserved:
            term += np.fromiter((self._reserved.pop(_key(ctx), (None, 0.0))[1] for ctx in ctxs), float, m)
        slack = np.bincount(gidx, term * decided, len(names))
        slack_n = None
        if self.budget_unit == "both":  # in baseline page loads: 1 + alpha_loads - y / b, y / b <= exp(UCB)
            term_n = 1.0 + self.alpha_loads - np.exp(ucb)
            if self._reserved_n:
                term_n += np.fromiter((self._reserved_n.pop(_key(ctx), 0.0) for ctx in ctxs), float, m)
            slack_n = np.bincount(gidx, term_n * decided, len(names))
        count = np.bincount(gidx, minlength=len(names))
        owned = np.bincount(gidx, decided, len(names))
        low = np.bincount(gidx, y * np.exp(-ucb) * decided, len(names))
        for j, g in enumerate(names):
            if owned[j] or g in self._times:
                self._slack[g] = self._slack.get(g, 0.0) + float(slack[j])
                if slack_n is not None:
                    self._slack_n[g] = self._slack_n.get(g, 0.0) + float(slack_n[j])
                n_g, sum_g = self._times.get(g, (0, 0.0))
                self._times[g] = (n_g + int(owned[j]), sum_g + float(low[j]))
        crow = self._played.rows(cells)
        self._played.data[0, crow] += np.bincount(pair, y * decided, len(cells) * n_cfg).reshape(len(cells), n_cfg)
        self._played.data[1, crow] += np.bincount(pair, decided, len(cells) * n_cfg).reshape(len(cells), n_cfg)
        # clients' offsets (from before the batch), then their residuals
        raw = np.log(y)
        ids = list(map(_CLIENT_ID, ctxs))
        logy = raw.copy()
        if self._client_var > 0.0:
            shrink = self._sigma2 / self._client_var
            logy -= np.fromiter((h[1] / (h[0] + shrink) if (h := self._clients.get(i)) is not None else 0.0
                                 for i in ids), float, m)
        own = self._own()
        orow = lrow if own is self._stats else own.find(level_cells)
        n_level = np.where(orow >= 0, own.data[0, orow].sum(axis=1), 0.0)
        lidx = l_cell[inv]
        live = (n_level[lidx] >= 10) & (self._n > 0)  # the model is fitted and the cell's level known
        resid = raw - level - mean
        if live.any():
            self._clients_update([ids[k] for k in np.flatnonzero(live).tolist()], resid[live])
        # the change test's standardised errors and the calibration's squared errors (non-baseline)
        s2 = np.array([self._noise(g) for g in names])[gidx]
        err = logy - level - mean
        z = np.where(live, err / np.sqrt(s2 + level_var + sd ** 2), 0.0)
        check = self.greedy_check != "off" and live.any()
        if check or self.audit:  # the policy's own departures, for greedy_check's and the audit's sums below
            dep = np.fromiter(map(self._departure, decs), bool, m) & live & decided
        if check:  # greedy_check's sums: with the baseline page loads, per group below
            bas = base & live & decided
        if self.audit:  # the audit's: with the page loads held out from departures
            held = np.fromiter(map(self._held, decs), bool, m) & live & decided
            a_x = logy - level
        off = ~base & live  # the fitted model's errors, once the cell's level is known
        v_eff = (sd[off] / self._kappa) ** 2
        e2 = err[off] ** 2 - s2[off] - level_var[off] - v_eff
        self._z2 = [self._z2[0] + float(e2.sum()), self._z2[1] + float(e2 @ e2), self._z2[2] + float(v_eff.sum()),
                    self._z2[3] + float(off.sum())]
        if check and self.check_by == "website":  # greedy_check's sums per website (the sums do not depend on order)
            pos = {site: j for j, site in enumerate(dict.fromkeys(cell[0] for cell in cells))}
            sidx = np.fromiter((pos[cell[0]] for cell in cells), np.int64, len(cells))[inv]
            for site, j in pos.items():
                mine = np.flatnonzero(sidx == j)
                self._sel_add("w:" + site, dep[mine], bas[mine], err[mine], cfg[mine], mean[mine])
        keep = np.ones(m, dtype=bool)
        order = np.argsort(gidx, kind="stable")
        bounds = np.searchsorted(gidx[order], np.arange(len(names) + 1))
        alarms: list[tuple[int, str]] = []
        for j, g in enumerate(names):
            mine = order[bounds[j]:bounds[j + 1]]  # the group's page loads, in order
            if check and self.check_by == "group":
                self._sel_add(g, dep[mine], bas[mine], err[mine], cfg[mine], mean[mine])
            if self.audit:
                mine_d = mine[decided[mine]]
                self._audit_add(g, dep[mine_d], held[mine_d], a_x[mine_d])
            at = cusum_run(self._cusum.setdefault(g, [0.0, 0.0]), z[mine], self.cusum_drift, self.cusum_h)
            if at:  # forget the group's own data: its cells start again from the shared model
                alarms += [(int(mine[k]), g) for k in at]
                last = int(mine[at[-1]])
                self._forget(g)
                keep[mine[mine < last]] = False
                self._since_alarm[g] = int(np.sum(mine > last))
            elif g in self._since_alarm:
                self._since_alarm[g] += int(count[j])
        self._alarms += [(ctxs[k].time_s, g) for k, g in sorted(alarms)]
        # the cells' own statistics and the groups' within-(cell, configuration) sums of squares
        key = (lidx * n_cfg + cfg)[keep]
        size = len(level_cells) * n_cfg
        nb = np.bincount(key, minlength=size).reshape(len(level_cells), n_cfg).astype(float)
        sb = np.bincount(key, logy[keep], size).reshape(len(level_cells), n_cfg)
        qb = np.bincount(key, logy[keep] ** 2, size).reshape(len(level_cells), n_cfg)
        touched = np.flatnonzero(nb.any(axis=1))
        if len(touched):
            nb, sb, qb = nb[touched], sb[touched], qb[touched]
            row = self._stats.rows([level_cells[i] for i in touched.tolist()])
            n0, t0 = self._stats.data[:, row]
            on = nb > 0
            mean_b = sb / np.maximum(nb, 1.0)
            within = np.where(on, np.maximum(qb - sb * mean_b, 0.0), 0.0)  # the batch's own sums of squares
            between = np.where(on & (n0 > 0), n0 * nb / np.maximum(n0 + nb, 1.0) * (mean_b - t0 / np.maximum(n0, 1.0)) ** 2, 0.0)
            gl = g_cell[lfirst[touched]]
            ss_g = np.bincount(gl, within.sum(axis=1) + between.sum(axis=1), len(names))
            dof_g = np.bincount(gl, nb.sum(axis=1) - np.sum(on & (n0 == 0), axis=1), len(names))
            for j in np.unique(gl).tolist():
                ss, dof = self._gss.get(names[j], (0.0, 0))
                self._gss[names[j]] = (ss + float(ss_g[j]), dof + int(round(dof_g[j])))
            self._stats.data[0, row] += nb
            self._stats.data[1, row] += sb
            if own is not self._stats:
                row = own.rows([level_cells[i] for i in touched.tolist()])
                own.data[0, row] += nb
                own.data[1, row] += sb
        # the shared model's rows since the last plan
        row = self._rows.rows(cells)
        self._rows.data[0, row] += np.bincount(pair, minlength=len(cells) * n_cfg).reshape(len(cells), n_cfg)
        self._rows.data[1, row] += np.bincount(pair, logy, len(cells) * n_cfg).reshape(len(cells), n_cfg)
        self._yy += float(logy @ logy)
        if any(site not in self._size or site not in self._sites for site, _ in parts[0]):
            for ctx, _, out in items:
                self._learn_website(ctx.website, out.bytes)

    def _clients_update(self, ids: list[str], resid: np.ndarray) -> None:
        """:meth:`_client_update` of many page loads, in order: per client its residuals' running sums (the
        covariance term of each page load uses the client's mean residual before it), clients kept in order of
        their latest page load, the least recently seen forgotten beyond MAX_CLIENTS."""
        index: dict[str, int] = {}
        who = np.fromiter((index.setdefault(i, len(index)) for i in ids), np.int64, len(ids))
        clients = list(index)
        prior = [self._clients.get(c) for c in clients]
        n0 = np.array([0 if h is None else h[0] for h in prior], dtype=float)
        s0 = np.array([0.0 if h is None else h[1] for h in prior])
        order = np.argsort(who, kind="stable")
        sorted_who, r = who[order], resid[order]
        start = np.searchsorted(sorted_who, np.arange(len(clients)))
        rank = np.arange(len(ids)) - start[sorted_who]  # earlier page loads of the client in this batch
        cum = np.cumsum(r) - r  # exclusive: what came before, over all clients
        before_s = s0[sorted_who] + cum - cum[start][sorted_who]
        before_n = n0[sorted_who] + rank
        seen = before_n > 0
        self._cov_c[0] += float(np.sum(r[seen] * before_s[seen] / before_n[seen]))
        self._cov_c[1] += float(seen.sum())
        total_n = np.bincount(who, minlength=len(clients))
        total_s = np.bincount(who, resid, len(clients))
        latest = np.zeros(len(clients), dtype=np.int64)
        latest[who] = np.arange(len(ids))  # the last assignment wins: each client's latest page load
        for c in np.argsort(latest).tolist():
            hit = prior[c]
            if hit is None:
                self._clients[clients[c]] = [int(total_n[c]), float(total_s[c])]
            else:
                hit[0] += int(total_n[c])
                hit[1] += float(total_s[c])
                self._clients.move_to_end(clients[c])
        while len(self._clients) > MAX_CLIENTS:
            self._clients.popitem(last=False)

    # -- slow loop: refit the shared model
    def _plan(self, now: float) -> None:
        self._now = now
        if self.level_epoch > 0 and int(now // self.level_epoch) != self._stats_epoch:
            if self.cell_epoch == "contrast":
                self._keep_contrasts()
            self._stats_now.clear()  # a new level epoch: the cells' own levels start again (``cell_epoch``)
            self._stats_epoch = int(now // self.level_epoch)
        self._recent = {}
        if len(self._rows):
            self._fold_rows()
        if self._n:
            with threadpool_limits(1):  # small dense algebra: threads cost more than they bring on a busy machine
                self._refit()
                self._fit_levels()
        self._cells.clear()
        self._shared = None
        self._probes.clear()
        self._tau2 = self._misfit()
        self._fit_pool()
        if self._z2[3] >= 30:  # non-baseline page loads, older periods discounted
            # squared errors beyond their predicted variance, counted only beyond two standard errors: the excess
            # is a difference of large noisy sums, and the effects' variance is a small part of the prediction's
            excess = self._z2[0] - 2.0 * math.sqrt(self._z2[1])
            self._kappa = float(np.clip(math.sqrt(1.0 + max(excess, 0.0) / max(self._z2[2], 1e-12)), 1.0, 5.0))
            self._z2 = [0.8 * v for v in self._z2]
        if self._cov_c[1] >= 50:
            self._client_var = float(np.clip(self._cov_c[0] / self._cov_c[1], 0.0, 4.0))
        self._reprice()
        if self._audit:  # every group's pooled realised gain of its departures
            t = np.sum(list(self._audit.values()), axis=0)
            self._audit_world = None if min(t[0], t[3]) < AUDIT_MIN else _audit_pooled(t)
        if self.cell_lag == "plan":
            self._stats_lag = self._own().snapshot()

    def _keep_contrasts(self) -> None:
        """An epoch ends (``cell_epoch='contrast'``): per cell, each configuration's contrast with the baseline within
        the epoch (difference of mean log times, weight n_c n_b / (n_c + n_b), as a fixed-effects fit weighs it) is
        added to the cell's ended-epoch contrasts; a configuration the cell did not play beside the baseline adds
        nothing (it cannot tell the epoch's level from its effect)."""
        now = self._stats_now
        if not len(now):
            return
        n, total = now.used()
        b = self._base
        nb, tb = n[:, [b]], total[:, [b]]
        ok = (n > 0) & (nb > 0)
        ok[:, b] = False
        rows = np.flatnonzero(ok.any(axis=1))
        if not len(rows):
            return
        n, total, nb, tb, ok = n[rows], total[rows], nb[rows], tb[rows], ok[rows]
        w = np.where(ok, n * nb / np.maximum(n + nb, 1.0), 0.0)
        d = np.where(ok, total / np.maximum(n, 1.0) - tb / np.maximum(nb, 1.0), 0.0)
        prow = self._stats_past.rows([now.keys_[i] for i in rows.tolist()])
        self._stats_past.data[0, prow] += w
        self._stats_past.data[1, prow] += w * d

    def _fold_rows(self) -> None:
        """Add the page loads since the last plan to the shared model's sufficient statistics: their rows' Gram
        matrix (:func:`gram`) and, per touched level cell, the rank-one correction ``-s s^T / n`` that absorbs
        its level (s = the sum of the cell's rows' phi), replacing the cell's previous one. Level cells are taken
        by website and device: a row of s is non-zero only on the psi entries its cells share and the hour
        entries, so each group's corrections are one product over the columns it touches."""
        cells = self._rows.keys_
        count, total = self._rows.used()
        self._rows.clear()
        for cell, n in zip(cells, count.sum(axis=1).tolist()):
            self._recent[cell[:5]] = self._recent.get(cell[:5], 0.0) + n
        psi = self._psi_rows(cells)
        pint = psi if self._n_int == self._n_psi else psi[:, self._int]  # every block modulates: pint is psi
        g_inc, h_inc = gram(psi, pint, self._e, count, total)
        self._G += g_inc
        self._h += h_inc
        self._n += int(count.sum())
        # the rows since the last plan take this plan's epoch: a level epoch's cells hold the page loads folded at
        # its plans, from one plan period before its start to one before its end (with plans every 300 s and hour
        # epochs, 1/12 of an hour's contrasts; the cells' own levels, ``cell_epoch``, start at the epoch itself)
        epoch = (int(self._now // self.level_epoch),) if self.level_epoch > 0 else ()
        if epoch:
            self._end_epochs(epoch[0])
        levels = sorted({cell[:5] + epoch for cell in cells})
        number = {lc: i for i, lc in enumerate(levels)}
        lidx = np.array([number[cell[:5] + epoch] for cell in cells])
        order = np.argsort(lidx, kind="stable")
        bounds = np.searchsorted(lidx[order], np.arange(len(levels) + 1))  # level i: cells order[bounds[i]:bounds[i+1]]
        n_row, t_row, a_row = count.sum(axis=1), total.sum(axis=1), count @ self._e
        runs = [i for i in range(len(levels)) if i == 0 or levels[i][:2] != levels[i - 1][:2]] + [len(levels)]
        for lo, hi in zip(runs[:-1], runs[1:]):
            rows = order[bounds[lo]:bounds[hi]]
            starts = bounds[lo:hi] - bounds[lo]
            knob = (pint[rows][:, :, None] * a_row[rows][:, None, :]).reshape(len(rows), -1)
            s_new = np.concatenate([np.add.reduceat(psi[rows] * n_row[rows, None], starts),
                                    np.add.reduceat(knob, starts)], axis=1)
            self._absorb(levels[lo:hi], s_new, np.add.reduceat(n_row[rows], starts),
                         np.add.reduceat(t_row[rows], starts))

    def _absorb(self, levels: list[tuple], s_new: np.ndarray, n_new: np.ndarray, t_new: np.ndarray) -> None:
        """Replace these level cells' corrections by those of their sums with the new rows'."""
        prev = [self._level.get(lc) for lc in levels]
        had = [i for i, p in enumerate(prev) if p is not None]
        s_tot, n_tot, t_tot = s_new.copy(), n_new.astype(float), t_new.astype(float)
        x, w = s_tot, -1.0 / n_tot
        if had:
            s_old = np.array([prev[i][0] for i in had])
            n_old = np.array([prev[i][1] for i in had])
            t_old = np.array([prev[i][2] for i in had])
            s_tot[had] += s_old
            n_tot[had] += n_old
            t_tot[had] += t_old
            self._h += s_old.T @ (t_old / n_old)
            self._tt -= float(np.sum(t_old ** 2 / n_old))
            x, w = np.vstack([s_old, s_tot]), np.concatenate([1.0 / n_old, -1.0 / n_tot])
        self._h -= s_tot.T @ (t_tot / n_tot)
        self._tt += float(np.sum(t_tot ** 2 / n_tot))
        cols = np.flatnonzero(np.any(x != 0.0, axis=0))
        xs = x[:, cols]
        add_block(self._G, cols, xs.T @ (xs * w[:, None]))
        self._level_keys += len(levels) - len(had)
        for i, lc in enumerate(levels):
            self._level[lc] = (s_tot[i].copy(), float(n_tot[i]), float(t_tot[i]))

    def _end_epochs(self, epoch: int) -> None:
        """Merge the level cells of epochs before ``epoch`` per cell (``level_epoch``): no page load can join them
        any more, their corrections are in the Gram, and the level model needs only each cell's sums."""
        old = [lc for lc in self._level if len(lc) > 5 and lc[5] < epoch]
        for lc in old:
            s_c, n_c, t_c = self._level.pop(lc)
            prev = self._level_past.get(lc[:5])
            self._level_past[lc[:5]] = (s_c, n_c, t_c) if prev is None else (prev[0] + s_c, prev[1] + n_c, prev[2] + t_c)

    def _reprice(self) -> None:
        """Recompute every group's slack with today's bounds (Wu et al.: the played arms' lower confidence
        bounds at the current round): a configuration learned to be faster pays back what its exploration
        was charged, one learned to be slower charges more. Pending reservations stay reserved."""
        pending: dict[str, float] = {}
        for group, cost in self._reserved.values():
            pending[group] = pending.get(group, 0.0) + cost
        cells = self._played.keys_
        if not cells:
            return
        groups = [self._group(cell) for cell in cells]
        bound = self._sum_slack if self.budget_bound == "sum" else self._play_slack
        load = {} if self.budget_unit == "both" else None  # the slack in page loads, from the same posterior
        used = self._played.used()
        for group, total in bound(cells, groups, used[0], loads=used[1], into=load).items():
            self._slack[group] = total - pending.get(group, 0.0)
        if load is not None:
            pending_n: dict[str, float] = {}
            for k, cost in self._reserved_n.items():
                g = self._reserved[k][0] if k in self._reserved else None
                pending_n[g] = pending_n.get(g, 0.0) + cost
            for group, total in load.items():
                self._slack_n[group] = total - pending_n.get(group, 0.0)

    def _load_slack(self, gidx: np.ndarray, names: list[str], delta: np.ndarray, sd: np.ndarray,
                    loads: np.ndarray) -> dict[str, float]:
        """``budget_unit='both'``: each group's slack in baseline page loads, ``sum N (1 + alpha_loads - exp(UCB))``
        over its (cell, configuration) pairs played ``N`` times, at each pair's own bound (per play)."""
        ucb = np.maximum(delta + self.budget_z * sd, self._floor)
        ucb[:, self._base] = 0.0
        terms = np.where(loads > 0, loads * (1.0 + self.alpha_loads - np.exp(np.minimum(ucb, 50.0))), 0.0).sum(axis=1)
        return dict(zip(names, np.bincount(gidx, terms, len(names)).tolist()))

    def _play_slack(self, cells: Sequence[tuple], groups: Sequence[str], played: np.ndarray,
                    loads: np.ndarray | None = None, into: dict | None = None) -> dict[str, float]:
        """``budget_bound='play'``: each group's slack as the sum of every played configuration's own bound (and,
        ``into`` not None, the slack in page loads of ``loads``, :meth:`_load_slack`)."""
        delta, sd, _, _ = self._effects_many(cells, groups)
        ucb = np.maximum(delta + self.budget_z * sd, self._floor)
        ucb[:, self._base] = 0.0
        terms = np.sum(played * ((1.0 + self.alpha) * np.exp(-ucb) - 1.0), axis=1)
        slack = dict.fromkeys(groups, 0.0)
        for group, term in zip(groups, terms.tolist()):
            slack[group] += term
        if into is not None:
            index: dict[str, int] = {}
            gidx = np.fromiter((index.setdefault(g, len(index)) for g in groups), np.int64, len(groups))
            into.update(self._load_slack(gidx, list(index), delta, sd, loads))
        return slack

    def _sum_slack(self, cells: Sequence[tuple], groups: Sequence[str], played: np.ndarray,
                   loads: np.ndarray | None = None, into: dict | None = None) -> dict[str, float]:
        """``budget_bound='sum'``: each group's slack from one lower confidence bound on its sum (Kazerouni et al.,
        NeurIPS 2017, conservative linear bandits: the bound of the played actions' summed features, not the sum of
        each action's bound). The slack is ``S_g = sum_(cell, c) Y ((1 + alpha) exp(-delta) - 1)``, ``Y`` the
        time played with configuration c in the cell; linearised at the posterior means, its variance has three
        parts: the shared model's coefficients (correlated across every cell, through the posterior covariance of
        the knob terms), the pools' residual effects (taken as fully correlated within the group per
        configuration: an upper bound) and what each cell's own page loads add (independent between cells). The
        bound is the mean minus ``budget_z`` sd. A (cell, configuration) whose own bound is at the floor
        (``credit='none'``: bounded faster than the baseline) counts as the baseline, as in the per-play bound;
        with ``credit='none'`` the other played configurations together never add more slack than the baseline
        would have (alpha Y). Independent cell errors average out in a sum, so a group whose exploration is
        spread over many cells keeps more of its slack than the per-play bound leaves it. ``into`` not None: also
        the slack in page loads of ``loads`` (:meth:`_load_slack`) from the same posterior, computed once."""
        index: dict[str, int] = {}
        gidx = np.fromiter((index.setdefault(g, len(index)) for g in groups), np.int64, len(groups))
        names = list(index)
        srow = self._stats.find([cell[:5] for cell in cells])
        _, mean_s, sd_s, level = self._predict_many(cells)
        if not self.__dict__.get("_shared"):  # the plan's model: the next batches read these cells' predictions
            self._shared_add(cells, mean_s, sd_s, level)
        mean, sd_p = self._pooled(cells, mean_s, sd_s, srow)
        pool_var = np.maximum(sd_p ** 2 - sd_s ** 2, 0.0)
        delta, sd, _, _, shrink, scale = self._posterior(cells, (names, gidx), mean, sd_p, level, srow, detail=True)
        if into is not None:  # budget_unit='both': the slack in page loads, per play, from the same posterior
            into.update(self._load_slack(gidx, names, delta, sd, loads))
        z, a = self.budget_z, self.alpha
        pos = played > 0
        pos[:, self._base] = False  # played, not the baseline
        active = pos & (delta + z * sd > self._floor)
        groups_n = len(names)
        base_term = played[:, self._base] * a
        if math.isfinite(self._floor):  # credit 'none': a pair bounded at the floor counts at the floor
            at_floor = pos & ~active
            floor_term = np.where(at_floor, played * ((1.0 + a) * math.exp(-max(self._floor, -50.0)) - 1.0), 0.0)
            base_term = base_term + floor_term.sum(axis=1)
        fixed = np.bincount(gidx, base_term, groups_n)
        e = np.exp(-delta)
        w = np.where(active, (1.0 + a) * played * e, 0.0)  # d S / d(-delta)
        mean_term = np.bincount(gidx, np.where(active, played * ((1.0 + a) * e - 1.0), 0.0).sum(axis=1), groups_n)
        # the shared coefficients: one aggregated design per group, A = sum w * shrink * scale * (psi slots x d_c)
        coef = w * shrink * scale
        var = np.zeros(groups_n)
        if active.any():
            idx, val = self._slots(cells)
            pidx, pval = self._int_pos[idx[:, self._int_slots]], val[:, self._int_slots]
            direction = coef @ self._d  # cells x n_e
            ok = pidx >= 0
            rows, slots = np.nonzero(ok)
            at = gidx[rows] * self._n_int + pidx[rows, slots]
            # agg[g, p] = sum over the group's cells with psi slot p of p's value x the cell's direction: a sparse
            # (group, slot) x cells matrix times the directions; each output row adds its products in cell order
            # (the COO entries are in cell order and a cell fills a (group, slot) row once), from 0, as a bincount
            # over (slot, column) bins would (it did until 2026-12-06, over a gathered copy of the directions)
            spread = csr_matrix((pval[rows, slots], (at, rows)), shape=(groups_n * self._n_int, len(cells)))
            flat = np.asarray(spread @ direction).reshape(groups_n, -1)
            cov = self._cov_blocks.transpose(0, 2, 1, 3).reshape(flat.shape[1], flat.shape[1])
            var += np.einsum("gi,gi->g", flat @ cov, flat)
            # the pools: fully correlated within a group per configuration (an upper bound)
            n_c = played.shape[1]
            pv = coef * np.sqrt(pool_var)
            pooled = np.bincount((gidx[:, None] * n_c + np.arange(n_c)).ravel(), pv.ravel(),
                                 groups_n * n_c).reshape(groups_n, n_c)  # per (group, configuration), in cell order
            var += np.sum(pooled ** 2, axis=1)
            # each cell's own part: what its posterior variance holds beyond the shared and pooled parts
            own = np.maximum(sd ** 2 - (shrink * scale) ** 2 * (sd_s ** 2 + pool_var), 0.0)
            var += np.bincount(gidx, np.sum(w * w * own, axis=1), groups_n)
        bound = mean_term - z * np.sqrt(var)
        if self._floor == 0.0:  # credit 'none': exploration never adds more slack than the baseline would have
            bound = np.minimum(bound, np.bincount(gidx, np.where(active, played * a, 0.0).sum(axis=1), groups_n))
        return {g: float(fixed[j] + bound[j]) for j, g in enumerate(names)}

    def _refit(self) -> None:
        """Posterior of the shared model from its sufficient statistics; the noise variance by empirical Bayes."""
        for _ in range(2):
            used = self._sigma2
            prec = self._precision(used, self._prior_prec)
            factor = cho_factor(prec, lower=True, check_finite=False)
            self._mu = cho_solve(factor, self._h / self._sigma2, check_finite=False)
            rss = self._yy - self._tt - 2.0 * self._mu @ self._h + self._mu @ self._G @ self._mu
            self._sigma2 = float(np.clip(rss / max(self._n - self._level_keys, 1), 1e-4, 4.0))
        self._cov_from = (used, self._prior_prec.copy())  # before the EM step below moves the prior
        cov = cho_solve(factor, np.eye(len(prec)), check_finite=False)
        self._set_cov(cov)
        # one EM step of the context blocks' variance components (type-II maximum likelihood): a block whose
        # knob deviations the data do not show shrinks, so its contexts share the global effects more tightly
        n_psi = self._n_psi
        second = self._mu[n_psi:] ** 2 + np.diag(cov)[n_psi:]
        size = np.bincount(self._comp, minlength=len(self._comp_var))
        lam = self._tail_weights(second) if self.context_prior == "student" else 1.0
        est = np.bincount(self._comp, weights=lam * second, minlength=len(self._comp_var)) / np.maximum(size, 1)
        est = np.clip(est, COMP_FLOOR, self._comp_cap)
        first = 0 if self.global_em == "on" else 2  # the global block's components (0, 1) only with global_em
        self._comp_var[first:] = est[first:]
        # EM: the weights above (E-step, old variances) gave the variances; the precisions use the new ones
        lam = self._tail_weights(second) if self.context_prior == "student" else 1.0
        self._prior_prec[n_psi:] = lam / self._comp_var[self._comp]

    def _tail_weights(self, second: np.ndarray) -> np.ndarray:
        """Student-t prior of the context blocks' knob terms as a scale mixture (Lange, Little & Taylor 1989):
        each term's expected precision scale given its posterior second moment, (nu + 1) / (nu + m / v), v its
        block's variance component; 1 for the global block (components 0 and 1), which stays Gaussian."""
        lam = (TAIL_DOF + 1.0) / (TAIL_DOF + second / self._comp_var[self._comp])
        lam[self._comp < 2] = 1.0
        return lam

    def _precision(self, sigma2: float, prior_prec: np.ndarray) -> np.ndarray:
        return self._G / sigma2 + np.diag(prior_prec)

    def _restore_cov(self) -> None:
        """The posterior covariance as recorded by ``_cov_from``: the prior's before any refit, else as the last
        refit computed it (the same Gram matrix, noise variance and prior precisions), so a restored state decides
        as the saved one would."""
        if self._cov_from is None:
            self._set_cov(np.diag(1.0 / self._prior_prec))
            return
        sigma2, prior_prec = self._cov_from
        with threadpool_limits(1):  # as in _plan
            prec = self._precision(sigma2, prior_prec)
            factor = cho_factor(prec, lower=True, check_finite=False)
            self._set_cov(cho_solve(factor, np.eye(len(prec)), check_finite=False))

    def _fit_levels(self) -> None:
        """The level part of the model (what a new cell's baseline time is predicted from): an additive model of
        the cells' mean log times, net of the within-cell fit, over psi's website, device, RTT, goodput and loss
        blocks (weighted least squares, weights 1 / (sigma^2 / n + v)); v, the cells' spread around it, by the
        method of moments. Levels cancel in a cell's decisions; they size the budget's baseline time."""
        entries = {**self._level_past, **self._level}  # ended epochs' sums per cell, then the current epoch's cells
        if not entries:
            return
        hour0 = self._blocks()["hour"][0]
        keys = list(entries)
        psi = self._psi_rows([lc[:5] + (0,) for lc in keys])[:, :hour0]
        n = np.array([entries[k][1] for k in keys])
        mu = self._mu.copy()
        mu[:hour0] = 0.0
        # each cell's mean log time net of the fitted hour and knob terms
        r = np.fromiter(((t - s @ mu) / n_c for s, n_c, t in entries.values()), float, len(keys))
        v = self._level_var
        for _ in range(3):
            w = 1.0 / (self._sigma2 / n + v)
            a = psi.T @ (psi * w[:, None]) + np.eye(hour0) / 9.0
            coef = np.linalg.solve(a, psi.T @ (w * r))
            res = r - psi @ coef
            v = float(np.clip(np.sum(w * (res ** 2 - self._sigma2 / n)) / np.sum(w), 1e-3, 4.0))
        self._level_var = v
        self._mu[:hour0] = coef

    def _misfit(self) -> float:
        """tau^2: how far cells' own configuration effects stray from the shared model's beyond noise and
        parameter variance (method of moments), from every (cell, configuration) with at least 5 page loads.
        ``misfit='group'`` and ``'contrast'``: only contrasts with the cell's own baseline page loads (at least 5;
        a cell that never played the baseline cannot tell its level from an effect), each cell's noise its client
        group's; with ``'group'`` each client group also gets its own tau^2 (``_tau2_group``, its terms shrunk to
        the global value by 20 pseudo-terms), since the shared model strays further in some contexts (2G) than in
        others. ``'level'``: every cell, its level estimated with the shared effects taken as known, the global
        noise. Returns the global value."""
        n, total = self._stats.used()
        on = np.flatnonzero(n.sum(axis=1) >= 10)
        keys = [self._stats.keys_[i] for i in on.tolist()]
        n, total = n[on], total[on]
        ok = n >= 5
        ok[:, self._base] = False
        rows = ok.any(axis=1)
        if not rows.any():
            return self._tau2
        n, total, ok = n[rows], total[rows], ok[rows]
        cells = [key + (0,) for key, r in zip(keys, rows) if r]
        _, mean, sd, _ = self._predict_many(cells)
        nn = np.maximum(n, 1.0)
        self._tau2_group = {}
        if getattr(self, "misfit", "level") in ("contrast", "group"):
            # contrasts with the cell's own baseline page loads (a cell that never played the baseline cannot tell
            # its level from an effect), each cell's noise its group's
            b = self._base
            ok &= n[:, [b]] >= 5
            if not ok.any():
                return self._tau2
            groups = [self._group(cell) for cell in cells]
            s2 = np.array([self._noise(g) for g in groups])[:, None]
            resid = total / nn - (total[:, [b]] / nn[:, [b]]) - mean
            terms = resid ** 2 - s2 / nn - s2 / nn[:, [b]] - sd ** 2
            tau2 = float(np.clip(np.mean(terms[ok]), 0.002, 0.5))
            if self.misfit == "group":  # per client group, shrunk to the global value by 20 pseudo-terms
                names, gidx = np.unique(np.array(groups, dtype=object), return_inverse=True)
                tot = np.bincount(gidx, np.where(ok, terms, 0.0).sum(axis=1), len(names))
                cnt = np.bincount(gidx, ok.sum(axis=1), len(names))
                per = np.clip((tot + 20 * tau2) / (cnt + 20), 0.002, 0.5)
                self._tau2_group = {str(g): float(v) for g, v, c in zip(names, per, cnt) if c > 0}
            return tau2
        base = np.sum(total - n * mean, axis=1) / n.sum(axis=1)  # each cell's own level given the shared effects
        terms = ((total / nn - base[:, None] - mean) ** 2 - self._sigma2 / nn - sd ** 2)[ok]
        return float(np.clip(np.mean(terms), 0.002, 0.5))

    @property
    def alarms(self) -> list[tuple[float, str]]:
        """(time, client group) of every change-point alarm so far."""
        return list(self._alarms)

    @property
    def baseline_index(self) -> int:
        """Index of the baseline configuration: the budget's reference and the decision tables' fallback."""
        return self._base

    def slack(self, group: str) -> float:
        """The group's current budget slack S_g (ms): what exploration may still cost."""
        return self._slack.get(group, 0.0)

    # -- decision tables: the safe choice per context cell of every archived prefix x device x website
    def _table(self) -> tuple[dict, list[dict]]:
        archive = getattr(self.env, "archive", None)
        groups: dict[str, dict[int, float]] = {"baseline": {self._base: 1.0}}
        # connections no other rule matches (unknown prefixes) get the baseline
        rules: list[dict] = [] if self._base == self.space.default_index else \
            [{"prefix": "0.0.0.0/0", "group": "baseline"}, {"prefix": "::/0", "group": "baseline"}]
        if archive is None:
            return groups, rules
        hour = int((self._now % 86400.0) // (86400.0 / HOUR_BINS))
        # "" = not known: tailor-edge knows the SNI but not the device, tailor-agent (TCP-only telemetry) neither, so
        # each prefix also gets the cells of an unknown device, with and without a website (a rule without that key)
        sites = sorted(self._sites)
        pairs = [(site, device) for device in DEVICES for site in sites] + [(site, "") for site in sites if site] + [("", "")]
        # a group id covers the cells of every loss bin (an archived loss moves across bin edges from cycle to cycle);
        # the cell with the most page loads in the last period decides for it
        of_gid: dict[str, tuple] = {}
        rtt_e, gp_e, loss_e = self._edges
        cells_of: dict[str, set] = {}  # the distinct cells a group id covers: what edges will draw for it
        placed: list[tuple[str, str, str, str]] = []
        for prefix, h in archive.items(0.0):
            rtt = _bin(rtt_e, max(h.rtt_ms, 0.1))
            gp = _bin(gp_e, max(h.goodput_mbps, 1e-3))
            loss = _bin(loss_e, h.loss)
            for site, device in pairs:
                cell = (site, device, rtt, gp, loss, hour)
                gid = self._gid(cell)
                if gid not in of_gid or self._recent.get(cell[:5], 0.0) > self._recent.get(of_gid[gid][:5], 0.0):
                    of_gid[gid] = cell
                cells_of.setdefault(gid, set()).add(cell[:5])
                placed.append((prefix, site, device, gid))
        left: dict[str, list[float]] = {}  # per client group: mean and variance of the costs promised to this table (ms, page loads)
        placed_sd: list[float] = []  # the sds of the probes placed in this table (probe_sd's window, after the table)
        for gid, cell in of_gid.items():
            loads = sum(self._recent.get(c, 0.0) for c in cells_of[gid])
            groups[gid] = self._table_choice(cell, self._group(cell), left, loads, placed_sd)
        for sd in placed_sd:
            self._probe_played(sd)
        # a group that gives the baseline needs no rule of its own unless a less specific rule of the same prefix
        # would catch its connections for a group that departs from it (an edge takes the most specific matching
        # rule: (website, device), (website, any), (any, device), (any, any)); without one they were served
        # that group's departure, unbudgeted and logged under its id
        departs = {(prefix, site, device) for prefix, site, device, gid in placed if groups[gid] != {self._base: 1.0}}
        rules += [{"prefix": prefix, "sni": site, "device": device, "group": gid} for prefix, site, device, gid in placed
                  if (prefix, site, device) in departs
                  or any((prefix, s, d) in departs for s, d in ((site, ""), ("", device), ("", "")) if (s, d) != (site, device))]
        return groups, rules

    def _table_choice(self, cell: tuple, group: str, left: dict[str, list[float]], loads: float,
                      placed_sd: list[float]) -> dict[int, float]:
        """A table group's choices: as :meth:`_select` decides, with probabilities: the greedy choice when it beats
        the safe one by ``min_gain`` (``exploit='greedy'``), else the safe one, and the cell's probe
        (:meth:`_probe_of`) with probability ``explore_share``, each non-safe choice only when the group's slack pays
        for it. Edges draw from the table until the next plan, so what they will draw is paid in advance: a cell
        is expected to see as many page loads as in the last period (Poisson), each non-safe one at its pessimistic
        cost (:meth:`_cost`); the group's promised costs, their mean plus three standard deviations, must stay within
        its slack (``left``: per group, the mean and variance promised so far). No probe before the group has 10
        page loads or for a table group without page loads in the last period (``loads``: those of every cell the
        table group covers). ``placed_sd``: the sd of a probe placed in the table is appended there."""
        mean, sd, level, level_var = self._effects(cell, group)
        mean, charge = self._charged(mean, self._check_key(cell, group))
        ucb, ok, near = self._bounds(mean, sd)
        safe = guard = int(np.argmin(np.where(ok, ucb, np.inf)))
        free = safe == self._base or self._free(float(mean[safe] + self.budget_z * sd[safe]))  # as select
        if loads <= 0.0 or self._times.get(group, (0, 0.0))[0] < 10:
            return {safe if free else self._base: 1.0}
        slack, slack_n = self._slack.get(group, 0.0), self._slack_n.get(group, 0.0)
        promised = left.setdefault(group, [0.0, 0.0, 0.0, 0.0])

        def pay(share: float, c: int) -> bool:  # promise the cost of drawing c with probability share here
            ucb_c = float(mean[c] + self.budget_z * sd[c])
            cost, cost_n = self._cost(group, level, level_var, ucb_c), self._cost_n(ucb_c)
            m, v = promised[0] + share * loads * cost, promised[1] + share * loads * cost * cost
            m_n, v_n = promised[2] + share * loads * cost_n, promised[3] + share * loads * cost_n * cost_n
            if m + 3.0 * math.sqrt(v) > slack or (cost_n > 0.0 and m_n + 3.0 * math.sqrt(v_n) > slack_n):
                return False
            promised[:] = m, v, m_n, v_n
            return True

        share = self.explore_share
        if not free and not pay(1.0 - share, safe):  # the guard's choice costs budget: the budget holds first
            safe = self._base
        main = safe
        best = self._greedy(mean, sd, ok)
        exploit = self._exploit_of(cell, mean, sd, ok, best) if self.exploit == "greedy" else safe
        if exploit != safe and mean[exploit] + charge < ucb[safe] - self.min_gain \
                and self._confirmed(cell, exploit, safe) and pay(1.0 - share, exploit):
            main = exploit
        # the probe as ``select`` chooses it: around the guard's safe choice and measured against it (until
        # 2026-12-07 around the main choice, so a greedy main with a wider bound admitted probes select would not)
        probe = self._probe_of(cell, mean, sd, ucb, guard, near, best) if share > 0.0 else None
        if probe == main:  # select would play it as a probe; the table already serves it
            probe = None
        if probe is not None and not self._worth(mean, sd, probe, best, group,
                                                 self._horizon(cell, self._times.get(group, (0, 0.0))[0])):
            probe = None
        if main != self._base and self.audit:  # the audit: held out with probability audit, or closed
            if self._audit_closed(group):
                main = self._base
            else:
                h = self._audit_share(group)
                out = {main: 1.0 - h, self._base: h}
                if probe is None or not pay(share, probe):
                    return out
                out = {c: (1.0 - share) * p for c, p in out.items()}
                out[probe] = out.get(probe, 0.0) + share
                placed_sd.append(float(sd[probe]))
                return out
        if probe is None or not pay(share, probe):
            return {main: 1.0}
        placed_sd.append(float(sd[probe]))
        return {main: 1.0 - share, probe: share}

    def table_groups(self):
        self._table_cache = self._table()  # compile_table asks for the groups, then the rules
        return self._table_cache[0]

    def table_rules(self) -> list[dict]:
        cached = getattr(self, "_table_cache", None)
        self._table_cache = None
        return (cached or self._table())[1]
