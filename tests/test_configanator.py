"""Configanator: K selection by NCSpread, DT generalisation across classes, §3.1 arm switching."""

import numpy as np
import pytest

from tailor.grouping.nc import pooled_spread, select_k
from tailor.learn.dtree import ConfigTree
from tailor.policies import POLICIES, make_policy
from tailor.sim import SimConfig, Simulator


def _clustered(rng, centers, plt_spread, n=60):
    """Rows around given centres; each cluster's default PLT has a known relative spread."""
    rows, plt, labels = [], [], []
    for c, (center, spread) in enumerate(zip(centers, plt_spread)):
        rows.append(center + 0.01 * rng.standard_normal((n, len(center))))
        plt.append(1000.0 * (c + 1) * (1.0 + spread * rng.standard_normal(n)))
        labels += [c] * n
    return np.vstack(rows), np.concatenate(plt), np.array(labels)


def test_k_selection_honours_nc_spread():
    """4 well-separated groups with 2 % PLT spread each: K=4 is the smallest K within 5 %."""
    rng = np.random.default_rng(0)
    centers = [np.array([0.0, 0.0]), np.array([3.0, 0.0]), np.array([0.0, 3.0]), np.array([3.0, 3.0])]
    rows, plt, truth = _clustered(rng, centers, [0.02] * 4)
    sites = np.zeros(len(rows), dtype=int)
    k, spread = select_k(rows, rows, sites, plt, nc_spread=0.05, max_k=8, seed=0)
    assert k == 4
    assert spread[4] <= 0.05 and spread[3] > 0.05
    assert pooled_spread(truth, sites, plt) == pytest.approx(0.02, abs=0.006)


def test_looser_nc_spread_gives_fewer_classes():
    rng = np.random.default_rng(1)
    centers = [np.array([0.0, 0.0]), np.array([0.6, 0.0]), np.array([6.0, 0.0])]
    rows, plt, _ = _clustered(rng, centers, [0.01] * 3)
    plt[60:120] *= 1.08 / 2  # clusters 0 and 1 differ by 8 % only
    sites = np.zeros(len(rows), dtype=int)
    tight, _ = select_k(rows, rows, sites, plt, nc_spread=0.02, max_k=6, seed=0)
    loose, _ = select_k(rows, rows, sites, plt, nc_spread=0.10, max_k=6, seed=0)
    assert loose < tight


def test_decision_tree_generalises_to_unseen_class():
    """Trained on classes with RTT 20/40 ms (config 3) and 300/500 ms (config 7), the tree maps an unseen
    class at 400 ms to config 7 and one at 30 ms to config 3."""
    rng = np.random.default_rng(2)
    X, y = [], []
    for rtt, label in ((20, 3), (40, 3), (300, 7), (500, 7)):
        for _ in range(100):
            X.append([np.log(rtt * rng.uniform(0.9, 1.1)), rng.uniform(0, 3)])
            y.append(label)
    tree = ConfigTree(leaves=80, seed=0).fit(np.array(X), np.array(y))
    assert tree.predict(np.array([np.log(400.0), 1.0])) == 7
    assert tree.predict(np.array([np.log(30.0), 2.0])) == 3
    assert ConfigTree().predict(np.zeros(2)) is None


def test_tree_settings_are_the_papers():
    model = ConfigTree()._model()  # "minimum number of leaf nodes 80" read as min_samples_leaf (learn/dtree.py)
    assert (model.criterion, model.min_samples_split, model.max_depth, model.min_samples_leaf,
            model.max_leaf_nodes) == ("entropy", 2, None, 80, None)
    model = ConfigTree(leaf_mode="max")._model()  # the other reading
    assert (model.min_samples_leaf, model.max_leaf_nodes) == (1, 80)


@pytest.fixture(scope="module")
def run(small_scenario, oracle):
    sim = Simulator(small_scenario, oracle, SimConfig(update_freq_s=120.0, seed=5))
    policy = make_policy("configanator", seed=3)
    return sim, policy, sim.run(policy).records


