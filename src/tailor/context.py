"""What a policy sees and returns per connection: Context, Decision, Outcome, PrefixHistory.

Kept apart from the policy package so that grouping, simulator and manager can use them without
importing every policy.
"""

from __future__ import annotations

from dataclasses import dataclass

from tailor.scenario.model import ClientInfo


@dataclass(frozen=True)
class PrefixHistory:
    """What telemetry has taught about a client /24 (Configanator App. C archive)."""

    goodput_mbps: float
    loss: float
    rtt_ms: float
    samples: int
    age_s: float  # seconds since the last telemetry of this prefix


@dataclass(frozen=True)
class Context:
    """Everything a policy may know when a connection arrives (features available at the handshake)."""

    time_s: float
    session: str
    client: ClientInfo
    website: str
    handshake_rtt_ms: float
    history: PrefixHistory | None  # None for a prefix the archive does not know yet
    load_index: int = 0  # page-load number within the session
    cell: int = -1  # true condition cell: ONLY oracle policies (optimal) may read it
    stale_cell: int = -1  # cell of the prefix archive's last view: ONLY oracle policies may read it


@dataclass(frozen=True)
class Decision:
    config: int  # index into the policy's ConfigSpace
    probability: float = 1.0  # probability with which this configuration was chosen (off-policy evaluation)
    group: str = "default"  # group / network class that produced it
    arm: str = "default"  # which arm / mechanism chose it (exploration, exploitation, holdback, ...)


@dataclass(frozen=True)
class Outcome:
    """Telemetry of one page load as the server sees it."""

    completion_ms: float
    goodput_mbps: float
    rtt_ms: float  # handshake RTT: the path's, whatever the configuration
    loss: float
    bytes: int
    # mean RTT over the response as the server's stack measures it (telemetry srtt_ms): the path RTT plus the queue
    # the configuration's own flights build, so it depends on the configuration; None where not reported
    srtt_ms: float | None = None
