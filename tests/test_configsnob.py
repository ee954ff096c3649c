"""Config-Snob: profile tree, sufficiency, time categories, causal forest, bandit arms (fast)."""

import pickle

import numpy as np
import pytest

from tailor.context import Context, PrefixHistory
from tailor.errors import ParameterError
from tailor.grouping.profiles import (FEATURES, FEATURES_LISTED, OVERLAP, ProfileGroups, ProfileTree, Sufficiency, TimeCategories,
                                      profile_path)
from tailor.learn.causal import CausalEstimator, TreatmentEncoder, propensity_match
from tailor.policies import make_policy
from tailor.policies.configsnob import ARM_P
from tailor.scenario import ClientInfo
from tailor.space import ConfigSpace


def _ctx(region="ca-on", asn=64512, prefix="10.1.0.0/24", access="cable", device="desktop", t=0.0):
    client = ClientInfo("10.1.0.7", prefix, asn, region, device, access)
    return Context(t, "s1", client, "page-light-1", 30.0, PrefixHistory(50.0, 0.001, 30.0, 3, 1.0))


def test_unseen_profile_resolves_to_deepest_overlap_node():
    tree = ProfileTree()
    toronto_bell = profile_path(_ctx(region="toronto", asn=1), "weekday-offpeak")
    toronto_rogers = profile_path(_ctx(region="toronto", asn=2, prefix="10.2.0.0/24"), "weekday-offpeak")
    for i, path in enumerate([toronto_bell] * 3 + [toronto_rogers] * 2):
        tree.insert(path, i)
    assert tree.resolve(toronto_bell) == (toronto_bell, True)
    ottawa_bell = profile_path(_ctx(region="ottawa", asn=1), "weekday-offpeak")
    assert tree.resolve(ottawa_bell) == ((OVERLAP,) * 6, False)  # Fig. 4c: (overlap, overlap)
    toronto_new_isp = profile_path(_ctx(region="toronto", asn=3), "weekday-offpeak")
    key, seen = tree.resolve(toronto_new_isp)
    assert not seen and key == ("toronto",) + (OVERLAP,) * 5
    assert sorted(tree.node(key).samples) == [0, 1, 2, 3, 4]  # (Toronto, overlap) holds both ISPs
    assert len(list(tree.profiles())) == 2


def test_listed_levels_send_a_new_subnet_to_its_access_types_overlap_node():
    """levels='listed' (§3.1's order: access type and OS above the /24): a new /24 of a known ISP resolves to the
    node of its ISP, access type and OS, which holds none of the ISP's other access types' samples; the default
    order resolves it to the ISP's node, which pools them."""
    def path(prefix, access, levels):
        return profile_path(_ctx(prefix=prefix, access=access), "weekday-offpeak", levels)

    seen = [("10.1.0.0/24", "cable"), ("10.2.0.0/24", "cable"), ("10.3.0.0/24", "2g")]
    for levels in (FEATURES_LISTED, FEATURES):
        tree = ProfileTree()
        for i, (prefix, access) in enumerate(seen):
            tree.insert(path(prefix, access, levels), i)
        key, known = tree.resolve(path("10.9.0.0/24", "cable", levels))
        assert not known
        if levels is FEATURES_LISTED:
            assert key == ("ca-on", "64512", "cable", "desktop", OVERLAP, OVERLAP)
            assert sorted(tree.node(key).samples) == [0, 1]  # the ISP's cable /24s only
        else:
            assert key == ("ca-on", "64512", OVERLAP, OVERLAP, OVERLAP, OVERLAP)
            assert sorted(tree.node(key).samples) == [0, 1, 2]  # the 2G /24 too


