"""Testbed harness: plans, storage/resume, IW parsing (fast), and one real measurement in namespaces (root)."""

import json
import os
import shutil
import subprocess

import pandas as pd
import pytest

from tailor.errors import ParameterError
from tailor.testbed.conditions import CATALOG, Condition
from tailor.testbed.iwcheck import first_flights
from tailor.testbed.plan import Plan, Transport
from tailor.testbed.store import Store

TINY = {"conditions": [{"name": "t-10m-20ms", "down_mbps": 10, "up_mbps": 10, "rtt_ms": 20, "loss": 0.0,
                        "family": "test", "source": "test"}],
        "sizes": [10240], "reps": 2, "configs": [{"cc": "cubic", "iw": 10}], "http": ["1.1", "2"]}


def test_catalog_spans_the_required_families():
    fams = {c.family for c in CATALOG.values()}
    assert len(CATALOG) >= 20
    assert {"fcc", "fcc-cellular", "cellular", "cellular-2g", "developing", "satellite"} <= fams
    assert all(c.queue_packets() >= 16 for c in CATALOG.values())


def test_plan_keys_are_stable_and_skip_long_fetches():
    plan = Plan.from_dict({**TINY, "conditions": ["2g-edge", "fiber100"], "sizes": [10240, 1048576], "max_fetch_s": 10})
    sizes = {j.condition.name: sorted({f.size for f in j.fetches}) for j in plan.jobs()}
    assert sizes == {"2g-edge": [10240], "fiber100": [10240, 1048576]}
    assert plan.jobs()[0].fetches[0].key == "2g-edge|cubic|iw10|rto200|h1.1|10240|r0"
    assert Transport("bbr", 32, 50).route_opts() == "initcwnd 32 congctl bbr rto_min 50ms"


def test_plan_errors_name_the_field(tmp_path):
    with pytest.raises(ParameterError, match="'cc'"):
        Transport("vegas", 10)
    with pytest.raises(ParameterError, match="loss"):
        Condition("x", 1, 1, 10, 0.5, "f", "s")
    bad = tmp_path / "plan.json"
    bad.write_text("{not json")
    with pytest.raises(ParameterError, match="plan"):
        Plan.load(bad)


def test_store_resumes_from_journal_and_parquet(tmp_path):
    store = Store(tmp_path)
    store.append({"key": "a", "ok": True, "started_unix": 1.0, "completion_ms": 5.0})
    store.append({"key": "b", "ok": False, "started_unix": 2.0, "completion_ms": float("nan")})
    assert Store(tmp_path).done_keys() == {"a"}  # a failed fetch is measured again
    store.compact()
    assert not (tmp_path / "journal.jsonl").exists()
    store.append({"key": "b", "ok": True, "started_unix": 3.0, "completion_ms": 7.0})
    assert Store(tmp_path).done_keys() == {"a", "b"}
    df = store.compact()
    assert sorted(df.key) == ["a", "b"] and df.ok.all()


def test_late_runs_are_requeued_and_kept_aside(tmp_path):
    store = Store(tmp_path)
    for key, run in (("a", "r1"), ("b", "r2")):
        store.append({"key": key, "ok": True, "started_unix": 1.0, "completion_ms": 5.0, "run_id": run})
    store.append_run({"run_id": "r1", "emu_down_lateness_p99_us": 100.0})
    store.append_run({"run_id": "r2", "emu_down_lateness_p99_us": 9000.0})
    assert store.requeue_late_runs(2000) == 1
    assert store.done_keys() == {"a"}
    assert list(pd.read_parquet(tmp_path / "discarded.parquet").key) == ["b"]


def test_first_flight_parser_ignores_client_packets_and_empty_segments():
    srv = "{:.4f} IP 10.231.0.1.8080 > 10.231.0.2.4000: Flags [.], seq 1:1449, ack 1, length {}"
    cli = "{:.4f} IP 10.231.0.2.4000 > 10.231.0.1.8080: Flags [.], ack 1449, length 0"
    lines = [srv.format(1.0, 1448), srv.format(1.0001, 0), cli.format(1.05), srv.format(1.0002, 1448),
             srv.format(1.3, 1448)]
    assert first_flights(lines, rtt_ms=200) == (2, 1, 3)


def _testbed_ready() -> str | None:
    if os.geteuid() != 0:
        return "needs root"
    for tool in ("nginx", "curl", "openssl", "ip"):
        if not (shutil.which(tool) or shutil.which(tool, path="/usr/sbin:/sbin")):
            return f"{tool} not installed (apt-get install -y nginx curl openssl iproute2)"
    if not os.path.exists("/dev/net/tun"):
        return "no /dev/net/tun"
    if not (os.environ.get("TAILOR_LINK") or shutil.which("go") or os.path.exists("/usr/local/go/bin/go")):
        return "no tailor-link binary and no Go toolchain to build it"
    return None


@pytest.mark.testbed
def test_one_measurement_end_to_end_leaves_nothing_behind(tmp_path):
    reason = _testbed_ready()
    if reason:
        pytest.skip(reason)
    from tailor.testbed.measure import measure

    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(TINY))
    prov = measure(Plan.load(plan), tmp_path / "out", parallel=1)
    df = pd.read_parquet(tmp_path / "out" / "measurements.parquet")
    assert len(df) == 4 and df.ok.all(), df.to_dict("records")
    assert set(df.http_version.astype(str)) == {"1.1", "2"}
    # TCP + TLS 1.3 + request = at least 3 RTT of 20 ms; a 10 KB object on 10 Mbit/s takes well under 1 s.
    assert df.completion_ms.between(55, 1000).all(), df.completion_ms.tolist()
    assert (df.srv_OutSegs > 5).all()
    assert prov["fetches_ok"] == 4 and prov["fetches_failed"] == 0
    assert json.loads((tmp_path / "out" / "provenance.json").read_text())["sessions"][0]["kernel"]
    again = measure(Plan.load(plan), tmp_path / "out", parallel=1)  # resumed: nothing left to measure
    assert again["fetches_planned_now"] == 0
    runs = pd.read_parquet(tmp_path / "out" / "runs.parquet")
    assert runs.emu_stats.all() and (runs.exit == 0).all()
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    leaked = [n for n in names.split() if any(n.startswith(f"tl-{pid}-") for pid in runs.harness_pid)]
    assert not leaked, leaked
