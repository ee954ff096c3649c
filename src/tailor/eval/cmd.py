"""The `tailor evaluate` command: options -> evaluation -> table/JSON on stdout, files in --out."""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from scipy import stats

from tailor.errors import check
from tailor.eval.report import COLUMNS, render
from tailor.eval.run import DEFAULT_POLICIES, evaluate, write_results
from tailor.oracle.select import select_oracle
from tailor.policies import POLICIES
from tailor.policies.base import parse_policy_params
from tailor.scenario import load_scenario
from tailor.sim import SimConfig


def run_evaluate(args, argv) -> int:
    policies = [p.strip() for p in args.policies.split(",")] if args.policies else list(DEFAULT_POLICIES)
    oracle = select_oracle(args.oracle, args.space)
    seeds = [args.seed + k for k in range(args.repeat)]
    root = Path(args.out or f"out/evaluate-{Path(str(args.scenario)).stem}-s{args.seed}")
    _check_out(root)
    stage = root.parent / f".{root.name}.tmp-{os.getpid()}"  # written whole, then put in place: no stale or mixed files
    shutil.rmtree(stage, ignore_errors=True)
    try:
        summaries, reports, n_runs = _run_seeds(args, argv, policies, oracle, seeds, stage)
        _put_in_place(stage, root)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    if args.json:
        for s in summaries:
            print(json.dumps(s))
    else:
        _print_table(summaries, n_runs)
        print(f"results: {root}" + "".join(f"\nreport:  {root / r.relative_to(stage)}" for r in reports if r))
    return 0


# what `tailor evaluate` writes in --out: a directory holding anything else is refused, these are replaced
_OUTPUTS = ("results.parquet", "summary.json", "metadata.json", "offpolicy.json", "report.html", "tables")
_SEED_DIR = re.compile(r"seed-\d+")


def _ours(entry: Path) -> bool:
    return entry.name in _OUTPUTS or (entry.is_dir() and _SEED_DIR.fullmatch(entry.name) is not None)


def _check_out(root: Path) -> None:
    """--out is a new or empty directory or one an earlier evaluate wrote (its outputs are replaced, as a whole, at
    the end: until 2026-12-07 they were overwritten one by one and an earlier run's other files stayed; found by
    review)."""
    if root.exists() and not root.is_dir():
        check(False, "tailor evaluate", "out", "a directory", str(root))
    if root.is_dir():
        other = sorted(e.name for e in root.iterdir() if not _ours(e))
        check(not other, "tailor evaluate", "out", "a new or empty directory or an earlier evaluate's output "
              f"(it holds {', '.join(other[:3])}{' ...' if len(other) > 3 else ''})", str(root))


