"""Candidate mechanisms of a `model-tcp-v3`, validated against the testbed datasets before any is adopted: the
harness behind MODEL.md section 6a's trials of 2026-11-26 (issue 18). Nothing here changes the shipped model: each
variant patches the model's loss and level functions inside a context manager and restores them.

Usage::

    PYTHONPATH=src .venv/bin/python bench/oracle_mechanism_trials.py [--variants v2,burst,...]
        [--recovery 1.0] [--json bench/results/oracle_tail_loss_trial.json]

Per variant: the model's figures on tb-v2's objects, tb-v2's pages and tb-v3's pages (`tailor oracle validate`'s:
median Spearman rho and median / p90 cost of its choice; the same on the reproducible cells, split-half rho >= 0.8)
and, on tb-v3's pages, the per-knob contrasts (|log error| median and direction agreement) of the IW and HTTP
knobs. ``--recovery`` sets ``tcp.OVERSHOOT_RECOVERY_RTT`` for every variant (the committed value is 1).

The mechanisms (evidence: tb-v2's server counters ``srv_RetransSegs`` / ``srv_TCPLossProbes`` per object fetch):

* ``burst``: a first flight is absorbed by the buffer alone (its share of it, plus the packet in service and what
  BBR's pacing drains), not by BDP + buffer; its lost tail costs the link ``rtt - followers / rate`` of idle time when
  later segments of the response reveal it by SACK, three RTTs (ACK, probe timeout, probe round) when none follow.
* ``overshoot``: an ACK-clocked slow start holds at most ``(d + w0) / 2`` of a d-segment response in flight, so it
  overflows only above pipe + buffer + 1, at the response's tail; a single tail drop costs a probe timeout,
  ``rtt + 2 srtt`` with the full buffer in srtt, more drops the v2 recovery round. BBR keeps v2's term.
* ``level``: the first flights of a level's connections share one buffer (the lost share of their summed bursts,
  charged to each in proportion to its burst).
* ``alone``: a crude work-conserving level: each connection timed as if alone on the link, the level the larger of
  its slowest connection and the level's bytes over the link (or over the summed loss-based rates under loss).
* ``share``: a connection's loss-recovery idle charged at its byte share of the level (the other connections keep
  the link busy; an object, alone, pays it whole).
* ``rounds``: slow start in whole rounds of whole segments: a response of d segments from a window w0 needs
  ceil(log2(ceil(d) / w0 + 1)) rounds and idles in ceil(log2(pipe / w0)) of them at most (v2's rounds are continuous,
  "expected over header/size jitter", so an 11-segment HTML page costs IW 10 a few per cent of an RTT, not a round).
* ``timeline`` (with ``fair``, ``order``, ``shared``, ``pipe``, ``mux``, ``priority``, ``ca``, ``flow``, ``rounds``):
  pages timed by ``tailor.oracle.timeline`` (``ModelOracle(pages="timeline")``; the variant ``model-timeline`` is its
  default, at its own constant ``timeline.RECOVERY_RTT``; the other timeline variants run at ``--recovery``, as
  the trials did) instead of v2's synchronous levels; see that module.
"""

from __future__ import annotations

import argparse
import json
import time
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import numpy as np

from tailor.eval.run import _git_commit
from tailor.oracle import model, tcp, timeline
from tailor.oracle.measured import MeasuredOracle
from tailor.oracle.validate import contrast_summary, validate_oracle

# name -> the mechanisms it switches on: the name's "+"-separated parts ("v2": none; "pipe": the first flights' room
# is pipe + buffer, as in the trials before the buffer-only room was adopted; "model-timeline": the page timeline as
# shipped, ``timeline.DEFAULT`` at its own fitted constant ``timeline.RECOVERY_RTT``)
VARIANTS = {name: tuple(name.split("+")) for name in (
    "burst", "overshoot", "burst+overshoot", "burst+level", "alone", "alone+burst", "burst+share", "rounds",
    "rounds+burst+share", "timeline", "timeline+fair", "timeline+fair+order", "rounds+timeline+fair+order",
    "timeline+fair+order+flow", "rounds+timeline+fair+order+flow", "timeline+fair+order+shared+pipe",
    "rounds+timeline+fair+order+shared+pipe", "rounds+timeline+fair+order+flow+shared+pipe",
    "rounds+timeline+fair+order+shared+mux+pipe", "rounds+timeline+fair+order+shared+mux+priority+pipe",
    "rounds+timeline+fair+order+shared+mux+priority+ca+pipe", "rounds+timeline+fair+order+shared+priority+pipe")}
