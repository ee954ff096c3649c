"""The page timeline (``ModelOracle(pages="timeline")``, ``--oracle model-timeline``; MODEL.md section 3a).

The levels' page model (``tailor.oracle.model.load_ms``) times a page as discovery levels that start together and
end with their slowest connection. The timeline times each object:

* **Discovery per parent.** The HTML at 0; an object it references when the HTML is complete; a level-2 object when
  its parent is, the parent chosen by the rule the testbed builds its pages with (``tailor.testbed.pages.build_page``:
  fonts and every other image from a level-1 stylesheet, the rest inserted by a level-1 script, ``i mod n``).
  ``order``: a stylesheet's children wait for every level-1 stylesheet (style needs the whole CSSOM) and a script's
  for every level-1 script up to it (scripts run in document order).
* **Connections.** HTTP/1.1: Chromium's pool, up to six per origin; a request takes the connection that is free
  first (late binding), and a new connection opens when none is free at discovery. HTTP/2: one connection per
  origin, opened at its first request. ``anon``: a font from another origin than the page's goes over a connection
  of its own (fonts are fetched in CORS mode, without credentials across origins, and Chromium keeps uncredentialed
  requests in a separate socket pool), with its own handshake and first flight; v3's levels do the same. ``mux``:
  a request that arrives while the connection still sends joins that flow; the flow grows its window round by
  round (its responses complete in the order they joined, by Chromium's priorities with ``priority``: stylesheets
  and fonts, scripts, then images), and each response pays its own loss terms at the window it finds. Without
  ``mux`` each response is timed from the window grown by those before it; ``flow`` times a joined flow whole, loss
  terms included (trials; MODEL.md 6a).
* **Rate.** The byte share of the level for the origin (HTTP/2) or for the connection's bytes in the level
  (HTTP/1.1, from the previous of three passes); ``fair``: at least an equal share among the level's connections, so
  a small response on its own connection is not slowed to its byte share.
* **First flights share the buffer** (``shared``): a response's first flight (min(w0, d) segments; what it adds to
  an HTTP/2 flow's) shares the bottleneck's buffer with every first flight sent less than one RTT before it; what
  the buffer and the packet in service cannot hold (the pipe is empty when flights leave together) is dropped, each
  flight losing its share. A lost tail that later
  segments reveal costs one RTT (SACK); a response wholly inside its flight waits for a tail-loss probe (2 srtt with
  the full buffer in srtt, then the probe's round trip). ``tailrto``: a tail of several lost segments waits for the
  RTO as well (the probe repairs one; srtt + max(RTO min, srtt)), then a slow start from one segment, log2(1 + lost)
  rounds, as the testbed's window traces show (MODEL.md 6a). The per-connection burst term of v2 is off.
  ``pipe`` (trials): the pipe absorbs first flights too.
* **Whole rounds** (``rounds``): slow start in whole rounds of whole segments (``tcp.window_limited_ms``).
* **Head-of-line blocking under loss** (``ca``, with ``mux``): a loss-based HTTP/2 flow delivers no faster than its
  congestion control's average rate under random loss (``tcp.cc_rate``); BBR keeps its rate.

Responses are otherwise timed by v2's ``tcp.transfer_ms`` and ``tcp.overshoot_ms`` (random loss, CC response,
BBR pacing), vectorised over (conditions, configurations). The default is every mechanism above but ``flow``;
``bench/oracle_mechanism_trials.py`` runs the subsets. Objects (single responses) keep the levels' model.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from tailor.oracle import model, tcp

_V2_LOAD = model.load_ms  # v2's, also when a trial harness has put the timeline in its place
OPTIONS = ("fair", "order", "shared", "mux", "priority", "rounds", "flow", "ca", "pipe", "tailrto", "anon")
DEFAULT = ("fair", "order", "shared", "mux", "priority", "rounds", "ca", "anon", "tailrto")
# ``priority``: Chromium's request priorities (stylesheets and fonts highest, then scripts, images lowest), the order
# in which a level's requests are issued and an HTTP/2 flow delivers them
PRIORITY = {"html": 0, "css": 1, "font": 1, "js": 2, "other": 3, "img": 4}
H1_MAX = model.H1_CONNECTIONS_PER_ORIGIN
# The timeline's own value of the one fitted constant (``tcp.OVERSHOOT_RECOVERY_RTT`` for the levels): the recovery
# round of a loss-based slow start that overflows BDP + buffer, in RTTs. Chosen by `tailor oracle calibrate --oracle
# model-timeline` (leave-one-condition-out over tb-v3's 12 conditions; MODEL.md 3a): 0.75 in 10 folds and 1 in 2 on v2,
# 0.75 in 12 of 12 on v4; on v5 (CUBIC's HyStart, MODEL.md 6c) 1 in 12 of 12, fitted on all conditions 1.
RECOVERY_RTT = 1.0


def parents(site) -> list[tuple[str, int | None]]:
    """Per object, (what discovers it: 'root' | 'html' | 'css' | 'js', its parent's index): the rule the testbed
    writes its pages by (``tailor.testbed.pages.build_page``); a level-2 object without a level-1 stylesheet or
    script to come from is referenced by the HTML."""
    objs = list(site.objects)
    l1 = {k: [i for i, o in enumerate(objs) if o.level == 1 and o.kind == k] for k in ("css", "js")}
    out: list[tuple[str, int | None]] = []
    for i, o in enumerate(objs):
        css = l1["css"][i % len(l1["css"])] if l1["css"] else None
        js = l1["js"][i % len(l1["js"])] if l1["js"] else None
        if o.level == 0:
            out.append(("root", None))
        elif o.level == 1:
            out.append(("html", 0))
        elif css is not None and (o.kind == "font" or (o.kind == "img" and (i % 2 == 0 or js is None))):
            out.append(("css", css))
        elif js is not None:
            out.append(("js", js))
        else:
            out.append(("html", 0))
    return out


def load_ms(site, bw, rtt, loss, q, stack, h2, opts=DEFAULT, tails="sack"):
    """The workload's completion time (array over conditions x configurations): pages by the timeline, objects by
    v2's ``model.load_ms`` (``tails``: how an object's lost first-flight tail is found, MODEL.md 6f)."""
    if site.kind != "page":
        return _V2_LOAD(site, bw, rtt, loss, q, stack, h2, tails=tails)
    unknown = set(opts) - set(OPTIONS)
    if unknown:
        raise ValueError(f"timeline options must be among {OPTIONS}; got {sorted(unknown)}")
    opts = tuple(opts)
    page = _Page(site, h2, opts)
    path = model._Path(bw * 1e6 / 8 / 1000 / tcp.MSS, rtt, loss, q)
    shares = None
    for _ in range(1 if h2 else 3):
        total, shares = _pass(page, path, stack, h2, opts, shares)
    return total


class _Page:
    """What a page's timeline needs that no pass changes: its objects, their parents, sizes in segments, the
    level and origin byte sums, connections per level, the level-1 stylesheets and scripts, the processing order."""

    def __init__(self, site, h2: bool, opts: tuple):
        self.objs, self.parents = list(site.objects), parents(site)
        self.segs = [(o.size_bytes + model.RESPONSE_HEADER_BYTES) / tcp.MSS for o in self.objs]
        # ``anon``: a cross-origin font goes over a connection of its own, not its origin's credentialed one
        self.pool = [(o.origin, "anon" in opts and model.anonymous(site, o)) for o in self.objs]
        self.level_segs, self.origin_segs, self.origin_n = defaultdict(float), defaultdict(float), defaultdict(int)
        for o, d, key in zip(self.objs, self.segs, self.pool):
            self.level_segs[o.level] += d
            self.origin_segs[(o.level, key)] += d
            self.origin_n[(o.level, key)] += 1
        self.conns = defaultdict(int)
        for (level, _), n in self.origin_n.items():
            self.conns[level] += 1 if h2 else min(H1_MAX, n)
        level1 = lambda kind: [i for i, o in enumerate(self.objs) if o.level == 1 and o.kind == kind]  # noqa: E731
        self.css1, self.js1 = level1("css"), level1("js")
        rank = (lambda j: PRIORITY.get(self.objs[j].kind, 4)) if "priority" in opts else (lambda j: 0)
        self.order = sorted(range(len(self.objs)), key=lambda j: (self.objs[j].level, rank(j), j))


def _shared_loss_ms(start, d, w0, flights, path, stack, burst=None, *, pipe=False, tailrto=False):
    """``shared``: the first flight of a response (min(w0, d) segments, sent at once by a loss-based sender, paced
    over rtt / 2.89 by BBR) shares the bottleneck's buffer with every first flight sent less than one RTT before it;
    what the buffer, the packet in service and what BBR's pacing lets the bottleneck drain cannot hold is dropped,
    each flight losing its share. Not the pipe: flights that leave together find it empty (MODEL.md 3a). A lost
    tail that later segments of the response reveal costs one RTT (SACK recovery); a response wholly inside its
    flight waits for a tail-loss probe, 2 srtt with the full buffer in srtt, plus the probe's round trip. Returns
    the cost and records the flight. ``burst``: the segments this response adds to a flight already counted (an
    HTTP/2 response joining its connection's flow), by default its own first flight. ``pipe``: the pipe absorbs
    too (the trials before the buffer-only room, MODEL.md 6a). ``tailrto``: beyond one lost segment of a tail the
    probe does not repair, the RTO and a slow start from one segment (module docstring)."""
    burst = np.minimum(w0, d) if burst is None else burst
    drain = np.where(stack.bbr, path.bdp / tcp.BBR_STARTUP_GAIN, 0.0)
    near = sum((np.abs(start - s) < path.rtt) * b for s, b in flights) if flights else 0.0
    total = burst + near
    room = path.buffer + 1.0 + drain + (path.bdp if pipe else 0.0)
    lost = burst * np.maximum(total - room, 0.0) / np.maximum(total, 1e-9)
    srtt = path.rtt + path.buffer / path.rate
    tail = d <= burst + 1.0  # a response wholly inside its flight: no later segment
    flights.append((start, burst))
    # tailrto: a tail of several lost segments: the probe repairs one, the RTO the rest, then slow start from 1
    return np.where(tail, tcp.lone_tail_ms(lost, path.rtt, srtt, stack.rto_min, tailrto),
                    np.minimum(lost, 1.0) * path.rtt)


def _pass(page: _Page, path, stack, h2, opts, shares):
    """One pass of the timeline: (load time, each object's connection byte share for the next pass)."""
    shape = np.broadcast_shapes(np.shape(path.rate), np.shape(stack.iw))
    whole, burst = "rounds" in opts, "shared" not in opts  # shared: first-flight losses from the shared buffer only
    loss_opts = {"pipe": "pipe" in opts, "tailrto": "tailrto" in opts}  # the shared first flights' loss terms
    joins = "flow" in opts or "mux" in opts  # HTTP/2: a request joins the flow its connection is still sending
    # ``ca``: a loss-based flow's average rate under random loss (the path's RTT and loss: the same for every object)
    cc = tcp.cc_rate(path.p, path.rtt, tcp.rto_ms(path.rtt, stack.rto_min), stack.reno) if "ca" in opts else None
    objs, par, segs = page.objs, page.parents, page.segs
    level_segs, origin_segs, origin_n, conns = page.level_segs, page.origin_segs, page.origin_n, page.conns
    iw = model._first_window(stack)
    hs = tcp.handshake_ms(path.rtt, path.p, stack) * np.ones(shape)
    done: list = [None] * len(objs)
    pools: dict[tuple, list] = defaultdict(list)  # per (origin, anonymous): HTTP/1.1 [free at, delivered, open]
    slot_of, flights = {}, []
    for i in page.order:
        o, d = objs[i], segs[i]
        by, p = par[i]
        if by == "root":
            disc = np.zeros(shape)
        elif by == "css" and "order" in opts:
            disc = np.maximum.reduce([done[j] for j in page.css1])
        elif by == "js" and "order" in opts:
            disc = np.maximum.reduce([done[j] for j in page.js1 if j <= p])
        else:
            disc = done[p]
        key = page.pool[i]
        share = origin_segs[(o.level, key)] / level_segs[o.level]
        if not h2:
            share = share / min(H1_MAX, origin_n[(o.level, key)]) if shares is None else shares[i]
        if "fair" in opts:
            share = np.maximum(share, 1.0 / conns[o.level])
        pool = pools[key]
        if h2:
            if not pool:  # [last response's end, delivered before the flow, the flow's start, its segments, ready at,
                z = np.zeros(shape)  # the flow's byte share]
                pool.append([disc + hs, z, disc + hs, z, disc + hs, z + share])
            conn = pool[0]
            # a request that arrives while the connection is still sending joins its flow (multiplexed: one
            # flow from the flow's window); a later one starts a new flow from the window grown so far
            join = (disc < conn[0]) if joins else np.zeros(shape, dtype=bool)
            before = np.where(join, conn[1], conn[1] + conn[3])
            start = np.where(join, conn[2], np.maximum(disc, conn[0] if joins else conn[4]))
            flow = np.where(join, conn[3] + d, d)
            flow_share = np.where(join, np.maximum(conn[5], share), share)  # a joined flow keeps its rate
            sh = model._share(path, stack, flow_share, 1.0 / conns[o.level])
            conn[5] = flow_share
            w0 = np.where(before > 0, tcp.warm_window(iw, before, sh, stack), iw)
            if "mux" in opts:  # the flow's rounds, this response's own loss terms (at the window it finds)
                sent = before + flow - d
                w_now = np.where(sent > 0, tcp.warm_window(iw, sent, sh, stack), iw)
                goodput = sh.rate * (1 - sh.p)
                end = start + tcp.window_limited_ms(flow, w0, goodput, sh.rtt, whole) \
                    + tcp.transfer_ms(d, w_now, sh, stack, w_ss=iw + sent, whole=whole, burst=burst) \
                    - tcp.window_limited_ms(d, w_now, goodput, sh.rtt, whole) \
                    + tcp.overshoot_ms(sent, d, iw, sh, stack, RECOVERY_RTT)
                if cc is not None:  # a loss-based flow delivers no faster than its CC's average rate under random loss
                    steady = np.where(stack.bbr, goodput, np.minimum(goodput, cc))
                    end = np.maximum(end, start + sh.rtt + flow / steady)
            else:
                end = start + tcp.transfer_ms(flow, w0, sh, stack, w_ss=iw + before, whole=whole, burst=burst) \
                    + tcp.overshoot_ms(before, flow, iw, sh, stack, RECOVERY_RTT)
            if "shared" in opts and joins:  # what this response adds to the flow's first flight
                added = np.minimum(w0, flow) - np.minimum(w0, flow - d)
                end = end + _shared_loss_ms(start, flow, w0, flights, path, stack, burst=added, **loss_opts)
            elif "shared" in opts:
                end = end + _shared_loss_ms(start, d, w0, flights, path, stack, **loss_opts)
            done[i] = np.maximum(end, disc + path.rtt) if joins else np.maximum(end, conn[0] + d / sh.rate)
            conn[0], conn[1], conn[2], conn[3] = np.maximum(done[i], conn[0]), before, start, flow
            continue
        sh = model._share(path, stack, share, 1.0 / conns[o.level])
        free_now = np.zeros(shape, dtype=bool)
        for c in pool:
            free_now |= c[2] & (c[0] <= disc)
        count = sum(c[2].astype(int) for c in pool) if pool else np.zeros(shape, dtype=int)
        if len(pool) < H1_MAX:
            pool.append([np.full(shape, np.inf), np.zeros(shape), np.zeros(shape, dtype=bool)])
        opening, placed = (~free_now) & (count < H1_MAX), np.zeros(shape, dtype=bool)
        for c in pool:  # a new connection takes the first slot not yet open
            put = opening & ~c[2] & ~placed
            c[0], c[2], placed = np.where(put, disc + hs, c[0]), c[2] | put, placed | put
        avail = np.stack([np.where(c[2], np.maximum(c[0], disc), np.inf) for c in pool])
        pick, start = np.argmin(avail, axis=0), np.min(avail, axis=0)
        delivered = np.choose(pick, [c[1] for c in pool])
        w0 = np.where(delivered > 0, tcp.warm_window(iw, delivered, sh, stack), iw)
        done[i] = start + tcp.transfer_ms(d, w0, sh, stack, w_ss=iw + delivered, whole=whole, burst=burst) \
            + tcp.overshoot_ms(delivered, d, iw, sh, stack, RECOVERY_RTT)
        if "shared" in opts:
            done[i] = done[i] + _shared_loss_ms(start, d, w0, flights, path, stack, **loss_opts)
        for k, c in enumerate(pool):
            c[0], c[1] = np.where(pick == k, done[i], c[0]), np.where(pick == k, c[1] + d, c[1])
        slot_of[i] = (key, pick)
    total = np.maximum.reduce(done) + model.CLIENT_BASE_MS + model.CLIENT_PER_OBJECT_MS * len(objs)
    if h2:
        return total, None
    per = defaultdict(lambda: np.zeros(shape))  # each connection's segments in each level
    for i, (origin, pick) in slot_of.items():
        for k in range(H1_MAX):
            per[(objs[i].level, origin, k)] = per[(objs[i].level, origin, k)] + np.where(pick == k, segs[i], 0.0)
    return total, {i: np.maximum(np.choose(pick, [per[(objs[i].level, origin, k)] for k in range(H1_MAX)]), segs[i])
                   / level_segs[objs[i].level] for i, (origin, pick) in slot_of.items()}
