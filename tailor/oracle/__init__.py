"""Oracles: completion and page-load time for (network condition, workload, configuration)."""

from tailor.oracle.base import NOISE_SHAPE, ConditionGrid, Oracle, PLTTensor, WebObject, Website

__all__ = ["NOISE_SHAPE", "ConditionGrid", "Oracle", "PLTTensor", "WebObject", "Website"]
