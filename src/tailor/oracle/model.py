"""ModelOracle: page-load and completion times from a TCP latency model (no testbed needed).

A page loads level by level (discovery depth is the critical path). Within a level, every origin's
objects go over HTTP/1.1 (up to 6 connections per origin, one response at a time per connection) or
HTTP/2 (one connection per origin, all of the level's responses multiplexed as one flow). Connections of
a level share the bottleneck; each connection's time comes from ``tailor.oracle.tcp``. Assumptions,
references and calibration: ``tailor/oracle/MODEL.md``.

>>> from tailor.space import ConfigSpace
>>> oracle = ModelOracle()
>>> space = ConfigSpace.named("core")
>>> cell = oracle.grid.cell(bw=5, rtt=100, loss=0.0, buffer_bdp=1)
>>> t = oracle.mode_ms([cell], "object-100KB", space)
>>> t.shape, bool(t.min() > 0)
((1, 60), True)
"""

from __future__ import annotations

from collections import defaultdict
from functools import partial

import numpy as np

from tailor.errors import OracleError
from tailor.oracle import tcp
from tailor.oracle.base import NOISE_SHAPE, ConditionGrid, Oracle, Website
from tailor.oracle.websites import default_catalog, search_catalog
from tailor.space import ConfigSpace

VERSION = "model-tcp-v7"  # v6 + an object's or response's lone lost tail found by the tail-loss probe (MODEL.md 6f)
V6 = "model-tcp-v6"  # the same with ``tails="sack"``: what the README's figures dated before 2026-12-02 ran on
PAGE_MODELS = ("levels", "timeline")  # ModelOracle(pages=...): v2's discovery levels or the page timeline
# The model oracle's named variants (``--oracle NAME``): ModelOracle's arguments for each, ``tails`` explicit
# (``measured._model_ms`` defaults to v6's, the measured oracle's shape). ``model-tailprobe`` is ``model`` since v7.
VARIANTS = {"model": {"tails": "probe"}, "model-v6": {"tails": "sack"},
            "model-timeline": {"pages": "timeline", "tails": "probe"}, "model-tailprobe": {"tails": "probe"}}
H1_CONNECTIONS_PER_ORIGIN = 6  # Chromium's per-host limit for HTTP/1.1
CLIENT_RWND_SEGMENTS = 45.0  # the client's first advertised window, 64 KB (Linux/Windows); autotuned later
RESPONSE_HEADER_BYTES = 400  # HTTP response headers added to every body
BUFFER_FLOOR_SEGMENTS = 8.0  # even tiny-BDP links buffer a few packets (assumption, MODEL.md "Buffer")
CLIENT_BASE_MS = 150.0  # browser floor: parse, style, layout (MODEL.md "Client processing")
CLIENT_PER_OBJECT_MS = 3.5  # 150 + 31 * 3.5 = 258 ms: the unshaped Chromium floor was 237-290 ms

# Bandwidth 0.05 .. 500 Mbit/s: 2G (0.05-0.2), 3G/FB-ATC (0.3-2), workshop grid (0.3, 1, 5), FCC+ rows
# (3.5 .. 500), LTE (10-50), cable/fiber (100-500). RTT 5 .. 1600 ms: fiber/cable (5-30), LTE (50-100),
# 3G (150-300), workshop delays (50-500 one way -> 100-1000 RTT), GEO (600-750), 2G (1300-1600).
DEFAULT_GRID = ConditionGrid(
    bw_mbps=(0.05, 0.1, 0.2, 0.3, 0.5, 1.0, 2.0, 3.5, 5.0, 10.0, 25.0, 50.0, 100.0, 200.0, 500.0),
    rtt_ms=(5.0, 10.0, 20.0, 30.0, 50.0, 75.0, 100.0, 150.0, 250.0, 400.0, 600.0, 800.0, 1000.0, 1600.0),
    loss=(0.0, 0.001, 0.003, 0.01, 0.02, 0.035, 0.05, 0.08),
    buffer_bdp=(0.5, 1.0, 4.0),
)

NOT_MODELLED = ("tcp.rto_max_ms (backoff never reaches 120 s here)", "tcp.delack_max_ms", "tcp.max_pacing_rate_bps",
                "tcp.notsent_lowat_bytes", "tcp.nodelay", "tcp.slow_start_after_idle (gaps < RTO)",
                "tcp.autocorking", "tcp.timestamps", "http2.* settings", "quic.*")
MODELLED = ("tcp.congestion_control", "tcp.initial_cwnd", "http.version", "tcp.rto_min_ms", "tcp.syn_rto_ms",
            "tcp.sndbuf_bytes", "tcp.cwnd_clamp")
