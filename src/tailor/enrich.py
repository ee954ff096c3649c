"""Client enrichment: an address's ISP (ASN) and region from MaxMind-format databases.

Two databases, each optional, read with the ``maxminddb`` package (a file that is memory-mapped):

* an ASN database in the GeoLite2-ASN layout: ``autonomous_system_number`` (and
  ``autonomous_system_organization``, kept for display only);
* a region database in the GeoLite2-City or GeoLite2-Country layout: ``country.iso_code`` (else
  ``registered_country.iso_code``) and, when present, ``subdivisions[0].iso_code``.

:meth:`Enricher.lookup` maps an address to ``Place(asn, region)``: ``asn`` an integer in [1, 4294967295]
and ``region`` ``"CC"`` or ``"CC-SUB"`` (ISO 3166-1 alpha-2 country, ISO 3166-2 subdivision suffix: the
``region`` pattern of spec/telemetry.schema.json, the same values tailor-edge writes into its records);
``0`` and ``""`` mean unknown. A database is the operator's file, not the network's, but it is still
checked like input: a value of the wrong type, out of range, too long or not matching the pattern is
treated as unknown and counted (:attr:`Enricher.counts`), never passed on.

Lookups are cached per /24 (IPv4) or /48 (IPv6) in a bounded LRU: a database answer whose network covers
the whole /24 (GeoLite2 networks are /24 or wider for IPv4, nearly always) is cached for the /24, a finer
one only for the address itself, so the cache never answers for an address the database would place
elsewhere.

The simulator's scenarios label regions freely (``us-east``, ``np``, ``grid``); :func:`iso_region` is
the one-to-one map from those labels to the live form, so a grouping evaluated on a scenario is the
grouping that runs on enriched live telemetry (every grouping compares regions only for equality).

>>> iso_region("us-west"), iso_region("np"), iso_region("US-CA"), iso_region("dev-rural")
('US-CA', 'NP', 'US-CA', 'XD-R')
"""

from __future__ import annotations

import ipaddress
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass

from tailor.errors import ParameterError

MAX_ASN = 4_294_967_295  # 32-bit ASNs (RFC 6793), the schema's maximum
MAX_ORG_CHARS = 256
MAX_CACHE = 65_536  # /24s (and finer networks) remembered
REGION_RE = re.compile(r"[A-Z]{2}(-[A-Z0-9]{1,3})?")  # spec/telemetry.schema.json "region" (fullmatch)
COUNTRY_RE = re.compile(r"[A-Z]{2}")
SUBDIVISION_RE = re.compile(r"[A-Z0-9]{1,3}")
COUNTERS = ("lookups", "cache_hits", "bad_address", "asn_not_found", "asn_invalid", "region_not_found",
            "region_invalid", "subdivision_invalid")

# scenario region labels (src/tailor/scenario/families.py, facts.py) -> ISO 3166 form. One-to-one, so groupings
# are unchanged. US cloud-style quarters take one state each; places without a country take ISO 3166's
# user-assigned codes (X*): the ATC "developing region" 2G profiles and the workshop grid's synthetic links.
SCENARIO_REGIONS = {"us-east": "US-VA", "us-central": "US-IL", "us-south": "US-TX", "us-west": "US-CA",
                    "us-rural": "US-MT", "eu-west": "IE", "dev-rural": "XD-R", "dev-urban": "XD-U", "grid": "XG"}


def iso_region(label: str) -> str:
    """The live (ISO 3166) form of a scenario region label; a label already in that form is kept,
    a two-letter one is upper-cased, anything else unknown is ``""``."""
    if REGION_RE.fullmatch(label):
        return label
    if label in SCENARIO_REGIONS:
        return SCENARIO_REGIONS[label]
    return label.upper() if re.fullmatch(r"[a-z]{2}", label) else ""


@dataclass(frozen=True)
class Place:
    asn: int = 0  # 0 = unknown
    region: str = ""  # "" = unknown
    org: str = ""  # the ASN's organisation (display only)


UNKNOWN = Place()


