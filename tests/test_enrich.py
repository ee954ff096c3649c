"""Enrichment: MaxMind-format databases the test writes itself (mmdb-writer), read by tailor.enrich and the manager."""

import json
import re
import time

import pytest
from fastapi.testclient import TestClient

from tailor.cli import main
from tailor.enrich import SCENARIO_REGIONS, UNKNOWN, Enricher, Place, asn_record, iso_region, region_record, write_mmdb
from tailor.errors import ParameterError
from tailor.manager.api import create_app
from tailor.manager.config import ManagerConfig
from tailor.manager.dashboard import group_places, render_dashboard
from tailor.scenario.generate import generate
from tailor.space import ConfigSpace

TOKEN = "enrich-token"
AUTH = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
T0 = 1_795_000_000.0
SPACE = ConfigSpace.named("core")
DEFAULT = SPACE.configs[SPACE.default_index].id

# two ISPs, four /24s each, in two regions; 10.9.0.0/16 is in neither database
ISPS = {"10.1.0.0/22": (64512, "Cable West", "US-CA"), "10.2.0.0/22": (64513, "Himal Mobile", "NP")}


@pytest.fixture
def dbs(tmp_path):
    asn_db, region_db = tmp_path / "asn.mmdb", tmp_path / "city.mmdb"
    write_mmdb(asn_db, "GeoLite2-ASN", {net: asn_record(a, org) for net, (a, org, _) in ISPS.items()}
               | {"2001:db8::/32": asn_record(64999, "V6 Net"), "10.3.0.128/25": asn_record(65000)})
    write_mmdb(region_db, "GeoLite2-City", {net: region_record(r) for net, (_, _, r) in ISPS.items()}
               | {"2001:db8::/32": region_record("DE")})
    return str(asn_db), str(region_db)


def test_lookup_asn_region_ipv6_and_mapped(dbs):
    e = Enricher(*dbs)
    assert e.lookup("10.1.2.7") == Place(64512, "US-CA", "Cable West")
    assert e.lookup("10.2.3.0/24") == Place(64513, "NP", "Himal Mobile")  # a prefix: its network address
    assert e.lookup("::ffff:10.1.0.9") == Place(64512, "US-CA", "Cable West")
    assert e.lookup("2001:db8::5") == Place(64999, "DE", "V6 Net")
    assert e.lookup("10.9.0.1") == UNKNOWN and e.lookup("192.0.2.1") == UNKNOWN
    assert e.lookup("not-an-address") == UNKNOWN and e.lookup("fe80::1%eth0") == UNKNOWN
    assert e.counts["bad_address"] == 2 and e.counts["asn_not_found"] >= 2 and e.counts["region_not_found"] >= 2


def test_cache_is_per_24_bounded_and_never_answers_for_a_finer_network(dbs):
    e = Enricher(*dbs, cache_size=4)
    e.lookup("10.1.2.7")
    e.lookup("10.1.2.200")
    assert e.counts["cache_hits"] == 1  # same /24
    # 10.3.0.128/25 is an ASN of its own: the /24 is not cached as a whole, so the lower half stays unknown
    assert e.lookup("10.3.0.200").asn == 65000 and e.lookup("10.3.0.5").asn == 0 and e.lookup("10.3.0.201").asn == 65000
    for i in range(50):
        e.lookup(f"10.1.{i % 4}.{i}")
        e.lookup(f"10.{20 + i}.0.1")
    assert len(e._cache) <= 4


def test_country_layout_and_registered_country_fallback(tmp_path):
    path = tmp_path / "country.mmdb"
    write_mmdb(path, "GeoLite2-Country", {"10.1.0.0/16": {"country": {"iso_code": "MX"}},
                                          "10.2.0.0/16": {"registered_country": {"iso_code": "CO"}},
                                          "10.3.0.0/16": {"country": {"iso_code": "US"}, "subdivisions": []}})
    e = Enricher(region_db=str(path))
    assert [e.lookup(a).region for a in ("10.1.0.1", "10.2.0.1", "10.3.0.1")] == ["MX", "CO", "US"]
    assert e.lookup("10.1.0.1").asn == 0


