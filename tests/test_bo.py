"""BO building blocks (tailor.learn) and the BO baselines (bo, bo-nc, cherrypick-nc)."""

from __future__ import annotations

import numpy as np
import pytest

import tailor.policies.bo  # noqa: F401  (registers the policies)
from tailor.errors import ParameterError
from tailor.learn import BOSearch, ConfigStats, expected_improvement, lognormal_expected_improvement, relative_ei
from tailor.policies import Context, Outcome, PolicyEnv, PrefixHistory, make_policy
from tailor.scenario.model import ClientInfo
from tailor.space import AllowedConfig, ConfigSpace

SPACE = ConfigSpace.named("core")


def synthetic_plt(space: ConfigSpace) -> np.ndarray:
    """Deterministic PLT (ms) per configuration with a unique minimum at bbr, iw16, h2, rto 50.

    Encoded columns of 'core': cc one-hot (cubic, bbr, reno), iw (log-scaled), http one-hot (1.1, 2), rto.
    """
    x = space.encode()
    cc = x[:, :3] @ np.array([0.4, 0.0, 0.5])
    return 800.0 * np.exp(cc + 1.2 * (x[:, 3] - 0.6) ** 2 + 0.25 * x[:, 4] + 0.15 * x[:, 6])


def run_search(search: BOSearch, plt: np.ndarray, budget: int) -> list[int]:
    """Suggest/observe until the search exploits or the budget is spent; returns the tried configs."""
    tried = []
    for _ in range(budget):
        config, phase = search.suggest()
        if phase == "exploit":
            break
        tried.append(config)
        search.observe(config, plt[config])
    return tried


def ctx(client: str = "10.0.0.1", site: str = "news", history: bool = True, t: float = 0.0) -> Context:
    info = ClientInfo(client, "10.0.0.0/24", 64500, "us-east", "desktop", "cable")
    hist = PrefixHistory(goodput_mbps=20.0, loss=0.001, rtt_ms=40.0, samples=5, age_s=10.0) if history else None
    return Context(t, "s1", info, site, 40.0, hist)


# -- acquisition
def test_expected_improvement_nonnegative_and_monotone():
    mean = np.linspace(-3, 3, 41)
    ei = expected_improvement(mean, np.full_like(mean, 0.5), best=0.0)
    assert np.all(ei >= 0) and np.all(np.diff(ei) < 0)  # lower mean -> larger EI
    std = np.linspace(0.01, 3, 41)
    assert np.all(np.diff(expected_improvement(np.ones_like(std), std, best=0.0)) > 0)  # higher std -> larger
    assert expected_improvement(np.array([1.0, -1.0]), np.zeros(2), 0.0).tolist() == [0.0, 1.0]


def test_lognormal_ei_matches_monte_carlo_and_is_monotone():
    rng = np.random.default_rng(0)
    m, s, best = np.log(900.0), 0.3, 1000.0
    mc = np.maximum(best - np.exp(rng.normal(m, s, 400_000)), 0).mean()
    assert lognormal_expected_improvement(np.array([m]), np.array([s]), best)[0] == pytest.approx(mc, rel=0.02)
    means = np.log(np.linspace(500, 2000, 30))
    ei = lognormal_expected_improvement(means, np.full(30, 0.2), best)
    assert np.all(ei >= 0) and np.all(np.diff(ei) < 0)
    # at or above the incumbent, more uncertainty means more EI (below it, the lognormal mean's
    # exp(s^2/2) growth can make EI dip for tiny std, so that is not a property to test)
    at_best = lognormal_expected_improvement(np.full(30, np.log(1100.0)), np.linspace(0.01, 1, 30), best)
    assert np.all(np.diff(at_best) > 0)
    assert relative_ei(80.0, -1000.0) == pytest.approx(0.08)


# -- BOSearch
def test_bosearch_finds_near_optimum_within_25_samples():
    plt = synthetic_plt(SPACE)
    assert np.sum(plt == plt.min()) == 1
    search = BOSearch(SPACE, np.random.default_rng(1), ei_threshold=0.0)
    tried = run_search(search, plt, 25)
    assert len(tried) == 25 and min(plt[tried]) <= 1.05 * plt.min()
    assert plt[search.best()] == min(plt[tried])


def samples_to_within(tried, plt: np.ndarray, slack: float = 1.05) -> int:
    return next(i + 1 for i, c in enumerate(tried) if plt[c] <= slack * plt.min())


