"""ModelOracle: monotonicity, diversity of optima, calibration against on-machine measurements, speed.

Calibration numbers come from the eBPF feasibility notes measured on this machine kind, section 2 (100 KB response, RTT
100 ms, unshaped, no TLS) and the link-emulation notes, section 4 (real Chromium page loads).
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from tailor.errors import OracleError
from tailor.oracle import NOISE_SHAPE, ModelOracle, PLTTensor, default_catalog
from tailor.oracle.websites import chromium_test_page, make_page, synthesize_page
from tailor.space import ConfigSpace

TOL = 1e-9
CALIBRATION_TOLERANCE = 0.40  # model within +-40 % of a measured mean


@pytest.fixture(scope="module")
def oracle():
    sites = default_catalog()
    sites["chromium-test-page"] = chromium_test_page()
    return ModelOracle(websites=sites)


@pytest.fixture(scope="module")
def core():
    return ConfigSpace.named("core")


def label_index(space, label):
    return [space.label(i) for i in range(len(space))].index(label)


def realistic_cells(grid):
    """Workshop grid (seed 003: bw {0.3,1,5} Mbps x loss {0,1,2.5,5} % x delay {50,150,250,500} ms one way,
    i.e. RTT 100..1000 ms) union the 16 FCC+ rows (seed 002, Table 4), each at every buffer size."""
    rows = [(bw, 2 * d, p) for bw in (0.3, 1, 5) for p in (0, 0.01, 0.025, 0.05) for d in (50, 150, 250, 500)]
    rows += [(10, 38, .0014), (10, 40, .0025), (25, 31, .0021), (25, 30, .001), (50, 21.5, .001), (50, 20, .0011),
             (100, 23.5, .0009), (100, 23, .0007), (100, 12.5, .0004), (500, 8, .0001), (500, 8, .0002),
             (10, 70, .001), (10, 100, .0015), (3.54, 90, .001), (3.54, 120, .0015)]
    bw, rtt, p = (np.array(c, dtype=float) for c in zip(*rows))
    cells = [grid.cells(bw, rtt, p, np.full(len(bw), q)) for q in grid.buffer_bdp]
    return np.unique(np.concatenate(cells))


# (a) monotone along every grid axis -------------------------------------------------------------------
@pytest.mark.parametrize("site", ["object-10KB", "object-1MB", "page-light-1", "page-medium-2"])
def test_monotone_in_bandwidth_rtt_and_loss(oracle, core, site):
    g = oracle.grid
    times = oracle.mode_ms(np.arange(g.n_cells), site, core).reshape(g.shape + (len(core),))
    for axis, sign, what in ((0, -1, "bandwidth"), (1, 1, "rtt"), (2, 1, "loss")):
        step = sign * np.diff(times, axis=axis) / np.take(times, range(times.shape[axis] - 1), axis=axis)
        assert step.min() >= -TOL, f"{site}: time not monotone in {what} (worst relative step {step.min():.3g})"


# (b), (c) no universal winner; default optimal somewhere but not mostly ---------------------------------
@pytest.mark.parametrize("site", ["object-10KB", "object-100KB", "object-1MB", "page-light-2", "page-medium-2", "page-heavy-1"])
def test_no_single_configuration_wins_most_cells(oracle, core, site):
    cells = realistic_cells(oracle.grid) if site.startswith("page") else np.arange(oracle.grid.n_cells)
    best = oracle.mode_ms(cells, site, core).argmin(axis=1)
    share = np.bincount(best, minlength=len(core)).max() / len(cells)
    assert share <= 0.60, f"{site}: one configuration is optimal on {share:.0%} of cells"


def test_default_is_optimal_on_some_but_not_most_cells(oracle, core):
    """Over the whole grid and every object workload. On multi-origin pages the model never makes the
    default strictly optimal (HTTP/2 wins at low loss, BBR at high loss), so pages check near-optimality."""
    cells = np.arange(oracle.grid.n_cells)
    objects = [s for s in oracle.websites if s.startswith("object-")]
    times = np.concatenate([oracle.mode_ms(cells, s, core) for s in objects])
    optimal = times[:, core.default_index] <= times.min(axis=1) * (1 + TOL)
    assert 0.01 < optimal.mean() < 0.5
    page = oracle.mode_ms(realistic_cells(oracle.grid), "page-medium-2", core)
    near = page[:, core.default_index] <= page.min(axis=1) * 1.05
    assert 0.0 < near.mean() < 0.5


# (d) calibration -------------------------------------------------------------------------------------
def test_initial_window_calibration_100kb_at_100ms(oracle, core):
    """100 KB, RTT 100 ms, unshaped (500 Mbit/s, deep buffer), no TLS: subtract the TLS round trip."""
    cell = oracle.grid.cell(500, 100, 0.0, 4.0)
    t = oracle.mode_ms([cell], "object-100KB", core)[0] - 100.0
    measured = {"cubic iw4 h1.1 rto200": 608, "cubic iw10 h1.1 rto200": 507, "cubic iw32 h1.1 rto200": 304,
                "bbr iw32 h1.1 rto200": 343}
    model = {k: t[label_index(core, k)] for k in measured}
    for k, m in measured.items():
        assert abs(model[k] / m - 1) <= CALIBRATION_TOLERANCE, (k, model[k], m)
    assert model["cubic iw4 h1.1 rto200"] > model["cubic iw10 h1.1 rto200"] > model["cubic iw32 h1.1 rto200"]
    assert model["bbr iw32 h1.1 rto200"] > model["cubic iw32 h1.1 rto200"]  # BBR paces its first window


@pytest.mark.parametrize("bw, rtt, h2_ms, h1_ms", [(5, 100, 3063, 3769), (50, 20, 553, 668)])
def test_chromium_page_calibration(oracle, core, bw, rtt, h2_ms, h1_ms):
    """Real Chromium, 31 objects 1.31 MB, TLS, cubic iw10, 0 % loss, 1-BDP droptail (link-feasibility 4)."""
    t = oracle.mode_ms([oracle.grid.cell(bw, rtt, 0.0, 1.0)], "chromium-test-page", core)[0]
    h2, h1 = t[label_index(core, "cubic iw10 h2 rto200")], t[label_index(core, "cubic iw10 h1.1 rto200")]
    assert abs(h2 / h2_ms - 1) <= CALIBRATION_TOLERANCE, (h2, h2_ms)
    assert abs(h1 / h1_ms - 1) <= CALIBRATION_TOLERANCE, (h1, h1_ms)
    assert h2 < h1


# (e) mechanisms that must emerge --------------------------------------------------------------------
def test_http_version_tradeoff(oracle, core):
    h1, h2 = label_index(core, "cubic iw10 h1.1 rto200"), label_index(core, "cubic iw10 h2 rto200")
    lossy = oracle.mode_ms([oracle.grid.cell(5, 100, 0.05, 1.0)], "chromium-test-page", core)[0]
    clean = oracle.mode_ms([oracle.grid.cell(5, 250, 0.0, 1.0)], "page-medium-2", core)[0]
    assert lossy[h1] < lossy[h2], "HOL blocking: one lossy H2 connection should lose to six H1 ones"
    assert clean[h2] < clean[h1], "H2 saves request round trips on a clean high-RTT path"


def test_bbr_beats_cubic_under_heavy_loss(oracle, core):
    t = oracle.mode_ms([oracle.grid.cell(10, 100, 0.05, 1.0)], "object-1MB", core)[0]
    assert t[label_index(core, "bbr iw10 h1.1 rto200")] < 0.7 * t[label_index(core, "cubic iw10 h1.1 rto200")]


def test_cubic_keeps_more_of_its_window_than_reno_after_random_loss(oracle, core):
    """After a random loss the window decays by beta per loss (CUBIC 0.7, Reno 0.5) instead of jumping to PFTK's
    steady state: on 5 Mbit/s, 100 ms, 1% loss (tb-v3-objects: CUBIC IW 10 2.3 s, Reno IW 10 4.5-6.0 s for 1 MB)
    CUBIC is clearly faster than Reno, and without loss the two are the same."""
    lossy = oracle.mode_ms([oracle.grid.cell(5, 100, 0.01, 1.0)], "object-1MB", core)[0]
    clean = oracle.mode_ms([oracle.grid.cell(5, 100, 0.0, 1.0)], "object-1MB", core)[0]
    cubic, reno = label_index(core, "cubic iw10 h2 rto200"), label_index(core, "reno iw10 h2 rto200")
    assert lossy[cubic] < 0.85 * lossy[reno]
    assert clean[cubic] == pytest.approx(clean[reno])


def test_hystart_spares_cubic_the_overflow_where_the_acks_keep_within_2_ms(oracle, core):
    """CUBIC's HyStart ACK train (``tcp.hystart_exit``): at 50 Mbit/s, 40 ms and one BDP of buffer a lossless 1 MB
    response overflows the queue under Reno (tb-v3-objects `leo-starlink`: 30-45 retransmissions) but not under
    CUBIC (0), so CUBIC saves the recovery round; at 3 Mbit/s the ACKs come more than 2 ms apart and the two are the
    same. Reno and BBR never exit by HyStart."""
    from tailor.oracle import tcp

    cubic, reno = label_index(core, "cubic iw10 h2 rto200"), label_index(core, "reno iw10 h2 rto200")
    fast = oracle.mode_ms([oracle.grid.cell(50, 40, 0.0, 1.0)], "object-1MB", core)[0]
    slow = oracle.mode_ms([oracle.grid.cell(3, 40, 0.0, 1.0)], "object-1MB", core)[0]
    assert fast[reno] - fast[cubic] > 0.5 * 40
    assert slow[cubic] == pytest.approx(slow[reno])
    col = lambda v: np.array([[float(v)]])  # noqa: E731
    stack = tcp.Stack(bbr=np.array([[False, False, True]]), reno=np.array([[False, True, False]]),
                      iw=np.full((1, 3), 10.0), rto_min=np.full((1, 3), 200.0), syn_rto=np.full((1, 3), 1000.0),
                      sndbuf=np.zeros((1, 3)))
    for rate, q, expect in ((4.3, 1.0, 1.0), (0.3, 1.0, 0.0), (4.3, 0.0, 0.0)):
        sh = tcp.Share(rate=col(rate), rtt=col(40.0), p=col(0.0), pipe=col(rate * 40), room=col(rate * 40 * (1 + q)),
                       q=col(q))
        w_exit, hs = tcp.hystart_exit(10.0, sh, stack)
        assert hs[0].tolist() == [expect, 0.0, 0.0]
        assert w_exit[0, 0] >= rate * 40  # the exit keeps a window of at least the pipe


def test_hystart_exit_agrees_with_the_kernels_retransmissions():
    """On the committed tb-v3-objects fetches (1 MB, loss <= 0.25%, constant-rate links where Reno overflows), CUBIC
    retransmits under a fifth of Reno's segments where ``hystart_exit`` gives an exit probability of 0.9 or more,
    and at least half as many where it gives 0.1 or less."""
    import pandas as pd

    from tailor.oracle import tcp
    from tailor.oracle.measured import OBJECT_DATASET

    m = pd.read_parquet(Path(OBJECT_DATASET) / "measurements.parquet")
    m = m[(m["ok"] == True) & (m["size_bytes"] > 1e6) & (m["rto_min_ms"] == 200) & (m["loss"] <= 0.0025)  # noqa: E712
          & (m["trace"].fillna("") == "")]
    high, low = [], []
    for cond, c in m.groupby("condition"):
        med = c.groupby(["cc", "iw"])["srv_RetransSegs"].median()
        iws = [iw for iw in (4, 10, 32) if ("cubic", iw) in med and ("reno", iw) in med]
        if not iws or med["reno"][iws].median() < 5:
            continue  # no overflow to avoid
        first = c.iloc[0]
        rate = first["down_mbps"] * 1e6 / 8 / 1000 / tcp.MSS
        pipe = rate * first["rtt_ms"]
        q = first["queue_packets"] / pipe
        sh = tcp.Share(rate=np.array([[rate]]), rtt=np.array([[first["rtt_ms"]]]), p=np.array([[first["loss"]]]),
                       pipe=np.array([[pipe]]), room=np.array([[pipe * (1 + q)]]), q=np.array([[q]]))
        stack = tcp.Stack(bbr=np.zeros((1, 1), bool), reno=np.zeros((1, 1), bool), iw=np.array([[10.0]]),
                          rto_min=np.array([[200.0]]), syn_rto=np.array([[1000.0]]), sndbuf=np.zeros((1, 1)))
        hs = float(tcp.hystart_exit(10.0, sh, stack)[1][0, 0])
        ratio = med["cubic"][iws].median() / med["reno"][iws].median()
        (high if hs >= 0.9 else low if hs <= 0.1 else []).append((cond, ratio))
    assert len(high) >= 2 and len(low) >= 2, (high, low)
    assert all(r < 0.2 for _, r in high), high
    assert all(r >= 0.5 for _, r in low), low


def test_loss_epochs_decay_towards_the_steady_state():
    """``tcp.ca_transient_ms``: one response long enough runs at PFTK's average window (the recursion's fixed point);
    a short rest right after a loss at a window above the pipe goes at the bottleneck's rate; no segments, no time."""
    from tailor.oracle import tcp

    rate, rtt, p = 0.5, 100.0, 0.01  # segments/ms, ms: pipe 50 segments
    col = lambda v: np.array([[v]])  # noqa: E731
    sh = tcp.Share(rate=col(rate), rtt=col(rtt), p=col(p), pipe=col(rate * rtt), room=col(2 * rate * rtt), q=col(1.0))
    stack = tcp.Stack(bbr=np.array([[False, False]]), reno=np.array([[True, False]]), iw=np.array([[10.0, 10.0]]),
                      rto_min=np.full((1, 2), 200.0), syn_rto=np.full((1, 2), 1000.0), sndbuf=np.zeros((1, 2)))
    long = 200_000.0
    t = tcp.ca_transient_ms(col(long), col(100.0), sh, stack, col(rate))[0]
    steady = np.minimum(rate, tcp.cc_window(p, rtt, np.array([True, False])) / rtt)
    assert t == pytest.approx(long / steady, rel=0.02)
    short = tcp.ca_transient_ms(col(30.0), col(100.0), sh, stack, col(rate))[0]
    assert short == pytest.approx(30.0 / rate)  # beta x 100 >= the pipe: the bottleneck's pace
    assert (tcp.ca_transient_ms(col(0.0), col(100.0), sh, stack, col(rate)) == 0).all()