def test_listed_levels_still_compile_prefix_rules(small_scenario, oracle):
    """With levels='listed' the decision table's rules still name each profile's /24 and device."""
    from tailor.sim import SimConfig, Simulator

    policy = make_policy("config-snob", seed=0, k_samples=5, steady_configs=3, levels="listed")
    Simulator(small_scenario, oracle, SimConfig(update_freq_s=120.0, seed=5)).run(policy)
    rules = policy.table_rules()
    assert rules, "no profile got a rule"
    paths = policy._cols["path"]  # (website, region, ISP, access, OS, /24, time)
    for rule in rules:
        assert "/" in rule["prefix"] and "/" not in rule["device"]
        assert any(p[0] == rule["sni"] and p[5] == rule["prefix"] and p[4] == rule["device"] for p in paths)


def test_sufficiency_needs_k_samples_and_a_stable_reward():
    suff = Sufficiency(k=20, stability=0.25)
    profile = ("p",)
    suff.record_cycle(profile, [1.0, 1.2])
    assert not suff.sufficient(profile, 50)  # one cycle: stability unknown
    suff.record_cycle(profile, [1.1, 1.1])
    assert suff.sufficient(profile, 20) and not suff.sufficient(profile, 19)
    suff.record_cycle(profile, [2.0])  # reward jumped by ~80 %
    assert suff.reward_change(profile) == pytest.approx(0.818, abs=1e-3)
    assert not suff.sufficient(profile, 100)


def test_time_categories_and_spike_fallback():
    times = TimeCategories(start_hour=17.0, start_weekday=0)
    assert times.category(0.0) == "weekday-offpeak"
    assert times.category(2.5 * 3600) == "weekday-peak"  # 19:30 on Monday
    assert times.category(5 * 86400.0) == "weekend"
    for cycle in range(6):
        assert not times.update(3 * 3600 + cycle * 300, 3.0 + 0.01 * (cycle % 2))
    times.update(0.0, 3.0)  # (off-peak seen earlier in this run)
    t_peak = 3 * 3600 + 2000.0
    for cycle in range(6):
        times.update(t_peak + cycle, 3.0 + 0.01 * (cycle % 2))
    assert times.update(t_peak + 10, 1.0)  # goodput collapses: a spike
    assert times.serving(t_peak + 10) == "weekday-offpeak"  # previous category answers
    assert not times.update(t_peak + 20, 3.0) and times.serving(t_peak + 20) == "weekday-peak"


def test_profile_groups_cluster_by_network_condition():
    rows = np.array([[4.0, 0.1, 3.0], [4.1, 0.1, 3.1], [0.0, 2.0, 5.0], [0.1, 2.1, 5.1]])
    labels = ProfileGroups(k=2).fit(rows)
    assert labels[0] == labels[1] != labels[2] == labels[3]


def test_causal_forest_recovers_sign_and_size_of_a_known_effect():
    """y = log CT; BBR lowers it by 0.30 on lossy paths and HTTP/2 raises it by 0.10 -- confounded:
    lossy clients get BBR more often."""
    space = ConfigSpace.named("core")
    rng = np.random.default_rng(0)
    n = 2400
    X = np.column_stack([rng.normal(2, 1, n), rng.uniform(0, 3, n), rng.normal(3.5, 0.3, n), rng.normal(12, 1, n)])
    bbr = [i for i, c in enumerate(space.configs) if c["tcp.congestion_control"] == "bbr"]
    other = [i for i in range(len(space)) if i not in bbr]
    lossy = X[:, 1] > 1.5
    configs = np.where(rng.random(n) < np.where(lossy, 0.6, 0.2), rng.choice(bbr, n), rng.choice(other, n))
    is_bbr = np.isin(configs, bbr)
    h2 = np.array([space.configs[c]["http.version"] == "2" for c in configs])
    y = 0.5 * X[:, 1] - 0.3 * is_bbr * lossy + 0.1 * h2 + rng.normal(0, 0.1, n)
    est = CausalEstimator(space, seed=0)
    assert est.fit(X, configs, y) and est.diagnostics["overlap"]
    delta = est.effects(est.theta(X[lossy]))
    default = space.configs[space.default_index]
    to_bbr = space.index_of(type(default)({**default, "tcp.congestion_control": "bbr"}))
    to_h2 = space.index_of(type(default)({**default, "http.version": "2"}))
    assert -0.45 < delta[to_bbr] < -0.15  # true -0.30 on lossy paths
    assert 0.03 < delta[to_h2] < 0.2  # true +0.10
    assert abs(est.effects(est.theta(X[~lossy]))[to_bbr]) < 0.12  # no effect on clean paths


