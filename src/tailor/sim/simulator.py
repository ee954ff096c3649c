"""Trace-driven simulator (Configanator §6.1 / App. F.1): replays page loads in trace order through
one policy, with the simulator knobs of Configanator Table 4.

Everything random about the world is drawn once in :meth:`Simulator.prepare` (noise of each page
load, telemetry measurement error, handshake RTT jitter), so every policy faces the same sessions
and the same noise draws. Only the policy's own RNG differs between policies.
"""

from __future__ import annotations

import heapq
import time
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from tailor.errors import check
from tailor.grouping import PrefixArchive
from tailor.oracle import NOISE_SHAPE, Oracle, PLTTensor
from tailor.policies.base import Context, Decision, Outcome, Policy, PolicyEnv
from tailor.scenario import Scenario
from tailor.sim.guarded import MANAGER_DEFAULTS, GuardedTables, manager_guard_config
from tailor.space import AllowedConfig, ConfigSpace
from tailor.table import DecisionTable, decide

ARCHIVE_ALPHA = 0.3  # weight of the newest telemetry sample in the per-prefix archive


@dataclass(frozen=True)
class SimConfig:
    """Configanator Table 4 knobs (TargetAlgo is the policy itself; learner knobs go to policies)."""

    space: str = "core"  # named space of spec/knobs.json
    allowed: str = ""  # AllowedConfig, e.g. "NoBBR,NoHighICW"
    update_freq_s: float = 300.0  # UpdateFreq: period of plan() (model / class updates)
    update_latency_s: float = 0.0  # UpdateLatency: telemetry and tables reach the other side this late
    mode: str = "online"  # online: select() per connection; table: edges apply compiled decision tables
    seed: int = 0  # seed of the world's draws (noise, measurement error)
    # on: every table goes through the manager's guardrails (tailor.sim.guarded); implies mode "table"
    guardrails: str = "off"
    guard_holdback: float = MANAGER_DEFAULTS["holdback"]  # the guardrails' settings: a default manager's
    guard_explore_budget: float = MANAGER_DEFAULTS["explore_budget"]
    guard_min_improvement: float = MANAGER_DEFAULTS["min_improvement"]
    guard_rollback_alpha: float = MANAGER_DEFAULTS["rollback_alpha"]
    # off: no PLT noise, observed = mode (Configanator-NoVari, App. F.7); the draw still happens, so every
    # other draw of the world (measurement error, RTT jitter) is the same as with noise on
    noise: bool = True

    def __post_init__(self):
        check(self.update_freq_s > 0, "SimConfig", "update_freq_s", "> 0", self.update_freq_s)
        check(self.update_latency_s >= 0, "SimConfig", "update_latency_s", ">= 0", self.update_latency_s)
        check(self.mode in ("online", "table"), "SimConfig", "mode", "'online' or 'table'", self.mode)
        check(self.guardrails in ("on", "off"), "SimConfig", "guardrails", "'on' or 'off'", self.guardrails)
        check(isinstance(self.noise, bool), "SimConfig", "noise", "True or False", self.noise)
        if self.guardrails == "on":
            self.guard_config()  # GuardConfig checks the settings
            object.__setattr__(self, "mode", "table")  # guardrails act on the tables edges apply

    def guard_config(self):
        """The manager's GuardConfig for these settings (``tailor.manager.guardrails``)."""
        return manager_guard_config(self.allowed, self.guard_holdback, self.guard_explore_budget,
                                    self.guard_rollback_alpha, self.guard_min_improvement)

    def config_space(self) -> ConfigSpace:
        return ConfigSpace.named(self.space, AllowedConfig.parse(self.allowed))


@dataclass
class World:
    """The prepared, policy-independent part of a run: one row per page load, in time order."""

    time_s: np.ndarray
    session: np.ndarray  # index into sessions
    load_index: np.ndarray
    site: np.ndarray  # index into tensor.site_names
    cell: np.ndarray  # true condition cell
    stale_cell: np.ndarray  # cell of the archive's view at that moment (-1 = unknown prefix)
    bw_mbps: np.ndarray
    rtt_ms: np.ndarray
    loss: np.ndarray
    handshake_rtt_ms: np.ndarray
    cell_rtt_ms: np.ndarray  # RTT of the oracle's grid cell: srtt = handshake RTT + (oracle's srtt - this)
    noise: np.ndarray  # Erlang(k, 1) draw; observed = mode * (1 + theta * noise)
    goodput_est: np.ndarray  # telemetry's goodput estimate (Mbps)
    loss_est: np.ndarray
    histories: list  # PrefixHistory or None per page load
    sessions: tuple
    tensor: PLTTensor
    bytes: np.ndarray = field(default=None)  # total response bytes per website index
    mode_default: np.ndarray = field(default=None)
    mode_optimal: np.ndarray = field(default=None)
    theta: np.ndarray = field(default=None)
    done_s: np.ndarray = field(default=None)  # when each page load ends under the default configuration (observed)

    def __len__(self) -> int:
        return len(self.time_s)


