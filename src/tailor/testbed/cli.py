"""`tailor testbed measure|check-iw`: argument parsing for the testbed (kept here so tailor/cli.py stays small)."""

from __future__ import annotations

import json
import signal
from pathlib import Path

DEFAULT_OUT = "data/oracle/tb-v2"


def add_parser(sub) -> None:
    tb = sub.add_parser("testbed", help="measure the real PLT tensor in namespaces (root; nginx, curl)")
    tsub = tb.add_subparsers(dest="testbed_command", required=True)
    m = tsub.add_parser("measure", help="run a measurement plan (resumable) into a dataset directory")
    m.add_argument("--plan", required=True, help="plan JSON (e.g. data/oracle/plans/core.json)")
    m.add_argument("--out", default=DEFAULT_OUT, help=f"dataset directory (default {DEFAULT_OUT})")
    m.add_argument("--parallel", type=int, default=4, help="concurrent jobs on slow links (default 4)")
    m.add_argument("--budget-min", type=float, default=None, help="start no job after this many minutes")
    m.add_argument("--requeue-condition", action="append", default=None, metavar="NAME",
                   help="first move every fetch of this condition to discarded.parquet, so it is measured again "
                        "(repeatable; with --serial for a short round trip, docs/testbed.md section 4a)")
    m.add_argument("--serial", action="store_true",
                   help="one job at a time instead of three pools side by side (the endpoints' CPU time shows at "
                        "a short round trip)")
    m.add_argument("--requeue-lateness-ms", type=float, default=None,
                   help="re-measure fetches of runs whose emulator p99 lateness exceeded this (ms)")
    m.add_argument("--requeue-handshake-ms", type=float, default=None,
                   help="re-measure fetches of runs whose TLS handshakes (lower quartile) were slower than their "
                        "condition's quietest run's by more than this (ms): the endpoints' CPU contention")
    ca = tsub.add_parser("campaign", help="adaptive-repetition campaign (one job at a time, A/A batches, lateness "
                                          "requeue, committed pieces; resumable)")
    ca.add_argument("--plan", required=True, help="plan JSON (its 'reps' is ignored: the adaptive rule decides)")
    ca.add_argument("--out", required=True, help="dataset directory (resumed if it exists)")
    ca.add_argument("--min-reps", type=int, default=6, help="valid repetitions every cell gets (default 6)")
    ca.add_argument("--max-reps", type=int, default=15, help="cap per cell (default 15)")
    ca.add_argument("--step", type=int, default=3, help="repetitions added per round to unresolved cells (default 3)")
    ca.add_argument("--target", type=float, default=0.03, help="relative half-width of the median's 95%% interval (default 0.03)")
    ca.add_argument("--aa", default=None, metavar="CC:IW", help="measure this configuration as two A/A batches per condition")
    ca.add_argument("--lateness-ms", type=float, default=2.0, help="re-measure runs whose emulator p99 lateness exceeded this")
    ca.add_argument("--handshake-ms", type=float, default=None,
                    help="also re-measure runs whose TLS handshakes were slower than their condition's quietest "
                         "run's by more than this (ms)")
    ca.add_argument("--budget-h", type=float, default=None, help="start no job after this many hours")
    ca.add_argument("--max-jobs", type=int, default=None, help="stop after this many jobs (a piece)")
    ca.add_argument("--commit", action="store_true", help="git-commit the dataset directory after every condition")
    ca.add_argument("--estimate", action="store_true", help="print the first round's jobs, loads and time estimate only")
    fa = tsub.add_parser("fairness", help="Jain's fairness of tuned vs default flows on one shallow bottleneck")
    fa.add_argument("--flows", type=int, default=30, help="concurrent long flows (default 30)")
    fa.add_argument("--rate-mbit", type=float, default=30.0, help="bottleneck rate (default 30 Mbit/s)")
    fa.add_argument("--rtt", type=float, default=40.0, help="RTT in ms (default 40)")
    fa.add_argument("--duration", type=float, default=25.0, help="seconds per run (default 25)")
    fa.add_argument("--warmup", type=float, default=5.0, help="seconds excluded at the start (default 5)")
    fa.add_argument("--tuned", default="bbr:32", help="tuned CC:IW (default bbr:32); default flows are cubic:10")
    fa.add_argument("--mixes", default="0,10,50,90,100", help="tuned shares in percent (default 0,10,50,90,100)")
    fa.add_argument("--buffers", default="0.5,1", help="drop-tail buffer in BDP (default 0.5,1)")
    fa.add_argument("--out", default="data/testbed/fairness.json", help="result JSON (a .md table is written too)")
    sl = tsub.add_parser("shared-link", help="search responses of one user group through one shared shaped link, "
                                             "per initial window (SmartIW's testbed, issue 14)")
    sl.add_argument("--rate-mbit", type=float, default=10.0, help="bottleneck rate (default 10 Mbit/s)")
    sl.add_argument("--rtt", type=float, default=60.0, help="RTT in ms (default 60)")
    sl.add_argument("--duration", type=float, default=30.0, help="seconds of arrivals per run (default 30)")
    sl.add_argument("--iws", default="10,32,64,200", help="initial windows (default 10,32,64,200)")
    sl.add_argument("--loads", default="0.3,0.7", help="offered loads of the link (default 0.3,0.7)")
    sl.add_argument("--queues", default="50,1000", help="drop-tail queues in packets (default 50,1000)")
    sl.add_argument("--seeds", default="1", help="arrival schedules (default 1)")
    sl.add_argument("--lone", default="", help="response sizes in segments sent one at a time, each alone on the "
                                               "link, instead of the Poisson schedule (e.g. 20,52,90,199)")
    sl.add_argument("--out", default="data/testbed/shared-link.json",
                    help="result JSON, resumed if it holds the same setup (a .md table is written too)")
    sl.add_argument("--report", nargs="+", metavar="JSON", default=None,
                    help="measure nothing: merge these results (one setup, other schedules) and print their tables")
    q = tsub.add_parser("quic", help="QUIC/HTTP-3 workload: tailor-edge --quic and tailor-fetch over the emulated link")
    q.add_argument("--plan", required=True, help="QUIC plan JSON (e.g. data/oracle/plans/tb-v2-quic.json)")
    q.add_argument("--out", default=DEFAULT_OUT + "/quic", help=f"dataset directory (default {DEFAULT_OUT}/quic)")
    q.add_argument("--parallel", type=int, default=2, help="concurrent jobs (default 2)")
    q.add_argument("--budget-min", type=float, default=None, help="start no job after this many minutes")
    q.add_argument("--estimate", action="store_true", help="print the plan's job count and time estimate only")
    qr = tsub.add_parser("quic-report", help="per condition: best QUIC configuration vs default, and H3 vs H2")
    qr.add_argument("--data", default=DEFAULT_OUT + "/quic", help="QUIC dataset directory")
    qr.add_argument("--json", action="store_true", help="print the summary as JSON instead of a table")
    iw = tsub.add_parser("check-iw", help="count data packets of the first RTT for configured initial windows")
    iw.add_argument("--iw", default="4,10,32", help="comma list of initial windows (default 4,10,32)")
    iw.add_argument("--cc", default="cubic,bbr", help="comma list of congestion controls (default cubic,bbr)")
    iw.add_argument("--rtt", type=float, default=200.0, help="emulated RTT in ms (default 200)")
    iw.add_argument("--json", action="store_true", help="print JSON lines instead of a table")


