"""The `tailor` policy's safety and change-detection contracts, in seeded synthetic worlds.

The worlds call ``select`` / ``observe`` directly (the simulator's loop with latency 0), so each test
controls the truth: the time every configuration would give every page load.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from tailor.policies import Context, Decision, Outcome, PolicyEnv, PrefixHistory, make_policy
from tailor.policies.tailor import cusum_run
from tailor.scenario.model import ClientInfo
from tailor.space import ConfigSpace

SITES = ("news.example", "shop.example", "video.example")
CELL0 = ("news.example", "desktop", 0, 0, 0, 0)  # a context cell for the tests that call _probe_of directly
# two client groups far apart in RTT and goodput, several /24s each
POPULATIONS = {
    "fast": dict(rtt=20.0, goodput=50.0, loss=0.0005, base_ms=900.0),
    "slow": dict(rtt=300.0, goodput=1.5, loss=0.02, base_ms=6000.0),
}


def _policy(**params):
    space = ConfigSpace.named("core")
    pol = make_policy("tailor", seed=7, **params)
    pol.reset(space, PolicyEnv(websites=SITES, update_period_s=300.0))
    return pol, space


def _slowdowns(pol, space, values):
    """Configuration c's true time relative to the policy's baseline (the budget's reference): ``values``,
    with the baseline's entry set to 1."""
    out = np.array(values, dtype=float)
    out[pol.baseline_index] = 1.0
    return out


def _one_knob(pol, space, knob, value):
    """The configuration that differs from the policy's baseline in ``knob`` only, set to ``value``."""
    ref = space.configs[pol.baseline_index]
    return space.index_of(next(c for c in space.configs if c[knob] == value
                               and all(c[k] == ref[k] for k in space.grid if k != knob)))


def _contexts(rng: np.random.Generator, n: int, t0: float = 0.0, dt: float = 1.0):
    names = list(POPULATIONS)
    for i in range(n):
        pop = names[int(rng.integers(len(names)))]
        p = POPULATIONS[pop]
        net = int(rng.integers(8))
        prefix = f"10.{names.index(pop)}.{net}.0/24"
        client = ClientInfo(f"10.{names.index(pop)}.{net}.{int(rng.integers(2, 250))}", prefix, 64500, "r", "desktop", "x")
        history = PrefixHistory(p["goodput"] * rng.uniform(0.9, 1.1), p["loss"], p["rtt"], 10, 30.0)
        site = SITES[int(rng.integers(len(SITES)))]
        yield pop, Context(t0 + i * dt, f"s{i}", client, site, p["rtt"] * rng.uniform(1.0, 1.1), history, 0)


def _run(pol, space, rng, n, slowdown, base_scale=None, t0=0.0, plan_every=300):
    """Feed n page loads; ``slowdown[c]`` is configuration c's true time relative to the baseline's.
    Returns per budget group the running (policy time, baseline time) sums after every page load."""
    sums: dict[str, list[tuple[float, float]]] = {}
    for k, (pop, ctx) in enumerate(_contexts(rng, n, t0)):
        if k and k % plan_every == 0:
            pol.plan(ctx.time_s, compile=False)
        d = pol.select(ctx)
        base = POPULATIONS[pop]["base_ms"] * (base_scale or {}).get(pop, 1.0)
        noise = 1.0 + 0.3 * rng.gamma(4.0, 1.0)  # shared by the policy and the counterfactual default
        y, y_default = base * slowdown[d.config] * noise, base * noise
        pol.observe(ctx, d, Outcome(y, 10.0, ctx.handshake_rtt_ms, 0.0, 100_000))
        g = pol.budget_group(ctx)
        prev = sums.setdefault(g, [(0.0, 0.0)])[-1]
        sums[g].append((prev[0] + y, prev[1] + y_default))
    return sums


@pytest.mark.parametrize("alpha,baseline,credit,bound", [(0.01, "cdn-static", "none", "play"),
                                                         (0.05, "cdn-static", "none", "play"),
                                                         (0.01, "default", "none", "play"),
                                                         (0.01, "cdn-static", "gain", "play"),
                                                         (0.01, "cdn-static", "none", "sum"),
                                                         (0.05, "cdn-static", "none", "sum"),
                                                         (0.01, "default", "none", "sum"),
                                                         (0.01, "cdn-static", "gain", "sum")])
def test_budget_never_violated_when_every_other_configuration_is_worse(alpha, baseline, credit, bound):
    pol, space = _policy(alpha=alpha, baseline=baseline, credit=credit, budget_bound=bound)
    rng = np.random.default_rng(3)
    # every configuration but the baseline 10% to 2.2x slower, differently for each (the prior's assumption: one
    # knob changed makes a page load at most exp(budget_z * prior_sd) = 2.5x slower)
    slowdown = _slowdowns(pol, space, 1.1 + 1.1 * rng.random(len(space)))
    sums = _run(pol, space, rng, 6000, slowdown)
    explored = 0
    for group, series in sums.items():
        mine, default = np.array(series[1:]).T
        worst = np.max(mine - (1.0 + alpha) * default)
        assert worst <= 1e-6, f"group {group}: cumulative time exceeded (1 + {alpha}) x the baseline's by {worst:.0f} ms"
        explored += int(np.sum(np.diff(np.concatenate([[0.0], mine])) != np.diff(np.concatenate([[0.0], default]))))
    assert explored > 0, "the budget was never used: the test would pass for a policy that never explores"


@pytest.mark.parametrize("credit,bound", [("none", "sum"), ("gain", "sum"), ("gain", "play")])
def test_budget_in_page_loads_holds_where_light_pages_would_spend_what_heavy_ones_earn(credit, bound):
    """``budget_unit='both'``: besides the time budget, every group's sum over its page loads of time / the
    baseline's time stays within (1 + alpha) x their number at every moment, in a world where every other
    configuration is slower and the websites' baseline times differ 25-fold (a heavy page's alpha x its time would
    otherwise fund many slow light page loads). The default unit ('time') lets the same world exceed it."""
    scale = {"news.example": 0.2, "shop.example": 1.0, "video.example": 5.0}
    worst, departed = {}, {"time": 0, "both": 0}
    for unit in ("time", "both"):
        pol, space = _policy(alpha=0.01, alpha_loads=0.01, credit=credit, budget_bound=bound, budget_unit=unit)
        rng = np.random.default_rng(11)
        slowdown = _slowdowns(pol, space, 1.1 + 1.1 * rng.random(len(space)))
        sums: dict[str, list[float]] = {}  # per group: [time, baseline time, sum of ratios, page loads]
        worst[unit] = [-np.inf, -np.inf]
        for k, (pop, ctx) in enumerate(_contexts(rng, 6000)):
            if k and k % 300 == 0:
                pol.plan(ctx.time_s, compile=False)
            d = pol.select(ctx)
            departed[unit] += d.config != pol.baseline_index
            noise = 1.0 + 0.3 * rng.gamma(4.0, 1.0)
            y_base = POPULATIONS[pop]["base_ms"] * scale[ctx.website] * noise
            y = y_base * slowdown[d.config]
            pol.observe(ctx, d, Outcome(y, 10.0, ctx.handshake_rtt_ms, 0.0, 100_000))
            acc = sums.setdefault(pol.budget_group(ctx), [0.0, 0.0, 0.0, 0])
            acc[0], acc[1], acc[2], acc[3] = acc[0] + y, acc[1] + y_base, acc[2] + y / y_base, acc[3] + 1
            worst[unit] = [max(worst[unit][0], acc[0] - 1.01 * acc[1]), max(worst[unit][1], acc[2] - 1.01 * acc[3])]
    assert worst["both"][0] <= 1e-6 and worst["time"][0] <= 1e-6, worst  # the time budget holds in both
    assert worst["both"][1] <= 1e-9, f"the page-load budget was exceeded by {worst['both'][1]:.3f} page loads"
    assert worst["time"][1] > 0.0, "the world does not tell the units apart: the test would pass for either"
    assert 0 < departed["both"] < departed["time"], departed  # it explores, less than the time budget lets it


@pytest.mark.parametrize("baseline,bound", [("cdn-static", "play"), ("default", "play"), ("cdn-static", "sum"),
                                            ("default", "sum")])
def test_exploits_a_better_configuration_within_budget(baseline, bound):
    pol, space = _policy(baseline=baseline, budget_bound=bound)
    rng = np.random.default_rng(5)
    slowdown = _slowdowns(pol, space, np.full(len(space), 1.3))
    # one knob changed from the baseline (HTTP/2 from the default, CUBIC from cdn-static's BBR) is 30% faster
    ref = space.configs[pol.baseline_index]
    knob, value = ("http.version", "2") if baseline == "default" else ("tcp.congestion_control", "cubic")
    good = space.index_of(next(c for c in space.configs if c[knob] == value
                               and all(c[k] == ref[k] for k in space.grid if k != knob)))
    slowdown[good] = 0.7
    sums = _run(pol, space, rng, 8000, slowdown)
    for group, series in sums.items():
        mine, default = np.array(series[1:]).T
        assert np.all(mine <= 1.01 * default + 1e-6)
        assert mine[-1] < 0.9 * default[-1], f"group {group} did not learn the 30% faster configuration"


def test_credited_gain_funds_more_exploration_and_the_budget_still_holds():
    """``credit=gain``: a configuration bounded faster than the baseline adds its lower bound of the time saved to
    the slack (Wu et al.'s played arms at their lower bounds), so a world with one 30% faster configuration and
    every other one slower ends with more slack than under ``none``, and the cumulative time never exceeds
    (1 + alpha) x the baseline's."""
    slack = {}
    for credit in ("none", "gain"):
        pol, space = _policy(credit=credit)
        rng = np.random.default_rng(17)
        slowdown = _slowdowns(pol, space, 1.1 + 1.1 * rng.random(len(space)))
        good = _one_knob(pol, space, "tcp.congestion_control", "cubic")
        slowdown[good] = 0.7
        sums = _run(pol, space, rng, 8000, slowdown)
        for group, series in sums.items():
            mine, default = np.array(series[1:]).T
            worst = np.max(mine - 1.01 * default)
            assert worst <= 1e-6, f"{credit}, group {group}: over budget by {worst:.0f} ms"
            assert mine[-1] < 0.9 * default[-1], f"{credit}, group {group} did not learn the faster configuration"
        slack[credit] = sum(pol.slack(g) for g in sums)
    assert slack["gain"] > 1.5 * slack["none"], slack


def test_one_bound_on_the_sum_keeps_more_slack_than_the_sum_of_per_play_bounds():
    """``budget_bound='sum'`` (Kazerouni et al. 2017): after a world where one configuration is 30% faster and the rest
    slower, the slack from one bound on each group's sum is at least the per-play repricing's in every group (cell
    errors average out in a sum) and, in total, larger; the per-play slack of the same state is recomputed with the
    same posterior."""
    pol, space = _policy(budget_bound="sum")
    rng = np.random.default_rng(23)
    slowdown = _slowdowns(pol, space, 1.1 + 1.1 * rng.random(len(space)))
    good = _one_knob(pol, space, "tcp.congestion_control", "cubic")
    slowdown[good] = 0.7
    _run(pol, space, rng, 4000, slowdown)
    cells = pol._played.keys_
    groups = [pol._group(cell) for cell in cells]
    played = pol._played.used()[0]
    by_sum, by_play = pol._sum_slack(cells, groups, played), pol._play_slack(cells, groups, played)
    for g in by_sum:
        assert by_sum[g] >= by_play[g] - 1e-6 * abs(by_play[g]), (g, by_sum[g], by_play[g])
    assert sum(by_sum.values()) > sum(by_play.values())


def test_change_detection_reacts_on_a_switching_world_and_only_there():
    pol, space = _policy()
    rng = np.random.default_rng(11)
    slowdown = _slowdowns(pol, space, np.full(len(space), 1.2))
    _run(pol, space, rng, 3000, slowdown)
    assert pol.alarms == [], f"false alarms in a stationary world: {pol.alarms[:5]}"
    # the slow population's times double (a path change the handshake features do not show)
    _run(pol, space, rng, 3000, slowdown, base_scale={"slow": 2.0}, t0=3000.0)
    groups = {g for _, g in pol.alarms}
    slow = {pol.budget_group(ctx) for pop, ctx in _contexts(np.random.default_rng(0), 400) if pop == "slow"}
    fast = {pol.budget_group(ctx) for pop, ctx in _contexts(np.random.default_rng(0), 400) if pop == "fast"}
    assert groups & slow, pol.alarms
    assert not groups & fast, f"alarms outside the changed groups: {groups & fast}"
    first = min(t for t, _ in pol.alarms)
    assert first >= 3000.0
    assert first < 3000.0 + 800.0, f"detected only {first - 3000.0:.0f} page loads after the change"


def test_stationary_world_stays_quiet_for_long():
    pol, space = _policy()
    rng = np.random.default_rng(13)
    slowdown = _slowdowns(pol, space, 0.8 + 0.6 * rng.random(len(space)))
    _run(pol, space, rng, 12000, slowdown)
    assert pol.alarms == [], pol.alarms[:5]


def test_every_decision_logs_its_probability():
    pol, space = _policy()
    rng = np.random.default_rng(2)
    for _, ctx in _contexts(rng, 200):
        d = pol.select(ctx)
        assert 0.0 < d.probability <= 1.0 and math.isfinite(d.probability)
        assert d.arm in ("default", "exploit", "explore")


def test_structured_gram_equals_the_dense_design():
    """The refit's Kronecker accumulation of the Gram matrix is exactly Phi^T W Phi of the materialised design
    (one row per (cell, configuration) with page loads)."""
    from tailor.policies.tailor import gram

    rng = np.random.default_rng(0)
    cells, n_psi, n_e, configs = 120, 12, 5, 9
    psi = (rng.random((cells, n_psi)) < 0.3).astype(float)
    psi[:, 3] = rng.normal(size=cells)  # a continuous feature, like the website's size
    keep = np.array([0, 2, 3, 7, 11])
    pint = psi[:, keep]
    e = (rng.random((configs, n_e)) < 0.4).astype(float)
    e[4] = 0.0  # the reference configuration
    count = rng.integers(0, 4, size=(cells, configs)).astype(float) * (rng.random((cells, configs)) < 0.3)
    total = rng.normal(size=(cells, configs)) * count
    u, c = np.nonzero(count)
    phi = np.concatenate([psi[u], (pint[u][:, :, None] * e[c][:, None, :]).reshape(len(u), -1)], axis=1)
    g, h = gram(psi, pint, e, count, total)
    np.testing.assert_allclose(g, phi.T @ (phi * count[u, c][:, None]), atol=1e-9)
    np.testing.assert_allclose(h, phi.T @ total[u, c], atol=1e-9)


def _effect(space):
    """The synthetic world's log-time effect of every configuration (the same in every call)."""
    return np.random.default_rng(99).normal(0.0, 0.15, len(space))


def _world_items(pol, space, rng, n, t0=0.0):
    """n page loads of the synthetic world with uniformly drawn configurations (a logging policy that explores
    everything), as (context, decision, outcome) items."""
    from tailor.policies import Decision

    effect = _effect(space)
    items = []
    for pop, ctx in _contexts(rng, n, t0):
        c = int(rng.integers(len(space)))
        y = POPULATIONS[pop]["base_ms"] * math.exp(effect[c] + rng.normal(0.0, 0.3))
        items.append((ctx, Decision(c, 1.0 / len(space), "log", "explore"),
                      Outcome(y, 10.0, ctx.handshake_rtt_ms, 0.0, 50_000 + 100_000 * SITES.index(ctx.website))))
    return items


def _fold_both(one, many, items, until: float) -> None:
    """The same page loads folded one by one into ``one`` and as a batch into ``many``, then both planned."""
    for item in items:
        one.observe(*item)
    many.observe_batch(items)
    one.plan(until, compile=False)
    many.plan(until, compile=False)


@pytest.mark.parametrize("bins", ["coarse", "fine"])
def test_cells_of_matches_cell_on_bin_edges_and_unknown_prefixes(bins):
    from tailor.policies.tailor import EDGES

    pol, _ = _policy(bins=bins)
    rtt_e, gp_e, loss_e = EDGES[bins]
    rng = np.random.default_rng(4)
    ctxs = []
    for i in range(400):
        rtt = float(rng.choice(rtt_e)) if i % 3 == 0 else float(np.exp(rng.uniform(0.0, 7.0)))
        known = i % 5 != 0
        history = PrefixHistory(float(rng.choice(gp_e)) if i % 2 else float(np.exp(rng.uniform(-3, 5))),
                                float(rng.choice(loss_e)) if i % 4 else float(rng.uniform(0, 0.1)), rtt, 5, 1.0) \
            if known else None
        client = ClientInfo(f"10.0.0.{i % 250}", "10.0.0.0/24", 1, "r", ("desktop", "android", "ios")[i % 3], "x")
        ctxs.append(Context(float(rng.uniform(0, 3 * 86400)), f"s{i}", client, SITES[i % 3], rtt, history))
    cells, inverse = pol._cells_of(ctxs)
    assert len(set(cells)) == len(cells)
    assert [cells[k] for k in inverse] == [pol._cell(ctx) for ctx in ctxs]


def test_fine_bins_split_every_bin_and_keep_the_coarse_client_groups():
    """bins=fine: each coarse RTT, goodput and loss bin is two fine ones (split at the edges' geometric mean), the
    shared model gets an entry per fine bin, and the budget's client groups and the pools are the coarse ones."""
    from tailor.policies.tailor import EDGES

    coarse, _ = _policy()
    fine, _ = _policy(bins="fine")
    for c_edges, f_edges in zip(EDGES["coarse"], EDGES["fine"]):
        assert f_edges[::2] == c_edges and len(f_edges) == 2 * len(c_edges) - 1
        assert all(a < m < b for a, m, b in zip(f_edges[::2], f_edges[1::2], f_edges[2::2]))
    assert fine._n_psi - coarse._n_psi == sum(len(e) for e in EDGES["coarse"]) - 3
    rng = np.random.default_rng(5)
    client = ClientInfo("10.0.0.1", "10.0.0.0/24", 1, "r", "desktop", "x")
    split = [0, 0, 0]
    for i in range(600):
        rtt = float(np.exp(rng.uniform(1.0, 7.0)))
        history = None if i % 7 == 0 else PrefixHistory(float(np.exp(rng.uniform(-3, 5))), float(rng.uniform(0, 0.1)),
                                                        rtt, 5, 1.0)
        ctx = Context(float(rng.uniform(0, 86400)), f"s{i}", client, SITES[i % 3], rtt, history)
        c, f = coarse._cell(ctx), fine._cell(ctx)
        assert c[:2] == f[:2] and c[5] == f[5]
        for k in range(3):  # the fine bin lies in the coarse one; unknown stays unknown
            assert (f[2 + k] + 1) // 2 == c[2 + k] if f[2 + k] >= 0 else c[2 + k] == f[2 + k] == -1
            split[k] += f[2 + k] >= 0 and f[2 + k] != 2 * c[2 + k]
        assert fine.budget_group(ctx) == coarse.budget_group(ctx)
        assert fine._pool_key(f) == coarse._pool_key(c)
    assert min(split) > 50  # each axis really is resolved more finely


def test_folded_rows_give_the_within_level_cell_gram():
    """After plans that touch level cells again (their corrections replaced), the sufficient statistics equal
    the brute-force within-cell design: sum of n phi phi^T minus, per level cell, s s^T / n."""
    pol, space = _policy()
    rng = np.random.default_rng(8)
    folded: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}
    for block in range(3):
        pol.observe_batch(_world_items(pol, space, rng, 700, t0=block * 700.0))
        for cell, (n, t) in pol._rows.items():
            prev = folded.get(cell, (0.0, 0.0))
            folded[cell] = (prev[0] + n, prev[1] + t)
        pol.plan(block * 700.0 + 700.0, compile=False)
    cells = list(folded)
    psi = pol._psi_rows(cells)
    pint = psi[:, pol._int]
    g = np.zeros_like(pol._G)
    h = np.zeros_like(pol._h)
    level: dict[tuple, list] = {}
    for cell, p, q in zip(cells, psi, pint):
        n, t = folded[cell]
        for c in np.flatnonzero(n):
            phi = np.concatenate([p, np.outer(q, pol._e[c]).ravel()])
            g += n[c] * np.outer(phi, phi)
            h += t[c] * phi
            acc = level.setdefault(cell[:5], [np.zeros_like(h), 0.0, 0.0])
            acc[0] += n[c] * phi
            acc[1] += n[c]
            acc[2] += t[c]
    for s_vec, n_l, t_l in level.values():
        g -= np.outer(s_vec, s_vec) / n_l
        h -= s_vec * t_l / n_l
    np.testing.assert_allclose(pol._G, g, atol=1e-6 * np.abs(g).max())
    np.testing.assert_allclose(pol._h, h, atol=1e-6 * np.abs(h).max())
    assert pol._n == sum(int(n.sum()) for n, _ in folded.values())