VARIANTS = {"v2": (), **VARIANTS, "model-timeline": ("timeline", "shipped", *timeline.DEFAULT)}
CONTRASTS = ("IW 4 vs 10", "IW 32 vs 10", "HTTP/1.1 vs 2")
TAIL_RTTS = 3.0  # a lost tail with no follower: the last ACK, the probe timeout (2 srtt, srtt ~ rtt) and the probe
_state = {"on": (), "level_f": None, "first": False, "share": 1.0}


def _buffer(sh: tcp.Share):
    """The connection's share of the buffer (``room`` is its share of BDP + buffer)."""
    return sh.room * sh.q / (1 + sh.q)


def _drained(burst, w0, sh: tcp.Share, bbr):
    """What the bottleneck serves while BBR paces a first flight over rtt / 2.89 (a loss-based one arrives at once)."""
    return np.where(bbr, burst * sh.pipe / (tcp.BBR_STARTUP_GAIN * np.maximum(w0, 1.0)), 0.0)


def _burst_lost(d, w0, sh: tcp.Share, bbr):
    burst = np.minimum(w0, d)
    return np.maximum(burst - _buffer(sh) - 1.0 - _drained(burst, w0, sh, bbr), 0.0)


def burst_loss_ms(d, w0, sh: tcp.Share, bbr):
    burst = np.minimum(w0, d)
    if _state["first"] and _state["level_f"] is not None:
        lost = _state["level_f"] * burst
    else:
        lost = _burst_lost(d, w0, sh, bbr)
    after = np.maximum(d - burst, 0.0)
    follow = np.maximum(sh.rtt - after / sh.rate, 0.0)
    tail = TAIL_RTTS * sh.rtt
    idle = follow + (tail - follow) * np.clip(1.0 - after, 0.0, 1.0)
    return np.minimum(lost, 1.0) * idle * _state["share"]


def overshoot_ms(d, w0, before, iw, sh: tcp.Share, stack: tcp.Stack):
    cap = sh.pipe + _buffer(sh) + 1.0
    peak = np.minimum((d + w0) / 2.0, d)
    excess = np.maximum(np.maximum(peak - cap, 0.0) - _burst_lost(d, w0, sh, stack.bbr), 0.0)
    any_drop = np.minimum(excess, 1.0)
    tail_only = any_drop * np.clip(2.0 - excess, 0.0, 1.0)
    survive = 1.0 - tcp.loss_prob(peak, sh.p)
    rack = sh.rtt * np.maximum(np.maximum(1.0 - sh.q, 0.0), tcp.OVERSHOOT_RECOVERY_RTT)
    tlp = sh.rtt + 2.0 * (sh.rtt + _buffer(sh) / sh.rate)
    loss_based = survive * (tail_only * tlp + (any_drop - tail_only) * rack)
    bbr_v2 = tcp.overshoot_ms(before, d, iw, sh, replace(stack, bbr=np.ones_like(stack.bbr)))  # v2's BBR term
    return np.where(stack.bbr, bbr_v2, loss_based)


def connection_ms(queue, before, cold, share, stack, rwnd=model.CLIENT_RWND_SEGMENTS):
    """``model._connection_ms`` with the trial's overshoot and the first-response flag of the level-wide burst."""
    t = tcp.handshake_ms(share.rtt, share.p, stack) if cold else 0.0
    iw = model._first_window(stack, rwnd)
    done, w_start = before, None
    for j, d in enumerate(queue):
        w0 = iw if done == 0 else tcp.warm_window(iw, done, share, stack)
        w_start = w0 if w_start is None else w_start
        _state["first"] = j == 0
        t = t + tcp.transfer_ms(d, w0, share, stack, w_ss=iw + done)
        _state["first"] = False
        done += d
    if "overshoot" in _state["on"]:
        over = overshoot_ms(done - before, w_start, before, iw, share, stack)
    else:
        over = _V2["overshoot"](before, done - before, iw, share, stack)
    return t + over * _state["share"]


