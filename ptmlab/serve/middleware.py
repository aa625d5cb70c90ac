"""What surrounds the handlers: the request metrics (ASGI middleware), the error bodies (``{"error": ...}``, also for
a busy state store and Starlette's own errors), the key check, the body-size limit and the refusals of admission
(rate, budget, detector block, revoked key)."""

from __future__ import annotations

import datetime as dt
import time
from typing import TYPE_CHECKING

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from ptmlab.serve.excerpt import safe_message
from ptmlab.serve.metrics import Metrics
from ptmlab.serve.ratelimit import retry_after_header
from ptmlab.serve.state import KeyInfo, StoreBusy

if TYPE_CHECKING:
    from ptmlab.serve.context import ServeContext


def error(status: int, message: str, headers: dict | None = None) -> JSONResponse:
    return JSONResponse({"error": safe_message(message)}, status_code=status, headers=headers)


class RequestMetrics:
    """ASGI middleware: count the requests to ``path`` by status code and time them (plain ASGI: Starlette's
    ``@app.middleware("http")`` costs more per request than the rest of the bookkeeping together)."""

    def __init__(self, app, metrics: Metrics, path: str):
        self.app, self.metrics, self.path = app, metrics, path

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope.get("path") != self.path:
            return await self.app(scope, receive, send)
        t0, status, gone = time.perf_counter(), [500], [False]

        async def send_status(msg):
            if msg["type"] == "http.response.start":
                status[0] = msg["status"]
            await send(msg)

        async def receive_watch():
            msg = await receive()
            if msg["type"] == "http.disconnect":
                gone[0] = True
            return msg

        try:
            await self.app(scope, receive_watch, send_status)
        except Exception:
            if not gone[0]:
                raise
        finally:  # a client that left before its answer is counted apart (499), not as a server error
            self.metrics.request(499 if gone[0] and status[0] == 500 else status[0], time.perf_counter() - t0)


async def _store_busy(request: Request, exc: StoreBusy):
    request.app.state.context.metrics.reject("store")
    return error(503, "state store busy or unreachable: retry after the Retry-After seconds", {"Retry-After": "1"})


async def _http_error(request: Request, exc: StarletteHTTPException):
    return error(exc.status_code, str(exc.detail), getattr(exc, "headers", None))


def install(app: FastAPI, metrics: Metrics, path: str = "/v1/predict") -> None:
    """The error handlers and the metrics of ``path`` on ``app``."""
    app.add_exception_handler(StoreBusy, _store_busy)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_middleware(RequestMetrics, metrics=metrics, path=path)


async def authenticate(ctx: ServeContext, request: Request) -> KeyInfo | None:
    """The key of ``Authorization: Bearer KEY`` (None: missing, malformed or unknown); 400 for two headers."""
    given = request.headers.getlist("authorization")
    if len(given) > 1:  # which one counts would be a guess (a proxy may add its own): refused
        raise StarletteHTTPException(400, "more than one Authorization header: send exactly one")
    auth = given[0] if given else ""
    scheme, _, key = auth.partition(" ")
    if scheme.lower() != "bearer" or not key.strip() or len(key) > 200:
        return None
    return await ctx.in_store(ctx.store.find_key, key.strip())


async def read_body(request: Request, limit: int) -> bytes | None:
    """The body, or None as soon as it is known to exceed ``limit`` bytes (declared or streamed)."""
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > limit):
        return None
    chunks, size = [], 0
    async for chunk in request.stream():  # a client that leaves mid-body raises ClientDisconnect (counted 499)
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def _seconds_to_midnight() -> float:
    now = dt.datetime.now(dt.UTC)
    tomorrow = (now + dt.timedelta(days=1)).replace(hour=0, minute=0, second=0, microsecond=0)
    return (tomorrow - now).total_seconds()


def refused(metrics: Metrics, key: KeyInfo, adm) -> JSONResponse:
    """The answer to a request the state store did not admit (``adm.reason``), counted in ``metrics``."""
    if adm.reason == "rate":
        metrics.reject("rate")
        slow = " (throttled: this key's queries look like an extraction attack)" if adm.flagged else ""
        return error(429, f"rate limit of {key.rate:g} texts/s exceeded{slow}: retry after the Retry-After "
                          f"seconds", {"Retry-After": retry_after_header(adm.retry_after)})
    if adm.reason == "blocked":
        metrics.reject("blocked")
        return error(403, "this key's queries look like a model-extraction attack and it is blocked: contact "
                          "the operator")
    if adm.reason == "revoked":
        metrics.reject("auth")
        return error(401, "revoked API key", {"WWW-Authenticate": "Bearer"})
    metrics.reject("budget")
    return error(429, f"daily query budget of {key.daily_budget} texts is spent: retry after the Retry-After "
                      f"seconds (UTC midnight)", {"Retry-After": retry_after_header(_seconds_to_midnight())})