def test_arm_switching_bootstrap_then_steady_state(run):
    """Per pair: GP arms (bootstrap, explore) only before steady state; epsilon / exploit only after;
    the bootstrap starts with its seeded first sample (the tree's prediction, or the default before the
    first tree)."""
    sim, policy, rec = run
    first_samples = {k: s._boot[0] for k, s in policy._pairs.items()}
    seeded = [k for k, s in policy._pairs.items() if s._boot[0] != sim.space.default_index]
    assert seeded, "no pair was seeded by the tree"
    assert {"bootstrap", "exploit", "epsilon"} <= set(rec["arm"])
    for group in set(rec["group"]) - {"unknown"}:
        arms = list(rec["arm"][rec["group"] == group])
        steady = [i for i, a in enumerate(arms) if a in ("epsilon", "exploit")]
        if steady:
            assert all(a in ("epsilon", "exploit") for a in arms[steady[0]:])
            assert policy._pairs[group].stopped
            assert policy._pairs[group].tested >= policy.min_samples or policy._pairs[group].tested == len(sim.space)
        if arms and arms[0] == "bootstrap" and group in first_samples:
            configs = rec["config"][rec["group"] == group]
            assert configs[0] == first_samples[group] or policy._pairs[group].observations > len(arms)


def test_steady_state_probabilities_are_the_mixture(run):
    sim, policy, rec = run
    n = len(sim.space)
    eps = rec["arm"] == "epsilon"
    exploit = rec["arm"] == "exploit"
    assert np.all(rec["probability"][exploit] >= 1 - policy.epsilon)
    assert np.all((rec["probability"][eps] >= policy.epsilon / n - 1e-12) & (rec["probability"][eps] <= 1))
    assert np.all(rec["probability"][np.isin(rec["arm"], ["bootstrap", "explore"])] == 1.0)


def test_ablations_registered_and_differ(run):
    assert {"configanator", "configanator-nogp", "configanator-nodt"} <= set(POLICIES)
    sim, _, rec = run
    nogp = sim.run(make_policy("configanator-nogp", seed=3)).records
    assert "explore" not in set(nogp["arm"]) and "explore" in set(rec["arm"])


def test_epsilon_arm_resamples_the_pairs_data_points(run):
    """§1.2/§3.1: the epsilon arm re-samples old configurations: every epsilon choice is a configuration the
    pair had already observed, and its probability is epsilon / (number of such configurations) at least."""
    sim, policy, rec = run
    eps = np.flatnonzero(rec["arm"] == "epsilon")
    assert len(eps) > 0
    for i in eps:
        group, config = rec["group"][i], rec["config"][i]
        earlier = (rec["group"][:i] == group) & (rec["config"][:i] == config)
        assert earlier.any() or policy._pairs[group]._boot[0] == config or config == sim.space.default_index
        assert rec["probability"][i] >= policy.epsilon / policy._pairs[group].tested - 1e-12
    table = policy.table_groups()
    for key, search in policy._pairs.items():
        if policy._steady(search):
            assert set(table[key]) <= set(np.flatnonzero(search.stats.counts > 0)) | {max(table[key], key=table[key].get)}
            assert sum(table[key].values()) == pytest.approx(1.0)


def _ctx(prefix: str, rtt: float, website: str, device: str = "desktop"):
    from tailor.context import Context, PrefixHistory
    from tailor.scenario.model import ClientInfo
    client = ClientInfo(prefix.replace("0/24", "7"), prefix, 64500, "us-east", device, "cable")
    return Context(0.0, "s", client, website, rtt, PrefixHistory(50.0, 0.001, rtt, 3, 1.0))


