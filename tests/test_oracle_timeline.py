"""The page timeline (tailor.oracle.timeline, ``ModelOracle(pages="timeline")``, ``--oracle model-timeline``)."""

from __future__ import annotations

import numpy as np
import pytest

from tailor.errors import OracleError
from tailor.oracle import ModelOracle, default_catalog, model, tcp, timeline
from tailor.oracle.websites import make_page
from tailor.space import ConfigSpace


def _stack(iw=10, cc="cubic"):
    one = lambda v: np.array([[v]], dtype=float)  # noqa: E731
    return tcp.Stack(bbr=one(cc == "bbr").astype(bool), reno=one(cc == "reno").astype(bool), iw=one(iw),
                     rto_min=one(200.0), syn_rto=one(1000.0), sndbuf=one(0.0))


def _page_ms(site, bw, rtt, loss, q, iw=10, cc="cubic", h2=True, opts=timeline.DEFAULT):
    col = lambda v: np.array([[float(v)]])  # noqa: E731
    return float(timeline.load_ms(site, col(bw), col(rtt), col(loss), col(q), _stack(iw, cc), h2, opts)[0, 0])


def test_whole_rounds_charge_a_round_for_one_segment_too_many():
    """11 segments from a window of 10 take two rounds (the second idles the pipe), 10 take one; v2's continuous
    rounds charge the eleventh a small fraction of a round."""
    rate, rtt = 10.0, 100.0  # a pipe of 1,000 segments: every round is window-limited
    one = tcp.window_limited_ms(10.0, 10.0, rate, rtt, whole=True)
    two = tcp.window_limited_ms(11.0, 10.0, rate, rtt, whole=True)
    assert two - one == pytest.approx(rtt, rel=0.02)
    assert tcp.window_limited_ms(11.0, 10.0, rate, rtt) - one < 0.2 * rtt
    # past the pipe there is no idle round to add: whole and continuous agree when the window covers the pipe at once
    assert tcp.window_limited_ms(50.0, 64.0, 0.5, 40.0, whole=True) == pytest.approx(
        tcp.window_limited_ms(50.0, 64.0, 0.5, 40.0))


def test_parents_are_the_testbeds_construction():
    """Every level-2 object comes from a level-1 stylesheet (fonts, half the images) or script; the testbed writes
    its pages from the same rule (tailor.testbed.pages.build_page)."""
    for name, site in default_catalog().items():
        objs = list(site.objects)
        for o, (by, p) in zip(objs, timeline.parents(site), strict=True):
            if o.level == 0:
                assert by == "root"
            elif o.level == 1:
                assert (by, p) == ("html", 0)
            elif by == "css":
                assert objs[p].level == 1 and objs[p].kind == "css" and o.kind in ("font", "img"), name
            elif by == "js":
                assert objs[p].level == 1 and objs[p].kind == "js", name


def test_a_child_waits_for_its_parent():
    """A font referenced by a large stylesheet is discovered when the stylesheet has arrived: growing the
    stylesheet delays the page, growing an unrelated image of the same level by the same bytes delays it less."""
    def page(css_kb, img_kb):
        return make_page("p", [(15_000, 0, 0, "html"), (css_kb * 1000, 0, 1, "css"), (img_kb * 1000, 1, 1, "img"),
                               (20_000, 2, 2, "font")])
    base = _page_ms(page(10, 10), 10, 80, 0.0, 1.0)
    assert _page_ms(page(300, 10), 10, 80, 0.0, 1.0) > _page_ms(page(10, 300), 10, 80, 0.0, 1.0) > base


MONOTONE_WITHIN = 0.05  # the HTTP/1.1 pool's assignments are discrete: a slower response can reorder the queues


@pytest.mark.parametrize("h2", [False, True])
def test_time_grows_with_rtt_and_loss_and_falls_with_bandwidth(h2):
    """Across a decade or more of each, and step by step within MONOTONE_WITHIN (MODEL.md 3a: the timeline's
    discrete connection choices make it monotone only up to a few per cent, v2's levels strictly). Random loss of
    3% costs at least 10%: BBR's rate does not react to it (only its retransmissions and recoveries cost), and a
    lossless one-BDP buffer already drops the tails of HTTP/1.1's concurrent first flights at IW 32."""
    site = default_catalog()["page-medium-2"]
    for iw, cc in ((10, "cubic"), (32, "bbr"), (4, "reno")):
        by_rtt = np.array([_page_ms(site, 10, r, 0.001, 1.0, iw, cc, h2) for r in (20, 40, 80, 160, 320)])
        by_bw = np.array([_page_ms(site, b, 60, 0.001, 1.0, iw, cc, h2) for b in (1, 3, 10, 30, 100)])
        by_loss = np.array([_page_ms(site, 10, 60, p, 1.0, iw, cc, h2) for p in (0.0, 0.001, 0.01, 0.03)])
        assert by_rtt[-1] > 2 * by_rtt[0] and by_bw[0] > 2 * by_bw[-1] and by_loss[-1] > 1.1 * by_loss[0]
        for series, sign in ((by_rtt, 1), (by_bw, -1), (by_loss, 1)):
            assert (sign * np.diff(series) / series[:-1] > -MONOTONE_WITHIN).all(), (iw, cc, h2, series)