def run(args) -> int:
    if args.testbed_command == "measure":
        return _measure(args)
    if args.testbed_command == "campaign":
        return _campaign(args)
    if args.testbed_command == "fairness":
        return _fairness(args)
    if args.testbed_command == "quic":
        return _quic(args)
    if args.testbed_command == "shared-link":
        return _shared_link(args)
    if args.testbed_command == "quic-report":
        return _quic_report(args)
    return _check_iw(args)


def _fairness(args) -> int:
    from tailor.errors import ParameterError
    from tailor.testbed.fairness import FairnessSetup, run_experiment
    from tailor.testbed.server import tailor_link_binary

    try:
        cc, iw = args.tuned.split(":")
        mixes = tuple(float(m) / 100 for m in args.mixes.split(","))
        buffers = tuple(float(b) for b in args.buffers.split(","))
        iw = int(iw)
    except ValueError:
        raise ParameterError(f"The '--tuned', '--mixes' and '--buffers' parameters of testbed fairness must be "
                             f"CC:IW and comma lists of numbers. Got {args.tuned!r}, {args.mixes!r}, "
                             f"{args.buffers!r}.") from None
    setup = FairnessSetup(flows=args.flows, rate_mbit=args.rate_mbit, rtt_ms=args.rtt, duration_s=args.duration,
                          warmup_s=args.warmup, tuned_cc=cc, tuned_iw=iw, mixes=mixes, buffers_bdp=buffers)
    _interrupt_on_term()
    res = run_experiment(setup, tailor_link_binary(), Path(args.out))
    print(json.dumps({"out": args.out, "runs": len(res["runs"]),
                      "jain": {f"{r['buffer_bdp']:g}bdp/{100 * r['mix']:.0f}%": round(r["jain"], 3)
                               for r in res["runs"]}}))
    return 0


