"""The Go binaries the demo and the fault tests run: tailor-edge, tailor-agent, tailor-link.

Each is ``$TAILOR_EDGE`` / ``$TAILOR_AGENT`` / ``$TAILOR_LINK`` when set, else ``out/bin/<name>`` of the checkout,
built from ``edge/`` and rebuilt when any non-test Go source under ``edge/`` is newer than the binary
(:func:`tailor.paths.go_binary`, shared with the testbed).
"""

from __future__ import annotations

from tailor import paths
from tailor.errors import TailorError

ROOT = paths.CHECKOUT if paths.CHECKOUT is not None else paths.ROOT  # the repository (installed: the package's data)
ENV = {"tailor-edge": "TAILOR_EDGE", "tailor-agent": "TAILOR_AGENT", "tailor-link": "TAILOR_LINK"}


class DemoError(TailorError):
    """The demo world could not be built or run (the message names the step and the tool)."""


def binary(name: str) -> str:
    """Absolute path of ``name`` (one of tailor-edge, tailor-agent, tailor-link), building it if needed."""
    if name not in ENV:
        raise DemoError(f"The 'name' parameter must be one of {sorted(ENV)}. Got {name!r}.")
    return paths.go_binary(name, ENV[name], DemoError)