def test_cell_predictions_are_the_posterior_of_the_shared_model():
    """_predict_many's mean and sd of a configuration's effect are x^T mu and sqrt(x^T Cov x) with the dense
    posterior covariance of the knob terms, x = pint (x) d_c."""
    pol, space = _policy()
    rng = np.random.default_rng(9)
    pol.observe_batch(_world_items(pol, space, rng, 1500))
    pol.plan(1500.0, compile=False)
    n_int, n_e = pol._n_int, pol._n_e
    cov = pol._cov_blocks.transpose(0, 2, 1, 3).reshape(n_int * n_e, n_int * n_e)
    cells = list(pol._stats)[:6]
    cells = [lc + (int(rng.integers(4)),) for lc in cells]
    _, mean, sd, level = pol._predict_many(cells)
    n_psi = pol._n_psi
    for k, cell in enumerate(cells):
        pint = pol._psi(cell)[pol._int]
        x = (pint[None, :, None] * pol._d[:, None, :]).reshape(len(space), -1)
        np.testing.assert_allclose(mean[k], x @ pol._mu[n_psi:], atol=1e-9)
        np.testing.assert_allclose(sd[k], np.sqrt(np.einsum("ci,ij,cj->c", x, cov, x)), rtol=1e-5, atol=1e-9)


def test_add_block_is_the_fancy_indexed_sum_bit_for_bit():
    """add_block (the Gram's level corrections by runs of consecutive columns) adds exactly what
    ``g[np.ix_(cols, cols)] += upd`` adds: with a few runs and with more runs than it takes as slices."""
    from tailor.policies.tailor import add_block

    rng = np.random.default_rng(3)
    for cols in (np.r_[0, 2:7, 9, 30:58, 59], np.sort(rng.choice(400, 150, replace=False)), np.arange(5, 9)):
        g = rng.normal(size=(400, 400))
        upd = rng.normal(size=(len(cols), len(cols)))
        want = g.copy()
        want[np.ix_(cols, cols)] += upd
        add_block(g, cols, upd)
        assert np.array_equal(g, want)


def test_batch_posterior_at_played_pairs_is_the_full_posterior_there():
    """_effects_many with ``at`` (a batch's played (cell, configuration) pairs) returns the full posterior's effect
    means and sds at those pairs and the same cell levels (to rounding: the sds at the pairs are summed in another
    order), where the cells have page loads of configurations outside ``at`` (the levels read every configuration
    the level cell played, with its prior variance: until 2026-12-06 the batch path left those sds at 0 and its
    levels were off by up to 0.013 in log time)."""
    pol, space = _policy()
    rng = np.random.default_rng(12)
    pol.observe_batch(_world_items(pol, space, rng, 3000))
    pol.plan(3000.0, compile=False)
    cells = [lc + (int(rng.integers(4)),) for lc in list(pol._stats)[:40]]
    groups = [pol._group(c) for c in cells]
    k = np.repeat(np.arange(len(cells)), 3)
    c = np.concatenate([[pol.baseline_index], rng.integers(len(space), size=len(k) - 1)])
    pairs = np.unique(k * len(space) + c)
    k, c = pairs // len(space), pairs % len(space)
    assert (pol._stats.used()[0][pol._stats.find([x[:5] for x in cells])] > 0).sum(axis=1).min() >= 2
    used = pol._stats.used()[0][pol._stats.find([x[:5] for x in cells])] > 0
    outside = used.copy()
    outside[k, c] = False
    outside[:, pol.baseline_index] = False
    assert outside.sum() >= 40  # configurations the cells have page loads of that the batch did not play
    d_at, sd_at, level_at, lv_at = pol._effects_many(cells, groups, (k, c))
    d, sd, base, base_var = pol._effects_many(cells, groups)
    tight = {"rtol": 1e-12, "atol": 1e-12}
    np.testing.assert_allclose(d_at, d[k, c], **tight)
    np.testing.assert_allclose(sd_at, sd[k, c], **tight)
    np.testing.assert_allclose(level_at, base, **tight)
    np.testing.assert_allclose(lv_at, base_var, **tight)
    assert (d_at[c == pol.baseline_index] == 0.0).all() and (sd_at[c != pol.baseline_index] > 0.0).all()


def test_a_cell_learns_an_effect_only_from_contrasts():
    """The joint posterior of a cell's level and effects (``cell_level='joint'``): a cell that played one configuration
    400 times and never the baseline cannot tell its level from that configuration's effect, so the effect keeps
    about its prior uncertainty (the earlier rule, ``'known'``, took the shared effect as known when estimating the
    level and then shrank the effect's sd to sqrt(s2 / n), confirming whatever the shared model predicted); once the
    cell has played the baseline too, the contrast identifies the effect and its sd is the contrast's."""
    pol, space = _policy()
    pol._level_var = 0.25
    base, c = pol.baseline_index, (pol.baseline_index + 1) % len(space)
    shape = (1, len(space))
    mean, v0 = np.zeros(shape), np.full(shape, 0.05)
    mean[0, c] = -0.2  # the shared model: 20% faster; the truth: as fast as the baseline
    level, s2 = np.array([7.0]), np.array([[0.1]])
    n, total = np.zeros(shape), np.zeros(shape)
    n[0, c], total[0, c] = 400, 400 * 7.0
    _, _, delta, var, _ = pol._joint_cell(n, total, mean, v0, level, s2)
    lvl, _ = pol._own_level(n, total, mean, level, s2)
    var_known = 1.0 / (1.0 / v0 + n / s2)
    assert math.sqrt(var[0, c]) > 0.15 > 5 * math.sqrt(var_known[0, c])
    assert -0.2 < delta[0, c] < -0.1  # no contrast: the data barely move the prior
    n[0, base], total[0, base] = 400, 400 * 7.0
    _, base_var, delta, var, _ = pol._joint_cell(n, total, mean, v0, level, s2)
    assert abs(delta[0, c]) < 0.03 and math.sqrt(var[0, c]) < 0.03
    assert math.sqrt(base_var[0, 0]) < 0.02