def test_new_pair_bootstrap_starts_with_the_trees_prediction(oracle):
    """ConfigTron §4.1.2: when a new network class shows up, the exploitation arm's prediction is one of the
    GP bootstrap's initial samples -- here the first, so the new pair's first connection gets it; without
    a tree (NoDT ablation, or before the first tree) the default comes first."""
    from tailor.policies.base import PolicyEnv
    from tailor.space import ConfigSpace
    space = ConfigSpace.named("core")
    sites = tuple(sorted(oracle.websites))
    target = (space.default_index + 17) % len(space)
    for name, expected in (("configanator", target), ("configanator-nodt", space.default_index)):
        policy = make_policy(name, seed=0).reset(space, PolicyEnv(websites=sites))
        rows = [policy._dt_row((rtt, 50.0, 0.001), "desktop", "us-east", sites[0]) for rtt in (20.0, 40.0, 80.0)]
        policy._tree.fit(np.array(rows * 10), np.full(30, target))
        decision = policy.select(_ctx("10.9.9.0/24", 30.0, sites[0]))
        assert decision.arm == "bootstrap" and decision.config == expected
        assert policy._pairs[decision.group]._boot[0] == expected
        assert len(set(policy._pairs[decision.group]._boot)) == policy.init_samples


def test_records_of_a_tables_default_group_feed_the_clients_pair(oracle):
    """A manager feeds records whose group is the published table's "default" (edges report the group they
    applied): they are classified into the client's pair, never kept as a pair named "default", and the
    table still compiles (found when the manager's default became Configanator)."""
    from tailor.context import Decision, Outcome
    from tailor.policies.base import PolicyEnv
    from tailor.space import ConfigSpace
    space = ConfigSpace.named("core")
    sites = tuple(sorted(oracle.websites))
    policy = make_policy("configanator", seed=0).reset(space, PolicyEnv(websites=sites))
    ctx = _ctx("10.9.8.0/24", 40.0, sites[0])
    for k in range(3):
        policy.observe(ctx, Decision(space.default_index, 1.0, "default", "table"),
                       Outcome(900.0 + k, 50.0, 40.0, 0.001, 300_000))
    assert "default" not in policy._pairs and len(policy._pairs) == 1
    (key,) = policy._pairs
    assert key.endswith("|" + sites[0]) and policy._pairs[key].stats.counts[space.default_index] == 3
    table = policy.plan(0.0)  # compiles (table_rules splits every pair key)
    assert set(policy.table_groups()) == {"default", key} and table["default"]


def test_headline_figures_of_figs_22_to_24_and_28_on_known_records():
    """The report's numbers for Figs. 22-24 and 28 on records whose answers are known by construction."""
    from tailor.eval.figures_configanator import headline_figures

    n = 400
    site = np.arange(n) % 2  # two websites, 200 page loads each
    rank = np.arange(n) // 2
    arm = np.where(rank < 10, "explore", "exploit").astype(object)
    arm[(rank >= 100) & (np.arange(n) % 8 == 0)] = "epsilon"  # a quarter of site 0's late page loads, none of site 1's
    config = np.where(rank < 50, 3, 7)  # the exploited configuration changes once, at the 50th page load of each site
    optimal = np.full(n, 1000.0)
    mode = np.where(rank < 10, 1200.0, 1000.0)  # exploring page loads are 20% slower than optimal
    rec = {"site": site, "arm": arm, "time_s": np.arange(n) * 1.0, "group": np.array(["a", "b"] * (n // 2)),
           "config": config, "mode_ms": mode, "mode_optimal_ms": optimal, "plt_ms": mode * 1.0,
           "default_ms": np.full(n, 1100.0)}
    h = headline_figures(rec)
    assert h["exploring_first_10"] == 1.0
    assert h["exploring_after_100"] == pytest.approx(0.125)
    assert h["exploit_after_100"] == pytest.approx(0.875)
    assert h["tail_p95_gap_median"] == 0.0  # only the first 20 s explore: every later minute is optimal
    assert h["stable_after_median"] == 40 and h["stable_after_max"] == 40  # exploit decisions 10..49 then 7
    assert h["degraded"]["exploration"] == pytest.approx(20 / n)  # 1200 vs 1100: 9% slower, exploring
    assert h["degraded"]["stuck"] == 0.0
