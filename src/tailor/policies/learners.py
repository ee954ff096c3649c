"""Shared machinery of the learning baselines: learner keys and per-key observation stores."""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from tailor.grouping import NetworkClasses
from tailor.grouping.classes import DEVICES, feature_row
from tailor.policies.base import Context, Policy


class ArmStats:
    """Per-configuration running means of observed completion time, with bounded memory (PerfMemory)."""

    __slots__ = ("sums", "counts", "memory", "_history")

    def __init__(self, n_arms: int, memory: int = 0):
        self.sums = np.zeros(n_arms)
        self.counts = np.zeros(n_arms, dtype=int)
        self.memory = memory
        self._history: dict[int, list[float]] = defaultdict(list)

    def add(self, arm: int, value: float) -> None:
        self.sums[arm] += value
        self.counts[arm] += 1
        if self.memory:
            hist = self._history[arm]
            hist.append(value)
            if len(hist) > self.memory:
                self.sums[arm] -= hist.pop(0)
                self.counts[arm] -= 1

    def means(self) -> np.ndarray:
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.counts > 0, self.sums / np.maximum(self.counts, 1), np.nan)

    def best(self) -> int | None:
        """Arm with the lowest mean among tried arms, or None when nothing was tried."""
        if not self.counts.any():
            return None
        m = self.means()
        return int(np.nanargmin(m))

    @property
    def total(self) -> int:
        return int(self.counts.sum())


class KeyedLearner(Policy):
    """A policy that learns per key: per client ('per-client') or per network class ('nc').

    Keys include the website, as Configanator keeps one model per website x class. Connections whose
    prefix the archive does not know get the default configuration (key None).
    """

    granularity = "nc"  # or "client"

    def _init_state(self) -> None:
        self._classes = NetworkClasses(k=self.classes, seed=self.seed) if self.granularity == "nc" else None

    def key(self, ctx: Context) -> str | None:
        if ctx.history is None:
            return None
        if self._classes is None:
            return f"{ctx.client.client_id}|{ctx.website}"
        cls = self._classes.classify(ctx)
        return None if cls is None else f"{cls}|{ctx.website}"

    def group_of(self, ctx: Context) -> str:
        return self.key(ctx) or "unknown"

    def _observe_classes(self, ctx: Context) -> None:
        if self._classes is not None:
            self._classes.add(ctx)

    def _plan(self, now: float) -> None:
        if self._classes is not None:
            self._classes.refit()

    def table_rules(self) -> list[dict]:
        """Per-client keys map to /32 (or /128) rules; class keys to each archived prefix x device."""
        groups = set(self.table_groups())
        if self._classes is None:
            rules = []
            for key in groups - {"default"}:
                client, site = key.split("|", 1)
                bits = 32 if ":" not in client else 128
                rules.append({"prefix": f"{client}/{bits}", "sni": site, "group": key})
            return rules
        return self._class_rules(groups)

    def _class_rules(self, groups: set[str]) -> list[dict]:
        archive = getattr(self.env, "archive", None)
        if archive is None:
            return []
        sites = sorted({g.split("|", 1)[1] for g in groups if "|" in g})  # sorted: reproducible rule order
        rules = []
        for prefix, h in archive.items(0.0):
            for device in DEVICES:
                cls = self._classes.classify_row(feature_row(h.rtt_ms, h, device))
                rules.extend({"prefix": prefix, "sni": site, "device": device, "group": f"{cls}|{site}"}
                             for site in sites if f"{cls}|{site}" in groups)
        return rules