def test_the_misfit_is_estimated_per_client_group_from_contrasts():
    """``misfit='group'``: where the cells' own contrasts (a configuration against the cell's baseline page loads)
    stray far from the shared model, that client group's tau^2 is above the global value, and below it where they
    agree."""
    pol, space = _policy()
    rng = np.random.default_rng(41)
    other = (pol.baseline_index + 1) % len(space)
    stray = {}
    for k, (pop, ctx) in enumerate(_contexts(rng, 6000)):
        if k and k % 600 == 0:
            pol.plan(ctx.time_s, compile=False)
        cell = pol._cell(ctx)
        # each slow cell's own effect of the other configuration strays (sd 0.5 in log time); fast cells' do not
        dev = stray.setdefault(cell[:5], rng.normal(0.0, 0.5) if pop == "slow" else 0.0)
        c = other if k % 2 else pol.baseline_index
        y = POPULATIONS[pop]["base_ms"] * math.exp(dev if c == other else 0.0) * (1.0 + 0.1 * rng.gamma(4.0, 1.0))
        pol.observe(ctx, Decision(c, 1.0, pol.group_of(ctx), "explore"), Outcome(y, 10.0, ctx.handshake_rtt_ms, 0.0,
                                                                                  100_000))
    pol.plan(6000.0, compile=False)
    slow = {pol.budget_group(ctx) for pop, ctx in _contexts(np.random.default_rng(41), 6000) if pop == "slow"}
    fast = {pol.budget_group(ctx) for pop, ctx in _contexts(np.random.default_rng(41), 6000) if pop == "fast"}
    tau_slow = [pol._tau2_group[g] for g in slow if g in pol._tau2_group]
    tau_fast = [pol._tau2_group[g] for g in fast if g in pol._tau2_group]
    assert tau_slow and tau_fast
    # the fast group (contrasts as the shared model predicts) below the global value it is shrunk to, the slow
    # group whose contrasts the shared model fits worst above it (each group has only a few cells here, one per
    # website, so the 20 pseudo-terms keep every group near the global value)
    assert max(tau_fast) < pol._tau2 < max(tau_slow), (tau_slow, pol._tau2, tau_fast)
    assert max(tau_slow) > 1.3 * max(tau_fast)


def _drifting_world(pol, space, n: int, played_from: float) -> tuple[int, list[tuple]]:
    """Feed n page loads (one a second, a plan every 300) of a world whose page loads all get 30% faster at t =
    3,300 s, where one truly neutral configuration (IW 10 one knob from the baseline) is played on 80% of the page
    loads from ``played_from`` on and the baseline on the rest. Returns that configuration and the cells seen."""
    rng = np.random.default_rng(17)
    other = _one_knob(pol, space, "tcp.initial_cwnd", 10)
    cells = set()
    for k, (pop, ctx) in enumerate(_contexts(rng, n)):
        if k and k % 300 == 0:
            pol.plan(ctx.time_s, compile=False)
        later = ctx.time_s >= 3300.0
        c = other if ctx.time_s >= played_from and rng.random() < 0.8 else pol.baseline_index
        y = POPULATIONS[pop]["base_ms"] * (0.7 if later else 1.0) * (1.0 + 0.1 * rng.gamma(4.0, 1.0))
        pol.observe(ctx, Decision(c, 1.0, pol.group_of(ctx), "explore"), Outcome(y, 10.0, ctx.handshake_rtt_ms, 0.0,
                                                                                  100_000))
        cells.add(pol._cell(ctx))
    return other, sorted(cells)


@pytest.mark.parametrize("epoch", [0.0, 1800.0])
def test_level_epochs_keep_a_drifting_level_out_of_the_effects(epoch):
    """``level_epoch``: a world whose page loads all get 30% faster at t = 3,300 s, while the configurations
    played change at the same moment (the baseline alone before, then one other configuration on 80% of the page
    loads, the baseline on the rest), and that configuration is truly neutral. With one level per cell the shared
    model credits the configuration with the drift (its loads came later); with the cells' levels per epoch its
    effect comes only from contrasts within an epoch, i.e. from page loads served side by side."""
    pol, space = _policy(level_epoch=epoch)
    # the drift and the switch together at 3,300 s: folded from the plan at 3,600 s on, epoch 2 of 1,800 s
    other, cells = _drifting_world(pol, space, 7200, played_from=3300.0)
    pol.plan(7200.0, compile=False)
    _, mean, _, _ = pol._predict_many(cells)
    effect = float(np.mean(mean[:, other]))
    if epoch:
        assert abs(effect) < 0.05, effect
        assert len(pol._level_past) > 0 and all(len(lc) == 6 and lc[5] == 4 for lc in pol._level)  # the last plan's
    else:
        assert effect < -0.15, effect  # the drift, log 0.7 = -0.36, diluted by the later baseline page loads


@pytest.mark.parametrize("cell_epoch", ["off", "on", "contrast"])
def test_cell_epochs_keep_a_drifting_level_out_of_a_cell_s_own_effects(cell_epoch):
    """``cell_epoch``: the world of the level-epoch test above (everything 30% faster from t = 3,300 s, one truly
    neutral configuration played on 80% of the page loads from then on, the baseline before). The shared model
    (level epochs of 1,800 s) sees no effect; a cell's own posterior, read before the last epoch ends, still
    credits the configuration with the drift when the cell keeps one level over all time (its baseline page loads
    came earlier), and not when its own page loads count within the current epoch only, where the configuration
    and the baseline were served side by side, nor when the ended epochs count by their own contrasts with the
    baseline (``contrast``; the configuration is played from 3,600 s here, an epoch's start, so that no ended
    epoch holds both it and the drift). The change test is kept quiet (``cusum_h``): it would forget the cells'
    data at an abrupt drift like this one, which the simulated worlds' drifts are not."""
    pol, space = _policy(level_epoch=1800.0, cell_epoch=cell_epoch, cusum_h=1000.0)
    other, cells = _drifting_world(pol, space, 7000, played_from=3600.0)
    _, shared, _, _ = pol._predict_many(cells)
    assert abs(float(np.mean(shared[:, other]))) < 0.05
    own, sd, _, _ = pol._effects_many(cells, [pol._group(c) for c in cells])
    effect = float(np.mean(own[:, other]))
    if cell_epoch != "off":
        assert len(pol._stats_now) and all(pol._stats_now[lc][0].sum() <= pol._stats[lc][0].sum() for lc in pol._stats_now)
        assert abs(effect) < 0.05, effect
        assert len(pol._stats_past) == (len(pol._stats) if cell_epoch == "contrast" else 0)
    else:
        assert effect < -0.1, effect


@pytest.mark.parametrize("cell_lag", ["off", "plan"])
def test_cell_lag_holds_a_cell_s_own_outcomes_until_the_next_plan(cell_lag):
    """``cell_lag='plan'``: a cell's decisions read its own page loads as of the last plan, so outcomes that arrive
    between plans (here 40 page loads of one configuration, each 40% faster than the cell's level) do not move the
    posterior a decision reads (but through the group's noise estimate) until the next plan, while the learning
    side (the current statistics) has them at once; with 'off' the decisions read them at once too."""
    pol, space = _policy(cell_lag=cell_lag)
    other, cells = _drifting_world(pol, space, 3000, played_from=0.0)
    pol.plan(3000.0, compile=False)
    _, ctx = next(_contexts(np.random.default_rng(5), 1, t0=3001.0))
    cell, group = pol._cell(ctx), pol._group(pol._cell(ctx))

    def deciding() -> np.ndarray:  # what _select reads
        return pol._effects(cell, group, pol._stats_lag if cell_lag == "plan" else None)[0]

    before, learned = deciding(), pol._effects(cell, group)[0]
    np.testing.assert_allclose(before, learned)  # at a plan both read the same page loads
    level = pol._effects(cell, group)[2]
    for k in range(40):
        c = replace(ctx, time_s=3001.0 + k, session=f"lag{k}")
        pol.observe(c, Decision(other, 1.0, pol.group_of(c), "exploit"), Outcome(0.6 * math.exp(level), 10.0,
                                                                                  ctx.handshake_rtt_ms, 0.0, 100_000))
    moved = pol._effects(cell, group)[0][other]
    assert moved < learned[other] - 0.05  # the cell's own data say faster
    if cell_lag == "plan":  # (the group's noise estimate, which the posterior also reads, moves at once)
        assert abs(deciding()[other] - before[other]) < 0.02
        pol.plan(3100.0, compile=False)
        assert deciding()[other] < before[other] - 0.05
    else:
        assert deciding()[other] == pytest.approx(moved)


def test_a_batch_credits_the_budget_as_observe_does():
    """observe_batch's budget terms are observe's, at the predictions from before the batch: y ((1 + alpha)
    exp(-UCB) - 1) in time and 1 + alpha_loads - exp(UCB) in page loads, with UCB floored where observe floors it
    (with ``credit`` 'gain', not at all). Until 2026-12-07 the batch floored it at 0, so a departure bounded
    below the baseline was credited less slack in the manager than in the simulator (found by review)."""
    pol, space = _policy()
    rng = np.random.default_rng(5)
    pol.observe_batch(_world_items(pol, space, rng, 3000))
    pol.plan(3600.0, compile=False)
    items = _world_items(pol, space, rng, 400, t0=3600.0)
    time_terms, load_terms, below = {}, {}, 0
    for ctx, d, out in items:
        cell = pol._cell(ctx)
        g = pol._group(cell)
        mean, sd, _, _ = pol._effects(cell, g)
        ucb = 0.0 if d.config == pol._base else max(float(mean[d.config] + pol.budget_z * sd[d.config]), pol._floor)
        below += ucb < 0.0
        time_terms[g] = time_terms.get(g, 0.0) + out.completion_ms * ((1.0 + pol.alpha) * math.exp(-ucb) - 1.0)
        load_terms[g] = load_terms.get(g, 0.0) + 1.0 + pol.alpha_loads - math.exp(ucb)
    assert below > 0  # departures bounded below the baseline: where the floor matters
    slack, slack_n = dict(pol._slack), dict(pol._slack_n)
    pol.observe_batch(items)
    for g in time_terms:
        assert pol._slack[g] - slack.get(g, 0.0) == pytest.approx(time_terms[g], rel=1e-6, abs=1e-3)
        assert pol._slack_n[g] - slack_n.get(g, 0.0) == pytest.approx(load_terms[g], rel=1e-6, abs=1e-6)


@pytest.mark.parametrize("cell_epoch,bins", [("off", "coarse"), ("on", "coarse"), ("off", "fine")])
def test_batch_observe_agrees_with_one_by_one(cell_epoch, bins):
    """observe_batch folds the same page loads as observe one by one: identical counts and sums before the model
    is fitted; afterwards only the predictions from before the batch differ, so the learned model and the safe
    choices stay close (with fine bins too: the batch's client groups come from the cells' codes)."""
    one, space = _policy(cell_epoch=cell_epoch, bins=bins)
    many, _ = _policy(cell_epoch=cell_epoch, bins=bins)
    rng = np.random.default_rng(12)
    for block in range(6):
        items = _world_items(one, space, rng, 600, t0=block * 600.0)
        for item in items:
            one.observe(*item)
        many.observe_batch(items)
        if block == 0:
            for cell, (n, t) in one._rows.items():
                np.testing.assert_array_equal(many._rows[cell][0], n)
                np.testing.assert_allclose(many._rows[cell][1], t, rtol=1e-12)
            assert many._rows.keys() == one._rows.keys()
            for stats in ("_stats", "_stats_now"):
                for key, (n, t) in getattr(one, stats).items():
                    np.testing.assert_array_equal(getattr(many, stats)[key][0], n)
                    np.testing.assert_allclose(getattr(many, stats)[key][1], t, rtol=1e-12)
                assert getattr(many, stats).keys() == getattr(one, stats).keys()
            assert len(one._stats_now) == (len(one._stats) if cell_epoch == "on" else 0)
            for g, (ss, dof) in one._gss.items():
                assert many._gss[g][1] == dof
                assert many._gss[g][0] == pytest.approx(ss, rel=1e-9)
            assert many._times.keys() == one._times.keys()
            assert all(many._times[g][0] == one._times[g][0] for g in one._times)
        one.plan(block * 600.0 + 600.0, compile=False)
        many.plan(block * 600.0 + 600.0, compile=False)
    assert one._n == many._n
    assert np.max(np.abs(one._mu - many._mu)) < 0.05
    cells = list(one._stats)
    cells = [lc + (1,) for lc in cells]
    groups = [one._group(c) for c in cells]

    def safe(pol):  # per cell the lowest upper bound (the baseline's is 0) and the configuration that has it
        mean, sd, _, _ = pol._effects_many(cells, groups)
        ucb = mean + pol.beta * sd
        return ucb.min(axis=1), np.argmin(ucb, axis=1)

    (bound_one, choice_one), (bound_many, choice_many) = safe(one), safe(many)
    assert np.max(np.abs(bound_one - bound_many)) < 0.05
    # many configurations are nearly as good, so the choices may differ; what they are worth must not
    truth = _effect(space) - _effect(space)[one.baseline_index]
    assert abs(np.mean(truth[choice_one]) - np.mean(truth[choice_many])) < 0.02


@pytest.mark.parametrize("mode", ["config", "own"])
def test_greedy_check_sums_per_configuration_agree_batch_and_one_by_one(mode):
    """greedy_check='config'/'own': the manager's batch fold and the online path count the same departures per
    configuration, their error sums add up to the group's, and the charges they give differ only by the predictions
    from before the batch."""
    from tailor.policies import Decision

    one, space = _policy(greedy_check=mode)
    many, _ = _policy(greedy_check=mode)
    rng = np.random.default_rng(12)
    for block in range(5):
        items = _world_items(one, space, rng, 600, t0=block * 600.0)
        # every third page load a departure the policy chose (arm 'exploit'), the rest the logger's exploration
        items = [(ctx, Decision(d.config, d.probability, d.group, "exploit" if k % 3 == 0 else d.arm), o)
                 for k, (ctx, d, o) in enumerate(items)]
        _fold_both(one, many, items, block * 600.0 + 600.0)
    assert one._sel_c and one._sel_c.keys() == many._sel_c.keys()
    charged = 0
    for g, c in one._sel_c.items():
        np.testing.assert_array_equal(many._sel_c[g][0], c[0])
        for pol in (one, many):
            assert pol._sel_c[g][0].sum() == pol._sel[g][0]
            assert pol._sel_c[g][1].sum() == pytest.approx(pol._sel[g][1], abs=1e-9)
        d = 0.1 if mode == "config" else 0.0  # the group's excess; 'own' shrinks towards 0 (what _charged passes)
        a = one._charged_config(np.zeros(len(space)), g, d)
        b = many._charged_config(np.zeros(len(space)), g, d)
        assert np.max(np.abs(a - b)) < 0.03
        charged += int((a > 0).any())
        if mode == "own":  # a configuration never served as a departure is not charged
            assert np.all(a[c[0] == 0] == 0.0)
    assert charged, "no group was charged: the test checks nothing"


