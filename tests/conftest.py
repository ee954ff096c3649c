"""Shared fixtures: a small real scenario and the model oracle (no mocks)."""

import os

import pytest

from tailor.oracle.select import default_oracle
from tailor.scenario import load_scenario


@pytest.fixture(scope="session")
def oracle():
    return default_oracle()


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
