"""Off-policy estimators (tailor.ope) on a synthetic contextual bandit whose true target value is known exactly."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from scipy.stats import t as student_t

from tailor.ope import (
    Estimate,
    bootstrap_interval,
    direct_method,
    doubly_robust,
    importance_weights,
    shrunk_weights,
    snips,
)

# 3 contexts x 4 arms: context frequencies, mean cost of each arm (seconds), logging and target policies.
P_X = np.array([0.5, 0.3, 0.2])
MU = np.array([[2.0, 3.0, 5.0, 8.0], [1.0, 6.0, 2.5, 4.0], [7.0, 1.5, 3.0, 2.0]])
PI_LOG = np.array([[0.4, 0.3, 0.2, 0.1], [0.25, 0.25, 0.25, 0.25], [0.1, 0.2, 0.3, 0.4]])
PI_TGT = np.array([[0.7, 0.1, 0.1, 0.1], [0.6, 0.0, 0.3, 0.1], [0.05, 0.8, 0.05, 0.1]])
SIGMA = 0.5  # lognormal noise, scaled so that each arm's mean cost is exactly MU
TRUE_VALUE = float(P_X @ (PI_TGT * MU).sum(axis=1))
BIASED_Q = 1.3 * MU + 0.5  # a deliberately wrong cost model
R, N = 300, 2000  # replications x records per replication
SHRINK = 4.0  # lambda of the shrunk DR below: the largest weight here (0.8 / 0.1 = 8) is shrunk to 0.47


def simulate(rng: np.random.Generator, reps: int, n: int, pi_log: np.ndarray = PI_LOG) -> dict[str, np.ndarray]:
    """`reps` independent logs of `n` records each, as (reps, n) arrays."""
    x = rng.choice(len(P_X), size=(reps, n), p=P_X)
    u = rng.random((reps, n))
    a = np.minimum((u[..., None] >= np.cumsum(pi_log, axis=1)[x]).sum(axis=-1), MU.shape[1] - 1)
    cost = MU[x, a] * np.exp(SIGMA * rng.standard_normal((reps, n)) - SIGMA**2 / 2)
    return {"x": x, "a": a, "cost": cost, "logged_p": pi_log[x, a], "target_p": PI_TGT[x, a]}


def q_arrays(d: dict[str, np.ndarray], q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(q_logged, q_target) of cost model q (contexts x arms) for every record."""
    return q[d["x"], d["a"]], (PI_TGT * q).sum(axis=1)[d["x"]]


@pytest.fixture(scope="module")
def replications() -> dict[str, list[Estimate]]:
    d = simulate(np.random.default_rng(20150601), R, N)
    ql_perfect, qt_perfect = q_arrays(d, MU)
    ql_biased, qt_biased = q_arrays(d, BIASED_Q)
    names = ("snips", "dr_perfect", "dr_biased", "dr_biased_plain", "dm_biased", "dr_perfect_shrunk",
             "dr_biased_shrunk")
    out: dict[str, list[Estimate]] = {k: [] for k in names}
    for r in range(R):
        c, lp, tp = d["cost"][r], d["logged_p"][r], d["target_p"][r]
        out["snips"].append(snips(c, lp, tp))
        out["dr_perfect"].append(doubly_robust(c, lp, tp, ql_perfect[r], qt_perfect[r]))
        out["dr_biased"].append(doubly_robust(c, lp, tp, ql_biased[r], qt_biased[r]))
        out["dr_biased_plain"].append(doubly_robust(c, lp, tp, ql_biased[r], qt_biased[r], self_normalise=False))
        out["dm_biased"].append(direct_method(qt_biased[r]))
        out["dr_perfect_shrunk"].append(doubly_robust(c, lp, tp, ql_perfect[r], qt_perfect[r], self_normalise=False,
                                                      shrink=SHRINK))
        out["dr_biased_shrunk"].append(doubly_robust(c, lp, tp, ql_biased[r], qt_biased[r], self_normalise=False,
                                                     shrink=SHRINK))
    return out


def values(es: list[Estimate]) -> np.ndarray:
    return np.array([e.value for e in es])


def z_of_mean(es: list[Estimate]) -> float:
    """How many standard errors the mean over replications lies from the true value."""
    v = values(es)
    return float((v.mean() - TRUE_VALUE) / (v.std(ddof=1) / np.sqrt(v.size)))


def coverage(es: list[Estimate]) -> float:
    return float(np.mean([e.low <= TRUE_VALUE <= e.high for e in es]))


def test_policies_are_valid_and_differ() -> None:
    for pi in (PI_LOG, PI_TGT):
        assert np.allclose(pi.sum(axis=1), 1.0) and (pi >= 0).all()
    assert (PI_LOG > 0).all()  # positivity
    assert abs(TRUE_VALUE - float(P_X @ (PI_LOG * MU).sum(axis=1))) > 0.5  # off-policy: the plain mean is wrong


