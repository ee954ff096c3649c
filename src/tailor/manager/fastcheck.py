"""Fast telemetry validation: per-record checkers compiled from spec/telemetry.schema.json.

``jsonschema`` costs ~100 µs per record; the manager must ingest >= 50,000 records/s. This module
reads the same schema file and turns each record property into a small closure (type, enum, const,
pattern, minimum/maximum, exclusive bounds, min/max length), so a schema change changes the checks.
A schema keyword it does not implement raises at import (a test guards this).

Messages and field paths follow jsonschema's, so ``validate_batch_fast`` raises the same
``TelemetryError`` (same field, same wording) as :func:`tailor.telemetry.validate_batch`.
``check_batch`` is the lenient form the manager uses: header errors reject the batch, record errors
reject only that record.

>>> header, good, bad = check_batch({"schema": "tailor.telemetry/v1", "source": "e", "records": [{}]})
>>> header, len(good), bad[0][1]
(None, 0, "telemetry field records[0]: 'time' is a required property")
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tailor.table import ecma_pattern, load_schema, short_repr
from tailor.telemetry import TelemetryError

Check = Callable[[Any], "str | None"]
_HANDLED = {"type", "enum", "const", "pattern", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
            "minLength", "maxLength", "description"}
_TYPES: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "integer": lambda v: (isinstance(v, int) and not isinstance(v, bool)) or (isinstance(v, float) and v.is_integer()),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
}


def _type_check(name: str) -> Check:
    ok = _TYPES[name]
    return lambda v: None if ok(v) else f"{v!r} is not of type {name!r}"


def _bound_check(key: str, bound: float) -> Check:
    """jsonschema's wording for minimum / maximum / exclusive bounds (only applied to numbers)."""
    test, text = {
        "minimum": (lambda v: v >= bound, f"is less than the minimum of {bound!r}"),
        "maximum": (lambda v: v <= bound, f"is greater than the maximum of {bound!r}"),
        "exclusiveMinimum": (lambda v: v > bound, f"is less than or equal to the minimum of {bound!r}"),
        "exclusiveMaximum": (lambda v: v < bound, f"is greater than or equal to the maximum of {bound!r}"),
    }[key]
    return lambda v: None if test(v) else f"{v!r} {text}"


def _keyword_check(key: str, value: Any) -> Check | None:
    if key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        return _bound_check(key, value)
    if key == "enum":
        allowed = list(value)
        return lambda v: None if v in allowed and not isinstance(v, bool) else f"{v!r} is not one of {allowed!r}"
    if key == "const":
        return lambda v: None if v == value and type(v) is type(value) else f"{value!r} was expected"
    if key == "pattern":
        rx = ecma_pattern(value)  # '$' = end of input, as in JSON Schema and Go (not before a final newline)
        return lambda v: None if rx.search(v) else f"{short_repr(v)} does not match {value!r}"
    if key == "minLength":
        return lambda v: None if len(v) >= value else f"{v!r} should be non-empty" if value == 1 else f"{v!r} is too short"
    if key == "maxLength":
        return lambda v: None if len(v) <= value else f"{short_repr(v)} is too long"
    return None


_FAST_TYPES = {
    "string": "type(v) is str",
    "boolean": "type(v) is bool",
    "integer": "(type(v) is int or (type(v) is float and v.is_integer()))",
    "number": "(type(v) is int or type(v) is float)",
    "object": "type(v) is dict",
    "array": "type(v) is list",
}


def compile_fast(schema: dict) -> Callable[[Any], bool]:
    """A predicate that is True only for values the schema accepts, as one generated expression (no call per
    keyword): exact JSON types, then every keyword inline. It may say False for a valid value of an unusual type
    (a subclass); :func:`compile_property` then runs the keyword checks, which decide and word the error."""
    consts: dict[str, Any] = {}

    def const(value: Any) -> str:
        name = f"_c{len(consts)}"
        consts[name] = value
        return name

    parts = [_FAST_TYPES[schema["type"]]] if "type" in schema else []
    is_str = "" if schema.get("type") == "string" else "type(v) is str and "
    is_num = "" if schema.get("type") in ("number", "integer") else "(type(v) is int or type(v) is float) and "
    ops = {"minimum": ">=", "maximum": "<=", "exclusiveMinimum": ">", "exclusiveMaximum": "<"}
    for key, value in schema.items():
        if key in ops:
            parts.append(f"({is_num}v {ops[key]} {const(value)})")
        elif key == "enum":
            parts.append(f"(type(v) is not bool and v in {const(list(value))})")
        elif key == "const":
            parts.append(f"(v == {const(value)} and type(v) is {const(type(value))})")
        elif key == "pattern":
            parts.append(f"({is_str}{const(ecma_pattern(value))}.search(v) is not None)")
        elif key == "minLength":
            parts.append(f"({is_str}len(v) >= {const(value)})")
        elif key == "maxLength":
            parts.append(f"({is_str}len(v) <= {const(value)})")
    return eval("lambda v: " + (" and ".join(parts) or "True"), consts)  # noqa: S307 (built from the schema file)


