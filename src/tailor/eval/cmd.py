"""The `tailor evaluate` command: options -> evaluation -> table/JSON on stdout, files in --out."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from tailor.eval.report import COLUMNS, render
from tailor.eval.run import BASELINES, evaluate, write_results
from tailor.oracle.select import default_oracle
from tailor.scenario import load_scenario
from tailor.sim import SimConfig


def run_evaluate(args, argv) -> int:
    policies = [p.strip() for p in args.policies.split(",")] if args.policies else list(BASELINES)
    config = SimConfig(space=args.space, allowed=args.allowed, update_freq_s=args.update_freq,
                       update_latency_s=args.update_latency, mode=args.mode, seed=args.seed)
    oracle = default_oracle()
    scenario = load_scenario(args.scenario, n_sessions=args.sessions, seed=args.seed, websites=sorted(oracle.websites))
    overrides = {} if args.perf_memory is None else {"perf_memory": args.perf_memory}
    err = Console(stderr=True)
    with Progress(TextColumn("{task.description:>14}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=err, transient=False, disable=not err.is_terminal and args.json) as bar:
        def progress(name, total):
            task = bar.add_task(name, total=total)
            return lambda i: bar.update(task, completed=i + 1 if i + 500 < total else total)

        err.print(f"scenario {scenario.name}: {len(scenario.sessions)} sessions, {scenario.n_loads} page loads; "
                  f"oracle {oracle.name}; space {config.space} ({args.allowed or 'all allowed'})")
        ev = evaluate(scenario, oracle, policies, config, overrides, progress)
    out = Path(args.out or f"out/evaluate-{Path(str(args.scenario)).stem}-s{args.seed}")
    meta = write_results(ev, out, argv)
    report = None if args.no_report else render(ev, meta, out)
    if args.json:
        for s in ev.summaries:
            print(json.dumps(s))
    else:
        _print_table(ev.summaries)
        print(f"results: {out / 'results.parquet'}" + (f"\nreport:  {report}" if report else ""))
    return 0


def _print_table(summaries: list[dict]) -> None:
    table = Table(title="Improvement over default (per page load) and distance to optimal")
    for _, title, _ in COLUMNS:
        table.add_column(title, justify="right")
    for s in summaries:
        table.add_row(*(fmt.format(s[k]) for k, _, fmt in COLUMNS))
    Console(file=sys.stdout, width=200).print(table)
