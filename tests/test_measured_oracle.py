"""MeasuredOracle on the committed testbed datasets (tb-v2 objects, tb-v3 and tb-v3-slow Chromium pages, tb-v2's own
pages; tb-v1): loading, exactness, sanity, page borrowing, the contrasts' reach, errors."""

import numpy as np
import pandas as pd
import pytest

from tailor.errors import OracleError
from tailor.oracle.measured import (_DATA, DEFAULT_DATASET, FLIGHT_TIE, KEYS, PAGE_DATASET, PAGE_EXTRA, MeasuredOracle,
                                    _anchor_space, _model_ms, load_medians, queue_bdp)
from tailor.oracle.select import select_oracle
from tailor.space import ConfigSpace
from tailor.testbed.analysis import best_vs_default, error_summary, loco_errors

DATASET = DEFAULT_DATASET


@pytest.fixture(scope="module")
def measured():
    return MeasuredOracle(DATASET)


def test_dataset_loads_with_coverage(measured):
    d = measured.describe()
    # objects from tb-v2, pages from the page campaign (tb-v3), which measured every core value of CC, IW, rto_min, and
    # its slower condition (tb-v3-slow)
    assert DATASET.name == "tb-v2" and PAGE_DATASET.name == "tb-v3" and [d.name for d in PAGE_EXTRA] == ["tb-v3-slow"]
    assert d["name"] == "measured-tb-v2+tb-edge-deep+tb-cellular-deep+tb-v3+tb-v3-slow"
    assert "wpt-3gslow" in set(measured.page_table.condition)
    assert {"edge-deep", "3g-regular-deep"} <= set(measured.table.condition) and d["buffer_unit"] == 3.0 and d["buffer_form"] == "flight"
    assert d["kind"] == "measured" and d["conditions"] >= 40
    assert {"object-10KB", "object-100KB", "object-1MB", "object-2MB"} <= set(measured.websites)
    assert len(measured.anchors) == 24 and d["median_reps"] >= 3
    assert measured.table[KEYS].drop_duplicates().shape[0] == 18  # objects: cubic/bbr/reno x IW 4/10/32 x HTTP/1.1/2
    assert len(d["pages_measured"]) == 3 and d["page_conditions"] >= 13
    pt = measured.page_table
    assert pt[pt.condition != "wpt-3gslow"]["n"].median() >= 10  # adaptive repetitions, not tb-v2's 3
    assert pt[pt.condition == "wpt-3gslow"]["n"].min() >= 6  # tb-v3-slow: 6 repetitions per cell
    own = MeasuredOracle(DATASET, page_dataset=DATASET)  # tb-v2's own (noisy) page loads stay readable
    assert own.name == "measured-tb-v2+tb-edge-deep+tb-cellular-deep" and len(own.describe()["pages_measured"]) >= 5
    fams = set(measured.table.merge(measured.conds, on="condition").condition)
    assert {"mm-att-lte-driving", "pan-nepal-india", "geo-viasat"} <= fams  # trace-driven, developing, satellite


def test_tb_v1_still_loads_without_pages():
    v1 = MeasuredOracle(_DATA / "tb-v1")
    assert v1.name == "measured-tb-v1" and len(v1.conds) == 25 and v1.page_table.empty
    assert all(s.kind == "object" for s in v1.websites.values())


def test_exact_at_measured_points(measured):
    space = _anchor_space(measured.anchors)
    bw, rtt, loss, q = measured._cond_values()
    for site in ("object-10KB", "object-100KB"):
        size = measured.websites[site].total_bytes
        pred = measured.mode_at(bw, rtt, loss, q, site, space)
        t = measured.table[measured.table.size_bytes == size]
        cidx = {c: i for i, c in enumerate(measured.conds.condition)}
        cols = {(c["tcp.congestion_control"], c["tcp.initial_cwnd"], c["tcp.rto_min_ms"], c["http.version"]): j
                for j, c in enumerate(space.configs)}
        got = [pred[cidx[r.condition], cols[tuple(getattr(r, k) for k in KEYS)]] for r in t.itertuples()]
        np.testing.assert_allclose(got, t["median"].to_numpy(), rtol=1e-9)


