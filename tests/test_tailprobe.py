"""The model's ``tails="probe"``: a response wholly inside its first flight whose tail the queue drops waits for the
tail-loss probe and the RTO (MODEL.md 6f), checked against the kernel's lone responses (data/testbed/lone-tail-*)."""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tailor.errors import OracleError
from tailor.oracle import tcp
from tailor.oracle.model import ModelOracle, _Path, _share
from tailor.testbed.sharedlink import MTU, SEGMENT_BYTES

DATA = Path(__file__).resolve().parents[1] / "data" / "testbed"


def _stack(iw, rto_min=200.0):
    a = lambda v: np.array([[v]], dtype=float)  # noqa: E731
    return tcp.Stack(bbr=np.array([[False]]), reno=np.array([[False]]), iw=a(iw), rto_min=a(rto_min),
                     syn_rto=a(1000.0), sndbuf=a(0.0))


def _alone(rate_mbit, rtt, queue_packets, stack):
    """The share of a connection alone on a drop-tail link of ``queue_packets``, as the model's objects get it."""
    bdp_packets = rate_mbit * 1e6 / 8 * rtt / 1000 / MTU
    path = _Path(np.array([[rate_mbit * 1e6 / 8 / 1000 / tcp.MSS]]), np.array([[rtt]]), np.array([[0.0]]),
                 np.array([[queue_packets / bdp_packets]]))
    return _share(path, stack, 1.0, 1.0)


def _time(d, iw, sh, tails, rto_min=200.0):
    st = _stack(iw, rto_min)
    return float(tcp.transfer_ms(np.array([[d]], dtype=float), st.iw, sh, st, tails=tails)[0, 0])


def test_the_probe_prices_only_a_lost_tail_that_no_later_segment_reveals():
    sh = _alone(10, 60, 50, _stack(200))
    for d in (20, 40):  # the flight fits the queue: nothing lost either way
        assert _time(d, 200, sh, "probe") == _time(d, 200, sh, "sack")
    for d in (90, 120):  # inside IW 200's flight, over the queue: the probe (and the RTO beyond one segment) waits
        assert _time(d, 200, sh, "probe") > _time(d, 200, sh, "sack") + 4 * 60
    for d in (90, 120):  # IW 64: later segments follow the lost tail and reveal it, as v6 charges
        assert _time(d, 64, sh, "probe") == _time(d, 64, sh, "sack")
    # a lower RTO min shortens a tail of several segments; one lost segment is the probe's alone
    assert _time(90, 200, sh, "probe", rto_min=20) < _time(90, 200, sh, "probe")
    lone = 53.5  # the queue holds 50 packets, 51.8 segments, and the one in service: 0.7 segment lost
    assert _time(lone, 200, sh, "probe", rto_min=20) == pytest.approx(_time(lone, 200, sh, "probe"))
    assert _time(lone, 200, sh, "probe") > _time(lone, 200, sh, "sack") + 2 * 60
    with pytest.raises(ValueError, match="tails"):
        tcp.burst_loss_ms(np.array([[90.0]]), np.array([[200.0]]), sh, _stack(200), tails="rack")


def test_the_oracle_names_the_variant_and_refuses_what_it_does_not_model():
    """v7 (the default) takes the probe; ``tails="sack"`` is v6, by its name; both page models take either."""
    from tailor.oracle.model import V6, VARIANTS, VERSION
    from tailor.oracle.select import select_oracle

    assert ModelOracle().tails == "probe" and ModelOracle().name == VERSION == "model-tcp-v7"
    assert ModelOracle(tails="sack").name == V6 == "model-tcp-v6"
    assert ModelOracle(pages="timeline", tails="sack").name == V6 + "+timeline"
    assert select_oracle("model-v6").name == V6 and select_oracle("model").name == select_oracle("model-tailprobe").name
    assert all("tails" in kwargs for kwargs in VARIANTS.values())  # explicit: measured._model_ms defaults to v6's
    with pytest.raises(OracleError, match="tails"):
        ModelOracle(tails="rack")


def _lone_measurements():
    rows = []
    for f in sorted(DATA.glob("lone-tail-*.json")):
        res = json.loads(f.read_text())
        s = res["setup"]
        for run in res["runs"]:
            for b, t in zip(run["response_bytes"], run["response_ms"]):
                rows.append((s["rate_mbit"], s["rtt_ms"], run["queue_packets"], run["iw"], b / SEGMENT_BYTES, t))
    return rows


