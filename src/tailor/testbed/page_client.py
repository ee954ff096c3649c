"""Runs inside the client namespace (stdlib only): load pages in headless Chromium, print one JSON line per load.

Chromium is driven over the DevTools protocol on ``--remote-debugging-pipe`` (fd 3 = commands to the browser,
fd 4 = replies, NUL-terminated JSON), so no websocket library or node is needed. One browser process per job
(fresh ``--user-data-dir``); every load gets a fresh *browser context* (its own cache, cookies, TLS session cache
and socket pools, like a new incognito profile) with the HTTP cache disabled, and the context is disposed after
the load, closing its connections. Page-load time = ``loadEventEnd`` of the PerformanceNavigationTiming entry
(= loadEventEnd - navigationStart), read back with ``Runtime.evaluate`` once the load event has fired.

Each record also carries the browser's CPU time during the load (``cpu_ms``: every process of its session, so
CPU contention is not mistaken for a network effect), DOMContentLoaded, ``full_ms`` (the last object's responseEnd, once every expected
object arrived), the resources with the protocol each used, and the server namespace's TCP counters
before/after (as ``client_script``). A load is valid only if every non-font object of the page arrived over the
intended HTTP version. Web fonts are requested at layout time and do not delay the load event; Chromium
sometimes never requests one of them (the font files are random bytes that fail to decode), so missing fonts
are recorded (``missing_fonts``) but do not invalidate a load.

Usage: python3 page_client.py SPEC.json
  SPEC: {"chromium": path, "resolver_rules": "...", "extra_routes": ["10.231.1.0/24"], "dev": "tl-c",
         "max_time": s, "loads": [{"key", "url", "http", "expect_resources"}]}
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from client_script import counters, server_pid  # noqa: E402

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--no-default-browser-check",
         "--disable-background-networking", "--disable-component-update", "--disable-default-apps",
         "--disable-sync", "--disable-extensions", "--metrics-recording-only", "--mute-audio",
         "--disable-features=Translate,OptimizationHints,MediaRouter,InterestFeedContentSuggestions,"
         "AutofillServerCommunication,CertificateTransparencyComponentUpdater",
         "--ignore-certificate-errors", "--disable-quic", "--disk-cache-size=1", "--disable-dev-shm-usage",
         "--remote-debugging-pipe")
TIMING_JS = """JSON.stringify((function(){
 var n = performance.getEntriesByType('navigation')[0] || {};
 var r = performance.getEntriesByType('resource');
 r = r.filter(function(e){ return e.name.indexOf('favicon.ico') < 0; });
 var protos = {}; r.forEach(function(e){ protos[e.nextHopProtocol] = (protos[e.nextHopProtocol]||0) + 1; });
 return {names: r.map(function(e){ return e.name.split('/').pop(); }), load_end: n.loadEventEnd || 0,
         dcl: n.domContentLoadedEventEnd || 0, nav_proto: n.nextHopProtocol, resources: r.length, protos: protos,
         last_response: Math.max.apply(null, r.map(function(e){ return e.responseEnd; }).concat([0])),
         transfer: r.reduce(function(a, e){ return a + (e.transferSize||0); }, 0) + (n.transferSize||0)};
})())"""


class CDP:
    """Minimal DevTools client over the pipe: send(method, params, session) -> result; wait_event(name)."""

    def __init__(self, proc, wfd: int, rfd: int):
        self.proc, self.wfd, self.rfd, self.next_id = proc, wfd, rfd, 0
        self.replies: dict[int, dict] = {}
        self.events: list[dict] = []
        self.cv = threading.Condition()
        threading.Thread(target=self._reader, daemon=True).start()

    def _reader(self) -> None:
        buf = b""
        while True:
            try:
                chunk = os.read(self.rfd, 1 << 16)
            except OSError:
                chunk = b""
            if not chunk:
                with self.cv:
                    self.replies[-1] = {"error": "browser closed the pipe"}
                    self.cv.notify_all()
                return
            buf += chunk
            *msgs, buf = buf.split(b"\0")
            with self.cv:
                for m in msgs:
                    d = json.loads(m)
                    if "id" in d:
                        self.replies[d["id"]] = d
                    else:
                        self.events.append(d)
                self.cv.notify_all()

    def send(self, method: str, params: dict | None = None, session: str | None = None, timeout: float = 30) -> dict:
        with self.cv:
            self.next_id += 1
            mid = self.next_id
        msg = {"id": mid, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self.wfd, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        with self.cv:
            while mid not in self.replies:
                if -1 in self.replies or not self.cv.wait(max(0.0, deadline - time.monotonic())):
                    raise RuntimeError(f"no reply to {method} ({self.replies.get(-1, 'timeout')})")
            d = self.replies.pop(mid)
        if "error" in d:
            raise RuntimeError(f"{method}: {d['error']}")
        return d.get("result", {})

    def wait_event(self, name: str, session: str, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self.cv:
            while True:
                for e in self.events:
                    if e.get("method") == name and e.get("sessionId") == session:
                        return True
                if -1 in self.replies or not self.cv.wait(max(0.0, deadline - time.monotonic())):
                    return False

    def clear_events(self) -> None:
        with self.cv:
            self.events.clear()


def launch(chromium: str, rules: str, profile: str):
    cmd_r, cmd_w = os.pipe()  # we write commands, the browser reads fd 3
    rep_r, rep_w = os.pipe()  # the browser writes fd 4, we read

    def fds():
        os.dup2(cmd_r, 3)
        os.dup2(rep_w, 4)

    args = [chromium, *FLAGS, f"--user-data-dir={profile}", f"--host-resolver-rules={rules}", "about:blank"]
    proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            preexec_fn=fds, pass_fds=(3, 4), start_new_session=True)
    os.close(cmd_r)
    os.close(rep_w)
    return proc, CDP(proc, cmd_w, rep_r)


def load(cdp: CDP, url: str, max_time: float, expect: list[str] | None = None) -> dict:
    ctx = cdp.send("Target.createBrowserContext", {"disposeOnDetach": True})["browserContextId"]
    target = cdp.send("Target.createTarget", {"url": "about:blank", "browserContextId": ctx})["targetId"]
    sess = cdp.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
    try:
        cdp.send("Page.enable", session=sess)
        cdp.send("Network.enable", session=sess)
        cdp.send("Network.setCacheDisabled", {"cacheDisabled": True}, session=sess)
        cdp.clear_events()
        t0 = time.monotonic()
        nav = cdp.send("Page.navigate", {"url": url}, session=sess)
        if nav.get("errorText"):
            return {"error": nav["errorText"]}
        fired = cdp.wait_event("Page.loadEventFired", sess, max_time)
        wall = time.monotonic() - t0
        if not fired:
            return {"error": f"no load event within {max_time:g} s", "wall_ms": 1000 * wall}
        # loadEventEnd is set when the onload handlers return, just after the event. Objects requested only at
        # layout time (web fonts) may still be on the way: wait for every expected object, so the record's
        # ``full_ms`` (last responseEnd) covers the whole page and a load is valid only if everything arrived.
        stop = time.monotonic() + min(5.0, max(2.0, max_time - wall))
        while True:
            res = json.loads(cdp.send("Runtime.evaluate", {"expression": TIMING_JS, "returnByValue": True},
                                      session=sess)["result"]["value"])
            if res["load_end"] > 0 and not set(expect or []) - set(res["names"]) or time.monotonic() > stop:
                break
            time.sleep(0.02)
        res["full_ms"] = max(res["load_end"], res["last_response"])
        res["wall_ms"] = 1000 * wall
        return res
    finally:
        try:
            cdp.send("Target.closeTarget", {"targetId": target}, timeout=10)
            cdp.send("Target.disposeBrowserContext", {"browserContextId": ctx}, timeout=10)
        except RuntimeError:
            pass


def browser_cpu_ms(session: int) -> float:
    """CPU time (user + system, ms) of the browser's processes: every live process of its session (the browser
    was started in a new session, so every helper it forks is in it) plus what their reaped children used."""
    tick = 1000.0 / os.sysconf("SC_CLK_TCK")
    total = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # exited meanwhile
        if int(fields[3]) == session:  # fields after "(comm)": state ppid pgrp session ...; utime = 14th overall
            total += sum(int(x) for x in fields[11:15])  # utime stime cutime cstime
    return total * tick


def main(spec_path: str) -> int:
    spec = json.load(open(spec_path))
    for net in spec.get("extra_routes", []):  # the other origins' addresses live behind the same link
        subprocess.run(["ip", "route", "replace", net, "dev", spec.get("dev", "tl-c")], check=True, timeout=10)
    pid = server_pid(os.environ.get("TL_SERVER_NS", ""))
    with tempfile.TemporaryDirectory(prefix="tailor-chromium-") as profile:
        proc, cdp = launch(spec["chromium"], spec["resolver_rules"], profile)
        try:
            for f in spec["loads"]:
                before = counters(pid)
                cpu0, w0 = browser_cpu_ms(proc.pid), time.monotonic()
                started = time.time()
                try:
                    rec = load(cdp, f["url"], float(spec["max_time"]), f.get("expect_names"))
                except (RuntimeError, ValueError, KeyError) as err:
                    rec = {"error": str(err)[-300:]}
                after = counters(pid)
                rec["cpu_ms"] = browser_cpu_ms(proc.pid) - cpu0  # the browser's CPU time during this load
                rec["cpu_window_ms"] = 1000 * (time.monotonic() - w0)  # context set-up to disposal, load included
                want = "h2" if f["http"] == "2" else "http/1.1"
                protos = rec.get("protos", {})
                names = rec.pop("names", [])
                expect = f.get("expect_names", []) + f.get("fonts", [])
                rec["missing"] = json.dumps(sorted(set(f.get("expect_names", [])) - set(names))[:20])
                rec["missing_fonts"] = json.dumps(sorted(set(f.get("fonts", [])) - set(names)))
                rec["extra"] = json.dumps(sorted(n for n in set(names) if n not in expect and n != "favicon.ico")[:20])
                ok = (not rec.get("error") and rec.get("load_end", 0) > 0 and rec.get("nav_proto") == want
                      and set(protos) - {""} == {want} and rec["missing"] == "[]")
                rec.update(key=f["key"], started_unix=started, page_ok=bool(ok), http_version=f["http"],
                           expect_resources=f["expect_resources"],
                           **{f"srv_{k}": after[k] - before.get(k, 0) for k in after})
                rec["protos"] = json.dumps(protos)
                print(json.dumps(rec), flush=True)
                time.sleep(float(spec.get("gap_s", 0.2)))  # let the disposed context's connections close
        finally:
            try:
                cdp.send("Browser.close", timeout=10)
            except RuntimeError:
                pass
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)
                proc.wait(timeout=10)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
