"""bench/tailor_acceptance.py's merge of a campaign's halves: the union of the runs, refused where two files hold
different runs under one key (a campaign split over processes must not silently keep one of two results)."""

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _module():
    spec = importlib.util.spec_from_file_location("tailor_acceptance", ROOT / "bench" / "tailor_acceptance.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_merge_is_the_union_and_refuses_two_different_runs_under_one_key(tmp_path):
    acc = _module()
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps({"runs": {"x|model|1": {"v": 1}, "x|model|0": {"v": 0}}}))
    b.write_text(json.dumps({"runs": {"x|measured|0": {"v": 2}, "x|model|0": {"v": 0}}}))
    merged = acc.merge([a, b])
    assert list(merged["runs"]) == ["x|measured|0", "x|model|0", "x|model|1"]
    assert merged["runs"]["x|measured|0"] == {"v": 2}
    b.write_text(json.dumps({"runs": {"x|model|0": {"v": 9}}}))
    with pytest.raises(SystemExit, match="x\\|model\\|0 differs"):
        acc.merge([a, b])


def test_merge_takes_one_oracles_runs_from_a_file_given_as_file_colon_oracle(tmp_path):
    acc = _module()
    old, rerun = tmp_path / "old.json", tmp_path / "rerun.json"
    old.write_text(json.dumps({"runs": {"x|model|0": {"v": "old model"}, "x|measured|0": {"v": "measured"}}}))
    rerun.write_text(json.dumps({"runs": {"x|model|0": {"v": "new model"}}}))
    merged = acc.merge([f"{old}:measured", rerun])
    assert merged["runs"] == {"x|measured|0": {"v": "measured"}, "x|model|0": {"v": "new model"}}
    with pytest.raises(SystemExit, match="x\\|model\\|0 differs"):
        acc.merge([old, rerun])
    with pytest.raises(SystemExit, match="no such campaign file"):
        acc.merge([tmp_path / "absent.json"])
