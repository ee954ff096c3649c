"""Self-contained HTML report: tables and plots read only from evaluation records."""

from __future__ import annotations

import base64
import html
import io
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from tailor.eval import metrics  # noqa: E402
from tailor.eval.offpolicy import offpolicy_section  # noqa: E402
from tailor.eval.sections import extra_sections  # noqa: E402

COLUMNS = [("policy", "policy", "{}"), ("pageloads", "page loads", "{:,.0f}"), ("p5", "p5", "{:+.1%}"),
           ("p25", "p25", "{:+.1%}"), ("p50", "median", "{:+.1%}"), ("p75", "p75", "{:+.1%}"), ("p95", "p95", "{:+.1%}"),
           ("p95_plt_improvement", "p95 PLT improvement", "{:+.1%}"), ("degraded_share", "degraded >5%", "{:.1%}"),
           ("median_gap_to_optimal", "median gap to optimal", "{:.1%}"), ("conn_per_s", "sim conn/s", "{:,.0f}")]


def png(fig) -> str:
    """A matplotlib figure as a data: URL (closes the figure)."""
    return _png(fig)


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def plot_boxes(ev) -> str:
    """Improvement over default per policy; whiskers at p5/p95 (Configanator Fig. 5)."""
    fig, ax = plt.subplots(figsize=(9, 4))
    data = [100 * metrics.improvement(r.records) for r in ev.results]
    ax.boxplot(data, whis=(5, 95), showfliers=False, tick_labels=[r.policy for r in ev.results])
    ax.axhline(0, color="grey", lw=0.8)
    ax.set_ylabel("PLT improvement over default (%)")
    ax.set_title("Per-page-load improvement (box: p25-p75, whiskers: p5-p95)")
    plt.setp(ax.get_xticklabels(), rotation=30, ha="right")
    return _png(fig)


def plot_convergence(ev) -> str:
    """Median distance to optimal vs learning iteration (Configanator Fig. 6)."""
    fig, ax = plt.subplots(figsize=(9, 4))
    styles = [(c, ls) for ls in ("-", "--", ":") for c in plt.rcParams["axes.prop_cycle"].by_key()["color"]]
    for k, r in enumerate(ev.results):
        x, med, _ = metrics.convergence(r.records)
        color, ls = styles[k % len(styles)]  # more policies than colours: the line style tells them apart
        ax.plot(x, 100 * med, label=r.policy, marker=".", color=color, ls=ls)
    ax.set_xlabel("page load number of the website (learning iteration)")
    ax.set_ylabel("median distance from optimal (%)")
    ax.set_yscale("symlog", linthresh=1)
    ax.legend(fontsize=8, ncol=2)
    ax.set_title("Convergence to optimal")
    return _png(fig)


def plot_degradation(ev) -> str:
    """Share of page loads >5% slower than default, by cause (Configanator Fig. 28)."""
    fig, ax = plt.subplots(figsize=(9, 3.6))
    names = [r.policy for r in ev.results]
    parts = [metrics.degradation_breakdown(r.records) for r in ev.results]
    bottom = np.zeros(len(names))
    for cause, color in (("exploration", "#e69f00"), ("stale_class", "#56b4e9"), ("stuck", "#d55e00")):
        vals = np.array([100 * p[cause] for p in parts])
        ax.bar(names, vals, bottom=bottom, label=cause.replace("_", " "), color=color)
        bottom += vals
    ax.set_ylabel("% of page loads degraded >5%")
    ax.legend(fontsize=8)
    plt.setp(ax.get_xticklabels(), rotation=30, ha="right")
    return _png(fig)


def plot_access(ev) -> str:
    """Median improvement per access type and policy (Configanator Fig. 5c analogue)."""
    world = ev.simulator.world
    access = np.array([world.sessions[s].client.access for s in world.session])
    kinds = sorted(set(access))
    mat = np.array([[v for _, v in sorted(metrics.by_category(r.records, access).items())] for r in ev.results])
    fig, ax = plt.subplots(figsize=(9, 0.45 * len(ev.results) + 1.5))
    im = ax.imshow(100 * mat, cmap="RdYlGn", vmin=-30, vmax=30, aspect="auto")
    ax.set_xticks(range(len(kinds)), kinds, rotation=30, ha="right")
    ax.set_yticks(range(len(ev.results)), [r.policy for r in ev.results])
    for (i, j), v in np.ndenumerate(mat):
        ax.text(j, i, f"{100 * v:.0f}", ha="center", va="center", fontsize=7)
    fig.colorbar(im, ax=ax, label="median improvement (%)")
    return _png(fig)


def render(ev, meta: dict, out: Path) -> Path:
    rows = "".join("<tr>" + "".join(f"<td>{html.escape(fmt.format(s[k]))}</td>" for k, _, fmt in COLUMNS) + "</tr>"
                   for s in ev.summaries)
    head = "".join(f"<th>{html.escape(t)}</th>" for _, t, _ in COLUMNS)
    plots = [("Improvement over default", plot_boxes(ev)), ("Convergence", plot_convergence(ev)),
             ("Degradation breakdown", plot_degradation(ev)), ("By access type", plot_access(ev))]
    figs = "".join(f"<h2>{t}</h2><img src='{src}' alt='{t}'>" for t, src in plots)
    figs += "".join(f"<h2>{html.escape(t)}</h2>{body}" for t, body in extra_sections(ev))
    figs += offpolicy_section(ev)
    oracle = meta["oracle"]
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>Tailor evaluation: {html.escape(meta['scenario']['name'])}</title>
<style>body{{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}}table{{border-collapse:collapse;font-size:13px}}
td,th{{border:1px solid #ccc;padding:3px 7px;text-align:right}}th{{background:#f0f0f0}}td:first-child{{text-align:left}}
img{{max-width:100%}}pre{{background:#f7f7f7;padding:8px;font-size:11px;overflow:auto}}</style></head><body>
<h1>Tailor evaluation</h1>
<p>Scenario <b>{html.escape(meta['scenario']['name'])}</b>: {meta['scenario']['sessions']:,} sessions, {meta['scenario']['pageloads']:,} page loads.
Oracle <b>{html.escape(str(oracle.get('name')))}</b> ({html.escape(str(oracle.get('kind')))}){_validation_html(meta)}.
Space <b>{html.escape(meta['space']['name'])}</b> ({meta['space']['size']} configurations, allowed: {html.escape(meta['space']['allowed'])}).
Commit {html.escape(meta['git_commit'])}, seed {meta['sim_config']['seed']}, {html.escape(meta['date'])}.</p>
<p>Improvement of a page load = 1 − PLT(policy)/PLT(default) on the same page load and noise draw. Quantiles are over page loads.
Distance to optimal uses the noise-free ground truth.</p>
<table><tr>{head}</tr>{rows}</table>{figs}
<h2>Run metadata</h2><pre>{html.escape(json.dumps(meta, indent=1, default=str))}</pre></body></html>"""
    path = out / "report.html"
    path.write_text(page)
    return path


def _validation_html(meta: dict) -> str:
    """Why this oracle and how it orders the measured configurations (``tailor oracle validate``)."""
    from tailor.oracle.validate import one_line

    v = meta.get("oracle_validation") or {}
    if not v:
        return ""
    lines = "".join(f"<br>validation: {html.escape(one_line(n, k))}"
                    for n, k in (v.get("figures") or {}).items())
    return f": {html.escape(str(v.get('reason', '')))}{lines}"
