"""Scenarios: generators, trace importers, the scenario file format (fast: a few seconds)."""

from pathlib import Path

import numpy as np
import pytest

from tailor.errors import ParameterError, ScenarioError
from tailor.scenario import BUILTIN_SCENARIOS, generate, load_mahimahi, load_scenario, load_throughput_series, \
    save_scenario
from tailor.scenario.families import CELLULAR_BUFFER_BDP
from tailor.scenario.importers import load_trace

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT / "data" / "traces"
SITES = ["page-a", "page-b", "page-c", "object-1MB"]


def fingerprint(sc):
    return [(s.session_id, s.client, s.start_s, s.loads, s.conditions.buffer_bdp,
             *(tuple(getattr(s.conditions, f)) for f in ("t_s", "bw_mbps", "rtt_ms", "loss"))) for s in sc.sessions]


def load_values(sc, access=None):
    """(bw, rtt, loss) at every page load, optionally of one access type."""
    rows = [s.conditions.at(t) for s in sc.sessions for t, _ in s.loads if access in (None, s.client.access)]
    return np.array(rows).T


@pytest.fixture(scope="module")
def default():
    return generate("default", 1500, seed=0, websites=SITES)


# ---- generators ------------------------------------------------------------------------------------------

def test_same_seed_same_scenario_and_different_seed_differs():
    a, b, c = (generate("default", 200, seed=s, websites=SITES) for s in (7, 7, 8))
    assert fingerprint(a) == fingerprint(b)
    assert fingerprint(a) != fingerprint(c)


@pytest.mark.parametrize("name", BUILTIN_SCENARIOS)
def test_every_builtin_generates_valid_sessions(name):
    sites = [*SITES, "search-19KB", "search-121KB"]  # mobile-search loads the search responses, the others the rest
    sc = generate(name, 120, seed=1, websites=sites)
    assert len(sc.sessions) == 120 and sc.chunk_s == 5.0 and sc.provenance["sources"]
    search = name.startswith("mobile-search")
    assert set(sc.websites()) <= (set(sites) - set(SITES) if search else set(SITES))
    assert all(0 <= s.start_s <= (24 if name == "mobile-search-day" else 4) * 3600 for s in sc.sessions)


def test_a_population_of_ones_own_tiers_draws_every_session_from_its_traces(tmp_path):
    """``generate(tiers=...)``: the caller's tiers replace a family's; a trace-driven tier's sessions take their
    bandwidth, chunk by chunk, from its traces (paths under data/traces), and RTT, loss and buffer from the tier."""
    from tailor.scenario.facts import Condition
    from tailor.scenario.families import DEVICES_HOME, Tier
    trace = "norway_bus_11"
    from tailor.scenario.importers import MIN_BW_MBPS
    chunks = np.maximum(load_trace(TRACES / trace, 5.0)[1], MIN_BW_MBPS)
    own = (("a", Tier("a-20ms", "wifi", 0.5, *(Condition(1.0, 20.0, 0.001, "test"),) * 2, 2.0, ("r1",), DEVICES_HOME,
                      traces=(trace,), trace_share=1.0)),
           ("b", Tier("b-200ms", "3g", 0.5, *(Condition(3.0, 200.0, 0.01, "test"),) * 2, 5.0, ("r2",), DEVICES_HOME)))
    sc = generate("mine", 200, seed=3, websites=SITES, tiers=own)
    assert sc.name == "mine" and sc.provenance["families"] == {"a": 0.5, "b": 0.5}
    assert sc.provenance["traces"] == {trace: f"data/traces/{trace}"}
    by_access = {a: [s for s in sc.sessions if s.client.access == a] for a in ("wifi", "3g")}
    assert len(by_access["wifi"]) > 50 and len(by_access["3g"]) > 50 and len(sc.sessions) == 200
    for s in by_access["wifi"]:  # every chunk's bandwidth is one of the trace's (4 significant digits)
        assert s.conditions.buffer_bdp == 2.0
        assert (np.abs(s.conditions.bw_mbps[:, None] / chunks[None, :] - 1.0).min(axis=1) < 1e-3).all()
    rtt = np.median([r for s in by_access["3g"] for r in s.conditions.rtt_ms])
    assert 150 < rtt < 260 and {s.conditions.buffer_bdp for s in by_access["3g"]} == {5.0}
    p = tmp_path / "mine.scn"
    save_scenario(sc, p)
    assert fingerprint(load_scenario(p)) == fingerprint(sc)
    with pytest.raises(ParameterError, match="tiers"):
        generate("mine", 10, seed=3, websites=SITES, tiers=(own[0],))  # weights must sum to 1
    with pytest.raises(ParameterError, match="name"):
        generate("cellular", 10, seed=3, websites=SITES, tiers=own)  # a built-in's name would mislabel it


