"""Extra report sections contributed by policy families (Configanator figures, SmartIW metrics, ...).

A module in ``tailor/eval/`` named ``figures_*.py`` registers functions with ``@report_section``; each
takes the finished Evaluation and returns a list of (title, html) pairs (html may embed PNGs made with
``tailor.eval.report.png``), or an empty list when its policies were not part of the run.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable

SECTIONS: list[Callable] = []


def report_section(fn: Callable) -> Callable:
    SECTIONS.append(fn)
    return fn


def extra_sections(ev) -> list[tuple[str, str]]:
    import tailor.eval as pkg

    for m in pkgutil.iter_modules(pkg.__path__):
        if m.name.startswith("figures_"):
            importlib.import_module(f"tailor.eval.{m.name}")
    out: list[tuple[str, str]] = []
    for fn in SECTIONS:
        out.extend(fn(ev))
    return out
