"""Per-prefix history of goodput, loss and RTT built from telemetry (Configanator App. C).

When a client connects, the handshake gives its RTT; goodput and loss cannot be measured yet, so
they come from this archive of the prefix's recent connections. A prefix the archive has never
seen has no history (policies then apply the default configuration).
"""

from __future__ import annotations

from dataclasses import dataclass

from tailor.context import PrefixHistory


@dataclass
class _Entry:
    goodput_mbps: float
    loss: float
    rtt_ms: float
    samples: int
    last_s: float


class PrefixArchive:
    """Exponentially weighted per-prefix averages; ``alpha`` weighs the newest sample."""

    def __init__(self, alpha: float = 0.3, max_prefixes: int = 1_000_000):
        self.alpha = alpha
        self.max_prefixes = max_prefixes
        self._entries: dict[str, _Entry] = {}
        self.dropped = 0  # updates refused because the archive is full

    def update(self, prefix: str, time_s: float, goodput_mbps: float, loss: float, rtt_ms: float) -> None:
        e = self._entries.get(prefix)
        if e is None:
            if len(self._entries) >= self.max_prefixes:
                self.dropped += 1
                return
            self._entries[prefix] = _Entry(goodput_mbps, loss, rtt_ms, 1, time_s)
            return
        a = self.alpha
        e.goodput_mbps += a * (goodput_mbps - e.goodput_mbps)
        e.loss += a * (loss - e.loss)
        e.rtt_ms += a * (rtt_ms - e.rtt_ms)
        e.samples += 1
        e.last_s = max(e.last_s, time_s)  # telemetry may arrive out of time order (page loads end out of order)

    def get(self, prefix: str, now_s: float) -> PrefixHistory | None:
        e = self._entries.get(prefix)
        if e is None:
            return None
        return PrefixHistory(e.goodput_mbps, e.loss, e.rtt_ms, e.samples, now_s - e.last_s)

    def items(self, now_s: float):
        """(prefix, PrefixHistory) for every prefix in the archive."""
        for prefix in self._entries:
            yield prefix, self.get(prefix, now_s)

    def __len__(self) -> int:
        return len(self._entries)