def _shared_link(args) -> int:
    from tailor.errors import ParameterError
    from tailor.testbed.server import tailor_link_binary
    from tailor.testbed.sharedlink import SharedLinkSetup, markdown, merge, run_experiment

    if args.report:
        print(markdown(merge([json.loads(Path(p).read_text()) for p in args.report])), end="")
        return 0
    try:
        iws, seeds, queues = (tuple(int(v) for v in a.split(",")) for a in (args.iws, args.seeds, args.queues))
        loads = tuple(float(v) for v in args.loads.split(","))
        lone = tuple(int(v) for v in args.lone.split(",")) if args.lone else ()
    except ValueError:
        raise ParameterError(f"The '--iws', '--seeds', '--queues', '--loads' and '--lone' parameters of testbed "
                             f"shared-link must be comma lists of numbers. Got {args.iws!r}, {args.seeds!r}, "
                             f"{args.queues!r}, {args.loads!r}, {args.lone!r}.") from None
    from tailor.testbed.sharedlink import LONE_GAP_S

    duration = 1.0 + LONE_GAP_S * len(lone) if lone else args.duration  # lone: one warm-up second, then the sizes
    setup = SharedLinkSetup(rate_mbit=args.rate_mbit, rtt_ms=args.rtt, duration_s=duration, iws=iws, loads=loads,
                            queues=queues, seeds=seeds, lone=lone, warmup_s=1.0 if lone else 2.0)
    _interrupt_on_term()
    res = run_experiment(setup, tailor_link_binary(), Path(args.out))
    print(json.dumps({"out": args.out, "runs": len(res["runs"]),
                      "improvement_over_iw10": {f"q{r['queue_packets']}/rho{r['load']:g}/iw{r['iw']}":
                                                round(r.get("improvement", 0.0), 4) for r in res["paired"]}}))
    return 0


def _measure(args) -> int:
    from tailor.testbed.measure import measure
    from tailor.testbed.plan import Plan

    _interrupt_on_term()
    budget = args.budget_min * 60 if args.budget_min else None
    prov = measure(Plan.load(args.plan), Path(args.out), parallel=args.parallel, budget_s=budget,
                   requeue_lateness_ms=args.requeue_lateness_ms, requeue_conditions=args.requeue_condition,
                   serial=args.serial, requeue_handshake_ms=args.requeue_handshake_ms)
    keys = ("rows", "ok_rows", "fetches_ok", "fetches_failed", "fetches_failed_final", "jobs_skipped_budget",
            "started_utc", "finished_utc")
    print(json.dumps({k: prov.get(k) for k in keys}))
    return 0 if prov.get("fetches_failed_final", 0) == 0 else 1  # a fetch still without a valid row after its retry


