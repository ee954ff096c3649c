"""Guardrails applied to every decision table before it is published.

Each is a small function over the table's choices, applied in this order by :func:`apply_guardrails`:

1. **AllowedConfig** — a choice whose configuration the operator's restriction forbids loses its
   mass to the default (policies already search the restricted space; this is the last line).
2. **Rollback** — a configuration that proved significantly slower than the holdback in a group
   (always-valid mSPRT on log completion times, :mod:`tailor.manager.sequential`) is blocked in
   that group; its mass goes to the default. Blocks persist until an operator clears them.
3. **Stickiness** — the group's greedy configuration (its *incumbent*) changes only when the
   candidate beats the incumbent by at least ``min_improvement`` with always-valid confidence;
   otherwise the incumbent keeps the greedy mass and the candidate keeps a probing share.
4. **Exploration budget** — the non-greedy probability mass of a group is capped at ``explore_budget``.
5. **Holdback** — the table's holdback share is at least the configured one.

Under an operator's override the same rollback test watches the operator's table (:func:`check_override`): every
configuration it serves, on the evidence gathered since the override began; it finds, and changes nothing; the
manager alerts, or with ``--override-rollback apply`` moves the mass itself.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field

from tailor.errors import TableError, check
from tailor.manager.sequential import LogStats, msprt_reject
from tailor.space import AllowedConfig, Configuration


@dataclass(frozen=True)
class GuardConfig:
    allowed: AllowedConfig = AllowedConfig()
    holdback: float = 0.2
    explore_budget: float = 0.1  # max non-greedy probability mass per group
    rollback_alpha: float = 0.05
    rollback_margin: float = 0.0  # fractional slowdown vs holdback tolerated before rollback
    switch_alpha: float = 0.05
    min_improvement: float = 0.02  # a new greedy choice must be this much faster than the incumbent
    tau2: float = 0.01  # mSPRT mixing variance on the log scale (effects around 10%)

    def __post_init__(self):
        check(0.0 <= self.holdback < 1.0, "GuardConfig", "holdback", "in [0, 1)", self.holdback)
        check(0.0 <= self.explore_budget <= 1.0, "GuardConfig", "explore_budget", "in [0, 1]", self.explore_budget)
        check(0.0 < self.rollback_alpha < 1.0, "GuardConfig", "rollback_alpha", "in (0, 1)", self.rollback_alpha)
        check(0.0 <= self.min_improvement < 1.0, "GuardConfig", "min_improvement", "in [0, 1)", self.min_improvement)


@dataclass
class GuardState:
    """Evidence per group: log-time statistics of treated records per configuration and of holdback."""

    treated: dict[str, dict[str, LogStats]] = field(default_factory=dict)
    holdback: dict[str, LogStats] = field(default_factory=dict)
    incumbent: dict[str, str] = field(default_factory=dict)
    blocked: dict[str, dict[str, str]] = field(default_factory=dict)  # group -> config -> reason

    def observe(self, group: str, config_id: str, completion_ms: float, holdback: bool) -> None:
        if holdback:
            self.holdback.setdefault(group, LogStats()).add(completion_ms)
        else:
            self.treated.setdefault(group, {}).setdefault(config_id, LogStats()).add(completion_ms)

    def pooled(self, group: str) -> LogStats:
        out = LogStats()
        for s in self.treated.get(group, {}).values():
            out = out.merge(s)
        return out

    def improvement(self, group: str) -> float:
        """1 - (treated / holdback) geometric-mean completion time of the group (nan without both)."""
        return 1.0 - self.pooled(group).ratio_to(self.holdback.get(group, LogStats()))

    def copy(self) -> GuardState:
        """A deep copy (the evidence at this moment: what :func:`check_override` subtracts)."""
        return copy.deepcopy(self)

    def config_stats(self, group: str, config_id: str, default_id: str) -> LogStats:
        """Treated statistics of a configuration; the default's include the group's holdback records."""
        s = self.treated.get(group, {}).get(config_id, LogStats())
        return s.merge(self.holdback.get(group, LogStats())) if config_id == default_id else s


def greedy(choices: list[dict]) -> str:
    return max(choices, key=lambda c: c["p"])["config"]


def _normalize(probs: dict[str, float]) -> list[dict]:
    total = sum(p for p in probs.values() if p > 0)
    return [{"config": c, "p": p / total} for c, p in probs.items() if p > 0]


def move_to_default(choices: list[dict], drop: set[str], default_id: str) -> list[dict]:
    """Give the mass of every choice in ``drop`` to the default configuration."""
    probs: dict[str, float] = {}
    for c in choices:
        key = default_id if c["config"] in drop else c["config"]
        probs[key] = probs.get(key, 0.0) + c["p"]
    return _normalize(probs)


def disallowed_configs(table: dict, allowed: AllowedConfig) -> set[str]:
    return {cid for cid, knobs in table["configs"].items() if not allowed.permits(Configuration(knobs))}


def check_allowed(table: dict, allowed: AllowedConfig) -> None:
    """Raise TableError naming the first choice whose configuration AllowedConfig forbids (operator tables)."""
    bad = disallowed_configs(table, allowed)
    for i, g in enumerate(table["groups"]):
        for j, c in enumerate(g["choices"]):
            if c["config"] in bad:
                raise TableError(f"decision table field groups[{i}].choices[{j}].config: {c['config']} "
                                 f"is not permitted by AllowedConfig {allowed}")
    if table["default"] in bad:
        raise TableError(f"decision table field default: {table['default']} is not permitted by AllowedConfig {allowed}")


def cap_exploration(choices: list[dict], budget: float, keep: str | None = None) -> list[dict]:
    """Scale the non-greedy choices so that their total mass is at most ``budget``.

    ``keep``: the configuration that holds the greedy mass (the group's incumbent, which stickiness keeps);
    by default the choice with the largest mass. Without it, a policy spreading its mass thinly (e.g.
    uniformly over 60 configurations) would see stickiness's probing share become the largest choice and
    receive ``1 - budget`` of the traffic with no evidence at all.
    """
    g = keep if keep is not None and any(c["config"] == keep for c in choices) else greedy(choices)
    rest = sum(c["p"] for c in choices if c["config"] != g)
    if rest <= budget + 1e-12:
        return choices
    scale = budget / rest
    probs = {c["config"]: (c["p"] * scale if c["config"] != g else 0.0) for c in choices}
    probs[g] = 1.0 - budget
    return _normalize(probs)


def slower_than_holdback(state: GuardState, cfg: GuardConfig, group: str, config_id: str,
                         since: GuardState | None = None, alpha: float | None = None) -> tuple[bool, LogStats, LogStats]:
    """The rollback test: is ``config_id``'s treated evidence in ``group`` significantly slower than the group's
    holdback (one-sided always-valid mSPRT, ``rollback_alpha`` or ``alpha``, ``tau2``, ``rollback_margin``,
    MIN_SAMPLES a side)? ``since``: an earlier copy of ``state``; only the evidence added after it counts, on both
    sides. Returns the verdict and the two sides' statistics."""
    treated, hold = state.treated.get(group, {}).get(config_id, LogStats()), state.holdback.get(group, LogStats())
    if since is not None:
        treated = treated.since(since.treated.get(group, {}).get(config_id))
        hold = hold.since(since.holdback.get(group))
    a = cfg.rollback_alpha if alpha is None else alpha
    return msprt_reject(treated, hold, math.log1p(cfg.rollback_margin), a, cfg.tau2), treated, hold


def check_rollbacks(state: GuardState, cfg: GuardConfig, default_id: str) -> list[dict]:
    """Block every group's incumbent that is significantly slower than the group's holdback."""
    events = []
    for group, inc in list(state.incumbent.items()):
        if inc == default_id:
            continue
        reject, treated, hold = slower_than_holdback(state, cfg, group, inc)
        if reject:
            ratio = treated.ratio_to(hold)
            reason = (f"rollback: {inc} is {100 * (ratio - 1):.1f}% slower than holdback "
                      f"(n={treated.n} vs {hold.n}, mSPRT alpha={cfg.rollback_alpha})")
            state.blocked.setdefault(group, {})[inc] = reason
            state.incumbent[group] = default_id
            events.append({"group": group, "config": inc, "reason": reason})
    return events


def check_override(table: dict, state: GuardState, cfg: GuardConfig, seen=frozenset(),
                   since: GuardState | None = None) -> list[dict]:
    """The rollback test on what edges serve under an operator's table: in each group, every configuration it gives
    mass to, but the table's default, against the group's holdback records (:func:`slower_than_holdback`: the same
    tau2, margin and minimum samples as :func:`check_rollbacks`; ``rollback_alpha`` split evenly over the group's
    tested configurations, Bonferroni, so that a group's chance of a false alarm stays at most ``rollback_alpha``).
    ``since``: the evidence as it was when the override began (:meth:`GuardState.copy`); only what came after counts
    (None: everything). Changes nothing: the operator owns the table; the caller alerts (or, when told to, moves the
    mass). ``seen``: (group, configuration) pairs already found during this override, not reported again. (Until
    2026-12-07 only each group's main configuration was tested, on everything ever recorded for it: a minority
    configuration slower than holdback, or one the override made slow after weeks of good evidence, raised nothing;
    found by review.)"""
    default_id = table["default"]
    events = []
    for g in table["groups"]:
        served = sorted({c["config"] for c in g["choices"] if c["p"] > 0} - {default_id})
        for cid in served:
            if (g["id"], cid) in seen:
                continue
            reject, treated, hold = slower_than_holdback(state, cfg, g["id"], cid, since,
                                                         cfg.rollback_alpha / len(served))
            if reject:
                slower = treated.ratio_to(hold) - 1.0
                events.append({"group": g["id"], "config": cid, "slower": slower, "n": treated.n, "n_holdback": hold.n,
                               "reason": f"override-regression: {cid} is {100 * slower:.1f}% slower than holdback "
                                         f"in {g['id']} (n={treated.n} vs {hold.n})"})
    return events


def sticky(choices: list[dict], group: str, state: GuardState, cfg: GuardConfig, default_id: str) -> tuple[list[dict], str | None]:
    """Keep the incumbent greedy unless the policy's candidate is better with confidence.

    Returns the (possibly re-weighted) choices and a note when the incumbent changed.
    """
    inc = state.incumbent.get(group, default_id)
    cand = greedy(choices)
    if cand == inc:
        return choices, None
    margin = -math.log1p(-cfg.min_improvement)
    inc_stats, cand_stats = state.config_stats(group, inc, default_id), state.config_stats(group, cand, default_id)
    if msprt_reject(inc_stats, cand_stats, margin, cfg.switch_alpha, cfg.tau2):
        state.incumbent[group] = cand
        return choices, f"{group}: {inc} -> {cand} ({100 * (1 - cand_stats.ratio_to(inc_stats)):.1f}% faster)"
    probs = {c["config"]: c["p"] for c in choices}
    p_cand, p_inc = probs[cand], probs.get(inc, 0.0)
    probs[inc], probs[cand] = p_cand, max(p_inc, cfg.explore_budget / 2, 1e-6)
    return _normalize(probs), None


def apply_guardrails(table: dict, state: GuardState, cfg: GuardConfig,
                     knobs: dict[str, dict] | None = None) -> tuple[dict, list[str]]:
    """A copy of a policy's table with every guardrail applied, and notes for the audit log.

    ``knobs`` (config id -> knob changes, e.g. of the whole space) supplies the configuration of an
    incumbent that stickiness keeps although the policy's table no longer lists it.
    """
    default_id = table["default"]
    forbidden = disallowed_configs(table, cfg.allowed) - {default_id}
    notes = [f"AllowedConfig removed {sorted(forbidden)}"] if forbidden else []
    groups = []
    for g in table["groups"]:
        drop = forbidden | set(state.blocked.get(g["id"], {}))
        choices = move_to_default(g["choices"], drop, default_id)
        choices, note = sticky(choices, g["id"], state, cfg, default_id)
        notes += [note] if note else []
        keep = state.incumbent.get(g["id"], default_id)
        groups.append({"id": g["id"], "choices": cap_exploration(choices, cfg.explore_budget, keep)})
    configs = dict(table["configs"])
    for cid in {c["config"] for g in groups for c in g["choices"]} - set(configs):
        configs[cid] = dict((knobs or {})[cid])
    out = dict(table, groups=groups, configs=configs, holdback=max(float(table.get("holdback", 0.0)), cfg.holdback))
    return out, notes