def test_greedy_check_by_website_keeps_one_websites_excess_off_the_others():
    """``check_by='website'``: greedy_check's sums are kept per website over every client group, so the departures of
    a website that came out slower than predicted (a small object where nothing gains much) charge that website's
    configurations and not another website's in the same client group; the batch fold and the online path count the
    same page loads per website, and per group (the default) the same ones partitioned by client group."""
    from tailor.policies import Decision

    pol, space = _policy(greedy_check="shift", check_by="website")
    assert pol.check_by == "website" and _policy()[0].check_by == "group"
    rng = np.random.default_rng(8)
    a, b = SITES[0], SITES[1]
    pol._sel_add("w:" + a, np.zeros(50, bool), np.ones(50, bool), rng.normal(0.0, 0.05, 50), np.zeros(50, int))
    pol._sel_add("w:" + a, np.ones(50, bool), np.zeros(50, bool), rng.normal(0.1, 0.05, 50), np.zeros(50, int))
    pol._sel_add("w:" + b, np.zeros(50, bool), np.ones(50, bool), rng.normal(0.0, 0.05, 50), np.zeros(50, int))
    pol._sel_add("w:" + b, np.ones(50, bool), np.zeros(50, bool), rng.normal(-0.1, 0.05, 50), np.zeros(50, int))
    cell_a, cell_b = (a, "desktop", 2, 3, 1, 0), (b, "desktop", 2, 3, 1, 0)
    group = pol._group(cell_a)
    assert pol._group(cell_b) == group and pol._check_key(cell_a, group) == "w:" + a
    mean = np.linspace(-0.2, 0.2, len(space))
    shifted_a, _ = pol._charged(mean, pol._check_key(cell_a, group))
    shifted_b, _ = pol._charged(mean, pol._check_key(cell_b, group))
    assert 0.05 < np.delete(shifted_a - mean, pol.baseline_index).min() and np.array_equal(shifted_b, mean)
    assert pol._charged(mean, group) == (mean, 0.0)  # nothing kept per group
    with pytest.raises(Exception, match="check_by"):
        _policy(check_by="hour")

    one, _ = _policy(greedy_check="shift", check_by="website")
    many, _ = _policy(greedy_check="shift", check_by="website")
    per_group, _ = _policy(greedy_check="shift")
    for block in range(4):
        items = _world_items(one, space, rng, 600, t0=block * 600.0)
        items = [(ctx, Decision(d.config, d.probability, d.group, "exploit" if k % 3 == 0 else d.arm), o)
                 for k, (ctx, d, o) in enumerate(items)]
        _fold_both(one, many, items, block * 600.0 + 600.0)
        for item in items:
            per_group.observe(*item)
        per_group.plan(block * 600.0 + 600.0, compile=False)
    assert one._sel and set(one._sel) == set(many._sel) and all(k.startswith("w:") for k in one._sel)
    for k, s in one._sel.items():
        assert (many._sel[k][0], many._sel[k][3]) == (s[0], s[3])  # the same departures and baseline page loads
    assert not any(k.startswith("w:") for k in per_group._sel)
    for j in (0, 3):
        assert sum(s[j] for s in per_group._sel.values()) == sum(s[j] for s in one._sel.values()) > 0


def test_greedy_check_slope_scales_predicted_gains_by_the_share_the_departures_realised():
    """``greedy_check='slope'``: departures that realised 30% of their predicted gains (net of the baseline's mean
    error) give a slope near 0.3, which multiplies every predicted gain (negative effect) a decision reads and leaves
    predicted losses and the baseline alone; nothing before SLOPE_MIN departures; clipped to [0, 1]; per website with
    ``check_by='website'``, and the batch fold and the online path keep the same sums."""
    from tailor.policies import Decision
    from tailor.policies.tailor import SLOPE_MIN

    pol, space = _policy(greedy_check="slope", check_by="website")
    rng = np.random.default_rng(9)
    key = "w:" + SITES[0]
    n = SLOPE_MIN
    pred = rng.uniform(-0.3, -0.05, n)
    realised = 0.3 * pred + rng.normal(0.0, 0.02, n)
    mb = 0.05  # the baseline's mean prediction error, which the departures' errors share
    pol._sel_add(key, np.zeros(50, bool), np.ones(50, bool), np.full(50, mb), np.zeros(50, int), np.zeros(50))
    dep = np.ones(n - 1, bool)
    pol._sel_add(key, dep, ~dep, realised[:-1] - pred[:-1] + mb, np.ones(n - 1, int), pred[:-1])
    assert pol._slope(key) is None  # one departure short
    pol._sel_add(key, dep[:1], ~dep[:1], realised[-1:] - pred[-1:] + mb, np.ones(1, int), pred[-1:])
    b = pol._slope(key)
    assert b == pytest.approx(float(realised @ pred / (pred @ pred)), abs=1e-9) and 0.25 < b < 0.35
    mean = np.linspace(-0.2, 0.2, len(space))
    mean[pol.baseline_index] = 0.0
    charged, charge = pol._charged(mean, key)
    assert charge == 0.0 and np.allclose(charged[mean < 0], b * mean[mean < 0])
    assert np.array_equal(charged[mean >= 0], mean[mean >= 0])
    assert pol._charged(mean, "w:" + SITES[1]) == (mean, 0.0)  # another website: no evidence, no change
    worse, _ = _policy(greedy_check="slope")
    worse._sel_add("g", np.zeros(20, bool), np.ones(20, bool), np.zeros(20), np.zeros(20, int), np.zeros(20))
    worse._sel_add("g", np.ones(n, bool), np.zeros(n, bool), np.full(n, 0.5), np.ones(n, int), np.full(n, -0.1))
    assert worse._slope("g") == 0.0  # realised slower than the baseline: no predicted gain is believed

    one, _ = _policy(greedy_check="slope", check_by="website")
    many, _ = _policy(greedy_check="slope", check_by="website")
    for block in range(4):
        items = _world_items(one, space, rng, 600, t0=block * 600.0)
        items = [(ctx, Decision(d.config, d.probability, d.group, "exploit" if k % 3 == 0 else d.arm), o)
                 for k, (ctx, d, o) in enumerate(items)]
        _fold_both(one, many, items, block * 600.0 + 600.0)
    assert one._sel_p and set(one._sel_p) == set(many._sel_p)
    for k, t in one._sel_p.items():
        assert t[1] > 0.0 and many._sel_p[k][1] > 0.0  # the predictions differ (before the batch), the counts do not
        assert many._sel[k][0] == one._sel[k][0]


def test_vectorised_cusum_is_the_sequential_recursion_with_its_resets():
    """cusum_run (the batch's change test, Lindley's closed form between alarms) gives the alarms and the final
    state of max(0, S + z - drift) page load by page load, on noise with two level shifts (several alarms)."""
    rng = np.random.default_rng(21)
    z = np.concatenate([rng.normal(0, 1, 400), rng.normal(2.5, 1, 60), rng.normal(-3, 1, 80), rng.normal(0, 1, 300)])
    drift, h = 0.5, 12.0
    seq, alarms = [3.0, 1.0], []
    for k, zk in enumerate(z.tolist()):
        seq[0] = max(0.0, seq[0] + zk - drift)
        seq[1] = max(0.0, seq[1] - zk - drift)
        if seq[0] > h or seq[1] > h:
            alarms.append(k)
            seq = [0.0, 0.0]
    state = [3.0, 1.0]
    assert len(alarms) >= 3
    assert cusum_run(state, z, drift, h) == alarms
    assert state == pytest.approx(seq, abs=1e-9)


def test_batched_client_residuals_equal_one_by_one():
    """_clients_update folds residuals as _client_update does in order: per-client sums, the covariance terms
    (each with the client's mean residual before it) and the clients' recency order."""
    one, _ = _policy()
    many, _ = _policy()
    rng = np.random.default_rng(5)
    for pol in (one, many):
        for i in range(5):  # clients seen before the batch
            pol._clients[f"10.0.0.{i}"] = [i + 1, 0.1 * i]
    ids = [f"10.0.0.{int(k)}" for k in rng.integers(0, 12, 300)]
    resid = rng.normal(0.0, 0.3, 300)
    for ip, r in zip(ids, resid.tolist()):
        client = ClientInfo(ip, "10.0.0.0/24", 1, "r", "desktop", "x")
        one._client_update(Context(0.0, "s", client, SITES[0], 50.0, None), r)
    many._clients_update(ids, resid)
    assert list(many._clients) == list(one._clients)
    for ip, (n, total) in one._clients.items():
        assert many._clients[ip][0] == n
        assert many._clients[ip][1] == pytest.approx(total, abs=1e-12)
    assert many._cov_c == pytest.approx(one._cov_c, rel=1e-12)


def test_pool_learns_what_the_additive_model_misses_for_a_website_at_an_rtt():
    """A configuration 20% slower everywhere except for one website on slow (high-RTT) networks, where it is 35%
    faster: an interaction the shared additive model cannot hold. With the website x RTT pool, a new cell of that
    website there (a device never seen) starts near the truth; without it, near the shared model's compromise. A
    cell of the same website on fast networks keeps the slowdown."""
    from tailor.policies import Decision

    def world(pol, space, rng, n, t0):
        x = int(np.flatnonzero(pol._near[pol.baseline_index])[0])  # one knob away from the baseline
        items = []
        for pop, ctx in _contexts(rng, n, t0):
            c = x if rng.random() < 0.5 else pol.baseline_index
            effect = (-0.35 if (pop, ctx.website) == ("slow", "news.example") else 0.2) if c == x else 0.0
            y = POPULATIONS[pop]["base_ms"] * math.exp(effect + rng.normal(0.0, 0.2))
            items.append((ctx, Decision(c, 0.5, "log", "explore"), Outcome(y, 10.0, ctx.handshake_rtt_ms, 0.0, 200_000)))
        return x, items

    means = {}
    for pool in ("website-rtt", "none"):
        pol, space = _policy(pool=pool)
        rng = np.random.default_rng(12)
        for block in range(3):
            x, items = world(pol, space, rng, 1500, t0=block * 1500.0)
            pol.observe_batch(items)
            pol.plan(block * 1500.0 + 1500.0, compile=False)
        probe = {}
        for pop in POPULATIONS:
            ctx = next(c for p, c in _contexts(np.random.default_rng(5), 50) if p == pop and c.website == "news.example")
            cell = pol._cell(ctx)
            cell = (cell[0], "tablet") + cell[2:]  # a level cell with no page loads of its own
            mean, sd, _, _ = pol._effects(cell, pol._group(cell))
            probe[pop] = (mean[x], sd[x])
        means[pool] = probe
    pooled, shared = means["website-rtt"]["slow"][0], means["none"]["slow"][0]
    assert pooled < -0.2 and abs(pooled + 0.35) < abs(shared + 0.35) - 0.05, means
    assert means["website-rtt"]["fast"][0] > 0.1, means


def test_state_pickles_and_an_earlier_layout_is_refused_with_the_reason():
    """The manager saves the policy as a pickle: a round trip keeps the learned cells and decisions; a state of
    the earlier layout (per-cell dicts, no ``_layout``) is refused with one error naming what to do."""
    import pickle

    from tailor.errors import ParameterError

    pol, space = _policy()
    rng = np.random.default_rng(3)
    _run(pol, space, rng, 900, _slowdowns(pol, space, np.full(len(space), 0.9)))
    back = pickle.loads(pickle.dumps(pol))
    assert back._stats.keys() == pol._stats.keys()
    np.testing.assert_array_equal(back._stats.used(), pol._stats.used())
    ctxs = [ctx for _, ctx in _contexts(np.random.default_rng(4), 50, t0=1e4)]
    assert [back.select(c).config for c in ctxs] == [pol.select(c).config for c in ctxs]
    old = dict(pol.__dict__)
    del old["_layout"]
    with pytest.raises(ParameterError, match="layout 1.*fresh --data"):
        pickle.loads(pickle.dumps(pol)).__setstate__(old)
    # a state saved before ``probe_center`` existed decides as it did (probes around the safe choice only), not
    # as today's default (``'both'``, since 2026-11-30) would
    before = dict(pickle.loads(pickle.dumps(back)).__dict__)
    del before["probe_center"]
    restored = object.__new__(type(pol))
    restored.__setstate__(before)
    as_then = pickle.loads(pickle.dumps(back))
    as_then.probe_center = "safe"
    later = [ctx for _, ctx in _contexts(np.random.default_rng(5), 50, t0=2e4)]
    assert back.probe_center == "both" and restored.probe_center == "safe"
    assert [restored.select(c).config for c in later] == [as_then.select(c).config for c in later]
    # a state saved before ``cell_epoch`` existed keeps one level per cell over all time, as it was learned
    before = dict(pickle.loads(pickle.dumps(back)).__dict__)
    del before["cell_epoch"], before["_stats_now"], before["_stats_epoch"]
    restored = object.__new__(type(pol))
    restored.__setstate__(before)
    assert restored.cell_epoch == "off" and restored._own() is restored._stats and len(restored._stats_now) == 0
    assert [restored.select(c).config for c in later] == [back.select(c).config for c in later]


