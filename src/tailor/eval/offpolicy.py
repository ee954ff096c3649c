"""Off-policy evaluation in `tailor evaluate`: each policy's final table, valued from another policy's logs
(:func:`tailor.ope.table_value`, the function the manager's ``--ope-gate`` uses) next to its true value.

The logs are one policy's page loads of the run (the *logging* policy L: by default ``configanator`` when it ran
and logged probabilities below 1, else the first such policy), read as a manager reads telemetry: client
address, website (SNI), device, the configuration applied, its logged probability and the observed page-load
time. For every evaluated policy P the estimate is of P's final table (``RunResult.final_table``, what P would
publish at the end) applied by the rule of spec/decision.md to L's logged page loads; the truth is that table's
expected time on the same page loads and the same noise draws:
``mean_i sum_c pi_table(c | connection i) * mode(cell_i, site_i)[c] * (1 + theta_i * noise_i)``.
L's own table is valued from the logs of a second stochastic policy when one ran (else from its own logs).
Intervals are cluster-robust by client cohort (a client's page loads share its network and, under a salted
table, its configuration draw).

Caveats: the logged probability must be the true probability of the logged configuration (policies that
log 1 for deterministic choices are fine as targets but useless as loggers); a table that puts mass on
configurations L never gives in a context is invisible to SNIPS and DR there (positivity), which shows as a
small ESS and an estimate biased towards the supported part. ``mean_weight`` (mean of target / logged
probability over the logs) is about 1 when the logs support the table and the logged probabilities are right;
well below 1 says the table gives configurations the logger did not in many contexts (SNIPS then averages only
the contexts it explored; DR fills the rest in from its cost model).
"""

from __future__ import annotations

import html
import math
import time

import numpy as np

from tailor.ope import Logs, cohort_clusters, fit_q_model, table_value, target_probabilities
from tailor.table import DecisionTable

PREFERRED_LOGGER = "configanator"
LEVEL = 0.95


def sim_logs(ev, result) -> Logs:
    """A run's page loads as logs: client, website, device, configuration, logged probability, PLT, context."""
    world, space = ev.simulator.world, ev.simulator.space
    clients = np.array([s.client.client_id for s in world.sessions], dtype=object)[world.session]
    devices = np.array([s.client.device or None for s in world.sessions], dtype=object)[world.session]
    sites = np.array(world.tensor.site_names, dtype=object)[world.site]
    ids = np.array([c.id for c in space.configs], dtype=object)
    rec = result.records
    features = {"log_rtt": np.log(np.maximum(world.handshake_rtt_ms, 1e-3)),
                "log_goodput": np.log(np.maximum(world.goodput_est, 1e-3)), "loss": np.asarray(world.loss_est, float)}
    return Logs(clients, sites, devices, ids[rec["config"]], rec["probability"], rec["plt_ms"], features)


def stochastic(result) -> bool:
    return bool(np.any(np.asarray(result.records["probability"]) < 1.0))


def choose_loggers(ev, logging_policy: str | None = None) -> tuple[str | None, str | None, str | None]:
    """(logging policy, alternate for the logging policy's own table, reason when there is none)."""
    runs = {r.policy: r for r in ev.results}
    candidates = [r.policy for r in ev.results if stochastic(r)]
    if logging_policy is not None:
        if logging_policy not in runs:
            return None, None, f"logging policy {logging_policy!r} was not run"
        if not stochastic(runs[logging_policy]):
            return None, None, f"logging policy {logging_policy!r} logged probability 1 for every page load"
        main = logging_policy
    elif not candidates:
        return None, None, "no policy logged a probability below 1 (no stochastic logs to estimate from)"
    else:
        main = PREFERRED_LOGGER if PREFERRED_LOGGER in candidates else candidates[0]
    alt = next((p for p in candidates if p != main), None)
    return main, alt, None


class _Truth:
    """True expected time of a table on the world's page loads (mode x realised noise factor)."""

    def __init__(self, ev):
        world, space = ev.simulator.world, ev.simulator.space
        pairs, inv = np.unique(np.c_[world.cell, world.site], axis=0, return_inverse=True)
        self.modes = np.stack([world.tensor.mode(int(c), int(s)) for c, s in pairs])  # (pairs, |space|)
        self.pair = inv.ravel()
        self.factor = 1.0 + world.theta * world.noise
        self.space = space

    def value(self, tp) -> float:
        idx = np.array([self.space.index_of(c) for c in tp.config_ids])
        expected = np.einsum("ij,ij->i", tp.matrix(), self.modes[:, idx][self.pair])
        return float(np.mean(expected * self.factor))


def _num(x: float) -> float | None:
    return None if x is None or not math.isfinite(x) else float(x)


def _row(policy: str, logger: str, truth: float, est: dict, tp, mean_weight: float) -> dict:
    row = {"policy": policy, "logging_policy": logger, "true_ms": truth, "n": est["snips"].n,
           "ess": est["snips"].ess, "mean_weight": mean_weight, "matched_share": float(np.mean(tp.matched))}
    for name in ("snips", "dr", "dm"):
        e = est.get(name)
        if e is None:
            continue
        row[f"{name}_ms"], row[f"{name}_low"], row[f"{name}_high"] = _num(e.value), _num(e.low), _num(e.high)
        ok = math.isfinite(e.value)
        row[f"{name}_rel_error"] = _num(e.value / truth - 1.0) if ok and truth > 0 else None
        row[f"{name}_covers"] = bool(e.low <= truth <= e.high) if math.isfinite(e.low) else None
    row["ess"] = _num(row["ess"])
    return row


