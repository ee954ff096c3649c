"""Telemetry batches (edge -> manager): validation against spec/telemetry.schema.json."""

from __future__ import annotations

from typing import Any

from tailor.errors import TailorError
from tailor.table import loads_strict, schema_validator


class TelemetryError(TailorError):
    """A telemetry batch or record is invalid (message names the field)."""


def validate_batch(doc: Any) -> dict:
    """Return ``doc`` if valid, else raise TelemetryError naming the first bad field and the reason."""
    validator = schema_validator("telemetry.schema.json")
    errors = sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path))
    if errors:
        e = errors[0]
        path = ""
        for p in e.absolute_path:
            path += f"[{p}]" if isinstance(p, int) else (f".{p}" if path else str(p))
        raise TelemetryError(f"telemetry field {path or '(root)'}: {e.message}")
    return doc


def parse_batch(data: str | bytes) -> dict:
    """Parse and validate a batch's JSON text (NaN and Infinity refused as not JSON)."""
    try:
        doc = loads_strict(data)
    except (ValueError, UnicodeDecodeError) as err:
        raise TelemetryError(f"telemetry field (root): not JSON: {err}") from None
    return validate_batch(doc)