@pytest.mark.parametrize("numeric", ["linear", "hinge"])
def test_a_window_slower_on_both_sides_of_the_default(numeric):
    """Where IW 4 and IW 64 are both slower than IW 10 (a slow, shallow path: too few rounds' worth, or a first
    flight that overflows), one slope through the default prices one of them faster than the default; one column
    per side of the default prices both slower."""
    space = ConfigSpace.named("core")
    rng = np.random.default_rng(3)
    n = 2400
    X = np.column_stack([rng.normal(2, 1, n), rng.uniform(0, 3, n), rng.normal(3.5, 0.3, n), rng.normal(12, 1, n)])
    configs = rng.integers(0, len(space), n)
    iw = np.array([space.configs[c]["tcp.initial_cwnd"] for c in configs])
    y = 0.2 * X[:, 0] + 0.25 * (iw == 4) + 0.25 * (iw == 64) + rng.normal(0, 0.1, n)
    est = CausalEstimator(space, seed=0, numeric=numeric)
    assert est.encode.matrix.shape[1] == (5 if numeric == "linear" else 6)
    assert est.fit(X, configs, y)
    delta = est.effects(est.theta(X))
    default = space.configs[space.default_index]
    at = {w: space.index_of(type(default)({**default, "tcp.initial_cwnd": w})) for w in (4, 64)}
    if numeric == "hinge":
        assert 0.15 < delta[at[4]] < 0.35 and 0.15 < delta[at[64]] < 0.35  # true +0.25 each
    else:
        assert min(delta[at[4]], delta[at[64]]) < 0.05


def test_treatment_encoding_and_overlap_check():
    space = ConfigSpace.named("core")
    enc = TreatmentEncoder(space)
    assert not enc([space.default_index]).any()  # the default is the zero treatment
    assert not TreatmentEncoder(space, "hinge")([space.default_index]).any()
    with pytest.raises(ParameterError, match="numeric"):
        TreatmentEncoder(space, "quadratic")
    rng = np.random.default_rng(1)
    X = np.concatenate([rng.normal(0, 0.1, 100), rng.normal(5, 0.1, 100)])[:, None]
    idx, info = propensity_match(X, X[:, 0] > 2.5)  # treatment fully determined by X: no overlap
    assert idx is None and not info["overlap"]
    idx, info = propensity_match(X, np.arange(200) % 2 == 0)
    assert info["overlap"] and len(idx) > 150


def test_bandit_arm_probabilities(small_scenario, oracle):
    """Steady groups publish Best 0.5 / BO2 0.4 / BO3 0.1 (§3.2.2); cold groups one BO1 choice."""
    from tailor.sim import SimConfig, Simulator

    sim = Simulator(small_scenario, oracle, SimConfig(update_freq_s=120.0, seed=5))
    policy = make_policy("config-snob", seed=0, k_samples=5, steady_configs=3)
    sim.run(policy)
    clusters = [c for g, c in policy._choices.items() if g.startswith("g")]
    steady = [c for c in clusters if len(c) == 3]
    assert steady, "no steady profile group formed"
    assert all(len(c) == 1 for c in clusters if len(c) != 3)  # cold clusters: BO model 1 only
    for choices in steady:
        assert [p for _, p, _ in choices] == list(ARM_P)
        assert [a for _, _, a in choices] == ["exploit", "exploit", "explore"]
    for gid, choices in policy._choices.items():
        assert abs(sum(p for _, p, _ in choices) - 1.0) < 1e-9
        if gid.startswith("p:"):
            assert len(choices) == 1 and choices[0][1] == 1.0