def replay_histories(world: World, key, latency_s: float) -> list:
    """Each page load's archived history (:class:`PrefixArchive`, ``ARCHIVE_ALPHA``) from the telemetry of the earlier
    page loads with the same ``key(i)`` that arrived before it: a page load's telemetry (goodput and loss estimates,
    handshake RTT) arrives ``latency_s`` after the load ends, at ``world.done_s`` (its end under the default
    configuration: the archive is shared by every policy). The simulator keys it by the client's /24; a diagnosis may
    key it otherwise (``bench/tailor_views.py``: per client, per session).

    Until 2026-12-07 the telemetry arrived at the load's start (a page load's outcome was known before it had ended)
    and the archive held the true RTT of the scenario instead of the measured handshake RTT (found by review)."""
    archive, pending, out = PrefixArchive(ARCHIVE_ALPHA), [], []
    done = world.done_s if world.done_s is not None else world.time_s
    for i in range(len(world)):
        t = world.time_s[i]
        while pending and pending[0][0] <= t:
            _, _, k, ti, g, lo, r = heapq.heappop(pending)
            archive.update(k, ti, g, lo, r)
        k = key(i)
        out.append(archive.get(k, t))
        d = float(done[i])
        heapq.heappush(pending, (d + latency_s, i, k, d, world.goodput_est[i], world.loss_est[i],
                                 world.handshake_rtt_ms[i]))
    return out


class Simulator:
    """Prepares a world once, then runs any number of policies through it."""

    def __init__(self, scenario: Scenario, oracle: Oracle, config: SimConfig = SimConfig()):
        self.scenario, self.oracle, self.config = scenario, oracle, config
        self.space = config.config_space()
        self.world = self._prepare()

    # -- preparation: everything policy-independent
    def _prepare(self) -> World:
        rng = np.random.default_rng(self.config.seed)
        sessions = tuple(sorted(self.scenario.sessions, key=lambda s: (s.start_s, s.session_id)))
        rows = [(s.start_s + t, si, li, w) for si, s in enumerate(sessions) for li, (t, w) in enumerate(s.loads)]
        rows.sort(key=lambda r: (r[0], r[1], r[2]))
        tensor = PLTTensor(self.oracle, self.space)
        n = len(rows)
        t_abs = np.array([r[0] for r in rows])
        sess = np.array([r[1] for r in rows], dtype=int)
        conds = [sessions[r[1]].conditions for r in rows]
        bw, rtt, loss = (np.array(v) for v in zip(*(c.at(r[0] - sessions[r[1]].start_s) for c, r in zip(conds, rows))))
        buf = np.array([c.buffer_bdp for c in conds])
        grid = self.oracle.grid
        cell = grid.cells(bw, rtt, loss, buf)
        site = np.array([tensor.site_index[self.oracle.website(r[3]).name] for r in rows], dtype=int)
        world = World(
            time_s=t_abs, session=sess, load_index=np.array([r[2] for r in rows], dtype=int), site=site, cell=cell,
            stale_cell=np.full(n, -1), bw_mbps=bw, rtt_ms=rtt, loss=loss,
            handshake_rtt_ms=rtt * rng.uniform(1.0, 1.1, n), cell_rtt_ms=np.asarray(grid.values(cell)[1], dtype=float),
            noise=rng.gamma(NOISE_SHAPE, 1.0, n),
            goodput_est=bw * rng.uniform(0.7, 1.0, n), loss_est=loss * rng.uniform(0.5, 1.5, n),
            histories=[None] * n, sessions=sessions, tensor=tensor)
        if not self.config.noise:
            world.noise = np.zeros(n)
        world.bytes = np.array([self.oracle.website(n).total_bytes for n in tensor.site_names])
        self._fill_truth(world)  # the current cells: when each load ends, which its telemetry's arrival needs
        world.done_s = world.time_s + world.mode_default * (1.0 + world.theta * world.noise) / 1000.0
        self._replay_archive(world, buf)
        self._fill_truth(world)  # and the stale cells the archive gives
        return world

    def _replay_archive(self, world: World, buf: np.ndarray) -> None:
        """The per-prefix archive is policy-independent (telemetry estimates do not depend on the
        configuration), so each page load's history and stale cell are computed once."""
        world.histories = replay_histories(world, lambda i: world.sessions[world.session[i]].client.prefix,
                                           self.config.update_latency_s)
        grid = self.oracle.grid
        for i, h in enumerate(world.histories):
            if h is not None:
                world.stale_cell[i] = grid.cell(h.goodput_mbps, h.rtt_ms, h.loss, buf[i])

    def _fill_truth(self, world: World) -> None:
        pairs: dict[str, set] = {}
        for c, s in zip(np.concatenate([world.cell, world.stale_cell]), np.concatenate([world.site, world.site])):
            if c >= 0:
                pairs.setdefault(world.tensor.site_names[s], set()).add(int(c))
        world.tensor.prepare({k: np.array(sorted(v)) for k, v in pairs.items()})
        modes = [world.tensor.mode(int(c), int(s)) for c, s in zip(world.cell, world.site)]
        world.mode_default = np.array([m[self.space.default_index] for m in modes])
        world.mode_optimal = np.array([m.min() for m in modes])
        world.theta = np.array([world.tensor.theta(int(c), int(s)) for c, s in zip(world.cell, world.site)])

    # -- running one policy
    def run(self, policy: Policy, progress=None, on_table=None) -> RunResult:
        """One policy through the world; ``on_table(time_s, table)`` sees each table queued for the edges."""
        world, cfg = self.world, self.config
        archive = PrefixArchive(ARCHIVE_ALPHA)
        env = PolicyEnv(websites=tuple(world.tensor.site_names), archive=archive, update_period_s=cfg.update_freq_s,
                        oracle=world.tensor if policy.needs_oracle else None,
                        hindsight=(world.cell, world.site) if policy.needs_oracle else None)
        policy.reset(self.space, env)
        loop = _Loop(self, policy, archive, on_table)
        started = time.perf_counter()
        for i in range(len(world)):
            loop.step(i)
            if progress is not None and i % 500 == 0:
                progress(i)
        loop.flush()
        wall = time.perf_counter() - started
        end = float(world.time_s[-1]) if len(world) else 0.0
        final_table = policy.plan(end)
        guard = loop.guard
        if guard is not None:
            final_table, _ = guard.plan(final_table, end)
        return RunResult(policy.name, policy.hyper_parameters(), loop.records(), wall, final_table, policy.violations,
                         guard.notes if guard else [], len(guard.rollbacks) if guard else 0)