def test_a_large_initial_window_pays_where_the_path_holds_it_and_costs_where_the_buffer_is_shallow():
    """The two directions the testbed measures (tb-v3, MODEL.md 3a): on a lossless long, fat path with a
    one-BDP buffer IW 32 saves whole rounds over IW 10; on a slow link whose buffer holds 8 packets the concurrent
    first flights of IW 32 overflow it and the page is slower than at IW 10."""
    site = default_catalog()["page-light-1"]
    assert _page_ms(site, 50, 40, 0.0, 1.0, 32) < 0.95 * _page_ms(site, 50, 40, 0.0, 1.0, 10)
    shallow = 8 / (2 * 1e6 / 8 / 1000 / tcp.MSS * 40)  # 8 packets at 2 Mbit/s, 40 ms, in BDPs
    assert _page_ms(site, 2, 40, 0.0, shallow, 32) > _page_ms(site, 2, 40, 0.0, shallow, 10)


def test_objects_are_v2s_and_options_are_checked():
    site = default_catalog()["object-100KB"]
    col = lambda v: np.array([[float(v)]])  # noqa: E731
    args = (site, col(10), col(50), col(0.001), col(1.0), _stack(), True)
    assert float(timeline.load_ms(*args)[0, 0]) == float(model.load_ms(*args)[0, 0])
    with pytest.raises(ValueError, match="timeline options"):
        timeline.load_ms(default_catalog()["page-light-1"], *args[1:], opts=("warp",))


def test_model_oracle_with_the_timeline():
    space = ConfigSpace.named("core")
    levels, tl = ModelOracle(), ModelOracle(pages="timeline")
    assert tl.name == f"{model.VERSION}+timeline" and tl.describe()["pages"] == "timeline"
    cells = np.arange(0, levels.grid.n_cells, max(levels.grid.n_cells // 40, 1))
    a, b = levels.mode_ms(cells, "page-light-3", space), tl.mode_ms(cells, "page-light-3", space)
    assert a.shape == b.shape and np.isfinite(b).all() and (b > 0).all()
    assert not np.allclose(a, b)  # a different page model
    assert np.array_equal(levels.mode_ms(cells, "object-1MB", space), tl.mode_ms(cells, "object-1MB", space))
    with pytest.raises(OracleError, match="'pages' parameter"):
        ModelOracle(pages="waterfall")


def test_a_cross_origin_font_pays_a_handshake_on_its_own_connection():
    """``anon``: the font of origin 1 waits for a new connection's handshake although origin 1's connection is open
    (Chromium's separate pool for uncredentialed CORS requests); the same page with the font on the page's origin
    does not change."""
    rtt = 200.0
    # the stylesheet that references the font arrives long after origin 1's small script: that connection is idle
    cross = make_page("x", [(15_000, 0, 0, "html"), (60_000, 0, 1, "css"), (2_000, 1, 1, "js"), (20_000, 1, 2, "font")])
    home = make_page("h", [(15_000, 0, 0, "html"), (60_000, 0, 1, "css"), (2_000, 1, 1, "js"), (20_000, 0, 2, "font")])
    without = tuple(o for o in timeline.DEFAULT if o != "anon")
    for h2 in (True, False):
        gain = _page_ms(cross, 20, rtt, 0.0, 1.0, h2=h2) - _page_ms(cross, 20, rtt, 0.0, 1.0, h2=h2, opts=without)
        assert gain > 0.9 * rtt, (h2, gain)
        assert _page_ms(home, 20, rtt, 0.0, 1.0, h2=h2) == pytest.approx(
            _page_ms(home, 20, rtt, 0.0, 1.0, h2=h2, opts=without))


def test_a_lost_tail_of_several_segments_waits_for_the_rto():
    """``tailrto``: a response wholly inside a first flight that a shallow buffer cuts loses its tail; the probe
    (2 srtt) repairs one segment, the rest waits for the RTO and a slow start from one segment (what the testbed's
    traces show: cwnd 1 after the timeout). So RTO min matters there, and a flight the buffer holds costs nothing."""
    path = model._Path(np.array([[10e6 / 8 / 1000 / tcp.MSS]]), np.array([[40.0]]), np.array([[0.0]]),
                       np.array([[1.0]]))  # 10 Mbit/s, 40 ms: BDP and buffer 34.5 segments
    def cost(iw, rto_min=200.0, tail=True):
        stack = tcp.Stack(bbr=np.array([[False]]), reno=np.array([[False]]), iw=np.array([[float(iw)]]),
                          rto_min=np.array([[rto_min]]), syn_rto=np.array([[1000.0]]), sndbuf=np.array([[0.0]]))
        return float(timeline._shared_loss_ms(0.0, 43.0, np.minimum(iw, 45.0), [], path, stack, tailrto=tail)[0, 0])
    assert cost(32) == 0.0  # 32 segments fit the buffer
    probe_only = cost(64, tail=False)
    assert probe_only == pytest.approx(40.0 + 2 * (40.0 + 34.5 * 40.0 / 34.5), rel=0.01)  # rtt + 2 srtt
    assert cost(64) > probe_only + 150.0  # the RTO's wait and the slow start's rounds
    assert cost(64, rto_min=50.0) < cost(64) - 100.0
