"""The demo's MaxMind-format databases: its client prefixes placed in ISPs and regions of the default scenario.

Each demo group's /24 gets the ASN and region of one ISP of the embedded default scenario with that group's access
type (the most frequent such ISP whose region no earlier group took, so every group is its own region; a real country
before the scenario's synthetic places), with the
scenario's region label in its live ISO 3166 form (:func:`tailor.enrich.iso_region`). The manager reads the two
files (``--geoip-asn``, ``--geoip-region``), the records of tailor-agent carry no asn/region, so every ASN and region
the manager's policy and dashboard see comes from these databases, as in a deployment with GeoLite2 files.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from tailor.enrich import asn_record, iso_region, region_record, write_mmdb

# demo group -> the scenario access type its condition stands for
ACCESS = {"broadband": "dsl", "4g": "lte", "3g": "3g", "developing": "cellular", "satellite": "geo-satellite"}
SCENARIO_SESSIONS = 1500


def places(groups: list[str], seed: int) -> dict[str, dict]:
    """Group name -> {"asn", "region", "scenario_region", "org"} drawn from ``generate("default", seed=seed)``."""
    from tailor.scenario.generate import generate

    isps = Counter((s.client.access, s.client.asn, s.client.region)
                   for s in generate("default", n_sessions=SCENARIO_SESSIONS, seed=seed).sessions)
    taken: set[str] = set()
    out = {}
    for name in groups:
        ranked = [(asn, label) for (access, asn, label), _ in isps.most_common() if access == ACCESS[name]]
        ranked.sort(key=lambda al: iso_region(al[1]).startswith("X"))  # a country before a synthetic place (stable)
        asn, label = next(((a, lb) for a, lb in ranked if iso_region(lb) not in taken), ranked[0])
        taken.add(iso_region(label))
        out[name] = {"asn": asn, "region": iso_region(label), "scenario_region": label,
                     "org": f"scenario {ACCESS[name]} ISP ({label})"}
    return out


def write_databases(directory: Path, prefixes: dict[str, str], seed: int) -> tuple[Path, Path, dict[str, dict]]:
    """Write ``asn.mmdb`` and ``region.mmdb`` for ``prefixes`` (group name -> /24); returns both paths and the places."""
    placed = places(list(prefixes), seed)
    asn_db, region_db = directory / "asn.mmdb", directory / "region.mmdb"
    write_mmdb(asn_db, "Tailor-Demo-ASN", {prefixes[g]: asn_record(p["asn"], p["org"]) for g, p in placed.items()})
    write_mmdb(region_db, "Tailor-Demo-City", {prefixes[g]: region_record(p["region"]) for g, p in placed.items()})
    return asn_db, region_db, {g: dict(p, prefix=prefixes[g]) for g, p in placed.items()}