def test_exact_at_the_extra_page_campaigns_condition(measured):
    new = load_medians(PAGE_EXTRA[0], pages=True)
    for page, cell in new.groupby("page"):
        first = cell.iloc[0]
        space = _anchor_space(cell[KEYS])
        cols = {(c["tcp.congestion_control"], c["tcp.initial_cwnd"], c["tcp.rto_min_ms"], c["http.version"]): j
                for j, c in enumerate(space.configs)}
        q = queue_bdp(first.down_mbps, first.rtt_ms, first.queue_packets)
        pred = measured.mode_at([first.down_mbps], [first.rtt_ms], [first.loss], [q], page, space)[0]
        got = [pred[cols[tuple(getattr(r, k) for k in KEYS)]] for r in cell.itertuples()]
        np.testing.assert_allclose(got, cell["median"].to_numpy(), rtol=1e-9)


def _log_contrasts(x):
    lx = np.log(x)
    return lx - lx.mean(axis=-1, keepdims=True)


def test_contrasts_revert_to_the_models_far_from_the_measurements(measured):
    """Far below every measured condition the configurations' order is the model's (the level stays measured); near a
    measured condition it is the measurements'; without the reversion (reach = inf) it is not the model's far away."""
    space = ConfigSpace.named("core")
    far = ([0.03], [900.0], [0.0], [1.0])  # 30 kbit/s, 900 ms: x25 slower than any measured page condition
    site = measured.websites["page-light-1"]
    model = _model_ms(site, *far, space)
    got = measured.mode_at(*far, "page-light-1", space)
    np.testing.assert_allclose(_log_contrasts(got), _log_contrasts(model), atol=1e-3)
    assert abs(np.log(got / model).mean()) > 0.01  # the measured level, not the model's
    carried = MeasuredOracle(DATASET, reach=float("inf")).mode_at(*far, "page-light-1", space)
    assert np.abs(_log_contrasts(carried) - _log_contrasts(model)).max() > 0.05
    # half-way (distance = reach / 2 from the slowest condition): between the two
    near = ([0.78 / 4 ** 0.5], [200.0], [0.0], [1.0])
    m, r, c = (_log_contrasts(a) for a in (_model_ms(site, *near, space), measured.mode_at(*near, "page-light-1", space),
                                           MeasuredOracle(DATASET, reach=float("inf")).mode_at(*near, "page-light-1",
                                                                                                 space)))
    assert 0 < np.abs(r - m).max() < np.abs(c - m).max()


def test_reach_must_be_positive():
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(OracleError, match="'reach'"):
            MeasuredOracle(DATASET, reach=bad)


EDGE_DEEP = _DATA / "tb-edge-deep"


def test_buffer_unit_must_exceed_one():
    for bad in (1.0, 0.5, -2.0, float("nan")):
        with pytest.raises(OracleError, match="'buffer_unit'"):
            MeasuredOracle(DATASET, buffer_unit=bad)


def test_buffer_distance_reverts_contrasts_across_the_buffer():
    """At tb-v2's EDGE condition (one BDP) the oracle is exact; at the same link behind a 5.26-BDP buffer the buffer
    as a distance feature moves the configurations' order towards the model's, where the plain interpolation (buffer
    unit inf) carries the one-BDP contrasts unchanged (distance 0)."""
    space = _anchor_space(load_medians(DATASET)[KEYS])
    edge = load_medians(DATASET).query("condition == '2g-edge'").iloc[0]
    q1 = float(queue_bdp(edge.down_mbps, edge.rtt_ms, edge.queue_packets))
    at = ([edge.down_mbps], [edge.rtt_ms], [edge.loss])
    site = "object-100KB"
    plain, buffered = (MeasuredOracle(DATASET, pages="none", object_extra=(), buffer_unit=u) for u in (np.inf, 2.0))
    np.testing.assert_allclose(buffered.mode_at(*at, [q1], site, space), plain.mode_at(*at, [q1], site, space))
    model = _model_ms(buffered.websites[site], *at, [5.26], space)
    ratio = lambda o: _log_contrasts(o.mode_at(*at, [5.26], site, space)) - _log_contrasts(model)  # noqa: E731
    one_bdp = _log_contrasts(plain.mode_at(*at, [q1], site, space)) - _log_contrasts(_model_ms(
        buffered.websites[site], *at, [q1], space))
    np.testing.assert_allclose(ratio(plain), one_bdp, atol=1e-9)  # carried unchanged
    assert np.abs(ratio(buffered)).max() < 0.8 * np.abs(one_bdp).max()


def test_buffer_form_must_be_known():
    for bad in ("bdp", "", None):
        with pytest.raises(OracleError, match="'buffer_form'"):
            MeasuredOracle(DATASET, buffer_form=bad)


