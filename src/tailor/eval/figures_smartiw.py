"""Report section of SmartIW's testbed comparison (Nie et al. §VII, Fig. 12/13), shown when a
``smartiw*`` policy ran.

Every number comes from the run records plus one oracle-independent quantity of the world, the response size
of each website (what the server sends):
* response time = the observed completion time ``plt_ms`` (for search responses, the TCP response time of §II-A);
* goodput = size / response time (SmartIW Table III), in Mbit/s;
* RTT = the mean RTT the server measures over the response (``srtt_ms``): the handshake RTT plus the queue the
  configuration's own flights build, from the oracle (the model oracle's ``tcp.mean_rtt_ms``; an oracle without a
  queueing model gives the path RTT, and then the RTT degradation is 0 by construction);
* reward = Eq. 4 with α = 0.8, normalised by the maximum goodput and minimum RTT over *all* page
  loads of the evaluation (one normaliser, so rewards compare across policies).
The baseline "IW=10" is the default configuration on the same page loads (``default_ms``), so the
comparison does not need ``tcp-10`` in the run.
"""

from __future__ import annotations

import html

import matplotlib.pyplot as plt
import numpy as np

from tailor.eval.report import png
from tailor.eval.sections import report_section

ALPHA = 0.8  # SmartIW §IV-A / §VII-A
BASE = "IW=10 (default)"
NOTE = ("SmartIW testbed comparison (Nie et al. §VII, Fig. 12/13), from the records only: response time = observed "
        "completion time; goodput = response size / response time (Table III); RTT = the mean RTT the server measures "
        "over the response (the path's plus the queue the configuration's own flights build, from the oracle); "
        "reward = Eq. 4 with α = 0.8, "
        "normalised by the maximum goodput and minimum RTT over all page loads shown. IW=10 is the default "
        "configuration on the same page loads. 'Average response-time improvement' is the paper's headline: "
        "1 − mean(time)/mean(time at IW=10); the per-load mean weights every page load equally.")


def _metrics(ev) -> dict[str, dict[str, np.ndarray]]:
    """Per policy (plus the IW=10 baseline): response time, goodput, RTT per page load."""
    world = ev.simulator.world
    first = ev.results[0].records
    size_bits = 8.0 * world.bytes[first["site"]]
    out = {BASE: {"time": first["default_ms"], "goodput": size_bits / first["default_ms"] / 1e3,
                  "rtt": first["srtt_default_ms"]}}
    for r in ev.results:
        t = r.records["plt_ms"]
        out[r.policy] = {"time": t, "goodput": size_bits / t / 1e3, "rtt": r.records["srtt_ms"]}
    g_max = max(m["goodput"].max() for m in out.values())
    rtt_min = min(m["rtt"].min() for m in out.values())
    for m in out.values():
        m["reward"] = ALPHA * m["goodput"] / g_max + (1 - ALPHA) * rtt_min / m["rtt"]
    return out


def _improvements(m: dict, base: dict) -> dict[str, float]:
    """Fig. 12's definitions: gains in mean reward / goodput / response time, RTT degradation."""
    mean = {k: float(np.mean(v)) for k, v in m.items()}
    ref = {k: float(np.mean(v)) for k, v in base.items()}
    return {"reward": mean["reward"] / ref["reward"] - 1, "time": 1 - mean["time"] / ref["time"],
            "goodput": mean["goodput"] / ref["goodput"] - 1, "rtt": mean["rtt"] / ref["rtt"] - 1}


def _table(data: dict, ev) -> str:
    head = ("policy", "mean response time (ms)", "avg response-time improvement over IW=10",
            "mean per-load improvement", "mean goodput (Mbit/s)", "goodput gain", "mean reward", "reward gain",
            "RTT degradation")
    rows = []
    for name, m in data.items():
        imp = _improvements(m, data[BASE])
        per_load = float(np.mean(1 - m["time"] / data[BASE]["time"]))
        cells = (name, f"{np.mean(m['time']):,.0f}", f"{imp['time']:+.2%}", f"{per_load:+.2%}",
                 f"{np.mean(m['goodput']):.2f}", f"{imp['goodput']:+.2%}", f"{np.mean(m['reward']):.4f}",
                 f"{imp['reward']:+.2%}", f"{imp['rtt']:+.2%}")
        rows.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>")
    return ("<table><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in head) + "</tr>" + "".join(rows)
            + "</table>")