def level_ms(plan, path, stack, metric="load"):
    """``model._level_ms`` with the level-wide burst, the work-conserving level or the byte-share idle."""
    level_segs = sum(sum(queue) for queue, _, _ in plan)
    n, rwnd = len(plan), model._rwnd(metric)
    alone = "alone" in _state["on"]
    shares = [model._share(path, stack, 1.0 if alone else sum(q) / level_segs, 1.0 / n) for q, _, _ in plan]
    if "level" in _state["on"]:
        total, drained = 0.0, 0.0
        for (queue, before, _), sh in zip(plan, shares):
            iw = model._first_window(stack, rwnd)
            w0 = iw if before == 0 else tcp.warm_window(iw, before, sh, stack)
            b = np.minimum(w0, queue[0])
            total, drained = total + b, drained + _drained(b, w0, sh, stack.bbr)
        _state["level_f"] = np.maximum(total - path.buffer - 1.0 - drained, 0.0) / np.maximum(total, 1e-9)
    worst, start, cc_sum = None, None, 0.0
    for (queue, before, cold), sh in zip(plan, shares):
        _state["share"] = sum(queue) / level_segs if "share" in _state["on"] else 1.0
        t = model._connection_ms(queue, before, cold and metric == "load", sh, stack, rwnd)
        worst = t if worst is None else np.maximum(worst, t)
        if alone:  # the level's first byte and the loss-based connections' summed rates
            first = (tcp.handshake_ms(sh.rtt, sh.p, stack) if cold and metric == "load" else 0.0) + sh.rtt
            start = first if start is None else np.minimum(start, first)
            cc_sum = cc_sum + np.where(stack.bbr, np.inf, tcp.cc_rate(sh.p, sh.rtt, tcp.rto_ms(sh.rtt, stack.rto_min),
                                                                       stack.reno))
    _state["share"], _state["level_f"] = 1.0, None
    if alone and n > 1:
        worst = np.maximum(worst, start + level_segs / np.minimum(path.rate * (1 - path.p), cc_sum))
    return worst


_V2 = {"burst": tcp.burst_loss_ms, "overshoot": tcp.overshoot_ms, "connection": model._connection_ms,
       "level": model._level_ms, "rounds": tcp.window_limited_ms, "load": model.load_ms}


@contextmanager
def mechanisms(on: tuple, recovery: float):
    """The model with the mechanisms ``on`` (none: v2 itself) and the recovery constant; restored after."""
    old_recovery = tcp.OVERSHOOT_RECOVERY_RTT
    _state["on"] = on
    tcp.OVERSHOOT_RECOVERY_RTT = recovery
    if "rounds" in on and "timeline" not in on:  # whole rounds in v2's levels
        tcp.window_limited_ms = lambda d, w0, rate, rtt, whole=False: _V2["rounds"](d, w0, rate, rtt, True)
    old_timeline = timeline.RECOVERY_RTT
    if "timeline" in on:
        opts = tuple(m for m in on if m in timeline.OPTIONS)
        model.load_ms = lambda *a: timeline.load_ms(*a, opts=opts)
        if "shipped" not in on:  # the trials ran the timeline at the levels' constant
            timeline.RECOVERY_RTT = recovery
    elif set(on) - {"rounds"}:
        if "burst" in on:
            tcp.burst_loss_ms = burst_loss_ms
        model._connection_ms, model._level_ms = connection_ms, level_ms
    try:
        yield
    finally:
        tcp.burst_loss_ms, model._connection_ms, model._level_ms = _V2["burst"], _V2["connection"], _V2["level"]
        tcp.window_limited_ms, model.load_ms = _V2["rounds"], _V2["load"]
        timeline.RECOVERY_RTT = old_timeline
        tcp.OVERSHOOT_RECOVERY_RTT = old_recovery
        _state.update({"on": (), "level_f": None, "first": False, "share": 1.0})


def figures(oracles: dict) -> dict:
    out = {}
    for name, (oracle, kind) in oracles.items():
        s, rows = validate_oracle("model", oracle, kind)
        r = s["reproducible"]
        out[name] = {"rho": round(s["rho_median"], 2), "cost": [round(100 * s["cost_median"], 1),
                                                                round(100 * s["cost_p90"], 1)],
                     "repro_rho": round(r["rho_median"], 2),
                     "repro_cost": [round(100 * r["cost_median"], 1), round(100 * r["cost_p90"], 1)]}
        if name == "tb-v3 pages":
            c = contrast_summary(rows)
            out["tb-v3 pages contrasts (|log error| median, direction agrees)"] = {
                k: [round(c[k]["log_error_median"], 3), round(c[k]["direction_agrees"], 2)] for k in CONTRASTS if k in c}
    return out


WIRE_CONDITIONS = ("dsl10-peak", "wpt-cable", "leo-starlink")  # shallow (34 and 16 packets) and a lossless 1-BDP link


def _page_loads(dataset: Path):
    """The campaign's valid page loads at rto_min 200 ms, with the server's counters."""
    import pandas as pd

    df = pd.read_parquet(dataset / "pages" / "measurements.parquet")
    return df[df["ok"] & (df["rto_min_ms"] == 200)]


