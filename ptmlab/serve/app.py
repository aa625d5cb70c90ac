"""The FastAPI app: ``POST /v1/predict``, ``GET /healthz``, ``GET /metrics`` and the OpenAPI spec.

Order of checks for a prediction: body size (413), key (401), rate limit (429), request shape and limits (422),
daily budget (429), then the batched forward pass (timeout 408, queue full 429); the answer is charged and logged
in one committed transaction before it is sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import time

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from ptmlab.serve.batcher import Batcher, QueueFull
from ptmlab.serve.config import ServeConfig
from ptmlab.serve.metrics import Metrics
from ptmlab.serve.policy import OutputPolicy, parse_policy
from ptmlab.serve.ratelimit import TokenBuckets, retry_after_header
from ptmlab.serve.state import AuditRow, KeyInfo, Store, text_hash


class PredictRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    texts: list[str] = Field(min_length=1, description="texts to classify (first sentences for pair tasks)")
    text_pairs: list[str] | None = Field(None, description="second sentences, one per text, for pair tasks")


class Prediction(BaseModel):
    label: str
    label_id: int
    probs: list[float] | None = None


class PredictResponse(BaseModel):
    model: str
    policy: str
    label_names: list[str]
    predictions: list[Prediction]


class ErrorResponse(BaseModel):
    error: str


ERRORS = {code: {"model": ErrorResponse} for code in (401, 408, 413, 422, 429)}


def _error(status: int, message: str, headers: dict | None = None) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=headers)


def _seconds_to_midnight() -> float:
    now = dt.datetime.now(dt.UTC)
    tomorrow = (now + dt.timedelta(days=1)).replace(hour=0, minute=0, second=0, microsecond=0)
    return (tomorrow - now).total_seconds()


class BodyLimit:
    """ASGI middleware: refuse bodies over ``limit`` bytes with 413 before the app parses them."""

    def __init__(self, app, limit: int):
        self.app = app
        self.limit = limit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.limit):
            return await self._refuse(scope, receive, send)
        chunks, size, more = [], 0, True
        while more:
            msg = await receive()
            if msg["type"] == "http.disconnect":
                return
            body = msg.get("body", b"")
            size += len(body)
            if size > self.limit:
                return await self._refuse(scope, receive, send)
            chunks.append(body)
            more = msg.get("more_body", False)
        replayed = False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()

        return await self.app(scope, replay, send)

    async def _refuse(self, scope, receive, send):
        resp = _error(413, f"request body exceeds {self.limit} bytes: send fewer or shorter texts")
        await resp(scope, receive, send)


class RequestMetrics:
    """ASGI middleware: count the requests to ``path`` by status code and time them (plain ASGI: Starlette's
    ``@app.middleware("http")`` costs more per request than the rest of the bookkeeping together)."""

    def __init__(self, app, metrics: Metrics, path: str):
        self.app, self.metrics, self.path = app, metrics, path

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope.get("path") != self.path:
            return await self.app(scope, receive, send)
        t0, status = time.perf_counter(), [500]

        async def send_status(msg):
            if msg["type"] == "http.response.start":
                status[0] = msg["status"]
            await send(msg)

        try:
            await self.app(scope, receive, send_status)
        finally:
            self.metrics.request(status[0], time.perf_counter() - t0)


def create_app(model_dir: str, cfg: ServeConfig, store: Store | None = None) -> FastAPI:
    """The app serving ``model_dir`` (any ptmlab run directory) under the limits of ``cfg``."""
    from ptmlab.serve.predictor import Predictor

    cfg.validate()
    policy: OutputPolicy = parse_policy(cfg.output_policy)
    store = store or Store()
    predictor = Predictor(model_dir, cfg.max_length or None, cfg.precision, cfg.chunk)
    info = predictor.info
    metrics = Metrics()
    buckets = TokenBuckets()
    batcher = Batcher(predictor.predict, cfg.max_batch, cfg.max_wait_ms / 1000, cfg.max_queue, metrics)
    detector = None
    if cfg.detector:
        from ptmlab.serve.detector import default_detector

        detector = default_detector(store.home)
    watermarker = None
    if cfg.watermark_rate > 0:
        from ptmlab.serve.watermark import Watermarker

        watermarker = Watermarker(store.secret("watermark"), cfg.watermark_rate)

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI):
        yield
        batcher.close()

    app = FastAPI(title="ptmlab inference API", version="1", lifespan=lifespan,
                  description=f"Predictions of {info.path} (labels: {', '.join(info.labels)}); output policy "
                              f"{policy.name}.")
    app.state.store, app.state.batcher, app.state.metrics = store, batcher, metrics

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError):
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ()) if p != "body") or "body"
        metrics.reject("invalid")
        return _error(422, f"invalid request at '{where}': {first.get('msg', 'malformed')}; send JSON "
                           f'{{"texts": ["..."]}}')

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException):
        return _error(exc.status_code, str(exc.detail), getattr(exc, "headers", None))

    app.add_middleware(RequestMetrics, metrics=metrics, path="/v1/predict")

    def authenticate(request: Request) -> KeyInfo | None:
        auth = request.headers.get("authorization", "")
        scheme, _, key = auth.partition(" ")
        if scheme.lower() != "bearer" or not key.strip():
            return None
        return store.find_key(key.strip())

    @app.get("/healthz")
    def healthz() -> dict:
        """Liveness: the model is loaded and the batcher runs."""
        return {"status": "ok" if batcher.thread.is_alive() else "degraded", "model": info.path,
                "labels": info.labels, "policy": policy.name, "precision": predictor.precision,
                "queued_texts": batcher.waiting}

    @app.get("/metrics", response_class=PlainTextResponse)
    def prometheus() -> str:
        """Prometheus text format: requests by status, rejects by reason, latency and batch-size histograms."""
        return metrics.render()

    @app.post("/v1/predict", response_model=PredictResponse, responses=ERRORS)
    async def predict(req: PredictRequest, request: Request):
        """Labels (and probabilities, by the output policy) for each text."""
        key = authenticate(request)
        if key is None:
            metrics.reject("auth")
            return _error(401, "missing, unknown or revoked API key: send 'Authorization: Bearer KEY' with a key "
                               "from `ptmlab keys create`", {"WWW-Authenticate": "Bearer"})
        wait = buckets.take(key.id, key.rate, key.burst)
        if wait > 0:
            metrics.reject("rate")
            return _error(429, f"rate limit of {key.rate:g} requests/s exceeded: retry after the Retry-After "
                               f"seconds", {"Retry-After": retry_after_header(wait)})
        problem = check_limits(req)
        if problem:
            metrics.reject("limits")
            return _error(422, problem)
        n = len(req.texts)
        if store.used_today(key.id) + n > key.daily_budget:
            return over_budget(key)
        try:
            fut = batcher.submit(req.texts, req.text_pairs)
        except QueueFull:
            metrics.reject("busy")
            return _error(429, "server busy (too many texts queued): retry shortly", {"Retry-After": "1"})
        try:
            probs = await asyncio.wait_for(fut, cfg.timeout)
        except TimeoutError:
            metrics.reject("timeout")
            return _error(408, f"no answer within {cfg.timeout:g}s: retry later or send fewer texts")
        answer, rows, marks = [], [], []
        pairs = req.text_pairs or [None] * n
        scores = detector.score(req.texts) if detector else [None] * n
        for text, pair, p, score in zip(req.texts, pairs, probs, scores, strict=True):
            if watermarker is not None:
                p, mark = watermarker.apply(text, pair, p)
                if mark is not None:
                    marks.append(mark)
            label_id = max(range(len(p)), key=p.__getitem__)
            answer.append(Prediction(label=info.labels[label_id], label_id=label_id, probs=policy.render(p)))
            rows.append(AuditRow(text_hash(text, pair), len(text) + len(pair or ""), score))
        if not await asyncio.to_thread(store.charge, key, rows, marks):
            return over_budget(key)
        metrics.answered(n)
        return PredictResponse(model=info.path, policy=policy.name, label_names=info.labels, predictions=answer)

    def over_budget(key: KeyInfo) -> JSONResponse:
        metrics.reject("budget")
        return _error(429, f"daily query budget of {key.daily_budget} texts is spent: retry after the Retry-After "
                           f"seconds (UTC midnight)", {"Retry-After": retry_after_header(_seconds_to_midnight())})

    def check_limits(req: PredictRequest) -> str | None:
        if len(req.texts) > cfg.max_texts:
            return f"{len(req.texts)} texts in one request exceed the limit of {cfg.max_texts}: split the request"
        if req.text_pairs is not None and len(req.text_pairs) != len(req.texts):
            return f"{len(req.text_pairs)} text_pairs for {len(req.texts)} texts: send one pair per text"
        if info.pair is True and req.text_pairs is None:
            return f"task '{info.task}' takes sentence pairs: send text_pairs with one second sentence per text"
        if info.pair is False and req.text_pairs is not None:
            return f"task '{info.task}' takes single sentences: drop text_pairs"
        for i, t in enumerate(req.texts + (req.text_pairs or [])):
            if len(t) > cfg.max_chars:
                return f"text {i % len(req.texts)} has {len(t)} characters, over the limit of {cfg.max_chars}"
        return None

    app.add_middleware(BodyLimit, limit=cfg.max_body)  # added last, so it runs first
    return app
