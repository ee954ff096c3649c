"""HTTP API of the manager (FastAPI). Credentials and scopes (docs/security.md):

* operator: ``Authorization: Bearer <TAILOR_OPERATOR_TOKEN>`` — every endpoint;
* edge: ``Authorization: Bearer <one of TAILOR_EDGE_TOKENS>`` — telemetry POST and table GET only.

GET  /healthz                 liveness, "ok" or "degraded" with the problems (open)
POST /v1/telemetry            a telemetry batch (semantics: tailor.manager.ingest)            edge
GET  /v1/table                the current table, signed (X-Tailor-Signature); ETag / If-None-Match -> 304;
                              ?wait=S&version=V long-polls                                      edge (or open)
POST /v1/table                operator override (?hold_s=S, reason in X-Tailor-Reason or ?reason=)  operator
DELETE /v1/table/override     release the override; the next cycle publishes the policy's table again  operator
POST /v1/cycle                run an update cycle now                                           operator
GET  /v1/audit                recent audit entries (JSON)                                       operator (or open)
GET  /v1/edges                per table version, the edges whose telemetry says they run it    operator (or open)
GET  /metrics                 Prometheus (counts only, open)
GET  /                        dashboard; a browser may send the operator token as the Basic password  operator (or open)

Writes (POST, DELETE) accept only ``Content-Type: application/json`` bodies and refuse a request whose
``Origin`` is not in ``--allowed-origin``: a web page cannot make a browser publish a table.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import logging
import math
from contextlib import asynccontextmanager

from fastapi import FastAPI, HTTPException, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse, JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.requests import ClientDisconnect

from tailor.errors import TableError
from tailor.manager.config import ManagerConfig
from tailor.manager.dashboard import render_dashboard
from tailor.manager.ingest import clip
from tailor.manager.logs import log
from tailor.manager.service import CycleError, Manager
from tailor.table import loads_strict

MAX_AUDIT_REASON = 1000  # characters of an operator's reason stored in the audit log
INGEST_PARALLEL = 2  # telemetry bodies parsed at once (each waits its turn; found by review, 2026-12-07)
# telemetry requests read or waiting for a parse slot beyond those: more are answered 503 with Retry-After before
# their body is read, and counted (tailor_ingest_batches_total{result="busy"}); each holds up to --max-body-bytes,
# so at most (INGEST_PARALLEL + INGEST_WAITING) bodies are in memory (until 2026-12-07 any number; found by review)
INGEST_WAITING = 8

WRITER_PERIOD_S = 0.1


def create_app(cfg: ManagerConfig, manager: Manager | None = None) -> FastAPI:
    """The manager's ASGI app; its lifespan runs the writer and the update cycle and closes the store."""
    mgr = manager or Manager(cfg)
    if cfg.insecure_dev:
        log("auth.disabled", logging.WARNING, detail="--insecure-dev: every endpoint open (loopback only)")
    elif not cfg.edge_tokens:
        log("auth.no_edge_tokens", logging.WARNING,
            detail="TAILOR_EDGE_TOKENS unset: edges need the operator token, which can publish tables")

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


def _token_ok(given: str, expected: str) -> bool:
    """Constant-time comparison (both sides hashed first, so length leaks nothing)."""
    return hmac.compare_digest(hashlib.sha256(given.encode()).digest(), hashlib.sha256(expected.encode()).digest())


def _authorize(request: Request, cfg: ManagerConfig, scope: str = "operator", read: bool = False) -> str:
    """The actor ("operator" or "edge") when the request's credential grants ``scope``, else 401/403.

    ``read``: an open read (``--open-reads``) needs no credential, and the operator may use HTTP Basic
    (any user name, the token as password) so that a browser can show the dashboard.
    """
    if cfg.insecure_dev:
        return "insecure-dev"
    if read and cfg.open_reads:
        return "anonymous"
    scheme, _, cred = request.headers.get("authorization", "").partition(" ")
    scheme, cred = scheme.lower(), cred.strip()
    if read and scheme == "basic":
        try:
            cred = base64.b64decode(cred, validate=True).decode().partition(":")[2]
            scheme = "bearer"
        except (ValueError, UnicodeDecodeError):
            cred = ""
    if scheme == "bearer" and cred:
        if cfg.token and _token_ok(cred, cfg.token):
            return "operator"
        if any(_token_ok(cred, t) for t in cfg.edge_tokens):
            if scope == "edge":
                return "edge"
            raise HTTPException(403, f"an edge credential cannot do this (needs the {scope} scope)")
    headers = {"WWW-Authenticate": 'Basic realm="tailor"' if read else "Bearer"}
    raise HTTPException(401, "missing or wrong bearer token", headers=headers)


def _check_post(request: Request, cfg: ManagerConfig) -> None:
    """Writes take JSON only and no foreign Origin (a cross-site form or fetch from a browser)."""
    ctype = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if ctype != "application/json":
        raise HTTPException(415, f"Content-Type must be application/json, got {ctype[:100] or 'none'!r}")
    _check_origin(request, cfg)


def _check_origin(request: Request, cfg: ManagerConfig) -> None:
    origin = request.headers.get("origin")
    if origin is not None and origin not in cfg.allowed_origins:
        raise HTTPException(403, f"Origin {origin[:100]!r} is not allowed (--allowed-origin)")


async def _read_body(request: Request, limit: int) -> bytes:
    length = request.headers.get("content-length")
    if length is not None:
        if not length.isdigit():
            raise HTTPException(400, "bad Content-Length")
        if int(length) > limit:
            raise HTTPException(413, f"body larger than {limit} bytes")
    chunks, size = [], 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise HTTPException(413, f"body larger than {limit} bytes")
            chunks.append(chunk)
    except ClientDisconnect:  # gone, or cut off at --body-timeout (counted there): an answer nobody reads, no
        raise HTTPException(400, "client disconnected before the end of its body") from None  # traceback per client
    return b"".join(chunks)


