"""SmartIW (Nie et al., "Reducing Web Latency through Dynamically Setting TCP Initial Window with
Reinforcement Learning"): discounted UCB per user group over a sliding window of initial windows,
plus the paper's static baselines TCP-10 and TCP-200. Design notes and sources: docs/smartiw.md.

* ``smartiw``: bottom-up user groups (tailor.grouping.smartiw_groups, §IV-B), one bandit per group.
* ``smartiw-nogroup``: "SmartIW without grouping" (§VII-A item 4): one bandit for all flows.
* ``tcp-10`` / ``tcp-200``: a static IW for every flow (§VII-A items 1-2).

Only the initial window is learned; every other knob stays at its default, so the policies work in
any space whose grid has ``tcp.initial_cwnd``.
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from tailor.errors import ParameterError, check, param_error
from tailor.grouping.smartiw_groups import Grouping, GroupingData, Requirement, build_groups
from tailor.policies.base import Context, Decision, Outcome, Policy, register
from tailor.space import ConfigSpace, Configuration

IW = "tcp.initial_cwnd"
MAX_SLIDES = 1000  # learning iterations caught up in one plan (a window crosses a ladder in far fewer)
_FLOAT01 = (lambda v: isinstance(v, float) and 0.0 < v < 1.0, "a float in (0, 1)")
_POS = (lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0, "a number > 0")
_POS_INT = (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 1, "an integer >= 1")


def iw_ladder(space: ConfigSpace, owner: str) -> list[tuple[int, int]]:
    """(IW, config index) of every allowed IW with all other knobs at their defaults, ascending."""
    check(IW in space.grid, owner, "space", f"a space whose grid has {IW!r}", space.name)
    ladder = []
    for iw in sorted(space.grid[IW]):
        index = iw_index(space, iw)
        if index is not None:
            ladder.append((iw, index))
    return ladder


def iw_index(space: ConfigSpace, iw: int) -> int | None:
    """Index of the default configuration with initial window ``iw``, or None if not allowed."""
    try:
        return space.index_of(Configuration({IW: iw}, space.registry))
    except ParameterError:
        return None


def snap_arms(values: list[int], wanted: tuple[int, ...]) -> list[int]:
    """Ladder positions nearest (in log scale) to the paper's initial IWs, distinct, topped up with
    the next larger (then smaller) positions when the ladder is coarser than the paper's list."""
    chosen: list[int] = []
    for w in wanted:
        pos = int(np.argmin([abs(math.log(v / w)) for v in values]))
        if pos not in chosen:
            chosen.append(pos)
    want = min(len(wanted), len(values))
    extra = [p for p in range(max(chosen) + 1, len(values))] + [p for p in range(min(chosen) - 1, -1, -1)]
    return sorted(chosen + extra[: want - len(chosen)])


class DiscountedUCB:
    """Discounted UCB (§IV-A, Alg. 1, Eq. 1-3) over a mutable list of arms.

    Discounting is applied by ``decay(f)`` (all discounted counts and sums times f), so the caller
    decides what one step of γ is. Rewards must lie in [0, ``bound``] (B of Eq. 3).
    """

    def __init__(self, arms: list[int], xi: float, bound: float = 1.0):
        self.xi, self.bound = xi, bound
        self.n = {a: 0.0 for a in arms}  # N_t(γ, i)
        self.s = {a: 0.0 for a in arms}  # Σ γ^{t-s} X_s(i)

    @property
    def arms(self) -> list[int]:
        return sorted(self.n)

    def decay(self, factor: float) -> None:
        for a in self.n:
            self.n[a] *= factor
            self.s[a] *= factor

    def update(self, arm: int, reward: float) -> None:
        self.n[arm] += 1.0
        self.s[arm] += reward

    def mean(self, arm: int) -> float:
        return self.s[arm] / self.n[arm] if self.n[arm] > 0 else 0.0

    def padding(self, arm: int, scale: float = 1.0) -> float:
        """c_t(γ, i) of Eq. 3; ``scale`` applies a pending decay without mutating the state.
        log n_t is floored at 1 so that a long-idle group (all counts decayed below 1) still explores."""
        n_arm = self.n[arm] * scale
        if n_arm <= 1e-12:  # everything decayed away (a group idle for days): as good as untried
            return math.inf
        n_total = max(sum(self.n.values()) * scale, math.e)
        return 2 * self.bound * math.sqrt(self.xi * math.log(n_total) / n_arm)

    def choose(self, scale: float = 1.0) -> tuple[int, bool]:
        """(arm, explored): an untried arm first (Alg. 1 line 1), else argmax X̄ + c (line 2)."""
        for a in self.arms:
            if self.n[a] <= 0:
                return a, True
        score = {a: self.mean(a) + self.padding(a, scale) for a in self.arms}
        arm = max(self.arms, key=lambda a: (score[a], -a))
        greedy = max(self.arms, key=lambda a: (self.mean(a), -a))
        return arm, arm != greedy

    def best(self) -> int | None:
        """The arm with the largest reward *and* the smallest padding (the most exploited), or None
        when no single arm is both (§IV-A, arms definition): only then is the window worth sliding."""
        if any(v <= 0 for v in self.n.values()):
            return None
        top = max(self.arms, key=lambda a: (self.mean(a), -a))
        most = max(self.arms, key=lambda a: (self.n[a], -a))
        return top if top == most else None

    def replace(self, old: int, new: int) -> None:
        del self.n[old], self.s[old]
        self.n[new], self.s[new] = 0.0, 0.0


