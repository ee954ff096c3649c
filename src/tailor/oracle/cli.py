"""``tailor oracle validate`` / ``calibrate``: the oracles against a measured dataset (tailor.oracle.validate,
tailor.oracle.calibrate)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tailor.errors import ParameterError


def add_parser(sub) -> None:
    p = sub.add_parser("oracle", help="check an oracle against measured data (validate, calibrate)")
    osub = p.add_subparsers(dest="oracle_command", required=True)
    v = osub.add_parser("validate", help="rank correlation, best-configuration agreement and the cost of the "
                                         "oracle's choice per measured cell (model, and measured leave-one-condition-out)")
    v.add_argument("--dataset", default=None, help="testbed dataset directory (default: the measured oracle's, tb-v2)")
    v.add_argument("--oracle", choices=("model", "model-v6", "model-timeline", "model-tailprobe", "measured", "both"),
                   default="both", help="both = model and measured; model-timeline: the model with the page timeline; "
                                        "model-v6: the model before v7's lone tail (MODEL.md 6f); model-tailprobe: the same "
                                        "as model since v7")
    v.add_argument("--json", metavar="FILE", default=None, help="also write every figure and per-cell row as JSON")
    c = osub.add_parser("calibrate", help="choose the model's fitted constant by leave-one-condition-out "
                                          "cross-validation and print the held-out figures")
    c.add_argument("--dataset", default=None, help="dataset to fit on (default: the page campaign, data/oracle/tb-v3)")
    c.add_argument("--check", action="append", default=[], metavar="DIR",
                   help="a dataset taking no part in the choice, scored at the fitted value (repeatable)")
    c.add_argument("--oracle", choices=("model", "model-timeline"), default="model",
                   help="the page model whose constant is fitted (model-timeline: the page timeline)")
    c.add_argument("--json", metavar="FILE", default=None, help="also write every figure as JSON")


def _dataset(path, command: str, name: str = "dataset") -> Path:
    from tailor.oracle.measured import DEFAULT_DATASET

    dataset = Path(path) if path else DEFAULT_DATASET
    if not any((dataset / sub / "measurements.parquet").exists() for sub in (".", "pages")):
        raise ParameterError(f"The '{name}' parameter of tailor oracle {command} must be a testbed dataset "
                             f"directory (with measurements.parquet or pages/measurements.parquet). Got {str(dataset)!r}.")
    return dataset


def run(args) -> int:
    if args.oracle_command == "calibrate":
        from tailor.oracle.calibrate import calibrate, format_report as calibrate_report
        from tailor.oracle.measured import PAGE_DATASET

        result = calibrate(_dataset(args.dataset or PAGE_DATASET, "calibrate"),
                           [_dataset(c, "calibrate", "check") for c in args.check], model=args.oracle)
        print(calibrate_report(result))
        if args.json:
            Path(args.json).write_text(json.dumps(result, indent=1, allow_nan=True))
            print(f"figures: {args.json}", file=sys.stderr)
        return 0
    from tailor.oracle.validate import ORACLES, format_report, validate

    dataset = _dataset(args.dataset, "validate")
    oracles = ORACLES if args.oracle == "both" else (args.oracle,)
    result = validate(dataset, oracles)
    print(format_report(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1, allow_nan=True))
        print(f"figures: {args.json}", file=sys.stderr)
    return 0
