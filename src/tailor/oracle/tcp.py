"""Per-connection TCP latency model, vectorized over conditions (rows) and configurations (columns).

Every function takes numpy arrays that broadcast to (cells, configs): path quantities are (C, 1),
configuration quantities (1, K). Units: time ms, sizes in segments of MSS bytes, rates in segments/ms.
Formulas and their references are in ``MODEL.md`` (sections "Connection" and "Loss"); no function looks
at which configuration is best, each one states a mechanism.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MSS = 1448  # bytes per segment (1500 MTU, IPv4, TCP timestamps)
CLIENT_SYN_TIMEOUT_MS = 1000.0  # Linux TCP_TIMEOUT_INIT: the client's first SYN retransmission
CLIENT_RTO_MIN_MS = 200.0  # an untuned client (Linux TCP_RTO_MIN)
BBR_STARTUP_GAIN = 2.885  # 2/ln 2: BBR's startup pacing gain
TLS_FLIGHT_SEGMENTS = 3  # server's TLS 1.3 flight (certificate chain ~4 KB)
RTO_MAX_MS = 120000.0
CUBIC_BETA = 0.7  # CUBIC's multiplicative decrease (RFC 8312): the window after a loss is 0.7 W_max
CUBIC_FRIENDLY = 3 * (1 - CUBIC_BETA) / (1 + CUBIC_BETA)  # its Reno-friendly growth, segments per round (RFC 8312)
# The one fitted constant: the recovery round of a loss-based slow start that overflows BDP + buffer, in RTTs (0..1).
# Chosen by `tailor oracle calibrate` (leave-one-condition-out over tb-v3's 12 conditions; MODEL.md section 6a).
OVERSHOOT_RECOVERY_RTT = 0.75


@dataclass(frozen=True)
class Stack:
    """Configuration columns (1, K) that the model reads; other knobs have no modelled effect."""

    bbr: np.ndarray  # bool
    reno: np.ndarray  # bool (cubic when neither)
    iw: np.ndarray  # initial window, segments
    rto_min: np.ndarray  # ms
    syn_rto: np.ndarray  # ms
    sndbuf: np.ndarray  # bytes, 0 = autotuning (no cap)

    def take(self, mask: np.ndarray) -> Stack:
        """The columns selected by a boolean mask over configurations."""
        return Stack(*(a[:, mask] for a in (self.bbr, self.reno, self.iw, self.rto_min, self.syn_rto, self.sndbuf)))


@dataclass(frozen=True)
class Share:
    """What one connection gets of a path shared by ``n`` connections (arrays broadcast to (C, K)).

    ``rate`` is its share of the bottleneck (segments/ms, already capped by the send buffer), ``rtt`` and
    ``p`` the path's, ``pipe`` = rate * rtt its share of the BDP, ``room`` its equal share of BDP + buffer
    (what absorbs a simultaneous burst), ``q`` the buffer in BDPs. ``flight``: what absorbs the connection's
    first flight when it differs from ``room``: for a connection alone on the path, the buffer and the packet in
    service (a flight that leaves at line rate finds the pipe empty; ``burst_loss_ms``, MODEL.md section 2).
    """

    rate: np.ndarray
    rtt: np.ndarray
    p: np.ndarray
    pipe: np.ndarray
    room: np.ndarray
    q: np.ndarray
    flight: np.ndarray | None = None


def rto_ms(rtt, rto_min):
    """Linux RTO: srtt + rttvar with rttvar floored at rto_min (tcp_set_rto); rttvar ~ rtt early on."""
    return np.minimum(rtt + np.maximum(rto_min, rtt), RTO_MAX_MS)


def timeout_ms(rto, p):
    """Expected duration of a timeout sequence with exponential backoff (PFTK / Cardwell: T0 f(p)/(1-p))."""
    f = 1 + p + 2 * p**2 + 4 * p**3 + 8 * p**4 + 16 * p**5 + 32 * p**6
    return rto * f / (1 - p)


def timeout_probability(w, p):
    """PFTK Q(w): probability that a loss in a window of w segments is detected by timeout, not 3 dupacks."""
    p = np.maximum(p, 1e-12)
    w = np.maximum(w, 1.0)
    a = -np.expm1(3 * np.log1p(-p))  # 1 - (1-p)^3
    b = np.exp(3 * np.log1p(-p)) * -np.expm1((w - 3) * np.log1p(-p))  # (1-p)^3 (1 - (1-p)^(w-3))
    return np.minimum(1.0, a * (1 + b) / -np.expm1(w * np.log1p(-p)))


def loss_prob(n, p):
    """Probability that at least one of n segments is lost: 1 - (1-p)^n."""
    return -np.expm1(n * np.log1p(-p))


def cc_window(p, rtt, reno):
    """Average congestion window under random loss p (segments); inf at p = 0.

    Reno: sqrt(3/(2p)) (Mathis/PFTK, b = 1: Linux counts acked segments). CUBIC: RFC 8312 section 5,
    max of the cubic average (C(3+beta)/(4(1-beta)))^(1/4) rtt_s^(3/4) / p^(3/4) and the Reno-friendly one.
    """
    p = np.maximum(p, 1e-12)
    w_reno = np.sqrt(1.5 / p)
    c, beta = 0.4, 0.7
    w_cubic = (c * (3 + beta) / (4 * (1 - beta))) ** 0.25 * (rtt / 1000.0) ** 0.75 / p**0.75
    return np.where(reno, w_reno, np.maximum(w_cubic, w_reno))


def loss_timeout_ms(rto, p):
    """PFTK's expected timeout cost of one loss in congestion avoidance: RTO min(1, 3 sqrt(3p/8)) (1 + 32 p^2)."""
    return rto * np.minimum(1.0, 3 * np.sqrt(3 * p / 8)) * (1 + 32 * p**2)


