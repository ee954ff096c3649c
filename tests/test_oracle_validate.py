"""tailor oracle validate on a committed fixture whose answer is known by construction (fixtures/oracle-validate)."""

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tailor.cli import main
from tailor.errors import OracleError
from tailor.oracle.validate import cell_scores, validate

FIXTURE = Path(__file__).parent / "fixtures" / "oracle-validate"


def test_cell_scores_known_values():
    s = cell_scores([100, 200, 300], [1, 2, 3])
    assert s == {"rho": 1.0, "agree": True, "cost": 0.0, "log_error": pytest.approx(math.log(100))}
    s = cell_scores([100, 200, 300], [3, 2, 1])
    assert s["rho"] == pytest.approx(-1.0) and not s["agree"] and s["cost"] == pytest.approx(2.0)
    assert math.isnan(cell_scores([100, 100, 100], [1, 2, 3])["rho"])  # no order to agree with
    with pytest.raises(OracleError):
        cell_scores([100, float("nan")], [1, 2])


def test_model_on_fixture_has_the_constructed_answer():
    rows = {r["condition"]: r for r in validate(FIXTURE, ("model",), ("objects",))["oracles"]["model"]["objects"]["rows"]}
    times = pd.read_parquet(FIXTURE / "measurements.parquet").groupby("condition")["completion_ms"]
    same, rev = rows["same"], rows["reversed"]
    assert same["rho"] == pytest.approx(1.0) and same["agree"] and same["cost"] == 0.0
    assert same["log_error"] == pytest.approx(math.log(1.1), rel=1e-6)
    assert rev["rho"] == pytest.approx(-1.0) and not rev["agree"]
    worst_over_best = times.max()["reversed"] / times.min()["reversed"] - 1  # the model picks the slowest
    assert rev["cost"] == pytest.approx(worst_over_best)


def test_measured_is_leave_one_condition_out():
    """With two conditions, each is predicted from the other's ratios alone: the reversed one's order."""
    s = validate(FIXTURE, ("measured",), ("objects",))["oracles"]["measured"]["objects"]
    assert s["cells"] == 2 and s["best_agrees"] == 0.0
    assert np.allclose([r["rho"] for r in s["rows"]], -1.0)


def test_command_prints_and_writes_json(tmp_path, capsys):
    out = tmp_path / "v.json"
    assert main(["oracle", "validate", "--dataset", str(FIXTURE), "--oracle", "model", "--json", str(out)]) == 0
    assert "| model | objects | 2 | 2 | 0.00 |" in capsys.readouterr().out
    doc = json.loads(out.read_text())
    assert doc["oracles"]["model"]["quic"]["covered"] is False
    assert main(["oracle", "validate", "--dataset", str(tmp_path)]) == 2


def test_holds_uses_the_issue_targets():
    from tailor.oracle.validate import holds

    good = {"covered": True, "rho_median": 0.85, "cost_median": 0.015, "cost_p90": 0.09}
    assert holds(good, "pages")
    assert not holds({**good, "rho_median": 0.79}, "pages")
    assert not holds({**good, "cost_p90": 0.11}, "pages")
    assert not holds(good, "objects")  # objects need <= 1% median, <= 5% p90
    assert holds({**good, "cost_median": 0.01, "cost_p90": 0.05}, "objects")
    assert not holds({"covered": False}, "objects")


def test_auto_selection_carries_its_reason_and_figures(tmp_path, monkeypatch):
    """--oracle auto on the committed dataset: the choice, why, and both oracles' figures (cached)."""
    from tailor.oracle.select import select_oracle
    from tailor.oracle.validate import holds

    monkeypatch.setenv("TAILOR_CACHE_DIR", str(tmp_path))
    oracle = select_oracle("auto")
    v = oracle.validation
    assert v["chosen"] == oracle.kind and v["reason"]
    for name in ("model", "measured"):
        assert v["holds"][name] == all(holds(v["figures"][name][k], k) for k in ("objects", "pages"))
        assert v["figures"][name]["objects"]["cells"] > 0
    if not any(v["holds"].values()):
        assert "no oracle's validation holds" in v["reason"]
    assert len(list(tmp_path.glob("oracle-validation-*.json"))) == 1
    assert select_oracle("auto").validation["figures"] == v["figures"]  # second call reads the cache