def test_first_flight_overflow_agrees_with_the_testbed():
    """On the committed tb-v3-objects fetches of 100 KB (CUBIC, HTTP/1.1, constant-rate links with loss <= 0.25% or
    the Pantheon trace, queues under the 45-segment first flight of IW 64): the kernel retransmits about the first
    flight's tail the model drops (45 - queue - 1 segments: the buffer and the packet in service absorb a flight
    that meets an empty pipe, not BDP + buffer), and the model's IW 64 / IW 32 time ratio is within 0.06 of the
    measured one, slower wherever the measured is more than 3% slower (the lost tail is resent a round later,
    after the link has gone idle) and not slower where the rest of the response keeps the link busy."""
    import pandas as pd

    from tailor.oracle.measured import OBJECT_DATASET, MeasuredOracle
    from tailor.oracle.model import CLIENT_RWND_SEGMENTS
    from tailor.oracle.validate import KEYS, _cells, predict_cell

    oracle = MeasuredOracle(OBJECT_DATASET)
    m = pd.read_parquet(Path(OBJECT_DATASET) / "measurements.parquet")
    m = m[(m["ok"] == True) & (m["size_bytes"] == 102400) & (m["cc"] == "cubic") & (m["http"] == "1.1")  # noqa: E712
          & (m["rto_min_ms"] == 200)]
    table = _cells(oracle, "objects")
    checked = 0
    for cond, c in m.groupby("condition"):
        first = c.iloc[0]
        queue = float(first["queue_packets"])
        if queue >= CLIENT_RWND_SEGMENTS - 1 or (first["loss"] > 0.0025) \
                or (isinstance(first["trace"], str) and first["trace"] != "" and not cond.startswith("pan-")):
            continue
        lost = CLIENT_RWND_SEGMENTS - queue - 1
        retrans = float(c[c["iw"] == 64]["srv_RetransSegs"].median())
        assert abs(retrans - lost) <= 5, (cond, retrans, lost)
        cell = table[(table["condition"] == cond) & (table["workload"] == "object-100KB")].drop_duplicates(KEYS)
        cell = cell.assign(pred=predict_cell("model", oracle, cell, "object-100KB"))
        cell = cell.set_index(["cc", "iw", "http", "rto_min_ms"])
        big, small = cell.loc[("cubic", 64, "1.1", 200)], cell.loc[("cubic", 32, "1.1", 200)]
        measured, model = big["median"] / small["median"], big["pred"] / small["pred"]
        assert abs(model - measured) <= 0.06, (cond, measured, model)
        if measured > 1.03:
            assert model > 1.0, (cond, measured, model)
        if measured < 0.97:
            assert model <= 1.0 + 1e-9, (cond, measured, model)
        checked += 1
    assert checked >= 4