def cc_rate(p, rtt, rto, reno):
    """Loss-based steady-state rate (segments/ms): PFTK's denominator with the CC's average window."""
    w = cc_window(p, rtt, reno)
    return 1.0 / (rtt / w + p * loss_timeout_ms(rto, p))


def handshake_ms(rtt, p, stack: Stack):
    """TCP (1 RTT) + TLS 1.3 (1 RTT) and the expected cost of losing their packets.

    A lost SYN waits for the client's 1 s timer; a lost SYN-ACK waits for the server's syn_rto (or the
    client's SYN retransmit at 1 s, whichever is first); a lost ClientHello costs a client RTO; a loss in
    the server's TLS flight (3 segments, too few for 3 dupacks) costs a server timeout.
    """
    syn = p * CLIENT_SYN_TIMEOUT_MS + p * (1 - p) * np.minimum(stack.syn_rto, CLIENT_SYN_TIMEOUT_MS)
    hello = p * timeout_ms(rto_ms(rtt, CLIENT_RTO_MIN_MS), p)
    flight = loss_prob(TLS_FLIGHT_SEGMENTS, p) * timeout_ms(rto_ms(rtt, stack.rto_min), p)
    return 2 * rtt + syn + hello + flight


def window_limited_ms(d, w0, rate, rtt, whole: bool = False):
    """Lossless time from request to last byte: RTT + d/rate + idle gaps of window-limited rounds.

    The window doubles per round (slow start, ACK per segment: measured [4, 8, 16, 32] on this machine)
    from w0 until it covers the pipe rate*rtt; each round before that leaves the pipe idle for
    rtt - w_i/rate. Rounds are continuous (expected over header/size jitter), so time is smooth; ``whole``
    (the page timeline, MODEL.md section 3a): whole rounds of whole segments, ceil(log2(ceil(d) / w0 + 1)) rounds
    and at most ceil(log2(pipe / w0)) idle ones, so an 11-segment response costs IW 10 one more round.
    """
    if whole:
        rounds = np.ceil(np.log2(np.ceil(d - 1e-6) / w0 + 1.0) - 1e-9)
        to_pipe = np.ceil(np.log2(np.maximum(rate * rtt / w0, 1.0)) - 1e-9)
    else:
        rounds = np.log2(d / w0 + 1.0)  # rounds needed if the window never reached the pipe
        to_pipe = np.log2(np.maximum(rate * rtt / w0, 1.0))  # rounds before the window covers the pipe
    gaps = np.maximum(np.minimum(rounds - 1.0, to_pipe), 0.0)
    sent_in_gaps = np.minimum(w0 * (np.exp2(gaps) - 1.0), d)
    return rtt + d / rate + gaps * rtt - sent_in_gaps / rate