def _campaign(args) -> int:
    from tailor.testbed.campaign import Adaptive, campaign
    from tailor.testbed.plan import Plan, Transport

    _interrupt_on_term()
    aa = None
    if args.aa:
        cc, _, iw = args.aa.partition(":")
        aa = Transport(cc, int(iw or 10))
    adaptive = Adaptive(args.min_reps, args.step, args.max_reps, args.target)
    if args.estimate:
        from tailor.testbed.campaign import estimate

        print(json.dumps(estimate(Plan.load(args.plan), adaptive, aa, Path(args.out))))
        return 0
    out = campaign(Plan.load(args.plan), Path(args.out), adaptive, aa, budget_s=args.budget_h * 3600 if args.budget_h else None, lateness_ms=args.lateness_ms,
                   commit=args.commit, max_jobs=args.max_jobs, handshake_ms=args.handshake_ms)
    print(json.dumps(out))
    return 0


def _quic(args) -> int:
    from tailor.errors import ParameterError
    from tailor.testbed.quic import QuicPlan, measure_quic

    plan = QuicPlan.load(args.plan)
    if not 1 <= args.parallel <= 8:
        raise ParameterError(f"The '--parallel' parameter of testbed quic must be in [1, 8]. Got {args.parallel}.")
    if args.estimate:
        jobs = plan.jobs()
        print(json.dumps({"jobs": len(jobs), "fetches": sum(len(j.fetches) for j in jobs),
                          "estimate_min": round(plan.estimate_s(args.parallel) / 60, 1)}))
        return 0
    _interrupt_on_term()
    budget = args.budget_min * 60 if args.budget_min else None
    prov = measure_quic(plan, Path(args.out), parallel=args.parallel, budget_s=budget)
    keys = ("rows", "ok_rows", "fetches_ok", "fetches_failed", "jobs_skipped_budget", "started_utc", "finished_utc")
    print(json.dumps({k: prov.get(k) for k in keys}))
    return 0 if prov.get("fetches_failed", 0) == 0 else 1


def _quic_report(args) -> int:
    import pandas as pd

    from tailor.errors import ParameterError
    from tailor.testbed.quic import summarize, summary_markdown

    path = Path(args.data) / "measurements.parquet"
    if not path.exists():
        raise ParameterError(f"The '--data' parameter of testbed quic-report must be a QUIC dataset directory "
                             f"with measurements.parquet. Got {args.data!r}.")
    s = summarize(pd.read_parquet(path))
    print(json.dumps(s, indent=1) if args.json else summary_markdown(s), end="" if not args.json else "\n")
    return 0


def _interrupt_on_term() -> None:
    """SIGTERM and SIGINT (ignored in `cmd &` background jobs) both stop a run cleanly: running harnesses get
    SIGTERM (they tear their namespaces down) and the journal is compacted."""
    def handler(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


def _check_iw(args) -> int:
    from tailor.testbed.iwcheck import check_iw
    from tailor.testbed.server import tailor_link_binary

    tl_bin, bad = tailor_link_binary(), 0
    if not args.json:
        print(f"{'cc':6} {'IW':>4} {'1st flight':>10} {'2nd flight':>10} {'data pkts':>9}  result")
    for cc in args.cc.split(","):
        for iw in (int(x) for x in args.iw.split(",")):
            r = check_iw(tl_bin, cc.strip(), iw, rtt_ms=args.rtt)
            bad += not r.ok
            if args.json:
                print(json.dumps({**r.__dict__, "ok": r.ok}))
            else:
                print(f"{r.cc:6} {r.iw:>4} {r.first_flight:>10} {r.second_flight:>10} {r.data_packets:>9}  "
                      f"{'PASS' if r.ok else 'FAIL'}")
    return 1 if bad else 0