def test_rto_min_matters_only_with_loss_at_low_rtt(oracle, core):
    r200, r50 = label_index(core, "cubic iw10 h1.1 rto200"), label_index(core, "cubic iw10 h1.1 rto50")
    low = oracle.mode_ms([oracle.grid.cell(10, 10, 0.035, 1.0)], "page-light-1", core)[0]
    far = oracle.mode_ms([oracle.grid.cell(10, 400, 0.035, 1.0)], "page-light-1", core)[0]
    clean = oracle.mode_ms([oracle.grid.cell(10, 10, 0.0, 1.0)], "page-light-1", core)[0]
    assert low[r50] < low[r200]
    assert far[r50] == pytest.approx(far[r200]) and clean[r50] == pytest.approx(clean[r200])


def test_sndbuf_caps_throughput_on_long_fat_paths(oracle):
    space = ConfigSpace.named("wide")
    t = oracle.mode_ms([oracle.grid.cell(100, 150, 0.0, 1.0)], "object-2MB", space)[0]
    capped = [i for i, c in enumerate(space.configs) if c["tcp.sndbuf_bytes"] > 0]
    auto = [i for i, c in enumerate(space.configs) if c["tcp.sndbuf_bytes"] == 0]
    assert t[capped].min() > t[auto].min()


