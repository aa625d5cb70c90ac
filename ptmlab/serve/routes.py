"""The endpoints: ``GET /healthz``, ``GET /metrics`` and ``POST /v1/predict``, each reading the app's
``ServeContext`` (``request.app.state.context``).

Order of checks for a prediction: key (400 for two Authorization headers; 401, from the header alone: an
unauthenticated client never makes the server read or parse a body, and never learns why a body would be invalid;
403 for a key without the predict scope), body size (413, while reading), request shape
and limits (422), then admission in the state store (429 rate or budget, 403 blocked by the detector), per-request
tokenization (422 naming the text), the batched forward pass (422 when this request's input makes the model fail,
408 timeout, 429 queue full), and one committed transaction charging and logging the answer before it is sent.
Input faults found after admission are charged and audited, so they are not free to repeat.
"""

from __future__ import annotations

import asyncio

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse

from ptmlab.serve.answers import answers
from ptmlab.serve.batcher import BatchFailed, QueueFull
from ptmlab.serve.context import ServeContext
from ptmlab.serve.middleware import authenticate, error, read_body, refused
from ptmlab.serve.parsing import read_request
from ptmlab.serve.predictor import InputError, TaskInfo
from ptmlab.serve.schemas import ERRORS, REQUEST_BODY, ErrorResponse, PredictRequest, PredictResponse
from ptmlab.serve.state import AuditRow, KeyInfo, text_hash


def add_routes(app: FastAPI) -> None:
    """The endpoints on ``app`` (each takes its context from ``app.state.context``)."""
    app.get("/healthz", responses={503: {"description": "the state store does not answer"}})(healthz)
    app.get("/metrics", response_class=PlainTextResponse,
            responses={code: {"model": ErrorResponse} for code in (400, 401, 403, 503)})(prometheus)
    app.post("/v1/predict", response_model=PredictResponse, responses=ERRORS, openapi_extra=REQUEST_BODY)(predict)


async def healthz(request: Request):
    """Liveness and what a client may ask: the model's name, labels, task and every task a request may name
    with its labels; with --public-metrics also the model's path, the state store, the detector and the
    precision. ``store`` says whether the state store answers a ping (one per second at most, on its own
    thread, waiting --state-timeout at most); when it does not, 503 with ``"store": "unreachable"``."""
    ctx: ServeContext = request.app.state.context
    cfg, info, predictor = ctx.cfg, ctx.info, ctx.predictor
    tasks = [{"name": t.name, "kind": t.kind, "labels": t.labels, "pair": t.pair} for t in info.tasks] or [
        {"name": info.task, "kind": "embedding" if predictor.embedding else
         "classification" if info.threshold is None else "multi-label",
         "labels": info.labels, "pair": info.pair, **({} if info.threshold is None else
                                                      {"threshold": info.threshold})}]
    out = {"status": "ok" if ctx.batcher.thread.is_alive() else "degraded", "model": ctx.name,
           "model_type": info.model_type, "task": info.task, "labels": info.labels, "tasks": tasks,
           "max_length": info.max_length, "policy": ctx.defences.policy.name}
    if cfg.public_metrics:
        out.update({"model": info.path, "parameters": info.parameters, "positions": info.positions,
                    "precision": predictor.precision, "queued_texts": ctx.batcher.waiting, "state": ctx.store.where,
                    "detector": cfg.detector_action if cfg.detector else "off"})
    if await ctx.health.reachable():
        out["store"] = "ok"
        return out
    out.update({"status": "unavailable", "store": "unreachable",
                "error": "the state store does not answer: requests get 503 until it does"})
    return JSONResponse(out, status_code=503, headers={"Retry-After": "1"})


async def prometheus(request: Request):
    """Prometheus text format: requests by status, rejects by reason, latency and batch-size histograms (needs
    a key with the admin scope unless the server runs with --public-metrics)."""
    ctx: ServeContext = request.app.state.context
    if ctx.cfg.public_metrics:
        return ctx.metrics.render()
    key = await authenticate(ctx, request)
    if key is None:
        return error(401, "/metrics needs 'Authorization: Bearer KEY' with an admin key (or serve with "
                          "--public-metrics)", {"WWW-Authenticate": "Bearer"})
    if "admin" not in key.scopes:
        return error(403, "/metrics needs a key with the admin scope: `ptmlab keys create --scopes admin`")
    return ctx.metrics.render()


