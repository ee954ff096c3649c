"""Shared fixtures: a small real scenario and the model oracle (no mocks)."""

import importlib.util
import os
import sys
from pathlib import Path

import pytest

from tailor.oracle.select import default_oracle
from tailor.scenario import load_scenario


@pytest.fixture(scope="session")
def oracle():
    return default_oracle()


@pytest.fixture(scope="session")
def bench_script():
    """Load a script of bench/ by name as a module (bench/ is not a package). bench/ goes on sys.path, as it is first
    there when a script runs, so that a script can import a sibling's functions."""
    bench = Path(__file__).resolve().parents[1] / "bench"
    if str(bench) not in sys.path:
        sys.path.append(str(bench))

    def load(name: str):
        spec = importlib.util.spec_from_file_location(name, bench / f"{name}.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod
    return load


@pytest.fixture(scope="session")
def small_scenario(oracle):
    return load_scenario("default", n_sessions=40, seed=3, websites=sorted(oracle.websites))


def pytest_collection_modifyitems(config, items):
    if os.geteuid() == 0:
        return
    skip = pytest.mark.skip(reason="needs root (namespaces, TUN, BPF); runs in .ci/run")
    for item in items:
        if "privileged" in item.keywords or "testbed" in item.keywords:
            item.add_marker(skip)