def test_saved_state_leaves_out_the_covariance_and_restores_it_exactly():
    """The pickle holds the Gram matrix and the level cells' sums as their non-zero entries and no posterior
    covariance: a restored state recomputes it as the last refit did (bit for bit), its tables and sums are the
    saved ones, and it decides the same; a fresh state pickles small. A state pickled whole (before 2026-11-30:
    covariance included, dense arrays) still loads and decides the same."""
    import pickle

    from tailor.policies.tailor import CellRows

    pol, space = _policy()
    fresh = pickle.dumps(pol)
    assert len(fresh) < 1e6 < sum(len(pickle.dumps(v)) for v in pol.__dict__.values()), len(fresh)
    np.testing.assert_array_equal(pickle.loads(fresh)._cov_blocks, pol._cov_blocks)
    rng = np.random.default_rng(7)
    slow = 0.7 + 0.6 * rng.random(len(space))
    for k, (pop, ctx) in enumerate(_contexts(rng, 3000)):
        if k and k % 250 == 0:
            pol.plan(ctx.time_s, compile=False)
        d = pol.select(ctx)
        if rng.random() < 0.5:  # a configuration a guardrail served (learned from, not charged): many contrasts
            d = Decision(int(rng.integers(len(space))), 1.0, d.group, "served")
        y = POPULATIONS[pop]["base_ms"] * slow[d.config] * (1.0 + 0.3 * rng.gamma(4.0, 1.0))
        pol.observe(ctx, d, Outcome(y, 10.0, ctx.handshake_rtt_ms, 0.0, 100_000))
    pol.plan(3001.0, compile=False)
    # the covariance's inputs are not today's (the last refit then moved the noise and the prior): a restore from
    # today's would differ
    assert pol._cov_from[0] != pol._sigma2 and not np.array_equal(pol._cov_from[1], pol._prior_prec)
    blob = pickle.dumps(pol)
    parts = pol.__getstate__()
    assert "_cov_blocks" not in parts and "_Q" not in parts
    assert len(blob) < 0.5 * sum(len(pickle.dumps(v)) for v in pol.__dict__.values())
    back = pickle.loads(blob)
    for name in ("_G", "_cov_blocks", "_Q", "_mu", "_h", "_prior_prec"):
        np.testing.assert_array_equal(getattr(back, name), getattr(pol, name), err_msg=name)
    for name in ("_level", "_level_past"):
        mine, theirs = getattr(pol, name), getattr(back, name)
        assert list(mine) == list(theirs)
        for k in mine:
            np.testing.assert_array_equal(theirs[k][0], mine[k][0])
            assert theirs[k][1:] == mine[k][1:]
    for name in ("_stats", "_played"):
        assert getattr(back, name).keys_ == getattr(pol, name).keys_
        np.testing.assert_array_equal(getattr(back, name).used(), getattr(pol, name).used())
    # a restored table keeps growing as the saved one would
    back._stats.rows([("new", k) for k in range(3000)])
    assert back._stats.used().shape[1] == len(pol._stats) + 3000
    # pickled whole, as before this layout: the covariance comes with it and is kept
    whole = dict(pickle.loads(blob).__dict__)
    for name in ("_stats", "_played", "_rows"):
        rows = CellRows.__new__(CellRows)
        rows.__setstate__({"index": dict(whole[name].index), "keys_": list(whole[name].keys_),
                           "data": whole[name].data.copy()})
        whole[name] = rows
    del whole["_cov_from"]
    old = object.__new__(type(pol))
    old.__setstate__(whole)
    ctxs = [ctx for _, ctx in _contexts(np.random.default_rng(8), 60, t0=1e4)]
    twin = pickle.loads(blob)
    expect = [twin.select(c).config for c in ctxs]
    assert [back.select(c).config for c in ctxs] == expect
    assert [old.select(c).config for c in ctxs] == expect
    assert "_cov_blocks" in old.__getstate__()  # not refitted since: nothing to recompute it from


def test_student_context_prior_keeps_one_context_s_contrast_out_of_the_other_context():
    """``context_prior='student'``: CUBIC is 40% faster for the slow clients only; the shared model's prediction
    for the fast clients (where CUBIC changes nothing) takes no more of the slow clients' contrast than with the
    Gaussian context prior, and the slow clients' own effect is still found. (Less, by 0.002-0.012 on four seeds of
    this world, until the probes' ties were fixed per cell on 2026-12-07; since, -0.012 to +0.011 (seeds 11-14):
    the option's advantage here is within the seeds' spread, so the bound is 0.01 log units, not a strict "less".)"""
    leak, found = {}, {}
    for prior in ("gauss", "student"):
        pol, space = _policy(context_prior=prior)
        x = _one_knob(pol, space, "tcp.congestion_control", "cubic")
        rng = np.random.default_rng(11)
        for k, (pop, ctx) in enumerate(_contexts(rng, 4000)):
            if k and k % 250 == 0:
                pol.plan(ctx.time_s, compile=False)
            d = pol.select(ctx)
            if rng.random() < 0.5:  # served by a guardrail: contrasts in every context
                d = Decision(int(rng.integers(len(space))), 1.0, d.group, "served")
            f = 0.6 if (pop == "slow" and d.config == x) else 1.0
            y = POPULATIONS[pop]["base_ms"] * f * (1.0 + 0.3 * rng.gamma(4.0, 1.0))
            pol.observe(ctx, d, Outcome(y, 10.0, ctx.handshake_rtt_ms, 0.0, 100_000))
        pol.plan(4001.0, compile=False)
        means = {}
        for pop, ctx in _contexts(np.random.default_rng(4), 40, t0=5000.0):
            _, mean, _, _ = pol._predict_many([pol._cell(ctx)])
            means.setdefault(pop, []).append(mean[0, x])
        leak[prior], found[prior] = float(np.mean(means["fast"])), float(np.mean(means["slow"]))
    assert abs(leak["student"]) < abs(leak["gauss"]) + 0.01, leak
    assert abs(found["student"] - math.log(0.6)) < 0.1, found


def test_global_em_estimates_the_global_blocks_variances_only_when_on():
    """``global_em='on'``: where no knob changes anything, the EM step shrinks the global block's main and pair
    variance components below the prior's (never above it); with 'off' they keep the prior's."""
    comps = {}
    for mode in ("off", "on"):
        pol, space = _policy(global_em=mode)
        prior = pol._comp_var[:2].copy()
        rng = np.random.default_rng(5)
        for k, (pop, ctx) in enumerate(_contexts(rng, 2000)):
            if k and k % 250 == 0:
                pol.plan(ctx.time_s, compile=False)
            d = Decision(int(rng.integers(len(space))), 1.0, pol.select(ctx).group, "served")
            y = POPULATIONS[pop]["base_ms"] * (1.0 + 0.3 * rng.gamma(4.0, 1.0))
            pol.observe(ctx, d, Outcome(y, 10.0, ctx.handshake_rtt_ms, 0.0, 100_000))
        pol.plan(2001.0, compile=False)
        comps[mode] = (prior, pol._comp_var[:2].copy())
    assert np.array_equal(comps["off"][0], comps["off"][1])
    assert np.all(comps["on"][1] < comps["on"][0]) and np.all(comps["on"][1] > 0)
    with pytest.raises(Exception, match="global_em"):
        _policy(global_em="yes")


def test_cell_rows_grow_and_keep_their_sums():
    """CellRows: rows keep their sums while the arrays grow past their first capacity, one by one or many at
    once; an absent key has row -1; clear forgets every row."""
    from tailor.policies.tailor import CellRows

    table = CellRows(2, 3)
    for k in range(40):  # one by one, past the initial 16 rows
        i = table.row(("c", k))
        table.data[:, i, k % 3] += k
    rows = table.rows([("c", 5), ("d", 1), ("c", 39), ("d", 2)] + [("e", k) for k in range(30)])
    assert rows[:4].tolist() == [5, 40, 39, 41]
    table.data[1, rows] += 1.0
    assert len(table) == 72 and table.find([("c", 7), ("zz",)]).tolist() == [7, -1]
    assert table[("c", 7)][0].tolist() == [0.0, 7.0, 0.0]
    assert table[("c", 5)][1].tolist() == [1.0, 1.0, 6.0]
    assert table[("e", 29)][1].tolist() == [1.0, 1.0, 1.0]
    table.clear()
    assert len(table) == 0 and table.find([("c", 5)]).tolist() == [-1]


def test_tables_probe_only_what_the_slack_pays_and_guardrail_service_is_not_charged():
    """In table mode the probes are in the table: a cell's probe with probability explore_share next to its main
    choice, only when the group's slack pays for what edges will draw until the next plan; none without slack.
    Page loads a guardrail served (arm "served") are not the policy's decisions: they leave the budget alone."""
    from tailor.grouping import PrefixArchive
    from tailor.policies import Decision

    space = ConfigSpace.named("core")
    archive = PrefixArchive(0.3)
    for k, p in enumerate(POPULATIONS.values()):
        for net in range(8):
            archive.update(f"10.{k}.{net}.0/24", 0.0, p["goodput"], p["loss"], p["rtt"])
    pol = make_policy("tailor", seed=7, explore_share=0.1)
    pol.reset(space, PolicyEnv(websites=SITES, update_period_s=300.0, archive=archive))
    rng = np.random.default_rng(31)
    _run(pol, space, rng, 1200, _slowdowns(pol, space, np.full(len(space), 1.0)), plan_every=400)
    pol.plan(1200.0, compile=False)

    def probed(slack: float, in_loads: float | None = None) -> list[dict]:  # time slack (ms), page-load slack
        pol._slack = dict.fromkeys(pol._slack, slack)
        pol._slack_n = dict.fromkeys(pol._slack, slack if in_loads is None else in_loads)
        groups = pol.table_groups()
        pol.table_rules()
        return [g for g in groups.values() if len(g) > 1]

    assert probed(0.0) == []
    assert probed(1e9, 0.0) == []  # budget_unit='both' (the default): the slack in page loads must pay too
    rich = probed(1e9)
    assert rich and all(sorted(g.values()) == pytest.approx([0.1, 0.9]) for g in rich)
    # a slow non-baseline configuration a guardrail served is not charged
    slack, slack_n, times = dict(pol._slack), dict(pol._slack_n), dict(pol._times)
    _, ctx = next(_contexts(rng, 1, t0=1300.0))
    slow = next(c for c in range(len(space)) if c != pol.baseline_index)
    pol.observe(ctx, Decision(slow, 1.0, "g", "served"), Outcome(50_000.0, 1.0, 300.0, 0.0, 100_000))
    assert pol._slack == slack and pol._slack_n == slack_n and pol._times == times
    pol.observe(ctx, Decision(slow, 1.0, "g", "table"), Outcome(50_000.0, 1.0, 300.0, 0.0, 100_000))
    assert pol._slack[pol.budget_group(ctx)] < slack[pol.budget_group(ctx)]
    assert pol._slack_n[pol.budget_group(ctx)] < slack_n[pol.budget_group(ctx)]


def test_default_guard_leaves_a_baseline_that_is_slower_than_the_default():
    """Where the baseline (cdn-static) is 25% slower than the registry default, the guard moves the page loads off
    it (the evaluation's "degraded": > 5% slower than the default), within the budget; without the guard the
    policy keeps most of them there. Elsewhere the default is 30% slower and the guard leaves the baseline alone."""
    def run(guard):
        pol, space = _policy(guard=guard)
        rng = np.random.default_rng(11)
        d = space.default_index
        slow = _slowdowns(pol, space, np.full(len(space), 1.3))
        slow[d] = 0.8
        fast = _slowdowns(pol, space, np.full(len(space), 1.3))
        degraded = {"slow": [0, 0], "fast": [0, 0]}
        mine, ref = {}, {}
        for k, (pop, ctx) in enumerate(_contexts(rng, 6000)):
            if k and k % 300 == 0:
                pol.plan(ctx.time_s, compile=False)
            dec = pol.select(ctx)
            truth = slow if pop == "slow" else fast
            noise = POPULATIONS[pop]["base_ms"] * (1.0 + 0.3 * rng.gamma(4.0, 1.0))
            y = noise * truth[dec.config]
            pol.observe(ctx, dec, Outcome(y, 10.0, ctx.handshake_rtt_ms, 0.0, 100_000))
            g = pol.budget_group(ctx)
            mine[g], ref[g] = mine.get(g, 0.0) + y, ref.get(g, 0.0) + noise
            assert mine[g] <= 1.01 * ref[g] + 1e-6, f"budget of group {g} violated"
            if k >= 3000:
                degraded[pop][0] += truth[dec.config] > 1.05 * truth[d]
                degraded[pop][1] += 1
        return {p: a / b for p, (a, b) in degraded.items()}

    off, on = run("off"), run(1.0)
    assert off["slow"] > 0.5, off  # the test can fail: without the guard the baseline stays
    assert on["slow"] < 0.2, on
    assert on["fast"] == 0.0


def test_guard_base_tests_the_baseline_on_the_defaults_mean_not_its_unmeasured_sd():
    """``guard_base`` z: the baseline's own guard test at its own z. With an unmeasured registry default (mean 0,
    wide sd) the guard at 'same' (z 1) rules the baseline out on the sd alone; at 0 it keeps it, and rules it out
    once the default is expected more than 5% faster than it. Other configurations keep ``guard``'s test."""
    same, space = _policy()
    zero, _ = _policy(guard_base=0)
    b, d = same.baseline_index, space.default_index
    other = next(c for c in range(len(space)) if c not in (b, d))
    mean, sd = np.zeros(len(space)), np.full(len(space), 0.3)
    sd[b] = 0.0
    _, ok_same, _ = same._bounds(mean, sd)
    _, ok_zero, _ = zero._bounds(mean, sd)
    assert not ok_same[b] and ok_zero[b]
    assert ok_same[other] == ok_zero[other] and not ok_zero[other]  # the rest: guard's z 1, as before
    mean[d] = -0.1  # the default expected 10% faster than the baseline
    _, ok_zero, _ = zero._bounds(mean, sd)
    assert not ok_zero[b] and ok_zero[d]
    with pytest.raises(Exception, match="guard_base"):
        _policy(guard_base=-1)


