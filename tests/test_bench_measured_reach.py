"""bench/measured_reach.py: the LOCO contrast error, over all cells and over the deep-buffer cells alone, on the
committed fixture whose two conditions sit behind 0.7 and 1.7 BDP (tests/fixtures/oracle-validate)."""

import math
from pathlib import Path

import numpy as np

from tailor.oracle.measured import MeasuredOracle

FIXTURE = Path(__file__).parent / "fixtures" / "oracle-validate"


def test_contrast_errors_split_the_deep_cells(bench_script, monkeypatch):
    mr = bench_script("measured_reach")
    oracle = MeasuredOracle(FIXTURE, pages="none", page_dataset=FIXTURE, page_extra=(), object_extra=())
    err, deep = mr.contrast_errors(oracle, "objects")
    assert err > 0 and math.isnan(deep)  # no cell behind >= 2 BDP
    assert mr.contrast_error(oracle, "objects") == err
    monkeypatch.setattr(mr, "DEEP_BDP", 1.0)  # now the 1.7-BDP condition ("reversed") is the deep one
    err1, deep1 = mr.contrast_errors(oracle, "objects")
    assert err1 == err and 0 < deep1 and not np.isclose(deep1, err)  # one of the two cells: not their mean