HYSTART_ACK_DELTA_MS = 2.0  # Linux tcp_cubic hystart_ack_delta_us: ACKs further apart than this break the train
HYSTART_LOW_WINDOW = 16.0  # Linux tcp_cubic hystart_low_window: HyStart acts only from this window up


def hystart_exit(w0, sh: Share, stack: Stack):
    """CUBIC's HyStart ACK-train exit (Linux tcp_cubic.c, MODEL.md section 2): (window at the exit, probability
    that slow start leaves there, before it overflows BDP + buffer; 0 for Reno and BBR).

    A round's ACKs arrive at the bottleneck's pace; HyStart leaves slow start once they have kept coming, each
    within 2 ms of the last, for half the minimum RTT: in the first round after the first flight (whose ACKs fall in
    a round opened during the handshake, long before them) whose window W is at least pipe / 2, after pipe / 2 ACKs,
    at cwnd W + pipe / 2. Over the phase of the doubling, W averages pipe / (2 ln 2) (or is 2 w0 when the first
    flight already is larger).
    The train holds when an ACK every segment (1 / rate) or every other segment (2 / rate) comes within 2 ms:
    log-linear from 0 at rate = 0.5 to 1 at rate = 1 segment/ms (5.8 to 11.6 Mbit/s). The exit leaves no loss
    where W + pipe / 2 is within BDP + buffer, over the same phase: log2((cap - pipe / 2) / max(2 w0, pipe / 2)),
    clipped to [0, 1]. The delay-based exit (RTT up by clamp(rtt / 8, 4, 16) ms) comes a round after the queue
    builds, past the overflow point at buffers up to about one BDP, and is not modelled.
    """
    pipe = sh.pipe
    cap = np.maximum(pipe * (1 + sh.q), 1.0)
    w0 = np.maximum(np.asarray(w0, dtype=float), 1.0)
    low = np.maximum(HYSTART_LOW_WINDOW - pipe / 2, 0.0)
    first = np.maximum(np.maximum(2 * w0, pipe / 2), low)
    w_exit = np.maximum(np.maximum(2 * w0, pipe / (2 * np.log(2))) + pipe / 2, HYSTART_LOW_WINDOW)
    train = np.clip(np.log2(np.maximum(HYSTART_ACK_DELTA_MS * sh.rate, 1e-12)), 0.0, 1.0)
    fits = np.clip(np.log2(np.maximum(cap - pipe / 2, 1e-12) / first), 0.0, 1.0)
    cubic = ~(np.asarray(stack.bbr, dtype=bool) | np.asarray(stack.reno, dtype=bool))
    return w_exit, np.where(cubic, train * fits, 0.0)


TAILS = ("sack", "probe")  # how a lost first-flight tail is found when no later segment reveals it (MODEL.md 6f)


def lone_tail_ms(lost, rtt, srtt, rto_min, rto: bool = True):
    """What a lost tail that no later segment reveals adds to a response (MODEL.md 3a, 6f): a tail-loss probe after
    2 srtt repairs one segment (rtt + 2 srtt); ``rto``: a tail of several waits for the retransmission timeout as
    well (srtt + max(RTO min, srtt)), then a slow start from one segment, log2(1 + lost) rounds."""
    tlp = rtt + 2 * srtt
    out = np.minimum(lost, 1.0) * tlp
    if rto:
        late = rto_ms(srtt, rto_min) + np.log2(1.0 + lost) * rtt
        out = out + np.clip(lost - 1.0, 0.0, 1.0) * np.maximum(late - tlp, 0.0)
    return out


