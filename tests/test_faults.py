"""Fault tests with real edges: the manager (a `tailor manager` subprocess) and tailor-edge (the Go binary)
on loopback, real curl clients, real TLS. Each test is bounded (about 5-60 s) and stops what it started
(by PID); no namespaces are needed, but the tests run real servers, so they are marked ``testbed``.

(a) manager SIGKILLed mid-run: the edge keeps serving with the last table, buffers telemetry (bounded:
    beyond 50,000 records or 16 MiB it drops and counts), the manager restarts on the same --data with its learned
    state, and the buffered telemetry (and the drop count) arrives;
(b) an invalid table from a rogue file is refused by the edge, which keeps the last good version;
(c) a table push without or with a wrong token is refused with 401 and nothing changes;
(d) a flood of malformed telemetry is rejected (counted, with reasons) while good records sent at the same
    time, from a script and from the edge, are all stored;
(e) the decisions tailor-edge logs for hundreds of loopback clients (distinct source addresses, several
    connections each) are those of spec/decision.md: exact probabilities, sticky cohorts, the held-back
    share of clients within its binomial interval.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from tailor.demo.binaries import ROOT, binary
from tailor.manager.testing import free_port
from tailor.space import ConfigSpace

pytestmark = [pytest.mark.testbed, pytest.mark.skipif(not shutil.which("curl"), reason="needs curl")]

TOKEN = "fault-token"
AUTH = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
SPACE = ConfigSpace.named("core")
DEFAULT = SPACE.configs[SPACE.default_index].id
H2 = next(c.id for c in SPACE.configs if dict(c.changes()) == {"http.version": "2"})


def _table(version: int, holdback: float = 0.0, p_h2: float = 1.0) -> dict:
    """127.0.0.0/8 -> HTTP/2 (observable from the client through ALPN)."""
    choices = [{"config": H2, "p": p_h2}] + ([{"config": DEFAULT, "p": 1.0 - p_h2}] if p_h2 < 1 else [])
    return {"schema": "tailor.decision-table/v1", "version": version, "generated_at": time.time(),
            "valid_for_s": 3600, "policy": "fault-test", "holdback": holdback, "default": DEFAULT,
            "configs": {DEFAULT: {}, H2: {"http.version": "2"}},
            "groups": [{"id": "loopback", "choices": choices}], "rules": [{"prefix": "127.0.0.0/8", "group": "loopback"}]}


class Proc:
    """A subprocess in its own session, logged to a file, stopped by PID (group) at the end."""

    def __init__(self, cmd: list[str], log: Path, env: dict | None = None, stdout: Path | None = None):
        self.log = log
        out = open(stdout or log, "ab")
        err = open(log, "ab") if stdout else subprocess.STDOUT
        self.p = subprocess.Popen(cmd, stdout=out, stderr=err, stdin=subprocess.DEVNULL, start_new_session=True,
                                  env={**os.environ, "PYTHONPATH": str(ROOT / "src"), **(env or {})})
        out.close()
        if stdout:
            err.close()

    def kill(self, sig=signal.SIGTERM, timeout: float = 20.0) -> None:
        if self.p.poll() is None:
            os.killpg(self.p.pid, sig)
            try:
                self.p.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.p.pid, signal.SIGKILL)
                self.p.wait(timeout=10)

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


def _treated_salt(addr: str = "127.0.0.1", holdback: float = 0.2) -> str:
    """A cohort salt under which ``addr`` is not in the holdback. An operator's table keeps the manager's salt (since
    2026-12-07), so under a random one these tests' only client, 127.0.0.1, was held back -- always served the
    default -- in a fifth of the runs."""
    from tailor.table.decide import cohort_draw, derive_salt, held_back

    return next(s for s in (derive_salt("test-faults", k) for k in range(100))
                if not held_back(cohort_draw(s, addr, 1), holdback))


class Manager(Proc):
    def __init__(self, tmp: Path, data: Path, port: int, name: str = "manager", extra: tuple[str, ...] = ()):
        self.url = f"http://127.0.0.1:{port}"
        super().__init__([sys.executable, "-m", "tailor", "manager", "--listen", f"127.0.0.1:{port}", "--data",
                          str(data), "--update-freq", "0", "--cohort-salt", _treated_salt(), *extra],
                         tmp / f"{name}.log", {"TAILOR_TOKEN": TOKEN})
        _wait(lambda: _get(self.url + "/healthz"), 60, f"manager on {self.url}: {self.text()[-500:]}")

    def metric(self, name: str) -> float:
        text = httpx.get(self.url + "/metrics", timeout=10).text
        m = re.search(rf"^{re.escape(name)} ([0-9.e+-]+)$", text, re.M)
        return float(m.group(1)) if m else 0.0


def _get(url: str):
    try:
        r = httpx.get(url, timeout=2)
        return r if r.status_code == 200 else None
    except httpx.HTTPError:
        return None


def _wait(cond, timeout_s: float, what: str):
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        got = cond()
        if got:
            return got
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


@pytest.fixture
def www(tmp_path) -> Path:
    d = tmp_path / "www"
    d.mkdir()
    (d / "obj.bin").write_bytes(os.urandom(20_000))
    (d / "tiny.txt").write_bytes(b"ok\n")
    return d


@pytest.fixture
def procs():
    started: list[Proc] = []
    yield started
    for p in reversed(started):
        p.kill()
    assert all(p.p.poll() is not None for p in started)


def _edge(tmp: Path, www: Path, table: str, telemetry: str, procs: list, name: str = "edge",
          extra: tuple[str, ...] = ()) -> tuple[Proc, str]:
    port = free_port()
    stdout = tmp / f"{name}.out" if telemetry == "-" else None
    e = Proc([binary("tailor-edge"), "--listen", f"127.0.0.1:{port}", "--root", str(www), "--self-signed",
              "--table", table, "--poll", "200ms", "--telemetry", telemetry, "--apply-socket=false", *extra],
             tmp / f"{name}.log", {"TAILOR_TOKEN": TOKEN}, stdout=stdout)
    procs.append(e)
    url = f"https://127.0.0.1:{port}"
    _wait(lambda: _curl(url + "/tiny.txt")[0] == 200, 20, f"tailor-edge on {url}: {e.text()[-400:]}")
    return e, url


def _curl(url: str, http2: bool = True) -> tuple[int, str]:
    res = subprocess.run(["curl", "-sk", "--http2" if http2 else "--http1.1", "-o", "/dev/null", "--max-time", "10",
                          "-w", "%{http_code} %{http_version}", url], capture_output=True, text=True, timeout=20)
    code, _, ver = res.stdout.partition(" ")
    return (int(code) if code.isdigit() else 0), ver


def _versions(n: int, url: str) -> list[str]:
    """HTTP versions of ``n`` fresh connections (each curl process is a new TLS handshake)."""
    out = []
    for _ in range(n):
        code, ver = _curl(url + "/obj.bin")
        assert code == 200
        out.append(ver)
    return out


def test_manager_killed_edge_keeps_table_buffers_and_resumes(tmp_path, www, procs):
    data, port = tmp_path / "data", free_port()
    mgr = Manager(tmp_path, data, port)
    procs.append(mgr)
    r = httpx.post(mgr.url + "/v1/table", headers=AUTH, json=_table(1, p_h2=1.0))
    assert r.status_code == 200, r.text
    version, etag = r.json()["version"], r.json()["etag"]
    edge, url = _edge(tmp_path, www, mgr.url + "/v1/table", mgr.url + "/v1/telemetry", procs)
    _wait(lambda: _versions(1, url) == ["2"], 10, "the edge applying the operator table")
    # holdback is raised to the manager's 0.2: about 80% of connections get HTTP/2
    assert _versions(20, url).count("2") >= 8
    _wait(lambda: mgr.metric("tailor_ingest_records_total") >= 20, 15, "edge telemetry at the manager")
    _stable(mgr)  # every record of these responses is in (the edge flushes every 2 s)
    fed = httpx.post(mgr.url + "/v1/cycle", headers=AUTH, timeout=60).json()["rows"]
    assert fed == _stable(mgr) >= 21  # the cycle fed every stored row; nothing is queued at the kill
    audit_before = httpx.get(mgr.url + "/v1/audit", headers=AUTH).json()

    mgr.kill(signal.SIGKILL)  # mid-run: no graceful shutdown
    # the edge keeps serving with the last table while the manager is down
    outage = _versions(20, url)
    assert outage.count("2") >= 8, outage
    # flood the bounded buffer: > 50,000 responses on one keep-alive connection (curl URL globbing)
    flood = subprocess.run(["curl", "-sk", "--http1.1", "-o", "/dev/null", "--max-time", "120",
                            "-w", "%{http_code}\n", url + "/tiny.txt?n=[1-51500]"],
                           capture_output=True, text=True, timeout=150)
    served = flood.stdout.split().count("200")
    assert served == 51500, (served, flood.stderr[-300:])
    time.sleep(2.5)  # at least one failed flush attempt
    assert edge.p.poll() is None

    mgr2 = Manager(tmp_path, data, port, "manager-restart")
    procs.append(mgr2)
    t = httpx.get(mgr2.url + "/v1/table", headers=AUTH)
    assert t.headers["etag"] == etag and t.json()["version"] == version  # same table, same ETag
    assert httpx.get(mgr2.url + "/v1/audit", headers=AUTH).json() == audit_before  # history intact
    buffered = 20 + 51500  # the outage's responses (20 downloads + the flood)
    # the edge ships its buffer (10,000 per batch every 2 s): all but the dropped ones arrive, drops are counted
    # (the buffer is bounded in records, 50,000, and in bytes, 16 MiB; the sink backs off up to 30 s while
    # the manager is away, so the first batch may wait that long)
    _wait(lambda: mgr2.metric("tailor_edge_dropped_records_total") > 0, 60, "the edge's drop count")
    _wait(lambda: mgr2.metric("tailor_ingest_records_total") + mgr2.metric("tailor_edge_dropped_records_total")
          >= buffered, 90, "the buffered telemetry, or its drop count")
    time.sleep(2.5)
    got, dropped = mgr2.metric("tailor_ingest_records_total"), mgr2.metric("tailor_edge_dropped_records_total")
    print(f"after the outage: {got:.0f} records delivered, {dropped:.0f} counted as dropped")
    assert 10_000 <= got <= 50000 + 10  # bounded (a few records of the first flush may have left before the flood)
    assert got + dropped >= buffered  # nothing vanished without being counted
    # learned state resumed: the next cycle feeds exactly the new rows (the watermark survived the kill:
    # rows fed before it are not fed again, none is skipped)
    _stable(mgr2)
    s = httpx.post(mgr2.url + "/v1/cycle", headers=AUTH, timeout=120).json()
    assert s.get("rows") == got, s


def _stable(mgr: Manager, quiet_s: float = 2.5, timeout_s: float = 30.0) -> int:
    """The ingest count once it has not changed for ``quiet_s`` and the queue is written."""
    end, last, since = time.monotonic() + timeout_s, -1, time.monotonic()
    while time.monotonic() < end:
        n = int(mgr.metric("tailor_ingest_records_total"))
        h = _get(mgr.url + "/healthz")
        if n != last or h is None or h.json()["queue_records"]:
            last, since = n, time.monotonic()
        elif time.monotonic() - since >= quiet_s:
            return n
        time.sleep(0.2)
    raise AssertionError("the manager's ingest count did not settle")


def test_invalid_table_from_rogue_file_is_refused_edge_keeps_last_good(tmp_path, www, procs):
    path = tmp_path / "table.json"
    path.write_text(json.dumps(_table(1)))
    edge, url = _edge(tmp_path, www, str(path), "-", procs)
    assert set(_versions(5, url)) == {"2"}  # v1: HTTP/2 for every loopback client (holdback 0)
    bad = _table(2, p_h2=0.5)
    bad["groups"][0]["choices"] = [{"config": DEFAULT, "p": 0.5}]  # probabilities sum to 0.5
    path.write_text(json.dumps(bad))
    _wait(lambda: "rejected" in edge.text(), 10, "the edge to reject the rogue table")
    assert "probabilities sum to" in edge.text()
    assert set(_versions(5, url)) == {"2"}  # still v1
    path.write_text("{not json")
    time.sleep(0.6)
    assert set(_versions(3, url)) == {"2"}
    good = _table(3)
    good["groups"][0]["choices"] = [{"config": DEFAULT, "p": 1.0}]
    path.write_text(json.dumps(good))
    _wait(lambda: _versions(1, url) == ["1.1"], 10, "the next valid table (v3, HTTP/1.1)")
    time.sleep(2.5)  # telemetry is flushed every 2 s
    versions = [r["table_version"] for line in (tmp_path / "edge.out").read_text().splitlines() if line.startswith("{")
                for r in json.loads(line)["records"]]
    assert 2 not in versions and {1, 3} <= set(versions)


def test_unauthenticated_table_push_is_refused(tmp_path, www, procs):
    # policy `default`: the manager's own table sends everyone to HTTP/1.1 (`tailor`'s first table explores
    # cdn-static, HTTP/2, on a few % of connections, which would blur what the refused push must not change)
    mgr = Manager(tmp_path, tmp_path / "data", free_port(), extra=("--policy", "default"))
    procs.append(mgr)
    edge, url = _edge(tmp_path, www, mgr.url + "/v1/table", "-", procs)
    t0 = httpx.get(mgr.url + "/v1/table", headers=AUTH)
    audit0 = httpx.get(mgr.url + "/v1/audit", headers=AUTH).json()
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {TOKEN}"},
                    {"Authorization": f"Bearer {TOKEN}x"}):
        r = httpx.post(mgr.url + "/v1/table", headers=headers, json=_table(9))
        assert r.status_code == 401, (headers, r.status_code)
        assert r.headers.get("www-authenticate") == "Bearer"
        assert httpx.delete(mgr.url + "/v1/table/override", headers=headers).status_code == 401
    t1 = httpx.get(mgr.url + "/v1/table", headers=AUTH)
    assert (t1.headers["etag"], t1.content) == (t0.headers["etag"], t0.content)
    assert httpx.get(mgr.url + "/v1/audit", headers=AUTH).json() == audit0
    assert set(_versions(5, url)) == {"1.1"}  # the edge still serves the manager's default table
    # the same push with the token is accepted and reaches the edge: the refusal above was the token
    assert httpx.post(mgr.url + "/v1/table", headers=AUTH, json=_table(9)).status_code == 200
    _wait(lambda: "2" in _versions(3, url), 10, "the authenticated table at the edge")


def test_malformed_telemetry_flood_rejected_good_records_kept(tmp_path, www, procs):
    mgr = Manager(tmp_path, tmp_path / "data", free_port())
    procs.append(mgr)
    edge, url = _edge(tmp_path, www, mgr.url + "/v1/table", mgr.url + "/v1/telemetry", procs)
    good_rec = {"time": time.time(), "kind": "response", "client_prefix": "192.0.2.0/24", "config_id": DEFAULT,
                "table_version": 1, "ttlb_ms": 12.5, "object_bytes": 1000}
    bad_variants = [
        dict(good_rec, config_id="not-an-id"),
        dict(good_rec, client_prefix="999.1.1.0/24"),
        dict(good_rec, ttlb_ms=-1),
        dict(good_rec, kind="bogus"),
        {k: v for k, v in good_rec.items() if k != "time"},
        dict(good_rec, extra_field=1),
    ]
    n_batches, per_batch = 40, 250
    reasons: set[str] = set()
    stats = {"bad_rejected": 0, "good_accepted": 0, "mixed_accepted": 0, "status": []}
    lock = threading.Lock()

    def flood(worker: int):
        with httpx.Client(timeout=30) as c:
            for b in range(n_batches):
                recs = [bad_variants[(b + i) % len(bad_variants)] for i in range(per_batch)]
                r = c.post(mgr.url + "/v1/telemetry", headers=AUTH,
                           json={"schema": "tailor.telemetry/v1", "source": f"rogue-{worker}", "records": recs})
                body = r.json()
                with lock:
                    stats["status"].append(r.status_code)
                    stats["bad_rejected"] += body.get("rejected", 0)
                    reasons.update(re.sub(r"\[\d+\]", "[]", e.split(":")[0]) for e in body.get("errors", []))
                # a mixed batch: valid records in it are kept
                mixed = [dict(good_rec, client_prefix=f"198.51.{worker}.0/24")] * 5 + recs[:5]
                r = c.post(mgr.url + "/v1/telemetry", headers=AUTH,
                           json={"schema": "tailor.telemetry/v1", "source": f"mixed-{worker}", "records": mixed})
                with lock:
                    stats["mixed_accepted"] += r.json().get("accepted", 0)
            # malformed bodies and headers, rejected whole
            for body in (b"{", b"[]", json.dumps({"schema": "x", "source": "s", "records": []}).encode()):
                r = c.post(mgr.url + "/v1/telemetry", headers=AUTH, content=body)
                with lock:
                    stats["status"].append(r.status_code)

    threads = [threading.Thread(target=flood, args=(w,)) for w in range(3)]
    for t in threads:
        t.start()
    edge_codes = []
    while any(t.is_alive() for t in threads):  # real edge traffic at the same time
        edge_codes.append(_curl(url + "/tiny.txt", http2=False)[0])
    for t in threads:
        t.join(timeout=120)
    edge_codes += [_curl(url + "/tiny.txt", http2=False)[0] for _ in range(5)]
    assert set(edge_codes) == {200}
    n_bad = 3 * n_batches * per_batch
    assert stats["bad_rejected"] == n_bad
    assert stats["mixed_accepted"] == 3 * n_batches * 5
    assert set(stats["status"]) <= {400, 202} and stats["status"].count(400) == 3 * (n_batches + 3)
    assert {"telemetry field records[].config_id", "telemetry field records[].client_prefix"} <= reasons, reasons
    assert len(reasons) >= 3
    _wait(lambda: mgr.metric("tailor_ingest_rejected_records_total") >= n_bad + 3 * n_batches * 5, 10,
          "the rejected count")
    assert mgr.metric("tailor_ingest_rejected_records_total") == n_bad + 3 * n_batches * 5
    # every edge response's record and its connection's record arrive (each curl is one connection with one
    # response; the edge flushes every 2 s)
    want = 3 * n_batches * 5 + 2 * (len(edge_codes) + 1)  # + the readiness probe
    _wait(lambda: mgr.metric("tailor_ingest_records_total") >= want, 15, f"{want} good records")
    time.sleep(2.5)
    assert mgr.metric("tailor_ingest_records_total") == want
    assert mgr.p.poll() is None and edge.p.poll() is None  # nothing crashed


def _records(path: Path, kind: str = "connection") -> list[dict]:
    return [r for line in path.read_text().splitlines() if line.startswith("{") for r in json.loads(line)["records"]
            if r["kind"] == kind]


def test_edge_decisions_follow_the_decision_rule(tmp_path, www, procs, capsys):
    """(e) Real tailor-edge, 360 clients on distinct loopback addresses, 3 TLS connections each."""
    from tailor.table.audit import audit_decisions

    salt = "5a17" * 8
    table = _table(4, holdback=0.25)
    table.update(salt=salt, groups=[{"id": "mixed", "choices": [{"config": H2, "p": 0.6}, {"config": DEFAULT, "p": 0.4}]},
                                    {"id": "h2", "choices": [{"config": H2, "p": 1.0}]}],
                 rules=[{"prefix": "127.0.0.0/8", "group": "h2"}, {"prefix": "127.1.0.0/16", "group": "mixed"},
                        {"prefix": "127.3.0.0/16", "group": "h2"}, {"prefix": "127.3.0.0/24", "group": "mixed"}])
    del table["rules"][0]  # 127.2.x.x clients match no rule
    path = tmp_path / "table.json"
    path.write_text(json.dumps(table))
    edge, url = _edge(tmp_path, www, str(path), "-", procs, extra=("--full-address",))
    port = url.rsplit(":", 1)[1]
    clients = [f"127.{1 + i % 3}.{i // 250}.{i % 250 + 2}" for i in range(360)]
    deadline = time.monotonic() + 240
    for _round in range(3):
        for addr in clients:
            assert time.monotonic() < deadline, "too slow"
            with httpx.Client(transport=httpx.HTTPTransport(local_address=addr, verify=False),
                              timeout=10) as c:  # a new client: a new TCP and TLS connection
                assert c.get(f"https://127.0.0.1:{port}/tiny.txt").status_code == 200
    _wait(lambda: len([r for r in _records(tmp_path / "edge.out") if r.get("client_addr") in set(clients)]) >= 3 * 360,
          15, "the edge's telemetry for every connection")
    records = [r for r in _records(tmp_path / "edge.out") if r.get("client_addr") in set(clients)]
    audit = audit_decisions(table, records)
    with capsys.disabled():
        print("\ndecision audit (tailor-edge):", json.dumps(audit, sort_keys=True))
    assert audit["records"] == 3 * 360 and audit["clients"] == 360 and audit["multi_connection_clients"] == 360
    assert audit["decision_mismatches"] == 0 and audit["probability_mismatches"] == 0, audit["examples"]
    assert audit["clients_switching_cohort"] == 0 and audit["clients_switching_config"] == 0
    assert audit["holdback_in_interval"], audit
    assert all(len(ps) == 1 for ps in audit["logged_p"].values())  # one probability per (group, configuration)
    assert audit["logged_p"][f"mixed|{H2}"] == [0.45] and audit["logged_p"][f"mixed|{DEFAULT}"] == [0.55]
