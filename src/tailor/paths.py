"""Where Tailor's files are: the spec/ and data/ it reads, and the Go binaries it builds.

One place answers, for a checkout and for an installed package alike:

* ``SPEC_DIR`` (knob registry, schemas, vectors) and ``DATA_DIR`` (measured oracle datasets, link traces,
  example scenarios): the checkout's ``spec/`` and ``data/``, else the copies the wheel carries in
  ``tailor/_resources/`` (``pip install .``). ``$TAILOR_SPEC_DIR`` and ``$TAILOR_DATA_DIR`` override either;
  they are read once, when tailor is imported.
* ``CHECKOUT``: the repository root when running from one (``./tailor``, ``PYTHONPATH=src``, editable
  install), else None. Only a checkout has the Go sources of ``edge/``.
* :func:`go_binary`: ``$TAILOR_EDGE``-style override, else ``out/bin/<name>`` of the checkout, rebuilt when a Go
  source is newer; an installed package has no Go sources, so there the override is required.

Outputs (``out/evaluate-...``, reports) are relative to the current directory in both cases.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from importlib.resources import files
from pathlib import Path

from tailor.errors import TailorError


class PathsError(TailorError):
    """A file Tailor needs is not where the checkout, the installed package or the environment says."""


def _checkout() -> Path | None:
    root = Path(__file__).resolve().parents[2]  # <root>/src/tailor/paths.py
    return root if (root / "spec" / "knobs.json").is_file() and (root / "src" / "tailor").is_dir() else None


def _resources() -> Path:
    return Path(str(files("tailor"))) / "_resources"


def _locate(kind: str, env_var: str, probe: str) -> Path:
    """``$env_var``, else the checkout's ``kind/``, else the package's copy; the first that holds ``probe``."""
    env = os.environ.get(env_var)
    if env:
        if not (Path(env) / probe).exists():
            raise PathsError(f"${env_var}={env} must be a {kind}/ directory holding {probe}")
        return Path(env).resolve()
    base = CHECKOUT if CHECKOUT is not None else _resources()
    if not (base / kind / probe).exists():
        raise PathsError(f"{kind}/{probe} not found in {base} (a broken install? set ${env_var})")
    return base / kind


CHECKOUT = _checkout()
SPEC_DIR = _locate("spec", "TAILOR_SPEC_DIR", "knobs.json")
DATA_DIR = _locate("data", "TAILOR_DATA_DIR", "oracle")
# What relative paths such as "data/traces/x" in a scenario file are resolved against.
ROOT = DATA_DIR.parent


def go_binary(name: str, env_var: str, error: type[TailorError] = PathsError) -> str:
    """``$env_var`` if set, else ``out/bin/<name>`` of the checkout, (re)built with ``go build`` from ``edge/``.

    Rebuilt when any non-test Go source under ``edge/`` is newer than the binary (kept outside ``edge/`` so other
    builds don't race). Raises ``error`` with the remedy when the override is wrong, there is no checkout, Go is
    missing or the build fails.
    """
    env = os.environ.get(env_var)
    if env:
        if not os.access(env, os.X_OK):
            raise error(f"${env_var}={env} is not an executable file")
        return env
    if CHECKOUT is None or not (CHECKOUT / "edge" / "go.mod").is_file():
        raise error(f"{name} is built from the Go sources of a Tailor checkout (edge/), which an installed package "
                    f"does not have: build it there (cd edge && go build ./cmd/{name}) and set ${env_var}")
    out = CHECKOUT / "out" / "bin" / name
    sources = [p for p in (CHECKOUT / "edge").rglob("*.go") if not p.name.endswith("_test.go")]
    if not out.exists() or max((p.stat().st_mtime for p in sources), default=0.0) > out.stat().st_mtime:
        go = shutil.which("go") or ("/usr/local/go/bin/go" if os.access("/usr/local/go/bin/go", os.X_OK) else None)
        if go is None:
            raise error(f"building {name} needs Go (https://go.dev/dl or apt-get install golang), or set ${env_var}")
        res = subprocess.run([go, "build", "-o", str(out), f"./cmd/{name}"], cwd=CHECKOUT / "edge",
                             capture_output=True, text=True, timeout=600)
        if res.returncode != 0:
            raise error(f"building {name} failed (set ${env_var} to a binary): {res.stderr[-400:]}")
    return str(out)