INVALID_ASN = {"10.1.0.0/16": {"autonomous_system_number": "64512"},  # a string
               "10.2.0.0/16": {"autonomous_system_number": 0},
               "10.3.0.0/16": {"autonomous_system_number": 1 << 40},  # beyond 32 bits
               "10.4.0.0/16": {"autonomous_system_number": True},
               "10.5.0.0/16": "AS64512",  # not a map
               "10.6.0.0/16": {"autonomous_system_number": 64520, "autonomous_system_organization": "x" * 5000}}
INVALID_REGION = {"10.1.0.0/16": {"country": {"iso_code": "usa"}},
                  "10.2.0.0/16": {"country": {"iso_code": "us"}},
                  "10.3.0.0/16": {"country": {"iso_code": 840}},
                  "10.4.0.0/16": {"country": {"iso_code": "US"}, "subdivisions": [{"iso_code": "CALIF"}]},
                  "10.5.0.0/16": {"country": {"iso_code": "US"}, "subdivisions": "CA"},
                  "10.6.0.0/16": {"country": {"iso_code": "US\n"}}}


def test_invalid_database_values_are_unknown_and_counted(tmp_path):
    asn_db, region_db = tmp_path / "bad-asn.mmdb", tmp_path / "bad-city.mmdb"
    write_mmdb(asn_db, "GeoLite2-ASN", INVALID_ASN)
    write_mmdb(region_db, "GeoLite2-City", INVALID_REGION)
    e = Enricher(str(asn_db), str(region_db))
    places = [e.lookup(f"10.{i}.0.1") for i in range(1, 7)]
    assert [p.asn for p in places] == [0, 0, 0, 0, 0, 64520]
    assert places[5].org == ""  # an over-long organisation is dropped, the number kept
    assert [p.region for p in places] == ["", "", "", "US", "US", ""]  # a bad subdivision keeps the country
    assert e.counts["asn_invalid"] == 5 and e.counts["region_invalid"] == 4 and e.counts["subdivision_invalid"] == 2
    for p in places:
        assert p.region == "" or re.fullmatch(r"[A-Z]{2}(-[A-Z0-9]{1,3})?", p.region)