class Enricher:
    """Address -> :class:`Place` from the configured databases (either may be None).

    Thread-safe: the manager's update cycle and its dashboard both look up (one lock; a lookup is microseconds).
    """

    def __init__(self, asn_db: str | None = None, region_db: str | None = None, cache_size: int = MAX_CACHE,
                 owner: str = "tailor manager"):
        self.asn_path, self.region_path = asn_db, region_db
        self._asn = _open(asn_db, "geoip-asn", owner) if asn_db else None
        self._region = _open(region_db, "geoip-region", owner) if region_db else None
        self.cache_size = cache_size
        self._cache: OrderedDict[str, Place] = OrderedDict()
        self.counts = dict.fromkeys(COUNTERS, 0)
        self._lock = threading.Lock()

    @property
    def configured(self) -> bool:
        return self._asn is not None or self._region is not None

    def describe(self) -> dict:
        """What is loaded (for the start-up log and the dashboard)."""
        out = {}
        for name, path, reader in (("asn", self.asn_path, self._asn), ("region", self.region_path, self._region)):
            if reader is not None:
                meta = reader.metadata()
                out[name] = {"path": path, "type": meta.database_type, "build_epoch": meta.build_epoch,
                             "nodes": meta.node_count}
        return out

    def lookup(self, addr: str) -> Place:
        """The place of ``addr`` (an address, or a prefix: its network address); UNKNOWN when nothing is known."""
        if not self.configured:
            return UNKNOWN
        with self._lock:
            return self._lookup(addr)

    def _lookup(self, addr: str) -> Place:
        self.counts["lookups"] += 1
        try:
            ip = ipaddress.ip_address(addr.split("/", 1)[0])
            if getattr(ip, "scope_id", None):  # fe80::1%eth0: a zone means nothing beyond one host's link
                raise ValueError(addr)
        except ValueError:
            self.counts["bad_address"] += 1
            return UNKNOWN
        if ip.version == 6 and ip.ipv4_mapped is not None:  # a dual-stack socket's view of an IPv4 client
            ip = ip.ipv4_mapped
        block = str(ipaddress.ip_network(f"{ip}/{24 if ip.version == 4 else 48}", strict=False))
        for key in (block, str(ip)):
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
                self.counts["cache_hits"] += 1
                return hit
        place, widest = self._query(ip)
        self._remember(block if widest <= (24 if ip.version == 4 else 48) else str(ip), place)
        return place

    def _query(self, ip) -> tuple[Place, int]:
        """(place, the longest prefix length of the networks that answered) straight from the databases; maxminddb
        counts an IPv4 address's prefix length in IPv4 bits in an IPv6 database too."""
        asn, org, region, plen = 0, "", "", 0
        if self._asn is not None:
            record, n = self._asn.get_with_prefix_len(ip)
            plen = max(plen, n)
            asn, org = self._asn_of(record)
        if self._region is not None:
            record, n = self._region.get_with_prefix_len(ip)
            plen = max(plen, n)
            region = self._region_of(record)
        return (Place(asn, region, org) if asn or region else UNKNOWN), plen

    def _asn_of(self, record) -> tuple[int, str]:
        if record is None:
            self.counts["asn_not_found"] += 1
            return 0, ""
        number = record.get("autonomous_system_number") if isinstance(record, dict) else None
        if not (isinstance(number, int) and not isinstance(number, bool) and 1 <= number <= MAX_ASN):
            self.counts["asn_invalid"] += 1
            return 0, ""
        org = record.get("autonomous_system_organization")
        ok = isinstance(org, str) and len(org) <= MAX_ORG_CHARS and org.isprintable()
        return number, org if ok else ""

    def _region_of(self, record) -> str:
        if record is None:
            self.counts["region_not_found"] += 1
            return ""
        country = _iso(record, "country") or _iso(record, "registered_country") if isinstance(record, dict) else None
        if not (isinstance(country, str) and COUNTRY_RE.fullmatch(country)):
            self.counts["region_invalid"] += 1
            return ""
        subs = record.get("subdivisions")
        if subs is None:
            return country
        sub = _iso({"s": subs[0]}, "s") if isinstance(subs, list) and subs else None
        if not (isinstance(sub, str) and SUBDIVISION_RE.fullmatch(sub)):
            self.counts["subdivision_invalid"] += 1
            return country
        return f"{country}-{sub}"

    def _remember(self, key: str, place: Place) -> None:
        self._cache[key] = place
        if len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)

    def close(self) -> None:
        with self._lock:
            self._close()

    def _close(self) -> None:
        for reader in (self._asn, self._region):
            if reader is not None:
                reader.close()
        self._asn = self._region = None

    # the readers are memory maps: a pickled manager state must not carry them
    def __getstate__(self):
        raise TypeError("an Enricher is not part of the learned state (it is rebuilt from the options)")


def _iso(record: dict, key: str):
    part = record.get(key)
    return part.get("iso_code") if isinstance(part, dict) else None


def _open(path: str, option: str, owner: str):
    import maxminddb

    try:
        reader = maxminddb.open_database(path)
    except FileNotFoundError:
        raise ParameterError(f"The {option!r} parameter of {owner} must be a readable MaxMind database (.mmdb). "
                             f"Got {path!r} (no such file).") from None
    except OSError as err:
        raise ParameterError(f"The {option!r} parameter of {owner} must be a readable MaxMind database (.mmdb). "
                             f"Got {path!r} ({err.strerror or err}).") from None
    except (maxminddb.InvalidDatabaseError, ValueError) as err:
        raise ParameterError(f"The {option!r} parameter of {owner} must be a valid MaxMind database (.mmdb). "
                             f"Got {path!r} ({str(err)[:200]}).") from None
    return reader


# -- writing small databases (tests, the demo): the layouts the reader above expects
def asn_record(asn: int, org: str = "") -> dict:
    """A GeoLite2-ASN record."""
    return {"autonomous_system_number": asn, "autonomous_system_organization": org}


def region_record(region: str) -> dict:
    """A GeoLite2-City record for ``"CC"`` or ``"CC-SUB"`` (what :meth:`Enricher.lookup` reads back)."""
    country, _, sub = region.partition("-")
    record: dict = {"country": {"iso_code": country}}
    if sub:
        record["subdivisions"] = [{"iso_code": sub}]
    return record


def write_mmdb(path: str, database_type: str, records: dict[str, dict]) -> None:
    """Write a MaxMind-format database (IPv6 tree holding IPv4 too) mapping each network (CIDR) to its record,
    with the ``mmdb-writer`` package. Integers are written as uint32, as GeoLite2 stores ASNs."""
    try:
        from mmdb_writer import MMDBWriter, MmdbU32, MmdbU64
        from netaddr import IPSet
    except ImportError as err:
        raise ParameterError(f"writing a MaxMind database needs the 'mmdb-writer' package ({err}); "
                             "pip install mmdb-writer") from None

    def typed(value):
        if isinstance(value, dict):
            return {k: typed(v) for k, v in value.items()}
        if isinstance(value, list):
            return [typed(v) for v in value]
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return MmdbU32(value) if value < 1 << 32 else MmdbU64(value)
        return value

    writer = MMDBWriter(ip_version=6, ipv4_compatible=True, database_type=database_type,
                        description=f"{database_type} written by tailor")
    for network, record in records.items():
        writer.insert_network(IPSet([network]), typed(record))
    writer.to_db_file(str(path))
