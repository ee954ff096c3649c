"""Shared-link experiment (SmartIW's testbed, issue 14): schedules, setup validation, summaries, one tiny real run."""

import json
import os
import shutil
import subprocess

import numpy as np
import pytest

from tailor.errors import ParameterError
from tailor.testbed.server import TestbedError
from tailor.testbed.sharedlink import (LONE_GAP_S, SharedLinkSetup, behind_best, markdown, merge, paired, schedule,
                                       search_sizes, summarize)


def test_schedule_offers_the_load_and_is_the_same_for_every_initial_window():
    setup = SharedLinkSetup(rate_mbit=10, duration_s=600)
    flows = schedule(setup, 0.5, seed=3)
    offered = sum(size for _, size in flows) * 8 / setup.duration_s / 1e6
    assert offered == pytest.approx(5.0, rel=0.1)  # half of 10 Mbit/s, within sampling error over ~3,000 responses
    assert schedule(setup, 0.5, seed=3) == flows and schedule(setup, 0.5, seed=4) != flows
    starts = [t for t, _ in flows]
    assert starts == sorted(starts) and 0 < starts[0] and starts[-1] < setup.duration_s
    assert {size for _, size in flows} <= set(search_sizes()) and len(search_sizes()) == 10
    assert np.mean(search_sizes()) == pytest.approx(120 * 1024, rel=0.01)


def test_setup_errors_name_the_field():
    for kwargs, field in [({"loads": (1.2,)}, "loads"), ({"iws": (0,)}, "iws"), ({"queues": (1,)}, "queues"),
                          ({"cc": "vegas"}, "cc"), ({"iws": (10, 200), "initrwnd": 100}, "initrwnd"),
                          ({"duration_s": 5, "warmup_s": 4.5}, "warmup_s")]:
        with pytest.raises(ParameterError, match=field):
            SharedLinkSetup(**kwargs)
    assert SharedLinkSetup(rate_mbit=10, rtt_ms=60).bdp_packets() == pytest.approx(50.0)


def test_lone_responses_are_sent_one_at_a_time_and_tabled_per_size():
    setup = SharedLinkSetup(iws=(64, 200), queues=(50,), lone=(20, 52, 199), duration_s=1 + 3 * LONE_GAP_S, warmup_s=1)
    flows = schedule(setup, 0.05, seed=1)
    assert flows == [(1.0, 20 * 1448), (1.0 + LONE_GAP_S, 52 * 1448), (1.0 + 2 * LONE_GAP_S, 199 * 1448)]
    assert schedule(setup, 0.6, seed=7) == flows  # load and seed only label a lone run
    with pytest.raises(ParameterError, match="lone"):
        SharedLinkSetup(lone=(0,))
    with pytest.raises(ParameterError, match="duration_s"):
        SharedLinkSetup(lone=tuple(range(1, 30)), duration_s=30)
    runs = [_run(setup, iw, flows, times, srtt=60, retrans=r) for iw, times, r in
            ((64, [85, 110, 300], [0, 0, 0]), (200, [85, 521, 943], [0, 1, 148]))]
    table = markdown({"setup": setup.__dict__, "bdp_packets": 50, "started_utc": "x", "runs": runs})
    assert "Lone responses (3 sizes" in table and "| 199 | 300 / 0 / ? | 943 / 148 / ? |" in table


def _run(setup, iw, flows, times, srtt, retrans, drops=0):
    lines = [{"flow": i, "local_port": 1000 + i, "response_ms": t, "late_ms": 0.1, "error": ""}
             for i, t in enumerate(times)]
    served = [{"peer_port": 1000 + i, "cc": setup.cc, "srtt_us": srtt * 1000, "retrans": r, "error": ""}
              for i, r in enumerate(retrans)]
    emu = {"down": {"queue_drops": drops, "send_lateness_us": {"p99": 300}}}
    return summarize(setup, 50, 0.5, 1, iw, flows, lines, served, 0, "", emu, {"load_start": 0.1, "started_unix": 0})