# Knobs the model has no mechanism for and that may matter: a space giving them any value but the default is
# refused (OracleError) rather than answered as if they had no effect. MODEL.md section 5.
REFUSED = {
    "tcp.rcvbuf_bytes": "the server's receive buffer bounds client uploads; the model has no upload or request "
                        "body, and a tiny buffer's effect on request arrival is not modelled",
    "http.alt_svc": "the model has no HTTP/3: every page load goes over TCP whatever is advertised",
}


def knob_status(name: str) -> str:
    """How the model oracle treats a knob: modelled, refused (non-default values), or no effect."""
    return "modelled" if name in MODELLED else "refused" if name in REFUSED else "no-effect"


def check_modelled(space: ConfigSpace, oracle: str) -> None:
    """OracleError naming the first knob of ``space`` that ``oracle`` refuses (a non-default value)."""
    for name, why in REFUSED.items():
        if name in space.grid and any(v != space.registry[name].default for v in space.grid[name]):
            raise OracleError(f"{oracle} does not model {name} ({why}); space {space.name!r} sets it to "
                              f"{[v for v in space.grid[name]]}: use a space without it")


class ModelOracle(Oracle):
    """Noise-free times from mechanics (handshake, slow start, loss recovery, CC response, HTTP layout)."""

    name = VERSION
    kind = "model"

    def __init__(self, grid: ConditionGrid = DEFAULT_GRID, websites: dict[str, Website] | None = None,
                 pages: str = "levels", tails: str = "probe"):
        """``pages``: ``levels`` (v2's discovery levels, the default) or ``timeline`` (``tailor.oracle.timeline``:
        per-object discovery, Chromium's connection pool, HTTP/2 multiplexing, first flights sharing the buffer,
        whole slow-start rounds; MODEL.md section 3a). Objects are the same in both. ``tails``: ``probe`` (v7, the
        default): an object or response alone on its path, wholly inside its first flight, that loses the flight's
        tail waits for the tail-loss probe and the RTO (``tcp.burst_loss_ms``; MODEL.md 6f); pages keep ``sack``
        (``load_ms``; the timeline has its own rule); ``sack``: v6, such a tail found a round later."""
        if pages not in PAGE_MODELS:
            raise OracleError(f"The 'pages' parameter of ModelOracle must be one of {PAGE_MODELS}. Got {pages!r}.")
        if tails not in tcp.TAILS:
            raise OracleError(f"The 'tails' parameter of ModelOracle must be one of {tcp.TAILS}. Got {tails!r}.")
        self.grid, self.pages, self.tails = grid, pages, tails
        self.name = (VERSION if tails == "probe" else V6) + ("+timeline" if pages == "timeline" else "")
        self.websites = dict({**default_catalog(), **search_catalog()} if websites is None else websites)

    def mode_ms(self, cells, website: str, space: ConfigSpace) -> np.ndarray:
        if self.pages == "timeline":
            from tailor.oracle.timeline import load_ms as timeline_ms

            return self._per_http(partial(timeline_ms, tails=self.tails), cells, website, space)
        return self._per_http(partial(load_ms, tails=self.tails), cells, website, space)

    def srtt_ms(self, cells, website: str, space: ConfigSpace) -> np.ndarray:
        """Mean RTT the server measures over the workload's responses (queueing its own flights build)."""
        return self._per_http(mean_rtt_ms, cells, website, space)

    def _per_http(self, fn, cells, website: str, space: ConfigSpace) -> np.ndarray:
        """``fn(site, bw, rtt, loss, q, stack, h2)`` over the space's HTTP/1.1 and HTTP/2 columns."""
        site = self.website(website)
        bw, rtt, loss, q = self._path(cells)
        stack, h2 = _stack(space)
        out = np.empty((len(bw), len(space)))
        for is_h2 in (False, True):
            cols = h2 == is_h2
            if cols.any():
                out[:, cols] = fn(site, bw, rtt, loss, q, stack.take(cols), is_h2)
        return out

    def noise_theta(self, cells, website: str) -> np.ndarray:
        bw, rtt, loss, _ = self._path(cells)
        return noise_theta(bw[:, 0], rtt[:, 0], loss[:, 0], self.website(website).n_origins)

    def describe(self) -> dict:
        g = self.grid
        return {
            "name": self.name, "kind": self.kind, "version": VERSION, "pages": self.pages, "tails": self.tails,
            "basis": "Cardwell-Savage-Anderson latency model (handshake, slow start, first loss by fast "
                     "retransmit or PFTK timeout) + steady state by CC response (Reno: PFTK; CUBIC: RFC 8312 "
                     "sec. 5; BBR: rate x (1-p)); HTTP/1.1 6 conns/origin serial, HTTP/2 1 conn/origin "
                     "multiplexed; levels sequential; fair share of the bottleneck; see tailor/oracle/MODEL.md",
            "grid": {"bw_mbps": g.bw_mbps, "rtt_ms": g.rtt_ms, "loss": g.loss, "buffer_bdp": g.buffer_bdp,
                     "n_cells": g.n_cells},
            "noise": f"observed = mode * (1 + X), X ~ Erlang(k={NOISE_SHAPE}, theta(cell, n_origins))",
            "modelled_knobs": list(MODELLED),
            "not_modelled": list(NOT_MODELLED),
            "refused_knobs": dict(REFUSED),
            "websites": sorted(self.websites),
        }

    def _path(self, cells):
        cells = np.asarray(cells, dtype=int).ravel()
        if cells.size and (cells.min() < 0 or cells.max() >= self.grid.n_cells):
            raise OracleError(f"cell indices must be in [0, {self.grid.n_cells}); got {cells.min()}..{cells.max()}")
        return tuple(v[:, None].astype(float) for v in self.grid.values(cells))