async def predict(request: Request):
    """Labels (and probabilities, by the output policy) for each text."""
    ctx: ServeContext = request.app.state.context
    metrics = ctx.metrics
    key = await authenticate(ctx, request)
    if key is None:
        metrics.reject("auth")
        return error(401, "missing, unknown or revoked API key: send 'Authorization: Bearer KEY' with a key "
                          "from `ptmlab keys create`", {"WWW-Authenticate": "Bearer"})
    if "predict" not in key.scopes:
        metrics.reject("auth")
        return error(403, "this key may not ask for predictions (no predict scope): use a key created with "
                          "--scopes predict")
    body = await read_body(request, ctx.cfg.max_body)
    if body is None:
        metrics.reject("size")
        return error(413, f"request body exceeds {ctx.cfg.max_body} bytes: send fewer or shorter texts")
    req, head, problem = read_request(ctx.cfg, ctx.predictor, body, key)
    if problem:
        metrics.reject("invalid")
        return error(422, problem)
    adm = await ctx.in_store(ctx.store.admit, key.id, len(req.texts), ctx.hold_seconds,
                             ctx.defences.detector_policy)
    if not adm.ok:
        return refused(metrics, key, adm)
    return await _admitted(ctx, key, req, head, adm)


async def _admitted(ctx: ServeContext, key: KeyInfo, req: PredictRequest, head: TaskInfo | None, adm):
    """An admitted request through the model: its hold is settled (charged and audited) or released (the
    server's fault, nothing charged) on every path."""
    store, metrics, guard = ctx.store, ctx.metrics, ctx.defences.detector_policy
    n = len(req.texts)
    pairs = req.text_pairs or [None] * n
    try:
        encs, scores = await asyncio.to_thread(_prepare, ctx, req)
    except InputError as e:  # the client's input: charged and audited, so it is not free to repeat
        await ctx.in_store(store.settle, key.id, adm.hold, _audit_rows(req.texts, pairs, [None] * n), (),
                           "invalid", guard)
        metrics.reject("input")
        return error(422, str(e))
    try:
        fut = ctx.batcher.submit(encs, head.name if head else None)
    except QueueFull:
        await ctx.in_store(store.release, adm.hold)
        metrics.reject("busy")
        return error(429, "server busy (too many texts queued): retry shortly", {"Retry-After": "1"})
    try:
        probs = await asyncio.wait_for(fut, ctx.cfg.timeout)
    except BatchFailed as e:  # the server's fault: nothing charged
        await ctx.in_store(store.release, adm.hold)
        metrics.reject("server")
        return error(503, str(e), {"Retry-After": "1"})
    except TimeoutError:
        await ctx.in_store(store.release, adm.hold)
        metrics.reject("timeout")
        return error(408, f"no answer within {ctx.cfg.timeout:g}s: retry later or send fewer texts")
    except InputError as e:
        await ctx.in_store(store.settle, key.id, adm.hold, _audit_rows(req.texts, pairs, scores), (), "model_error",
                           guard)
        metrics.reject("input")
        return error(422, f"{e}: change or drop the offending text")
    answer, marks, labels = answers(ctx.predictor, ctx.defences, head, encs, req.texts, pairs, probs)
    if not await ctx.in_store(store.settle, key.id, adm.hold, _audit_rows(req.texts, pairs, scores), marks, "ok",
                              guard):
        return refused(metrics, key, type(adm)(False, reason="budget"))
    metrics.answered(n)
    return PredictResponse(model=ctx.name, policy=ctx.defences.policy.name, task=head.name if head else ctx.info.task,
                           label_names=labels, predictions=answer)


def _prepare(ctx: ServeContext, req: PredictRequest):
    """The request's encodings and its texts' detector scores (in a thread: tokenizing is CPU work)."""
    return ctx.predictor.encode(req.texts, req.text_pairs, req._words), ctx.defences.scores(req.texts)


def _audit_rows(texts, pairs, scores) -> list[AuditRow]:
    return [AuditRow(text_hash(t, p), len(t) + len(p or ""), s) for t, p, s in zip(texts, pairs, scores, strict=True)]