def burst_loss_ms(d, w0, sh: Share, stack: Stack, tails: str = "sack"):
    """Initial burst larger than what absorbs it (``sh.flight``, else ``sh.room``): the excess, the flight's
    tail, is dropped (MODEL.md section 2).

    BBR paces its first window over rtt/2.89, so the bottleneck drains pipe/2.89 of it meanwhile. The lost tail is
    found when the next round's first segments are SACKed (RACK) and resent then: it reaches the client 3 RTT
    after the request (the request's half, the flight's round, the next round's, the resend's half) plus its own
    transmission, lost / rate. The cost is what that adds to the lossless time of the response
    (``window_limited_ms``): nothing where the link is still busy with the rest of the response then (the
    testbed's kernel counters: IW 64, first flight 45 segments, into 20- to 37-packet queues retransmits 10-26
    segments; at 1.6 Mbit/s it is still faster than IW 32, at 13 Mbit/s 1.15x slower).

    ``tails="probe"`` (MODEL.md 6f; the model oracle's default since v7): for a connection alone on the path (``sh.flight`` set), a
    response wholly inside its first flight has no later segment to reveal its lost tail, which waits for the
    tail-loss probe and, beyond one segment, the RTO (``lone_tail_ms``, srtt with the full buffer: rtt (1 + q)), as
    the page timeline charges it; a level's several connections keep v6's cost (their flights leave spread), and
    ``model.load_ms`` keeps a page's levels on ``sack`` (tb-v3-shallow: its document does not pay the probe). Measured on the
    kernel (``tailor testbed shared-link --lone``): a 54-segment response at IW 64 into a one-BDP queue (10 Mbit/s,
    60 ms), 3 segments lost, takes 543 ms; ``sack`` gives 181, ``probe`` 441.
    """
    if tails not in TAILS:
        raise ValueError(f"The 'tails' parameter of burst_loss_ms must be one of {TAILS}. Got {tails!r}.")
    bbr = stack.bbr
    burst = np.minimum(w0, d)
    room = (sh.room if sh.flight is None else sh.flight) + np.where(bbr, sh.pipe / BBR_STARTUP_GAIN, 0.0)
    lost = np.maximum(burst - room, 0.0)
    if not np.any(lost > 0):  # most cells: the flight fits, and the lossless time need not be computed
        return np.zeros(np.broadcast_shapes(np.shape(lost), np.shape(sh.rtt)))
    goodput = sh.rate * (1 - sh.p)
    late = np.maximum(3 * sh.rtt + lost / goodput - window_limited_ms(d, w0, goodput, sh.rtt), 0.0)
    if tails == "probe" and sh.flight is not None:  # alone on the path; wholly inside its flight: no later segment
        late = np.where(d <= burst + 1.0, lone_tail_ms(lost, sh.rtt, sh.rtt * (1 + sh.q), stack.rto_min), late)
    return np.where(lost > 0, late, 0.0)