def compile_property(schema: dict) -> Check:
    """One closure checking a value against a (flat) property schema; first failing keyword wins. Values the
    generated predicate (:func:`compile_fast`) accepts pass at once."""
    unknown = set(schema) - _HANDLED
    if unknown:
        raise TelemetryError(f"fastcheck cannot compile schema keywords {sorted(unknown)}; extend tailor.manager.fastcheck")
    type_check = _type_check(schema["type"]) if "type" in schema else None
    numeric = schema.get("type") in ("number", "integer")
    textual = schema.get("type") == "string"
    rest = [c for k, v in schema.items() if k != "type" and (c := _keyword_check(k, v)) is not None]
    fast = compile_fast(schema)

    def check(value: Any) -> str | None:
        if fast(value):
            return None
        if type_check is not None and (msg := type_check(value)):
            return msg
        if (numeric and isinstance(value, bool)) or (textual and not isinstance(value, str)):
            return None
        for c in rest:
            if (msg := c(value)):
                return msg
        return None

    return check


def _record_spec() -> tuple[dict[str, Check], dict[str, Callable[[Any], bool]], tuple[str, ...], int]:
    schema = load_schema("telemetry.schema.json")
    records = schema["properties"]["records"]
    item = records["items"]
    if item.get("additionalProperties", True) is not False:
        raise TelemetryError("fastcheck assumes records have additionalProperties: false")
    props = {name: compile_property(sub) for name, sub in item["properties"].items()}
    fast = {name: compile_fast(sub) for name, sub in item["properties"].items()}
    return props, fast, tuple(item["required"]), records.get("maxItems", 1 << 62)


PROPS, FAST, REQUIRED, MAX_RECORDS = _record_spec()
_HEADER_SCHEMA = load_schema("telemetry.schema.json")
HEADER = {k: compile_property(v) for k, v in _HEADER_SCHEMA["properties"].items() if k != "records"}
HEADER_REQUIRED = tuple(_HEADER_SCHEMA["required"])


def record_error(rec: Any) -> tuple[str, str] | None:
    """(relative path, message) of a record's first error in jsonschema order, or None when valid."""
    if not isinstance(rec, dict):
        return "", f"{rec!r} is not of type 'object'"
    for name in REQUIRED:
        if name not in rec:
            return "", f"{name!r} is a required property"
    extra = [k for k in rec if k not in PROPS]
    if extra:
        return "", f"Additional properties are not allowed ({', '.join(map(repr, extra))} {'was' if len(extra) == 1 else 'were'} unexpected)"
    for name, value in rec.items():  # the common case: every value passes its generated predicate
        if not FAST[name](value):
            break
    else:
        return None
    for name in _sorted_keys(rec):
        msg = PROPS[name](rec[name])
        if msg:
            return "." + name, msg
    return None


_KEY_CACHE: dict[tuple, list[str]] = {}


def _sorted_keys(rec: dict) -> list[str]:
    """Sorted keys, cached per key tuple: edges send records with the same keys over and over."""
    key = tuple(rec)
    out = _KEY_CACHE.get(key)
    if out is None:
        out = sorted(key)
        if len(_KEY_CACHE) < 4096:
            _KEY_CACHE[key] = out
    return out


def header_errors(doc: Any) -> list[tuple[list, str]]:
    """Errors outside the records' items: (path list, message), jsonschema wording."""
    if not isinstance(doc, dict):
        return [([], f"{doc!r} is not of type 'object'")]
    errs = [([], f"{name!r} is a required property") for name in HEADER_REQUIRED if name not in doc]
    extra = [k for k in doc if k not in HEADER and k != "records"]
    if extra:
        errs.append(([], f"Additional properties are not allowed ({', '.join(map(repr, extra))} "
                         f"{'was' if len(extra) == 1 else 'were'} unexpected)"))
    for name, check in HEADER.items():
        if name in doc and (msg := check(doc[name])):
            errs.append(([name], msg))
    recs = doc.get("records")
    if "records" in doc and not isinstance(recs, list):
        errs.append((["records"], f"{recs!r} is not of type 'array'"))
    elif isinstance(recs, list) and len(recs) > MAX_RECORDS:
        errs.append((["records"], f"{short_repr(recs)} is too long"))
    return errs


def _fmt(path: list) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "(root)"


def check_batch(doc: Any) -> tuple[str | None, list[tuple[int, dict]], list[tuple[int, str]]]:
    """(header error or None, [(index, record)] of valid records, [(index, reason)] of rejected records).

    A header error (not an object, wrong schema/source/dropped, records not an array or too many)
    rejects the whole batch: no record is returned as good.
    """
    errs = header_errors(doc)
    if errs:
        path, msg = sorted(errs, key=lambda e: e[0])[0]
        return f"telemetry field {_fmt(path)}: {msg}", [], []
    good, bad = [], []
    for i, rec in enumerate(doc["records"]):
        err = record_error(rec)
        if err is None:
            good.append((i, rec))
        else:
            bad.append((i, f"telemetry field records[{i}]{err[0]}: {err[1]}"))
    return None, good, bad


def validate_batch_fast(doc: Any) -> dict:
    """Same contract as :func:`tailor.telemetry.validate_batch`: return ``doc`` or raise naming the first bad field."""
    errs = header_errors(doc)
    recs = doc.get("records") if isinstance(doc, dict) else None
    if isinstance(recs, list) and not any(p == ["records"] for p, _ in errs):
        for i, rec in enumerate(recs):
            err = record_error(rec)
            if err is not None:
                errs.append((["records", i] + ([err[0][1:]] if err[0] else []), err[1]))
                break
    if errs:
        path, msg = sorted(errs, key=lambda e: e[0])[0]
        raise TelemetryError(f"telemetry field {_fmt(path)}: {msg}")
    return doc