def test_probe_center_default_reaches_the_registry_default_however_many_knobs_away():
    """``probe_center='default'``: wherever the registry default (three knobs from BBR IW 32 HTTP/2) is a plausible
    probe it is the probe, even where a one-knob neighbour's optimistic bound is lower; with 'both' the neighbour
    is. Where its optimistic bound cannot beat the safe choice it is not probed either way."""
    both, space = _policy()
    dflt, _ = _policy(probe_center="default")
    b, d = both.baseline_index, space.default_index
    assert not both._near[b][d]  # the default is not one knob from the baseline
    mean, sd = np.full(len(space), 0.05), np.full(len(space), 0.1)
    mean[b], sd[b] = 0.0, 0.0
    mean[d], sd[d] = 0.15, 0.35  # unmeasured, rated slower: plausible (optimistic bound -0.20)
    other = int(np.flatnonzero(both._near[b])[0])
    mean[other], sd[other] = -0.1, 0.2  # a neighbour with a lower optimistic bound (-0.30)
    for pol in (both, dflt):
        ucb, _, near = pol._bounds(mean, sd)
        near[:] = True
        got = pol._probe_of(CELL0, mean, sd, ucb, b, near, b)
        assert got == (d if pol is dflt else other)
    sd[d] = 0.05  # measured now: 15% slower, it cannot beat the baseline
    ucb, _, near = dflt._bounds(mean, sd)
    near[:] = True
    assert dflt._probe_of(CELL0, mean, sd, ucb, b, near, b) != d
    with pytest.raises(Exception, match="probe_center"):
        _policy(probe_center="anywhere")


def test_probe_center_suspect_probes_the_default_only_where_the_baseline_is_expected_degraded():
    """``probe_center='suspect'``: the registry default is the probe only where the posterior mean puts the baseline
    more than 5% slower than it; elsewhere the probe is 'both''s."""
    both, space = _policy()
    sus, _ = _policy(probe_center="suspect")
    b, d = both.baseline_index, space.default_index
    mean, sd = np.full(len(space), 0.05), np.full(len(space), 0.1)
    mean[b], sd[b] = 0.0, 0.0
    other = int(np.flatnonzero(both._near[b])[0])
    mean[other], sd[other] = -0.1, 0.2  # a neighbour with the lowest optimistic bound (-0.30)
    picks = {}
    for name, d_mean in (("fine", 0.02), ("suspect", -0.08)):  # the default 2% slower / 8% faster than the baseline
        m = mean.copy()
        m[d], sd[d] = d_mean, 0.35  # plausible either way
        for pol in (both, sus):
            ucb, _, near = pol._bounds(m, sd)
            near[:] = True
            picks[name, pol is sus] = pol._probe_of(CELL0, m, sd, ucb, b, near, b)
    assert picks["fine", False] == picks["fine", True] == picks["suspect", False] == other
    assert picks["suspect", True] == d


def test_tcp_only_telemetry_reaches_edges_without_sni_or_device():
    """The manager's view of tailor-agent's connections: no SNI, no device, no website list. What the policy learns
    for them must be in the table under rules real edges match (no ``sni``, no ``device`` key): a table keyed
    only by known websites and devices would leave every such connection on the catch-all baseline."""
    from tailor.grouping import PrefixArchive
    from tailor.table import compile_table
    from tailor.table.decide import DecisionTable

    space = ConfigSpace.named("core")
    archive = PrefixArchive(0.3)
    p = POPULATIONS["slow"]
    prefixes = [f"10.9.{net}.0/24" for net in range(4)]
    for prefix in prefixes:
        archive.update(prefix, 0.0, p["goodput"], p["loss"], p["rtt"])
    pol = make_policy("tailor", seed=7, alpha=0.05)
    pol.reset(space, PolicyEnv(websites=(), update_period_s=300.0, archive=archive))
    good = _one_knob(pol, space, "tcp.congestion_control", "cubic")
    rng = np.random.default_rng(13)
    for i in range(6000):
        if i and i % 300 == 0:
            pol.plan(float(i), compile=False)
        prefix = prefixes[i % len(prefixes)]
        client = ClientInfo(prefix.replace(".0/24", ".7"), prefix, 0, "", "", "")
        history = PrefixHistory(p["goodput"] * rng.uniform(0.9, 1.1), p["loss"], p["rtt"], 10, 30.0)
        ctx = Context(float(i), f"s{i}", client, "", p["rtt"] * rng.uniform(1.0, 1.1), history, 0)
        d = pol.select(ctx)
        y = p["base_ms"] * (0.7 if d.config == good else 1.0) * (1.0 + 0.1 * rng.standard_normal() ** 2)
        pol.observe(ctx, d, Outcome(y, 10.0, ctx.handshake_rtt_ms, 0.0, 100_000))
    table = compile_table(pol, 6000.0, 1, archive)
    edge_rules = [r for r in table["rules"] if r["prefix"] in prefixes and "sni" not in r and "device" not in r]
    assert sorted(r["prefix"] for r in edge_rules) == prefixes
    choices = {g["id"]: max(g["choices"], key=lambda c: c["p"])["config"] for g in table["groups"]}
    main = [choices[DecisionTable(table, validated=True).group_of(prefix.replace(".0/24", ".7"))] for prefix in prefixes]
    assert main == [space.configs[good].id] * len(prefixes), \
        f"the learned 30% faster configuration does not reach connections without SNI or device: {main}"


def test_a_table_serves_every_connection_its_own_groups_choices():
    """An edge takes the most specific rule that matches a connection. A (website, device) cell whose group gives the
    baseline must keep its connections off a less specific rule of the same prefix whose group departs from it:
    here a configuration 40% faster on desktops is 50% slower on Android phones, so the (website, any device) group
    plays it and the (website, android) group stays on the baseline. Until 2026-12-06 the baseline group had no rule
    and an Android connection was served the departure (found by review: ``_table`` wrote rules for departing groups
    only). Every (prefix, website, device) the table covers is resolved by ``decide`` to its own group's choices."""
    from tailor.grouping import PrefixArchive
    from tailor.grouping.classes import DEVICES
    from tailor.table import compile_table
    from tailor.table.decide import DecisionTable, decide

    space = ConfigSpace.named("core")
    archive = PrefixArchive(0.3)
    rtt, goodput, loss, site = 300.0, 1.5, 0.02, "shop.example"
    prefixes = [f"10.9.{net}.0/24" for net in range(4)]
    for prefix in prefixes:
        archive.update(prefix, 0.0, goodput, loss, rtt)
    # budget_z 1: the departures paid at the bound that admits them (the table's rules are under test here, not the
    # budget; at the default 3, since the safe choice is free only within its 3-sd bound (2026-12-07), this small
    # world has no departing (website, any) group)
    pol = make_policy("tailor", seed=7, alpha=0.05, budget_z=1.0)
    pol.reset(space, PolicyEnv(websites=(site,), update_period_s=300.0, archive=archive))
    good = _one_knob(pol, space, "tcp.congestion_control", "cubic")
    rng = np.random.default_rng(13)
    for i in range(6000):
        if i and i % 300 == 0:
            pol.plan(float(i), compile=False)
        prefix = prefixes[i % len(prefixes)]
        device = "android" if rng.random() < 0.35 else "desktop"
        client = ClientInfo(prefix.replace(".0/24", f".{2 + i % 200}"), prefix, 0, "", device, "")
        history = PrefixHistory(goodput * rng.uniform(0.95, 1.05), loss, rtt, 10, 30.0)
        ctx = Context(float(i), f"s{i}", client, site, rtt * rng.uniform(1.0, 1.05), history, 0)
        d = pol.select(ctx)
        if d.config == pol.baseline_index:
            factor = 1.0
        elif d.config == good:
            factor = 0.6 if device == "desktop" else 1.5
        else:
            factor = 1.5 if device == "android" else 1.2
        pol.observe(ctx, d, Outcome(6000.0 * factor * (1.0 + 0.1 * rng.standard_normal() ** 2), 10.0,
                                    ctx.handshake_rtt_ms, 0.0, 100_000))
    pol.plan(6000.0, compile=False)
    table = compile_table(pol, 6000.0, 1, archive)
    resolver = DecisionTable(table, validated=True)
    choices = {g["id"]: {c["config"]: round(c["p"], 9) for c in g["choices"]} for g in table["groups"]}
    base = {space.configs[pol.baseline_index].id: 1.0}
    checked = stays = 0
    for prefix in prefixes:
        addr = prefix.replace(".0/24", ".77")
        for device in (*DEVICES, ""):
            client = ClientInfo(addr, prefix, 0, "", device, "")
            ctx = Context(6001.0, "probe", client, site, rtt, archive.get(prefix, 6000.0), 0)
            own = choices[pol.group_of(ctx)]
            served = decide(resolver, addr, site, device or None, draw=0)
            assert choices[served.group] == own, (prefix, device, served.group, pol.group_of(ctx))
            checked += 1
            stays += own == base and choices[resolver.group_of(addr, site)] != base
    assert checked == len(prefixes) * (len(DEVICES) + 1)
    assert stays >= len(prefixes), "the world must have baseline cells under a departing (website, any) group"


@pytest.mark.parametrize("center", ["safe", "both"])
def test_local_probes_may_step_from_the_lowest_mean_when_asked(center):
    """``probe='local'`` keeps a probe one knob from the safe choice; with ``probe_center='both'`` also one knob
    from the configuration with the lowest mean, so a two-knob configuration next to a promising one is reachable."""
    pol, space = _policy(probe_center=center)
    base = pol.baseline_index
    good = _one_knob(pol, space, "tcp.initial_cwnd", 64)  # one knob from the baseline, the lowest mean
    ref = space.configs[good]
    two = space.index_of(next(c for c in space.configs if c["tcp.rto_min_ms"] != ref["tcp.rto_min_ms"]
                              and all(c[k] == ref[k] for k in space.grid if k != "tcp.rto_min_ms")))
    assert pol._near[good, two] and not pol._near[base, two]
    mean, sd = np.full(len(space), 0.5), np.full(len(space), 0.05)  # the rest: LCB 0.45, not plausible
    mean[base] = sd[base] = 0.0
    mean[good], sd[good] = -0.03, 0.1  # UCB +0.07: the baseline stays the safe choice; LCB -0.13
    mean[two], sd[two] = 0.0, 0.2  # LCB -0.2: the most promising probe, two knobs from the safe choice
    ucb, _, near = pol._bounds(mean, sd)
    near[:] = True  # the default guard is not what this test is about
    safe = int(np.argmin(ucb))
    assert safe == base and int(np.argmin(mean)) == good
    probe = pol._probe_of(CELL0, mean, sd, ucb, safe, near, good)
    assert probe == (two if center == "both" else good)


def test_probe_margin_keeps_probes_expected_slower_than_the_default_out():
    """A probe's posterior mean may lie up to ``probe_margin`` above the registry default's: 3% above is a probe
    with the default 0.05, not with 0; the safe and greedy choices' guard is not changed by it."""
    for margin, allowed in ((0.05, True), (0.0, False)):
        pol, space = _policy(probe_margin=margin)
        d = space.default_index
        other = next(i for i in range(len(space)) if i not in (d, pol.baseline_index))
        mean, sd = np.zeros(len(space)), np.full(len(space), 0.1)
        mean[other] = mean[d] + math.log(1.03)
        _, ok, near = pol._bounds(mean, sd)
        assert bool(near[other]) is allowed and near[d]
        assert not ok[other]  # 3% above with sd 0.1 is plausibly more than 5% slower, at either margin


def test_probe_sd_leaves_out_probes_far_less_known_than_the_recent_ones():
    """``probe_sd`` = r: once ``PROBE_SD_WINDOW`` probes have been played, a configuration whose sd is above r times
    their median sd is no longer a probe; before that (the cold start, every sd at the prior's) there is no bound."""
    from tailor.policies.tailor import PROBE_SD_WINDOW
    pol, space = _policy(probe_sd=1.5, probe="optimistic")
    base = pol.baseline_index
    wide, narrow = [i for i in range(len(space)) if i != base][:2]
    mean, sd = np.full(len(space), 0.5), np.full(len(space), 0.05)  # the rest: not plausible
    mean[base] = sd[base] = 0.0
    mean[wide], sd[wide] = 0.0, 0.3  # LCB -0.3: the most optimistic
    mean[narrow], sd[narrow] = -0.02, 0.1  # LCB -0.12
    ucb, _, near = pol._bounds(mean, sd)
    near[:] = True
    assert pol._probe_of(CELL0, mean, sd, ucb, base, near, base) == wide  # no bound yet
    for _ in range(PROBE_SD_WINDOW - 1):
        pol._probe_played(0.1)
    assert pol._probe_of(CELL0, mean, sd, ucb, base, near, base) == wide  # the window is not full yet
    pol._probe_played(0.1)
    assert pol._probe_of(CELL0, mean, sd, ucb, base, near, base) == narrow  # 0.3 > 1.5 x 0.1
    off, _ = _policy(probe="optimistic", probe_sd="off")
    for _ in range(PROBE_SD_WINDOW):
        off._probe_played(0.1)
    assert off._probe_of(CELL0, mean, sd, ucb, base, near, base) == wide  # 'off': never a bound