def test_the_probe_matches_the_kernel_s_lone_responses_where_v6_does_not():
    """Every lone response of data/testbed/lone-tail-*.json (`tailor testbed shared-link --lone`, CUBIC, five links,
    queues of 0.5-1.3 BDP) whose first flight overflows the queue and ends the response: the model's time with
    ``probe`` within 15% at the median, where ``sack`` (v6) is at least 40% short (MODEL.md 6f). Nothing in the
    rule is fitted to these files: it is the page timeline's (section 3a)."""
    rows = _lone_measurements()
    assert len({r[:3] for r in rows}) >= 5  # five (rate, RTT, queue) links at least
    err = {"sack": [], "probe": []}
    for rate, rtt, queue, iw, d, t in rows:
        if not queue + 1 < d <= iw:  # only responses whose own flight overflows the queue and has no later segment
            continue
        sh = _alone(rate, rtt, queue, _stack(iw))
        for tails in err:
            err[tails].append(_time(d, iw, sh, tails) / t - 1)
    assert len(err["probe"]) >= 60
    assert np.median(np.abs(err["probe"])) <= 0.15
    assert np.median(err["sack"]) <= -0.40


SHALLOW = Path(__file__).resolve().parents[1] / "data" / "oracle" / "tb-v3-shallow"


def _shallow_medians(pages: bool):
    from tailor.oracle.measured import load_medians

    return load_medians(SHALLOW, pages=pages)


def test_a_page_keeps_v6_s_tails_and_an_object_takes_the_probe():
    """``tails`` applies to objects and responses only: a page's levels keep ``sack`` (MODEL.md 6f, tb-v3-shallow)."""
    from tailor.oracle.measured import _anchor_space, _model_ms
    from tailor.oracle.websites import default_catalog

    cat = default_catalog()
    cell = pd.DataFrame([("cubic", iw, 200, "2") for iw in (10, 16, 32, 64)], columns=["cc", "iw", "rto_min_ms", "http"])
    space = _anchor_space(cell)
    at = dict(bw=[10.0], rtt=[60.0], loss=[0.0], q=[16 / 50.0])  # 16 packets at 10 Mbit/s, 60 ms
    page_v6, page_probe = (_model_ms(cat["page-light-4"], **at, space=space, tails=t) for t in ("sack", "probe"))
    assert np.array_equal(page_v6, page_probe)  # its 22-segment document would lose its tail at IW 32 and 64
    obj_v6, obj_probe = (_model_ms(cat["object-50KB"], **at, space=space, tails=t) for t in ("sack", "probe"))
    assert (obj_probe >= obj_v6).all() and (obj_probe > 1.5 * obj_v6).any()


def test_the_shallow_campaign_shows_objects_pay_the_probe_and_pages_do_not():
    """data/oracle/tb-v3-shallow (2026-12-02, two links with a 16-packet queue): a 50 KB response at IW 64 (35
    segments inside a flight the queue overflows) takes at least 1.8x IW 32's, which only ``probe`` prices. On
    page-light-4 (a 22-segment document that IW 32 and 64 send in one flight the queue overflows) the page load at
    IW 32 or 64 over IW 16 is within 15% over HTTP/2, and v6's ratios are nearer the measured ones than ``probe``'s
    on the page's levels would be (MODEL.md 6f)."""
    from tailor.oracle import model
    from tailor.oracle.measured import _anchor_space, queue_bdp
    from tailor.oracle.websites import default_catalog

    objs = _shallow_medians(pages=False)
    objs = objs[(objs["cc"] == "cubic") & (objs["rto_min_ms"] == 200)]
    for (cond, size, http), cell in objs.groupby(["condition", "size_bytes", "http"]):
        t = dict(zip(cell["iw"], cell["median"]))
        if size == 51200:
            assert t[64] > 1.8 * t[32], (cond, http, t)
        else:  # 20 KB fits the queue; 100 KB goes on after its flight, whose loss later segments reveal
            assert t[64] < 1.2 * t[32], (cond, size, http, t)
    pages = _shallow_medians(pages=True)
    pages = pages[(pages["page"] == "page-light-4") & (pages["cc"] == "cubic") & (pages["rto_min_ms"] == 200)]
    assert len(pages.groupby(["condition", "http"])) == 4
    site = default_catalog()["page-light-4"]
    err = {"sack": [], "probe": []}
    for (cond, http), cell in pages.groupby(["condition", "http"]):
        cell = cell.sort_values("iw")
        t = dict(zip(cell["iw"], cell["median"]))
        if http == "2":
            assert max(t[32], t[64]) < 1.15 * t[16], (cond, t)
        first = cell.iloc[0]
        path = [np.array([[v]], dtype=float) for v in (first["down_mbps"], first["rtt_ms"], 0.0,
                                                      queue_bdp(first["down_mbps"], first["rtt_ms"], first["queue_packets"]))]
        stack, _ = model._stack(_anchor_space(cell[["cc", "iw", "rto_min_ms", "http"]]))
        for tails in err:  # the page's levels priced with v6's tails, or with the probe's (``levels_ms``)
            pred = dict(zip(cell["iw"], model.levels_ms(site, *path, stack, http == "2", tails)[0]))
            err[tails] += [abs(np.log(pred[iw] / pred[16] * t[16] / t[iw])) for iw in (32, 64)]
    assert np.median(err["sack"]) < np.median(err["probe"])
