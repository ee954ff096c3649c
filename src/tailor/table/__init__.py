"""Decision tables (manager -> edge): schema validation, compilation from a policy, resolution.

The format is spec/decision-table.schema.json; this module adds the checks JSON Schema cannot
express (knob values against the registry, config ids against their content, probabilities summing
to one, rule references, CIDR syntax). How a table is applied to a connection is spec/decision.md,
implemented once in :mod:`tailor.table.decide`. Shared test vectors live in spec/vectors/decision-table/.
"""

from __future__ import annotations

import ipaddress
import json
import re
from functools import lru_cache
from pathlib import Path
from typing import Any

import jsonschema
import jsonschema.validators

from tailor.errors import ParameterError, TableError
from tailor.space import Configuration
from tailor.space.knobs import SPEC_DIR
from tailor.table.decide import Applied, DecisionTable, decide  # noqa: F401 (the one decision rule)

SCHEMA_ID = "tailor.decision-table/v1"
PROB_TOLERANCE = 1e-6




@lru_cache(maxsize=4)
def load_schema(name: str) -> dict:
    return json.loads((SPEC_DIR / name).read_text())


def _no_constant(token: str):
    raise ValueError(f"{token} is not allowed (numbers must be finite)")


def loads_strict(data: str | bytes) -> Any:
    """``json.loads`` that refuses NaN, Infinity and -Infinity (Python accepts them; JSON and Go do not)."""
    return json.loads(data, parse_constant=_no_constant)


def ecma_pattern(pattern: str) -> re.Pattern:
    """A JSON Schema (ECMA-262) pattern as a Python regex: ``$`` is the end of input, as in ECMA and Go.

    Python's ``$`` also matches before a final newline, so ``'c-0123456789\\n'`` would pass
    ``^c-[0-9a-f]{10}$``; an unescaped ``$`` outside a character class becomes ``\\Z``.
    """
    out, i, in_class = [], 0, False
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\":
            out.append(pattern[i:i + 2])
            i += 2
            continue
        if ch == "[":
            in_class = True
        elif ch == "]":
            in_class = False
        out.append("\\Z" if ch == "$" and not in_class else ch)
        i += 1
    return re.compile("".join(out))


def _ecma_pattern_keyword(validator, patrn, instance, schema):
    if validator.is_type(instance, "string") and not _ecma_pattern(patrn).search(instance):
        yield jsonschema.ValidationError(f"{short_repr(instance)} does not match {patrn!r}")


def _max_length_keyword(validator, max_length, instance, schema):
    if validator.is_type(instance, "string") and len(instance) > max_length:
        yield jsonschema.ValidationError(f"{short_repr(instance)} is too long")


def short_repr(value: Any) -> str:
    """repr of a value, at most 80 characters (error messages name a value, they do not echo it)."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


_ecma_pattern = lru_cache(maxsize=256)(ecma_pattern)
Validator = jsonschema.validators.extend(jsonschema.Draft202012Validator, {"pattern": _ecma_pattern_keyword,
                                                                         "maxLength": _max_length_keyword})
"""Draft 2020-12 with ECMA ``$`` semantics for ``pattern`` and messages that quote at most 80 characters of
a value (a 60 KB SNI is named, not echoed): what every Tailor schema check uses."""


@lru_cache(maxsize=4)
def schema_validator(name: str):
    return Validator(load_schema(name))


def validate_table(doc: Any, schema: bool = True) -> dict:
    """Return ``doc`` if it is a valid decision table, else raise TableError naming field and reason.

    Rules are checked by hand rather than by jsonschema (same constraints as the schema's ``rules``
    items): jsonschema costs ~60 us per rule, and tables carry up to hundreds of thousands of rules.
    ``schema=False`` skips JSON Schema for documents built by :func:`compile_table` (well-formed by
    construction); every semantic check still runs. Input from outside is always checked in full.
    """
    if schema:
        fast = isinstance(doc, dict) and isinstance(doc.get("rules"), list)
        validator = schema_validator("decision-table.schema.json")
        errors = sorted(validator.iter_errors(dict(doc, rules=[]) if fast else doc), key=lambda e: list(e.absolute_path))
        if errors:
            e = errors[0]
            raise TableError(f"decision table field {_path(e.absolute_path)}: {e.message}")
    _check_rule_shapes(doc["rules"])
    _check_configs(doc)
    groups = _check_groups(doc)
    _check_rules(doc, groups)
    return doc


def _path(parts) -> str:
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "(root)"


_RULE_KEYS = frozenset({"prefix", "group", "sni", "device"})


@lru_cache(maxsize=1)
def _rule_bounds() -> tuple[int, dict[str, tuple[int, int, re.Pattern | None, str | None]]]:
    """(maxItems, {key: (minLength, maxLength, compiled pattern, pattern text)}) of the schema's rules."""
    rules = load_schema("decision-table.schema.json")["properties"]["rules"]
    props = rules["items"]["properties"]
    return rules["maxItems"], {k: (v.get("minLength", 0), v.get("maxLength", 1 << 30),
                                   _ecma_pattern(v["pattern"]) if "pattern" in v else None, v.get("pattern"))
                               for k, v in props.items()}


