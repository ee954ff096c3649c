"""Tailor: per-client-group tuning of transport and HTTP settings for web edge servers."""

from tailor.errors import TailorError

__version__ = "0.1.0"
__all__ = ["TailorError", "__version__"]
