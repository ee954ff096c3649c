"""The `tailor` policy's safety and change-detection contracts, in seeded synthetic worlds.

The worlds call ``select`` / ``observe`` directly (the simulator's loop with latency 0), so each test
controls the truth: the time every configuration would give every page load.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from tailor.policies import Context, Outcome, PolicyEnv, PrefixHistory, make_policy
from tailor.scenario.model import ClientInfo
from tailor.space import ConfigSpace

SITES = ("news.example", "shop.example", "video.example")
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


@pytest.mark.parametrize("alpha,baseline", [(0.01, "cdn-static"), (0.05, "cdn-static"), (0.01, "default")])
def test_budget_never_violated_when_every_other_configuration_is_worse(alpha, baseline):
    pol, space = _policy(alpha=alpha, baseline=baseline)
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


@pytest.mark.parametrize("baseline", ["cdn-static", "default"])
def test_exploits_a_better_configuration_within_budget(baseline):
    pol, space = _policy(baseline=baseline)
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
    """The refit's Kronecker accumulation of the Gram matrix is exactly Phi^T W Phi of the materialised design."""
    from tailor.policies.tailor import gram

    rng = np.random.default_rng(0)
    rows, n_psi, n_e, configs = 300, 12, 5, 9
    psi = (rng.random((rows, n_psi)) < 0.3).astype(float)
    psi[:, 3] = rng.normal(size=rows)  # a continuous feature, like the website's size
    keep = np.array([0, 2, 3, 7, 11])
    pint = psi[:, keep]
    e = (rng.random((configs, n_e)) < 0.4).astype(float)
    e[4] = 0.0  # the reference configuration
    cfg = rng.integers(configs, size=rows)
    count = rng.integers(1, 5, size=rows).astype(float)
    total = rng.normal(size=rows) * count
    phi = np.concatenate([psi, (pint[:, :, None] * e[cfg][:, None, :]).reshape(rows, -1)], axis=1)
    g, h = gram(psi, pint, e, cfg, count, total)
    np.testing.assert_allclose(g, phi.T @ (phi * count[:, None]), atol=1e-9)
    np.testing.assert_allclose(h, phi.T @ total, atol=1e-9)