def test_flight_form_counts_the_buffer_only_where_the_response_overflows_a_queue():
    """``buffer_form`` "flight": a 10 KB response (7 packets) fits in 3g-regular's 18-packet queue and in the same link
    behind 5.26 BDP, so the buffer adds no distance there (but its tie-break) and the oracle returns the one-BDP
    row's measured ratios; a 1 MB response
    (724 packets) overflows both, and at the same link and RTT the distance is the queue form's (the packets' ratio is
    the BDPs' ratio); a 50 KB response (35 packets) overflows only the smaller queue: a distance between the two."""
    flight, queue = (MeasuredOracle(DATASET, pages="none", object_extra=(), buffer_form=f) for f in ("flight", "queue"))
    assert flight.describe()["buffer_form"] == "flight" and "share of the response" in flight.describe()["method"]
    g = load_medians(DATASET).query("condition == '3g-regular'").iloc[0]
    i = list(flight.conds.condition).index("3g-regular")
    query = np.array([[g.down_mbps, g.rtt_ms, g.loss, 5.26]])
    d_queue = queue._dist2(query)[0, i]
    assert d_queue > 1.0  # log 5.14 / log 4 squared
    d = {w: flight._dist2(query, flight._flight(w))[0, i] for w in ("object-10KB", "object-50KB", "object-1MB")}
    assert d["object-10KB"] == pytest.approx(FLIGHT_TIE * d_queue, rel=1e-9)  # the tie-break alone
    assert d["object-1MB"] == pytest.approx((1 + FLIGHT_TIE) * d_queue, rel=1e-9)
    assert 0 < d["object-50KB"] < d_queue
    assert queue._flight("object-10KB") is None  # the queue form reads no response size
    space = _anchor_space(load_medians(DATASET)[KEYS])
    at = ([g.down_mbps], [g.rtt_ms], [g.loss])
    ratio = lambda o, q: o.mode_at(*at, [q], "object-10KB", space) / _model_ms(  # noqa: E731
        o.websites["object-10KB"], *at, [q], space)
    q1 = float(queue_bdp(g.down_mbps, g.rtt_ms, g.queue_packets))
    np.testing.assert_allclose(ratio(flight, 5.26), ratio(flight, q1), rtol=1e-4)  # the measured row's ratios
    assert not np.allclose(ratio(queue, 5.26), ratio(queue, q1), rtol=1e-3)


@pytest.mark.skipif(not (EDGE_DEEP / "measurements.parquet").exists(), reason="tb-edge-deep is not in this checkout")
def test_extra_object_campaign_is_exact_at_its_conditions():
    oracle = MeasuredOracle(DATASET, pages="none", object_extra=(EDGE_DEEP,))
    assert oracle.describe()["object_extra"] == [str(EDGE_DEEP)] and "+tb-edge-deep" in oracle.name
    new = load_medians(EDGE_DEEP)
    for size, cell in new[new.condition == "edge-deep"].groupby("size_bytes"):
        first = cell.iloc[0]
        space = _anchor_space(cell[KEYS])
        cols = {(c["tcp.congestion_control"], c["tcp.initial_cwnd"], c["tcp.rto_min_ms"], c["http.version"]): j
                for j, c in enumerate(space.configs)}
        q = queue_bdp(first.down_mbps, first.rtt_ms, first.queue_packets)
        name = {10240: "object-10KB", 51200: "object-50KB", 102400: "object-100KB"}[int(size)]
        pred = oracle.mode_at([first.down_mbps], [first.rtt_ms], [first.loss], [q], name, space)[0]
        got = [pred[cols[tuple(getattr(r, k) for k in KEYS)]] for r in cell.itertuples()]
        np.testing.assert_allclose(got, cell["median"].to_numpy(), rtol=1e-9)


@pytest.mark.skipif(not (EDGE_DEEP / "measurements.parquet").exists(), reason="tb-edge-deep is not in this checkout")
def test_extra_object_campaign_with_a_clashing_condition_is_refused(tmp_path):
    t = pd.read_parquet(EDGE_DEEP / "measurements.parquet")
    t["condition"] = t["condition"].replace({"edge-deep": "2g-edge"})  # a tb-v2 name with other parameters
    t.to_parquet(tmp_path / "measurements.parquet")
    with pytest.raises(OracleError, match="condition name"):
        MeasuredOracle(DATASET, pages="none", object_extra=(tmp_path,))


