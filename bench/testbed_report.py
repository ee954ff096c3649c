"""Numbers for docs/testbed.md from the measured dataset (data/oracle/tb-v2 unless given).

Usage: PYTHONPATH=src python bench/testbed_report.py [DATASET_DIR] [--quick]
Prints: coverage, leave-one-condition-out interpolation error (objects and Chromium pages; several interpolation
settings unless --quick), the share of conditions and of (condition, workload) cells where the best configuration
differs from the default, and measured/model ratio quantiles.
"""

from __future__ import annotations

import sys

import pandas as pd

from tailor.oracle.measured import DEFAULT_DATASET, MeasuredOracle
from tailor.testbed.analysis import (best_per_condition, best_vs_default, error_summary, loco_errors,
                                     measured_vs_model, model_choice_regret)


def main(dataset: str, quick: bool = False) -> None:
    pd.set_option("display.width", 200)
    o = MeasuredOracle(dataset)
    t, p = o.table, o.page_table
    print(f"objects: points {len(t)}  conditions {t.condition.nunique()}  sizes {sorted(int(s) for s in t.size_bytes.unique())}  "
          f"configs {len(o.anchors)}  reps median {t.n.median():.0f} min {t.n.min()}  fetches {int(t.n.sum())}")
    print(t.groupby("size_bytes").condition.nunique().rename("conditions per size").to_string())
    if not p.empty:
        print(f"pages: points {len(p)}  conditions {p.condition.nunique()}  pages {sorted(p.page.unique())}  "
              f"configs {p[['cc', 'iw', 'http']].drop_duplicates().shape[0]}  reps median {p.n.median():.0f} "
              f"min {p.n.min()}  loads {int(p.n.sum())}")
        print(p.groupby("page").condition.nunique().rename("conditions per page").to_string())
    print("\n## machine state: emulator p99 send lateness per run, and load1 per fetch")
    for label, sub in (("objects", ""), ("pages", "pages")):
        lat, load = _lateness(dataset, sub)
        if lat is not None:
            print(f"{label}: {lat}; {load}")
    print("\n## conditions (markdown)")
    print(conditions_markdown(t, p))
    print("\n## LOCO interpolation error (|pred/measured - 1|)")
    if not quick:
        for shape in ("model", "none"):
            for k in (2, 4, 8):
                e = loco_errors(MeasuredOracle(dataset, neighbours=k, shape=shape))
                print(f"objects shape={shape:5} k={k}: {_fmt(error_summary(e))}")
    e = loco_errors(o)
    print(f"objects (used): {_fmt(error_summary(e))}")
    print("by size:", e.assign(a=e.rel_err.abs()).groupby("size_bytes").a.median().round(3).to_dict())
    worst = e.assign(a=e.rel_err.abs()).groupby("condition").a.median().sort_values().tail(6)
    print("worst conditions:", worst.round(3).to_dict())
    if not p.empty:
        for k in ((2, 4, 8) if not quick else (4,)):
            ep = loco_errors(MeasuredOracle(dataset, neighbours=k), kind="page")
            print(f"pages k={k}: {_fmt(error_summary(ep))}")
        ep = loco_errors(o, kind="page")
        print("pages by page:", ep.assign(a=ep.rel_err.abs()).groupby("workload").a.median().round(3).to_dict())
        print("pages by condition:", ep.assign(a=ep.rel_err.abs()).groupby("condition").a.median().round(3).to_dict())
    for label, table in (("objects", t), ("pages", p)):
        if table.empty:
            continue
        print(f"\n## best configuration vs default (cubic iw10 rto200 h1.1): {label}")
        b = best_vs_default(table)
        print(f"cells: share differs {b.differs.mean():.3f} of {len(b)}; gain>5%: {(b.gain > 0.05).mean():.3f}; "
              f"gain>10%: {(b.gain > 0.10).mean():.3f}; distinct best configs {b.best.nunique()}")
        print(b.best.value_counts(normalize=True).head(6).round(3).to_string())
        c = best_per_condition(table)
        print(f"conditions (geo-mean over {c.workloads.iloc[0] if len(c) else '-'}): differs "
              f"{c.differs.sum()}/{len(c)} = {c.differs.mean():.3f}; gain>5%: {(c.gain > 0.05).mean():.3f}; "
              f"distinct winners {c.best.nunique()}")
        if label == "pages":
            print(b.pivot_table(index="condition", columns="workload", values="gain").round(3).to_string())
            print(c.to_string(index=False))
    print("\n## measured / model ratio")
    for kind in ("object", "page"):
        r = measured_vs_model(o, kind=kind)
        if r.empty:
            continue
        print(kind, r.ratio.quantile([0.05, 0.25, 0.5, 0.75, 0.95]).round(3).to_dict())
        m = model_choice_regret(r)
        print(f"{kind}: model's best = measured best: {m.agree.mean():.3f}; regret of the model's pick: median "
              f"{m.regret.median():.3f}, p90 {m.regret.quantile(0.9):.3f}, max {m.regret.max():.3f} (n={len(m)})")


