"""The QUIC/HTTP-3 workload: tailor-edge (``--quic``) serves, tailor-fetch fetches over UDP through tailor-link.

A *QUIC configuration* is a set of ``quic.*`` knobs (spec/knobs.json). It reaches the server the way it would in
production: a decision table gives it to the client's prefix (the client namespace's address, /32), and
tailor-edge picks it on the client's first Initial packet. Everything else is the table default with HTTP/2 on,
so the TCP comparison point (``http`` "2": the same objects over TLS/TCP HTTP/2 from the same tailor-edge, default
route options cubic/IW10) is measured by the same server and the same client program.

What the knobs can and cannot do here: the ``quic.*`` knobs are the *server's* transport parameters (its receive
windows, the streams the client may open, its idle timeout) plus its Initial datagram size. For a download the
server's receive windows only bound what the *client* sends (the request), so they are not expected to change a
download's time; the initial packet size sets the datagram size before path-MTU discovery. quic-go runs its own
CUBIC/NewReno-style congestion controller on a UDP socket: ``tcp.congestion_control`` (per route or per socket)
does not reach it and quic-go v0.65 cannot switch to BBR or change the initial window or pacing (Config-Snob's
knobs, seed 002 Table 3, are all sender-side ones of this kind).

>>> plan = QuicPlan.from_dict({"conditions": ["wpt-cable"], "sizes": [10240], "reps": 2,
...     "configs": [{"name": "default"}, {"name": "small-win", "quic.initial_stream_receive_window": 65536}]})
>>> [(j.name, len(j.fetches)) for j in plan.jobs()]
[('wpt-cable|quic-default', 4), ('wpt-cable|quic-small-win', 2)]
>>> plan.jobs()[0].fetches[1].key
'wpt-cable|quic-default|h2|10240|r0'
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import os
import platform
import re
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from tailor import paths
from tailor.errors import ParameterError, check
from tailor.space.config import Configuration
from tailor.space.knobs import load_registry
from tailor.testbed import quic_client
from tailor.testbed.conditions import CATALOG, Condition
from tailor.testbed.plan import Fetch, Transport, _cond, estimate_fetch_s
from tailor.testbed.server import (SERVER_IP, TLS_PORT, _seeded_bytes, object_name, require_tools,
                                   tailor_edge_binary, tailor_fetch_binary, tailor_link_binary)

CLIENT_IP = "10.231.0.2"  # tailor-link's client address: the decision table's rule is CLIENT_IP/32
QUIC_HTTP = ("3", "2")  # "3" = HTTP/3 over QUIC with the job's configuration; "2" = TLS/TCP HTTP/2, table default
BASE = {"http.version": "2"}  # every configuration serves HTTP/2 on TCP, so the h2 comparison needs no second table
_NAME = re.compile(r"^[a-z0-9][a-z0-9.-]{0,31}$")


def quic_knobs() -> tuple[str, ...]:
    return tuple(sorted(k.name for k in load_registry().knobs.values() if k.layer == "quic"))


@dataclass(frozen=True)
class QuicConfig:
    """A named set of ``quic.*`` knob values; unset knobs keep their registry defaults."""

    name: str
    knobs: tuple[tuple[str, int], ...] = ()

    def __post_init__(self):
        check(isinstance(self.name, str) and bool(_NAME.match(self.name)), "QuicConfig", "name",
              "1-32 characters of a-z 0-9 . - (it is part of every fetch key)", self.name)
        allowed = quic_knobs()
        for k, _ in self.knobs:
            check(k in allowed, "QuicConfig", k, f"one of the quic.* knobs {allowed}", k)
        self.configuration()  # registry bounds and types: raises a ParameterError naming the knob

    @classmethod
    def from_dict(cls, d: dict) -> QuicConfig:
        if not isinstance(d, dict) or "name" not in d:
            raise ParameterError(f"The 'configs' entries of QuicPlan must be objects with a 'name' and quic.* "
                                 f"knobs. Got {d!r}.")
        return cls(str(d["name"]), tuple(sorted((k, v) for k, v in d.items() if k != "name")))

    def configuration(self) -> Configuration:
        return Configuration({**BASE, **dict(self.knobs)})

    def to_dict(self) -> dict:
        return {"name": self.name, **dict(self.knobs)}


def decision_table(cfg: QuicConfig, version: int = 1) -> dict:
    """The table tailor-edge serves one job with: default = HTTP/2 with default QUIC parameters; the client's /32
    is a group whose only choice is ``cfg``."""
    base, tuned = Configuration(BASE), cfg.configuration()
    return {"schema": "tailor.decision-table/v1", "version": version, "generated_at": 1.0, "default": base.id,
            "configs": {base.id: base.changes(), tuned.id: tuned.changes()},
            "groups": [{"id": "testbed-client", "choices": [{"config": tuned.id, "p": 1.0}]}],
            "rules": [{"prefix": f"{CLIENT_IP}/32", "group": "testbed-client"}]}


@dataclass(frozen=True)
class QuicJob:
    """One tailor-link run: one condition, one QUIC configuration (the h2 fetches ride on the default's job)."""

    condition: Condition
    config: QuicConfig
    fetches: tuple[Fetch, ...]
    transport: Transport = Transport()  # route options of the TCP (h2) fetches: cubic, IW 10, RTO 200
    is_pages: bool = False

    @property
    def name(self) -> str:
        return f"{self.condition.name}|quic-{self.config.name}"

    def estimate_s(self) -> float:
        return sum(estimate_fetch_s(self.condition, f.size) for f in self.fetches) + 2.0


@dataclass
class QuicPlan:
    conditions: list[Condition]
    sizes: list[int]
    configs: list[QuicConfig]
    reps: int = 3
    h2: bool = True  # also fetch over TCP HTTP/2 (in the default configuration's job)
    max_fetch_s: float = 20.0
    seed: int = 1

    @classmethod
    def from_dict(cls, d: dict) -> QuicPlan:
        check(isinstance(d, dict), "QuicPlan", "(root)", "a JSON object", type(d).__name__)
        for key in ("conditions", "sizes", "configs"):
            check(isinstance(d.get(key), list) and len(d[key]) > 0, "QuicPlan", key, "a non-empty list", d.get(key))
        unknown = set(d) - {"conditions", "sizes", "configs", "reps", "h2", "max_fetch_s", "seed", "doc"}
        check(not unknown, "QuicPlan", ",".join(sorted(unknown)), "absent (unknown field)", sorted(unknown))
        conds = [CATALOG[c] if isinstance(c, str) and c in CATALOG else _cond(c) for c in d["conditions"]]
        plan = cls(conds, [int(s) for s in d["sizes"]], [QuicConfig.from_dict(c) for c in d["configs"]],
                   int(d.get("reps", 3)), bool(d.get("h2", True)), float(d.get("max_fetch_s", 20.0)),
                   int(d.get("seed", 1)))
        plan.validate()
        return plan

    @classmethod
    def load(cls, path: str | Path) -> QuicPlan:
        try:
            doc = json.loads(Path(path).read_text())
        except (OSError, json.JSONDecodeError) as err:
            raise ParameterError(f"The 'plan' parameter of testbed quic must be a readable plan JSON file. "
                                 f"Got {str(path)!r} ({type(err).__name__}: {err}).") from None
        return cls.from_dict(doc)

    def validate(self) -> None:
        check(all(0 < s <= 64 << 20 for s in self.sizes), "QuicPlan", "sizes", "each in (0, 64 MB]", self.sizes)
        names = [c.name for c in self.configs]
        check(len(set(names)) == len(names), "QuicPlan", "configs", "distinct names", names)
        check("default" in names and not self.default_config().knobs, "QuicPlan", "configs",
              "one entry named 'default' with no knobs (the comparison point)", names)
        ids = [c.configuration().id for c in self.configs]
        check(len(set(ids)) == len(ids), "QuicPlan", "configs", "distinct knob values", self.configs)
        check(1 <= self.reps <= 50, "QuicPlan", "reps", "in [1, 50]", self.reps)
        check(0 < self.max_fetch_s <= 600, "QuicPlan", "max_fetch_s", "in (0, 600]", self.max_fetch_s)

    def default_config(self) -> QuicConfig:
        return next(c for c in self.configs if c.name == "default")

    def sizes_for(self, c: Condition) -> list[int]:
        return [s for s in self.sizes if estimate_fetch_s(c, s) <= self.max_fetch_s]

    def jobs(self) -> list[QuicJob]:
        out = []
        for cond, cfg in itertools.product(self.conditions, self.configs):
            protos = ["3", "2"] if (self.h2 and cfg.name == "default") else ["3"]
            fetches = tuple(Fetch(quic_key(cond.name, cfg.name, h, s, r), h, s, r)
                            for r in range(self.reps) for s in self.sizes_for(cond) for h in protos)
            if fetches:
                out.append(QuicJob(cond, cfg, fetches))
        return out

    def estimate_s(self, parallel: int = 1) -> float:
        return sum(j.estimate_s() for j in self.jobs()) / max(1, parallel)

    def to_dict(self) -> dict:
        return {"conditions": [c.to_dict() for c in self.conditions], "sizes": self.sizes,
                "configs": [c.to_dict() for c in self.configs], "reps": self.reps, "h2": self.h2,
                "max_fetch_s": self.max_fetch_s, "seed": self.seed}


def quic_key(cond: str, cfg: str, http: str, size: int, rep: int) -> str:
    return f"{cond}|quic-{cfg}|h{http}|{size}|r{rep}"


# ---------------------------------------------------------------------------------------------------- running


@dataclass
class Binaries:
    link: str
    edge: str
    fetch: str

    @classmethod
    def find(cls) -> Binaries:
        return cls(tailor_link_binary(), tailor_edge_binary(), tailor_fetch_binary())


def prepare_objects(site: Path, sizes: list[int], seed: int = 1) -> Path:
    """Random (incompressible) objects, the same bytes as the nginx site of tb-v2 for the same seed."""
    www = site / "www"
    www.mkdir(parents=True, exist_ok=True)
    data = _seeded_bytes(seed, max(sizes))
    for s in sorted(set(sizes)):
        (www / object_name(s)).write_bytes(data[:s])
    return www


def server_cmd(edge_bin: str, www: Path, table: Path, tmp: Path) -> str:
    return (f"sysctl -qw net.ipv4.tcp_no_metrics_save=1 && exec {edge_bin} --listen {SERVER_IP}:{TLS_PORT} "
            f"--root {www} --self-signed --quic --table {table} --poll 1h --telemetry - "
            f"> {tmp}/telemetry.jsonl 2> {tmp}/edge.err")


def run_quic_job(job: QuicJob, todo: list[Fetch], www: Path, bins: Binaries, seed: int,
                 on_row: Callable[[dict], None]) -> dict:
    """Measure ``todo`` in one tailor-link run; ``on_row`` per fetch; returns the run record, which includes what
    the server itself reported: the configuration ids its h3 and h2 responses were served with."""
    from tailor.testbed.runner import _emulator_stats, _stream, link_args

    with tempfile.TemporaryDirectory(prefix="tailor-tbq-") as tmpd:
        tmp = Path(tmpd)
        os.chmod(tmp, 0o755)
        table, spec, stats = tmp / "table.json", tmp / "spec.json", tmp / "stats.json"
        table.write_text(json.dumps(decision_table(job.config)))
        max_time = max(20.0, 6 * max(estimate_fetch_s(job.condition, f.size) for f in todo))
        timeout = min(1800.0, sum(estimate_fetch_s(job.condition, f.size) for f in todo) * 4 + 60)
        spec.write_text(json.dumps({"fetch_bin": bins.fetch, "url": f"https://{SERVER_IP}:{TLS_PORT}/",
                                    "max_time": max_time,
                                    "fetches": [{"key": f.key, "http": f.http, "path": object_name(f.size)}
                                                for f in todo]}))
        client = f"{sys.executable} {quic_client.__file__} {spec}"
        cmd = [bins.link, *link_args(job, seed, stats, timeout), "--server-cmd", server_cmd(bins.edge, www, table, tmp),
               "--client-cmd", client]
        run = {"run_id": f"{job.name}|{time.time():.3f}", "job": job.name, "seed": seed,
               "load_start": os.getloadavg()[0], "started_unix": time.time()}
        by_key = {f.key: f for f in todo}
        rc, stderr = _stream(cmd, timeout + 30, lambda rec: on_row(quic_row(job, by_key[rec["key"]], rec, run)), run)
        run.update(exit=rc, wall_s=time.time() - run["started_unix"], load_end=os.getloadavg()[0],
                   stderr_tail=stderr[-400:], **_emulator_stats(stats), **edge_report(tmp))
        return run


def edge_report(tmp: Path) -> dict:
    """Configuration ids per ALPN from tailor-edge's own telemetry (JSON-lines batches on its stdout)."""
    ids: dict[str, list[str]] = {"h3": [], "h2": []}
    try:
        lines = (tmp / "telemetry.jsonl").read_text().splitlines()
    except OSError:
        lines = []
    for line in lines:
        try:
            doc = json.loads(line)
        except json.JSONDecodeError:
            continue
        for rec in doc.get("records", [doc]) if isinstance(doc, dict) else []:
            if isinstance(rec, dict) and rec.get("kind") == "response" and rec.get("alpn") in ids:
                ids[rec["alpn"]].append(str(rec.get("config_id")))
    err = (tmp / "edge.err").read_text()[-300:] if (tmp / "edge.err").exists() else ""
    return {"edge_h3_responses": len(ids["h3"]), "edge_h2_responses": len(ids["h2"]),
            "edge_h3_config_ids": ",".join(sorted(set(ids["h3"]))),
            "edge_h2_config_ids": ",".join(sorted(set(ids["h2"]))), "edge_stderr_tail": err}


def quic_row(job: QuicJob, f: Fetch, rec: dict, run: dict) -> dict:
    """One measurements.parquet row: the tb-v2 columns (condition, cc/iw/rto of the TCP route, http, size, rep,
    completion_ms, ok, ...) plus the QUIC configuration and tailor-fetch's times."""
    c, t = job.condition, job.transport
    want = "h3" if f.http == "3" else "h2"
    cfg = job.config if f.http == "3" else QuicConfig("default")
    conf = cfg.configuration() if f.http == "3" else Configuration(BASE)
    ok = (rec.get("fetch_exit") == 0 and rec.get("status") == 200 and rec.get("bytes") == f.size
          and rec.get("protocol") == want)
    total = rec.get("total_ms")
    return {**rec, "ok": bool(ok), "workload": "quic", "condition": c.name, "family": c.family,
            "down_mbps": c.down_mbps, "up_mbps": c.up_mbps, "up_loss": c.uplink_loss, "trace": c.down_trace or "",
            "rtt_ms": c.rtt_ms, "loss": c.loss, "queue_packets": c.queue_packets(),
            "cc": t.cc, "iw": t.iw, "rto_min_ms": t.rto_min_ms, "http": f.http, "size_bytes": f.size, "rep": f.rep,
            "page": "", "quic_config": cfg.name, "config_id": conf.id,
            **{k.replace(".", "_"): int(conf[k]) for k in quic_knobs()},
            "run_id": run["run_id"], "load1": os.getloadavg()[0],
            "completion_ms": float(total) if ok and total is not None else float("nan")}


def measure_quic(plan: QuicPlan, out_dir: Path, parallel: int = 2, budget_s: float | None = None,
                 bins: Binaries | None = None, progress: bool = True) -> dict:
    """Measure every fetch of ``plan`` not yet in ``out_dir`` (resumable); start no job after ``budget_s``."""
    from tailor.testbed.measure import _STOPPING, _cmd, _merge_provenance, _now, _pools, retry_missing
    from tailor.testbed.store import Store

    check(1 <= parallel <= 8, "measure_quic", "parallel", "in [1, 8]", parallel)
    require_tools("ip")
    bins = bins or Binaries.find()
    store = Store(out_dir)
    prov = provenance(plan, bins, parallel, _cmd, _now)
    (store.dir / "plan.json").write_text(json.dumps(plan.to_dict(), indent=1))
    done = store.done_keys()
    jobs = [(j, [f for f in j.fetches if f.key not in done]) for j in plan.jobs()]
    jobs = sorted([(j, todo) for j, todo in jobs if todo], key=lambda x: -x[0].estimate_s())
    deadline = time.monotonic() + (budget_s or 1e12)
    counts = {"fetches_planned_now": sum(len(t) for _, t in jobs), "fetches_ok": 0, "fetches_failed": 0,
              "jobs_skipped_budget": 0, "jobs": len(jobs)}
    _STOPPING.clear()
    finished = [0]

    def on_row(row: dict) -> None:
        store.append(row)
        counts["fetches_ok" if row["ok"] else "fetches_failed"] += 1
        finished[0] += 1
        if progress:
            print(f"\r{finished[0]}/{counts['fetches_planned_now']} {row['condition']:>16} {row['quic_config']:>12} "
                  f"h{row['http']} {row['size_bytes']:>8} {row.get('completion_ms', float('nan')):9.1f} ms",
                  end="", file=sys.stderr, flush=True)

    with tempfile.TemporaryDirectory(prefix="tailor-tbq-site-") as site:
        os.chmod(site, 0o755)
        www = prepare_objects(Path(site), plan.sizes, plan.seed)

        def work(job: QuicJob, todo: list[Fetch]) -> None:
            # a job whose fetches failed is retried once (new link, new loss seed)
            retry_missing(todo, lambda rest, attempt, keep: run_quic_job(job, rest, www, bins,
                                                                         _seed(job, plan.seed + attempt), keep),
                          store, on_row)

        try:
            _pools([(jobs, parallel)], work, deadline, counts)
        finally:
            df = store.compact()
            if progress:
                print(file=sys.stderr)
    prov.update(finished_utc=_now(), load_end=list(os.getloadavg()), **counts, rows=int(len(df)),
                ok_rows=int(df["ok"].sum()) if len(df) else 0)
    _merge_provenance(store.dir / "provenance.json", prov)
    return prov


def _seed(job: QuicJob, base: int) -> int:
    from tailor.testbed.runner import job_seed

    return job_seed(job, base)  # type: ignore[arg-type]  (uses .name only)


def provenance(plan: QuicPlan, bins: Binaries, parallel: int, _cmd, _now) -> dict:
    root = paths.CHECKOUT or paths.ROOT

    def sha(p: str) -> str:
        return hashlib.sha256(Path(p).read_bytes()).hexdigest()

    return {"started_utc": _now(), "commit": _cmd(["git", "-C", str(root), "rev-parse", "HEAD"]),
            "dirty_tree": bool(_cmd(["git", "-C", str(root), "status", "--porcelain", "--", "src", "edge"])),
            "kernel": platform.release(), "machine": platform.machine(), "cpus": os.cpu_count(),
            "load_start": list(os.getloadavg()), "parallel_jobs": parallel,
            "tailor_link_sha256": sha(bins.link), "tailor_edge_sha256": sha(bins.edge),
            "tailor_fetch_sha256": sha(bins.fetch), "go": _cmd(["go", "version"]),
            "emulator": {"tool": "edge/cmd/tailor-link run", "delay": "one-way = RTT/2 each direction",
                         "loss": "i.i.d., same fraction down and up (UDP datagrams and TCP segments alike)",
                         "queue": "1 BDP of the down link in 1500-byte packets, floor 16, drop-tail, both directions",
                         "route_opts": "initcwnd 10 congctl cubic (reaches only the TCP h2 fetches)",
                         "server_sysctl": "tcp_no_metrics_save=1"},
            "server": ("tailor-edge --quic --self-signed (quic-go v0.65, TLS 1.3); decision table: default = "
                       "http.version 2, rule 10.231.0.2/32 -> the job's quic.* configuration"),
            "client": ("tailor-fetch (Go; quic-go http3 / net/http), new process and connection per fetch, "
                       "--insecure; completion = total_ms (last body byte), ttfb_ms = response headers"),
            "congestion_control": ("QUIC: quic-go's own CUBIC-style controller (no BBR, no per-connection choice); "
                                   "TCP h2: cubic per route"),
            "plan": plan.to_dict()}


# ---------------------------------------------------------------------------------------------------- analysis


def summarize(df: pd.DataFrame) -> dict:
    """Per condition: the best QUIC configuration against the default (geometric mean over sizes of the ratio of
    median completion times), and HTTP/3 (default) against HTTP/2. Plus per (condition, size) cells."""
    ok = df[df["ok"].astype(bool)]
    med = ok.groupby(["condition", "size_bytes", "http", "quic_config"])["completion_ms"].median()
    rows, cells = [], []
    for cond in sorted(ok["condition"].unique()):
        sub = med.loc[cond]
        sizes = sorted({s for s, _, _ in sub.index})
        ratios: dict[str, list[float]] = {}
        h3h2 = []
        for s in sizes:
            h3 = sub.loc[s].loc["3"] if "3" in sub.loc[s].index.get_level_values(0) else pd.Series(dtype=float)
            if "default" not in h3.index:
                continue
            d = float(h3["default"])
            best = str(h3.idxmin())
            cells.append({"condition": cond, "size_bytes": int(s), "default_ms": d, "best": best,
                          "best_ms": float(h3[best]), "best_gain": 1 - float(h3[best]) / d})
            for name, v in h3.items():
                ratios.setdefault(str(name), []).append(float(v) / d)
            if (s, "2", "default") in sub.index:
                h3h2.append(d / float(sub.loc[(s, "2", "default")]))
        if not ratios:
            continue
        geo = {n: math.exp(sum(map(math.log, r)) / len(r)) for n, r in ratios.items() if len(r) == len(sizes)}
        best = min(geo, key=geo.get)
        spread = _rep_spread(ok[(ok["condition"] == cond) & (ok["http"] == "3") & (ok["quic_config"] == "default")])
        rows.append({"condition": cond, "family": str(ok.loc[ok["condition"] == cond, "family"].iloc[0]),
                     "best_config": best, "best_gain_vs_default": 1 - geo[best],
                     "gains": {n: 1 - g for n, g in sorted(geo.items())},
                     "h3_over_h2": math.exp(sum(map(math.log, h3h2)) / len(h3h2)) if h3h2 else float("nan"),
                     "default_rep_spread": spread})
    best_set = {r["best_config"] for r in rows}
    return {"conditions": rows, "cells": cells, "distinct_best_configs": sorted(best_set),
            "share_best_not_default": (sum(r["best_config"] != "default" for r in rows) / len(rows)) if rows else 0,
            "share_cells_best_not_default": (sum(c["best"] != "default" for c in cells) / len(cells)) if cells else 0}


def _rep_spread(d: pd.DataFrame) -> float:
    """Median over sizes of (max - min) / median of the default's repetitions: the noise a gain must beat."""
    vals = []
    for _, g in d.groupby("size_bytes"):
        x = g["completion_ms"].dropna()
        if len(x) >= 2 and x.median() > 0:
            vals.append(float((x.max() - x.min()) / x.median()))
    return float(pd.Series(vals).median()) if vals else float("nan")


def summary_markdown(s: dict) -> str:
    lines = ["| condition | family | best QUIC config | its gain vs default | gain > rep. spread? | "
             "H3/H2 time (default) |", "|---|---|---|---|---|---|"]
    for r in s["conditions"]:
        gain, spread = r["best_gain_vs_default"], r["default_rep_spread"]
        lines.append(f"| {r['condition']} | {r['family']} | {r['best_config']} | {100 * gain:+.1f} % | "
                     f"{'yes' if gain > spread else 'no'} (spread {100 * spread:.0f} %) | {r['h3_over_h2']:.2f} |")
    lines.append("")
    lines.append(f"Distinct best configurations: {', '.join(s['distinct_best_configs'])}; best ≠ default in "
                 f"{100 * s['share_best_not_default']:.0f} % of conditions and "
                 f"{100 * s['share_cells_best_not_default']:.0f} % of (condition, size) cells.")
    return "\n".join(lines) + "\n"


__all__ = ["QuicConfig", "QuicPlan", "QuicJob", "Binaries", "decision_table", "measure_quic", "summarize",
           "summary_markdown", "quic_knobs"]