def _check_rule_shapes(rules: list) -> None:
    max_items, bounds = _rule_bounds()
    if len(rules) > max_items:
        raise TableError(f"decision table field rules: {len(rules)} rules is too long (at most {max_items})")
    for i, r in enumerate(rules):
        if not isinstance(r, dict) or "prefix" not in r or "group" not in r:
            raise TableError(f"decision table field rules[{i}]: a rule is an object with 'prefix' and 'group'")
        extra = set(r) - _RULE_KEYS
        if extra:
            raise TableError(f"decision table field rules[{i}]: Additional properties are not allowed ({sorted(extra)})")
        for key in sorted(r):
            value = r[key]
            if not isinstance(value, str):
                raise TableError(f"decision table field rules[{i}].{key}: {short_repr(value)} is not of type 'string'")
            lo, hi, rx, text = bounds[key]
            if len(value) > hi:
                raise TableError(f"decision table field rules[{i}].{key}: {short_repr(value)} is too long")
            if len(value) < lo:
                raise TableError(f"decision table field rules[{i}].{key}: {short_repr(value)} should be non-empty")
            if rx is not None and not rx.search(value):
                raise TableError(f"decision table field rules[{i}].{key}: {short_repr(value)} does not match {text!r}")


def _check_configs(doc: dict) -> None:
    for cid, knobs in doc["configs"].items():
        try:
            config = Configuration(knobs)
        except ParameterError as err:
            raise TableError(f"decision table field configs.{cid}: {err}") from None
        if config.id != cid:
            raise TableError(f"decision table field configs.{cid}: id does not match its content (expected {config.id})")
    if doc["default"] not in doc["configs"]:
        raise TableError(f"decision table field default: config {doc['default']} is not in configs")


def _check_groups(doc: dict) -> set[str]:
    seen: set[str] = set()
    for i, group in enumerate(doc["groups"]):
        if group["id"] in seen:
            raise TableError(f"decision table field groups[{i}].id: duplicate group id {group['id']!r}")
        seen.add(group["id"])
        for j, choice in enumerate(group["choices"]):
            if choice["config"] not in doc["configs"]:
                raise TableError(f"decision table field groups[{i}].choices[{j}].config: unknown config {choice['config']}")
        total = sum(c["p"] for c in group["choices"])
        if abs(total - 1.0) > PROB_TOLERANCE:
            raise TableError(f"decision table field groups[{i}].choices: probabilities sum to {total:.9f}, not 1")
    return seen


IPV4_MAPPED = ipaddress.ip_network("::ffff:0:0/96")  # edges unmap client addresses in it


@lru_cache(maxsize=1 << 16)
def _network(prefix: str):
    """Parsed CIDR (strict, canonical spelling), cached: a table repeats each prefix for every SNI and device.

    Canonical = what ``str()`` of the parsed network prints (and Go's ``netip.Prefix.String``): Python
    also accepts netmask notation (``10.0.0.0/255.0.0.0``), leading zeros (``/08``) and zones
    (``fe80::%eth0/64``), which the Go edge refuses; a table with them would be published and never applied.
    """
    net = ipaddress.ip_network(prefix, strict=True)
    if net.version == 6 and net.subnet_of(IPV4_MAPPED):  # Python and Go spell these differently; edges unmap addresses
        raise ValueError(f"{prefix!r} is an IPv4-mapped prefix (write the IPv4 prefix; edges match IPv4 clients by it)")
    if str(net) != prefix or "%" in prefix:
        raise ValueError(f"{prefix!r} is not a canonical prefix (write '{str(net.network_address).split('%')[0]}/{net.prefixlen}')")
    return net


def _check_rules(doc: dict, groups: set[str]) -> None:
    keys = set()
    for i, rule in enumerate(doc["rules"]):
        try:
            net = _network(rule["prefix"])
        except ValueError as err:
            raise TableError(f"decision table field rules[{i}].prefix: {err}") from None
        if rule["group"] not in groups:
            raise TableError(f"decision table field rules[{i}].group: unknown group {rule['group']!r}")
        key = (net, rule.get("sni"), rule.get("device"))
        if key in keys:
            raise TableError(f"decision table field rules[{i}]: duplicate rule for {rule['prefix']} sni={key[1]} device={key[2]}")
        keys.add(key)


