"""bench/edge_deep_check.py: a cell's comparison of measured and predicted times against the registry default."""

import math

import numpy as np


def test_compare_counts_verdicts_against_the_registry_default(bench_script):
    ec = bench_script("edge_deep_check")
    keys = [("cubic", 10, 200, "1.1"), ("bbr", 32, 200, "2"), ("cubic", 4, 200, "1.1"), ("reno", 10, 200, "2")]
    measured = np.array([100.0, 110.0, 104.0, 90.0])  # bbr IW 32 10% slower (a verdict), IW 4 4% (none)
    predicted = np.array([200.0, 204.0, 220.0, 180.0])  # the oracle: bbr 2% (none), IW 4 10% (a verdict)
    s = ec.compare(measured, predicted, keys)
    assert (s["slower_measured"], s["slower_oracle"], s["configs"]) == (1, 1, 3)
    assert math.isclose(s["verdict_agrees"], 1 / 3)  # only reno (faster on both sides) agrees
    assert math.isclose(s["contrast_error_median"], abs(math.log(1.10) - math.log(1.04)))  # the median of 3
    assert s["agree"] and s["cost"] == 0.0  # both choose reno