def _lateness(dataset: str, sub: str):
    """Per measuring era (tb-v1 runs vs runs added for tb-v2): lateness p99 quantiles, and fetch load1 quantiles."""
    from pathlib import Path

    d = Path(dataset) / sub
    if not (d / "runs.parquet").exists():
        return None, None
    runs, m = pd.read_parquet(d / "runs.parquet"), pd.read_parquet(d / "measurements.parquet")
    cut = 1795239000  # 2026-11-21 05:30 UTC: tb-v1 ended 05:12, tb-v2 started 06:19
    out = []
    for era, r in (("tb-v1 runs", runs[runs.started_unix < cut]), ("tb-v2 runs", runs[runs.started_unix >= cut])):
        if len(r):
            x = r.emu_down_lateness_p99_us / 1000
            out.append(f"{era} n={len(r)} lateness p99 ms: median {x.median():.2f} p90 {x.quantile(0.9):.1f} "
                       f"share>2ms {(x > 2).mean():.2f}")
    new = m[m.started_unix >= cut]
    load = (f"tb-v2 fetches n={len(new)} load1 median {new.load1.median():.1f} p90 {new.load1.quantile(0.9):.1f} "
            f"max {new.load1.max():.1f}") if len(new) else ""
    return "; ".join(out), load


def _fmt(s: dict) -> str:
    return (f"n={s['points']} median {100 * s['median_abs']:.1f}% p90 {100 * s['p90_abs']:.1f}% "
            f"within10 {100 * s['within_10pct']:.0f}% within25 {100 * s['within_25pct']:.0f}%")


def conditions_markdown(t: pd.DataFrame, p: pd.DataFrame) -> str:
    """One row per measured condition: path, queue, family, sizes measured, fetches, page loads."""
    from tailor.testbed.conditions import CATALOG

    lines = ["| condition | family | down/up Mbit/s | RTT ms | loss down/up | queue pkts | sizes (KB) | fetches | "
             "page loads | source |", "|---|---|---|---|---|---|---|---|---|---|"]
    for name, c in CATALOG.items():
        g = t[t.condition == name]
        if g.empty:
            continue
        gp = p[p.condition == name] if not p.empty else p
        sizes = ",".join(str(s // 1024) for s in sorted(g.size_bytes.unique()))
        rate = f"{c.down_mbps:g}/{c.up_mbps:g}" + (" (trace)" if c.down_trace else "")
        lines.append(f"| {name} | {c.family} | {rate} | {c.rtt_ms:g} | {100 * c.loss:g}%/{100 * c.uplink_loss:g}% | "
                     f"{c.queue_packets()} | {sizes} | {int(g.n.sum())} | {int(gp.n.sum()) if len(gp) else 0} | "
                     f"{c.source} |")
    return "\n".join(lines)


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    main(args[0] if args else str(DEFAULT_DATASET), quick="--quick" in sys.argv)