def test_a_decision_logs_its_configurations_probability_over_every_arm_that_gives_it():
    """Two arms proposing one configuration (Best and BO model 2 on the incumbent): the decision logs the sum of
    their shares, as the group's table does, not the drawn arm's (until 2026-12-07; found by review)."""
    policy = make_policy("config-snob", seed=0)
    policy.reset(ConfigSpace.named("core"))
    policy._choices["g1"] = [(39, 0.5, "exploit"), (39, 0.4, "exploit"), (37, 0.1, "explore")]
    logged = {}
    for i in range(200):  # 200 clients: their cohort draws reach every arm
        client = ClientInfo(f"10.9.{i}.7", f"10.9.{i}.0/24", 64512, "ca-on", "desktop", "cable")
        d = policy._draw("g1", Context(0.0, f"s{i}", client, "page-light-1", 30.0, None))
        logged.setdefault(d.config, set()).add(round(d.probability, 12))
    assert logged == {39: {0.9}, 37: {0.1}}


@pytest.mark.parametrize("scope", ["all", "site"])
def test_group_scope_site_keeps_every_group_on_one_website(small_scenario, oracle, scope):
    """group_scope='site': K-means groups are formed within each website, so no group's Best is chosen on another
    website's loads; 'all' pools websites in a group (the case the parameter exists for)."""
    from tailor.sim import SimConfig, Simulator

    policy = make_policy("config-snob", seed=0, k_samples=5, steady_configs=3, group_scope=scope)
    Simulator(small_scenario, oracle, SimConfig(update_freq_s=120.0, seed=5)).run(policy)
    sites: dict[str, set] = {}
    for path, gid in policy._assign.items():
        if OVERLAP not in path and not gid.startswith(("p:", "ov:")):
            sites.setdefault(gid, set()).add(path[0])
    assert len(sites) >= 2, "too few K-means groups formed to tell"
    if scope == "site":
        assert all(len(s) == 1 and gid.startswith(f"{next(iter(s))}/g") for gid, s in sites.items())
    else:
        assert any(len(s) > 1 for s in sites.values())


def test_one_forest_per_website(oracle):
    """forest='site': a website with enough samples gets its own forest, and its samples' CATEs are that forest's;
    the others' are the pooled forest's."""
    from tailor.scenario import load_scenario
    from tailor.sim import SimConfig, Simulator

    scenario = load_scenario("broadband-us", n_sessions=150, seed=3, websites=sorted(oracle.websites))
    sim = Simulator(scenario, oracle, SimConfig(seed=5))
    policy = make_policy("config-snob", seed=0, forest="site", ci_every=1)
    sim.run(policy)
    assert policy._ci.fitted and policy._site_ci, "no website got a forest of its own"
    X = np.asarray(policy._cols[policy._cov])
    site = np.asarray(policy._cols["site"])
    n = len(policy._theta)
    for w, est in policy._site_ci.items():
        rows = np.flatnonzero(site[:n] == w)
        assert (site == w).sum() >= est.min_samples
        np.testing.assert_allclose(policy._theta[rows], est.theta(X[rows]))
    other = np.flatnonzero(~np.isin(site[:n], list(policy._site_ci)))
    if len(other):
        np.testing.assert_allclose(policy._theta[other], policy._ci.theta(X[other]))


def test_bad_parameter_is_a_house_error():
    with pytest.raises(ParameterError, match=r"The 'reward' parameter of ConfigSnobPolicy must be"):
        make_policy("config-snob", reward="mean")


