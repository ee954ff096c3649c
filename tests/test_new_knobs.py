"""Issue 16 knobs: tcp.rcvbuf_bytes, tcp.cwnd_clamp, http.alt_svc in the registry and the oracles.

The oracles either model a knob or refuse a space that sets it: never an answer that silently ignores it.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from tailor.errors import OracleError, ParameterError
from tailor.oracle import ModelOracle
from tailor.oracle.measured import DEFAULT_DATASET, MeasuredOracle
from tailor.space import ConfigSpace, Configuration, load_registry

NEW = {"tcp.rcvbuf_bytes": 0, "tcp.cwnd_clamp": 0, "http.alt_svc": True}


def test_registry_has_the_new_knobs_unset_by_default_and_outside_named_spaces():
    reg = load_registry()
    for name, default in NEW.items():
        assert reg[name].default == default and reg[name].per_connection
        for space, spec in reg.spaces.items():  # the spaces that existed before them; "quic" is made for alt_svc
            assert space == "quic" or name not in spec, f"{name} must not change the named space {space}"
    assert set(reg["tcp.cwnd_clamp"].apply) == {"sockops"}
    assert set(reg["tcp.rcvbuf_bytes"].apply) == {"sockops", "setsockopt"}
    assert list(reg["http.alt_svc"].apply) == ["edge"]
    # Defaults change no configuration id: existing tables and results keep theirs.
    assert Configuration(NEW).id == Configuration({}).id
    with pytest.raises(ParameterError, match="outside"):
        reg["tcp.cwnd_clamp"].check(70000)


def test_tailor_knobs_lists_them_with_the_model_status():
    out = subprocess.run([sys.executable, "-m", "tailor", "knobs"], capture_output=True, text=True, check=True).stdout
    lines = {ln.split()[0]: ln for ln in out.splitlines()}
    assert "model=modelled" in lines["tcp.cwnd_clamp"]
    assert "model=refused" in lines["tcp.rcvbuf_bytes"] and "model=refused" in lines["http.alt_svc"]
    assert "model=modelled" in lines["tcp.sndbuf_bytes"] and "model=no-effect" in lines["tcp.nodelay"]


@pytest.fixture(scope="module")
def model():
    return ModelOracle()


@pytest.mark.parametrize("knob,values", [("tcp.rcvbuf_bytes", [0, 65536]), ("http.alt_svc", [True, False])])
def test_model_refuses_knobs_it_does_not_model(model, knob, values):
    space = ConfigSpace({"tcp.initial_cwnd": [10, 32], knob: values})
    with pytest.raises(OracleError, match=f"does not model {knob}"):
        model.mode_ms([0], "object-100KB", space)
    # At its default only, the knob changes nothing and is accepted.
    only_default = ConfigSpace({"tcp.initial_cwnd": [10, 32], knob: values[:1]})
    assert model.mode_ms([0], "object-100KB", only_default).shape == (1, 2)


def test_model_cwnd_clamp_caps_rate_and_first_flight(model):
    space = ConfigSpace({"tcp.initial_cwnd": [10, 32], "tcp.cwnd_clamp": [0, 8, 20, 60000]})
    label = {(c["tcp.initial_cwnd"], c["tcp.cwnd_clamp"]): i for i, c in enumerate(space.configs)}
    fat = model.mode_ms([model.grid.cell(100, 150, 0.0, 1.0)], "object-2MB", space)[0]
    # On a long fat path a small clamp is a rate cap: slower than no clamp, and 8 slower than 20.
    assert fat[label[10, 8]] > fat[label[10, 20]] > fat[label[10, 0]]
    # A clamp no window reaches changes nothing.
    assert fat[label[10, 60000]] == pytest.approx(fat[label[10, 0]])
    # IW 32 under clamp 8 is IW 8: the first flight is clamped too.
    small = model.mode_ms([model.grid.cell(5, 100, 0.0, 4.0)], "object-100KB", space)[0]
    assert small[label[32, 8]] > small[label[32, 0]]
    assert small[label[32, 8]] == pytest.approx(small[label[10, 8]])


def test_clamp_equals_an_equal_send_buffer(model):
    """The clamp enters the model as a send buffer of clamp x MSS bytes (MODEL.md 'Cwnd clamp')."""
    a = ConfigSpace({"tcp.cwnd_clamp": [0, 20]})
    b = ConfigSpace({"tcp.sndbuf_bytes": [0, 20 * 1448]})
    cells = [model.grid.cell(50, 100, 0.01, 1.0), model.grid.cell(5, 400, 0.0, 0.5)]
    np.testing.assert_allclose(model.mode_ms(cells, "page-medium-2", a), model.mode_ms(cells, "page-medium-2", b))


@pytest.mark.skipif(not (DEFAULT_DATASET / "measurements.parquet").exists(), reason="no measured dataset in data/oracle")
def test_measured_oracle_refuses_and_anchors():
    measured = MeasuredOracle(DEFAULT_DATASET)
    with pytest.raises(OracleError, match="does not model tcp.rcvbuf_bytes"):
        measured.mode_ms([0], "object-100KB", ConfigSpace({"tcp.rcvbuf_bytes": [0, 65536]}))
    clamp = ConfigSpace({"tcp.cwnd_clamp": [0, 8]})
    t = measured.mode_ms([measured.grid.cell(100, 150, 0.0, 1.0)], "object-2MB", clamp)[0]
    assert t[1] > t[0]  # anchored on the unclamped measurement, the model's clamp on top
    ok, why = measured.covers(clamp, ["object-2MB"])
    assert not ok and "cwnd_clamp" in why  # not measured: strict refuses