def test_greedy_z_discounts_a_low_mean_that_rests_on_a_wide_posterior():
    """The greedy choice is the lowest ``mean + greedy_z * sd`` among the configurations the guard allows: at 0 the
    lowest mean (however uncertain), at 1 a slightly higher mean known well wins; the guard's exclusions hold."""
    pol, _ = _policy()
    mean, sd = np.array([0.0, -0.30, -0.25, -0.50]), np.array([0.0, 0.30, 0.05, 0.01])
    ok = np.array([True, True, True, False])
    assert pol._greedy(mean, sd, ok) == 1
    pol, _ = _policy(greedy_z=1.0)
    assert pol._greedy(mean, sd, ok) == 2
    with pytest.raises(Exception, match="greedy_z"):
        _policy(greedy_z=-1.0)


def test_greedy_own_waits_for_the_cells_own_page_loads():
    """``greedy_own`` k: the configuration with the lowest mean becomes the greedy choice only once the context's
    level cell (every hour bin) has played it k times and, where the safe choice has k page loads there too, its own
    mean log time is below the safe choice's; 0 never asks."""
    pol, _ = _policy(greedy_own=2)
    cell = ("site", "desktop", 2, 3, 0, 1)
    assert not pol._confirmed(cell, 1, 0)  # a cell never seen
    row = pol._own().row(cell[:5])
    n, total = pol._own().used()[:, row]
    n[1], total[1] = 1.0, math.log(900.0)
    assert not pol._confirmed(cell, 1, 0) and not pol._confirmed(cell, 2, 0)
    n[1], total[1] = 2.0, 2 * math.log(900.0)
    assert pol._confirmed(cell, 1, 0) and pol._confirmed(cell[:5] + (3,), 1, 0)  # every hour bin
    n[0], total[0] = 2.0, 2 * math.log(1000.0)  # the safe choice's own page loads: slower, confirmed
    assert pol._confirmed(cell, 1, 0)
    total[0] = 2 * math.log(800.0)  # faster: not confirmed
    assert not pol._confirmed(cell, 1, 0) and not pol._confirmed(cell, 2, 0)
    assert _policy()[0]._confirmed(cell, 2, 0)
    with pytest.raises(Exception, match="greedy_own"):
        _policy(greedy_own=-1)


def test_greedy_reach_played_keeps_exploitation_one_knob_from_what_the_cell_played():
    """``greedy_reach='played'``: a configuration two knobs or more from the baseline may be exploited only once the
    context's level cell has played it or a one-knob neighbour of it; until then the greedy choice is the best one
    within reach. 'any' exploits the lowest mean wherever it is."""
    pol, space = _policy(greedy_reach="played")
    anyw, _ = _policy()
    b = pol.baseline_index
    two = (pol._near[b][:, None] & pol._near).any(axis=0) & ~pol._near[b]  # two knobs from the baseline
    two[b] = False
    far = int(np.flatnonzero(two)[0])
    mid = int(np.flatnonzero(pol._near[b] & pol._near[far])[0])  # one knob from both
    near_b = int(np.flatnonzero(pol._near[b] & ~pol._near[far])[0])  # one knob from the baseline only
    mean, sd = np.zeros(len(space)), np.full(len(space), 0.1)
    mean[far], mean[near_b] = -0.3, -0.1
    ok = np.ones(len(space), dtype=bool)
    cell = ("site", "desktop", 2, 3, 0, 1)
    assert anyw._exploit_of(cell, mean, sd, ok, far) == far
    assert pol._exploit_of(cell, mean, sd, ok, far) == near_b  # a cell never seen: within one knob of the baseline
    row = pol._own().row(cell[:5])
    n, _ = pol._own().used()[:, row]
    n[mid] = 1.0  # a neighbour of the far configuration played: it is within reach
    assert pol._exploit_of(cell, mean, sd, ok, far) == far
    n[mid] = 0.0
    n[far] = 1.0  # played itself
    assert pol._exploit_of(cell, mean, sd, ok, far) == far
    n[far] = 0.0
    ok[:] = False
    ok[far] = True  # nothing the guard allows within reach: the baseline
    assert pol._exploit_of(cell, mean, sd, ok, far) == b
    with pytest.raises(Exception, match="greedy_reach"):
        _policy(greedy_reach="near")


def test_greedy_check_measures_how_much_slower_than_predicted_the_departures_were():
    """``greedy_check='on'``: a group whose non-probe departures came out 20% slower than predicted, where the
    baseline's page loads came out as predicted, adds that excess (less two standard errors) to the greedy choice's
    mean; nothing until both sides have 10 page loads, nothing when the departures were as predicted, nothing with
    'off'. Probes and a table's probe are not departures; a table's main choice is."""
    pol, _ = _policy(greedy_check="on")
    rng = np.random.default_rng(3)
    g = "g"
    base_err, dep_err = rng.normal(0.0, 0.1, 40), rng.normal(0.2, 0.1, 40)
    pol._sel_add(g, np.zeros(9, bool), np.ones(9, bool), base_err[:9], np.zeros(9, int))
    pol._sel_add(g, np.ones(9, bool), np.zeros(9, bool), dep_err[:9], np.zeros(9, int))
    assert pol._optimism(g) == 0.0  # fewer than 10 a side
    pol._sel_add(g, np.zeros(31, bool), np.ones(31, bool), base_err[9:], np.zeros(31, int))
    pol._sel_add(g, np.ones(31, bool), np.zeros(31, bool), dep_err[9:], np.zeros(31, int))
    se = math.sqrt(dep_err.var(ddof=1) / 40 + base_err.var(ddof=1) / 40)
    assert pol._optimism(g) == pytest.approx(dep_err.mean() - base_err.mean() - 2 * se)
    assert 0.1 < pol._optimism(g) < 0.25
    pol._sel_add("h", np.zeros(40, bool), np.ones(40, bool), base_err, np.zeros(40, int))
    pol._sel_add("h", np.ones(40, bool), np.zeros(40, bool), rng.normal(0.0, 0.1, 40), np.zeros(40, int))
    assert pol._optimism("h") == 0.0
    off, _ = _policy()
    off._sel = pol._sel
    assert off._optimism(g) == 0.0
    other = (pol.baseline_index + 1) % len(pol.space)
    assert pol._departure(Decision(other, 1.0, g, "exploit")) and pol._departure(Decision(other, 1.0, g, "guard"))
    assert not pol._departure(Decision(other, 1.0, g, "explore"))
    assert not pol._departure(Decision(pol.baseline_index, 1.0, g, "exploit"))
    assert pol._departure(Decision(other, 0.9, g, "table")) and not pol._departure(Decision(other, 0.1, g, "table"))
    mean = np.linspace(-0.2, 0.2, len(pol.space))
    assert pol._charged(mean, g) == (mean, pol._optimism(g)) and off._charged(mean, g) == (mean, 0.0)
    sh, _ = _policy(greedy_check="shift")
    sh._sel = pol._sel
    shifted, charge = sh._charged(mean, g)
    d = sh._optimism(g)
    assert charge == 0.0 and d > 0.1 and shifted[sh.baseline_index] == mean[sh.baseline_index]
    assert np.allclose(np.delete(shifted - mean, sh.baseline_index), d)
    with pytest.raises(Exception, match="greedy_check"):
        _policy(greedy_check="yes")


def test_greedy_check_config_charges_each_configuration_its_own_excess():
    """``greedy_check='config'``: a configuration whose departures came out 30% slower than predicted is charged
    nearly that; one whose departures came out as predicted nearly nothing; one never served as a departure the
    group's excess; the baseline never. Each is shrunk towards the group's excess by CHECK_PRIOR pseudo page loads."""
    from tailor.policies.tailor import CHECK_PRIOR

    pol, _ = _policy(greedy_check="config")
    g, base = "g", pol.baseline_index
    bad, good, never = [(base + k) % len(pol.space) for k in (1, 2, 3)]
    rng = np.random.default_rng(5)
    pol._sel_add(g, np.zeros(200, bool), np.ones(200, bool), rng.normal(0.0, 0.05, 200), np.full(200, base))
    mean = np.zeros(len(pol.space))
    assert np.array_equal(pol._charged(mean, g)[0], mean)  # no departures yet
    pol._sel_add(g, np.ones(200, bool), np.zeros(200, bool), rng.normal(0.3, 0.05, 200), np.full(200, bad))
    pol._sel_add(g, np.ones(200, bool), np.zeros(200, bool), rng.normal(0.0, 0.05, 200), np.full(200, good))
    d = pol._optimism(g)
    assert 0.1 < d < 0.2  # the group's: half its departures were optimistic
    charged, charge = pol._charged(mean, g)
    assert charge == 0.0 and charged[base] == 0.0
    assert 0.25 < charged[bad] < 0.3 and 0.0 <= charged[good] < 0.03
    assert charged[never] == pytest.approx(d)
    mb = pol._sel[g][4] / pol._sel[g][3]
    c = pol._sel_c[g]
    assert charged[bad] == pytest.approx((c[1][bad] - c[0][bad] * mb + CHECK_PRIOR * d) / (c[0][bad] + CHECK_PRIOR))
    own, _ = _policy(greedy_check="own")  # shrunk towards 0: the never-served configuration is not charged
    own._sel, own._sel_c = pol._sel, pol._sel_c
    charged = own._charged(mean, g)[0]
    assert charged[never] == 0.0 and charged[base] == 0.0 and 0.25 < charged[bad] < 0.3
    assert charged[bad] == pytest.approx((c[1][bad] - c[0][bad] * mb) / (c[0][bad] + CHECK_PRIOR))


def test_probe_value_kg_stops_probing_where_little_can_be_learned():
    """A probe expected 10% slower than the greedy choice: with a wide posterior one page load may reveal it
    faster, worth it for a group with many page loads; once its posterior is narrow, one more page load moves the
    best mean too little to pay for its expected cost. A probe expected faster is always worth it; 'any' never asks."""
    pol, _ = _policy(probe_value="kg")
    pol._gss["g"] = (0.04 * 1000, 1000)  # the group's noise variance about 0.04 (sd 0.2 in log time)
    mean, best, probe = np.array([0.0, -0.10, 0.0]), 1, 2
    assert pol._worth(mean, np.array([0.0, 0.01, 0.30]), probe, best, "g", 1000)
    assert not pol._worth(mean, np.array([0.0, 0.01, 0.02]), probe, best, "g", 1000)
    assert not pol._worth(mean, np.array([0.0, 0.01, 0.30]), probe, best, "g", 1)  # a group of one page load
    assert pol._worth(np.array([0.0, -0.10, -0.12]), np.array([0.0, 0.01, 0.02]), probe, best, "g", 1)
    assert _policy()[0]._worth(mean, np.array([0.0, 0.01, 0.02]), probe, best, "g", 1)


def test_probe_value_kg_cell_prices_a_probe_over_the_cells_own_page_loads():
    """'kg_cell': the horizon is the context cell's page loads (its level cell, every hour), not the group's: a
    probe that a group of 1,000 page loads would pay for is refused in a cell that has seen one, and the group's
    count is what 'kg' keeps using."""
    pol, _ = _policy(probe_value="kg_cell")
    cell = ("site", "desktop", 2, 3, 0, 1)
    assert pol._horizon(cell, 1000) == 0.0  # a cell never seen
    row = pol._stats.row(cell[:5])
    pol._stats.used()[0, row, :2] = (1.0, 0.0)
    assert pol._horizon(cell, 1000) == 1.0 and pol._horizon(cell[:5] + (3,), 1000) == 1.0  # every hour bin
    pol._gss["g"] = (0.04 * 1000, 1000)
    mean, sd, best, probe = np.array([0.0, -0.10, 0.0]), np.array([0.0, 0.01, 0.30]), 1, 2
    assert pol._worth(mean, sd, probe, best, "g", 1000) and not pol._worth(mean, sd, probe, best, "g",
                                                                           pol._horizon(cell, 1000))
    assert _policy(probe_value="kg")[0]._horizon(cell, 1000) == 1000


def test_audit_closes_a_group_whose_departures_did_not_pay():
    """``audit``: a group whose departures came out 5% slower than the page loads held out from them (log time net
    of the baseline level) is closed, one whose departures were 5% faster is not; nothing before both sides have
    AUDIT_MIN page loads while there is no pooled estimate; a group with little evidence follows the pooled gain
    (shrunk by AUDIT_PRIOR pseudo page loads); the evidence halves every AUDIT_HALFLIFE page loads; 'off' never
    closes."""
    from tailor.policies.tailor import AUDIT_HALFLIFE, AUDIT_MIN, AUDIT_PRIOR

    pol, _ = _policy(audit=0.1)
    rng = np.random.default_rng(8)
    n = int(AUDIT_MIN)
    held, slow, fast = rng.normal(0.0, 0.1, 400), rng.normal(0.05, 0.1, 400), rng.normal(-0.05, 0.1, 400)
    yes, no = np.ones(n - 1, bool), np.zeros(n - 1, bool)
    pol._audit_add("bad", yes, no, slow[: n - 1])
    pol._audit_add("bad", no, yes, held[: n - 1])
    assert pol._audit_gain("bad") is None and not pol._audit_closed("bad")  # fewer than AUDIT_MIN a side
    for g, dep in (("bad", slow), ("good", fast)):
        pol._audit.pop(g, None)
        pol._audit_add(g, np.ones(400, bool), np.zeros(400, bool), dep)
        pol._audit_add(g, np.zeros(400, bool), np.ones(400, bool), held)
    assert pol._audit_closed("bad") and not pol._audit_closed("good")
    assert pol._audit_gain("bad") == pytest.approx(-0.05, abs=0.03)
    off, _ = _policy()
    off._audit = pol._audit
    assert not off._audit_closed("bad")
    # the pooled estimate: computed at plan from every group's sums, it carries a group with little evidence
    pol._audit_add("new", np.ones(5, bool), np.zeros(5, bool), np.full(5, 0.3))
    pol._audit_add("new", np.zeros(5, bool), np.ones(5, bool), np.zeros(5))
    pol.plan(600.0, compile=False)
    world, weight, se = pol._audit_world
    assert 0.0 < se < 0.02
    assert world == pytest.approx(0.0, abs=0.02) and weight > 100
    a = pol._audit["new"]
    w = 1.0 / (1.0 / a[0] + 1.0 / a[3])
    assert pol._audit_gain("new") == pytest.approx((w * (a[4] / a[3] - a[1] / a[0]) + AUDIT_PRIOR * world)
                                                   / (w + AUDIT_PRIOR))
    pol._audit_world = (0.1, 1000.0, 0.01)
    assert not pol._audit_closed("new") and pol._audit_closed("bad")  # 5 page loads do not outweigh the pool
    before = pol._audit["good"].copy()
    pol._audit_add("good", np.zeros(int(AUDIT_HALFLIFE), bool), np.zeros(int(AUDIT_HALFLIFE), bool),
                   np.zeros(int(AUDIT_HALFLIFE)))
    np.testing.assert_allclose(pol._audit["good"], before / 2)
    # held out at the full share while the evidence is thin, a quarter of it where the group's gain is shown
    from tailor.policies.tailor import AUDIT_SETTLED

    assert pol._audit_share("bad") == 0.1 and pol._audit_share("new") == 0.1 and pol._audit_share("nobody") == 0.1
    assert pol._audit_share("good") == pytest.approx(0.1 * AUDIT_SETTLED)
    with pytest.raises(Exception, match="audit"):
        _policy(audit=0.9)


