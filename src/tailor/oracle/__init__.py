"""Oracles: completion and page-load time for (network condition, workload, configuration)."""

from tailor.oracle.base import NOISE_SHAPE, ConditionGrid, Oracle, PLTTensor, WebObject, Website
from tailor.oracle.model import DEFAULT_GRID, ModelOracle
from tailor.oracle.websites import default_catalog

__all__ = ["DEFAULT_GRID", "NOISE_SHAPE", "ConditionGrid", "ModelOracle", "Oracle", "PLTTensor", "WebObject",
           "Website", "default_catalog"]