def test_default_covers_access_types_and_has_reasonable_size(default):
    access = {s.client.access for s in default.sessions}
    assert {"cable", "dsl", "fiber", "lte", "3g", "2g", "geo-satellite", "leo-satellite", "cellular", "wired"} <= access
    assert 8 <= default.n_loads / len(default.sessions) <= 12
    assert {s.client.device for s in default.sessions} == {"desktop", "android", "ios"}


def test_clients_are_unique_addresses_grouped_into_prefixes_with_history(default):
    clients = {}
    for s in default.sessions:
        assert clients.setdefault(s.client.client_id, s.client) == s.client  # one identity per address
        assert s.client.client_id.rsplit(".", 1)[0] == s.client.prefix.rsplit(".", 1)[0]
    per_prefix = np.bincount(np.unique([s.client.prefix for s in default.sessions], return_inverse=True)[1])
    assert len(clients) / len(set(per_prefix)) > 1 and np.median(per_prefix) >= 4  # sessions per prefix
    assert len(default.sessions) / len(clients) == pytest.approx(3, rel=0.01)
    prefixes_per_asn = {}
    for c in clients.values():
        prefixes_per_asn.setdefault(c.asn, set()).add(c.prefix)
    assert max(len(p) for p in prefixes_per_asn.values()) > 1


def test_sessions_are_piecewise_stationary_in_chunks(default):
    n_changes = [len(s.conditions.change_points()) for s in default.sessions]
    assert np.mean(n_changes) > 0.5
    for s in default.sessions[:200]:
        assert np.allclose(s.conditions.t_s % default.chunk_s, 0)


def test_broadband_us_matches_the_fcc_plus_table():
    bw, rtt, loss = load_values(generate("broadband-us", 400, seed=2, websites=SITES))
    assert 10 <= np.median(bw) <= 500 and 8 <= np.median(rtt) <= 40  # FCC+ Table 4 ranges
    assert np.median(loss) < 0.003
    assert {s.conditions.buffer_bdp for s in generate("broadband-us", 50, seed=2).sessions} == {1.0}


def test_cellular_2g_is_slow_and_buffers_are_deep():
    sc = generate("cellular", 600, seed=3, websites=SITES)
    bw2g, rtt2g, _ = load_values(sc, "2g")
    assert np.median(bw2g) < 0.3 and np.percentile(bw2g, 90) < 0.5 and np.median(rtt2g) > 600
    bw4g, _, _ = load_values(sc, "lte")
    assert 3 < np.median(bw4g) < 20
    assert {s.conditions.buffer_bdp for s in sc.sessions} == {CELLULAR_BUFFER_BDP} and CELLULAR_BUFFER_BDP > 3


def test_satellite_rtts():
    sc = generate("satellite", 300, seed=4, websites=SITES)
    assert np.median(load_values(sc, "geo-satellite")[1]) > 500
    assert np.median(load_values(sc, "leo-satellite")[1]) < 80


def test_workshop_grid_has_one_family_per_exact_point():
    sc = generate("workshop-grid", 600, seed=5, websites=SITES)
    points = {(float(s.conditions.bw_mbps[0]), float(s.conditions.rtt_ms[0]), float(s.conditions.loss[0]))
              for s in sc.sessions}
    assert len(points) == 48 and {p[0] for p in points} == {0.3, 1.0, 5.0}
    asns = {}
    for s in sc.sessions:
        asns.setdefault(s.client.asn, set()).add((s.conditions.bw_mbps[0], s.conditions.rtt_ms[0], s.conditions.loss[0]))
    assert all(len(p) == 1 for p in asns.values())  # an ISP never spans two grid points


def test_load_scenario_by_name_and_unknown_name():
    sc = load_scenario("cellular", n_sessions=30, seed=1, websites=SITES)
    assert len(sc.sessions) == 30 and sc.name == "cellular"
    with pytest.raises(ScenarioError, match="neither a scenario file nor a built-in"):
        load_scenario("no-such-scenario")


