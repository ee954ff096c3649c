"""``tailor demo``: the closed loop with real edges in network namespaces (root needed).

World (all created here, all removed on exit, Ctrl-C, SIGTERM or failure; names ``tdm<pid>-*``):

* one server namespace ``tdm<pid>-srv``: ``tailor-edge`` (HTTPS, static 300 KB object) started *inside*
  ``tailor-agent``'s cgroup, so the agent's sock_ops program tunes every accepted connection from the
  manager's table and reports one ``connection`` record per connection to the manager;
* one client namespace per condition (broadband, 4G, 3G, lossy developing region, satellite; figures
  from :mod:`tailor.testbed.conditions`), each behind its own ``tailor-link`` process, each client on a
  distinct /24 (``10.240.<i>.2``), talking to its own server address (``10.241.<i>.1``);
* the manager (``tailor manager`` as a subprocess, with a fresh token) on 127.0.0.1 in the root
  namespace, where the agent runs.

The workload (curl, HTTP/1.1, new connection per fetch) runs for ``--duration`` seconds; every round the
demo triggers an update cycle (``POST /v1/cycle``), so the tables the agent applies change at round
boundaries. See docs/demo.md for the output.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx
import numpy as np

from tailor.demo import analysis
from tailor.demo.binaries import ROOT, DemoError, binary
from tailor.demo.cli import DEFAULT_POLICY_PARAMS, GROUPS, GroupSpec
from tailor.demo.workload import Workload, fetch_once
from tailor.demo.world import World, cgroups_left, ip, leftovers, pid_alive
from tailor.testbed.conditions import CATALOG, Condition

OBJECT_BYTES = 300_000
PORT = 8443
CLIENTS_PER_GROUP = 24  # client addresses per group: holdback membership is per client (spec/decision.md)
SPACE = "transport"
# 6 configurations: {cubic, bbr} x IW {10, 32, 64}; RTO min and SYN RTO stay at their defaults.
ALLOWED = "tcp.congestion_control!=reno,tcp.initial_cwnd>=10,tcp.initial_cwnd!=16,tcp.rto_min_ms==200,tcp.syn_rto_ms==1000"
CHROMIUM = "/usr/bin/chromium"


def _cgroup_root() -> str:
    """The cgroup v2 mount: /sys/fs/cgroup/unified on a hybrid host, /sys/fs/cgroup on a unified one (the agent is
    told which; until 2026-12-07 the demo assumed the hybrid layout and aborted on a unified host)."""
    for root in ("/sys/fs/cgroup/unified", "/sys/fs/cgroup"):
        if Path(root, "cgroup.controllers").exists():
            return root
    raise DemoError("no cgroup v2 mount at /sys/fs/cgroup/unified or /sys/fs/cgroup (tailor-agent needs one)")


def run(args) -> int:
    if os.geteuid() != 0:
        raise DemoError("tailor demo needs root (network namespaces, TUN devices, cgroup BPF)")
    duration = args.duration if args.duration is not None else (180.0 if args.quick else 480.0)
    if not 20.0 <= duration <= 600.0:
        raise DemoError(f"The 'duration' parameter must be in [20, 600] seconds. Got {duration}.")
    round_s = args.round if args.round is not None else (15.0 if args.quick else 30.0)
    if not 3.0 <= round_s <= duration:
        raise DemoError(f"The 'round' parameter must be in [3, duration] seconds. Got {round_s}.")
    names = [g.name for g in GROUPS]
    chosen = args.groups.split(",") if args.groups else names
    unknown = sorted(set(chosen) - set(names))
    if unknown or not chosen:
        raise DemoError(f"The 'groups' parameter must be a comma list of {names}. Got {args.groups!r}.")
    for tool in ("ip", "curl"):
        if not shutil.which(tool) and not shutil.which(tool, path="/usr/sbin:/sbin"):
            raise DemoError(f"missing tool {tool!r}: apt-get install -y {'iproute2' if tool == 'ip' else tool}")
    groups = [g for g in GROUPS if g.name in chosen]
    out = Path(args.out or f"out/demo-s{args.seed}")
    out.mkdir(parents=True, exist_ok=True)
    bins = {n: binary(n) for n in ("tailor-edge", "tailor-agent", "tailor-link")}

    def _term(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    old = signal.signal(signal.SIGTERM, _term)
    # SIGINT too: a demo started as a background job (`tailor demo &`) inherits SIGINT ignored and Python then
    # installs no KeyboardInterrupt handler, so Ctrl-C / kill -INT would be lost (found by a CI run started that way)
    old_sigint = signal.signal(signal.SIGINT, _term)
    world = World(prefix=f"tdm{os.getpid()}-", workdir=out / "logs")
    world.workdir.mkdir(parents=True, exist_ok=True)
    report = None
    try:
        report = _run(world, args, groups, duration, round_s, out, bins)
    except KeyboardInterrupt:
        _log("interrupted: stopping everything and removing the namespaces")
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut the cleanup short
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        problems = world.close()
        left = leftovers(world.prefix)
        alive = [p.popen.pid for p in world.procs if pid_alive(p.popen.pid)]
        signal.signal(signal.SIGTERM, old)
        signal.signal(signal.SIGINT, old_sigint)
        cg = cgroups_left(world.cgroups)
        cleanup = {"namespaces_left": left, "processes_left": alive, "cgroups_left": cg, "problems": problems}
        (out / "cleanup.json").write_text(json.dumps(cleanup, indent=1))
        if left or alive or problems or cg:
            print(f"tailor demo: cleanup incomplete: {cleanup}", file=sys.stderr)
    if report is None:
        return 130
    report["cleanup"] = cleanup
    (out / "report.json").write_text(json.dumps(report, indent=1))
    print(report["text"])
    print(f"\nwrote {out}/report.json, {out}/report.txt, {out}/dashboard.png, {out}/fetches.jsonl")
    return 0


def _policy_params(args) -> list[str]:
    return args.policy_param if args.policy_param is not None else DEFAULT_POLICY_PARAMS.get(args.policy, [])


def _log(msg: str) -> None:
    print(f"[{datetime.now(UTC).strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _run(world: World, args, groups: list[GroupSpec], duration: float, round_s: float, out: Path, bins: dict) -> dict:
    started = time.time()
    token = secrets.token_hex(16)
    auth = {"Authorization": f"Bearer {token}"}
    www = world.workdir / "www"
    www.mkdir(exist_ok=True)
    (www / "obj.bin").write_bytes(np.random.default_rng(args.seed).integers(0, 256, OBJECT_BYTES, np.uint8).tobytes())

    # namespaces and links
    srv = world.netns("srv")
    links = []
    for i, g in enumerate(groups, start=1):
        c: Condition = CATALOG[g.condition]
        cns = world.netns(f"c{i}")
        cli_ip, srv_ip = f"10.240.{i}.2", f"10.241.{i}.1"
        world.spawn(f"link-{g.name}", [bins["tailor-link"], "--srv-ns", srv, "--cli-ns", cns,
                                        "--srv-dev", f"tds{i}", "--cli-dev", f"tdc{i}",
                                        "--srv-ip", srv_ip, "--cli-ip", cli_ip,
                                        "--delay", f"{c.delay_ms:g}", "--down-rate-mbit", f"{c.down_mbps:g}",
                                        "--up-rate-mbit", f"{c.up_mbps:g}", "--down-loss", f"{c.loss:g}",
                                        "--up-loss", f"{c.loss:g}", "--queue-packets", str(c.queue_packets()),
                                        "--seed", str(args.seed * 101 + i),
                                        "--stats", str(world.workdir / f"link-{g.name}.json")])
        links.append({"name": g.name, "condition": c.to_dict(), "ns": cns, "client_ip": cli_ip, "server_ip": srv_ip,
                      "client_ips": [f"10.240.{i}.{k}" for k in range(2, 2 + CLIENTS_PER_GROUP)],
                      "prefix": analysis.prefix24(cli_ip), "workers": g.workers,
                      "url": f"https://{srv_ip}:{PORT}/obj.bin",
                      "max_time_s": max(20.0, 40 * c.rtt_ms / 1000 + OBJECT_BYTES * 8 / (c.down_mbps * 1e6) * 8)})
    _wait_devices(srv, len(groups), world)
    for i, link in enumerate(links, start=1):  # CLIENTS_PER_GROUP client addresses in each group's /24
        ip("-n", srv, "route", "replace", link["prefix"], "dev", f"tds{i}")
        for extra in link["client_ips"][1:]:
            ip("-n", link["ns"], "addr", "add", f"{extra}/32", "dev", f"tdc{i}")

    # the client prefixes' ISPs and regions, as MaxMind databases the manager reads (the agent's records carry none)
    from tailor.demo.geoip import write_databases

    asn_db, region_db, geo = write_databases(world.workdir, {x["name"]: x["prefix"] for x in links}, args.seed)
    _log("client prefixes placed: " + ", ".join(f"{g} {p['prefix']} AS{p['asn']} {p['region']}" for g, p in geo.items()))

    # manager
    from tailor.manager.testing import free_port

    port = free_port()
    murl = f"http://127.0.0.1:{port}"
    edge_token = secrets.token_urlsafe(24)  # the agent's credential: telemetry and table reads only
    env = {"TAILOR_OPERATOR_TOKEN": token, "TAILOR_EDGE_TOKENS": edge_token, "PYTHONPATH": str(ROOT / "src")}
    world.spawn("manager", [sys.executable, "-m", "tailor", "manager", "--listen", f"127.0.0.1:{port}",
                            "--data", str(out / "manager"), "--policy", args.policy, "--space", SPACE,
                            "--allowed", ALLOWED, "--update-freq", "0", "--holdback", "0.2",
                            "--explore-budget", str(args.explore_budget), "--seed", str(args.seed),
                            "--geoip-asn", str(asn_db), "--geoip-region", str(region_db),
                            *[f"--policy-param={x}" for x in _policy_params(args)]], env)
    _wait_http(murl + "/healthz", 60, world)
    _log(f"manager up at {murl}")

    # agent + edge (the edge starts inside the agent's cgroup, then enters the server namespace)
    cgroup_root = _cgroup_root()
    # the agent's environment holds its edge token only: it and the edge it starts (which listens on the network)
    # inherit none of the manager's credentials (until 2026-12-07 both got the operator token; found by review)
    agent = world.spawn("agent", [bins["tailor-agent"], "run", "--cgroup-root", cgroup_root,
                          "--table", murl + "/v1/table",
                          "--telemetry-url", murl + "/v1/telemetry", "--poll", "1s", "--source", "demo-agent",
                          "--full-address",
                          "--table-pubkey", str(out / "manager" / "signing.pub"),
                          "--", "ip", "netns", "exec", srv, bins["tailor-edge"], "--listen", f"0.0.0.0:{PORT}",
                          "--root", str(www), "--self-signed", "--apply-socket=false"], {"TAILOR_TOKEN": edge_token},
                        without=("TAILOR_OPERATOR_TOKEN", "TAILOR_EDGE_TOKENS"))
    world.cgroups.append(Path(cgroup_root) / f"tailor-agent-{agent.popen.pid}")  # the agent's default cgroup
    for link in links:  # the edge answers through every link
        _wait_fetch(link, world)
    warm = time.time()  # the first cycle loads the policy's libraries: do it before the clock runs
    # trust_env=False here and below: the operator token never goes to an HTTP(S)_PROXY from the environment
    r = httpx.post(murl + "/v1/cycle", headers=auth, timeout=300, trust_env=False)
    if r.status_code != 200:
        raise DemoError(f"warm-up POST /v1/cycle answered {r.status_code}: {r.text[:300]}")
    _log(f"warm-up update cycle took {time.time() - warm:.1f} s; edge reachable from every client namespace; "
         "workload starts")

    # workload in rounds
    wl = Workload(args.seed)
    t0 = time.time()
    deadline = t0 + duration
    for link in links:
        wl.start(link["name"], link["ns"], link["url"], link["workers"], link["max_time_s"], OBJECT_BYTES, deadline,
                 tuple(link["client_ips"]))
    rounds = []
    client = httpx.Client(timeout=120, headers=auth, trust_env=False)
    try:
        while time.time() < deadline:
            time.sleep(max(0.0, min(round_s, deadline - time.time())))
            world.check_alive()
            rounds.append(_cycle(client, murl, auth, links, t0, len(wl.snapshot())))
            r = rounds[-1]
            _log(f"round {len(rounds)}: table v{r['version']} rows {r['rows']} fetches {r['fetches']} "
                 f"window gain {r['window_improvement']} " +
                 " ".join(f"{k}={v['greedy_summary']}" for k, v in r["groups"].items()))
    finally:  # normal end: let running fetches finish (each bounded by curl --max-time); else be quick
        wl.stop(60.0 if sys.exc_info()[0] is None else 1.0)
    time.sleep(3.0)  # the agent flushes telemetry every second
    final = _cycle(client, murl, auth, links, t0, len(wl.snapshot()))
    audit = client.get(murl + "/v1/audit?limit=200").json()
    metrics = client.get(murl + "/metrics").text
    table = client.get(murl + "/v1/table").json()
    dashboard = client.get(murl + "/")
    if dashboard.status_code == 200:
        (out / "dashboard.html").write_text(dashboard.text)
    shot = _screenshot(out, world.workdir)
    client.close()
    for p in world.procs:  # agent (and its edge), then the manager: graceful, so telemetry and state are flushed
        if p.name == "agent":
            world.stop(p, 20)
    world.stop(next(p for p in world.procs if p.name == "manager"), 30)

    records = _records(out / "manager" / "tailor.duckdb")
    decisions = _decision_audit(out / "manager" / "tailor.duckdb")
    _log(f"decision audit: {decisions['records']} records of {decisions['clients']} clients in {decisions['versions']} "
         f"table versions; {decisions['decision_mismatches']} decisions and {decisions['probability_mismatches']} "
         f"probabilities differ from spec/decision.md; held back {decisions['held_back_clients']}/{decisions['clients']} "
         f"clients (95% interval {decisions['held_back_interval95'][0]:.3f}-{decisions['held_back_interval95'][1]:.3f}, "
         f"table {decisions['table_holdback']}); {decisions['clients_switching_cohort']} clients changed cohort")
    fetches = [dict(f.to_dict(), prefix=next(x["prefix"] for x in links if x["name"] == f.group))
               for f in wl.snapshot()]
    one_way = {x["name"]: x["condition"]["rtt_ms"] / 2000.0 for x in links}
    joined, unmatched = analysis.match(fetches, records, one_way)
    t_measure = t0 + duration / 2
    summ = analysis.summarize(joined, [{"name": x["name"]} for x in links], t_measure, args.seed)
    keys = {(f["ns"], f["worker"], f["t_spawn"]) for f in joined}
    rest = [dict(f, matched=False) for f in fetches if (f["ns"], f["worker"], f["t_spawn"]) not in keys]
    with open(out / "fetches.jsonl", "w") as fh:  # every fetch; the matched ones with their server record
        for f in sorted([dict(f, matched=True) for f in joined] + rest, key=lambda f: f["t_start"]):
            fh.write(json.dumps(f) + "\n")
    report = {
        "schema": "tailor.demo-report/v1", "seed": args.seed, "policy": args.policy, "space": SPACE,
        "allowed": ALLOWED, "explore_budget": args.explore_budget, "policy_params": _policy_params(args), "holdback": 0.2, "quick": bool(args.quick),
        "duration_s": duration, "round_s": round_s, "object_bytes": OBJECT_BYTES,
        "started_utc": datetime.fromtimestamp(started, UTC).isoformat(timespec="seconds"),
        "wall_s": round(time.time() - started, 1), "load_avg_end": list(os.getloadavg()),
        "measurement": {"after_learning": "fetches that started in the second half of the workload",
                        "completion": "curl time_total (client side, ms)",
                        "learning_outcome": "tailor-agent connection record duration_ms (server side)",
                        "join": analysis.__doc__.split("\n\n")[1].replace("\n", " ")},
        "fetches": {"total": len(fetches), "ok": sum(f["ok"] for f in fetches), "matched": len(joined),
                    "unmatched_ok": unmatched, "records": len(records)},
        "table_versions": [{"version": a["version"], "ts": a["ts"], "action": a["action"], "reason": a["reason"]}
                           for a in reversed(audit)],
        "final_table_version": table["version"], "rounds": rounds + [final],
        "metrics": {k: v for k, v in _prom(metrics).items() if k.startswith("tailor_")},
        "screenshot": str(shot) if shot else None,
        "decision_audit": decisions,
        "geoip": geo,
        "groups": [],
    }
    for x in links:
        g = final["groups"][x["name"]]
        versions = sorted({f["table_version"] for f in joined if f["group"] == x["name"]})
        report["groups"].append({
            "name": x["name"], "condition": x["condition"]["name"], "prefix": x["prefix"],
            "rtt_ms": x["condition"]["rtt_ms"], "down_mbps": x["condition"]["down_mbps"],
            "loss": x["condition"]["loss"], "workers": x["workers"],
            "fetches_ok": sum(1 for f in fetches if f["group"] == x["name"] and f["ok"]),
            "fetches_failed": sum(1 for f in fetches if f["group"] == x["name"] and not f["ok"]),
            "table_versions_seen": versions,
            "chosen": {"group": g["table_group"], "greedy": g["greedy"], "p": g["greedy_p"], "knobs": g["greedy_knobs"],
                       "choices": g["choices"], "summary": g["greedy_summary"]},
            "greedy_by_round": [r["groups"][x["name"]]["greedy_summary"] for r in rounds + [final]],
            "after_learning": summ[x["name"]],
            "after_learning_by_config": analysis.by_config(joined, x["name"], t_measure),
        })
    report["text"] = analysis.text_table(report) + (
        f"\n\nseed {args.seed}, policy {args.policy}, {duration:.0f} s workload in {len(rounds)} rounds of {round_s:.0f} s,"
        f" final table v{table['version']}, fetches ok {report['fetches']['ok']}/{report['fetches']['total']}, "
        f"matched to server records {len(joined)}")
    (out / "report.txt").write_text(report["text"] + "\n")
    return report


def _wait_devices(srv: str, n: int, world: World, timeout_s: float = 20.0) -> None:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        world.check_alive()
        res = ip("-n", srv, "-o", "addr", "show")  # checked: a namespace gone is its error, not a 20 s wait
        if sum(1 for line in res.stdout.splitlines() if " tds" in line and "inet " in line) >= n:
            return
        time.sleep(0.2)
    raise DemoError(f"tailor-link did not bring up {n} TUN devices in {srv} within {timeout_s:.0f} s")


def _wait_http(url: str, timeout_s: float, world: World) -> None:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        world.check_alive()
        try:
            if httpx.get(url, timeout=2, trust_env=False).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise DemoError(f"{url} did not answer within {timeout_s:.0f} s")


def _wait_fetch(link: dict, world: World, timeout_s: float = 60.0) -> None:
    end = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < end:
        world.check_alive()
        last = fetch_once(link["ns"], link["url"], link["max_time_s"], OBJECT_BYTES)
        if last.ok:
            return
        time.sleep(0.5)
    raise DemoError(f"the edge did not serve {link['url']} in {link['ns']} within {timeout_s:.0f} s "
                    f"(last: exit {last.curl_exit if last else '?'}, HTTP {last.code if last else '?'})")


def _cycle(client: httpx.Client, murl: str, auth: dict, links: list[dict], t0: float, fetches: int) -> dict:
    from tailor.table import DecisionTable

    s = client.post(murl + "/v1/cycle", headers=auth)
    if s.status_code != 200:
        raise DemoError(f"POST /v1/cycle answered {s.status_code}: {s.text[:300]}")
    summary = s.json()
    doc = client.get(murl + "/v1/table").json()
    res = DecisionTable(doc)
    choices = {g["id"]: g["choices"] for g in doc["groups"]}
    groups = {}
    for x in links:
        gid = res.group_of(x["client_ip"])
        ch = choices.get(gid, [{"config": doc["default"], "p": 1.0}])
        best = max(ch, key=lambda c: c["p"])
        knobs = doc["configs"].get(best["config"], {})
        groups[x["name"]] = {"table_group": gid, "greedy": best["config"], "greedy_p": best["p"], "greedy_knobs": knobs,
                             "choices": ch, "greedy_summary": _knob_summary(knobs, best["config"] == doc["default"])
                             + f" p={best['p']:.2f}"}
    return {"t": round(time.time() - t0, 1), "version": doc["version"], "rows": summary.get("rows"),
            "observed": summary.get("observed"), "improvement": summary.get("improvement"),
            "window_improvement": summary.get("window_improvement"), "rollbacks": summary.get("rollbacks"),
            "fetches": fetches, "groups": groups}


def _knob_summary(knobs: dict, is_default: bool) -> str:
    if is_default or not knobs:
        return "default(cubic iw10)"
    cc = knobs.get("tcp.congestion_control", "cubic")
    iw = knobs.get("tcp.initial_cwnd", 10)
    rest = {k: v for k, v in knobs.items() if k not in ("tcp.congestion_control", "tcp.initial_cwnd")}
    return f"{cc} iw{iw}" + (f" {rest}" if rest else "")


def _screenshot(out: Path, work: Path) -> Path | None:
    """The saved dashboard (it needs no other request) rendered by headless Chromium. From the file, not the
    manager: until 2026-12-07 its URL carried the operator token, readable in ``ps`` by any local user while the
    browser ran (found by review). Chromium runs in its own session, killed as a group on timeout; its profile
    is removed either way."""
    page = out / "dashboard.html"
    if not Path(CHROMIUM).exists() or not page.exists():
        _log("no /usr/bin/chromium or no saved dashboard: dashboard screenshot skipped")
        return None
    shot, profile = out / "dashboard.png", work / "chromium-profile"
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-quic",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           f"--user-data-dir={profile}", f"--screenshot={shot}", "--window-size=1400,2200", page.resolve().as_uri()]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        proc.wait(timeout=90)
    except subprocess.TimeoutExpired:
        _log("chromium timed out; no screenshot")
        return None
    finally:
        if proc.poll() is None or _group_alive(proc.pid):
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # the browser's helper processes too
            except ProcessLookupError:
                pass
            proc.wait(timeout=10)
        shutil.rmtree(profile, ignore_errors=True)
    return shot if shot.exists() and shot.stat().st_size > 0 else None


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False


def _decision_audit(db: Path) -> dict:
    """spec/decision.md checked on what the agent logged: per table version, every record against
    ``tailor.table.decide``; over the run, the held-back share of clients and cohort stickiness."""
    import duckdb

    from tailor.table.audit import audit_decisions, binomial_interval

    con = duckdb.connect(str(db), read_only=True)
    try:
        docs = {v: json.loads(d) for v, d in con.execute("SELECT version, doc FROM tables").fetchall()}
        rows = con.execute("""SELECT table_version, client_addr, "group", config_id, probability, coalesce(holdback, false)
                              FROM telemetry WHERE kind = 'connection' AND client_addr IS NOT NULL""").fetchall()
    finally:
        con.close()
    keys = ("table_version", "client_addr", "group", "config_id", "probability", "holdback")
    records = [dict(zip(keys, r)) for r in rows]
    per_version = [audit_decisions(docs[v], records) for v in sorted({r["table_version"] for r in records}) if v in docs]
    cohort: dict[str, set] = {}
    for r in records:
        cohort.setdefault(r["client_addr"], set()).add(bool(r["holdback"]))
    held = sum(True in v for v in cohort.values())
    lo, hi = binomial_interval(held, len(cohort))
    holdback = sorted({float(d.get("holdback", 0.0)) for d in docs.values()})
    return {"records": len(records), "versions": len(per_version), "clients": len(cohort),
            "decision_mismatches": sum(a["decision_mismatches"] for a in per_version),
            "probability_mismatches": sum(a["probability_mismatches"] for a in per_version),
            "clients_switching_cohort": sum(len(v) > 1 for v in cohort.values()),
            "clients_switching_config_within_a_version": sum(a["clients_switching_config"] for a in per_version),
            "table_holdback": holdback, "held_back_clients": held, "held_back_interval95": [lo, hi],
            "holdback_in_interval": len(holdback) == 1 and lo <= holdback[0] <= hi,
            "examples": [e for a in per_version for e in a["examples"]][:5], "per_version": per_version}


def _records(db: Path) -> list[dict]:
    import duckdb

    con = duckdb.connect(str(db), read_only=True)
    try:
        rows = con.execute("""SELECT time, client_prefix, coalesce(holdback, false), config_id, table_version,
                                     "group", duration_ms FROM telemetry
                              WHERE kind = 'connection' AND duration_ms IS NOT NULL ORDER BY time""").fetchall()
    finally:
        con.close()
    keys = ("time", "client_prefix", "holdback", "config_id", "table_version", "group", "duration_ms")
    return [dict(zip(keys, r)) for r in rows]


def _prom(text: str) -> dict:
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            try:
                out[name] = float(value)
            except ValueError:
                pass
    return out
