"""tailor oracle validate on a committed fixture whose answer is known by construction (fixtures/oracle-validate)."""

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tailor.cli import main
from tailor.errors import OracleError
from tailor.oracle.measured import MeasuredOracle
from tailor.oracle.validate import cell_scores, validate, validate_oracle

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
    """With two conditions, each is predicted from the other's ratios alone: carried unchanged (reach = inf), the
    reversed one's order; with the default reach, the other's contrasts fade towards the model's with the distance."""
    carried = MeasuredOracle(FIXTURE, pages="measured", page_dataset=FIXTURE, page_extra=(), reach=float("inf"))
    s, rows = validate_oracle("measured", carried, "objects")
    assert s["cells"] == 2 and s["best_agrees"] == 0.0
    assert np.allclose([r["rho"] for r in rows], -1.0)
    s = validate(FIXTURE, ("measured",), ("objects",))["oracles"]["measured"]["objects"]
    rho = {r["condition"]: r["rho"] for r in s["rows"]}
    assert s["cells"] == 2
    assert rho["reversed"] == pytest.approx(-1.0)  # predicted from "same": the model's contrasts, the reverse of its own
    assert rho["same"] > -1.0  # the reversed contrasts, faded: no longer the exact reverse
    # the buffer is a distance too (same queue in packets, 0.7 vs 1.7 BDPs): without it the fade is weaker
    no_buffer = MeasuredOracle(FIXTURE, pages="measured", page_dataset=FIXTURE, page_extra=(), buffer_unit=float("inf"))
    rho_nb = {r["condition"]: r["rho"] for r in validate_oracle("measured", no_buffer, "objects")[1]}
    assert -1.0 < rho_nb["same"] < 1.0 and rho_nb["same"] <= rho["same"]


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
    from tailor.oracle.measured import OBJECT_DATASET, PAGE_DATASET

    if (PAGE_DATASET / "pages" / "measurements.parquet").exists():  # pages are judged on the page campaign
        assert v["figures"]["model"]["pages"]["dataset"] == PAGE_DATASET.name
        assert v["figures"]["model"]["objects"]["dataset"] != PAGE_DATASET.name
        assert v["figures"]["model"]["pages"]["split_half_median"] is not None
    if (OBJECT_DATASET / "measurements.parquet").exists():  # objects on the object campaign, with its intervals
        assert all(v["figures"][n]["objects"]["dataset"] == OBJECT_DATASET.name for n in ("model", "measured"))
        assert v["figures"]["model"]["objects"]["in_interval"] is not None


def _campaign(site, page: str, workload: str) -> tuple[list[dict], list[dict]]:
    """(fetch rows, stored intervals) of a campaign measuring ``site`` under four configurations: condition ``same``
    in the model's order, ``reversed`` in the reverse order, 3 repetitions each, intervals of +-1% (narrow enough
    that the model's choice is resolvably worse there). ``page``: the rows' page name ("" for an object);
    ``workload``: the intervals' (the page name, or an object's size in bytes as the campaign writes it)."""
    from tailor.oracle.measured import _anchor_space, _model_ms, queue_bdp

    configs = [("cubic", 4, 200, "1.1"), ("cubic", 10, 200, "1.1"), ("cubic", 32, 200, "2"), ("bbr", 10, 200, "2")]
    space = _anchor_space(pd.DataFrame(configs, columns=["cc", "iw", "rto_min_ms", "http"]))
    where = {(c["tcp.congestion_control"], c["tcp.initial_cwnd"], c["tcp.rto_min_ms"], c["http.version"]): i
             for i, c in enumerate(space.configs)}
    rows, ivs = [], []
    for cond, bw, rtt, qp in (("same", 10.0, 50.0, 40), ("reversed", 2.0, 200.0, 60)):
        model = _model_ms(site, [bw], [rtt], [0.0], [float(queue_bdp(bw, rtt, qp))], space)[0, [where[k] for k in configs]]
        times = model if cond == "same" else np.sort(model)[::-1][np.argsort(np.argsort(model))]
        for (cc, iw, rto, http), t in zip(configs, times, strict=True):
            for rep in range(3):
                rows.append({"condition": cond, "down_mbps": bw, "rtt_ms": rtt, "loss": 0.0, "queue_packets": qp,
                             "size_bytes": site.total_bytes, "page": page, "cc": cc, "iw": iw, "rto_min_ms": rto,
                             "http": http, "rep": rep, "ok": True, "completion_ms": float(t)})
            ivs.append({"condition": cond, "workload": workload, "cc": cc, "iw": iw, "rto_min_ms": rto, "http": http,
                        "batch": "", "lo_ms": 0.99 * t, "hi_ms": 1.01 * t})
    return rows, ivs