class GroupLearner:
    """One user group's bandit: Eq. 4 reward normalisation, time-based discount, sliding window.

    ``scale='current'`` (the default since 2026-12-07): every arm's mean reward is scored against the group's
    current history maximum goodput and minimum RTT (Eq. 4's Goodput_max and RTT_min carry no flow index), from
    discounted sums of each arm's goodput and inverse RTT; the reward is linear in both, so this is Eq. 2's mean
    with one normalisation for all flows. ``'flow'``: each flow's reward normalised by the maximum and minimum up to
    that flow and kept (the reading until 2026-12-07): the maximum rises as larger windows are tried, so older arms
    keep rewards divided by a smaller maximum and are ranked above newer, larger ones (found by review)."""

    def __init__(self, arms: list[int], xi: float, scale: str = "current"):
        self.ucb = DiscountedUCB(arms, xi)
        self.t: float | None = None
        self.g_max, self.rtt_min = 0.0, math.inf
        self.reward_scale = scale
        self.sg = {a: 0.0 for a in arms}  # Σ γ^{t-s} goodput_s(i)
        self.sr = {a: 0.0 for a in arms}  # Σ γ^{t-s} 1 / RTT_s(i)

    def __setstate__(self, state: dict) -> None:
        # a learner pickled before ``scale``: what it was learned with (per-flow rewards, no sums kept)
        self.__dict__.update({"reward_scale": "flow", "sg": {}, "sr": {}, **state})

    def scale(self, t: float, gamma: float, period: float) -> float:
        """Discount factor γ^((t - t_last)/period): γ per learning iteration, in wall-clock time."""
        return 1.0 if self.t is None or t <= self.t else gamma ** ((t - self.t) / period)

    def observe(self, t: float, arm: int, goodput: float, rtt: float, alpha: float, gamma: float, period: float):
        f = self.scale(t, gamma, period)
        self.ucb.decay(f)
        self.t = t if self.t is None else max(self.t, t)
        self.g_max, self.rtt_min = max(self.g_max, goodput), min(self.rtt_min, rtt)
        if self.reward_scale == "flow":
            reward = alpha * goodput / max(self.g_max, 1e-12) + (1 - alpha) * self.rtt_min / max(rtt, 1e-9)
            self.ucb.update(arm, reward)
            return
        for a in self.sg:
            self.sg[a] *= f
            self.sr[a] *= f
        self.sg[arm] += goodput
        self.sr[arm] += 1.0 / max(rtt, 1e-9)
        self.ucb.update(arm, 0.0)  # the count; the sums are scored below
        g, r = max(self.g_max, 1e-12), self.rtt_min
        for a in self.sg:
            self.ucb.s[a] = alpha * self.sg[a] / g + (1 - alpha) * r * self.sr[a]

    def slide(self, step_up, step_down) -> None:
        """Sliding decision space (§IV-A, Fig. 4): best = largest arm -> add one above, drop the
        smallest; best = smallest arm -> add one below, drop the largest; else keep the list."""
        best, arms = self.ucb.best(), self.ucb.arms
        if best is None or len(arms) < 2:
            return
        if best == arms[-1]:
            new = step_up(best)
            if new is not None and new not in arms:
                self._replace(arms[0], new)
        elif best == arms[0]:
            new = step_down(best)
            if new is not None and new not in arms:
                self._replace(arms[-1], new)

    def _replace(self, old: int, new: int) -> None:
        self.ucb.replace(old, new)
        self.sg.pop(old, None)
        self.sr.pop(old, None)
        if self.reward_scale != "flow":
            self.sg[new], self.sr[new] = 0.0, 0.0


