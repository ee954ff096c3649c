"""Grouping clients: per-prefix history and network classes."""

from tailor.grouping.archive import PrefixArchive
from tailor.grouping.classes import NetworkClasses, features

__all__ = ["NetworkClasses", "PrefixArchive", "features"]