def page_wire(dataset: Path, page: str = "page-light-1") -> dict:
    """Per condition, HTTP version and IW (CUBIC, rto_min 200): the median PLT and the server's median retransmitted
    segments and RTO timeouts per load, from the campaign's own counters."""
    df = _page_loads(dataset)
    df = df[(df["cc"] == "cubic") & (df["page"] == page) & df["condition"].isin(WIRE_CONDITIONS)]
    out: dict = {}
    for (cond, http, iw), g in df.groupby(["condition", "http", "iw"]):
        out.setdefault(f"{cond} {page} HTTP/{http}", {})[f"IW {iw}"] = {
            "plt_ms": round(float(g["completion_ms"].median())), "retrans": float(g["srv_RetransSegs"].median()),
            "timeouts": float(g["srv_TCPTimeouts"].median()), "loads": int(len(g))}
    return out


H2_CONDITIONS = ("3g-peak", "4g-peak", "pan-nepal-india", "mm-tmobile-lte-short", "dsl10-peak")


def h2_recovery(dataset: Path) -> dict:
    """HTTP/2, IW 10, rto_min 200, per condition, page and CC: the median PLT, the server's mean SACK recoveries and
    RTO timeouts per load, and what one more of each costs within the cell (least squares of the load's time on both
    counters and its retransmitted segments): the loss-based HTTP/2 penalty the model misses (MODEL.md 6a)."""
    df = _page_loads(dataset)
    df = df[(df["iw"] == 10) & (df["http"].astype(str) == "2") & df["condition"].isin(H2_CONDITIONS)]
    out: dict = {}
    for (cond, page, cc), g in df.groupby(["condition", "page", "cc"]):
        x = np.c_[np.ones(len(g)), g["srv_TCPSackRecovery"], g["srv_TCPTimeouts"], g["srv_RetransSegs"]]
        coef = np.linalg.lstsq(x, g["completion_ms"].to_numpy(float), rcond=None)[0]
        out.setdefault(f"{cond} {page}", {})[cc] = {
            "plt_ms": round(float(g["completion_ms"].median())), "loads": int(len(g)),
            "sack_recoveries": round(float(g["srv_TCPSackRecovery"].mean()), 1),
            "timeouts": round(float(g["srv_TCPTimeouts"].mean()), 2),
            "ms_per_recovery": round(float(coef[1])), "ms_per_timeout": round(float(coef[2]))}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--recovery", type=float, default=1.0, help="tcp.OVERSHOOT_RECOVERY_RTT for every variant")
    ap.add_argument("--json", default=None, help="merge the figures into this file's 'variants'")
    args = ap.parse_args()
    unknown = set(args.variants.split(",")) - set(VARIANTS)
    if unknown:
        raise SystemExit(f"bench/oracle_mechanism_trials.py: unknown variants {sorted(unknown)}; known: {list(VARIANTS)}")
    started = time.perf_counter()
    tb2, tb3 = Path("data/oracle/tb-v2"), Path("data/oracle/tb-v3")
    v2 = MeasuredOracle(tb2, pages="measured", page_dataset=tb2)
    v3 = MeasuredOracle(tb2, pages="measured", page_dataset=tb3)
    oracles = {"tb-v2 objects": (v2, "objects"), "tb-v2 pages": (v2, "pages"), "tb-v3 pages": (v3, "pages")}
    results = {}
    print("| variant | tb-v2 objects rho, cost p50/p90 (reproducible) | tb-v2 pages | tb-v3 pages | tb-v3 contrasts |")
    print("|---|---|---|---|---|")
    for name in args.variants.split(","):
        with mechanisms(VARIANTS[name], args.recovery):
            f = results[name] = figures(oracles)
        cells = [f"{f[k]['rho']:.2f}, {f[k]['cost'][0]:.1f}% / {f[k]['cost'][1]:.1f}% ({f[k]['repro_rho']:.2f}, "
                 f"{f[k]['repro_cost'][0]:.1f}% / {f[k]['repro_cost'][1]:.1f}%)" for k in oracles]
        contrasts = "; ".join(f"{k} {v[0]:.3f} {100 * v[1]:.0f}%" for k, v in
                              f["tb-v3 pages contrasts (|log error| median, direction agrees)"].items())
        print(f"| {name} | " + " | ".join(cells) + f" | {contrasts} |", flush=True)
    meta = {"commit": _git_commit(), "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "recovery": args.recovery,
            "wall_s": round(time.perf_counter() - started, 1)}
    print(f"\ncommit {meta['commit']}, {meta['date']}, {meta['wall_s']} s")
    if args.json:
        path = Path(args.json)
        data = json.loads(path.read_text()) if path.exists() else {}
        data.setdefault("variants", {}).update(results)
        data["page_wire_evidence"] = page_wire(tb3)
        data["h2_recovery_evidence"] = h2_recovery(tb3)
        data["meta"] = meta
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1))
        tmp.replace(path)


if __name__ == "__main__":
    main()