def _stack(space: ConfigSpace) -> tuple[tcp.Stack, np.ndarray]:
    """Configuration columns; rejects values and knobs the model cannot interpret."""
    check_modelled(space, VERSION)

    def col(knob):
        return np.array([c[knob] for c in space.configs])
    cc = col("tcp.congestion_control")
    unknown = set(cc) - {"cubic", "bbr", "reno"}
    if unknown or not set(col("http.version")) <= {"1.1", "2"}:
        raise OracleError(f"ModelOracle models cc in cubic/bbr/reno and http 1.1/2; space {space.name!r} has {unknown or 'other http'}")
    row = lambda a: np.asarray(a, dtype=float)[None, :]  # noqa: E731
    stack = tcp.Stack(bbr=(cc == "bbr")[None, :], reno=(cc == "reno")[None, :], iw=row(col("tcp.initial_cwnd")),
                      rto_min=row(col("tcp.rto_min_ms")), syn_rto=row(col("tcp.syn_rto_ms")),
                      sndbuf=row(_window_cap(col("tcp.sndbuf_bytes"), col("tcp.cwnd_clamp"))))
    return stack, col("http.version") == "2"


def _window_cap(sndbuf: np.ndarray, clamp: np.ndarray) -> np.ndarray:
    """Bytes in flight a configuration allows (0 = no cap): the send buffer, and the cwnd clamp in segments.

    Both cap the rate at cap/rtt and the first flight at cap (MODEL.md "Send buffer", "Cwnd clamp"), so the
    clamp enters the stack as an equivalent send buffer; 0 stays 0 when neither is set."""
    sndbuf, clamp = sndbuf.astype(float), clamp.astype(float) * tcp.MSS
    both = np.minimum(np.where(sndbuf > 0, sndbuf, np.inf), np.where(clamp > 0, clamp, np.inf))
    return np.where(np.isfinite(both), both, 0.0)


def load_ms(site: Website, bw, rtt, loss, q, stack: tcp.Stack, h2: bool, tails: str = "sack") -> np.ndarray:
    """Completion time of a whole workload for one HTTP version: levels in sequence, plus client time.
    ``tails``: how a lost first-flight tail is found (``tcp.burst_loss_ms``; MODEL.md 6f), for an object or a
    response; a page keeps ``sack`` (its document's lost tail did not cost the probe on Chromium's page loads:
    MODEL.md 6f, tb-v3-shallow; ``levels_ms`` is that tried alternative, for the comparison only)."""
    return levels_ms(site, bw, rtt, loss, q, stack, h2, "sack" if site.kind == "page" else tails)


def levels_ms(site: Website, bw, rtt, loss, q, stack: tcp.Stack, h2: bool, tails: str) -> np.ndarray:
    """The workload's levels in sequence plus client time, ``tails`` as given for every workload (``load_ms`` passes
    ``sack`` for a page; called with ``probe`` on a page it is the alternative tb-v3-shallow rejected)."""
    path = _Path(bw * 1e6 / 8 / 1000 / tcp.MSS, rtt, loss, q)  # bottleneck in segments per ms
    delivered: dict[tuple, list[float]] = defaultdict(list)  # per (origin, anonymous): segments per open conn
    total = np.zeros(np.broadcast_shapes(bw.shape, stack.iw.shape))
    for level in sorted({o.level for o in site.objects}):
        plan = _plan_level(site, level, delivered, h2)
        total = total + _level_ms(plan, path, stack, site.metric, tails)
    if site.kind == "page":
        total = total + CLIENT_BASE_MS + CLIENT_PER_OBJECT_MS * len(site.objects)
    return total