# ---- importers ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name, mean", [("Verizon-EVDO-driving.down", 0.52), ("TMobile-LTE-short.down.1s.tsv", 16.70),
                                        ("ATT-LTE-driving.down.1s.tsv", 5.17), ("norway_bus_11", 1.27),
                                        ("0.57mbps-poisson.trace", 0.557)])
def test_shipped_trace_means_match_facts(name, mean):
    t, bw = load_trace(TRACES / name, 1.0)  # FACTS.md §1.6 means (mm-link) or computed (README)
    assert np.all(np.diff(t) == 1.0) and np.all(bw >= 0)
    assert np.mean(bw) == pytest.approx(mean, rel=0.02)


@pytest.mark.parametrize("name, mean, p50", [("TMobile-LTE-short.down", 16.70, 13.96), ("ATT-LTE-driving.down", 5.17, 5.40)])
def test_mahimahi_importer_on_mahimahi_traces(name, mean, p50):
    t, bw = load_mahimahi(TRACES / "mahimahi" / name, 1.0)  # the mm-link originals (data/traces/README.md §1)
    assert np.mean(bw) == pytest.approx(mean, rel=0.02) and np.median(bw) == pytest.approx(p50, rel=0.02)
    t5, bw5 = load_mahimahi(TRACES / "mahimahi" / name, 5.0)
    assert np.mean(bw5) == pytest.approx(mean, rel=0.02) and t5[1] == 5.0


def test_importers_chunk_exactly(tmp_path):
    mm = tmp_path / "x.down"
    mm.write_text("1\n1\n500\n1000\n1999\n2000\n")  # 6 packets in 2 s, 3 per 1-s chunk
    assert load_mahimahi(mm, 1.0)[1] == pytest.approx([3 * 0.012, 3 * 0.012])
    series = tmp_path / "x.tsv"
    series.write_text("10\t2\n11 4\n12\t6\n")  # times shift to 0; last sample lasts the median spacing
    t, bw = load_throughput_series(series, 2.0)
    assert list(t) == [0.0, 2.0] and bw == pytest.approx([3.0, 6.0])


@pytest.mark.parametrize("loader, text, line, field", [
    (load_mahimahi, "1\n2\nfoo\n", 3, "timestamp_ms"),
    (load_mahimahi, "1\n-2\n", 2, "timestamp_ms"),
    (load_mahimahi, "5\n7\n6\n", 3, "timestamp_ms"),
    (load_throughput_series, "0 1\n1 x\n", 2, "Mbps"),
    (load_throughput_series, "0 1\n1 -1\n", 2, "Mbps"),
    (load_throughput_series, "0 1\n2 1\n1 1\n", 3, "time_s"),
    (load_throughput_series, "0 1 2\n", 1, "line"),
])
def test_importer_errors_name_file_line_and_field(tmp_path, loader, text, line, field):
    p = tmp_path / "bad.trace"
    p.write_text(text)
    with pytest.raises(ScenarioError, match=rf"bad\.trace:{line}: the '{field}' field"):
        loader(p, 5.0)


@pytest.mark.parametrize("loader", [load_mahimahi, load_throughput_series])
def test_importer_rejects_empty_file(tmp_path, loader):
    p = tmp_path / "empty.trace"
    p.write_text("\n\n")
    with pytest.raises(ScenarioError, match="empty.trace: trace file is empty"):
        loader(p, 5.0)


# ---- scenario files -------------------------------------------------------------------------------------------

HEAD = "tailor-scenario 1\nscenario name=t chunk=5\n"
SESSION = "session id=s1 client=10.1.2.7 prefix=10.1.2.0/24 asn=64512 region=us-east device=desktop access=cable start=0\n"
NET = "net t=0 bw=10 rtt=40 loss=0.001\n"


