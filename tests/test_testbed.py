"""Testbed harness: plans, storage/resume, IW parsing (fast), and one real measurement in namespaces (root)."""

import json
import os
import shutil
import subprocess
from pathlib import Path

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
    assert all(c.queue_packets() >= 16 for c in CATALOG.values() if c.queue is None)  # Pantheon rows set their own


def test_plan_keys_are_stable_and_skip_long_fetches():
    plan = Plan.from_dict({**TINY, "conditions": ["2g-edge", "fiber100"], "sizes": [10240, 1048576], "max_fetch_s": 10})
    sizes = {j.condition.name: sorted({f.size for f in j.fetches}) for j in plan.jobs()}
    assert sizes == {"2g-edge": [10240], "fiber100": [10240, 1048576]}
    assert plan.jobs()[0].fetches[0].key == "2g-edge|cubic|iw10|rto200|h1.1|10240|r0"
    assert Transport("bbr", 32, 50).route_opts() == "initcwnd 32 congctl bbr rto_min 50ms"


def test_slow_start_after_idle_and_notsent_lowat_are_server_sysctls_of_their_jobs(tmp_path):
    off = Transport("cubic", 10, ssai=0)
    assert off.tag() == "cubic|iw10|rto200|ssai0" and Transport("cubic", 10).tag() == "cubic|iw10|rto200"
    assert off.server_sysctl().endswith("sysctl -qw net.ipv4.tcp_slow_start_after_idle=0")
    assert "slow_start_after_idle" not in Transport("cubic", 10).server_sysctl()  # the kernel's default stays
    plan = Plan.from_dict({**TINY, "configs": [{"cc": "cubic", "iw": 10}, {"cc": "cubic", "iw": 10,
                                                                           "slow_start_after_idle": 0}]})
    assert [j.transport.ssai for j in plan.jobs()] == [1, 0]
    assert len({f.key for j in plan.jobs() for f in j.fetches}) == 8  # the two configurations' loads stay apart
    assert Plan.from_dict(plan.to_dict()).transports == plan.transports  # round-trips through plan.json
    assert plan.to_dict()["configs"][0] == {"cc": "cubic", "iw": 10, "rto_min_ms": 200}  # earlier plans unchanged
    with pytest.raises(ParameterError, match="'ssai'"):
        Transport("cubic", 10, ssai=2)
    lowat = Transport("bbr", 10, notsent_lowat=16384)
    assert lowat.tag() == "bbr|iw10|rto200|nsl16384"
    assert lowat.server_sysctl().endswith("sysctl -qw net.ipv4.tcp_notsent_lowat=16384")
    assert Plan.from_dict({**TINY, "configs": [{"cc": "bbr", "iw": 10, "notsent_lowat": 16384}]}).transports == [lowat]
    with pytest.raises(ParameterError, match="'notsent_lowat'"):
        Transport("cubic", 10, notsent_lowat=10)
    from tailor.testbed.campaign import campaign

    with pytest.raises(ParameterError, match="'configs'.*slow_start_after_idle"):  # its cells would merge the two
        campaign(plan, tmp_path / "c", run_job=lambda *a: {})


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


def test_a_journal_line_torn_by_a_crash_costs_that_fetch_only(tmp_path):
    """A crash mid-append leaves a torn last line; the next row starts on a line of its own and the torn one is
    skipped (measured again). Until 2026-12-07 the next row was glued to the fragment and every later read of the
    store failed (found by review)."""
    store = Store(tmp_path)
    store.append({"key": "a", "ok": True, "started_unix": 1.0, "completion_ms": 5.0})
    with open(tmp_path / "journal.jsonl", "a") as fh:  # the crash: half a row, no newline
        fh.write('{"completion_ms": 6.0, "key": "b", "ok": tr')
    store.append({"key": "c", "ok": True, "started_unix": 3.0, "completion_ms": 7.0})
    assert Store(tmp_path).done_keys() == {"a", "c"}
    assert sorted(store.compact().key) == ["a", "c"]


