"""tailor testbed campaign: the adaptive-repetition rule, round planning, A/A, and resumption with the real harness."""

import json
import os
import subprocess

import numpy as np
import pandas as pd
import pytest

from tailor.testbed.campaign import Adaptive, aa_check, campaign, cells, median_interval, round_jobs
from tailor.errors import TailorError
from tailor.testbed.plan import Plan, Transport

TINY = {"conditions": [{"name": "c-20m-10ms", "down_mbps": 20, "up_mbps": 20, "rtt_ms": 10, "loss": 0.0,
                        "family": "test", "source": "test"}], "sizes": [10240], "configs": [{"cc": "cubic", "iw": 10}]}


def _testbed_ready() -> str | None:
    import os

    from tailor.testbed.server import require_tools

    if os.geteuid() != 0 or not os.path.exists("/dev/net/tun"):
        return "needs root and /dev/net/tun (namespaces, the TUN link emulator)"
    try:
        require_tools("nginx", "curl", "openssl", "ip")
    except TailorError as err:
        return str(err)
    return None


def test_median_interval_covers_at_least_the_level():
    rng = np.random.default_rng(7)
    for n in (6, 9, 15, 30):
        hits = 0
        for _ in range(4000):
            lo, hi = median_interval(rng.lognormal(0.0, 0.4, n))
            hits += lo <= 1.0 <= hi  # the lognormal(0, s) median is 1
        assert hits / 4000 >= 0.94, n  # >= 95% by construction; 4000 draws leave ~0.4% of sampling error
    assert all(np.isnan(median_interval(np.ones(5))))  # [min, max] of 5 covers only 93.75%
    assert median_interval(np.arange(1, 11)) == (2.0, 9.0)  # l = 1: 1 - 2 P(Bin(10, .5) <= 1) = 0.978


def test_adaptive_rule():
    a = Adaptive(min_reps=6, step=3, max_reps=12, target=0.03)
    assert a.wanted([]) == 6 and a.wanted([100.0] * 4) == 6
    tight = [100, 100.5, 99.8, 100.2, 99.9, 100.1]
    assert a.resolved(tight) and a.wanted(tight) == 6
    wide = [80, 90, 100, 110, 120, 130]
    assert not a.resolved(wide) and a.wanted(wide) == 9
    assert a.wanted(wide + [95, 105, 100, 99, 101, 98]) == 12  # at the cap: done, unresolved
    with pytest.raises(ValueError):
        Adaptive(min_reps=5)


def _rows(plan, values_by_tr, batch=""):
    rows = []
    for tr, values in values_by_tr.items():
        for rep, v in enumerate(values):
            key = f"{plan.conditions[0].name}|{tr.tag()}|h1.1|10240|r{rep}" + (f"|aa-{batch}" if batch else "")
            rows.append({"key": key, "ok": True, "completion_ms": float(v), "condition": plan.conditions[0].name,
                         "cc": tr.cc, "iw": tr.iw, "rto_min_ms": tr.rto_min_ms, "http": "1.1", "size_bytes": 10240,
                         "page": "", "rep": rep, "loss": 0.0})
    return rows


def test_rounds_bring_unresolved_cells_up_and_stop_at_resolution():
    plan = Plan.from_dict({**TINY, "http": ["1.1"], "configs": [{"cc": "cubic", "iw": 10}, {"cc": "bbr", "iw": 32}]})
    cubic, bbr = plan.transports
    a = Adaptive(min_reps=6, step=3, max_reps=9)
    first = round_jobs(plan, pd.DataFrame(), a)
    assert [len(j.fetches) for j in first] == [6, 6] and first[0].fetches[0].key.endswith("|r0")
    df = pd.DataFrame(_rows(plan, {cubic: [100, 100.1, 99.9, 100, 100.2, 99.8], bbr: [70, 90, 110, 80, 100, 120]}))
    second = round_jobs(plan, df, a)
    assert len(second) == 1 and second[0].transport == bbr
    assert [f.rep for f in second[0].fetches] == [6, 7, 8]  # new indices after the stored ones
    df = pd.concat([df, pd.DataFrame(_rows(plan, {bbr: [70, 90, 110, 80, 100, 120, 95, 96, 97]}))])
    df = df.drop_duplicates("key", keep="last")
    assert round_jobs(plan, df, a) == []  # cubic resolved, bbr capped
    c = cells(df, a).set_index("cc")
    assert c.loc["cubic", "resolved"] and not c.loc["bbr", "resolved"] and c.loc["bbr", "capped"]
    assert c.loc["bbr", "lo_ms"] < c.loc["bbr", "median_ms"] < c.loc["bbr", "hi_ms"]


