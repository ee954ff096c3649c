"""The Go binaries the demo and the fault tests run: tailor-edge, tailor-agent, tailor-link.

Each is ``$TAILOR_EDGE`` / ``$TAILOR_AGENT`` / ``$TAILOR_LINK`` when set, else ``out/bin/<name>`` built from
``edge/`` and rebuilt when any non-test Go source under ``edge/`` is newer than the binary (the same rule
as :func:`tailor.testbed.server.tailor_link_binary`, kept outside ``edge/`` so builds don't race).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from tailor.errors import TailorError

ROOT = Path(__file__).resolve().parents[3]
ENV = {"tailor-edge": "TAILOR_EDGE", "tailor-agent": "TAILOR_AGENT", "tailor-link": "TAILOR_LINK"}


class DemoError(TailorError):
    """The demo world could not be built or run (the message names the step and the tool)."""


def binary(name: str) -> str:
    """Absolute path of ``name`` (one of tailor-edge, tailor-agent, tailor-link), building it if needed."""
    if name not in ENV:
        raise DemoError(f"The 'name' parameter must be one of {sorted(ENV)}. Got {name!r}.")
    env = os.environ.get(ENV[name])
    if env:
        if not os.access(env, os.X_OK):
            raise DemoError(f"${ENV[name]}={env} is not an executable file")
        return env
    out = ROOT / "out" / "bin" / name
    sources = [p for p in (ROOT / "edge").rglob("*.go") if not p.name.endswith("_test.go")]
    newest = max((p.stat().st_mtime for p in sources), default=0.0)
    if not out.exists() or newest > out.stat().st_mtime:
        go = shutil.which("go") or "/usr/local/go/bin/go"
        res = subprocess.run([go, "build", "-o", str(out), f"./cmd/{name}"], cwd=ROOT / "edge",
                             capture_output=True, text=True, timeout=600)
        if res.returncode != 0:
            raise DemoError(f"building {name} failed (set ${ENV[name]} to a binary): {res.stderr[-400:]}")
    return str(out)