def overshoot_ms(before, d, iw, sh: Share, stack: Stack, recovery=None):
    """Slow start that outgrows BDP + buffer loses a window tail; the pipe idles if the buffer < 1 BDP.

    Charged per level on each connection: the ramp (one window past the point where a window grown from
    ``iw`` reaches the cap, over the connection's delivered segments ``before + d``) times the level's
    share of a window, d / cap (a connection already at the cap overflows again when it sends another
    window: the loss-based sawtooth). Loss-based: the recovery round, ``OVERSHOOT_RECOVERY_RTT`` RTTs (calibrated,
    MODEL.md 6a), or the idle pipe rtt * (1 - q) during it when the buffer is under one BDP, whichever is more;
    at most one RTT, what a random loss that ends slow start costs instead (so time stays monotone in loss).
    Not charged when a random loss ended slow start first (probability 1 - (1-p)^segments; that loss is charged
    by ``transfer_ms`` and costs at least one RTT), nor when CUBIC's HyStart left slow start first (the probability
    of ``hystart_exit`` from ``iw``). BBR startup queues ~1.9 BDP whatever the random loss; with a buffer under ~1.5
    BDP it loses packets too but keeps its rate, so it pays half as much, scaled by (1.5 - q)/1.5.
    """
    cap = np.maximum(sh.pipe * (1 + sh.q), 1.0)
    to_cap = np.maximum(cap - iw, 0.0)
    crossed = np.clip((before + d - to_cap) / cap, 0.0, 1.0) * np.minimum(d / cap, 1.0)
    survive = 1.0 - loss_prob(np.minimum(to_cap + cap, before + d), sh.p)
    recovery = OVERSHOOT_RECOVERY_RTT if recovery is None else recovery  # the page timeline fits its own
    loss_based = np.maximum(np.maximum(1.0 - sh.q, 0.0), recovery) * survive * (1.0 - hystart_exit(iw, sh, stack)[1])
    bbr_cost = 0.5 * np.clip((1.5 - sh.q) / 1.5, 0.0, 1.0)
    return crossed * sh.rtt * np.where(stack.bbr, bbr_cost, loss_based)


def pacing_ms(d, w0, sh: Share, bbr):
    """BBR paces a flight at 2.89 x window / rtt (its initial rate cwnd/srtt x 2/ln 2; later its delivery rate).

    The final flight of ``last`` segments with a window of max(w0, last) takes rtt/2.89 x last / window (measured:
    iw32 paced over 24 ms); what exceeds the bottleneck's own time last/rate is the cost. A small response on a
    warm connection (d much smaller than its window) is paced at the window's rate, so it costs little.
    """
    last = np.minimum(np.minimum(d, np.maximum(w0, (d + w0) / 2)), sh.pipe)
    spread = sh.rtt / BBR_STARTUP_GAIN * last / np.maximum(w0, last)
    return np.where(bbr, np.maximum(spread - last / sh.rate, 0.0), 0.0)


CA_EPOCHS = 8  # loss epochs followed one by one after slow start; the rest at the steady state (beta^8 <= 0.06)
CUBIC_C = 0.4  # RFC 8312's C, segments / s^3


def ca_transient_ms(rest, w_loss, sh: Share, stack: Stack, goodput):
    """Time of the ``rest`` segments a loss-based flow sends after a loss at window ``w_loss`` (MODEL.md section 2).

    Epochs of 1/p segments between random losses: each starts at beta x the window the last loss met (CUBIC 0.7,
    Reno 0.5) and grows per round by Reno's one segment, CUBIC's Reno-friendly 3(1-beta)/(1+beta) or its cubic
    curve's initial slope 3 C K^2 (K = cbrt(W_max (1-beta)/C), RFC 8312), CUBIC at most back to W_max. An epoch
    takes its rounds or its segments at the bottleneck's rate, whichever is longer. After ``CA_EPOCHS`` epochs the
    window has decayed to its average and the rest goes at min(rate, W / rtt), W the CC's average window under
    random loss (``cc_window``), the fixed point of the same recursion. Timeouts are charged by ``transfer_ms``.
    """
    cap = np.maximum(sh.pipe * (1 + sh.q), 1.0)
    shape = np.broadcast_shapes(np.shape(rest), np.shape(w_loss), np.shape(goodput), np.shape(stack.reno),
                                np.shape(cap), np.shape(sh.rtt), np.shape(sh.p))
    flat = lambda a: np.broadcast_to(np.asarray(a, dtype=float), shape).ravel().copy()  # noqa: E731
    left, p, rtt, rate, cap = flat(rest), flat(sh.p), flat(sh.rtt), flat(goodput), flat(cap)
    reno = flat(stack.reno) > 0
    w_max = np.minimum(flat(w_loss), cap)
    t = np.zeros(left.size)
    live = np.flatnonzero(left > 0)  # the epochs run only where segments are left (most responses end in one)
    for _ in range(CA_EPOCHS):
        if live.size == 0:
            break
        r, wm, c, pl = reno[live], w_max[live], cap[live], p[live]
        beta = np.where(r, 0.5, CUBIC_BETA)
        friendly = np.where(r, 1.0, CUBIC_FRIENDLY)
        w = np.maximum(beta * wm, 1.0)
        cubic_slope = 3 * CUBIC_C * np.cbrt(wm * (1 - CUBIC_BETA) / CUBIC_C) ** 2 * rtt[live] / 1000.0
        a = np.where(r, friendly, np.maximum(friendly, cubic_slope))
        m = np.minimum(1.0 / np.maximum(pl, 1e-12), left[live])
        rounds = (np.sqrt(w**2 + 2 * a * m) - w) / a  # w r + a r^2 / 2 = m
        grown = w + a * rounds
        w_max[live] = np.minimum(np.where(r, grown, np.minimum(grown, np.maximum(wm, w + friendly * rounds))), c)
        t[live] += np.maximum(m / rate[live], rounds * rtt[live])
        left[live] -= m
        live = live[left[live] > 0]
    steady = np.minimum(rate, cc_window(p, rtt, reno) / rtt)
    return (t + np.maximum(left, 0.0) / steady).reshape(shape)