def test_pretreatment_covariates_do_not_see_the_connections_outcome():
    """covariates='pretreatment' (issue 14): the causal step's rows are fixed before the configuration acts,
    so two page loads with the same context but different outcomes give the same row; 'outcome' (the
    default, kept for reproducibility) stores this connection's measured goodput/RTT (post-treatment)."""
    from tailor.context import Decision, Outcome

    space = ConfigSpace.named("core")
    ctx, dec = _ctx(), Decision(space.default_index, 1.0, "g0", "exploit")
    fast, slow = Outcome(100.0, 80.0, 31.0, 0.0, 200_000), Outcome(900.0, 2.0, 250.0, 0.05, 200_000)
    for cov, same in (("pretreatment", True), ("outcome", False)):
        policy = make_policy("config-snob", seed=0, covariates=cov).reset(space)
        policy._observe(ctx, dec, fast)
        policy._observe(ctx, dec, slow)
        rows = policy._cols[policy._cov]
        assert (rows[0] == rows[1]) is same
    with pytest.raises(ParameterError):
        make_policy("config-snob", covariates="after")


def test_cf_rewards_stay_finite_for_an_exploding_cate():
    """A forest fitted where a treatment column barely varies can return coefficients of any size (seen: an
    overflow in exp on the measured oracle); the rewards stay finite and keep their order, so the GP that reads
    their logs never sees an infinity."""
    space = ConfigSpace.named("core")
    est = CausalEstimator(space)
    width = est.encode.matrix.shape[1]
    configs = np.arange(len(space))[:4]
    theta = np.zeros((4, width))
    theta[:, 0] = 5e3  # one knob column's effect: exp(5000) overflows float64
    rewards = est.rewards(theta, configs, np.zeros(4))
    assert np.all(np.isfinite(rewards)) and np.all(rewards > 0)
    delta = est.effects(theta)
    assert np.all(np.diff(rewards[np.argsort(delta)]) >= 0)  # order of the effects kept (ties at the bound)


def test_cf_reward_is_an_arithmetic_mean_as_the_average_it_stands_in_for():
    """With no configuration effect the forest's reward of every configuration is the group's plain average reward,
    the quantity measured configurations are ranked by (until 2026-12-07 the geometric mean: lower by about half the
    log rewards' variance, so a configuration priced by the forest ranked above an equal measured one)."""
    space = ConfigSpace.named("core")
    est = CausalEstimator(space)
    y = np.log(np.random.default_rng(0).lognormal(0.0, 0.6, 400))
    configs = np.zeros(400, dtype=int)
    rewards = est.rewards(np.zeros((400, est.encode.matrix.shape[1])), configs, y)
    assert np.allclose(rewards, np.mean(np.exp(y)), rtol=1e-9)


def test_search_space_limit_priced_against_the_current_state():
    """§3.3.3 prices a transition from the current state: a configuration faster than the default but slower than
    the group's current one is kept against the default and dropped against the current state (``limit_ref``)."""
    space = ConfigSpace.named("core")
    est = CausalEstimator(space)
    width = est.encode.matrix.shape[1]
    uses = np.flatnonzero(est.encode.matrix[:, 0] == 1)
    both = np.flatnonzero((est.encode.matrix[:, 0] == 1) & (est.encode.matrix[:, 1:].any(axis=1)))
    only = next(int(c) for c in uses if not est.encode.matrix[c, 1:].any())  # one column set, the rest default
    theta = np.zeros((50, width))
    theta[:, 0] = -0.10  # column 0 is 10% faster than the default
    other = int(np.flatnonzero(est.encode.matrix[:, 1:].any(axis=1) & (est.encode.matrix[:, 0] == 0))[0])
    vs_default, vs_current = est.effects(theta, 0.75), est.effects(theta, 0.75, ref=only)
    assert vs_default[other] == 0.0 and vs_current[other] == pytest.approx(0.10)  # no faster than the default
    assert vs_current[only] == 0.0 and len(both) > 0 and np.allclose(vs_current[both], 0.0)
    with pytest.raises(ParameterError):
        make_policy("config-snob", limit_ref="best")


