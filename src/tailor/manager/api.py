"""HTTP API of the manager (FastAPI). Writes need ``Authorization: Bearer <TAILOR_TOKEN>``.

GET  /healthz                 liveness and the current table version
POST /v1/telemetry            a telemetry batch (semantics: tailor.manager.ingest)
GET  /v1/table                the current table; ETag / If-None-Match -> 304; ?wait=S&version=V long-polls
POST /v1/table                operator override (?hold_s=S, reason in X-Tailor-Reason or ?reason=)
DELETE /v1/table/override     release the override; the next cycle publishes the policy's table again
POST /v1/cycle                run an update cycle now
GET  /v1/audit                recent audit entries (JSON)
GET  /metrics                 Prometheus
GET  /                        dashboard
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
from contextlib import asynccontextmanager

from fastapi import FastAPI, HTTPException, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse, JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST

from tailor.errors import TableError
from tailor.manager.config import ManagerConfig
from tailor.manager.dashboard import render_dashboard
from tailor.manager.logs import log
from tailor.manager.service import CycleError, Manager

WRITER_PERIOD_S = 0.1


def create_app(cfg: ManagerConfig, manager: Manager | None = None) -> FastAPI:
    """The manager's ASGI app; its lifespan runs the writer and the update cycle and closes the store."""
    mgr = manager or Manager(cfg)
    if cfg.insecure_dev:
        log("auth.disabled", logging.WARNING, detail="--insecure-dev: writes accepted without a token")

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        mgr.notifier.attach(asyncio.get_running_loop())
        tasks = [asyncio.create_task(_writer(mgr))]
        if cfg.update_freq_s > 0:
            tasks.append(asyncio.create_task(_cycler(mgr, cfg.update_freq_s)))
        try:
            yield
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await run_in_threadpool(mgr.close)

    app = FastAPI(title="tailor manager", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.manager = mgr
    _routes(app, mgr, cfg)
    return app


async def _writer(mgr: Manager) -> None:
    while True:
        await asyncio.sleep(WRITER_PERIOD_S)
        if len(mgr.queue):
            try:
                await run_in_threadpool(mgr.flush)
            except Exception:  # keep ingesting; the records stay counted as accepted
                logging.getLogger("tailor.manager").exception("writer failed")


async def _cycler(mgr: Manager, period: float) -> None:
    while True:
        await asyncio.sleep(period)
        try:
            await run_in_threadpool(mgr.run_cycle)
        except Exception:
            logging.getLogger("tailor.manager").exception("update cycle failed")


def _authorize(request: Request, cfg: ManagerConfig) -> str:
    """Constant-time bearer check (both sides hashed first, so length leaks nothing). Returns the actor."""
    if cfg.insecure_dev:
        return "insecure-dev"
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    given = hashlib.sha256(token.strip().encode()).digest()
    if scheme.lower() != "bearer" or not hmac.compare_digest(given, hashlib.sha256(cfg.token.encode()).digest()):
        raise HTTPException(401, "missing or wrong bearer token", headers={"WWW-Authenticate": "Bearer"})
    return "operator"


async def _read_body(request: Request, limit: int) -> bytes:
    length = request.headers.get("content-length")
    if length is not None:
        if not length.isdigit():
            raise HTTPException(400, "bad Content-Length")
        if int(length) > limit:
            raise HTTPException(413, f"body larger than {limit} bytes")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise HTTPException(413, f"body larger than {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def _etag_matches(header: str | None, etag: str) -> bool:
    if not header:
        return False
    tags = [t.strip().removeprefix("W/") for t in header.split(",")]
    return "*" in tags or etag in tags


def _routes(app: FastAPI, mgr: Manager, cfg: ManagerConfig) -> None:
    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception):
        logging.getLogger("tailor.manager").error("unhandled error", exc_info=exc)
        return JSONResponse({"error": "internal error"}, status_code=500)

    @app.get("/healthz")
    def healthz():
        return mgr.health_report()

    @app.post("/v1/telemetry")
    async def telemetry(request: Request):
        _authorize(request, cfg)
        body = await _read_body(request, cfg.max_body_bytes)
        result = await run_in_threadpool(mgr.ingest, body)
        headers = {"Retry-After": "1"} if result.status == 503 else None
        return JSONResponse(result.body(), status_code=result.status, headers=headers)

    @app.get("/v1/table")
    async def get_table(request: Request, wait: float = 0.0, version: int | None = None):
        if wait > 0 and version is not None:
            await mgr.notifier.wait(lambda: mgr.current.version == version, min(wait, cfg.max_wait_s))
        cur = mgr.current
        headers = {"ETag": cur.etag, "X-Tailor-Table-Version": str(cur.version), "Cache-Control": "no-cache"}
        if _etag_matches(request.headers.get("if-none-match"), cur.etag):
            return Response(status_code=304, headers=headers)
        return Response(cur.body, media_type="application/json", headers=headers)

    @app.post("/v1/table")
    async def post_table(request: Request, hold_s: float = 0.0, reason: str = ""):
        actor = _authorize(request, cfg)
        body = await _read_body(request, cfg.max_body_bytes)
        try:
            doc = json.loads(body)
        except ValueError as err:
            return JSONResponse({"error": f"body is not JSON: {err}"}, status_code=400)
        why = request.headers.get("x-tailor-reason", reason)
        try:
            published = await run_in_threadpool(mgr.override, doc, actor, why, hold_s)
        except TableError as err:
            return JSONResponse({"error": str(err)}, status_code=400)
        return {"version": published.version, "etag": published.etag}

    @app.delete("/v1/table/override")
    async def release(request: Request, reason: str = ""):
        actor = _authorize(request, cfg)
        await run_in_threadpool(mgr.clear_override, actor, request.headers.get("x-tailor-reason", reason))
        return {"released": True, "version": mgr.current.version}

    @app.post("/v1/cycle")
    async def cycle(request: Request):
        _authorize(request, cfg)
        try:
            summary = await run_in_threadpool(mgr.run_cycle)
        except CycleError as err:
            return JSONResponse({"error": str(err)}, status_code=500)
        return {k: (None if isinstance(v, float) and v != v else v) for k, v in summary.__dict__.items()}

    @app.get("/v1/audit")
    def audit(limit: int = 50):
        rows = mgr.store.recent_audit(max(1, min(limit, 1000)))
        return [dict(zip(("ts", "version", "actor", "action", "reason"), r)) for r in rows]

    @app.get("/metrics")
    def metrics():
        return Response(mgr.metrics.render(), media_type=CONTENT_TYPE_LATEST)

    @app.get("/", response_class=HTMLResponse)
    def dashboard():
        return HTMLResponse(render_dashboard(mgr))
