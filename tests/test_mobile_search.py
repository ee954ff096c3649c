"""The mobile-search scenario (SmartIW's deployment, seed 004) and the configuration-dependent RTT.

The scenario's published figures: responses of about 120 KB on average and 80% of the flows still in slow start
at IW 10 (Table I), enough responses in every 10-minute bin for groups of a province and an ISP (S_min = 100, §VI-A).
The RTT the server measures grows with the initial burst and, where the burst overflows it, with the buffer.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from tailor.errors import ScenarioError
from tailor.oracle import tcp
from tailor.oracle.model import ModelOracle, slow_start_share
from tailor.oracle.websites import is_search_response, search_catalog
from tailor.policies import make_policy
from tailor.scenario import facts, generate
from tailor.scenario.families import SEARCH_PROVINCES
from tailor.scenario.generate import DEFAULT_SESSIONS, SEARCH_SETTINGS
from tailor.sim import SimConfig, Simulator
from tailor.space import ConfigSpace

ORACLE = ModelOracle()
BIN_S = 600.0  # SmartIW's time bin (§VI-A: 10 minutes)


@pytest.fixture(scope="module")
def scenario():
    return generate("mobile-search", seed=101, websites=sorted(ORACLE.websites))


def _flows(scn):
    """(time, size, bw, rtt, loss, buffer, client) per response of the scenario."""
    rows = []
    for s in scn.sessions:
        for t, site in s.loads:
            bw, rtt, loss = s.conditions.at(t)
            rows.append((s.start_s + t, ORACLE.website(site).total_bytes, bw, rtt, loss, s.conditions.buffer_bdp,
                         s.client))
    return rows


def test_scenario_loads_search_responses_only_and_others_none(scenario):
    assert all(is_search_response(site) for s in scenario.sessions for _, site in s.loads)
    default = generate("default", n_sessions=50, seed=101, websites=sorted(ORACLE.websites))
    assert not any(is_search_response(site) for s in default.sessions for _, site in s.loads)
    with pytest.raises(ScenarioError, match="search responses"):
        generate("mobile-search", n_sessions=10, websites=["object-10KB", "page-light-1"])


def test_default_scenario_is_unchanged_by_the_search_responses_in_the_catalog():
    """The default scenario draws from the oracle's websites; the search responses must not shift its draws."""
    without = {n: w for n, w in ORACLE.websites.items() if not is_search_response(n)}
    a = generate("default", n_sessions=80, seed=3, websites=sorted(ORACLE.websites))
    b = generate("default", n_sessions=80, seed=3, websites=sorted(without))
    assert [s.loads for s in a.sessions] == [s.loads for s in b.sessions]


def test_published_figures_mean_size_and_slow_start_share(scenario):
    flows = _flows(scenario)
    sizes = np.array([f[1] for f in flows], dtype=float)
    assert abs(sizes.mean() / facts.SEARCH_MEAN_RESPONSE_BYTES - 1) < 0.05  # Table I caption: about 120 KB
    share = slow_start_share(sizes, *(np.array([f[k] for f in flows], dtype=float) for k in (2, 3, 4, 5)), iw=10)
    assert abs(share.mean() - facts.SEARCH_SLOW_START_SHARE) < 0.05, share.mean()  # Table I: 80.27%


