"""Trace-driven simulator."""

from tailor.sim.simulator import RunResult, SimConfig, Simulator

__all__ = ["RunResult", "SimConfig", "Simulator"]