def _fig12(data: dict) -> str:
    names = [n for n in data if n != BASE]
    imps = [_improvements(data[n], data[BASE]) for n in names]
    fig, axes = plt.subplots(1, 4, figsize=(13, 3.4))
    for ax, (key, title) in zip(axes, (("reward", "(a) reward gain"), ("time", "(b) response-time gain"),
                                       ("goodput", "(c) goodput gain"), ("rtt", "(d) RTT degradation"))):
        ax.bar(range(len(names)), [100 * i[key] for i in imps], color="#4477aa")
        ax.set_xticks(range(len(names)), names, rotation=40, ha="right", fontsize=8)
        ax.axhline(0, color="grey", lw=0.8)
        ax.set_title(title, fontsize=9)
    axes[0].set_ylabel("% vs IW=10 (means)")
    return png(fig)


def _fig13(data: dict) -> str:
    fig, axes = plt.subplots(1, 4, figsize=(13, 3.4))
    for ax, (key, title) in zip(axes, (("reward", "reward"), ("time", "response time (ms)"),
                                       ("goodput", "goodput (Mbit/s)"), ("rtt", "RTT (ms)"))):
        for name, m in data.items():
            v = np.sort(m[key])
            ax.plot(v, np.arange(1, len(v) + 1) / len(v), label=name, lw=1)
        ax.set_xscale("log")
        ax.set_title(title, fontsize=9)
    axes[0].set_ylabel("CDF over page loads")
    axes[-1].legend(fontsize=7)
    return png(fig)


def _iw_over_time(ev, names: list[str]) -> str:
    """Mean IW applied per 10-minute bin, to see the sliding window move (or not)."""
    space = ev.simulator.space
    iw_of = np.array([c["tcp.initial_cwnd"] for c in space.configs])
    fig, ax = plt.subplots(figsize=(9, 3.2))
    for name in names:
        rec = ev.records(name)
        b = (rec["time_s"] // 600).astype(int)
        iw = iw_of[rec["config"]]
        xs = np.unique(b)
        ax.plot(xs * 10, [iw[b == x].mean() for x in xs], marker=".", label=name)
    ax.set_xlabel("minutes into the scenario")
    ax.set_ylabel("mean IW applied (segments)")
    ax.legend(fontsize=8)
    return png(fig)


def _group_shares(ev, names: list[str]) -> str:
    rows = []
    for name in names:
        groups = ev.records(name)["group"]
        kinds = np.array([g.split(":", 1)[0] for g in groups])
        shares = {k: float(np.mean(kinds == k)) for k in ("subnet", "isp", "region", "all", "standard", "unknown")}
        rows.append(f"<tr><td>{html.escape(name)}</td>" + "".join(f"<td>{v:.1%}</td>" for v in shares.values())
                    + f"<td>{len(set(groups) - {'standard', 'unknown'})}</td></tr>")
    head = "".join(f"<th>{h}</th>" for h in ("policy", "subnet", "ISP Others", "province Others", "all",
                                             "standard IW (root Others failed)", "unknown prefix", "RL groups"))
    return f"<table><tr>{head}</tr>{''.join(rows)}</table>"


@report_section
def smartiw_section(ev) -> list[tuple[str, str]]:
    names = [r.policy for r in ev.results if r.policy.startswith("smartiw")]
    if not names or "tcp.initial_cwnd" not in ev.simulator.space.grid:
        return []
    data = _metrics(ev)
    body = (f"<p>{NOTE}</p>"
            + _table(data, ev) + f"<img src='{_fig12(data)}' alt='Fig. 12'><img src='{_fig13(data)}' alt='Fig. 13'>"
            + "<h3>IW applied over time</h3>" + f"<img src='{_iw_over_time(ev, names)}' alt='IW over time'>"
            + "<h3>Where SmartIW's flows were decided</h3>" + _group_shares(ev, names))
    return [("SmartIW: reward, response time, goodput, RTT", body)]