def test_a_run_with_slow_handshakes_is_measured_again_in_the_next_round(tmp_path):
    """With ``handshake_ms`` a round starts by requeueing runs whose TLS handshakes were slower than their condition's
    quietest run's (the machine's, not the configuration's); the cell is measured again and the old rows are kept."""
    plan = Plan.from_dict({**TINY, "http": ["1.1"], "configs": [{"cc": "cubic", "iw": 10}, {"cc": "bbr", "iw": 32}]})
    calls = []

    def scripted(job, todo, on_row):  # the first bbr job ran beside something that slowed its endpoints
        busy = job.transport.cc == "bbr" and not any(c == "bbr" for c in calls)
        calls.append(job.transport.cc)
        run_id = f"{job.name}|{len(calls)}"
        for f in todo:
            tls_ms = 30.0 if busy else 10.5
            on_row({"key": f.key, "ok": True, "started_unix": float(len(calls)), "run_id": run_id,
                    "completion_ms": 60.0 + tls_ms, "condition": job.condition.name, "cc": job.transport.cc,
                    "iw": job.transport.iw, "rto_min_ms": 200, "http": f.http, "size_bytes": f.size, "rep": f.rep,
                    "page": "", "loss": 0.0, "t_connect": 0.010, "t_tls": 0.010 + tls_ms / 1000})
        return {"run_id": run_id, "emu_down_lateness_p99_us": 50.0}

    out = campaign(plan, tmp_path, Adaptive(min_reps=6, step=3, max_reps=6), run_job=scripted, handshake_ms=5.0)
    assert out["stop"] == "done" and out["requeued_fetches"] == 6 and calls == ["cubic", "bbr", "bbr"]
    df = pd.read_parquet(tmp_path / "measurements.parquet")
    assert len(df) == 12 and (df["completion_ms"] == 70.5).all()
    assert len(pd.read_parquet(tmp_path / "discarded.parquet")) == 6


def test_conditions_below_min_reps_come_first():
    """A campaign run in pieces covers every condition before it narrows the first ones' intervals."""
    second = {"name": "c-5m-50ms", "down_mbps": 5, "up_mbps": 5, "rtt_ms": 50, "loss": 0.0, "family": "test",
              "source": "test"}
    plan = Plan.from_dict({**TINY, "conditions": TINY["conditions"] + [second], "http": ["1.1"]})
    (cubic,) = plan.transports
    a = Adaptive(min_reps=6, step=3, max_reps=9)
    assert [j.condition.name for j in round_jobs(plan, pd.DataFrame(), a)] == ["c-20m-10ms", "c-5m-50ms"]
    df = pd.DataFrame(_rows(plan, {cubic: [70, 90, 110, 80, 100, 120]}))  # the first condition: wide, wants 3 more
    jobs = round_jobs(plan, df, a)
    assert [(j.condition.name, len(j.fetches)) for j in jobs] == [("c-5m-50ms", 6), ("c-20m-10ms", 3)]
    third = {**second, "name": "c-2m-100ms", "down_mbps": 2, "rtt_ms": 100}
    plan3 = Plan.from_dict({**TINY, "conditions": TINY["conditions"] + [second, third], "http": ["1.1", "2"]})
    (cubic3,) = plan3.transports

    def rows_of(cond, http, n):
        return [{"key": f"{cond}|{cubic3.tag()}|h{http}|10240|r{rep}", "ok": True, "completion_ms": 100.0,
                 "condition": cond, "cc": "cubic", "iw": 10, "rto_min_ms": 200, "http": http, "size_bytes": 10240,
                 "page": "", "rep": rep, "loss": 0.0} for rep in range(n)]
    rows = rows_of("c-5m-50ms", "1.1", 2) + rows_of("c-20m-10ms", "1.1", 6)  # started; one of two cells covered
    order = [j.condition.name for j in round_jobs(plan3, pd.DataFrame(rows), a)]
    assert order == ["c-5m-50ms", "c-2m-100ms", "c-20m-10ms"]  # 0 of 2, 0 of 2 (plan order), then 1 of 2 cells