def test_the_forests_limit_vouches_only_for_knob_values_its_sample_covers():
    """``limit_scope=seen``: a forest fitted on windows of 10-64 with cubic and reno prices an initial window of 4 and
    BBR by extrapolation; the covered set keeps every configuration whose values lie inside the sample's (16 between 10
    and 64, every RTO and HTTP version seen) and drops those with a window of 4 or BBR."""
    space = ConfigSpace.named("core")
    est = CausalEstimator(space)
    label = [space.label(c) for c in range(len(space))]
    seen = [c for c, name in enumerate(label) if ("iw10 " in name or "iw64 " in name) and not name.startswith("bbr")]
    covered = est.encode.covered(seen)
    for c, name in enumerate(label):
        inside = not name.startswith("bbr") and "iw4 " not in name
        assert covered[c] == inside, name
    assert est.encode.covered([space.default_index]).sum() == 1  # the default alone covers only itself
    rng = np.random.default_rng(0)  # a fitted forest keeps what its matched sample covers
    n = 600
    configs = rng.choice(seen, n)
    X = rng.normal(size=(n, 4))
    y = 0.1 * est.encode(configs)[:, 0] + rng.normal(0, 0.05, n)
    assert est.fit(X, configs, y) and est.covered is not None
    assert not est.covered[[c for c, name in enumerate(label) if "iw4 " in name]].any()
    assert est.covered[space.default_index]
    theta = est.theta(X)
    iw4 = [c for c, name in enumerate(label) if "iw4 " in name]
    for scope in ("all", "seen"):  # the policy's limit applies it (limit_scope)
        policy = make_policy("config-snob", seed=0, limit_scope=scope).reset(space)
        policy._ci, policy._theta, policy._cols["config"] = est, theta, configs.tolist()
        _, allowed = policy._ci_view(list(range(n)), y)
        assert allowed[iw4].any() == (scope == "all"), scope  # the extrapolated slope lets some through
        assert scope == "all" or not (allowed & ~est.covered).any()
    old = pickle.loads(pickle.dumps(est))
    del old.covered
    assert pickle.loads(pickle.dumps(old)).covered is None  # an estimator pickled before: every configuration
    with pytest.raises(ParameterError):
        make_policy("config-snob", limit_scope="some")


def test_search_space_limit_by_quantile_drops_what_slows_a_share_of_the_group():
    """One knob column is 5% faster for 85% of a group's rows and 20% slower for the rest: on average (-1.25%)
    the configurations that set it stay in the space, at the 0.9-quantile they are dropped; configurations that
    do not set it are unaffected."""
    space = ConfigSpace.named("core")
    est = CausalEstimator(space)
    theta = np.zeros((100, est.encode.matrix.shape[1]))
    theta[:85, 0], theta[85:, 0] = -0.05, 0.2
    uses = est.encode.matrix[:, 0] == 1
    assert uses.any() and (~uses).any()
    mean, q90 = est.effects(theta), est.effects(theta, 0.9)
    assert np.allclose(mean[uses], -0.0125) and np.allclose(q90[uses], 0.2)
    assert np.allclose(mean[~uses], 0.0) and np.allclose(q90[~uses], 0.0)
    assert np.allclose(est.effects(theta[:85], 0.9)[uses], -0.05)  # without the slowed rows: kept


def test_state_pickled_before_the_quantile_limit_keeps_the_average():
    """A manager's learned state from before ``limit_q`` loads with the limit it was learned with (0: the average
    effect); a current state keeps its own."""
    policy = make_policy("config-snob", seed=0).reset(ConfigSpace.named("core"))
    assert pickle.loads(pickle.dumps(policy)).limit_q == 0.75
    del policy.limit_q
    assert pickle.loads(pickle.dumps(policy)).limit_q == 0.0