def _page_dataset(root: Path) -> None:
    """A page-only campaign (tb-v3 layout) with stored intervals: condition ``same`` measures the model's order,
    ``reversed`` the reverse order with intervals narrow enough that the model's choice is resolvably worse."""
    from tailor.oracle.websites import make_page

    objs = [{"size_bytes": 15000, "origin": 0, "level": 0, "kind": "html"}] + \
           [{"size_bytes": 40000, "origin": i % 2, "level": 1, "kind": "image"} for i in range(6)]
    site = make_page("p", [(o["size_bytes"], o["origin"], o["level"], o["kind"]) for o in objs])
    rows, ivs = _campaign(site, "p", "p")
    (root / "pages").mkdir(parents=True)
    pd.DataFrame(rows).to_parquet(root / "pages" / "measurements.parquet", index=False)
    pd.DataFrame(ivs).to_parquet(root / "pages" / "intervals.parquet", index=False)
    (root / "pages" / "pages.json").write_text(json.dumps({"p": objs}))


def test_page_campaign_dataset_reports_choices_within_the_best_interval(tmp_path, capsys):
    _page_dataset(tmp_path)
    s = validate(tmp_path, ("model",), ("objects", "pages"))["oracles"]["model"]
    assert s["objects"]["covered"] is False  # a page-only campaign has no object cells
    rows = {r["condition"]: r for r in s["pages"]["rows"]}
    assert rows["same"]["in_interval"] is True and rows["same"]["cost"] == 0.0
    assert rows["reversed"]["in_interval"] is False and rows["reversed"]["cost"] > 0.02
    assert s["pages"]["in_interval"] == 0.5
    assert main(["oracle", "validate", "--dataset", str(tmp_path), "--oracle", "model"]) == 0
    assert "| model | pages | 2 | 2 | " in capsys.readouterr().out


def _object_dataset(root: Path) -> None:
    """An object-only campaign (tb-v3-objects layout: measurements and intervals at the top, the intervals' workload
    the size in bytes) of 100 KB responses: condition ``same`` measures the model's order, ``reversed`` the reverse
    order with intervals narrow enough that the model's choice is resolvably worse."""
    from tailor.oracle.websites import default_catalog

    site = default_catalog()["object-100KB"]
    rows, ivs = _campaign(site, "", str(site.total_bytes))
    root.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_parquet(root / "measurements.parquet", index=False)
    pd.DataFrame(ivs).to_parquet(root / "intervals.parquet", index=False)


def test_object_campaign_dataset_reports_choices_within_the_best_interval(tmp_path):
    _object_dataset(tmp_path)
    s = validate(tmp_path, ("model",), ("objects",))["oracles"]["model"]["objects"]
    rows = {r["condition"]: r for r in s["rows"]}
    assert rows["same"]["in_interval"] is True and rows["same"]["cost"] == 0.0
    assert rows["reversed"]["in_interval"] is False and rows["reversed"]["cost"] > 0.02
    assert s["in_interval"] == 0.5