class _Path:
    """Bottleneck of one cell column: rate (segments/ms), rtt, loss, buffer (BDPs, floored in segments)."""

    def __init__(self, rate, rtt, p, q):
        self.rate, self.rtt, self.p = rate, rtt, p
        self.bdp = rate * rtt
        self.buffer = np.maximum(q * self.bdp, BUFFER_FLOOR_SEGMENTS)
        self.q = self.buffer / np.maximum(self.bdp, 1e-9)


def _plan_level(site: Website, level: int, delivered: dict[tuple, list[float]], h2: bool) -> list[tuple]:
    """Connections used in a level: (segments per response, delivered before, cold?) per connection.

    HTTP/2: one connection per origin carrying the level's responses as one flow. HTTP/1.1: up to 6
    connections per origin, responses spread largest-first over the least-loaded connection; already
    open connections (from earlier levels) take the heaviest queues, new ones pay a handshake. A font from another
    origin than the page's is fetched in CORS mode without credentials, which Chromium sends over connections of
    their own (a separate socket pool, "privacy mode"), never the origin's credentialed ones (MODEL.md section 3).
    """
    by_origin: dict[tuple, list[float]] = defaultdict(list)
    for o in site.objects:
        if o.level == level:
            by_origin[(o.origin, anonymous(site, o))].append((o.size_bytes + RESPONSE_HEADER_BYTES) / tcp.MSS)
    plan = []
    for origin, segs in sorted(by_origin.items()):
        queues = [[sum(segs)]] if h2 else _spread(segs, min(H1_CONNECTIONS_PER_ORIGIN, len(segs)))
        opened = delivered[origin]
        for i, queue in enumerate(queues):
            cold = i >= len(opened)
            before = 0.0 if cold else opened[i]
            plan.append((queue, before, cold))
            if cold:
                opened.append(sum(queue))
            else:
                opened[i] += sum(queue)
    return plan


def anonymous(site: Website, obj) -> bool:
    """Whether Chromium fetches ``obj`` of ``site`` without credentials, over connections of their own: a font (CORS
    mode) from another origin than the page's (MODEL.md section 3)."""
    return site.kind == "page" and obj.kind == "font" and obj.origin != site.objects[0].origin


def _spread(segs: list[float], n: int) -> list[list[float]]:
    """Longest-processing-time assignment of responses to n connections, heaviest queue first."""
    queues: list[list[float]] = [[] for _ in range(n)]
    for s in sorted(segs, reverse=True):
        min(queues, key=sum).append(s)
    return sorted(queues, key=sum, reverse=True)


def _level_ms(plan: list[tuple], path: _Path, stack: tcp.Stack, metric: str = "load", tails: str = "sack") -> np.ndarray:
    """A level ends when its slowest connection does; connections share rate by bytes, room equally.

    A "response" workload (SmartIW's TCP response time) pays no handshake, and its first flight is not held to
    the client's first receive window: the response goes over a kept-alive connection whose receive window the
    client has already grown (the server's window restarts at the initial window after the idle time)."""
    level_segs = sum(sum(queue) for queue, _, _ in plan)
    n = len(plan)
    worst = None
    for queue, before, cold in plan:
        share = _share(path, stack, sum(queue) / level_segs, 1.0 / n)
        t = _connection_ms(queue, before, cold and metric == "load", share, stack, _rwnd(metric), tails)
        worst = t if worst is None else np.maximum(worst, t)
    return worst


def mean_rtt_ms(site: Website, bw, rtt, loss, q, stack: tcp.Stack, h2: bool) -> np.ndarray:
    """Mean RTT sample over every segment of the workload, each response's from ``tcp.mean_rtt_ms`` on the
    connection, share and window that ``load_ms`` gives it."""
    path = _Path(bw * 1e6 / 8 / 1000 / tcp.MSS, rtt, loss, q)
    delivered: dict[tuple, list[float]] = defaultdict(list)
    area, segments = 0.0, 0.0
    for level in sorted({o.level for o in site.objects}):
        plan = _plan_level(site, level, delivered, h2)
        level_segs = sum(sum(queue) for queue, _, _ in plan)
        for queue, before, _ in plan:
            share = _share(path, stack, sum(queue) / level_segs, 1.0 / len(plan))
            iw = _first_window(stack, _rwnd(site.metric))
            done = before
            for d in queue:
                w0 = iw if done == 0 else tcp.warm_window(iw, done, share, stack)
                area = area + d * tcp.mean_rtt_ms(d, w0, share, stack.bbr)
                segments += d
                done += d
    return area / segments


