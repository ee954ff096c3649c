"""Scenarios: client sessions with attributes and time series of network conditions.

``load_scenario(name_or_path)`` returns a built-in generated scenario (``BUILTIN_SCENARIOS``) or parses
a scenario file (docs/scenarios.md); ``generate`` draws built-in scenarios from published figures.
"""

from tailor.scenario.fileformat import load_scenario, save_scenario
from tailor.scenario.generate import BUILTIN_SCENARIOS, generate
from tailor.scenario.importers import load_mahimahi, load_throughput_series
from tailor.scenario.model import ClientInfo, ConditionSeries, Scenario, Session

__all__ = ["BUILTIN_SCENARIOS", "ClientInfo", "ConditionSeries", "Scenario", "Session", "generate",
           "load_mahimahi", "load_scenario", "load_throughput_series", "save_scenario"]