# (f) noise ------------------------------------------------------------------------------------------
def test_noise_larger_on_lossy_and_slow_links(oracle):
    g = oracle.grid
    broadband = g.cells([100, 50], [20, 30], [0.0, 0.001], [1, 1])
    poor = g.cells([0.3, 0.1], [500, 1000], [0.05, 0.02], [1, 1])
    for site in ("object-100KB", "page-medium-2"):
        good, bad = oracle.noise_theta(broadband, site), oracle.noise_theta(poor, site)
        assert bad.min() > good.max()
        median_x = 1.678 * good  # median of Erlang(2, theta)
        assert NOISE_SHAPE == 2 and (median_x <= 0.15).all() and (1.678 * bad >= 0.2).all()
    assert oracle.noise_theta(broadband, "page-heavy-2").min() > oracle.noise_theta(broadband, "object-100KB").max()


# (g) speed and plumbing -----------------------------------------------------------------------------
def test_vectorized_call_is_fast(oracle, core):
    cells = np.random.default_rng(0).choice(oracle.grid.n_cells, 500, replace=False)
    start = time.perf_counter()
    times = oracle.mode_ms(cells, "page-medium-3", core)
    assert time.perf_counter() - start < 5.0
    assert times.shape == (500, 60) and np.isfinite(times).all() and (times > 0).all()


