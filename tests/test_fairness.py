"""Fairness experiment (Configanator §6.7): Jain's index, setup validation, summaries, and one tiny real mix."""

import json
import os
import shutil
import subprocess

import pytest

from tailor.errors import ParameterError
from tailor.testbed.fairness import CLIENT_IP, TUNED_SRC, FairnessSetup, _interleave, jain, markdown, summarize
from tailor.testbed.server import TestbedError as _TestbedError


def test_jain_index_bounds():
    assert jain([3, 3, 3, 3]) == pytest.approx(1.0)
    assert jain([1, 0, 0, 0]) == pytest.approx(0.25)
    assert jain([2, 1]) == pytest.approx(9 / 10)


def test_tuned_flows_are_spread_over_the_start_order():
    order = _interleave(30, 3)
    assert sorted(order) == list(range(30))
    tuned_pos = [i for i, f in enumerate(order) if f < 3]
    assert len(tuned_pos) == 3 and min(b - a for a, b in zip(tuned_pos, tuned_pos[1:])) >= 9
    assert _interleave(5, 0) == list(range(5)) and _interleave(5, 5) == list(range(5))


def test_setup_errors_name_the_field():
    with pytest.raises(ParameterError, match="flows"):
        FairnessSetup(flows=1)
    with pytest.raises(ParameterError, match="tuned_cc"):
        FairnessSetup(tuned_cc="vegas")
    with pytest.raises(ParameterError, match="mixes"):
        FairnessSetup(mixes=(1.5,))
    with pytest.raises(ParameterError, match="warmup_s"):
        FairnessSetup(duration_s=5, warmup_s=5)
    s = FairnessSetup(rate_mbit=30, rtt_ms=40)
    assert s.bdp_packets() == pytest.approx(100.0) and s.queue_packets(0.5) == 50


def _lines(goodputs, tuned, setup):
    n = int(setup.duration_s / 0.1) + 20
    out = []
    for i, (g, t) in enumerate(zip(goodputs, tuned)):
        per_bucket = int(g * 1e6 / 8 * 0.1)
        out.append({"flow": i, "tuned": t, "src": TUNED_SRC if t else CLIENT_IP, "buckets": [per_bucket] * n,
                    "error": ""})
        out.append({"sender": {"peer": f"{TUNED_SRC if t else CLIENT_IP}:1", "cc": "bbr" if t else "cubic"}})
    return out


def test_summary_computes_goodput_jain_and_ratio_and_rejects_wrong_cc():
    setup = FairnessSetup(flows=4, rate_mbit=4, duration_s=5, warmup_s=1)
    r = summarize(setup, 0.5, 1.0, 7, _lines([1.5, 1.5, 0.5, 0.5], [True, True, False, False], setup), 0, "", {},
                  {"load_start": 0.0, "started_unix": 0.0})
    assert r["tuned_over_default"] == pytest.approx(3.0, rel=1e-3)
    assert r["jain"] == pytest.approx(jain([1.5, 1.5, 0.5, 0.5]), rel=1e-3)
    assert "| 1 | 7 | 50% (2) |" in markdown({"setup": setup.__dict__ | {"mixes": [0.5], "buffers_bdp": [1.0]},
                                              "bdp_packets": 7, "started_utc": "x", "runs": [r]})
    bad = _lines([1, 1, 1, 1], [True, True, False, False], setup)
    bad[1]["sender"]["cc"] = "cubic"  # a tuned flow that ran the default algorithm
    with pytest.raises(_TestbedError, match="expected"):
        summarize(setup, 0.5, 1.0, 7, bad, 0, "", {}, {"load_start": 0.0, "started_unix": 0.0})


@pytest.mark.testbed
def test_one_tiny_mix_over_tailor_link(tmp_path):
    if os.geteuid() != 0 or not os.path.exists("/dev/net/tun"):
        pytest.skip("needs root and /dev/net/tun")
    if not (os.environ.get("TAILOR_LINK") or shutil.which("go") or os.path.exists("/usr/local/go/bin/go")):
        pytest.skip("no tailor-link binary and no Go toolchain to build it")
    from tailor.testbed.fairness import run_experiment
    from tailor.testbed.server import tailor_link_binary

    setup = FairnessSetup(flows=4, rate_mbit=4, rtt_ms=20, duration_s=5, warmup_s=1, mixes=(0.5,), buffers_bdp=(1.0,))
    before = set(subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split())
    res = run_experiment(setup, tailor_link_binary(), tmp_path / "f.json", progress=lambda s: None)
    (r,) = res["runs"]
    assert r["tuned_flows"] == 2 and r["sender_cc"] == ["bbr", "cubic"]
    assert 0.85 <= r["utilization"] <= 1.02, r  # the flows fill the 4 Mbit/s bottleneck, and no more
    assert 0.25 <= r["jain"] <= 1.0 and r["queue_drops"] > 0
    assert json.loads((tmp_path / "f.json").read_text())["runs"][0]["jain"] == r["jain"]
    assert (tmp_path / "f.md").read_text().count("\n|") >= 2
    after = set(subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split())
    assert not {n for n in after - before if n.startswith("tl-")}, after - before
