"""``tailor oracle validate``: the oracles against a measured dataset (tailor.oracle.validate)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tailor.errors import ParameterError


def add_parser(sub) -> None:
    p = sub.add_parser("oracle", help="check an oracle against measured data (validate)")
    osub = p.add_subparsers(dest="oracle_command", required=True)
    v = osub.add_parser("validate", help="rank correlation, best-configuration agreement and the cost of the "
                                         "oracle's choice per measured cell (model, and measured leave-one-condition-out)")
    v.add_argument("--dataset", default=None, help="testbed dataset directory (default: the measured oracle's, tb-v2)")
    v.add_argument("--oracle", choices=("model", "measured", "both"), default="both")
    v.add_argument("--json", metavar="FILE", default=None, help="also write every figure and per-cell row as JSON")


def run(args) -> int:
    from tailor.oracle.measured import DEFAULT_DATASET
    from tailor.oracle.validate import ORACLES, format_report, validate

    dataset = Path(args.dataset) if args.dataset else DEFAULT_DATASET
    if not any((dataset / sub / "measurements.parquet").exists() for sub in (".", "pages")):
        raise ParameterError(f"The 'dataset' parameter of tailor oracle validate must be a testbed dataset "
                             f"directory (with measurements.parquet or pages/measurements.parquet). Got {str(dataset)!r}.")
    oracles = ORACLES if args.oracle == "both" else (args.oracle,)
    result = validate(dataset, oracles)
    print(format_report(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1, allow_nan=True))
        print(f"figures: {args.json}", file=sys.stderr)
    return 0
