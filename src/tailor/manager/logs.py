"""Structured logs: one JSON object per line (``event`` plus fields) through ``logging``."""

from __future__ import annotations

import json
import logging
import time

LOGGER = logging.getLogger("tailor.manager")


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc = {"ts": round(record.created, 3), "level": record.levelname.lower(), "logger": record.name}
        fields = getattr(record, "fields", None)
        doc.update(fields if isinstance(fields, dict) else {"msg": record.getMessage()})
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return json.dumps(doc, default=str)


def log(event: str, level: int = logging.INFO, **fields) -> None:
    LOGGER.log(level, event, extra={"fields": {"event": event, **fields}})


def setup(level: int = logging.INFO) -> None:
    """Route tailor.manager and uvicorn logs to stderr as JSON lines."""
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter())
    for name in ("tailor.manager", "uvicorn", "uvicorn.error", "uvicorn.access"):
        lg = logging.getLogger(name)
        lg.handlers[:] = [handler]
        lg.setLevel(level)
        lg.propagate = False


def now() -> float:
    return time.time()