def _share(path: _Path, stack: tcp.Stack, byte_share: float, conn_share: float) -> tcp.Share:
    """One connection's share: rate by bytes (all finish together when bandwidth-bound), capped by
    the send buffer (sndbuf / rtt); burst room = equal share of BDP + buffer. A connection alone on the path
    meets an empty pipe with its first flight: the buffer and the packet in service absorb it. The connections of
    a level of several keep the equal share of BDP + buffer: Chromium sends their requests as it discovers them,
    so their flights leave spread over the level rather than at once (the timeline times them; MODEL.md 2, 3a)."""
    rate = path.rate * byte_share
    rate = np.where(stack.sndbuf > 0, np.minimum(rate, stack.sndbuf / tcp.MSS / path.rtt), rate)
    room = (path.bdp + path.buffer) * conn_share
    flight = path.buffer + 1.0 if conn_share >= 1.0 else None
    return tcp.Share(rate=rate, rtt=path.rtt, p=path.p, pipe=rate * path.rtt, room=room, q=path.q, flight=flight)


def _connection_ms(queue: list[float], before: float, cold: bool, share: tcp.Share, stack: tcp.Stack,
                   rwnd: float = CLIENT_RWND_SEGMENTS, tails: str = "sack"):
    """Handshake if new, then the responses one after another, the window growing across them."""
    t = tcp.handshake_ms(share.rtt, share.p, stack) if cold else 0.0
    iw = _first_window(stack, rwnd)
    done = before
    for d in queue:
        w0 = iw if done == 0 else tcp.warm_window(iw, done, share, stack)
        t = t + tcp.transfer_ms(d, w0, share, stack, w_ss=iw + done, tails=tails)
        done += d
    return t + tcp.overshoot_ms(before, done - before, iw, share, stack)


def _rwnd(metric: str) -> float:
    """The client's receive window at the first flight: its first advertised window on a new connection, none
    on the kept-alive connection of a "response" workload (see ``_level_ms``)."""
    return CLIENT_RWND_SEGMENTS if metric == "load" else np.inf


def _first_window(stack: tcp.Stack, rwnd: float = CLIENT_RWND_SEGMENTS):
    """The first flight: the initial window, within the client's receive window and the send buffer."""
    iw = np.minimum(stack.iw, rwnd)
    return np.where(stack.sndbuf > 0, np.minimum(iw, np.maximum(stack.sndbuf / tcp.MSS, 1.0)), iw)


def noise_theta(bw, rtt, loss, n_origins: int) -> np.ndarray:
    """Erlang scale per cell (FACTS.md section 4): median X ~0.05-0.15 wired/LTE, ~0.2-0.4 3G/2G/lossy.

    The median of Erlang(2, theta) is 1.68 theta. theta grows as bandwidth falls below 10 Mbit/s, as RTT
    rises above 50 ms and with loss (to 5 %), and with the number of origins (Butkiewicz IMC'11: servers
    contacted best predict PLT variability).
    """
    slow = np.clip(np.log(10.0 / bw) / np.log(100.0), 0.0, 1.0)
    far = np.clip(np.log(rtt / 50.0) / np.log(20.0), 0.0, 1.0)
    lossy = np.clip(np.asarray(loss) / 0.05, 0.0, 1.0)
    base = 0.03 + 0.05 * slow + 0.02 * far + 0.06 * lossy
    return np.minimum(base * (1.0 + 0.2 * np.log2(max(n_origins, 1))), 0.25)


def slow_start_share(size_bytes, bw, rtt, loss, buffer_bdp, iw: float = 10.0) -> np.ndarray:
    """Per flow (arrays of one length), the probability that a single response over a loss-based CC starting at
    ``iw`` ends still in slow start (SmartIW Table I), on the model's path (buffer floor included); the response
    goes over a kept-alive connection, so the client's first receive window does not cap ``iw``."""
    col = lambda a: np.asarray(a, dtype=float).reshape(-1, 1)  # noqa: E731
    path = _Path(col(bw) * 1e6 / 8 / 1000 / tcp.MSS, col(rtt), col(loss), col(buffer_bdp))
    share = tcp.Share(rate=path.rate, rtt=path.rtt, p=path.p, pipe=path.bdp, room=path.bdp + path.buffer, q=path.q)
    d = (col(size_bytes) + RESPONSE_HEADER_BYTES) / tcp.MSS
    return tcp.slow_start_end_probability(d, iw, share)[:, 0]