def test_the_timeline_model_is_validated_on_request(tmp_path, capsys):
    """``--oracle model-timeline``: the model with the page timeline, through the same figures."""
    _page_dataset(tmp_path)
    s = validate(tmp_path, ("model-timeline",), ("pages",))["oracles"]["model-timeline"]["pages"]
    assert s["cells"] == 2 and -1.0 <= s["rho_median"] <= 1.0 and s["cost_median"] >= 0.0
    assert main(["oracle", "validate", "--dataset", str(tmp_path), "--oracle", "model-timeline"]) == 0
    assert "| model-timeline | pages | 2 | 2 | " in capsys.readouterr().out


def _calibration_dataset(root: Path, value: float) -> None:
    """Page loads measured as the model's own times with OVERSHOOT_RECOVERY_RTT = ``value`` on four conditions
    whose one-BDP buffers a loss-based slow start overflows (where the constant matters)."""
    from tailor.oracle.calibrate import _constant
    from tailor.oracle.measured import _anchor_space, _model_ms, queue_bdp
    from tailor.oracle.websites import make_page

    objs = [{"size_bytes": 15000, "origin": 0, "level": 0, "kind": "html"}] + \
           [{"size_bytes": 90000, "origin": i % 2, "level": 1, "kind": "image"} for i in range(8)]
    site = make_page("p", [(o["size_bytes"], o["origin"], o["level"], o["kind"]) for o in objs])
    configs = [(cc, iw, 200, http) for cc in ("cubic", "bbr") for iw in (4, 10, 32) for http in ("1.1", "2")]
    space = _anchor_space(pd.DataFrame(configs, columns=["cc", "iw", "rto_min_ms", "http"]))
    where = {(c["tcp.congestion_control"], c["tcp.initial_cwnd"], c["tcp.rto_min_ms"], c["http.version"]): i
             for i, c in enumerate(space.configs)}
    rows = []
    for cond, bw, rtt in (("a", 10.0, 50.0), ("b", 5.0, 100.0), ("c", 20.0, 40.0), ("d", 3.0, 120.0)):
        qp = round(bw * 1e6 / 8 * rtt / 1000 / 1448)  # one BDP of queue
        with _constant(value):
            times = _model_ms(site, [bw], [rtt], [0.0], [float(queue_bdp(bw, rtt, qp))], space)[0, [where[k] for k in configs]]
        for (cc, iw, rto, http), t in zip(configs, times, strict=True):
            for rep in range(3):
                rows.append({"condition": cond, "down_mbps": bw, "rtt_ms": rtt, "loss": 0.0, "queue_packets": qp,
                             "size_bytes": site.total_bytes, "page": "p", "cc": cc, "iw": iw, "rto_min_ms": rto,
                             "http": http, "rep": rep, "ok": True, "completion_ms": float(t)})
    (root / "pages").mkdir(parents=True)
    pd.DataFrame(rows).to_parquet(root / "pages" / "measurements.parquet", index=False)
    (root / "pages" / "pages.json").write_text(json.dumps({"p": objs}))


@pytest.mark.parametrize("truth", [0.0, 1.0])
def test_calibrate_recovers_the_constant_that_made_the_data(tmp_path, truth):
    """Data made by the model at a known constant: every fold picks it, and the held-out order is exact."""
    from tailor.oracle.calibrate import calibrate, score_rows

    _calibration_dataset(tmp_path, truth)
    rows = score_rows(tmp_path, (0.0, 1.0))
    assert not np.allclose(rows[0.0]["rho"], rows[1.0]["rho"])  # the constant changes the order here
    result = calibrate(tmp_path, values=(0.0, 0.5, 1.0))
    assert [f["chosen"] for f in result["folds"]] == [truth] * 4 and result["fitted_on_all"] == truth
    held = result["held_out"]["pages"]
    assert held["cells"] == 4 and held["rho_median"] == pytest.approx(1.0) and held["cost_p90"] == 0.0
    with pytest.raises(OracleError):
        calibrate(tmp_path, values=(0.0, 2.0))  # above one RTT: time would fall as loss rises


