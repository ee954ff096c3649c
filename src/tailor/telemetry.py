"""Telemetry batches (edge -> manager): validation against spec/telemetry.schema.json."""

from __future__ import annotations

from typing import Any

import jsonschema

from tailor.errors import TailorError
from tailor.table import load_schema


class TelemetryError(TailorError):
    """A telemetry batch or record is invalid (message names the field)."""


def validate_batch(doc: Any) -> dict:
    """Return ``doc`` if valid, else raise TelemetryError naming the first bad field and the reason."""
    validator = jsonschema.Draft202012Validator(load_schema("telemetry.schema.json"))
    errors = sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path))
    if errors:
        e = errors[0]
        path = ""
        for p in e.absolute_path:
            path += f"[{p}]" if isinstance(p, int) else (f".{p}" if path else str(p))
        raise TelemetryError(f"telemetry field {path or '(root)'}: {e.message}")
    return doc