def test_summary_joins_server_records_and_the_paired_table_reports_the_papers_improvement():
    setup = SharedLinkSetup(duration_s=10, warmup_s=2, iws=(10, 200))
    flows = [(1.0, 20000), (3.0, 50000), (5.0, 90000), (7.0, 120000)]
    base = _run(setup, 10, flows, [999, 200, 300, 500], srtt=60, retrans=[0, 0, 0, 0])
    big = _run(setup, 200, flows, [1, 100, 600, 100], srtt=90, retrans=[0, 0, 4, 0], drops=12)
    assert base["responses"] == 3 and base["mean_ms"] == pytest.approx(1000 / 3)  # the warm-up response is left out
    assert big["retrans_share"] == pytest.approx(1 / 3) and big["queue_drops"] == 12
    rows = {r["iw"]: r for r in paired({"runs": [base, big]})}
    assert rows[200]["improvement"] == pytest.approx((1000 / 3 - 800 / 3) / (1000 / 3))  # (T_10 - T_200) / T_10
    assert rows[200]["rtt_change"] == pytest.approx(0.5) and rows[10]["improvement"] == 0.0
    lo, hi = rows[200]["improvement_ci"]
    assert lo <= rows[200]["improvement"] <= hi and lo < 0 < hi  # three paired responses, one of them worse
    table = markdown({"setup": setup.__dict__, "bdp_packets": 50, "started_utc": "x", "runs": [base, big]})
    assert "| 50 | 0.5 | 200 | 3 | 267 | +20.0%" in table
    lines = [{"flow": i, "local_port": 1000 + i, "response_ms": 1, "late_ms": 0, "error": ""} for i in range(4)]
    wrong_cc = [{"peer_port": 1000 + i, "cc": "bbr", "srtt_us": 1, "retrans": 0, "error": ""} for i in range(4)]
    with pytest.raises(TestbedError, match="expected only cubic"):
        summarize(setup, 50, 0.5, 1, 200, flows, lines, wrong_cc, 0, "", {}, {"load_start": 0, "started_unix": 0})
    with pytest.raises(TestbedError, match="3 of 4 responses"):
        summarize(setup, 50, 0.5, 1, 200, flows, lines[:3], wrong_cc, 0, "", {}, {"load_start": 0, "started_unix": 0})

@pytest.mark.testbed
def test_one_tiny_run_per_initial_window_over_tailor_link(tmp_path):
    if os.geteuid() != 0 or not os.path.exists("/dev/net/tun"):
        pytest.skip("needs root and /dev/net/tun")
    if not (os.environ.get("TAILOR_LINK") or shutil.which("go") or os.path.exists("/usr/local/go/bin/go")):
        pytest.skip("no tailor-link binary and no Go toolchain to build it")
    from tailor.testbed.server import tailor_link_binary
    from tailor.testbed.sharedlink import run_experiment

    setup = SharedLinkSetup(rate_mbit=10, rtt_ms=40, duration_s=5, warmup_s=1, iws=(10, 200), loads=(0.5,),
                            queues=(20,))
    before = set(subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split())
    res = run_experiment(setup, tailor_link_binary(), tmp_path / "s.json", progress=lambda s: None)
    small, big = sorted(res["runs"], key=lambda r: r["iw"])
    assert small["responses"] == big["responses"] > 5
    # a first flight of up to 45 segments (the client's first window) into a 20-packet queue overflows it
    assert big["queue_drops"] > small["queue_drops"] and big["retrans_share"] > 0
    assert all(r["mean_ms"] > 40 for r in res["runs"])  # at least the RTT
    assert json.loads((tmp_path / "s.json").read_text())["paired"][1]["iw"] == 200
    after = set(subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split())
    assert not {n for n in after - before if n.startswith("tl-")}, after - before


def test_merged_schedules_give_each_window_s_gap_to_the_best_per_schedule_and_pooled():
    setup = SharedLinkSetup(duration_s=10, warmup_s=0, iws=(10, 64, 200), seeds=(1,))
    flows = [(1.0, 20000), (3.0, 50000)]

    def result(seed, times):
        runs = []
        for iw, t in times.items():
            r = _run(setup, iw, flows, t, srtt=60, retrans=[0, 0])
            r["seed"] = seed
            runs.append(r)
        return {"schema": "tailor.testbed-shared-link/v1", "setup": dict(setup.__dict__, seeds=[seed]),
                "bdp_packets": 50, "started_utc": f"t{seed}", "finished_utc": f"u{seed}", "runs": runs}

    a = result(1, {10: [100, 300], 64: [80, 200], 200: [90, 230]})
    b = result(2, {10: [200, 200], 64: [150, 150], 200: [170, 170]})
    merged = merge([a, b])
    assert merged["setup"]["seeds"] == [1, 2] and len(merged["runs"]) == 6
    rows = {r["iw"]: r for r in behind_best(merged)}
    assert set(rows) == {10, 200} and rows[200]["best_iw"] == 64
    assert rows[200]["behind"] == pytest.approx((660 - 580) / 800)  # pooled: (T_200 - T_64) / T_10
    assert rows[200]["behind_per_seed"] == pytest.approx([40 / 400, 40 / 400]) and rows[10]["behind"] > 0.25
    assert "| 50 | 0.5 | 64 | 200 | +10.0 [" in markdown(merged)
    other = result(3, {10: [1, 1]})
    other["setup"]["rtt_ms"] = 10.0
    with pytest.raises(TestbedError, match="share the schema"):
        merge([a, other])


