"""QuicOracle: the measured QUIC dataset (data/oracle/tb-v2/quic) over the `quic` space."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tailor.errors import OracleError
from tailor.oracle.base import ConditionGrid
from tailor.oracle.quic import QUIC_DATASET, QuicOracle
from tailor.oracle.select import select_oracle
from tailor.space import ConfigSpace

pytestmark = pytest.mark.skipif(not (QUIC_DATASET / "measurements.parquet").exists(), reason="no QUIC dataset")

SPACE = ConfigSpace.named("quic")


def _measured_condition(name: str = "3g-peak"):
    m = pd.read_parquet(QUIC_DATASET / "measurements.parquet")
    m = m[m["ok"].astype(bool) & np.isfinite(m["completion_ms"])]
    m = m[m["condition"] == name]
    r = m.iloc[0]
    q = r.queue_packets * 1500 / (r.down_mbps * 1e6 / 8 * r.rtt_ms / 1000)
    return m, ConditionGrid((float(r.down_mbps),), (float(r.rtt_ms),), (float(r.loss),), (float(q),))


def _config(**knobs) -> int:
    want = {"http.alt_svc": True, "http.version": "1.1", "quic.initial_packet_size": 1280,
            "quic.initial_stream_receive_window": 524288, **{k.replace("__", "."): v for k, v in knobs.items()}}
    return next(i for i, c in enumerate(SPACE.configs) if all(c[k] == v for k, v in want.items()))


def test_at_a_measured_condition_the_oracle_returns_the_measured_medians():
    m, grid = _measured_condition()
    oracle = QuicOracle(grid=grid)
    size = 102400
    t = oracle.mode_ms([0], "object-100KB", SPACE)[0]
    med = m[m["size_bytes"] == size].groupby(["http", "quic_config"])["completion_ms"].median()
    assert t[_config()] == pytest.approx(med[("3", "default")], rel=1e-9)
    assert t[_config(quic__initial_packet_size=1452)] == pytest.approx(med[("3", "pkt1452")], rel=1e-9)
    assert t[_config(quic__initial_stream_receive_window=65536)] == pytest.approx(med[("3", "win-small")], rel=1e-9)
    assert t[_config(**{"http.alt_svc": False, "http.version": "2"})] == pytest.approx(med[("2", "default")], rel=1e-9)
    # HTTP/3 does not depend on http.version (that knob acts on TCP connections)
    assert t[_config(**{"http.version": "2"})] == t[_config()]
    # an unmeasured combination adds the two measured effects in log time
    both = t[_config(quic__initial_packet_size=1452, quic__initial_stream_receive_window=65536)]
    assert both == pytest.approx(med[("3", "pkt1452")] * med[("3", "win-small")] / med[("3", "default")], rel=1e-9)
    # TCP over HTTP/1.1 was not measured: HTTP/2's ratio on the model's HTTP/1.1 time (the same for one object)
    assert t[_config(**{"http.alt_svc": False})] == pytest.approx(t[_config(**{"http.alt_svc": False, "http.version": "2"})])


def test_streams_variant_is_measured_but_not_a_point_of_the_space():
    oracle = QuicOracle()
    assert "streams1-idle5s" in oracle.outside
    assert oracle.variants["default"] == (1280, 524288)
    assert set(oracle.websites) == {"object-10KB", "object-100KB", "object-1MB", "object-2MB"}


def test_strict_refuses_compositions_and_unanswered_knobs_are_refused():
    _, grid = _measured_condition()
    with pytest.raises(OracleError, match="not measured"):
        QuicOracle(grid=grid, strict=True).mode_ms([0], "object-10KB", SPACE)
    space = ConfigSpace({"http.alt_svc": (True, False), "quic.max_incoming_streams": (100, 1)})
    with pytest.raises(OracleError, match="quic.max_incoming_streams"):
        QuicOracle(grid=grid).mode_ms([0], "object-10KB", space)


def test_between_conditions_times_are_finite_and_quic_beats_tcp_on_small_objects():
    oracle = QuicOracle()
    cells = oracle.grid.cells([2.0, 20.0, 0.5], [150.0, 40.0, 800.0], [0.0, 0.001, 0.02], [1.0, 1.0, 4.0])
    t = oracle.mode_ms(cells, "object-10KB", SPACE)
    assert np.isfinite(t).all() and (t > 0).all()
    # one round trip less for the handshake: HTTP/3 faster than TCP + TLS for a 10 KB object
    assert np.all(t[:, _config()] < t[:, _config(**{"http.alt_svc": False, "http.version": "2"})])


def test_auto_picks_the_quic_oracle_for_the_quic_space():
    oracle = select_oracle("auto", "quic")
    assert isinstance(oracle, QuicOracle)
    assert "QUIC" in oracle.validation["reason"]
    assert not isinstance(select_oracle("model", "quic"), QuicOracle)