@pytest.mark.parametrize("initial", ["paper", "guarded"])
def test_guarded_initial_trials_drop_a_tried_configuration_slower_than_the_default(initial):
    """An overlap node that measured the default and one configuration 30% slower hands both out as "its best
    tried" under the paper's reading; ``initial=guarded`` keeps only what is measured no slower than the
    default, keeps a faster one, and gives a space-filling design point (one configuration measured) only
    ``explore_share`` of the loads."""
    policy = make_policy("config-snob", seed=0, initial=initial, design="own").reset(ConfigSpace.named("core"))
    d = policy.space.default_index
    slow, fast = [c for c in range(len(policy.space)) if c != d][:2]

    def trials(rewards: dict[int, float]) -> dict[int, float]:
        configs = [c for c, r in rewards.items() for _ in range(10)]
        y = np.log([rewards[c] for c in configs])
        choices = policy._arms.overlap("ov:t", list(range(len(configs))), y, {"config": configs}, None)
        assert abs(sum(p for _, p, _ in choices) - 1.0) < 1e-9
        out: dict[int, float] = {}
        for c, p, _ in choices:
            out[c] = out.get(c, 0.0) + p
        return out

    with_slow = trials({d: 1.0, slow: 1.3})
    assert (slow in with_slow) == (initial == "paper")
    assert with_slow[d] >= 1 / 3 - 1e-9
    with_fast = trials({d: 1.0, slow: 1.3, fast: 0.8})
    assert with_fast.get(fast, 0.0) >= 1 / 3 - 1e-9
    assert slow not in with_fast  # three tried: the best two are the faster one and the default either way
    alone = trials({d: 1.0})
    design = [c for c in alone if c != d]
    assert len(design) == 1
    assert alone[design[0]] == pytest.approx(0.5 if initial == "paper" else policy.explore_share)


@pytest.mark.parametrize("design", ["own", "ancestor"])
def test_ancestor_design_proposes_from_the_node_above_where_a_node_has_one_configuration(design):
    """An overlap node that has measured only the default has no GP: under ``design=own`` BO model 1's proposal is
    the shared space-filling design's next point, however slow the node above measured it; under
    ``design=ancestor`` it is the EI maximiser of a GP fitted to the node above, which has measured that point
    60% slower and a neighbour of the default 20% faster, so the proposal is not the slow point."""
    policy = make_policy("config-snob", seed=0, design=design).reset(ConfigSpace.named("core"))
    arms = policy._arms
    d = policy.space.default_index
    first = next(c for c in arms._lhs if c != d)
    fast = next(c for c in range(len(policy.space)) if arms._near[d, c] and c not in (d, first))
    rewards = {d: 1.0, first: 1.6, fast: 0.8}
    configs = [c for c, r in rewards.items() for _ in range(10)] + [d] * 10
    y = np.log([rewards[c] for c in configs])
    above_ids = list(range(30))
    own_ids = list(range(30, 40))  # the node itself: the default only
    above = [above_ids] if design == "ancestor" else ()
    choices = arms.overlap("ov:t", own_ids, y, {"config": configs}, None, above)
    proposal = [c for c, _, arm in choices if arm == "explore"]
    assert len(proposal) == 1
    assert (proposal[0] == first) == (design == "own")
    # a node that has measured two configurations fits its own GP either way
    both = arms.overlap("ov:u", list(range(10)) + own_ids, y, {"config": configs}, None, [above_ids])
    assert all(c != d for c, _, arm in both if arm == "explore")