def compile_table(policy, now: float, version: int = 1, archive=None, place_of=None) -> dict:
    """The decision table a policy publishes, validated: what the manager serves (before its guardrails)
    and what the simulator's table mode applies -- one function for both.

    From the policy's ``table_groups()`` and ``table_rules()``, its holdback and its cohort salt; with
    ``archive`` (the prefix archive of telemetry history), :func:`add_edge_rules` adds the rules real
    edges can match (``place_of``: prefix -> (asn, region) of its clients, for policies that group by them).
    """
    space = policy.space
    groups, rules = policy.table_groups(), policy.table_rules()
    used = {space.default_index} | {i for g in groups.values() for i in g}
    configs = {space.configs[i].id: dict(space.configs[i].changes()) for i in sorted(used)}
    doc = {
        "schema": SCHEMA_ID, "version": version, "generated_at": float(now), "policy": policy.name,
        "holdback": policy.holdback, "default": space.configs[space.default_index].id, "configs": configs,
        "groups": [{"id": gid, "choices": _normalized(space, probs)} for gid, probs in groups.items()],
        "rules": _known_only([r for r in rules if r["group"] in groups and not _mapped(r["prefix"])]),
    }
    if policy.cohort_salt:  # None only in policies pickled before cohorts existed: per-connection draws
        doc["salt"] = policy.cohort_salt
    if archive is not None:
        add_edge_rules(doc, policy, archive, now, place_of)
    return validate_table(doc, schema=False)


def _mapped(prefix: str) -> bool:
    """An IPv4-mapped prefix (inside ::ffff:0:0/96): no table rule. Telemetry has stored them as such until
    2026-12-07 (now as the IPv4 prefix), and learned state may still hold one: edges unmap client addresses, so its
    rule would never match, and the table refuses it (:func:`_network`), which would fail every cycle."""
    if not prefix.startswith("::ffff:"):
        return False
    try:
        net = ipaddress.ip_network(prefix, strict=False)
    except ValueError:
        return False
    return net.version == 6 and net.subnet_of(IPV4_MAPPED)


def _known_only(rules: list[dict]) -> list[dict]:
    """Rules with an empty ``sni`` or ``device`` (a policy's key for "not known", e.g. telemetry without SNI)
    written without that key, which is how a table says "any" (the schema refuses empty strings: Go read
    them as "unknown", Python as a name no connection has); the first rule wins where that makes two equal."""
    out, seen = [], set()
    for r in rules:
        if r.get("sni") == "" or r.get("device") == "":
            r = {k: v for k, v in r.items() if v != "" or k not in ("sni", "device")}
        key = (r["prefix"], r.get("sni"), r.get("device"))
        if key not in seen:
            seen.add(key)
            out.append(r)
    return out


def add_edge_rules(table: dict, policy, archive, now: float, place_of=None) -> int:
    """Add, per archived prefix, a rule without ``device`` and ``sni`` for the group the policy puts a
    connection of unknown device and website in (``policy.group_of``, no side effects).

    Class learners publish one rule per prefix x device x site. Real edges never match those for
    TCP-only telemetry: tailor-agent ignores every rule with ``sni`` or ``device`` (the TCP layer sees
    neither) and tailor-edge has no device map, so without these fallbacks a learned group never
    reaches a connection (found by the namespace demo). Device- or SNI-specific rules still win where
    they match (the most specific rule of the longest prefix wins). The connection's ASN and region are
    ``place_of(prefix)`` (the manager: what its telemetry and databases say, :mod:`tailor.enrich`), else
    unknown, so a group keyed by region or ISP reaches its prefixes too. Only groups of the table are used;
    returns the number of rules added.
    """
    from tailor.context import Context
    from tailor.scenario.model import ClientInfo

    groups = {g["id"] for g in table["groups"]}
    have = {(r["prefix"], r.get("sni"), r.get("device")) for r in table["rules"]}
    added = 0
    for prefix, h in archive.items(now):
        if h is None or (prefix, None, None) in have or _mapped(prefix):
            continue
        asn, region = place_of(prefix) if place_of is not None else (0, "")
        client = ClientInfo(prefix.split("/", 1)[0], prefix, asn, region, "", "")
        group = policy.group_of(Context(now, prefix, client, "", h.rtt_ms, h))
        if group in groups:
            table["rules"].append({"prefix": prefix, "group": group})
            added += 1
    return added


def _normalized(space, probs: dict[int, float]) -> list[dict]:
    total = sum(probs.values())
    return [{"config": space.configs[i].id, "p": p / total} for i, p in sorted(probs.items()) if p > 0]


def parse_table(data: str | bytes) -> dict:
    """Parse and validate a table's JSON text (NaN and Infinity refused as not JSON)."""
    try:
        doc = loads_strict(data)
    except (ValueError, UnicodeDecodeError) as err:
        raise TableError(f"decision table field (root): not JSON: {err}") from None
    return validate_table(doc)


def load_table(path: str | Path) -> dict:
    try:
        data = Path(path).read_bytes()
    except OSError as err:
        raise TableError(f"decision table {path}: {err}") from None
    return parse_table(data)