def transfer_ms(d, w0, sh: Share, stack: Stack, w_ss=None, whole: bool = False, burst: bool = True,
                tails: str = "sack"):
    """Request to last byte of d segments on an open connection whose window is w0 (Cardwell-style).

    Loss-based CC: slow start ends at the first of Cardwell's expected first random loss and the overflow of
    BDP + buffer (cap - w0 segments, detected a window of cap segments later; charged by ``overshoot_ms``, its
    recovery absorbs the random losses of that window). The first random loss costs a fast retransmit (1 RTT) or
    a timeout (PFTK Q at the slow-start window ``w_ss``, default w0); later ones may time out at PFTK's per-loss
    cost. The rest goes through the loss epochs that follow (``ca_transient_ms``: the window decays from beta x
    the window slow start ended with towards the CC's average window, not at once to it). CUBIC: with the
    probability of ``hystart_exit``, slow start ends at its exit window without a loss if the expected first random
    loss comes later, and the window is kept until that loss. BBR does not cut
    its rate on random loss: it delivers rate * (1 - p), pays the same first-loss recovery, and later losses that
    no SACK reveals cost a tail-loss probe (2 RTT, RFC 8985) with probability Q(cwnd). ``whole``: slow start in
    whole rounds (``window_limited_ms``); ``burst`` False: no first-flight loss from the connection's own share of
    the path (the page timeline charges first flights against the buffer they share, ``tailor.oracle.timeline``);
    ``tails``: how a lost first-flight tail is found (``burst_loss_ms``).
    """
    p, rtt = sh.p, sh.rtt
    w_ss = np.minimum(w0 if w_ss is None else w_ss, d)  # in flight: no more than the response
    rto = rto_ms(rtt, stack.rto_min)
    goodput = sh.rate * (1 - p)
    pp = np.maximum(p, 1e-12)  # Cardwell's E[d_ss] -> d as p -> 0
    first_loss_at = np.minimum(d, loss_prob(d, pp) * (1 - pp) / pp + 1)
    cap = np.maximum(sh.pipe * (1 + sh.q), 1.0)
    d_overflow = np.maximum(cap - w0, 0.0) + cap  # the window overflows BDP + buffer; its recovery absorbs random losses
    d_ss = np.where(stack.bbr, d, np.minimum(first_loss_at, d_overflow))
    q_first = timeout_probability((first_loss_at + w_ss) / 2, p)
    first = loss_prob(d, p) * (q_first * timeout_ms(rto, p) + (1 - q_first) * rtt)
    q_later = timeout_probability(np.minimum(np.maximum(w_ss, 2 * sh.pipe + 4), d), p)  # BBR cwnd: 2 BDP + quanta
    later = np.where(stack.bbr, np.maximum(d * p - 1, 0) * q_later * 2 * rtt, 0.0)
    # losses after the first cut the window (``ca_transient_ms``); each may time out (PFTK's expected cost, the
    # ``cc_rate``'s term): expected count d p - P(any), wherever slow start ended, so time stays monotone
    later_timeouts = np.maximum(d * p - loss_prob(d, p), 0.0) * loss_timeout_ms(rto, p)
    ca = np.where(stack.bbr, 0.0, ca_transient_ms(d - d_ss, np.minimum(w0 + d_ss, 2 * cap), sh, stack, goodput)
                  + later_timeouts)
    lossless = window_limited_ms(d_ss, w0, goodput, rtt, whole)
    w_exit, hs = hystart_exit(w0, sh, stack)
    if np.any(hs > 0):  # CUBIC's HyStart: slow start may end at w_exit with no loss, the window kept (MODEL.md 2)
        d_exit = np.maximum(w_exit - w0, 0.0)
        d_hs = np.minimum(first_loss_at, d_exit)
        # the exit keeps its window: the segments up to the first random loss go at w_exit (growing at CUBIC's
        # Reno-friendly slope; the cubic curve starts flat), then the loss epochs from the window it met
        kept = np.clip(np.minimum(first_loss_at, d) - d_exit, 0.0, None)
        rounds = (np.sqrt(w_exit**2 + 2 * CUBIC_FRIENDLY * kept) - w_exit) / CUBIC_FRIENDLY
        t_kept = np.maximum(kept / goodput, rounds * rtt)
        w_met = np.where(kept > 0, np.minimum(w_exit + CUBIC_FRIENDLY * rounds, 2 * cap), np.minimum(w0 + d_hs, 2 * cap))
        ca_hs = t_kept + ca_transient_ms(d - d_hs - kept, w_met, sh, stack, goodput) + later_timeouts
        lossless_hs = window_limited_ms(d_hs, w0, goodput, rtt, whole)
        ca = ca + hs * (ca_hs - ca)
        lossless = lossless + hs * (lossless_hs - lossless)
    extra = (burst_loss_ms(d, w0, sh, stack, tails) if burst else 0.0) + pacing_ms(d, w0, sh, stack.bbr)
    return lossless + first + later + ca + extra


