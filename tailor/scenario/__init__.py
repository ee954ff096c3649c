"""Scenarios: client sessions with attributes and time series of network conditions."""

from tailor.scenario.model import ClientInfo, ConditionSeries, Scenario, Session

__all__ = ["ClientInfo", "ConditionSeries", "Scenario", "Session"]
