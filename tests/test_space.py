"""Knob registry and configuration spaces."""

import json

import numpy as np
import pytest

from tailor.errors import ParameterError
from tailor.space import AllowedConfig, ConfigSpace, Configuration, load_registry
from tailor.space.knobs import KNOBS_PATH


def test_registry_covers_the_seed_knobs_and_defaults():
    reg = load_registry()
    assert reg["tcp.congestion_control"].values == ("cubic", "bbr", "reno")
    expect = {"tcp.congestion_control": "cubic", "tcp.initial_cwnd": 10, "tcp.syn_rto_ms": 1000, "http.version": "1.1",
              "http2.max_concurrent_streams": 100, "http2.initial_window_size": 65535, "http2.max_frame_size": 16384,
              "http2.header_table_size": 4096, "http2.max_header_list_size": 16384}
    assert {k: reg[k].default for k in expect} == expect
    assert not reg["tcp.slow_start_after_idle"].per_connection
    assert reg["tcp.rto_min_ms"].bounds == (8, 200)  # TCP_BPF_RTO_MIN can only lower


def test_every_knob_has_apply_and_doc():
    raw = json.loads(KNOBS_PATH.read_text())
    for knob in raw["knobs"]:
        assert knob["apply"] and knob["doc"], knob["name"]


def test_configuration_id_is_stable_and_ignores_defaults():
    a = Configuration({"tcp.initial_cwnd": 32})
    b = Configuration({"tcp.initial_cwnd": 32, "tcp.congestion_control": "cubic"})
    assert a == b and hash(a) == hash(b) and a.id == b.id
    assert Configuration({}).id != a.id
    assert a.id == "c-" + __import__("hashlib").sha1(b'{"tcp.initial_cwnd": 32}').hexdigest()[:10]


@pytest.mark.parametrize("values,needle", [
    ({"tcp.initial_cwnd": 0}, r"outside \[1, 256\]"),
    ({"tcp.congestion_control": "dctcp"}, "not one of"),
    ({"tcp.rto_min_ms": 300}, r"outside \[8, 200\]"),
    ({"tcp.timestamps": False}, "host-wide"),
    ({"tcp.nodelay": 1}, "not a boolean"),
    ({"no.such": 1}, "unknown knob"),
])
def test_invalid_values_name_knob_and_reason(values, needle):
    with pytest.raises(ParameterError, match=needle):
        Configuration(values)


def test_allowed_config_restricts_space():
    space = ConfigSpace.named("core", "NoBBR,NoHighICW")
    assert all(c["tcp.congestion_control"] != "bbr" and c["tcp.initial_cwnd"] <= 10 for c in space.configs)
    assert space.configs[space.default_index] == Configuration({})
    assert len(ConfigSpace.named("core", "tcp.initial_cwnd<=16")) == 36


def test_allowed_config_cannot_exclude_default():
    with pytest.raises(ParameterError, match="excludes the default"):
        ConfigSpace.named("core", "tcp.congestion_control!=cubic")


def test_bad_allowed_config_text():
    with pytest.raises(ParameterError, match="'allowed'"):
        AllowedConfig.parse("NoFoo")


def test_lhs_is_distinct_spread_and_seeded():
    space = ConfigSpace.named("core")
    a = space.lhs(6, np.random.default_rng(1))
    assert len(set(a)) == 6 and a == space.lhs(6, np.random.default_rng(1))
    ccs = {space.configs[i]["tcp.congestion_control"] for i in space.lhs(3, np.random.default_rng(2))}
    assert len(ccs) == 3  # one sample per stratum of the categorical knob


def test_encoding_shape_and_range():
    space = ConfigSpace.named("core")
    x = space.encode()
    assert x.shape == (60, 3 + 1 + 2 + 1) and x.min() >= 0 and x.max() <= 1
    assert len({tuple(r) for r in x}) == 60  # injective