@pytest.mark.parametrize("body, line, field", [
    (SESSION + "net t=0 bw=10 rtt=40 speed=3\n", 4, "speed"),  # unknown key
    (SESSION.replace(" asn=64512", "") + NET, 3, "asn"),  # missing required field
    (SESSION + "net t=0 bw=fast rtt=40\n", 4, "bw"),  # non-numeric
    (SESSION + "net t=0 bw=0 rtt=40\n", 4, "bw"),  # zero bandwidth
    (SESSION + "net t=0 bw=-2 rtt=40\n", 4, "bw"),  # negative bandwidth
    (SESSION + "net t=0 bw=1 rtt=40 loss=1.5\n", 4, "loss"),  # loss outside [0, 1)
    (SESSION + NET + "net t=30 bw=2\nnet t=20 bw=3\n", 6, "t"),  # decreasing net times
    (SESSION + NET + "load t=9 site=a\nload t=3 site=a\n", 6, "t"),  # decreasing load times
    (SESSION + "load t=1 site=a\n" + NET, 4, "t"),  # load before any net line
    (SESSION + NET + SESSION + NET, 5, "id"),  # duplicate session id
    (SESSION + "netw t=0 bw=1 rtt=4\n", 4, "directive"),  # unknown directive
    (SESSION.replace("10.1.2.0/24", "10.1.2.0/33") + NET, 3, "prefix"),  # bad prefix
    (SESSION.replace("10.1.2.0/24", "10.1.2.1/24") + NET, 3, "prefix"),  # host bits set
    (SESSION.replace("client=10.1.2.7", "client=10.1.2.300") + NET, 3, "client"),  # bad address
    (SESSION.replace("client=10.1.2.7", "client=10.1.3.7") + NET, 3, "client"),  # client not in prefix
    (SESSION + "net t=5 bw=10 rtt=40\n", 4, "t"),  # first net not at 0
    (SESSION + "net t=0 bw=10\n", 4, "rtt"),  # first net without rtt
    (SESSION + "net t=0 trace=no/such/file rtt=40\n", 4, "trace"),  # missing trace file
    (SESSION + NET + 'load t=1 site="a\n', 5, "quoting"),  # unbalanced quote
    (NET, 3, "line"),  # net outside a session
    (SESSION + NET + "load t=1 site=unknown-site\n", 5, "site"),  # unknown website (websites given)
])
def test_malformed_file_gives_one_error_naming_line_and_field(tmp_path, body, line, field):
    p = tmp_path / "bad.scn"
    p.write_text(HEAD + body)
    with pytest.raises(ScenarioError) as info:
        load_scenario(p, websites=["a"])
    msg = str(info.value)
    assert msg.startswith(f"{p}:{line}: ") and f"field '{field}'" in msg and "more problem" not in msg, msg


def test_bad_header_and_several_problems_in_one_error(tmp_path):
    p = tmp_path / "bad.scn"
    p.write_text("tailor-scenario 2\n" + SESSION + "net t=0 bw=0 rtt=-1\n")
    with pytest.raises(ScenarioError) as info:
        load_scenario(p)
    msg = str(info.value)
    assert msg.startswith(f"{p}:1: file field 'header'") and "2 more problem(s)" in msg
    assert f"{p}:3: net field 'bw'" in msg and f"{p}:3: net field 'rtt'" in msg


def test_malformed_trace_is_reported_at_its_net_line(tmp_path):
    (tmp_path / "t.down").write_text("1\n2\nx\n")
    p = tmp_path / "bad.scn"
    p.write_text(HEAD + SESSION + "net t=0 trace=t.down rtt=40\n")
    with pytest.raises(ScenarioError, match=r"bad\.scn:4: net field 'trace'.*t\.down:3"):
        load_scenario(p)


def test_example_file_parses_with_traces_and_inherited_fields():
    sc = load_scenario(ROOT / "data" / "scenarios" / "example.scn")
    by_id = {s.session_id: s for s in sc.sessions}
    assert sc.name == "example" and len(sc.sessions) == 5 and sc.provenance["source"]
    assert by_id["home-1"].conditions.at(31) == (12.0, 35.0, 0.001)  # loss carried over
    phone = by_id["phone-1"].conditions
    assert phone.at(45) == (3.54, 120.0, 0.0015) and len(phone.t_s) == 15 and phone.t_s[-1] == 85
    assert by_id["home-2"].client == by_id["home-1"].client


def test_save_then_load_round_trips(tmp_path):
    for sc in (generate("default", 150, seed=9, websites=SITES), load_scenario(ROOT / "data" / "scenarios" / "example.scn")):
        p = tmp_path / f"{sc.name}.scn"
        save_scenario(sc, p)
        back = load_scenario(p)
        assert (back.name, back.chunk_s, back.description, back.provenance) == \
               (sc.name, sc.chunk_s, sc.description, sc.provenance)
        assert fingerprint(back) == fingerprint(sc)