@pytest.mark.parametrize("name", ["snips", "dr_perfect", "dr_biased", "dr_biased_plain", "dr_perfect_shrunk"])
def test_unbiased_over_replications(replications: dict[str, list[Estimate]], name: str) -> None:
    assert abs(z_of_mean(replications[name])) < 4, (values(replications[name]).mean(), TRUE_VALUE)


def test_direct_method_with_biased_model_is_detected_as_biased(replications: dict[str, list[Estimate]]) -> None:
    assert abs(z_of_mean(replications["dm_biased"])) > 20
    assert abs(values(replications["dm_biased"]).mean() - TRUE_VALUE) > 0.5
    assert coverage(replications["dm_biased"]) < 0.5  # so the coverage check below can fail, too


@pytest.mark.parametrize("name", ["snips", "dr_perfect", "dr_biased", "dr_biased_plain", "dr_perfect_shrunk"])
def test_interval_coverage(replications: dict[str, list[Estimate]], name: str) -> None:
    assert 0.90 <= coverage(replications[name]) <= 0.99
    assert all(e.level == 0.95 and e.n == N for e in replications[name])


def test_dr_with_perfect_model_has_smaller_variance_than_snips(replications: dict[str, list[Estimate]]) -> None:
    var_dr = values(replications["dr_perfect"]).var(ddof=1)
    var_snips = values(replications["snips"]).var(ddof=1)
    assert var_dr < 0.8 * var_snips
    # and the analytic intervals reflect it
    width = {k: np.mean([e.high - e.low for e in replications[k]]) for k in ("dr_perfect", "snips")}
    assert width["dr_perfect"] < width["snips"]


def test_shrunk_dr_leans_towards_the_model_only_by_the_shrunk_share(replications: dict[str, list[Estimate]]) -> None:
    """With a correct cost model the shrunk correction has mean 0 (unbiased above); with a wrong one shrinkage
    brings back part of the model's bias: the mean lands strictly between DR's (unbiased) and DM's."""
    dr, dm, shrunk = (values(replications[k]).mean() for k in ("dr_biased_plain", "dm_biased", "dr_biased_shrunk"))
    assert abs(dr - TRUE_VALUE) < 0.05 * abs(dm - TRUE_VALUE)
    assert min(dr, dm) < shrunk < max(dr, dm)
    assert abs(shrunk - TRUE_VALUE) > 0.05 * abs(dm - TRUE_VALUE)  # the weights here are shrunk enough to show


def test_shrunk_weights_bound_what_one_record_can_move() -> None:
    w = np.array([0.0, 1.0, 10.0, 100.0, 600.0])
    s = shrunk_weights(w, 100.0)
    assert s.tolist() == pytest.approx([0.0, 100 / 101, 5.0, 100 / 101, 60000 / 360100])
    assert shrunk_weights(w, None) is w
    assert np.all(shrunk_weights(np.linspace(0, 1000, 10001), 100.0) <= 5.0 + 1e-12)  # max sqrt(lambda) / 2
    # one record with weight 600 and a residual of 400 s among 15,000 moves plain DR by 16 s, shrunk DR by < 0.14 s
    n = 15000
    cost, q = np.full(n, 10.0), np.full(n, 10.0)
    cost[0] = 410.0
    lp, tp = np.ones(n), np.zeros(n)
    lp[0], tp[0] = 1 / 600, 1.0
    plain = doubly_robust(cost, lp, tp, q, q, self_normalise=False)
    shrunk = doubly_robust(cost, lp, tp, q, q, self_normalise=False, shrink=100.0)
    assert plain.value - 10.0 == pytest.approx(600 * 400 / n)
    assert 0 < shrunk.value - 10.0 < 5.0 * 400 / n
    assert shrunk.ess == plain.ess  # ess describes the logs' support, not the shrinkage


def test_snips_on_policy_is_the_plain_mean() -> None:
    d = simulate(np.random.default_rng(4), 1, 1000, pi_log=PI_TGT + 0.0)
    c, p = d["cost"][0], d["target_p"][0]
    e = snips(c, p, p.copy())
    assert e.value == np.mean(c)
    assert e.ess == pytest.approx(c.size)
    half = student_t.ppf(0.975, c.size - 1) * c.std(ddof=1) / np.sqrt(c.size)  # t on ess - 1 = n - 1
    assert (e.low, e.high) == pytest.approx((c.mean() - half, c.mean() + half))


def test_dr_with_constant_model_equals_snips() -> None:
    d = simulate(np.random.default_rng(5), 1, 500)
    c, lp, tp = d["cost"][0], d["logged_p"][0], d["target_p"][0]
    k = np.full_like(c, 3.0)
    dr, sn = doubly_robust(c, lp, tp, k, k), snips(c, lp, tp)
    assert dr.value == pytest.approx(sn.value, rel=1e-12)
    assert (dr.low, dr.high) == pytest.approx((sn.low, sn.high), rel=1e-12)