@register("smartiw")
class SmartIWPolicy(Policy):
    """Group-based discounted UCB over a sliding window of initial windows (SmartIW §IV)."""

    grouping = True
    parameters = {
        "alpha": (0.8, lambda v: isinstance(v, float) and 0.0 <= v <= 1.0, "a float in [0, 1]"),
        "xi": (0.1, *_POS),
        "gamma": (0.898, *_FLOAT01),
        "delta": (1, *_POS_INT),
        "initial_arms": ((5, 10, 15, 20), lambda v: isinstance(v, tuple) and len(v) >= 2
                         and all(isinstance(x, int) and x >= 1 for x in v), "a tuple of >= 2 integers >= 1"),
        "iteration_s": (600.0, *_POS),
        "s_min": (100, *_POS_INT),
        "theta": (0.1, *_POS),
        "bin_s": (600.0, *_POS),
        "coverage": (1.0, lambda v: isinstance(v, float) and 0.0 < v <= 1.0, "a float in (0, 1]"),
        "warmup_s": (1800.0, *_POS),
        "regroup_s": (86400.0, *_POS),
        "reward_scale": ("current", lambda v: v in ("current", "flow"), "'current' or 'flow'"),
    }

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update({"reward_scale": "flow", **state})  # pickled before ``reward_scale``: as learned

    def _init_state(self) -> None:
        self._ladder = iw_ladder(self.space, type(self).__name__)
        values = [iw for iw, _ in self._ladder]
        self._start = snap_arms(values, self.initial_arms) if values else []
        self._learners: dict[str, GroupLearner] = {}
        self._grouping = Grouping.root_only()
        self._data = GroupingData(self.bin_s)
        self._requirement = Requirement(self.s_min, self.theta, self.alpha, self.coverage)
        self._next_iteration, self._next_regroup = self.iteration_s, self.warmup_s
        self._now = 0.0

    # -- per connection
    def _group(self, ctx: Context) -> str | None:
        if ctx.history is None or not self._ladder:
            return None
        c = ctx.client
        return self._grouping.lookup(c.prefix, c.asn, c.region)

    def _learner(self, gid: str) -> GroupLearner:
        if gid not in self._learners:
            self._learners[gid] = GroupLearner(list(self._start), self.xi, self.reward_scale)
        return self._learners[gid]

    def _select(self, ctx: Context) -> Decision:
        gid = self._group(ctx)
        if gid is None:  # unknown prefix, or the root's Others failed the RL requirement: standard IW
            return Decision(self.space.default_index, 1.0, "unknown" if ctx.history is None else "standard", "default")
        learner = self._learner(gid)
        pos, explored = learner.ucb.choose(learner.scale(ctx.time_s, self.gamma, self.iteration_s))
        return Decision(self._ladder[pos][1], 1.0, gid, "explore" if explored else "exploit")

    def _observe(self, ctx: Context, decision: Decision, outcome: Outcome) -> None:
        c = ctx.client
        if self.grouping:
            self._data.add(c.prefix, c.asn, c.region, ctx.time_s, outcome.goodput_mbps, outcome.rtt_ms)
        learner = self._learners.get(decision.group)
        if learner is None:
            return
        pos = next((p for p, (_, idx) in enumerate(self._ladder) if idx == decision.config), None)
        if pos is None or pos not in learner.ucb.n:  # the arm slid out of the window meanwhile
            return
        learner.observe(ctx.time_s, pos, server_goodput(outcome), server_rtt(outcome), self.alpha, self.gamma,
                        self.iteration_s)

    # -- slow loop: one learning iteration every iteration_s, regrouping every regroup_s
    def _plan(self, now: float) -> None:
        self._now = now
        if now >= self._next_iteration:
            # live (the manager), time is the wall clock: the first plan comes ~3e6 iterations after 0, a restart may
            # come days after the last one; catch up at most MAX_SLIDES iterations and step the iteration clock in one
            # go (the simulator plans every update period, a few iterations at most: it never reaches the cap)
            steps = int((now - self._next_iteration) // self.iteration_s) + 1
            for _ in range(min(steps, MAX_SLIDES)):
                for learner in self._learners.values():
                    learner.slide(self._step_up, self._step_down)
            self._next_iteration += steps * self.iteration_s
        if self.grouping and now >= self._next_regroup:
            self._regroup(now)
            self._next_regroup = now + self.regroup_s

    def _step_up(self, pos: int) -> int | None:
        """Ladder position of the smallest allowed IW >= IW + Δ (Δ in segments, as in the paper)."""
        target = self._ladder[pos][0] + self.delta
        return next((p for p, (iw, _) in enumerate(self._ladder) if iw >= target), None)

    def _step_down(self, pos: int) -> int | None:
        target = self._ladder[pos][0] - self.delta
        return next((p for p in range(len(self._ladder) - 1, -1, -1) if self._ladder[p][0] <= target), None)

    def _regroup(self, now: float) -> None:
        """Rebuild the user groups from the complete bins of the last ``regroup_s`` seconds."""
        end = int(now // self.bin_s)
        first = max(0, int((now - self.regroup_s) // self.bin_s))
        series = self._data.window(first, end)
        self._grouping = build_groups(series, self._data.meta, self._requirement, self._requirement.jitter_of)
        live = set(self._grouping.members)
        self._learners = {g: learner for g, learner in self._learners.items() if g in live}
        self._data.prune(first)

    # -- decision tables (the IW Table of §V-A): one IW per group, longest-prefix rules per subnet
    def table_groups(self):
        out = {"default": {self.space.default_index: 1.0}}
        for gid in self._live_groups():
            learner = self._learner(gid)
            pos, _ = learner.ucb.choose(learner.scale(self._now, self.gamma, self.iteration_s))
            out[gid] = {self._ladder[pos][1]: 1.0}
        return out

    def table_rules(self):
        rules = []
        for prefix, (region, asn) in sorted(self._data.meta.items()):
            gid = self._grouping.lookup(prefix, asn, region)
            if gid is not None and self._ladder:
                rules.append({"prefix": prefix, "group": gid})
        return rules

    def _live_groups(self) -> list[str]:
        if not self._ladder:
            return []
        groups = set(self._grouping.members) | ({"all"} if self._grouping.root else set())
        return sorted(groups)

    def groups_report(self) -> dict:
        """Group id -> (members, J at grouping time, current arm IWs) for the report and docs."""
        return {g: {"members": self._grouping.members.get(g, ["*"]), "jitter": self._grouping.jitters.get(g),
                    "arms": [self._ladder[p][0] for p in self._learners[g].ucb.arms] if g in self._learners else []}
                for g in self._live_groups()}


@register("smartiw-nogroup")
class SmartIWNoGroupPolicy(SmartIWPolicy):
    """SmartIW without grouping (§VII-A item 4): "it only uses RL to learn the IW for all the flows"."""

    grouping = False


def server_rtt(outcome: Outcome) -> float:
    """The flow's RTT as the server measures it (Table III), which the IW changes through the queue its first
    flights build (``Outcome.srtt_ms``); the handshake RTT where telemetry has no srtt."""
    return outcome.rtt_ms if outcome.srtt_ms is None else outcome.srtt_ms


def server_goodput(outcome: Outcome) -> float:
    """Goodput as the server measures it (Table III: Size / TCP response time), in Mbit/s.

    Depends on the configuration through the completion time, unlike the telemetry's path estimate
    ``outcome.goodput_mbps``. Without a size (bytes = 0) it degrades to 1 / completion time, which
    still ranks arms correctly inside one group because Eq. 4 normalises by the group's maximum.
    """
    size_bits = 8.0 * outcome.bytes if outcome.bytes > 0 else 1e3
    return size_bits / max(outcome.completion_ms, 1e-6) / 1e3


class StaticIWPolicy(Policy):
    """One static initial window for every flow of a known prefix (the paper's TCP-N baselines).

    If the space does not allow that IW (with the other knobs at default), the default configuration
    is applied and a warning in house style says why; ``strict=True`` makes that an error instead.
    """

    parameters = {"iw": (10, lambda v: isinstance(v, int) and 1 <= v <= 256, "an integer in [1, 256]"),
                  "strict": (False, lambda v: isinstance(v, bool), "a boolean")}

    def _init_state(self) -> None:
        ladder = iw_ladder(self.space, type(self).__name__)
        self._index = iw_index(self.space, self.iw)
        if self._index is None:
            err = param_error(type(self).__name__, "iw", f"an initial window allowed in space {self.space.name!r} "
                              f"({[iw for iw, _ in ladder]}, other knobs at default)", self.iw)
            if self.strict:
                raise err
            warnings.warn(f"{err} Falling back to the default configuration.", stacklevel=2)
            self._index = self.space.default_index

    def _select(self, ctx: Context) -> Decision:
        if ctx.history is None:
            return Decision(self.space.default_index, 1.0, "unknown", "default")
        return Decision(self._index, 1.0, f"iw{self.iw}", "static")

    def table_groups(self):
        return {"default": {self.space.default_index: 1.0}, f"iw{self.iw}": {self._index: 1.0}}

    def table_rules(self):
        return [{"prefix": "0.0.0.0/0", "group": f"iw{self.iw}"}, {"prefix": "::/0", "group": f"iw{self.iw}"}]


@register("tcp-10")
class TCP10Policy(StaticIWPolicy):
    """TCP-10 (§VII-A item 1): IW 10 for all flows, the RFC 6928 default."""


@register("tcp-200")
class TCP200Policy(StaticIWPolicy):
    """TCP-200 (§VII-A item 2): an aggressive IW 200 for all flows."""

    parameters = {**StaticIWPolicy.parameters,
                  "iw": (200, lambda v: isinstance(v, int) and 1 <= v <= 256, "an integer in [1, 256]")}