def test_provenance_sessions_are_kept_when_a_write_is_interrupted(tmp_path, monkeypatch):
    from tailor.testbed import measure

    path = tmp_path / "provenance.json"
    measure._merge_provenance(path, {"session": 1})
    real = Path.write_text

    def torn(self, text, *a, **k):  # the write is interrupted half-way
        real(self, text[: len(text) // 2], *a, **k)
        raise KeyboardInterrupt

    monkeypatch.setattr(Path, "write_text", torn)
    with pytest.raises(KeyboardInterrupt):
        measure._merge_provenance(path, {"session": 2})
    monkeypatch.undo()
    measure._merge_provenance(path, {"session": 3})
    assert [s["session"] for s in json.loads(path.read_text())["sessions"]] == [1, 3]


def test_late_runs_are_requeued_and_kept_aside(tmp_path):
    store = Store(tmp_path)
    for key, run in (("a", "r1"), ("b", "r2")):
        store.append({"key": key, "ok": True, "started_unix": 1.0, "completion_ms": 5.0, "run_id": run})
    store.append_run({"run_id": "r1", "emu_down_lateness_p99_us": 100.0})
    store.append_run({"run_id": "r2", "emu_down_lateness_p99_us": 9000.0})
    assert store.requeue_late_runs(2000) == 1
    assert store.done_keys() == {"a"}
    assert list(pd.read_parquet(tmp_path / "discarded.parquet").key) == ["b"]


def test_a_conditions_fetches_are_requeued_and_kept_aside(tmp_path):
    store = Store(tmp_path)
    for key, cond in (("a", "wpt-fios"), ("b", "wpt-cable"), ("c", "wpt-fios")):
        store.append({"key": key, "ok": True, "started_unix": 1.0, "completion_ms": 5.0, "run_id": "r",
                      "condition": cond})
    with pytest.raises(ParameterError, match="requeue_conditions.*no-such"):
        store.requeue_conditions(["wpt-fios", "no-such"])
    assert store.done_keys() == {"a", "b", "c"}  # an unknown name changes nothing
    assert store.requeue_conditions(["wpt-fios"]) == 2
    assert store.done_keys() == {"b"}
    assert sorted(pd.read_parquet(tmp_path / "discarded.parquet").key) == ["a", "c"]


def test_runs_with_handshakes_slower_than_their_conditions_quietest_are_requeued(tmp_path):
    from tailor.testbed.store import handshake_excess

    store = Store(tmp_path)
    # (run, condition, TLS handshake ms per fetch): "busy" is contended throughout (every handshake slower), "lossy"
    # lost one handshake packet (one slow fetch: the lower quartile ignores it), "short" has too few fetches to judge
    runs = {"quiet": ("wpt-fios", [4.1, 4.0, 4.3, 4.2]), "busy": ("wpt-fios", [40.0, 21.0, 55.0, 46.0]),
            "lossy": ("wpt-fios", [4.2, 4.1, 204.0, 4.4]), "short": ("wpt-fios", [90.0, 95.0]),
            "other": ("slow-4g", [160.0, 161.0, 159.0, 162.0])}
    for run, (cond, tls) in runs.items():
        for i, ms in enumerate(tls):
            store.append({"key": f"{run}{i}", "ok": True, "started_unix": 1.0, "completion_ms": 50.0, "run_id": run,
                          "condition": cond, "t_connect": 0.010, "t_tls": 0.010 + ms / 1000, "page": None})
    h = handshake_excess(store.measurements()).set_index("run_id")
    assert h.loc["quiet", "excess_ms"] == 0 and h.loc["other", "excess_ms"] == 0  # each condition's own reference
    assert h.loc["busy", "excess_ms"] > 20 and h.loc["lossy", "excess_ms"] < 1
    assert pd.isna(h.loc["short", "excess_ms"])
    with pytest.raises(ParameterError, match="max_excess_ms"):
        store.requeue_slow_handshakes(-1)
    assert store.requeue_slow_handshakes(5.0) == 4
    assert store.done_keys() == {f"{r}{i}" for r in ("quiet", "lossy", "other") for i in range(4)} | {"short0", "short1"}
    assert sorted(pd.read_parquet(tmp_path / "discarded.parquet").run_id.unique()) == ["busy"]


def test_serial_runs_every_job_in_one_pool_of_one_longest_first():
    from tailor.testbed.measure import MEDIUM_WIDTH, pool_groups

    plan = Plan.from_dict({"conditions": ["wpt-fios", "fiber100", "slow-4g"], "sizes": [10240, 1048576],
                           "configs": [{"cc": "cubic", "iw": 10}], "http": ["1.1"], "reps": 1})
    jobs = [(j, list(j.fetches)) for j in plan.jobs()]
    groups = pool_groups(jobs, parallel=3)
    assert [w for _, w in groups] == [1, MEDIUM_WIDTH, 3]  # fast, medium and slow links side by side
    assert [[j.condition.name for j, _ in g] for g, _ in groups] == [["fiber100"], ["wpt-fios"], ["slow-4g"]]
    (only, width), = pool_groups(jobs, parallel=3, serial=True)
    assert width == 1 and len(only) == 3
    est = [j.estimate_s() for j, _ in only]
    assert est == sorted(est, reverse=True)


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


# --- tb-v2: 40+ conditions, trace-driven links, Chromium pages ---------------------------------------------------

def test_catalog_has_40_conditions_including_trace_driven_ones():
    from tailor.testbed.conditions import NEW_IN_TB_V2
    from tailor.testbed.runner import rate_args

    assert len(CATALOG) >= 40 and len(NEW_IN_TB_V2) >= 15
    fams = {c.family for c in CATALOG.values()}
    assert {"cellular-trace", "developing-trace", "satellite", "fcc"} <= fams
    att = CATALOG["mm-att-lte-driving"]
    args = rate_args(att) if os.path.exists(att.trace_path("down")) else None
    if args is not None:  # the shared traces are present on this machine
        assert args[0] == "--down-trace" and args[1].endswith("ATT-LTE-driving.down") and "--up-trace" in args
    nepal = CATALOG["pan-nepal-wireless"]
    assert nepal.queue_packets() == 14 and nepal.uplink_loss == 0.0477 and nepal.loss == 0.0
    assert Condition(**nepal.to_dict()) == nepal  # optional fields round-trip through plans
    assert "up_loss" not in CATALOG["4g-peak"].to_dict()  # tb-v1 plans/rows keep their old shape


def test_condition_errors_name_trace_and_queue_fields():
    with pytest.raises(ParameterError, match="down_trace"):
        Condition("x", 1, 1, 10, 0.0, "f", "s", down_trace="/etc/passwd")
    with pytest.raises(ParameterError, match="queue"):
        Condition("x", 1, 1, 10, 0.0, "f", "s", queue=1)
    with pytest.raises(ParameterError, match="up_loss"):
        Condition("x", 1, 1, 10, 0.0, "f", "s", up_loss=0.5)


def test_missing_trace_file_is_a_clear_error(monkeypatch, tmp_path):
    from tailor.testbed.runner import rate_args
    from tailor.testbed.server import TestbedError

    monkeypatch.setenv("TAILOR_TRACES", str(tmp_path))
    with pytest.raises(TestbedError, match="down trace .* does not exist"):
        rate_args(CATALOG["mm-att-lte-driving"])


def test_synthetic_pages_are_deterministic_valid_and_match_the_catalog():
    import re
    import struct
    import zlib

    from tailor.oracle.websites import default_catalog
    from tailor.testbed.pages import MEASURED_PAGES, build_page, page_url

    assert len(MEASURED_PAGES) >= 5
    site = default_catalog()["page-medium-3"]
    files, rows = build_page(site, 7, "2")
    again, _ = build_page(site, 7, "2")
    assert files == again  # same seed, same bytes
    h1, rows_h1 = build_page(site, 7, "1.1")
    assert len(rows) == len(site.objects) and {r["origin"] for r in rows} == set(range(site.n_origins))
    # padded to the catalog's sizes; a tiny object whose markup alone is bigger keeps its markup (a few bytes over)
    for r, h, o in zip(rows[1:], rows_h1[1:], site.objects[1:]):
        assert r["kind"] == o.kind and 0 <= r["size_bytes"] - o.size_bytes <= 2048 and r["level"] in (1, 2)
        assert abs(h["size_bytes"] - r["size_bytes"]) <= 64  # only the port and directory in URLs differ
    over = sum(r["size_bytes"] for r in rows) - site.total_bytes
    assert 0 <= over < 0.02 * site.total_bytes
    text = "".join(v.decode("latin-1") for k, v in files.items() if k.endswith((".html", ".css", ".js")))
    refs = set(re.findall(r"/page-medium-3/([a-z]+\d+\.\w+)", text))
    assert refs == {r["path"].rsplit("/", 1)[1] for r in rows[1:]}  # every object is referenced, nothing else
    assert ":443/" in text and ":8444/" not in text and ":8444/" in "".join(v.decode("latin-1") for v in h1.values())
    png = next(v for k, v in files.items() if k.endswith(".png"))
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    pos = 8
    while pos < len(png):  # every chunk's CRC is valid, the image ends with IEND
        n, kind = struct.unpack(">I4s", png[pos:pos + 8])
        assert struct.unpack(">I", png[pos + 8 + n:pos + 12 + n])[0] == zlib.crc32(png[pos + 4:pos + 8 + n])
        pos += 12 + n
    assert kind == b"IEND" and pos == len(png)
    assert page_url("page-light-1", "1.1") == "https://o0.tailor.test:8444/page-light-1-h1/index.html"


def test_page_plans_have_stable_keys_and_reject_unknown_pages():
    from tailor.testbed.server import TestbedError

    plan = Plan.from_dict({**TINY, "conditions": ["2g-edge", "fiber100"], "pages": ["page-light-1", "page-heavy-2"],
                           "max_fetch_s": 10})
    pages = {j.condition.name: sorted({f.page for f in j.fetches}) for j in plan.jobs()}
    assert pages == {"fiber100": ["page-heavy-2", "page-light-1"]}  # 2G cannot load either page in 10 s
    assert plan.jobs()[0].is_pages and plan.jobs()[0].fetches[0].key.endswith("|h1.1|page-light-1|r0")
    with pytest.raises(TestbedError, match="page-nope"):
        Plan.from_dict({**TINY, "pages": ["page-nope"]})


def _chromium_ready() -> str | None:
    reason = _testbed_ready()
    if reason:
        return reason
    if not shutil.which("chromium"):
        return "chromium not installed (apt-get install -y chromium)"
    return None


@pytest.mark.testbed
def test_one_page_load_in_chromium_end_to_end(tmp_path):
    reason = _chromium_ready()
    if reason:
        pytest.skip(reason)
    from tailor.testbed.measure import measure

    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({**TINY, "conditions": [{**TINY["conditions"][0], "down_mbps": 20}],
                                "pages": ["page-light-1"], "reps": 1}))
    prov = measure(Plan.load(plan), tmp_path / "out", parallel=1)
    df = pd.read_parquet(tmp_path / "out" / "measurements.parquet")
    assert len(df) == 2 and df.ok.all(), df.drop(columns=["srv_OutSegs"], errors="ignore").to_dict("records")
    assert set(df.nav_proto) == {"h2", "http/1.1"}
    for r in df.itertuples():  # every object came over the intended protocol
        assert json.loads(r.protos) == {r.nav_proto: r.resources} and r.missing == "[]"
    # 3 origins x (TCP + TLS) + 3 discovery levels on a 20 ms path: more than 100 ms, less than 5 s for 450 KB
    assert df.completion_ms.between(100, 5000).all(), df.completion_ms.tolist()
    assert (df.completion_ms >= df.dcl).all() and (df.transfer > 0.9 * df.size_bytes).all()
    # the browser's CPU time per load (context set-up to disposal): parsing, layout and TLS of a 450 KB page take
    # more than 10 ms of CPU, and the browser cannot use more than every core for the whole window
    cores = os.cpu_count()
    assert (df.cpu_ms > 10).all() and (df.cpu_ms <= cores * df.cpu_window_ms + 50).all(), \
        df[["cpu_ms", "cpu_window_ms", "wall_ms"]]
    assert prov["pages"]["page-light-1"]["origins"] == 3
    runs = pd.read_parquet(tmp_path / "out" / "runs.parquet")
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    leaked = [n for n in names.split() if any(n.startswith(f"tl-{pid}-") for pid in runs.harness_pid)]
    assert not leaked, leaked
    chromes = subprocess.run(["pgrep", "-f", str(tmp_path)], capture_output=True, text=True).stdout.split()
    assert not chromes, chromes