@pytest.mark.parametrize("design", ["own", "near"])
def test_near_design_steps_one_knob_from_the_default_first(design):
    """Under ``design=near`` the shared space-filling design visits the default's one-knob neighbours before any
    configuration further away, so an overlap node that has measured only the default proposes a neighbour; the
    design is the same permutation of the space either way."""
    own = make_policy("config-snob", seed=3).reset(ConfigSpace.named("core"))
    policy = make_policy("config-snob", seed=3, design=design).reset(ConfigSpace.named("core"))
    arms, d = policy._arms, policy.space.default_index
    assert sorted(arms._lhs) == sorted(own._arms._lhs)
    neighbours = {c for c in range(len(policy.space)) if arms._near[d, c] and c != d}
    assert (set(arms._lhs[: len(neighbours)]) == neighbours) == (design == "near")
    configs = [d] * 10
    choices = arms.overlap("ov:t", list(range(10)), np.zeros(10), {"config": configs}, None)
    proposal = [c for c, _, arm in choices if arm == "explore"]
    assert len(proposal) == 1
    assert proposal[0] == next(c for c in arms._lhs if c != d)
    if design == "near":
        assert proposal[0] in neighbours


@pytest.mark.parametrize("order", ["shared", "model"])
def test_each_model_proposes_from_its_own_design_order(order):
    """``design_order=model``: two overlap nodes that have measured only the default propose from two different
    Latin-hypercube orders (one shared order hands both the same points), the same node the same order at every cycle
    and in a reloaded state, and a cold group's BO model 1 its own order too."""
    space = ConfigSpace.named("core")
    policy = make_policy("config-snob", seed=3, design_order=order).reset(space)
    arms, d = policy._arms, space.default_index
    cols = {"config": [d] * 10}

    def proposal(gid, models=arms):
        return [c for c, _, arm in models.overlap(gid, list(range(10)), np.zeros(10), cols, None) if arm == "explore"]

    firsts = {gid: proposal(gid) for gid in (f"ov:site-{k}|*|*" for k in range(6))}
    assert len(set(map(tuple, firsts.values()))) == (1 if order == "shared" else 6)
    assert all(len(p) == policy.n_initial - 1 and d not in p for p in firsts.values())
    assert proposal("ov:site-0|*|*") == firsts["ov:site-0|*|*"]
    again = pickle.loads(pickle.dumps(policy))
    assert proposal("ov:site-1|*|*", again._arms) == firsts["ov:site-1|*|*"]
    assert sorted(arms._design("g:7")) == list(range(len(space)))  # an order of the whole space
    cold = arms.group("g:7", list(range(10)), np.zeros(10), cols, None, None, steady_ok=False)
    assert cold == [(next(c for c in arms._design("g:7") if c != d), 1.0, "explore")]
    assert (arms._design("g:7") == arms._lhs) == (order == "shared")
    with pytest.raises(ParameterError):
        make_policy("config-snob", design_order="node")


@pytest.mark.parametrize("design", ["own", "batch"])
def test_batch_design_spreads_a_cold_nodes_proposal_over_the_next_design_points(design):
    """Under ``design=batch`` an overlap node that has measured only the default hands the proposal's share to the
    design's next n_initial - 1 points instead of one, so its next cycle's best tried configurations can drop a slow
    one; a node with two configurations measured proposes one GP point either way."""
    policy = make_policy("config-snob", seed=3, design=design).reset(ConfigSpace.named("core"))
    arms, d = policy._arms, policy.space.default_index
    choices = arms.overlap("ov:t", list(range(10)), np.zeros(10), {"config": [d] * 10}, None)
    proposal = [(c, p) for c, p, arm in choices if arm == "explore"]
    design_points = [c for c in arms._lhs if c != d]
    k = policy.n_initial - 1 if design == "batch" else 1
    assert [c for c, _ in proposal] == design_points[:k]
    assert sum(p for _, p in proposal) == pytest.approx(0.5) and sum(p for _, p, _ in choices) == pytest.approx(1.0)
    other = design_points[0]
    y = np.log(np.r_[np.full(10, 1.0), np.full(10, 1.2)])
    choices = arms.overlap("ov:u", list(range(20)), y, {"config": [d] * 10 + [other] * 10}, None)
    assert len([c for c, _, arm in choices if arm == "explore"]) == 1