def test_importance_weights_ess_and_clip() -> None:
    w = importance_weights([0.5, 0.25, 1.0, 0.1], [1.0, 0.0, 1.0, 0.5])
    assert w.tolist() == pytest.approx([2.0, 0.0, 1.0, 5.0])
    assert importance_weights([0.5, 0.25, 1.0, 0.1], [1.0, 0.0, 1.0, 0.5], clip=3).tolist() == pytest.approx(
        [2.0, 0.0, 1.0, 3.0]
    )
    e = snips([1.0, 2.0, 3.0, 4.0], [0.5, 0.25, 1.0, 0.1], [1.0, 0.0, 1.0, 0.5])
    assert e.ess == pytest.approx(8.0**2 / 30.0)
    assert e.value == pytest.approx((2 * 1 + 3 + 5 * 4) / 8)


def test_zero_total_weight() -> None:
    e = snips([1.0, 2.0], [0.5, 0.5], [0.0, 0.0])
    assert np.isnan(e.value) and np.isnan(e.low) and np.isnan(e.high) and e.ess == 0 and e.n == 2
    dr = doubly_robust([1.0, 2.0], [0.5, 0.5], [0.0, 0.0], [1.0, 1.0], [3.0, 5.0])
    assert dr.value == pytest.approx(4.0) and dr.ess == 0  # falls back to the direct method
    assert doubly_robust([1.0, 2.0], [0.5, 0.5], [0.0, 0.0], [1.0, 1.0], [3.0, 5.0], self_normalise=False).value == 4.0


def test_estimate_is_frozen() -> None:
    e = direct_method([1.0, 2.0, 3.0])
    assert (e.estimator, e.value, e.n, e.ess) == ("dm", 2.0, 3, 3.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        e.value = 0.0  # type: ignore[misc]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: importance_weights([0.5, 0.0], [0.5, 0.5]), r"logged_p: must be in \(0, 1\], got 0.0 at index 1"),
        (lambda: importance_weights([0.5, -0.2], [0.5, 0.5]), r"logged_p: .*-0.2 at index 1"),
        (lambda: importance_weights([0.5, 1.5], [0.5, 0.5]), r"logged_p: must be in \(0, 1\]"),
        (lambda: importance_weights([np.nan, 0.5], [0.5, 0.5]), r"logged_p: must be finite, got nan at index 0"),
        (lambda: importance_weights([0.5, 0.5], [0.5, np.inf]), r"target_p: must be finite"),
        (lambda: importance_weights([0.5, 0.5], [0.5, -0.1]), r"target_p: must be in \[0, 1\]"),
        (lambda: importance_weights([0.5, 0.5], [0.5, 0.5, 0.5]), r"target_p: length 3 does not match logged_p"),
        (lambda: importance_weights([[0.5, 0.5]], [[0.5, 0.5]]), r"logged_p: must be 1-D"),
        (lambda: importance_weights([], []), r"logged_p: must not be empty"),
        (lambda: importance_weights([0.5], [0.5], clip=0), r"clip: must be a finite number > 0"),
        (lambda: shrunk_weights(np.ones(2), -1.0), r"shrink: must be a finite number > 0"),
        (lambda: doubly_robust([1.0], [0.5], [0.5], [1.0], [1.0], shrink=np.inf), r"shrink: must be a finite"),
        (lambda: snips([1.0, -1.0], [0.5, 0.5], [0.5, 0.5]), r"cost: must be >= 0, got -1.0 at index 1"),
        (lambda: snips([1.0, 2.0, 3.0], [0.5, 0.5], [0.5, 0.5]), r"logged_p: length 2 does not match cost"),
        (lambda: snips([1.0, 2.0], [0.5, 0.0], [0.5, 0.5]), r"logged_p: must be in \(0, 1\]"),
        (lambda: snips([1.0, 2.0], [0.5, 0.5], [0.5, 0.5], level=1.0), r"level: must be in \(0, 1\)"),
        (lambda: doubly_robust([1.0], [0.5], [0.5], [1.0, 2.0], [1.0]), r"q_logged: length 2 does not match cost"),
        (lambda: doubly_robust([1.0], [0.5], [0.5], [1.0], [np.nan]), r"q_target: must be finite"),
        (lambda: direct_method([1.0, 2.0], level=0), r"level: must be in \(0, 1\)"),
        (lambda: bootstrap_interval(np.mean, (np.ones(3), np.ones(2))), r"arrays: element 1"),
    ],
)
def test_validation_errors_name_the_argument(call, message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match=message):
        call()


def test_analytic_snips_interval_agrees_with_bootstrap() -> None:
    d = simulate(np.random.default_rng(7), 1, N)
    arrays = (d["cost"][0], d["logged_p"][0], d["target_p"][0])
    e = snips(*arrays)
    lo, hi = bootstrap_interval(snips, arrays, n_boot=500, seed=1)
    assert 1 / 1.5 < (e.high - e.low) / (hi - lo) < 1.5
    assert lo < e.value < hi
    assert bootstrap_interval(snips, arrays, n_boot=50, seed=1) == bootstrap_interval(snips, arrays, n_boot=50, seed=1)
    assert bootstrap_interval(snips, arrays, n_boot=50, seed=1) != bootstrap_interval(snips, arrays, n_boot=50, seed=2)
