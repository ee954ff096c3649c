"""Numbers for docs/testbed.md from the measured dataset (data/oracle/tb-v1 unless given).

Usage: PYTHONPATH=src python bench/testbed_report.py [DATASET_DIR]
Prints: coverage, leave-one-condition-out interpolation error for several interpolation settings, the share
of (condition, size) where the best configuration differs from the default, and measured/model ratio quantiles.
"""

from __future__ import annotations

import sys

import pandas as pd

from tailor.oracle.measured import DEFAULT_DATASET, MeasuredOracle
from tailor.testbed.analysis import best_vs_default, error_summary, loco_errors, measured_vs_model, model_choice_regret


def main(dataset: str) -> None:
    pd.set_option("display.width", 200)
    o = MeasuredOracle(dataset)
    t = o.table
    print(f"points {len(t)}  conditions {t.condition.nunique()}  sizes {sorted(t.size_bytes.unique())}  "
          f"configs {len(o.anchors)}  reps median {t.n.median():.0f} min {t.n.min()}")
    print(t.groupby("size_bytes").condition.nunique().rename("conditions per size").to_string())
    print("\n## conditions (markdown)")
    print(conditions_markdown(t))
    print("\n## LOCO interpolation error (|pred/measured - 1|)")
    for shape in ("model", "none"):
        for k in (2, 4, 8):
            e = loco_errors(MeasuredOracle(dataset, neighbours=k, shape=shape))
            print(f"shape={shape:5} k={k}: {error_summary(e)}")
    e = loco_errors(o)
    print("by size:", e.assign(a=e.rel_err.abs()).groupby("size_bytes").a.median().round(3).to_dict())
    worst = e.assign(a=e.rel_err.abs()).groupby("condition").a.median().sort_values().tail(6)
    print("worst conditions:", worst.round(3).to_dict())
    print("\n## best configuration vs default (cubic iw10 rto200 h1.1)")
    b = best_vs_default(t)
    print(f"share differs: {b.differs.mean():.3f} of {len(b)}; gain>5%: {(b.gain > 0.05).mean():.3f}; "
          f"gain>10%: {(b.gain > 0.10).mean():.3f}; distinct best configs {b.best.nunique()}")
    print(b.best.value_counts().head(8).to_string())
    print(b.sort_values(["size_bytes", "condition"]).to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    print("\n## measured / model ratio")
    r = measured_vs_model(o)
    print(r.ratio.quantile([0.05, 0.25, 0.5, 0.75, 0.95]).round(3).to_dict())
    fam = t.drop_duplicates("condition").set_index("condition")
    r["lossy"] = r.condition.map(lambda c: fam.loc[c, "loss"] >= 0.01)
    print(r.groupby(["lossy", "size_bytes"]).ratio.median().round(3).to_string())
    m = model_choice_regret(r)
    print(f"model's best = measured best: {m.agree.mean():.3f}; regret of the model's pick: median "
          f"{m.regret.median():.3f}, p90 {m.regret.quantile(0.9):.3f}, max {m.regret.max():.3f} (n={len(m)})")


def conditions_markdown(t: pd.DataFrame) -> str:
    """One row per measured condition: path, queue, family, sizes measured, fetches."""
    from tailor.testbed.conditions import CATALOG

    lines = ["| condition | family | down/up Mbit/s | RTT ms | loss | queue pkts | sizes (KB) | fetches | source |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name, c in CATALOG.items():
        g = t[t.condition == name]
        if g.empty:
            continue
        sizes = ",".join(str(s // 1024) for s in sorted(g.size_bytes.unique()))
        lines.append(f"| {name} | {c.family} | {c.down_mbps:g}/{c.up_mbps:g} | {c.rtt_ms:g} | {100 * c.loss:g}% | "
                     f"{c.queue_packets()} | {sizes} | {int(g.n.sum())} | {c.source} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else str(DEFAULT_DATASET))