def offpolicy_evaluation(ev, logging_policy: str | None = None, level: float = LEVEL) -> dict:
    """{"logging_policy", "alternate_logging_policy", "reason", "level", "seconds", "rows"} (see module doc)."""
    started = time.perf_counter()
    main, alt, reason = choose_loggers(ev, logging_policy)
    out = {"logging_policy": main, "alternate_logging_policy": alt, "reason": reason, "level": level,
           "estimators": "snips: self-normalised IPS; dr: doubly robust with a cross-fitted cost model "
                         "(tailor.ope.fit_q_model, with the configurations' knob values) and weights shrunk by "
                         "tailor.ope.DR_SHRINK; dm: that model alone", "rows": []}
    if main is None:
        out["seconds"] = time.perf_counter() - started
        return out
    runs = {r.policy: r for r in ev.results}
    ids = [c.id for c in ev.simulator.space.configs]
    knobs = {c.id: dict(c) for c in ev.simulator.space.configs}  # the cost model shares knob values' effects
    truth = _Truth(ev)
    prepared: dict[str, tuple[Logs, object]] = {}
    for r in ev.results:
        logger = main if r.policy != main else (alt or main)
        if logger not in prepared:
            logs = sim_logs(ev, runs[logger])
            prepared[logger] = (logs, fit_q_model(logs, ids, knobs=knobs), cohort_clusters(logs.client))
        logs, q, clusters = prepared[logger]
        table = DecisionTable(r.final_table, validated=True)  # compile_table (and the guardrails) validated it
        tp = target_probabilities(table, logs)
        est = table_value(table, logs, q=q, level=level, target=tp, cluster=clusters)
        mean_weight = float(np.mean(tp.of(logs.config) / logs.probability))
        out["rows"].append(_row(r.policy, logger, truth.value(tp), est, tp, mean_weight))
    out["seconds"] = time.perf_counter() - started
    return out


def offpolicy_report(ev, logging_policy: str | None = None) -> list[dict]:
    """One row per evaluated policy: its final table's true mean PLT on the logging policy's page loads, the SNIPS,
    DR and DM estimates from those logs (value, interval, relative error, whether the interval covers the truth),
    the ESS of the importance weights and the share of page loads a rule of the table matched. Empty when no
    policy logged stochastic decisions (:func:`offpolicy_evaluation` gives the reason)."""
    return offpolicy_evaluation(ev, logging_policy)["rows"]


def _fmt(v, fmt: str) -> str:
    return "n/a" if v is None else fmt.format(v)


def offpolicy_section(ev) -> str:
    """The report's HTML table of ``ev.offpolicy`` (set by ``tailor evaluate``); empty string without it."""
    res = getattr(ev, "offpolicy", None)
    if not res:
        return ""
    head = "<h2>Off-policy estimates of the final tables</h2>"
    if not res.get("rows"):
        return head + f"<p>Not computed: {html.escape(str(res.get('reason')))}.</p>"
    cols = ("policy", "logged by", "true PLT", "SNIPS", "SNIPS 95% CI", "err", "DR", "DR 95% CI", "err", "ESS",
            "mean w", "matched")
    body = ""
    for r in res["rows"]:
        cells = [r["policy"], r["logging_policy"], _fmt(r["true_ms"], "{:,.0f}")]
        for e in ("snips", "dr"):
            cover = {True: "", False: " ✗", None: ""}[r.get(f"{e}_covers")]
            cells += [_fmt(r.get(f"{e}_ms"), "{:,.0f}"),
                      f"{_fmt(r.get(f'{e}_low'), '{:,.0f}')}–{_fmt(r.get(f'{e}_high'), '{:,.0f}')}{cover}",
                      _fmt(r.get(f"{e}_rel_error"), "{:+.1%}")]
        cells += [_fmt(r.get("ess"), "{:,.0f}"), _fmt(r.get("mean_weight"), "{:.2f}"),
                  _fmt(r.get("matched_share"), "{:.0%}")]
        body += "<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in cells) + "</tr>"
    alt = res.get("alternate_logging_policy") or res["logging_policy"]
    note = (f"<p>Mean PLT (ms) of each policy's final decision table had it been applied to the page loads of "
            f"<b>{html.escape(res['logging_policy'])}</b> (its own table: from {html.escape(str(alt))}), estimated "
            f"from those logs with <code>tailor.ope.table_value</code> (what <code>tailor manager --ope-gate</code> "
            f"uses), next to the true value on the same page loads and noise draws. ✗: the interval misses the "
            f"truth. ESS: effective sample size of the importance weights (small: the logs barely support the "
            f"table); mean w: mean importance weight (about 1 when the logs support the table; well below 1: "
            f"configurations the logger never gave in many contexts, where SNIPS is blind and DR rests on its cost "
            f"model); matched: page loads a rule of the table matched (the others get the default). Intervals are "
            f"cluster-robust by client. Computed in {res.get('seconds', 0):.1f} s.</p>")
    head_row = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
    return head + note + f"<table><tr>{head_row}</tr>{body}</table>"
