"""bench/tailor_acceptance.py's merge of a campaign's halves: the union of the runs, refused where two files hold
different runs under one key (a campaign split over processes must not silently keep one of two results)."""

import json

import pytest


def test_merge_is_the_union_and_refuses_two_different_runs_under_one_key(tmp_path, bench_script):
    acc = bench_script("tailor_acceptance")
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps({"runs": {"x|model|1": {"v": 1}, "x|model|0": {"v": 0}}}))
    b.write_text(json.dumps({"runs": {"x|measured|0": {"v": 2}, "x|model|0": {"v": 0}}}))
    merged = acc.merge([a, b])
    assert list(merged["runs"]) == ["x|measured|0", "x|model|0", "x|model|1"]
    assert merged["runs"]["x|measured|0"] == {"v": 2}
    b.write_text(json.dumps({"runs": {"x|model|0": {"v": 9}}}))
    with pytest.raises(SystemExit, match="x\\|model\\|0 differs"):
        acc.merge([a, b])


def test_merge_takes_one_oracles_runs_from_a_file_given_as_file_colon_oracle(tmp_path, bench_script):
    acc = bench_script("tailor_acceptance")
    old, rerun = tmp_path / "old.json", tmp_path / "rerun.json"
    old.write_text(json.dumps({"runs": {"x|model|0": {"v": "old model"}, "x|measured|0": {"v": "measured"}}}))
    rerun.write_text(json.dumps({"runs": {"x|model|0": {"v": "new model"}}}))
    merged = acc.merge([f"{old}:measured", rerun])
    assert merged["runs"] == {"x|measured|0": {"v": "measured"}, "x|model|0": {"v": "new model"}}
    with pytest.raises(SystemExit, match="x\\|model\\|0 differs"):
        acc.merge([old, rerun])
    with pytest.raises(SystemExit, match="no such campaign file"):
        acc.merge([tmp_path / "absent.json"])
