"""Line syntax and field schema of the scenario file format (grammar in docs/scenarios.md).

A line is ``directive key=value key=value ...``; ``#`` starts a comment; values with spaces are quoted
as in a POSIX shell (``description="two words"``). Each directive has a schema: its fields, which are
required, and a converter per field. Converters raise :class:`Bad` with the rule a value broke, and the
parser turns that into a message naming file, line, directive and field.
"""

from __future__ import annotations

import ipaddress
import json
import math
import shlex

FORMAT_HEADER = "tailor-scenario"
FORMAT_VERSION = "1"


class Bad(Exception):
    """A field value broke a rule; ``args[0]`` is the rule, e.g. 'a number > 0'."""


def tokenize(text: str) -> list[str]:
    """Shell-like split with ``#`` comments; plain lines skip shlex (it is slow on 10^5 lines)."""
    if '"' not in text and "'" not in text and "\\" not in text:
        return text.split("#", 1)[0].split()
    lex = shlex.shlex(text, posix=True)
    lex.whitespace_split = True
    lex.commenters = "#"
    try:
        return list(lex)
    except ValueError as exc:  # "No closing quotation" / "No escaped character"
        raise Bad(f"well-formed quoting ({exc})") from None


def split_fields(tokens: list[str]) -> tuple[dict[str, str], list[str]]:
    """``key=value`` tokens -> dict; returns (fields, problems) with a problem per malformed token."""
    fields, problems = {}, []
    for tok in tokens:
        key, sep, value = tok.partition("=")
        if not sep or not key:
            problems.append(f"token {tok!r} is not key=value")
        elif key in fields:
            problems.append(f"field {key!r} is given twice")
        else:
            fields[key] = value
    return fields, problems


def number(value: str) -> float:
    try:
        x = float(value)
    except ValueError:
        raise Bad("a number") from None
    if not math.isfinite(x):
        raise Bad("a finite number")
    return x


def positive(value: str) -> float:
    x = number(value)
    if x <= 0:
        raise Bad("a number > 0")
    return x


def non_negative(value: str) -> float:
    x = number(value)
    if x < 0:
        raise Bad("a number >= 0")
    return x


def fraction(value: str) -> float:
    x = number(value)
    if not 0 <= x < 1:
        raise Bad("a loss fraction in [0, 1)")
    return x


def asn(value: str) -> int:
    try:
        x = int(value)
    except ValueError:
        raise Bad("an integer AS number") from None
    if not 0 < x < 2**32:
        raise Bad("an AS number in [1, 4294967295]")
    return x


def text(value: str) -> str:
    if not value:
        raise Bad("a non-empty string")
    return value


def address(value: str) -> str:
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        raise Bad("an IPv4 or IPv6 address") from None


def prefix(value: str) -> str:
    try:
        return str(ipaddress.ip_network(value, strict=True))
    except ValueError as exc:
        raise Bad(f"a network prefix such as 10.1.2.0/24 ({exc})") from None


def version(value: str) -> str:
    if value != FORMAT_VERSION:
        raise Bad(f"format version {FORMAT_VERSION}")
    return value


# directive -> {field: (converter, required)}; "provenance" takes any key (see parse_provenance_value).
SCHEMA = {
    "scenario": {"name": (text, True), "chunk": (positive, False), "description": (str, False)},
    "session": {"id": (text, True), "client": (address, True), "prefix": (prefix, True), "asn": (asn, True),
                "region": (text, True), "device": (text, True), "access": (text, True),
                "start": (non_negative, True), "buffer": (positive, False), "end": (positive, False)},
    "net": {"t": (non_negative, True), "bw": (positive, False), "rtt": (positive, False), "loss": (fraction, False),
            "trace": (text, False), "trace_offset": (non_negative, False)},
    "load": {"t": (non_negative, True), "site": (text, True)},
}

JSON_PREFIX = "json:"  # a provenance value that is not a string is written as json:<JSON>


def parse_provenance_value(value: str):
    if not value.startswith(JSON_PREFIX):
        return value
    try:
        return json.loads(value[len(JSON_PREFIX):])
    except json.JSONDecodeError as exc:
        raise Bad(f"valid JSON after 'json:' ({exc.msg} at char {exc.pos})") from None


def format_provenance_value(value) -> str:
    return value if isinstance(value, str) else JSON_PREFIX + json.dumps(value, sort_keys=True, default=str)


def format_number(x: float) -> str:
    """Shortest text that reads back to the same float (integers without '.0')."""
    x = float(x)
    return str(int(x)) if x.is_integer() and abs(x) < 1e15 else repr(x)


def format_line(directive: str, fields: dict[str, object]) -> str:
    parts = [directive]
    for key, value in fields.items():
        value = format_number(value) if isinstance(value, float) else str(value)
        parts.append(f"{key}={shlex.quote(value) if value == '' or _needs_quote(value) else value}")
    return " ".join(parts)


def _needs_quote(value: str) -> bool:
    return any(c.isspace() or c in "#'\"\\" for c in value)
