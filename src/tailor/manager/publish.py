"""Published decision tables: serialized body, ETag, content key, resolver; long-poll notification.

A table is serialized once at publication; ``GET /v1/table`` serves those bytes with a strong ETag
(``"<version>-<sha1 prefix>"``). A new version is published only when the content (default,
configs, groups, rules, holdback) changes. :class:`Notifier` wakes long-polling requests on the
event loop from whichever thread published.
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import json
from dataclasses import dataclass, field

from tailor.manager.guardrails import GuardConfig, check_allowed, greedy
from tailor.table import DecisionTable, validate_table

CONTENT_KEYS = ("default", "configs", "groups", "rules", "holdback", "salt")
MAX_TABLE_BYTES = 32 << 20  # half of what tailor-edge and tailor-agent accept (rules.MaxTableBytes, 64 MiB)


def enforce_budget(table: dict, max_rules: int) -> list[str]:
    """Cut ``table["rules"]`` to ``max_rules``, in place; returns a note when rules were dropped.

    What goes last is what is least general: prefix-only rules (what TCP-layer edges match) are kept first,
    then SNI-only, device-only, and SNI-and-device rules; within a kind, the table's order (policies emit
    per prefix). A connection whose specific rule is dropped falls back to its prefix's rule.
    """
    rules = table["rules"]
    if len(rules) <= max_rules:
        return []
    rank = {(False, False): 0, (True, False): 1, (False, True): 2, (True, True): 3}
    order = sorted(range(len(rules)), key=lambda i: (rank["sni" in rules[i], "device" in rules[i]], i))
    keep = sorted(order[:max_rules])
    table["rules"] = [rules[i] for i in keep]
    return [f"rule budget: kept {max_rules} of {len(rules)} rules (most specific dropped first)"]


def dumps(doc: dict) -> bytes:
    return json.dumps(doc, separators=(",", ":"), sort_keys=True).encode()


def content_key(doc: dict) -> str:
    """Hash of what edges act on (not version, time or policy name)."""
    return hashlib.sha1(dumps({k: doc.get(k) for k in CONTENT_KEYS})).hexdigest()


@dataclass
class Published:
    doc: dict
    body: bytes
    etag: str
    origin: str  # "policy" or "operator"
    key: str
    _resolver: DecisionTable | None = field(default=None, repr=False)

    @classmethod
    def of(cls, doc: dict, origin: str) -> Published:
        body = dumps(doc)
        return cls(doc, body, f'"{doc["version"]}-{hashlib.sha1(body).hexdigest()[:12]}"', origin, content_key(doc))

    @property
    def version(self) -> int:
        return self.doc["version"]

    def resolver(self) -> DecisionTable:
        """The table indexed for ``tailor.table.decide`` (validated at publication, not again)."""
        if self._resolver is None:
            self._resolver = DecisionTable(self.doc, validated=True)
        return self._resolver


def check_operator_table(doc, guard_cfg: GuardConfig) -> dict:
    """Validate an operator's table (TableError names the field); enforce AllowedConfig and holdback."""
    table = copy.deepcopy(validate_table(doc))
    check_allowed(table, guard_cfg.allowed)
    table["holdback"] = max(float(table.get("holdback", 0.0)), guard_cfg.holdback)
    return table


class Notifier:
    """Wakes coroutines waiting for a new table; ``notify`` may be called from any thread."""

    def __init__(self):
        self.loop: asyncio.AbstractEventLoop | None = None
        self._event: asyncio.Event | None = None

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop, self._event = loop, asyncio.Event()

    def notify(self) -> None:
        if self.loop is not None and not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self._wake)

    def _wake(self) -> None:
        event, self._event = self._event, asyncio.Event()
        event.set()

    async def wait(self, is_current, timeout: float) -> None:
        """Return when ``is_current()`` turns false or after ``timeout`` seconds."""
        deadline = asyncio.get_running_loop().time() + timeout
        while is_current() and self._event is not None:
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                return
            try:
                await asyncio.wait_for(self._event.wait(), left)
            except TimeoutError:
                return


def group_rows(doc: dict, guard, now: float) -> list[tuple]:
    """One group_history row per group of the published table: greedy config, its p, evidence."""
    rows = []
    for g in doc["groups"]:
        best = greedy(g["choices"])
        p = next(c["p"] for c in g["choices"] if c["config"] == best)
        treated, hold = guard.pooled(g["id"]), guard.holdback.get(g["id"])
        imp = guard.improvement(g["id"])
        rows.append((now, g["id"], best, p, treated.n, hold.n if hold else 0, None if imp != imp else imp))
    return rows