def test_tensor_and_errors(oracle, core):
    tensor = PLTTensor(oracle, core)
    cell = oracle.grid.cell(5, 100, 0.01)
    assert tensor.mean(cell, tensor.site_index["object-50KB"]).shape == (60,)
    with pytest.raises(OracleError):
        oracle.mode_ms([cell], "no-such-site", core)
    with pytest.raises(OracleError):
        oracle.mode_ms([oracle.grid.n_cells], "object-50KB", core)
    with pytest.raises(OracleError):
        make_page("bad", [(1000, 1, 0, "html")])
    assert oracle.describe()["grid"]["n_cells"] == oracle.grid.n_cells


def test_catalog_is_deterministic_and_almanac_like():
    a, b = default_catalog(), default_catalog()
    assert a == b and len(a) == 18
    pages = [w for w in a.values() if w.kind == "page"]
    assert all(22 <= len(w.objects) <= 176 and w.n_origins >= 2 for w in pages)
    assert all(w.objects[0].kind == "html" and w.objects[0].level == 0 for w in pages)
    origins = sorted(w.n_origins for w in pages)
    assert 8 <= origins[len(origins) // 2] <= 16  # median ~13 connections per page (FACTS.md 3.2)
    assert synthesize_page("x", 40, seed=1) == synthesize_page("x", 40, seed=1)


def test_a_cross_origin_font_gets_a_connection_of_its_own():
    """Chromium fetches a font in CORS mode; from another origin than the page's that request carries no
    credentials, and uncredentialed requests go over a socket pool of their own (MODEL.md section 3): the font pays
    a handshake and a first flight on a new connection even where its origin's connection is open. A font from the
    page's own origin reuses the page's connection."""
    from collections import defaultdict

    from tailor.oracle import model

    site = make_page("fonts", [(15_000, 0, 0, "html"), (20_000, 0, 1, "css"), (30_000, 1, 1, "js"),
                               (20_000, 1, 2, "font"), (20_000, 0, 2, "font")])
    for h2 in (True, False):
        delivered: dict = defaultdict(list)
        model._plan_level(site, 0, delivered, h2)
        model._plan_level(site, 1, delivered, h2)
        level2 = model._plan_level(site, 2, delivered, h2)
        assert sorted(cold for _, _, cold in level2) == [False, True], (h2, level2)
        assert len(delivered[(1, True)]) == 1 and len(delivered[(1, False)]) == 1  # origin 1: two pools
    same = make_page("same", [(15_000, 0, 0, "html"), (20_000, 0, 1, "css"), (30_000, 1, 1, "js"),
                              (20_000, 0, 2, "font"), (20_000, 0, 2, "font")])
    delivered = defaultdict(list)
    for level in (0, 1):
        model._plan_level(same, level, delivered, True)
    assert [cold for _, _, cold in model._plan_level(same, 2, delivered, True)] == [False]
