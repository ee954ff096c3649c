"""Command line: `tailor evaluate`, `tailor knobs`, `tailor scenario`, `tailor table`, `tailor manager`, `tailor cluster`,
`tailor demo`."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tailor.errors import TailorError


def _build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tailor", description="Tailor: per-client-group tuning of TCP and HTTP settings.")
    sub = p.add_subparsers(dest="command", required=True)
    ev = sub.add_parser("evaluate", help="run policies side by side on a scenario and write a report")
    ev.add_argument("--scenario", default="default", help="built-in scenario name or a scenario file (default: default)")
    ev.add_argument("--policies", default=None, help="comma list (default: every baseline)")
    ev.add_argument("--sessions", type=int, default=None, help="number of sessions (default: the scenario's own)")
    ev.add_argument("--seed", type=int, default=0, help="seed of the world and of every policy (default 0)")
    ev.add_argument("--repeat", type=_positive, default=1,
                    help="run seeds S..S+R-1 and report mean and 95%% CI over seeds (default 1)")
    ev.add_argument("--out", default=None, help="output directory (default: out/evaluate-<scenario>-s<seed>)")
    ev.add_argument("--json", action="store_true", help="print one JSON object per policy (JSON lines) instead of a table")
    ev.add_argument("--space", default="core", help="named configuration space of spec/knobs.json (default core)")
    ev.add_argument("--allowed", default="", help="AllowedConfig, e.g. NoBBR,NoHighICW,tcp.initial_cwnd<=32")
    ev.add_argument("--update-freq", type=float, default=300.0, help="UpdateFreq in seconds (default 300)")
    ev.add_argument("--update-latency", type=float, default=0.0, help="UpdateLatency in seconds (default 0)")
    ev.add_argument("--mode", choices=("online", "table"), default="online",
                    help="online: the policy picks per connection; table: edges apply compiled decision tables")
    ev.add_argument("--guardrails", default="off", metavar="on|off",
                    help="on: every table goes through the manager's guardrails (AllowedConfig, rollback, stickiness, "
                         "exploration budget 0.1, holdback 0.2: a default `tailor manager`), as a deployment would "
                         "publish it; implies --mode table (switched and logged, recorded in metadata.json) (default off)")
    ev.add_argument("--perf-memory", type=int, default=None, help="PerfMemory: samples kept per configuration (0 = all)")
    ev.add_argument("--policy-param", action="append", default=[], metavar="KEY=VALUE",
                    help="a parameter for every listed policy that has it, e.g. dt_leaf_mode=max (repeatable)")
    ev.add_argument("--oracle", choices=("auto", "model", "model-v6", "model-timeline", "model-tailprobe", "measured",
                                         "measured-quic"), default="auto",
                    help="auto: the measured testbed dataset when it covers the space and websites, else the model; "
                         "model-timeline: the model with the page timeline (tailor/oracle/MODEL.md section 3a); "
                         "model (model-tcp-v7; model-tailprobe is the same): an object's or response's lone lost tail "
                         "waits for the tail-loss probe (MODEL.md 6f); model-v6: the model before, on which the "
                         "README's figures dated before 2026-12-02 ran; "
                         "measured-quic (also auto's choice for a space tuning HTTP/3 or QUIC knobs, e.g. --space quic): "
                         "the QUIC dataset")
    ev.add_argument("--no-report", action="store_true", help="skip the HTML report")
    sub.add_parser("knobs", help="list the knob registry")
    sc = sub.add_parser("scenario", help="load a scenario (name or file), validate it and summarize it")
    sc.add_argument("scenario")
    sc.add_argument("--sessions", type=int, default=None)
    sc.add_argument("--seed", type=int, default=0)
    tb = sub.add_parser("table", help="validate a decision table file")
    tb.add_argument("path")
    st = sub.add_parser("study", help="side studies of a learner (Configanator: K scaling, knobs, fairness, ...)")
    st.add_argument("learner", choices=("configanator",))
    st.add_argument("--only", default=None, help="comma list of studies (default: all)")
    st.add_argument("--sessions", type=int, default=600, help="sessions of the default scenario (default 600)")
    st.add_argument("--seed", type=int, default=0)
    st.add_argument("--out", default="out/study-configanator")
    from tailor.testbed.cli import add_parser as _add_testbed

    _add_testbed(sub)
    from tailor.manager.server import add_arguments as _add_manager

    _add_manager(sub.add_parser("manager", help="run the manager: telemetry in, decision tables out (docs/manager.md)"))
    from tailor.bus.cluster import add_parser as _add_cluster

    _add_cluster(sub)
    from tailor.demo.cli import add_parser as _add_demo

    _add_demo(sub)
    from tailor.probe import add_parser as _add_probe

    _add_probe(sub)
    from tailor.oracle.cli import add_parser as _add_oracle

    _add_oracle(sub)
    return p


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text}")
    return value


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:  # building the parser imports the registry: a missing spec/ or data/ (tailor.paths) is one error line
        args = _build_parser().parse_args(argv)
        return {"evaluate": _evaluate, "knobs": _knobs, "scenario": _scenario, "table": _table, "study": _study, "testbed": _testbed,
                "manager": _manager, "cluster": _cluster, "demo": _demo, "probe": _probe, "oracle": _oracle}[args.command](args, argv)
    except TailorError as err:
        print(f"tailor: error: {err}", file=sys.stderr)
        return 2


def _oracle(args, argv) -> int:
    from tailor.oracle.cli import run

    return run(args)


def _probe(args, argv) -> int:
    from tailor.probe import run_probe

    return run_probe(args)


def _evaluate(args, argv) -> int:
    from tailor.eval.cmd import run_evaluate

    return run_evaluate(args, argv)


def _knobs(args, argv) -> int:
    from tailor.oracle.model import knob_status
    from tailor.space import load_registry

    for k in load_registry().knobs.values():
        domain = list(k.values) if k.values else (list(k.bounds) if k.bounds else "bool")
        print(f"{k.name:40s} {k.layer:9s} default={k.default!s:8s} domain={domain} apply={','.join(k.apply)} "
              f"model={knob_status(k.name)}")
    return 0


def _scenario(args, argv) -> int:
    from tailor.scenario import load_scenario

    scn = load_scenario(args.scenario, n_sessions=args.sessions, seed=args.seed)
    access: dict[str, int] = {}
    for s in scn.sessions:
        access[s.client.access] = access.get(s.client.access, 0) + 1
    print(json.dumps({"name": scn.name, "sessions": len(scn.sessions), "pageloads": scn.n_loads,
                      "websites": scn.websites(), "access": access}, indent=1))
    return 0


def _table(args, argv) -> int:
    from tailor.table import load_table

    doc = load_table(Path(args.path))
    print(f"ok: version {doc['version']}, {len(doc['groups'])} groups, {len(doc['rules'])} rules")
    return 0


def _testbed(args, argv) -> int:
    from tailor.testbed.cli import run

    return run(args)


def _manager(args, argv) -> int:
    from tailor.manager.server import run

    return run(args)


def _cluster(args, argv) -> int:
    from tailor.bus.cluster import run

    return run(args)


def _demo(args, argv) -> int:
    from tailor.demo.run import run

    return run(args)


def _study(args, argv) -> int:
    from tailor.eval.studies import STUDIES, run_studies
    from tailor.oracle.select import default_oracle
    from tailor.scenario import load_scenario

    names = args.only.split(",") if args.only else list(STUDIES)
    unknown = sorted(set(names) - set(STUDIES))
    if unknown:
        raise TailorError(f"The 'only' parameter must name studies in {sorted(STUDIES)}. Got {unknown}.")
    oracle = default_oracle()
    scn = load_scenario("default", n_sessions=args.sessions, seed=args.seed, websites=sorted(oracle.websites))
    run_studies(names, scn, oracle, args.seed, Path(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