@dataclass
class RunResult:
    policy: str
    params: dict
    records: dict  # column name -> np.ndarray, one row per page load
    wall_s: float
    final_table: dict
    violations: int
    guard_notes: list[str] = field(default_factory=list)  # --guardrails on: the guardrails' notes, "t=<s>s <note>"
    guard_rollbacks: int = 0  # --guardrails on: rollback events (check_rollbacks)


class _Loop:
    """The per-connection loop of one run, kept small and allocation-light for speed."""

    def __init__(self, sim: Simulator, policy: Policy, archive: PrefixArchive, on_table=None):
        self.sim, self.policy, self.archive, self.on_table = sim, policy, archive, on_table
        w = sim.world
        n = len(w)
        self.config = np.zeros(n, dtype=int)
        self.prob = np.ones(n)
        self.group = [""] * n
        self.arm = [""] * n
        self.mode = np.zeros(n)
        self.srtt_ms = np.zeros(n)
        self.pending: list = []  # heap of (arrival, page load, ...): outcomes arrive when their page loads end
        self.next_plan = sim.config.update_freq_s
        self.resolver = None
        self.table_queue: deque = deque()
        # table mode: per-connection 64-bit draws, used by tables without a cohort salt (spec/decision.md)
        self.draws = np.random.default_rng(sim.config.seed + 7919).integers(0, 2**64, n, dtype=np.uint64)
        self.table_mode = sim.config.mode == "table"
        self.guard = GuardedTables.of(sim.config, sim.space) if sim.config.guardrails == "on" else None
        self.table_group = None  # group of the table for the last decision (held back: the one it would give)
        self.minority = np.zeros(n, dtype=bool)  # table mode: drawn another choice than its group's most probable

    def step(self, i: int) -> None:
        w, sim = self.sim.world, self.sim
        t = float(w.time_s[i])
        while self.next_plan <= t:
            self._deliver(self.next_plan)
            self._plan(self.next_plan)
            self.next_plan += sim.config.update_freq_s
        self._deliver(t)
        s = w.sessions[w.session[i]]
        site_name = w.tensor.site_names[w.site[i]]
        ctx = Context(t, s.session_id, s.client, site_name, float(w.handshake_rtt_ms[i]), w.histories[i],
                      int(w.load_index[i]), int(w.cell[i]), int(w.stale_cell[i]))
        d = self._decide(ctx, i)
        mode = w.tensor.mode(int(w.cell[i]), int(w.site[i]))[d.config]
        observed = mode * (1.0 + w.theta[i] * w.noise[i])
        out = Outcome(observed, float(w.goodput_est[i]), float(w.handshake_rtt_ms[i]), float(w.loss_est[i]),
                      int(w.bytes[w.site[i]]), self.srtt(i, d.config))
        self.config[i], self.prob[i], self.group[i], self.arm[i], self.mode[i] = d.config, d.probability, d.group, d.arm, mode
        self.srtt_ms[i] = out.srtt_ms
        # the outcome is known when the page load ends (until 2026-12-07 at its start; found by review)
        heapq.heappush(self.pending, (t + observed / 1000.0 + sim.config.update_latency_s, i, ctx, d, out,
                                      self.table_group))

    def srtt(self, i: int, config: int) -> float:
        """The RTT the server measures for page load ``i`` under ``config``: its handshake RTT plus the queueing
        delay the oracle gives the configuration in the load's cell (common to every policy, like the noise)."""
        w = self.sim.world
        return float(w.handshake_rtt_ms[i] + w.tensor.srtt(int(w.cell[i]), int(w.site[i]))[config] - w.cell_rtt_ms[i])

    def _decide(self, ctx: Context, i: int) -> Decision:
        if not self.table_mode:
            return self.policy.select(ctx)
        while self.table_queue and self.table_queue[0][0] <= ctx.time_s:
            self.resolver = DecisionTable(self.table_queue.popleft()[1], validated=True)  # compile_table validated it
        group = self.policy.group_of(ctx)  # outcomes feed the learner state of the context's own group
        if self.resolver is None:
            self.table_group = None
            return Decision(self.policy.space.default_index, 1.0, group, "default")
        a = decide(self.resolver, ctx.client.client_id, ctx.website, ctx.client.device, int(self.draws[i]))
        self.table_group = a.group
        # a draw of a group's minority choice is the table's exploration (the degradation breakdown's cause)
        self.minority[i] = not a.holdback and a.group is not None and a.config != self.resolver.main_choice(a.group)
        return Decision(self.policy.space.index_of(a.config), a.p, group, "holdback" if a.holdback else "table")

    def _deliver(self, t: float) -> None:
        pol, arch = self.policy, self.archive
        while self.pending and self.pending[0][0] <= t:
            _, i, ctx, d, out, table_group = heapq.heappop(self.pending)
            arch.update(ctx.client.prefix, ctx.time_s + out.completion_ms / 1000.0, out.goodput_mbps, out.loss,
                        out.rtt_ms)
            if self.guard is not None:  # the manager's feeder: guardrail statistics, then the policy
                self.guard.observe(table_group, d.config, out.completion_ms, d.arm == "holdback")
            pol.observe(ctx, d, out)

    def _plan(self, now: float) -> None:
        table = self.policy.plan(now, compile=self.table_mode)
        if table is None:
            return
        if self.guard is not None:
            table, _ = self.guard.plan(table, now)
        if self.on_table is not None:
            self.on_table(now, table)
        self.table_queue.append((now + self.sim.config.update_latency_s, table))

    def flush(self) -> None:
        self._deliver(float("inf"))

    def records(self) -> dict:
        w = self.sim.world
        observed = self.mode * (1.0 + w.theta * w.noise)
        default_obs = w.mode_default * (1.0 + w.theta * w.noise)
        return {"time_s": w.time_s, "session": w.session, "load_index": w.load_index, "site": w.site,
                "cell": w.cell, "config": self.config, "probability": self.prob, "group": np.array(self.group),
                "arm": np.array(self.arm), "mode_ms": self.mode, "plt_ms": observed, "default_ms": default_obs,
                "mode_default_ms": w.mode_default, "mode_optimal_ms": w.mode_optimal,
                "stale_cell": w.stale_cell, "stale_optimal": self._stale_optimal(), "srtt_ms": self.srtt_ms,
                "srtt_default_ms": np.array([self.srtt(i, self.sim.space.default_index) for i in range(len(w))]),
                "table_minority": self.minority}

    def _stale_optimal(self) -> np.ndarray:
        """Whether the chosen configuration is optimal for the archive's (stale) view but not for the
        true condition: the 'stale class' cause of degradation (Configanator App. F.8)."""
        w = self.sim.world
        out = np.zeros(len(w), dtype=bool)
        for i in np.flatnonzero(w.stale_cell >= 0):
            if w.stale_cell[i] != w.cell[i]:
                out[i] = int(np.argmin(w.tensor.mode(int(w.stale_cell[i]), int(w.site[i])))) == self.config[i]
        return out