def warm_window(w0, delivered, sh: Share, stack: Stack):
    """Window at the start of a later response on the same connection (no idle restart: gaps < RTO).

    Slow start grows the window by one segment per acked segment. A response starts with a burst of the
    whole window, so the window kept is capped at what the path absorbs (this connection's share of
    BDP + buffer: larger windows were cut by the burst or overshoot losses already charged) and, for
    loss-based CC, at its average window under random loss.
    """
    loss_based = np.minimum(np.minimum(sh.pipe * (1 + sh.q), sh.room), cc_window(sh.p, sh.rtt, stack.reno))
    cap = np.where(stack.bbr, np.minimum(2 * sh.pipe, sh.room + sh.pipe / BBR_STARTUP_GAIN), loss_based)
    return np.minimum(w0 + delivered, np.maximum(cap, 1.0))


def mean_rtt_ms(d, w0, sh: Share, bbr):
    """Mean of the RTT samples a response of d segments gives the server: the path RTT plus the queue its own
    flights build at the bottleneck (MODEL.md "RTT the server measures").

    Rounds of slow start from w0. The first flight leaves at line rate, so its j-th segment waits behind the j
    before it: mean queue (F0 - 1) / 2. Later slow-start rounds are ACK-clocked, two segments per ACK at the
    bottleneck's pace: the queue ramps to half the flight (mean F/4), plus half the standing queue W - pipe
    once the window exceeds the pipe. BBR paces at 2.89 x its delivery-rate estimate (the first flight over
    rtt / 2.89): mean queue F (1 - rate / pace)+ / 2; it holds about no queue once its window reaches 2 BDP. A loss-based window that reaches the overflow
    point pipe (1 + q) saws between 0.7 W_max and W_max: the queue averages the middle of that range. The
    queue never exceeds the connection's share of the buffer (segments beyond it are dropped; their cost is
    charged by ``burst_loss_ms`` and ``overshoot_ms``). Loss-recovery delays are not RTT samples (Karn).
    """
    shape = np.broadcast_shapes(np.shape(d), np.shape(w0), np.shape(sh.rate), np.shape(sh.pipe), np.shape(sh.q),
                                np.shape(bbr))
    d = np.broadcast_to(np.asarray(d, dtype=float), shape)
    w = np.broadcast_to(np.maximum(np.asarray(w0, dtype=float), 1.0), shape).copy()
    pipe = np.broadcast_to(np.asarray(sh.pipe, dtype=float), shape)
    rate = np.broadcast_to(np.asarray(sh.rate, dtype=float), shape)
    bbr = np.broadcast_to(np.asarray(bbr, dtype=bool), shape)
    buf = np.broadcast_to(np.asarray(sh.q * sh.pipe, dtype=float), shape)
    cap = np.maximum(pipe * (1 + np.asarray(sh.q, dtype=float)), 1.0)
    q_sawtooth = (buf + np.maximum(CUBIC_BETA * cap - pipe, 0.0)) / 2
    sh_rtt = np.broadcast_to(np.asarray(sh.rtt, dtype=float), shape)
    left, area, prev = d.copy(), np.zeros(shape), np.zeros(shape)
    for k in range(64):
        if not (left > 0).any():
            break
        flight = np.minimum(w, left)
        steady = np.zeros(shape, dtype=bool) if k == 0 else np.where(bbr, w >= 2 * pipe, w >= cap)
        q_loss = (flight - 1) / 2 if k == 0 else flight / 4 + np.maximum(w - pipe, 0.0) / 2
        # BBR paces at 2.89 x its delivery-rate estimate: the first flight over rtt / 2.89 (cwnd / srtt), later
        # ones at 2.89 x the last round's delivery (at most the bottleneck); the queue grows while pacing outruns
        # the bottleneck: at most F (1 - rate / pace), half that on average
        pace = BBR_STARTUP_GAIN * (flight / sh_rtt if k == 0 else np.minimum(prev / sh_rtt, rate))
        q_bbr = flight * np.maximum(1.0 - rate / np.maximum(pace, 1e-12), 0.0) / 2
        q = np.where(steady, np.where(bbr, 0.0, q_sawtooth), np.where(bbr, q_bbr, q_loss))
        sent = np.where(steady, left, flight)  # at the steady window the rest of the response sees one queue
        area += sent * np.clip(q, 0.0, buf)
        left = left - sent
        prev = flight
        w = np.where(bbr, np.minimum(2 * w, np.maximum(2 * pipe, 1.0)), np.minimum(2 * w, cap))
    return sh.rtt + area / np.maximum(d, 1e-9) / rate


def slow_start_end_probability(d, w0, sh: Share):
    """Probability that a loss-based response of d segments ends still in slow start (SmartIW Table I's state):
    no random loss among its segments, and its window still below the point where it overflows BDP + buffer
    (reaching that point costs a loss, which ends slow start). HyStart's exits (``hystart_exit``) are not counted:
    the share of a loss-based CC without HyStart (Reno), an upper bound on CUBIC's."""
    cap = np.maximum(sh.pipe * (1 + sh.q), 1.0)
    w0 = np.maximum(np.asarray(w0, dtype=float), 1.0)
    rounds_below = np.ceil(np.log2(np.maximum(cap / w0, 1.0)))  # rounds whose window is still below the cap
    sent_below = w0 * (np.exp2(rounds_below) - 1.0)
    return np.where(d <= sent_below, 1.0 - loss_prob(d, sh.p), 0.0)