def test_grid_queries_are_positive_and_sane(measured):
    space = ConfigSpace.named("core")
    g = measured.grid
    slow_far = g.cell(bw=1, rtt=400, loss=0.0)
    fast_near = g.cell(bw=50, rtt=20, loss=0.0)
    t = measured.mode_ms([slow_far, fast_near], "object-1MB", space)
    assert t.shape == (2, 60) and (t > 0).all()
    assert (t[0] > t[1]).all()  # a 1 MB object is slower on 1 Mbit / 400 ms than on 50 Mbit / 20 ms
    small = measured.mode_ms([fast_near], "object-10KB", space)
    assert (small < t[1]).all()  # bigger object, same path and config -> longer
    rtts = [g.cell(bw=10, rtt=r, loss=0.0) for r in (20, 50, 100, 250)]
    d = measured.mode_ms(rtts, "object-100KB", space)[:, space.default_index]
    assert np.all(np.diff(d) > 0), d  # default config: monotone in RTT
    theta = measured.noise_theta([slow_far, fast_near], "object-100KB")
    assert ((theta >= 0.005) & (theta <= 0.25)).all()


def test_pages_exact_at_measured_points_and_borrowed_elsewhere(measured):
    space = _anchor_space(measured.anchors)
    bw, rtt, loss, q = measured._cond_values()
    cidx = {c: i for i, c in enumerate(measured.conds.condition)}
    cols = {(c["tcp.congestion_control"], c["tcp.initial_cwnd"], c["tcp.rto_min_ms"], c["http.version"]): j
            for j, c in enumerate(space.configs)}
    t = measured.page_table[measured.page_table.page == "page-medium-2"]
    pred = measured.mode_at(bw, rtt, loss, q, "page-medium-2", space)
    got = [pred[cidx[r.condition], cols[tuple(getattr(r, k) for k in KEYS)]] for r in t.itertuples()]
    np.testing.assert_allclose(got, t["median"].to_numpy(), rtol=1e-9)
    core, g = ConfigSpace.named("core"), measured.grid
    cells = [g.cell(bw=1, rtt=400, loss=0.0), g.cell(bw=50, rtt=20, loss=0.0)]
    for page in ("page-light-1", "page-heavy-4"):  # measured, and borrowed from the nearest measured page
        m = measured.mode_ms(cells, page, core)
        assert m.shape == (2, len(core)) and (m > 0).all() and (m[0] > m[1]).all()
    assert measured.describe()["pages_borrowed"]["page-heavy-4"] in measured.describe()["pages_measured"]
    only = MeasuredOracle(DATASET, pages="measured")
    with pytest.raises(OracleError, match="page-heavy-4"):
        only.mode_ms(cells, "page-heavy-4", core)
    reno = ConfigSpace({"tcp.congestion_control": ["cubic", "reno"]})
    assert (MeasuredOracle(DATASET, strict=True).mode_ms(cells, "page-light-1", reno) > 0).all()  # tb-v3 loaded reno
    with pytest.raises(OracleError, match="not measured"):  # tb-v2 did not load reno in Chromium
        MeasuredOracle(DATASET, strict=True, page_dataset=DATASET).mode_ms(cells, "page-light-1", reno)


def test_clear_errors(measured, tmp_path):
    with pytest.raises(OracleError, match="no measured dataset"):
        MeasuredOracle(tmp_path)
    with pytest.raises(OracleError, match="pages"):
        MeasuredOracle(DATASET, pages="some")
    with pytest.raises(OracleError, match="page-nope"):
        measured.mode_ms([0], "page-nope", ConfigSpace.named("core"))
    strict = MeasuredOracle(DATASET, strict=True)
    with pytest.raises(OracleError, match="not measured"):
        strict.mode_ms([0], "object-10KB", ConfigSpace.named("core"))  # IW 16/64 and rto_min 50 are not measured
    ok, why = measured.covers(ConfigSpace.named("core"), ["object-10KB", "page-heavy-4"])
    assert not ok


def test_auto_stays_model_while_core_knobs_are_unmeasured():
    assert select_oracle("auto").kind == "model"
    assert select_oracle("measured").kind == "measured"
    with pytest.raises(OracleError, match="oracle"):
        select_oracle("nope")


def test_interpolation_error_and_best_config_share(measured):
    err = error_summary(loco_errors(measured))
    assert err["points"] > 3000 and err["median_abs"] < 0.25, err
    perr = error_summary(loco_errors(measured, kind="page"))
    assert perr["points"] > 100 and perr["median_abs"] < 0.35, perr
    best = best_vs_default(measured.table)
    assert (best.gain > 0.05).mean() > 0.3  # tuning pays off in a good share of cells
    assert best.best.value_counts(normalize=True).max() < 0.6  # the seeds' observation: no single best config
