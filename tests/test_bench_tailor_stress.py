"""bench/tailor_stress.py: the stress populations are what its docstring states (weights, links, buffers), drawn by
the scenario generator with its usual perturbations."""

import math

import numpy as np
import pytest

from tailor.scenario.generate import generate


@pytest.mark.parametrize("population", ["stress-extremes", "stress-one-tier"])
def test_stress_populations_hold_their_stated_links(bench_script, population):
    st = bench_script("tailor_stress")
    tiers = st.tiers(population)
    assert math.isclose(sum(t.weight for _, t in tiers), 1.0)
    world = generate(population, 120, seed=3, tiers=tiers)
    stated = {t.access: (t.offpeak.bw_mbps, t.offpeak.rtt_ms, t.buffer_bdp) for _, t in tiers}
    assert {s.client.access for s in world.sessions} == set(stated)
    for s in world.sessions:
        bw, rtt, buffer = stated[s.client.access]
        c = s.conditions
        assert c.buffer_bdp == buffer
        # the generator's perturbations are lognormal with sigmas of at most 0.2 per level (docs/scenarios.md):
        # every step within a factor e^1.5 of the stated point
        assert np.all(np.abs(np.log(c.bw_mbps / bw)) < 1.5) and np.all(np.abs(np.log(c.rtt_ms / rtt)) < 1.0)