def _put_in_place(stage: Path, root: Path) -> None:
    """Replace an earlier run's outputs in ``root`` with ``stage``'s (the entries :func:`_ours` names only)."""
    root.mkdir(parents=True, exist_ok=True)
    for e in root.iterdir():
        if _ours(e):
            _remove(e)
    for e in stage.iterdir():
        try:
            os.replace(e, root / e.name)
        except OSError:  # another evaluate into the same --out put its own there meanwhile: the last one wins
            _remove(root / e.name)
            os.replace(e, root / e.name)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _run_seeds(args, argv, policies, oracle, seeds, root):
    err = Console(stderr=True)
    runs, reports = [], []
    with Progress(TextColumn("{task.description:>14}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=err, transient=False, disable=not err.is_terminal and args.json) as bar:
        def progress(name, total):
            task = bar.add_task(name, total=total)
            return lambda i: bar.update(task, completed=i + 1 if i + 500 < total else total)

        for seed in seeds:
            ev = _evaluate_seed(args, seed, oracle, policies, progress, err)
            out = root if len(seeds) == 1 else root / f"seed-{seed}"
            meta = write_results(ev, out, argv)
            reports.append(None if args.no_report else render(ev, meta, out))
            runs.append(ev.summaries)
    summaries = runs[0] if len(runs) == 1 else aggregate(runs)
    if len(runs) > 1:
        (root / "summary.json").write_text(json.dumps(summaries, indent=2))
    return summaries, reports, len(runs)


def _print_selection(oracle, err) -> None:
    """The oracle, why (``--oracle auto``) and its validation figures against the measured dataset."""
    from tailor.oracle.validate import one_line

    v = getattr(oracle, "validation", None) or {}
    err.print(f"oracle {oracle.name}: {v.get('reason', '')}", highlight=False, soft_wrap=True)
    for name, kinds in (v.get("figures") or {}).items():
        how = ("leave-one-condition-out" if name == "measured" else
               "its own fitted constant from tb-v3, held out by `tailor oracle calibrate --oracle model-timeline`; its "
               "page mechanisms chosen looking at tb-v3's pages"
               if name == "model-timeline" else
               "its one fitted constant from tb-v3: pages in-sample; held out by `tailor oracle calibrate`")
        err.print(f"  validation ({how}) {one_line(name, kinds)}", highlight=False, soft_wrap=True)


def _evaluate_seed(args, seed, oracle, policies, progress, err):
    config = SimConfig(space=args.space, allowed=args.allowed, update_freq_s=args.update_freq,
                       update_latency_s=args.update_latency, mode=args.mode, seed=seed,
                       guardrails=getattr(args, "guardrails", "off"))
    scenario = load_scenario(args.scenario, n_sessions=args.sessions, seed=seed, websites=sorted(oracle.websites))
    overrides = policy_overrides(args, policies)
    if seed == args.seed:  # once, after the options were checked (a bad option is one error line)
        _print_selection(oracle, err)
    guard = ""
    if config.guardrails == "on":
        guard = (f"; guardrails on (holdback {config.guard_holdback:g}, explore budget {config.guard_explore_budget:g})"
                 + (f": mode table, not {args.mode}" if args.mode != config.mode else ""))
    err.print(f"seed {seed}: scenario {scenario.name}: {len(scenario.sessions)} sessions, {scenario.n_loads} page loads; "
              f"oracle {oracle.name}; space {config.space} ({args.allowed or 'all allowed'}){guard}")
    return evaluate(scenario, oracle, policies, config, overrides, progress)


def policy_overrides(args, policies: list[str]) -> dict:
    """``--perf-memory`` and ``--policy-param`` as constructor overrides; each parameter must belong to at
    least one listed policy (policies without it ignore it; values are checked by the policy itself)."""
    overrides = dict(parse_policy_params(getattr(args, "policy_param", None) or [], "tailor evaluate"))
    for key in overrides:
        owners = [p for p in policies if key in getattr(POLICIES.get(p), "parameters", {})]
        check(bool(owners), "tailor evaluate", "policy-param", f"a parameter of one of {policies}", key)
    if args.perf_memory is not None:
        overrides["perf_memory"] = args.perf_memory
    return overrides


def aggregate(runs: list[list[dict]]) -> list[dict]:
    """Mean over seeds per policy, with a 95% t-interval half-width ``<metric>_ci95`` for each metric."""
    out = []
    for rows in zip(*runs):
        agg = {"policy": rows[0]["policy"], "seeds": len(rows)}
        for key, value in rows[0].items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                vals = np.array([r[key] for r in rows], dtype=float)
                agg[key] = float(vals.mean())
                half = stats.t.ppf(0.975, len(vals) - 1) * vals.std(ddof=1) / np.sqrt(len(vals))
                agg[f"{key}_ci95"] = float(half)
        out.append(agg)
    return out


def _print_table(summaries: list[dict], n_seeds: int = 1) -> None:
    title = "Improvement over default (per page load) and distance to optimal"
    table = Table(title=title + (f": mean ± 95% CI over {n_seeds} seeds" if n_seeds > 1 else ""))
    for _, name, _ in COLUMNS:
        table.add_column(name, justify="right")
    for s in summaries:
        table.add_row(*(_cell(s, k, fmt) for k, _, fmt in COLUMNS))
    Console(file=sys.stdout, width=200).print(table)


def _cell(summary: dict, key: str, fmt: str) -> str:
    text = fmt.format(summary[key])
    half = summary.get(f"{key}_ci95")
    if half is None or key in ("pageloads", "conn_per_s"):
        return text
    return f"{text} ± {fmt.replace('+', '').format(half)}"
