"""bench/measured_shrink.py: empirical Bayes shrinkage of measured log medians towards a fitted structure, and the
contrasts with the registry default that the split-half check scores."""

import math

import numpy as np
import pandas as pd


def _meta(conditions, sizes, configs):
    return pd.DataFrame([{"condition": c, "size": s, "cc": cc, "iw": iw, "http": h}
                         for c in conditions for s in sizes for cc, iw, h in configs])


CONFIGS = [("cubic", 10, "1.1"), ("bbr", 32, "2"), ("reno", 4, "1.1"), ("cubic", 4, "2")]


def test_contrasts_are_against_the_default_of_the_same_condition_and_size(bench_script):
    ms = bench_script("measured_shrink")
    meta = _meta(["a", "b"], [10240], CONFIGS)
    logt = np.log(np.array([100, 120, 90, 100, 200, 180, 260, 200], float))
    c, ok = ms.contrasts(meta, logt)
    assert ok.tolist() == [False, True, True, True, False, True, True, True]
    assert math.isclose(c[1], math.log(1.2)) and math.isclose(c[6], math.log(1.3))


def test_shrinkage_beats_the_raw_medians_where_the_structure_holds_and_leaves_precise_points_alone(bench_script):
    """Truth = condition x size level + a configuration effect per size; noisy points are pulled towards it (lower
    error than the raw values), points measured with almost no noise keep their value."""
    ms = bench_script("measured_shrink")
    rng = np.random.default_rng(0)
    meta = _meta([f"c{i}" for i in range(12)], [10240, 102400, 1048576], CONFIGS)
    x = ms.design(meta, "cs+sk")
    truth = x @ rng.normal(0.0, 0.3, x.shape[1])
    groups = meta["condition"].to_numpy()
    noisy = np.full(len(meta), 0.04)
    y = truth + rng.normal(0.0, 0.2, len(meta))
    est = ms.shrunk(y, x, noisy, groups)
    assert np.mean((est - truth) ** 2) < 0.5 * np.mean((y - truth) ** 2)
    precise = np.full(len(meta), 1e-12)
    y2 = truth + rng.normal(0.0, 0.05, len(meta))  # real deviations the structure does not have, known exactly
    assert np.allclose(ms.shrunk(y2, x, precise, groups), y2, atol=1e-6)