def test_bosearch_beats_random_search_on_average():
    """Samples needed to reach within 5% of the minimum, BO vs a random permutation, over 8 seeds."""
    plt, seeds = synthetic_plt(SPACE), range(8)
    bo = [samples_to_within(run_search(BOSearch(SPACE, np.random.default_rng(s), ei_threshold=0.0), plt, 60), plt)
          for s in seeds]
    rnd = [samples_to_within(np.random.default_rng(s).permutation(len(SPACE)), plt) for s in seeds]
    assert np.mean(bo) < 0.6 * np.mean(rnd)


@pytest.mark.parametrize("min_samples", [7, 15])
def test_stopping_rule_needs_min_samples_and_fires(min_samples):
    plt = synthetic_plt(SPACE)
    search = BOSearch(SPACE, np.random.default_rng(3), min_samples=min_samples, ei_threshold=0.08)
    tried = run_search(search, plt, len(SPACE) + 1)
    assert search.stopped and search.tested >= min_samples and len(tried) <= len(SPACE)
    assert search.suggest() == (search.best(), "exploit")
    assert search.relative_ei < 0.08 or search.tested == len(SPACE)


@pytest.mark.parametrize("noisy_ei", [True, False])
def test_noisy_observations_still_stop(noisy_ei):
    plt, rng = synthetic_plt(SPACE), np.random.default_rng(11)
    search = BOSearch(SPACE, np.random.default_rng(2), noisy_ei=noisy_ei)
    for _ in range(len(SPACE) + 1):
        config, phase = search.suggest()
        if phase == "exploit":
            break
        search.observe(config, plt[config] * rng.lognormal(0.0, 0.3))
    assert search.stopped and search.min_samples <= search.tested <= len(SPACE)


def test_training_set_is_capped_and_keeps_the_incumbent():
    search = BOSearch(SPACE, np.random.default_rng(0), ei_threshold=0.0, max_points=5)
    run_search(search, synthetic_plt(SPACE), 15)
    rows = search._training_set()
    assert len(rows) == 5 and search.best() in rows


def test_perf_memory_bounds_each_configuration_history():
    stats = ConfigStats(3, memory=2)
    for value in (100.0, 300.0, 500.0):
        stats.add(1, value)
    stats.add(2, 350.0)
    assert stats.means()[1] == pytest.approx(400.0) and np.isnan(stats.means()[0])
    assert stats.means(log=True)[1] == pytest.approx((np.log(300) + np.log(500)) / 2) and stats.best() == 2


def test_zero_threshold_explores_everything_once_then_stops():
    search = BOSearch(SPACE, np.random.default_rng(4), ei_threshold=0.0)
    tried = run_search(search, synthetic_plt(SPACE), len(SPACE) + 5)
    assert sorted(tried) == list(range(len(SPACE))) and search.stopped


def test_bosearch_is_deterministic_per_seed():
    plt = synthetic_plt(SPACE)
    a, b, c = (run_search(BOSearch(SPACE, np.random.default_rng(s), ei_threshold=0.0), plt, 20) for s in (7, 7, 8))
    assert a == b and a != c


def test_suggestion_cached_until_next_observation():
    plt, search = synthetic_plt(SPACE), BOSearch(SPACE, np.random.default_rng(0), min_samples=20)
    run_search(search, plt, 5)
    first = search.suggest()
    fits = search.surrogate.n_fits
    assert all(search.suggest() == first for _ in range(50)) and search.surrogate.n_fits == fits
    search.observe(first[0], plt[first[0]])
    search.suggest()
    assert search.surrogate.n_fits == fits + 1


def test_allowed_config_is_honoured():
    space = SPACE.restrict(AllowedConfig.parse("NoBBR"))
    search = BOSearch(space, np.random.default_rng(0), ei_threshold=0.0)
    tried = run_search(search, synthetic_plt(space), len(space) + 1)
    assert len(tried) == len(space) < len(SPACE)
    assert all(space.configs[i]["tcp.congestion_control"] != "bbr" for i in tried)


# -- policies
def drive(policy, plt: np.ndarray, loads: int, **ctx_kw) -> list:
    decisions = []
    for i in range(loads):
        c = ctx(t=float(i), **ctx_kw)
        d = policy.select(c)
        policy.observe(c, d, Outcome(float(plt[d.config]), 10.0, 40.0, 0.0, 100_000))
        decisions.append(d)
    return decisions