def _etag_matches(header: str | None, etag: str) -> bool:
    if not header:
        return False
    tags = [t.strip().removeprefix("W/") for t in header.split(",")]
    return "*" in tags or etag in tags


def _routes(app: FastAPI, mgr: Manager, cfg: ManagerConfig) -> None:
    parsing = asyncio.Semaphore(INGEST_PARALLEL)
    admitted = 0  # telemetry requests between admission and their answer (one event loop: no lock)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception):
        logging.getLogger("tailor.manager").error("unhandled error", exc_info=exc)
        return JSONResponse({"error": "internal error"}, status_code=500)

    @app.get("/healthz")
    def healthz():
        return mgr.health_report()

    @app.post("/v1/telemetry")
    async def telemetry(request: Request):
        nonlocal admitted
        _authorize(request, cfg, "edge")
        _check_post(request, cfg)
        if admitted >= INGEST_PARALLEL + INGEST_WAITING:
            mgr.metrics.batches.labels("busy").inc()
            return JSONResponse({"error": f"busy: {admitted} telemetry batches in progress (at most "
                                          f"{INGEST_PARALLEL + INGEST_WAITING}); not stored, send it again"},
                                status_code=503, headers={"Retry-After": "1"})
        admitted += 1
        try:
            body = await _read_body(request, cfg.max_body_bytes)
            async with parsing:  # at most INGEST_PARALLEL bodies parsed at once: a 16 MiB body of empty objects
                result = await run_in_threadpool(mgr.ingest, body)  # takes 400 MB to parse (eight at once 1.4 GB)
        finally:
            admitted -= 1
        headers = {"Retry-After": "1"} if result.status == 503 else None
        return JSONResponse(result.body(), status_code=result.status, headers=headers)

    @app.get("/v1/table")
    async def get_table(request: Request, wait: float = 0.0, version: int | None = None):
        _authorize(request, cfg, "edge", read=True)
        if wait > 0 and version is not None:
            await mgr.notifier.wait(lambda: mgr.current.version == version, min(wait, cfg.max_wait_s))
        cur = mgr.current
        headers = {"ETag": cur.etag, "X-Tailor-Table-Version": str(cur.version), "Cache-Control": "no-cache",
                   **mgr.signature(cur)}
        if _etag_matches(request.headers.get("if-none-match"), cur.etag):
            return Response(status_code=304, headers=headers)
        return Response(cur.body, media_type="application/json", headers=headers)

    @app.post("/v1/table")
    async def post_table(request: Request, hold_s: float = 0.0, reason: str = ""):
        actor = _authorize(request, cfg)
        _check_post(request, cfg)
        body = await _read_body(request, cfg.max_body_bytes)
        try:
            doc = loads_strict(body)
        except (ValueError, UnicodeDecodeError) as err:
            return JSONResponse({"error": clip(f"decision table field (root): not JSON: {err}")}, status_code=400)
        except RecursionError:
            return JSONResponse({"error": "decision table field (root): nested too deeply"}, status_code=400)
        if not (math.isfinite(hold_s) and hold_s >= 0):  # a nan or negative hold pinned the override for good
            return JSONResponse({"error": f"parameter hold_s: must be a finite number >= 0, got {hold_s}"},
                                status_code=400)
        why = request.headers.get("x-tailor-reason", reason)
        if len(why) > MAX_AUDIT_REASON:
            return JSONResponse({"error": f"parameter reason: {len(why)} characters, at most {MAX_AUDIT_REASON}"},
                                status_code=400)
        try:
            published = await run_in_threadpool(mgr.override, doc, actor, why, hold_s)
        except TableError as err:
            return JSONResponse({"error": clip(str(err))}, status_code=400)
        return {"version": published.version, "etag": published.etag}

    @app.delete("/v1/table/override")
    async def release(request: Request, reason: str = ""):
        actor = _authorize(request, cfg)
        _check_origin(request, cfg)
        why = request.headers.get("x-tailor-reason", reason)
        if len(why) > MAX_AUDIT_REASON:
            return JSONResponse({"error": f"parameter reason: {len(why)} characters, at most {MAX_AUDIT_REASON}"},
                                status_code=400)
        await run_in_threadpool(mgr.clear_override, actor, why)
        return {"released": True, "version": mgr.current.version}

    @app.post("/v1/cycle")
    async def cycle(request: Request):
        _authorize(request, cfg)
        _check_origin(request, cfg)
        try:
            summary = await run_in_threadpool(mgr.run_cycle)
        except CycleError as err:
            return JSONResponse({"error": str(err)}, status_code=500)
        return {k: (None if isinstance(v, float) and v != v else v) for k, v in summary.__dict__.items()}

    @app.get("/v1/audit")
    def audit(request: Request, limit: int = 50):
        _authorize(request, cfg, read=True)
        rows = mgr.store.recent_audit(max(1, min(limit, 1000)))
        return [dict(zip(("ts", "version", "actor", "action", "reason"), r)) for r in rows]

    @app.get("/metrics")
    def metrics():
        return Response(mgr.metrics.render(), media_type=CONTENT_TYPE_LATEST)

    @app.get("/v1/edges")
    def edges(request: Request):
        _authorize(request, cfg, read=True)
        return mgr.edges_report()

    @app.get("/", response_class=HTMLResponse)
    def dashboard(request: Request):
        _authorize(request, cfg, read=True)
        return HTMLResponse(render_dashboard(mgr))