def test_missing_or_corrupt_database_is_one_error_naming_the_option(tmp_path, capsys):
    with pytest.raises(ParameterError, match="'geoip-asn' parameter of tailor manager .*no such file"):
        Enricher(asn_db=str(tmp_path / "nope.mmdb"))
    junk = tmp_path / "junk.mmdb"
    junk.write_bytes(b"\x00" * 4096)
    with pytest.raises(ParameterError, match="'geoip-region' parameter of tailor manager must be a valid MaxMind"):
        Enricher(region_db=str(junk))
    code = main(["manager", "--data", str(tmp_path / "d"), "--insecure-dev", "--geoip-region", str(junk)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "'geoip-region'" in err[0] and err[0].startswith("tailor: error:")


def test_config_file_carries_the_database_options(tmp_path, dbs):
    from tailor.manager.server import add_arguments, config_from_args

    conf = tmp_path / "manager.toml"
    conf.write_text(f'data = "{tmp_path / "d"}"\ninsecure-dev = true\ngeoip-asn = "{dbs[0]}"\ngeoip-region = "{dbs[1]}"\n')
    import argparse

    p = argparse.ArgumentParser()
    add_arguments(p)
    cfg = config_from_args(p.parse_args(["--config", str(conf), "--geoip-region", "/flag/wins.mmdb"]), environ={})
    assert cfg.geoip_asn == dbs[0] and cfg.geoip_region == "/flag/wins.mmdb"


def test_scenario_regions_map_one_to_one_onto_the_live_form():
    labels = set()
    for name in ("default", "developing", "satellite", "cellular"):
        labels |= {s.client.region for s in generate(name, n_sessions=300, seed=1).sessions}
    mapped = {label: iso_region(label) for label in labels}
    assert all(re.fullmatch(r"[A-Z]{2}(-[A-Z0-9]{1,3})?", v) for v in mapped.values()), mapped
    assert len(set(mapped.values())) == len(mapped)  # one-to-one: a grouping by region is unchanged
    assert set(SCENARIO_REGIONS) <= labels | {"dev-urban", "dev-rural"}


# -- the manager
def manager_cfg(tmp_path, dbs, **kw) -> ManagerConfig:
    kw.setdefault("policy", "configanator")  # these tests are about Configanator's region classes
    return ManagerConfig(data_dir=str(tmp_path / "data"), token=TOKEN, update_freq_s=0, cohort_salt="7e57" * 8,
                         geoip_asn=dbs[0], geoip_region=dbs[1], **kw)


def record(t: float, prefix: str, addr: str | None = None, **kw) -> dict:
    rec = {"time": t, "kind": "connection", "client_prefix": prefix, "config_id": DEFAULT, "table_version": 1,
           "duration_ms": 500.0, "handshake_rtt_ms": 60.0, "bytes_sent": 200_000, "bytes_acked": 200_000}
    if addr:
        rec["client_addr"] = addr
    return {**rec, **kw}


def post(c, records) -> None:
    body = json.dumps({"schema": "tailor.telemetry/v1", "source": "edge-e", "records": records})
    r = c.post("/v1/telemetry", content=body, headers=AUTH)
    assert r.status_code == 202, r.text


def test_precedence_record_then_database_then_unknown(tmp_path, dbs):
    app = create_app(manager_cfg(tmp_path, dbs))
    with TestClient(app, headers=AUTH) as c:
        post(c, [record(T0, "10.1.0.0/24", "10.1.0.5", asn=65001, region="DE-BE"),  # the record's own values
                 record(T0 + 1, "10.1.1.0/24", "10.1.1.5"),  # the database's
                 record(T0 + 2, "10.2.0.0/24", None, asn=65002),  # asn from the record, region from the database
                 record(T0 + 3, "10.9.0.0/24", "10.9.0.5")])  # neither: unknown
        mgr = app.state.manager
        mgr.run_cycle(now=T0 + 10)
        seen = {(i.client_id, i.asn, i.region) for i in mgr.feeder._clients.values()}
        assert seen == {("10.1.0.5", 65001, "DE-BE"), ("10.1.1.5", 64512, "US-CA"), ("10.2.0.0", 65002, "NP"),
                        ("10.9.0.5", 0, "")}
        stored = mgr.store.query("SELECT client_prefix, asn, region FROM telemetry ORDER BY time")
        assert stored[0] == ("10.1.0.0/24", 65001, "DE-BE") and stored[1] == ("10.1.1.0/24", None, None)


def test_store_written_before_the_asn_region_columns_gets_them(tmp_path, dbs):
    import duckdb

    from tailor.manager.store import FIELDS, Store

    data = tmp_path / "data"
    data.mkdir()
    old = [(n, t) for n, t, _ in FIELDS if n not in ("asn", "region")]
    con = duckdb.connect(str(data / "tailor.duckdb"))
    con.execute("CREATE TABLE telemetry (seq BIGINT, received DOUBLE, source VARCHAR, "
                + ", ".join(f'"{n}" {t}' for n, t in old) + ")")
    con.close()
    store = Store(data)
    try:
        store.insert_telemetry([("e", T0, [record(T0, "10.1.0.0/24", asn=7, region="US")])], 0)
        assert store.query("SELECT asn, region, duration_ms FROM telemetry") == [(7, "US", 500.0)]
    finally:
        store.close()


SMARTIW = (("bin_s", 10.0), ("regroup_s", 100.0), ("warmup_s", 50.0), ("iteration_s", 30.0), ("s_min", 12),
           ("theta", 10.0), ("coverage", 0.5))


def test_smartiw_forms_isp_groups_from_enriched_records_and_the_dashboard_shows_them(tmp_path, dbs):
    """Records carry no asn/region; the databases give them; SmartIW's bottom-up grouping merges each ISP's /24s
    (each too thin alone: 5 samples per 10 s bin, s_min 12) into an ISP group keyed by the enriched region/ASN.
    The records are dated after the manager's start (its first plan, at the wall clock, schedules the regrouping)."""
    t0 = float(int(time.time()) // 10 * 10 + 1000)
    app = create_app(manager_cfg(tmp_path, dbs, policy="smartiw", policy_params=SMARTIW))
    prefixes = [f"10.{isp}.{k}.0/24" for isp in (1, 2) for k in range(4)]
    recs = []
    for b in range(10):  # ten 10 s bins
        for p in prefixes:
            slow = p.startswith("10.2.")
            for j in range(5):
                addr = p.replace(".0/24", f".{10 + j}")
                recs.append(record(t0 + 10 * b + j, p, addr, duration_ms=900.0 if slow else 300.0,
                                   handshake_rtt_ms=200.0 if slow else 30.0))
    with TestClient(app, headers=AUTH) as c:
        post(c, recs)
        mgr = app.state.manager
        mgr.run_cycle(now=t0 + 100)
        groups = {g["id"] for g in mgr.current.doc["groups"]}
        assert {"isp:US-CA/64512", "isp:NP/64513"} <= groups, groups
        rules = {r["prefix"]: r["group"] for r in mgr.current.doc["rules"]}
        assert rules["10.1.3.0/24"] == "isp:US-CA/64512" and rules["10.2.0.0/24"] == "isp:NP/64513"
        # the edge reports the groups it applied: the dashboard shows each group's clients' ASN and region
        post(c, [record(t0 + 200 + i, p, group=rules[p]) for i, p in enumerate(prefixes)])
        mgr.flush()
        places = group_places(mgr)
        assert places["isp:NP/64513"] == {"asn": {"AS64513 Himal Mobile": 4}, "region": {"NP": 4}}
        html = render_dashboard(mgr)
        assert "AS64512 Cable West 100%" in html and "US-CA 100%" in html and "GeoLite2-ASN" in html


def test_region_groups_reach_edges_that_see_no_device(tmp_path, dbs):
    """Configanator grouping by region (classes=pop): tailor-agent's records carry no device, so only the per-prefix
    rules without a device reach its connections; they are keyed by the enriched region too (found by the demo)."""
    app = create_app(manager_cfg(tmp_path, dbs, policy_params=(("classes", "pop"),)))
    prefixes = ["10.1.0.0/24", "10.1.3.0/24", "10.2.1.0/24", "10.9.0.0/24"]
    with TestClient(app, headers=AUTH) as c:
        post(c, [record(T0 + i, p, p.replace(".0/24", f".{i + 2}")) for i in range(20) for p in prefixes])
        mgr = app.state.manager
        mgr.run_cycle(now=T0 + 30)
        mgr.run_cycle(now=T0 + 31)
        plain = {r["prefix"]: r["group"] for r in mgr.current.doc["rules"] if "device" not in r and "sni" not in r}
    assert plain["10.1.0.0/24"] == plain["10.1.3.0/24"] == "pop:US-CA|" and plain["10.2.1.0/24"] == "pop:NP|"
    assert plain.get("10.9.0.0/24") in (None, "pop:|")  # not in the databases: the unknown region's class


def test_demo_databases_place_each_group_in_its_own_scenario_isp_and_region(tmp_path):
    from tailor.demo.geoip import ACCESS, write_databases

    prefixes = {name: f"10.240.{i}.0/24" for i, name in enumerate(ACCESS, start=1)}
    asn_db, region_db, placed = write_databases(tmp_path, prefixes, seed=0)
    e = Enricher(str(asn_db), str(region_db))
    for name, prefix in prefixes.items():
        got = e.lookup(prefix.replace(".0/24", ".17"))
        assert (got.asn, got.region) == (placed[name]["asn"], placed[name]["region"]) and 64512 <= got.asn <= 65534
    assert len({p["region"] for p in placed.values()}) == len(prefixes)
    assert len({p["asn"] for p in placed.values()}) == len(prefixes)
    assert e.lookup("10.240.99.1") == UNKNOWN
