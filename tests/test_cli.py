"""The command-line contract scripts rely on (README: `tailor evaluate ... --json`)."""

import json

import pytest

from tailor.cli import main

KEYS = {"policy", "pageloads", "p5", "p25", "p50", "p75", "p95", "p95_plt_improvement", "degraded_share",
        "median_gap_to_optimal"}


def test_evaluate_json_one_object_per_policy(tmp_path, capsys):
    rc = main(["evaluate", "--policies", "default,random", "--sessions", "25", "--json", "--out", str(tmp_path)])
    assert rc == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["policy"] for r in rows] == ["default", "random"] and all(KEYS <= set(r) for r in rows)
    assert rows[0]["p50"] == 0.0
    for name in ("report.html", "results.parquet", "metadata.json", "summary.json", "tables/random.json"):
        assert (tmp_path / name).is_file(), name


def test_evaluate_repeat_reports_mean_and_ci(tmp_path, capsys):
    rc = main(["evaluate", "--policies", "default,random", "--sessions", "20", "--repeat", "2", "--json", "--no-report",
               "--out", str(tmp_path)])
    assert rc == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert all(r["seeds"] == 2 and "p50_ci95" in r for r in rows)
    assert (tmp_path / "seed-0" / "results.parquet").is_file() and (tmp_path / "seed-1" / "results.parquet").is_file()


def test_out_holds_one_runs_outputs_and_nothing_else_is_touched(tmp_path, capsys):
    """A second run into the same --out replaces the first's outputs as a whole (no tables or report of the first
    run stay beside the second's), and a failed run leaves the first's intact; a directory holding other files is
    refused (until 2026-12-07 files were overwritten one by one and the earlier run's others stayed; found by
    review)."""
    out = tmp_path / "ev"
    assert main(["evaluate", "--policies", "default,random", "--sessions", "15", "--json", "--out", str(out)]) == 0
    assert main(["evaluate", "--policies", "default", "--sessions", "15", "--seed", "2", "--json", "--no-report",
                 "--out", str(out)]) == 0
    assert "report.html" not in {p.name for p in out.iterdir()}  # the first run's, and the second wrote none
    assert [p.name for p in (out / "tables").iterdir()] == ["default.json"]
    assert json.loads((out / "metadata.json").read_text())["sim_config"]["seed"] == 2
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    assert main(["evaluate", "--policies", "default", "--sessions", "15", "--space", "nope", "--out", str(out)]) == 2
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging directory left
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    capsys.readouterr()
    assert main(["evaluate", "--policies", "default", "--sessions", "15", "--out", str(tmp_path / "other")]) == 2
    assert "notes.txt" in capsys.readouterr().err and (tmp_path / "other" / "notes.txt").read_text() == "mine"


def test_policy_param_reaches_the_policies_that_have_it(tmp_path, capsys):
    rc = main(["evaluate", "--policies", "random,mab-nc", "--sessions", "20", "--json", "--no-report",
               "--policy-param", "epsilon=0.25", "--out", str(tmp_path)])
    assert rc == 0
    meta = json.loads((tmp_path / "metadata.json").read_text())
    assert meta["policies"]["mab-nc"]["epsilon"] == 0.25 and "epsilon" not in meta["policies"]["random"]


@pytest.mark.parametrize("argv,needle", [
    (["evaluate", "--policies", "nope"], "registered policies"),
    (["evaluate", "--space", "nope"], "'name' parameter of ConfigSpace"),
    (["evaluate", "--allowed", "NoSuchThing"], "'allowed' parameter"),
    (["evaluate", "--scenario", "/nonexistent/file.scn"], "nonexistent"),
    (["evaluate", "--policies", "random,mab-nc", "--policy-param", "dt_leaf_mode=max"], "'policy-param' parameter"),
    (["evaluate", "--policies", "mab-nc", "--policy-param", "epsilon"], "KEY=VALUE"),
    (["evaluate", "--policies", "mab-nc", "--policy-param", "epsilon=2.0"], "'epsilon' parameter of MABNCPolicy"),
])
def test_bad_input_is_one_clear_error(argv, needle, capsys, tmp_path):
    assert main(argv + ["--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("tailor: error:") and needle in err[-1]
