"""bench/testbed_more_reps.py: per measured point, the median before (repetitions below ``first``), of the new
repetitions alone and over all of them; the "more than 5% slower than the default" verdicts before and after."""

import math

import pandas as pd


def _rows(cond, cc, iw, http, times, loss=0.01):
    return [{"condition": cond, "size_bytes": 10240, "cc": cc, "iw": iw, "rto_min_ms": 200, "http": http,
             "rep": r, "completion_ms": t, "ok": True, "page": None, "loss": loss} for r, t in enumerate(times)]


def _df():
    rows = (_rows("lossy", "cubic", 10, "1.1", [100, 100, 100, 100, 100, 100])
            # one unlucky draw among three made it 'degraded'; three more repetitions say it is not
            + _rows("lossy", "bbr", 32, "2", [100, 180, 190, 100, 101, 102])
            + _rows("lossy", "reno", 4, "1.1", [100, 100, 100, 120, 120, 120])
            + _rows("lossy", "cubic", 4, "2", [90, 90, 90]))  # nothing added: not a point here
    return pd.DataFrame(rows)


def test_points_split_the_repetitions_at_first(bench_script):
    mr = bench_script("testbed_more_reps")
    p = mr.points(_df(), 3).set_index(["cc", "iw"])
    assert len(p) == 3  # cubic IW 4 had no new repetitions
    b = p.loc[("bbr", 32)]
    assert (b["old"], b["new_only"], b["all"], b["n_old"], b["n_new"]) == (180, 101, 101.5, 3, 3)
    assert math.isclose(b["change"], math.log(101.5 / 180))
    assert math.isclose(p.loc[("reno", 4), "replicate"], math.log(1.2))


def test_verdicts_against_the_default_of_the_same_cell(bench_script):
    mr = bench_script("testbed_more_reps")
    v = mr.verdicts(mr.points(_df(), 3)).set_index(["cc", "iw"])
    assert len(v) == 2  # the default itself is not a verdict
    assert bool(v.loc[("bbr", 32), "slow_before"]) and not bool(v.loc[("bbr", 32), "slow_after"])
    assert not bool(v.loc[("reno", 4), "slow_before"]) and bool(v.loc[("reno", 4), "slow_after"])  # 110 > 105