def test_audit_holds_departures_out_at_its_share_and_returns_their_reservation():
    """``audit`` h: a departure (greedy, safe or guard choice) is served as chosen with probability 1 - h, else the
    baseline (arm 'audit', probability h), its reservation back in the group's slack; in a closed group the
    baseline (arm 'default'); a table's baseline drawn with probability below one half is a held-out page load."""
    from tailor.policies.tailor import _key

    pol, space = _policy(audit=0.1)
    base, other = pol.baseline_index, (pol.baseline_index + 1) % len(space)
    ctx = next(_contexts(np.random.default_rng(1), 1))[1]
    arms = []
    for _ in range(2000):
        pol._reserved[_key(ctx)], pol._slack["g"] = ("g", 5.0), 0.0
        d = pol._audited(ctx, "g", Decision(other, 1.0, "gid", "exploit"))
        arms.append(d.arm)
        if d.arm == "audit":
            assert d.config == base and d.probability == 0.1 and pol._slack["g"] == 5.0
            assert pol._held(d) and not pol._departure(d) and _key(ctx) not in pol._reserved
        else:
            assert d.config == other and d.probability == pytest.approx(0.9) and pol._slack["g"] == 0.0
            assert pol._departure(d) and not pol._held(d)
    assert 0.07 < arms.count("audit") / len(arms) < 0.13
    pol._audit["g"] = np.array([100.0, 10.0, 2.0, 100.0, 0.0, 1.0])  # departures 10% slower than held out
    d = pol._audited(ctx, "g", Decision(other, 1.0, "gid", "guard"))
    assert (d.config, d.probability, d.arm) == (base, 1.0, "default")
    assert pol._held(Decision(base, 0.09, "gid", "table")) and not pol._held(Decision(base, 0.9, "gid", "table"))
    assert not pol._held(Decision(base, 1.0, "gid", "default"))
    off, _ = _policy()
    assert off._audited(ctx, "g", Decision(other, 1.0, "gid", "exploit")) == Decision(other, 1.0, "gid", "exploit")


def test_audit_pool_scope_decides_every_group_on_the_pooled_gain_and_keeps_a_trickle():
    """``audit_scope='pool'``: every group follows the pooled gain alone (a group's own evidence, however strong,
    does not decide); closed, a departure is still served with probability AUDIT_SETTLED x audit (its arm and
    probability logged) and the baseline otherwise (arm 'audit': a held-out page load), so that the evidence can
    reopen it; open, held out at the full share until the pooled gain is above 0 by two standard errors."""
    from tailor.policies.tailor import AUDIT_SETTLED, _key

    pol, space = _policy(audit=0.1, audit_scope="pool")
    rng = np.random.default_rng(9)
    held, fast = rng.normal(0.0, 0.1, 400), rng.normal(-0.05, 0.1, 400)
    pol._audit_add("good", np.ones(400, bool), np.zeros(400, bool), fast)
    pol._audit_add("good", np.zeros(400, bool), np.ones(400, bool), held)
    assert pol._audit_gain("good") is None and not pol._audit_closed("good")  # no pooled estimate before plan
    assert pol._audit_share("good") == 0.1
    pol._audit_world = (-0.01, 1000.0, 0.005)  # the pool says the departures lose: every group closes
    assert pol._audit_closed("good") and pol._audit_closed("nobody") and pol._audit_share("good") == 0.1
    base, other = pol.baseline_index, (pol.baseline_index + 1) % len(space)
    ctx = next(_contexts(np.random.default_rng(1), 1))[1]
    arms = []
    for _ in range(4000):
        d = pol._audited(ctx, "g", Decision(other, 1.0, "gid", "guard"))
        arms.append(d.arm)
        if d.arm == "audit":
            assert d.config == base and d.probability == pytest.approx(1.0 - 0.1 * AUDIT_SETTLED) and pol._held(d)
        else:
            assert (d.config, d.arm) == (other, "guard") and d.probability == pytest.approx(0.1 * AUDIT_SETTLED)
            assert pol._departure(d)
    assert 0.5 * 0.1 * AUDIT_SETTLED < 1.0 - arms.count("audit") / len(arms) < 2.0 * 0.1 * AUDIT_SETTLED
    pol._audit_world = (0.03, 1000.0, 0.01)  # shown to pay: open, held out at the trickle
    assert not pol._audit_closed("good") and pol._audit_share("nobody") == pytest.approx(0.1 * AUDIT_SETTLED)
    pol._audit_world = (0.01, 1000.0, 0.01)  # positive, not shown: the full share
    assert not pol._audit_closed("good") and pol._audit_share("good") == 0.1
    # the pooled triple from plan: every group's sums together
    pol._audit_world = None
    pol.plan(600.0, compile=False)
    gain, weight, se = pol._audit_world
    assert gain == pytest.approx(0.05, abs=0.03) and 150 < weight < 250 and 0.0 < se < 0.02
    assert _key(ctx) not in pol._reserved
    with pytest.raises(Exception, match="audit_scope"):
        _policy(audit=0.1, audit_scope="world")


def test_audit_sums_agree_batch_and_one_by_one():
    """``audit``: the manager's batch fold and the online path fold the same departures and held-out page loads
    into each group's discounted sums (the predictions they are net of differ only by those from before the
    batch)."""
    one, space = _policy(audit=0.1)
    many, _ = _policy(audit=0.1)
    rng = np.random.default_rng(13)
    base = one.baseline_index
    for block in range(4):
        items = _world_items(one, space, rng, 600, t0=block * 600.0)
        # a third departures the policy chose, a tenth of those held out, the rest the logger's exploration
        items = [(ctx, Decision(d.config if k % 30 else base, d.probability, d.group,
                                ("exploit" if d.config != base else "default") if k % 30 else "audit")
                  if k % 3 == 0 else d, o) for k, (ctx, d, o) in enumerate(items)]
        _fold_both(one, many, items, block * 600.0 + 600.0)
    assert one._audit and one._audit.keys() == many._audit.keys()
    for g, a in one._audit.items():
        b = many._audit[g]
        np.testing.assert_allclose(b[[0, 3]], a[[0, 3]], rtol=1e-9)  # the same page loads at the same weights
        assert a[0] > 10 and a[3] > 3
        assert b[1] / b[0] == pytest.approx(a[1] / a[0], abs=0.05)
    assert one._audit_world is not None and many._audit_world is not None


def test_a_tables_probe_is_the_one_select_would_try_around_the_guards_choice():
    """``select`` chooses a cell's probe around the guard's safe choice, among configurations whose optimistic bound
    beats the safe choice's pessimistic one by ``min_gain``, and never the safe choice itself. A table must write that
    probe next to its main choice. Until 2026-12-07 the table centred it on the main choice (the greedy one when it is
    played), so where the greedy choice departs it could write the safe choice as the probe (found by review; in this
    world one of ten probed cells)."""
    from tailor.grouping import PrefixArchive

    space = ConfigSpace.named("core")
    archive = PrefixArchive(0.3)
    for k, p in enumerate(POPULATIONS.values()):
        for net in range(8):
            archive.update(f"10.{k}.{net}.0/24", 0.0, p["goodput"], p["loss"], p["rtt"])
    probed = departs = 0
    # (2, 0.05) since the probes' ties are broken per cell (2026-12-07): the three others have no greedy departure
    for seed, alpha in ((3, 0.01), (3, 0.05), (1, 0.01), (2, 0.05)):
        pol = make_policy("tailor", seed=7, explore_share=0.1, alpha=alpha)
        pol.reset(space, PolicyEnv(websites=SITES, update_period_s=300.0, archive=archive))
        rng = np.random.default_rng(seed)
        _run(pol, space, rng, 3000, _slowdowns(pol, space, np.exp(rng.normal(0.05, 0.12, len(space)))))
        pol.plan(3000.0, compile=False)
        pol._slack = dict.fromkeys(pol._slack, 1e9)  # every probe is paid for
        pol._slack_n = dict.fromkeys(pol._slack, 1e9)
        decided = []

        def record(cell, group, *rest, choose=pol._table_choice, decided=decided):
            out = choose(cell, group, *rest)
            decided.append((cell, group, out))
            return out

        pol._table_choice = record
        pol.table_groups()
        pol.table_rules()
        for cell, group, out in decided:
            if len(out) < 2:
                continue
            mean, sd, _, _ = pol._effects(cell, group)
            mean, _ = pol._charged(mean, pol._check_key(cell, group))
            ucb, ok, near = pol._bounds(mean, sd)
            guard = int(np.argmin(np.where(ok, ucb, np.inf)))
            main, probe = max(out, key=out.get), min(out, key=out.get)
            assert probe != guard and near[probe], (alpha, cell, main, guard, probe)
            assert mean[probe] - pol.explore_beta * sd[probe] < ucb[guard] - pol.min_gain
            probed += 1
            departs += main != guard
    assert probed >= 10 and departs >= 1


def test_a_departure_outside_its_budget_bound_is_paid_for_before_it_is_played():
    """Every page load ``select`` sends off the baseline outside the probes is either free (its budget bound,
    ``budget_z`` sd, within alpha of the baseline: its realised term cannot lower the slack) or has its pessimistic
    cost reserved. Until 2026-12-07 a safe choice whose 1-sd bound was at or below the baseline's was played
    free and then charged at 3 sd, which took groups' slack below 0 unchecked (found by review; in this world a
    one-knob change is 7% faster and every other configuration 10-120% slower)."""
    from tailor.policies.tailor import _key

    pol, space = _policy()
    rng = np.random.default_rng(5)
    slow = _slowdowns(pol, space, 1.1 + 1.1 * rng.random(len(space)))
    ref = space.configs[pol.baseline_index]
    iw = [v for v in space.grid["tcp.initial_cwnd"] if v != ref["tcp.initial_cwnd"]][0]
    slow[_one_knob(pol, space, "tcp.initial_cwnd", iw)] = 0.93
    departures = unpaid = 0
    for k, (pop, ctx) in enumerate(_contexts(rng, 6000)):
        if k and k % 300 == 0:
            pol.plan(ctx.time_s, compile=False)
        d = pol.select(ctx)
        if d.config != pol.baseline_index and d.arm != "explore":
            departures += 1
            cell = pol._cell(ctx)
            mean, sd, _, _ = pol._effects(cell, pol._group(cell))
            bound = float(mean[d.config] + pol.budget_z * sd[d.config])
            free = bound <= math.log1p(min(pol.alpha, pol.alpha_loads))  # both realised terms >= 0
            unpaid += not free and _key(ctx) not in pol._reserved
        y = POPULATIONS[pop]["base_ms"] * slow[d.config] * (1.0 + 0.3 * rng.gamma(4.0, 1.0))
        pol.observe(ctx, d, Outcome(y, 10.0, ctx.handshake_rtt_ms, 0.0, 100_000))
    assert departures >= 100 and unpaid == 0, (departures, unpaid)


def test_a_probe_is_a_function_of_the_state_not_of_a_random_draw():
    """``select`` logs its probes with probability 1, so a probe must not depend on the policy's random stream: on
    the state of each probe played, every stream gives the same probe. Until 2026-12-07 ties between probes (every
    one-knob change under the prior) were broken by a fresh draw per page load (found by review: on the states of
    this world's first probes 6-8 configurations were each drawn)."""
    pol, space = _policy()
    rng = np.random.default_rng(3)
    slow = _slowdowns(pol, space, 1.1 + 1.1 * rng.random(len(space)))
    checked = 0
    for k, (pop, ctx) in enumerate(_contexts(rng, 3000)):
        if k and k % 300 == 0:
            pol.plan(ctx.time_s, compile=False)
        d = pol.select(ctx)
        if d.arm == "explore" and checked < 5:
            assert d.probability == 1.0
            cell = pol._cell(ctx)
            mean, sd, _, _ = pol._effects(cell, pol._group(cell))
            ucb, ok, near = pol._bounds(mean, sd)
            safe = int(np.argmin(np.where(ok, ucb, np.inf)))
            kept = pol._rng
            picks = set()
            for seed in range(20):
                pol._rng = np.random.default_rng(seed)
                picks.add(pol._probe_of(cell, mean, sd, ucb, safe, near, pol._greedy(mean, sd, ok)))
            pol._rng = kept
            assert len(picks) == 1, picks
            checked += 1
        y = POPULATIONS[pop]["base_ms"] * (1.0 + 0.3 * rng.gamma(4.0, 1.0)) * slow[d.config]
        pol.observe(ctx, d, Outcome(y, 10.0, ctx.handshake_rtt_ms, 0.0, 100_000))
    assert checked == 5