def test_groups_of_a_province_and_an_isp_can_meet_s_min(scenario):
    """SmartIW found 19 groups, 15 of them a province x ISP (§VI-C). Its RL requirement asks for S_min responses in
    every 10-minute bin (§IV-B); with the default volume several province x ISP groups (three ISPs per province and
    access, as §IV-B's Beijing has three) must meet it in every bin of the two hours, not all of them, and no
    subnet (/24) may (subnets merge into their ISP; a busy one may pass 100 in a bin, not in all)."""
    flows = _flows(scenario)
    per_isp, per_subnet = Counter(), Counter()
    for t, *_, client in flows:
        per_isp[(client.region, client.asn, int(t // BIN_S))] += 1
        per_subnet[(client.prefix, int(t // BIN_S))] += 1
    bins = range(int(SEARCH_SETTINGS.horizon_s // BIN_S))  # the bins the sessions arrive in (then a tail of late queries)
    isps = {k[:2] for k in per_isp}
    assert len(isps) == 3 * 3 * len(SEARCH_PROVINCES)  # three ISPs per (access, province)
    meets = [isp for isp in isps if min(per_isp[(*isp, b)] for b in bins) >= facts.SMARTIW_S_MIN]
    assert 10 <= len(meets) < len(isps), (len(meets), len(isps))
    subnets = {k[0] for k in per_subnet}
    assert max(min(per_subnet[(p, b)] for b in bins) for p in subnets) < facts.SMARTIW_S_MIN
    assert {c.region for *_, c in flows} == set(SEARCH_PROVINCES)


def test_the_day_long_variant_is_the_same_service_over_24_hours_at_the_same_volume_per_bin():
    """mobile-search-day: SmartIW's testbed replayed one day (§VII-A); the same population and responses over 24 h, as
    many responses per 10-minute bin as the two-hour scenario (so S_min means the same), 12 x the sessions. Checked
    at an eighth of the default counts (the day's 216,000 sessions take a minute and a half to generate)."""
    assert DEFAULT_SESSIONS["mobile-search-day"] == 12 * DEFAULT_SESSIONS["mobile-search"]
    n = DEFAULT_SESSIONS["mobile-search"] // 8
    day = generate("mobile-search-day", n_sessions=12 * n, seed=101, websites=sorted(ORACLE.websites))
    short = generate("mobile-search", n_sessions=n, seed=101, websites=sorted(ORACLE.websites))
    starts = np.array([s.start_s for s in day.sessions])
    assert starts.max() > 23 * 3600 and starts.min() >= 0
    per_bin = [Counter(int((s.start_s + t) // 600) for s in scn.sessions for t, _ in s.loads) for scn in (day, short)]
    mid = [np.median([c[b] for b in range(2, max(c) - 2)]) for c in per_bin]  # away from the ramps at the ends
    assert abs(mid[0] / mid[1] - 1) < 0.1, mid
    assert {s.client.access for s in day.sessions} == {s.client.access for s in short.sessions}
    assert {s.client.region for s in day.sessions} == set(SEARCH_PROVINCES)
    assert set(day.websites()) == set(short.websites()) and all(is_search_response(w) for w in day.websites())


def test_far_provinces_have_longer_rtts(scenario):
    by_province = {}
    for f in _flows(scenario):
        if f[6].access == "lte":
            by_province.setdefault(f[6].region, []).append(f[3])
    rtt = {p: np.median(v) for p, v in by_province.items()}
    assert rtt["beijing"] < rtt["shandong"] < rtt["guangdong"] < rtt["xinjiang"]


def _share(bw_mbps=2.0, rtt=150.0, q=1.0, p=0.0):
    rate = bw_mbps * 1e6 / 8 / 1000 / tcp.MSS
    pipe = rate * rtt
    return tcp.Share(rate=np.array([[rate]]), rtt=np.array([[rtt]]), p=np.array([[p]]), pipe=np.array([[pipe]]),
                     room=np.array([[pipe * (1 + q)]]), q=np.array([[q]]))


def test_mean_rtt_grows_with_the_initial_burst():
    sh = _share()
    iws = np.array([[1, 2, 4, 8, 10, 16, 32, 64, 128, 200]], dtype=float)
    # loss-based (SmartIW's CUBIC): monotone in the IW at every size; BBR: for a response its first flight carries
    # (later, its startup reaches the 2-BDP window sooner with a larger IW and the queue it then holds is not modelled)
    for d, bbr in [(5.0, False), (30.0, False), (85.0, False), (300.0, False), (1.0, True), (5.0, True)]:
        r = tcp.mean_rtt_ms(d, iws, sh, np.array([[bbr]]))[0]
        assert np.all(np.diff(r) >= -1e-9), (d, bbr, r)
        assert r[0] >= 150.0
    # a single line-rate burst: its j-th segment waits behind j others
    one = tcp.mean_rtt_ms(4.0, np.array([[10.0]]), sh, np.array([[False]]))[0, 0]
    assert one == pytest.approx(150.0 + 1.5 / sh.rate[0, 0])
    # a burst far beyond the pipe queues more under CUBIC than under BBR's paced first flight
    cubic, bbr = (tcp.mean_rtt_ms(85.0, np.array([[64.0]]), sh, np.array([[b]]))[0, 0] for b in (False, True))
    assert cubic > bbr > 150.0


def test_mean_rtt_grows_with_the_buffer_when_the_burst_overflows_it():
    qs = [0.25, 0.5, 1.0, 2.0, 4.0]
    r = [tcp.mean_rtt_ms(200.0, np.array([[200.0]]), _share(q=q), np.array([[False]]))[0, 0] for q in qs]
    assert np.all(np.diff(r) > 0), r
    small = [tcp.mean_rtt_ms(4.0, np.array([[4.0]]), _share(q=q), np.array([[False]]))[0, 0] for q in qs]
    assert np.ptp(small) == pytest.approx(0.0)  # a burst that fits every buffer does not see it


def test_model_oracle_srtt_depends_on_the_iw_and_response_time_has_no_handshake():
    space = ConfigSpace.named("iw-only")
    iw = np.array([c["tcp.initial_cwnd"] for c in space.configs])
    cell = ORACLE.grid.cell(bw=2.0, rtt=150.0, loss=0.0, buffer_bdp=1.0)
    site = "search-121KB" if "search-121KB" in ORACLE.websites else sorted(search_catalog())[0]
    srtt = ORACLE.srtt_ms([cell], site, space)[0]
    assert srtt[iw == 200][0] > srtt[iw == 10][0] > 150.0
    # TCP response time: no handshake, so about 2 RTT less than the same bytes fetched on a new connection
    size = ORACLE.website(site).total_bytes
    from tailor.oracle.websites import single_object
    fetched = ModelOracle(websites={"x": single_object("x", size)}).mode_ms([cell], "x", space)[0]
    response = ORACLE.mode_ms([cell], site, space)[0]
    fits = iw <= 40  # where the client's first receive window (45 segments) does not cap the new connection's flight
    np.testing.assert_allclose((fetched - response)[fits], 2 * 150.0)


def test_simulator_reports_a_configuration_dependent_srtt():
    scn = generate("mobile-search", n_sessions=120, seed=102, websites=sorted(ORACLE.websites))
    sim = Simulator(scn, ORACLE, SimConfig(space="iw-only", seed=102))
    small, big = (sim.run(make_policy(name)).records for name in ("tcp-10", "tcp-200"))
    assert np.all(small["srtt_ms"] >= sim.world.handshake_rtt_ms - 1e-9)
    assert big["srtt_ms"].mean() > small["srtt_ms"].mean()
    np.testing.assert_allclose(small["srtt_ms"], small["srtt_default_ms"])  # tcp-10 is the default configuration
