"""Decision-table and telemetry contracts, driven by the shared vectors in spec/vectors/."""

import json
from pathlib import Path

import pytest

from tailor.errors import TableError
from tailor.table import parse_table, validate_table
from tailor.telemetry import TelemetryError, parse_batch, validate_batch

VECTORS = Path(__file__).resolve().parents[1] / "spec" / "vectors"
INVALID = json.loads((VECTORS / "decision-table" / "invalid.json").read_text())["cases"]
TEL_INVALID = json.loads((VECTORS / "telemetry" / "invalid.json").read_text())["cases"]


@pytest.mark.parametrize("name", sorted(INVALID))
def test_invalid_tables_rejected_with_field(name):
    case = INVALID[name]
    with pytest.raises(TableError) as err:
        parse_table(case["raw"]) if "raw" in case else validate_table(case["table"])
    msg = str(err.value)
    assert f"field {case['field']}" in msg and case["contains"] in msg, msg


def test_telemetry_valid_vector():
    validate_batch(json.loads((VECTORS / "telemetry" / "valid.json").read_text())["batch"])


@pytest.mark.parametrize("name", sorted(TEL_INVALID))
def test_invalid_telemetry_rejected_with_field(name):
    case = TEL_INVALID[name]
    with pytest.raises(TelemetryError) as err:
        parse_batch(case["raw"]) if "raw" in case else validate_batch(case["batch"])
    assert f"field {case['field']}" in str(err.value) and case["contains"] in str(err.value), str(err.value)