def test_aa_batches_open_and_close_each_condition_and_are_compared():
    plan = Plan.from_dict({**TINY, "http": ["1.1"], "configs": [{"cc": "bbr", "iw": 32}]})
    aa = Transport("cubic", 10)
    jobs = round_jobs(plan, pd.DataFrame(), Adaptive(), aa)
    assert [(j.transport.tag(), j.fetches[0].key.rsplit("|", 1)[-1]) for j in jobs] == \
        [("cubic|iw10|rto200", "aa-a"), ("bbr|iw32|rto200", "r0"), ("cubic|iw10|rto200", "aa-b")]
    df = pd.DataFrame(_rows(plan, {aa: [100] * 6}, "a") + _rows(plan, {aa: [101] * 6}, "b"))
    out = aa_check(df)
    assert len(out) == 1 and out.iloc[0]["diff"] == pytest.approx(0.01) and out.iloc[0]["resolved"]


@pytest.mark.testbed
def test_interrupted_campaign_resumes_without_measuring_twice(tmp_path):
    """A real campaign (tailor-link namespaces, nginx, curl) stopped after one job, then interrupted inside a job
    after two fetches, then resumed: every cell ends with exactly its wanted valid repetitions, nothing twice."""
    reason = _testbed_ready()
    if reason:
        pytest.skip(reason)
    from tailor.testbed.campaign import harness

    plan = Plan.from_dict({**TINY, "http": ["1.1"], "configs": [{"cc": "cubic", "iw": 10}, {"cc": "bbr", "iw": 10}]})
    a = Adaptive(min_reps=6, step=3, max_reps=6)
    out = tmp_path / "ds"
    first = campaign(plan, out, a, max_jobs=1, lateness_ms=1e6)
    assert first["stop"] == "max_jobs" and first["jobs"] == 1
    assert len(pd.read_parquet(out / "measurements.parquet")) == 6

    class Interrupt(Exception):
        pass

    with harness(plan, out) as real:
        def interrupted(job, todo, on_row):
            seen = []

            def row(r):
                on_row(r)
                seen.append(r)
                if len(seen) == 2:
                    raise Interrupt()
            return real(job, todo, row)

        with pytest.raises(Interrupt):
            campaign(plan, out, a, run_job=interrupted, lateness_ms=1e6)
    done = campaign(plan, out, a, lateness_ms=1e6)
    assert done["stop"] == "done" and done["cells"] == 2
    df = pd.read_parquet(out / "measurements.parquet")
    assert df["key"].is_unique and df["ok"].all() and len(df) == 12
    assert sorted(df.groupby("cc")["rep"].apply(sorted).tolist()) == [list(range(6))] * 2
    assert (out / "intervals.parquet").exists() and json.loads((out / "plan.json").read_text())["adaptive"]
    assert not subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.count("tl-")


def test_an_interrupt_inside_a_job_stops_the_harness_and_reaches_the_caller():
    """SIGTERM / SIGINT arrive as KeyboardInterrupt while a job streams: the harness is terminated and the interrupt
    goes on up, so a campaign stops instead of moving to its next job (it used to be swallowed)."""
    from tailor.testbed.runner import _stream

    def interrupt(_row):
        raise KeyboardInterrupt("signal 15")

    run: dict = {}
    with pytest.raises(KeyboardInterrupt):
        _stream(["sh", "-c", "echo '{}'; exec sleep 60"], 120.0, interrupt, run)
    with pytest.raises(ProcessLookupError):
        os.kill(run["harness_pid"], 0)  # terminated and reaped
