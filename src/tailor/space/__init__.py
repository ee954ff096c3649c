"""Knob registry and configuration spaces."""

from tailor.space.config import AllowedConfig, ConfigSpace, Configuration
from tailor.space.knobs import Knob, KnobRegistry, load_registry

__all__ = ["AllowedConfig", "ConfigSpace", "Configuration", "Knob", "KnobRegistry", "load_registry"]