@pytest.mark.parametrize("name", ["bo", "bo-nc", "cherrypick-nc"])
def test_policy_bootstraps_explores_then_exploits(name):
    policy = make_policy(name, seed=5).reset(SPACE, PolicyEnv())
    plt = synthetic_plt(SPACE)
    decisions = drive(policy, plt, 40)
    arms = [d.arm for d in decisions]
    init = policy.init_samples
    assert arms[:init] == ["bootstrap"] * init and "explore" in arms and arms[-1] == "exploit"
    assert len({d.config for d in decisions[:init]}) == init and all(d.probability == 1.0 for d in decisions)
    first_exploit = arms.index("exploit")
    assert first_exploit >= policy.min_samples
    best = decisions[-1].config
    assert plt[best] == min(plt[d.config] for d in decisions[:first_exploit])
    groups = policy.table_groups()
    assert groups[decisions[-1].group] == {best: 1.0} and groups["default"] == {SPACE.default_index: 1.0}
    assert policy.fit_stats()["fits"] >= 1


def test_cherrypick_uses_cherrypick_hyper_parameters():
    hp = make_policy("cherrypick-nc").hyper_parameters()
    assert (hp["init_samples"], hp["min_samples"], hp["ei_threshold"]) == (3, 6, 0.10)
    hp = make_policy("bo-nc").hyper_parameters()
    assert (hp["init_samples"], hp["min_samples"], hp["ei_threshold"]) == (4, 7, 0.08)


@pytest.mark.parametrize("bad", [{"ei_threshold": 1.5}, {"init_samples": 0}, {"min_samples": 2.0},
                                 {"perf_memory": -1}, {"max_points": 1}, {"nope": 1}])
def test_parameters_are_validated(bad):
    with pytest.raises(ParameterError):
        make_policy("bo-nc", **bad)


@pytest.mark.parametrize("name", ["bo", "bo-nc", "cherrypick-nc"])
def test_unknown_prefix_gets_default(name):
    policy = make_policy(name, seed=0).reset(SPACE, PolicyEnv())
    decisions = drive(policy, synthetic_plt(SPACE), 5, history=False)
    assert all(d.config == SPACE.default_index and d.arm == "default" for d in decisions)
    assert policy.table_groups() == {"default": {SPACE.default_index: 1.0}}


@pytest.mark.parametrize("name", ["bo", "bo-nc"])
def test_policy_is_deterministic_per_seed(name):
    plt = synthetic_plt(SPACE)
    runs = [[d.config for d in drive(make_policy(name, seed=s).reset(SPACE, PolicyEnv()), plt, 25)] for s in (2, 2, 9)]
    assert runs[0] == runs[1] and runs[0] != runs[2]


def test_policy_honours_allowed_config():
    space = SPACE.restrict(AllowedConfig.parse("NoBBR"))
    policy = make_policy("bo", seed=0, ei_threshold=0.0).reset(space, PolicyEnv())
    decisions = drive(policy, synthetic_plt(space), len(space) + 5)
    assert all(space.configs[d.config]["tcp.congestion_control"] != "bbr" for d in decisions)
    assert decisions[-1].arm == "exploit" and policy.violations == 0


def test_expected_improvement_stays_finite_for_wide_posteriors():
    """exp(m + s^2/2) overflows where Phi(z - s) underflows: the product must not become NaN."""
    from tailor.learn.acquisition import lognormal_expected_improvement

    ei = lognormal_expected_improvement(np.array([7.0, 7.0, 7.0]), np.array([40.0, 1.0, 0.0]), 900.0)
    assert np.all(np.isfinite(ei)) and np.all(ei >= 0.0)
    from scipy import integrate, stats

    for k, (m, sd) in enumerate([(7.0, 40.0), (7.0, 1.0)]):  # E[max(b - e^Y, 0)] by quadrature
        ref = integrate.quad(lambda y, m=m, sd=sd: (900.0 - np.exp(y)) * stats.norm.pdf(y, m, sd), m - 12 * sd,
                             np.log(900.0))[0]
        assert ei[k] == pytest.approx(ref, rel=1e-4)


def test_maximize_never_picks_nan_and_survives_all_nan():
    from tailor.learn.optimize import maximize

    rng = np.random.default_rng(0)
    assert maximize(np.array([np.nan, 0.2, 0.5, np.nan]), np.array([10, 11, 12, 13]), rng) == (12, 0.5)
    cand, value = maximize(np.full(4, np.nan), np.array([10, 11, 12, 13]), rng)
    assert cand in (10, 11, 12, 13) and value == 0.0
