"""ConnReuse (Configanator §6.5): the default configuration, except that a request which reuses an
earlier connection of the same client inherits that connection's matured congestion window.

Only what a server knows is used: the previous page load of the same client address (its time and its
telemetry: delivery rate and RTT). The inherited window is estimated as the previous connection's
delivery rate × RTT in segments (a matured window carries about one bandwidth-delay product), applied as
the initial window: the largest IW of the space not above that estimate, other knobs at their defaults.
Reuse needs the previous connection to be alive (``keepalive_s``, nginx's default keepalive_timeout is
75 s) and happens with probability ``reuse_probability`` (0.27 in Configanator's GlobalCDN trace, where
slow_start_after_idle and closed connections prevented the rest).
"""

from __future__ import annotations

from tailor.errors import check
from tailor.policies.base import Context, Decision, Outcome, Policy, register

MSS_BYTES = 1448


@register("connreuse")
class ConnReusePolicy(Policy):
    parameters = {
        "reuse_probability": (0.27, lambda v: isinstance(v, float) and 0.0 <= v <= 1.0, "in [0, 1]"),
        "keepalive_s": (75.0, lambda v: isinstance(v, float) and v > 0, "> 0"),
    }

    def _init_state(self) -> None:
        self._last: dict[str, tuple[float, float]] = {}  # client -> (time, estimated cwnd in segments)
        iw = "tcp.initial_cwnd"
        check(iw in self.space.grid, "ConnReusePolicy", "space", "a space with tcp.initial_cwnd", self.space.name)
        default = self.space.configs[self.space.default_index]
        same = {k: v for k, v in default.items() if k != iw}
        self._by_iw = sorted((c[iw], i) for i, c in enumerate(self.space.configs)
                             if all(c[k] == v for k, v in same.items()))

    def _select(self, ctx: Context) -> Decision:
        last = self._last.get(ctx.client.client_id)
        if last is None or ctx.time_s - last[0] > self.keepalive_s:
            return Decision(self.space.default_index, 1.0, "fresh", "default")
        if self._rng.random() >= self.reuse_probability:
            return Decision(self.space.default_index, 1.0 - self.reuse_probability, "fresh", "default")
        fitting = [i for iw, i in self._by_iw if iw <= last[1]]
        config = fitting[-1] if fitting else self._by_iw[0][1]
        return Decision(config, self.reuse_probability, "reused", "reuse")

    def _observe(self, ctx: Context, decision: Decision, outcome: Outcome) -> None:
        cwnd = outcome.goodput_mbps * 1e6 / 8 * outcome.rtt_ms / 1e3 / MSS_BYTES
        self._last[ctx.client.client_id] = (ctx.time_s, cwnd)

    def group_of(self, ctx: Context) -> str:
        return "reused" if ctx.client.client_id in self._last else "fresh"