@pytest.mark.testbed
def test_a_response_within_the_initial_window_arrives_in_one_round_trip(tmp_path):
    """IW 200 with the client's raised receive window on an idle fast link: every response of at most 150 segments
    takes one round trip plus its serialisation (catches a receive window that caps the first flight and a server
    whose writes let Nagle's rule hold a response's last segment for a round trip)."""
    if os.geteuid() != 0 or not os.path.exists("/dev/net/tun"):
        pytest.skip("needs root and /dev/net/tun")
    if not (os.environ.get("TAILOR_LINK") or shutil.which("go") or os.path.exists("/usr/local/go/bin/go")):
        pytest.skip("no tailor-link binary and no Go toolchain to build it")
    from tailor.testbed.server import tailor_link_binary
    from tailor.testbed.sharedlink import run_one, schedule

    setup = SharedLinkSetup(rate_mbit=100, rtt_ms=40, duration_s=6, warmup_s=0, iws=(200,), loads=(0.02,),
                            queues=(1000,))
    r = run_one(setup, 1000, 0.02, 1, 200, tailor_link_binary())
    sizes = [size for _, size in schedule(setup, 0.02, 1)]
    small = [(t, size) for t, size in zip(r["response_ms"], sizes) if size <= 150 * 1448]
    assert len(small) >= 3
    for t, size in small:
        assert t < 1.25 * setup.rtt_ms + size * 8 / 100e3 + 5, (t, size)  # two round trips: 80 ms + serialisation


@pytest.mark.testbed
def test_a_lone_response_ending_inside_an_overflowing_first_flight_waits_for_its_tail(tmp_path):
    """Lone responses at IW 64 into a 25-packet queue (10 Mbit/s, 60 ms): 52 segments, all in the first flight,
    lose a tail no later segment reveals and take several times as long as 20 segments (which fit) and as 90
    segments (whose later segments reveal the tail); the server reports the retransmissions and, on Linux 6.7 on,
    the timeouts (docs/testbed.md §10b)."""
    if os.geteuid() != 0 or not os.path.exists("/dev/net/tun"):
        pytest.skip("needs root and /dev/net/tun")
    if not (os.environ.get("TAILOR_LINK") or shutil.which("go") or os.path.exists("/usr/local/go/bin/go")):
        pytest.skip("no tailor-link binary and no Go toolchain to build it")
    from tailor.testbed.server import tailor_link_binary
    from tailor.testbed.sharedlink import run_one

    lone = (20, 52, 90)
    setup = SharedLinkSetup(rate_mbit=10, rtt_ms=60, duration_s=1 + LONE_GAP_S * len(lone), warmup_s=1, iws=(64,),
                            loads=(0.05,), queues=(25,), lone=lone)
    r = run_one(setup, 25, 0.05, 1, 64, tailor_link_binary())
    fits, inside, beyond = r["response_ms"]
    assert r["response_bytes"] == [n * 1448 for n in lone]
    assert r["retrans"][0] == 0 and r["retrans"][1] > 0 and r["retrans"][2] > 0
    assert inside > 3 * fits and inside > 1.5 * beyond, r["response_ms"]
    if tuple(int(v) for v in os.uname().release.split(".")[:2]) >= (6, 7):
        assert all(isinstance(v, int) for v in r["rtos"])


def test_a_rerun_with_a_longer_schedule_keeps_the_runs_there_and_another_setup_is_refused(tmp_path, monkeypatch):
    """Until 2026-12-07 a rerun whose setup differed in anything (one more seed) started from nothing and overwrote
    the file after its first run (found by review)."""
    import tailor.testbed.sharedlink as sl

    calls = []

    def run_one(setup, q, load, seed, iw, tl_bin):
        calls.append((q, load, seed, iw))
        return {"queue_packets": q, "load": load, "seed": seed, "iw": iw, "mean_ms": 1.0, "p95_ms": 1.0,
                "srtt_ms": 1.0, "retrans_share": 0.0, "queue_drops": 0, "emu_lateness_p99_us": 0.0}

    monkeypatch.setattr(sl, "run_one", run_one)
    monkeypatch.setattr(sl, "paired", lambda result: [])
    monkeypatch.setattr(sl, "markdown", lambda result: "")
    out = tmp_path / "shared.json"
    sl.run_experiment(SharedLinkSetup(iws=(10, 32), loads=(0.3,), queues=(50,), seeds=(1, 2)), "tl", out,
                      progress=lambda m: None)
    sl.run_experiment(SharedLinkSetup(iws=(10, 32), loads=(0.3,), queues=(50,), seeds=(1, 2, 3)), "tl", out,
                      progress=lambda m: None)
    got = json.loads(out.read_text())
    assert len(calls) == 6 and {c[2] for c in calls[4:]} == {3}  # only seed 3 measured the second time
    assert sorted((r["seed"], r["iw"]) for r in got["runs"]) == [(s, w) for s in (1, 2, 3) for w in (10, 32)]
    assert got["setup"]["seeds"] == [1, 2, 3]
    with pytest.raises(TestbedError, match="another setup"):
        sl.run_experiment(SharedLinkSetup(iws=(10, 64), loads=(0.3,), queues=(50,), seeds=(1,)), "tl", out,
                          progress=lambda m: None)
    assert len(json.loads(out.read_text())["runs"]) == 6