def test_calibrate_fits_the_constant_for_the_timeline_on_request(tmp_path, capsys):
    """The same leave-one-condition-out choice for the page timeline (``--oracle model-timeline``); the data here
    were made by the levels, so only the bookkeeping is checked."""
    from tailor.oracle.calibrate import calibrate

    _calibration_dataset(tmp_path, 1.0)
    result = calibrate(tmp_path, values=(0.0, 1.0), model="model-timeline")
    assert result["oracle"] == "model-timeline" and len(result["folds"]) == 4
    assert result["held_out"]["pages"]["cells"] == 4 and result["fitted_on_all"] in (0.0, 1.0)
    with pytest.raises(OracleError, match="'oracle' parameter"):
        calibrate(tmp_path, model="model-v9")
    assert main(["oracle", "calibrate", "--dataset", str(tmp_path), "--oracle", "model-timeline"]) == 0
    assert "oracle model-timeline" in capsys.readouterr().out


def test_calibrate_command_prints_the_held_out_figures(tmp_path, capsys):
    _calibration_dataset(tmp_path, 1.0)
    assert main(["oracle", "calibrate", "--dataset", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "| pages, held-out conditions | 4 | 1.00 |" in out and "fitted on all conditions: 1" in out


def test_split_half_rho_is_the_agreement_of_odd_and_even_repetitions(tmp_path):
    """Even repetitions in one order and odd ones in the reverse: the halves disagree completely (rho -1);
    identical repetitions agree (rho 1)."""
    from tailor.oracle.validate import split_halves

    configs = [("cubic", 4, 200, "1.1"), ("cubic", 10, 200, "1.1"), ("bbr", 10, 200, "2"), ("bbr", 32, 200, "2")]
    rows = []
    for cond in ("flip", "steady"):
        for i, (cc, iw, rto, http) in enumerate(configs):
            for rep in range(4):
                t = 1000.0 + 100 * (i if cond == "steady" or rep % 2 == 0 else len(configs) - 1 - i)
                rows.append({"condition": cond, "size_bytes": 5000, "page": "p", "cc": cc, "iw": iw, "rto_min_ms": rto,
                             "http": http, "rep": rep, "started_unix": 10.0 * rep + i, "ok": True, "completion_ms": t})
    (tmp_path / "pages").mkdir()
    pd.DataFrame(rows).to_parquet(tmp_path / "pages" / "measurements.parquet", index=False)
    halves = split_halves(tmp_path, "pages")
    assert halves[("flip", 5000, "p")] == pytest.approx(-1.0) and halves[("steady", 5000, "p")] == pytest.approx(1.0)
    assert split_halves(tmp_path, "objects") == {}  # no object measurements in a page campaign


def test_knob_contrasts_name_the_mechanism_an_oracle_misses():
    from tailor.oracle.validate import cell_contrasts, contrast_summary

    keys = [(cc, 10, 200, http) for cc in ("cubic", "bbr") for http in ("1.1", "2")]
    measured = [1200.0, 1000.0, 1080.0, 900.0]  # HTTP/1.1 1.2x HTTP/2, BBR 0.9x CUBIC
    predicted = [1000.0, 1000.0, 900.0, 900.0]  # the oracle has BBR right and HTTP/1.1 = HTTP/2
    c = cell_contrasts(keys, measured, predicted)
    assert set(c) == {"HTTP/1.1 vs 2", "BBR vs CUBIC"}  # no IW, Reno or RTO pairs in this cell
    assert c["HTTP/1.1 vs 2"] == {"measured": pytest.approx(1.2), "oracle": pytest.approx(1.0), "pairs": 2}
    assert c["BBR vs CUBIC"]["measured"] == pytest.approx(0.9) and c["BBR vs CUBIC"]["oracle"] == pytest.approx(0.9)
    s = contrast_summary([{"condition": "c", "workload": "w", "contrasts": c}])
    assert s["HTTP/1.1 vs 2"]["direction_agrees"] == 0.0  # "no difference" is not the measured direction
    assert s["HTTP/1.1 vs 2"]["log_error_median"] == pytest.approx(math.log(1.2))
    assert s["BBR vs CUBIC"]["direction_agrees"] == 1.0 and s["BBR vs CUBIC"]["log_error_median"] == pytest.approx(0)
    # the command's rows carry them: the fixture's "same" condition (the model's order) has the model's directions
    rows = validate(FIXTURE, ("model",), ("objects",))["oracles"]["model"]["objects"]["rows"]
    same = next(r for r in rows if r["condition"] == "same")["contrasts"]
    assert {"IW 4 vs 10", "IW 32 vs 10"} <= set(same)
    assert all((v["measured"] > 1) == (v["oracle"] > 1) for v in same.values())


def test_one_line_names_the_knob_the_oracle_gets_most_wrong():
    from tailor.oracle.validate import one_line

    pages = {"covered": True, "rho_median": 0.65, "cost_median": 0.001, "cost_p90": 0.102, "cells": 36,
             "contrasts": {"BBR vs CUBIC": {"log_error_median": 0.046}, "HTTP/1.1 vs 2": {"log_error_median": 0.113}}}
    line = one_line("model", {"pages": pages, "objects": {"covered": False}})
    assert line.startswith("model: pages rho 0.65") and "furthest off on HTTP/1.1 vs 2 (|log error| 0.113)" in line
    assert "does not hold" in line
    assert "furthest" not in one_line("model", {"pages": {**pages, "contrasts": {}}})


def test_split_half_cost_is_what_choosing_by_one_half_costs_in_the_other(tmp_path):
    """Odd repetitions rank configuration 0 first, even ones configuration 1 (20% faster): choosing by the odd half
    costs 25% in the even half (1200 / 960 - 1), choosing by the even half costs 0% in the odd half (960 is not
    measured there: 1000 vs 1000); identical halves cost nothing. The summary reports the floor and the oracle's
    figures on the reproducible cells only."""
    from tailor.oracle.validate import REPRODUCIBLE_RHO, split_half_costs, summarize

    times = {"flip": [(1000.0, 1200.0), (1000.0, 960.0), (1500.0, 1500.0)],
             "steady": [(1000.0, 1000.0), (1100.0, 1100.0), (1300.0, 1300.0)]}
    configs = [("cubic", 10, 200, "1.1"), ("bbr", 10, 200, "2"), ("bbr", 32, 200, "2")]
    rows = []
    for cond, per_config in times.items():
        for (cc, iw, rto, http), (odd, even) in zip(configs, per_config):
            for rep in range(4):
                rows.append({"condition": cond, "size_bytes": 5000, "page": "p", "cc": cc, "iw": iw, "rto_min_ms": rto,
                             "http": http, "rep": rep, "started_unix": 10.0 * rep, "ok": True,
                             "completion_ms": odd if rep % 2 == 0 else even})
    (tmp_path / "pages").mkdir()
    pd.DataFrame(rows).to_parquet(tmp_path / "pages" / "measurements.parquet", index=False)
    costs = split_half_costs(tmp_path, "pages")
    # by odd: config 0 (1000, tie with config 1: argmin takes the first) -> even 1200 / 960 - 1 = 0.25;
    # by even: config 1 (960) -> odd 1000 / 1000 - 1 = 0
    assert costs[("flip", 5000, "p")] == pytest.approx(0.125) and costs[("steady", 5000, "p")] == 0.0
    cell = {"configs": 3, "reps_median": 4.0, "cv_median": 0.0, "agree": True, "log_error": 0.0, "in_interval": math.nan}
    s = summarize([{**cell, "condition": "flip", "workload": "w", "rho": 0.5, "cost": 0.3, "split_half": 0.5,
                    "split_half_cost": 0.125},
                   {**cell, "condition": "steady", "workload": "w", "rho": 1.0, "cost": 0.0,
                    "split_half": REPRODUCIBLE_RHO, "split_half_cost": 0.0}])
    assert s["noise_floor"]["cells"] == 2 and s["noise_floor"]["cost_median"] == pytest.approx(0.0625)
    assert s["reproducible"] == {"cells": 1, "of": 2, "rho_median": 1.0, "cost_median": 0.0, "cost_p90": 0.0}
