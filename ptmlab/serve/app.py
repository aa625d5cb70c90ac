"""The FastAPI app: ``POST /v1/predict``, ``GET /healthz``, ``GET /metrics`` and the OpenAPI spec.

Order of checks for a prediction: key (400 for two Authorization headers; 401, from the header alone: an
unauthenticated client never makes the server read or parse a body, and never learns why a body would be invalid;
403 for a key without the predict scope), body size (413, while reading), request shape
and limits (422), then admission in the state store (429 rate or budget, 403 blocked by the detector), per-request
tokenization (422 naming the text), the batched forward pass (422 when this request's input makes the model fail,
408 timeout, 429 queue full), and one committed transaction charging and logging the answer before it is sent.
Input faults found after admission are charged and audited, so they are not free to repeat. Every store call runs
in a thread and is waited on for ``--state-timeout`` at most: a locked or unreachable store answers 503 with
``Retry-After`` and never stalls the event loop; ``/healthz`` and ``/metrics`` wait for no writer (``/healthz`` pings
the store on a thread of its own, ``/metrics`` only looks its key up and needs the admin scope, unless
``--public-metrics``). Connection limits (head size, read and idle deadlines, connection cap) are the server's
(``server.py``).

Nothing a client sends is echoed back whole: an error quotes at most a short, escaped excerpt of it
(``excerpt.py``). Without ``--public-metrics`` no unauthenticated answer names a path or a server setting.

A multi-task run is served whole: a request names its head with ``"task"`` and, without one, gets the first head's
answer, with the task that answered named in every response. One task per request (not every head's answer) because
heads differ in what they read (single sentences or pairs) and what they answer (classes or a score), and one text
charged once should cost one forward pass. An unknown task is a 422 naming the tasks, checked before admission.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import datetime as dt
import json
import time
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from ptmlab.core.errors import PtmlabError
from ptmlab.serve.batcher import Batcher, BatchFailed, QueueFull
from ptmlab.serve.config import ServeConfig
from ptmlab.serve.excerpt import excerpt, safe_message
from ptmlab.serve.metrics import Metrics
from ptmlab.serve.policy import OutputPolicy, parse_policy
from ptmlab.serve.predictor import InputError, TaskInfo
from ptmlab.serve.ratelimit import retry_after_header
from ptmlab.serve.state import AuditRow, DetectorPolicy, KeyInfo, Store, StoreBusy, open_store, text_hash


class PredictRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    texts: list[str] = Field(min_length=1, description="texts to classify (first sentences for pair tasks)")
    text_pairs: list[str] | None = Field(None, description="second sentences, one per text, for pair tasks")
    task: str | None = Field(None, description="the head of a multi-task run that answers (default: its first task; "
                                               "see GET /healthz)")
    _words: list[list[str]] | None = PrivateAttr(None)  # a tagger's sentence sent as words (a tokens request)


class SpanRequest(BaseModel):
    """A token-classification request (``tokens``: one sentence's words) or an extractive-QA request (``question``
    and its ``context``); answered like ``texts`` (one text charged), with tags per word or an answer."""
    model_config = ConfigDict(extra="forbid", strict=True)
    tokens: list[str] | None = Field(None, min_length=1, description="the words of one sentence to tag")
    question: str | None = Field(None, min_length=1, description="a question to answer from context")
    context: str | None = Field(None, min_length=1, description="the text holding the answer")
    task: str | None = None


class Entity(BaseModel):
    entity_group: str
    score: float | None = None  # the mean of its words' tag probabilities, by the output policy
    word: str  # text[start:end]
    start: int
    end: int


class Tags(BaseModel):
    tokens: list[str]
    tags: list[str]  # one per word (a word past the model's window gets O)
    probs: list[list[float] | None] | None = None  # each word's tag distribution, by the output policy
    entities: list[Entity]  # the words grouped as ptmlab predict (and transformers' pipeline) group them


class Answer(BaseModel):
    answer: str  # context[start:end]
    start: int
    end: int
    score: float  # p(start) * p(end) of the span, as transformers' question-answering pipeline scores it
    probability: float | None = None  # among the best candidate spans, by the output policy


class Prediction(BaseModel):
    label: str
    label_id: int
    probs: list[float] | None = None


class LabelSet(BaseModel):
    labels: list[str]  # a multi-label model's answer: every label whose probability reaches its threshold
    label_ids: list[int]
    probs: list[float] | None = None  # each label's own probability (sigmoid), by the output policy


class Score(BaseModel):
    score: float  # a regression head's answer (STS-B similarity)


class Embedding(BaseModel):
    embedding: list[float]  # a sentence embedder's answer: the text's vector (L2-normalised when the model is)


class PredictResponse(BaseModel):
    model: str
    policy: str
    task: str | None = None  # the task whose head answered (None: a model without a task name)
    label_names: list[str]
    predictions: list[Prediction | LabelSet | Score | Embedding | Tags | Answer]


class ErrorResponse(BaseModel):
    error: str


ERRORS = {code: {"model": ErrorResponse} for code in (400, 401, 403, 408, 413, 422, 429, 503)}
REQUEST_BODY = {"requestBody": {"required": True, "content": {
    "application/json": {"schema": PredictRequest.model_json_schema()}}}}


def _error(status: int, message: str, headers: dict | None = None) -> JSONResponse:
    return JSONResponse({"error": safe_message(message)}, status_code=status, headers=headers)


def _no_duplicates(pairs: list[tuple]) -> dict:
    """A JSON object, refusing a key given twice (which of two values counts would otherwise be a guess)."""
    out: dict = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"duplicate key '{excerpt(k)}'")
        out[k] = v
    return out


def _seconds_to_midnight() -> float:
    now = dt.datetime.now(dt.UTC)
    tomorrow = (now + dt.timedelta(days=1)).replace(hour=0, minute=0, second=0, microsecond=0)
    return (tomorrow - now).total_seconds()


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


class StoreHealth:
    """Whether the state store answers, for ``/healthz``: a ping on a thread of its own (never queued behind
    requests waiting on a stalled store), at most one per second, each given ``timeout`` seconds."""

    def __init__(self, store: Store, timeout: float, every: float = 1.0):
        self.store, self.timeout, self.every = store, timeout, every
        self.pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="ptmlab-store-ping")
        self.checked, self.ok, self.pending = float("-inf"), True, None

    async def reachable(self) -> bool:
        if time.monotonic() - self.checked < self.every:
            return self.ok
        loop = asyncio.get_running_loop()
        if self.pending is None or self.pending.done() or self.pending.get_loop() is not loop:
            self.pending = loop.run_in_executor(self.pool, self.store.ping)  # a ping still waiting is waited on
            self.pending.add_done_callback(lambda f: f.cancelled() or f.exception())
        try:
            await asyncio.wait_for(asyncio.shield(self.pending), self.timeout)
            ok = True
        except Exception:  # noqa: BLE001 (StoreBusy, a timeout, the back-end's error: all say "unreachable")
            ok = False
        self.checked, self.ok = time.monotonic(), ok
        return ok

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)


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


def create_app(model_dir: str, cfg: ServeConfig, store: Store | None = None) -> FastAPI:
    """The app serving ``model_dir`` (any ptmlab run directory) under the limits of ``cfg``."""
    from ptmlab.serve.predictor import Predictor

    cfg.validate()
    if cfg.trust_pickle:
        from ptmlab.models.loader import trust_pickle

        trust_pickle(model_dir)
    policy: OutputPolicy = parse_policy(cfg.output_policy)
    store = store or open_store(cfg.state or None, cfg.state_timeout)
    predictor = Predictor(model_dir, cfg.max_length or None, cfg.precision, cfg.chunk)
    info = predictor.info
    metrics = Metrics()
    batcher = Batcher(predictor.forward, cfg.max_batch, cfg.max_wait_ms / 1000, cfg.max_queue, metrics)
    detector = None
    detector_policy = None
    if cfg.detector:
        from ptmlab.serve.detector import default_detector
        from ptmlab.serve.state import state_home

        detector = default_detector(getattr(store, "home", None) or state_home())
        detector_policy = DetectorPolicy(cfg.detector_action, cfg.detector_threshold, cfg.detector_min_queries)
    watermarker = None
    if cfg.watermark_rate > 0:
        from ptmlab.serve.watermark import Watermarker

        watermarker = Watermarker(store.secret("watermark"), cfg.watermark_rate)
    hold_seconds = cfg.timeout + 60  # a hold outlives its request; a killed server's holds expire after this

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI):
        yield
        batcher.close()
        health.close()

    served = (f"tasks: {', '.join(t.name for t in info.tasks)}; name one with \"task\"" if info.tasks
              else f"labels: {', '.join(info.labels)}")
    name = Path(info.path).name  # what clients see of the model: its folder's name, never the path
    app = FastAPI(title="ptmlab inference API", version="1", lifespan=lifespan,
                  description=f"Predictions of {name} ({served}); output policy {policy.name}.")
    app.state.store, app.state.batcher, app.state.metrics, app.state.info = store, batcher, metrics, info
    app.state.config = cfg  # the server reads its connection limits here
    app.router.redirect_slashes = False  # /v1/predict/ is 404, not a redirect a client may follow elsewhere

    async def in_thread(fn, *args, **kw):
        return await asyncio.to_thread(fn, *args, **kw)

    async def in_store(fn, *args, **kw):
        """A state-store call in a thread, given up after --state-timeout (503 + Retry-After): a store that stopped
        answering (a frozen database, a dead network path) never holds a request longer."""
        try:
            return await asyncio.wait_for(asyncio.to_thread(fn, *args, **kw), cfg.state_timeout)
        except TimeoutError:
            raise StoreBusy(f"the state store did not answer within {cfg.state_timeout:g}s") from None

    health = StoreHealth(store, cfg.state_timeout)

    @app.exception_handler(StoreBusy)
    async def _busy(request: Request, exc: StoreBusy):
        metrics.reject("store")
        return _error(503, "state store busy or unreachable: retry after the Retry-After seconds",
                      {"Retry-After": "1"})

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException):
        return _error(exc.status_code, str(exc.detail), getattr(exc, "headers", None))

    app.add_middleware(RequestMetrics, metrics=metrics, path="/v1/predict")

    async def authenticate(request: Request) -> KeyInfo | None:
        given = request.headers.getlist("authorization")
        if len(given) > 1:  # which one counts would be a guess (a proxy may add its own): refused
            raise StarletteHTTPException(400, "more than one Authorization header: send exactly one")
        auth = given[0] if given else ""
        scheme, _, key = auth.partition(" ")
        if scheme.lower() != "bearer" or not key.strip() or len(key) > 200:
            return None
        return await in_store(store.find_key, key.strip())

    @app.get("/healthz", responses={503: {"description": "the state store does not answer"}})
    async def healthz():
        """Liveness and what a client may ask: the model's name, labels, task and every task a request may name
        with its labels; with --public-metrics also the model's path, the state store, the detector and the
        precision. ``store`` says whether the state store answers a ping (one per second at most, on its own
        thread, waiting --state-timeout at most); when it does not, 503 with ``"store": "unreachable"``."""
        tasks = [{"name": t.name, "kind": t.kind, "labels": t.labels, "pair": t.pair} for t in info.tasks] or [
            {"name": info.task, "kind": "embedding" if predictor.embedding else
             "classification" if info.threshold is None else "multi-label",
             "labels": info.labels, "pair": info.pair, **({} if info.threshold is None else
                                                          {"threshold": info.threshold})}]
        out = {"status": "ok" if batcher.thread.is_alive() else "degraded", "model": name,
               "model_type": info.model_type, "task": info.task, "labels": info.labels, "tasks": tasks,
               "max_length": info.max_length, "policy": policy.name}
        if cfg.public_metrics:
            out.update({"model": info.path, "parameters": info.parameters, "positions": info.positions,
                        "precision": predictor.precision, "queued_texts": batcher.waiting, "state": store.where,
                        "detector": cfg.detector_action if cfg.detector else "off"})
        if await health.reachable():
            out["store"] = "ok"
            return out
        out.update({"status": "unavailable", "store": "unreachable",
                    "error": "the state store does not answer: requests get 503 until it does"})
        return JSONResponse(out, status_code=503, headers={"Retry-After": "1"})

    @app.get("/metrics", response_class=PlainTextResponse,
             responses={code: {"model": ErrorResponse} for code in (400, 401, 403, 503)})
    async def prometheus(request: Request):
        """Prometheus text format: requests by status, rejects by reason, latency and batch-size histograms (needs
        a key with the admin scope unless the server runs with --public-metrics)."""
        if cfg.public_metrics:
            return metrics.render()
        key = await authenticate(request)
        if key is None:
            return _error(401, "/metrics needs 'Authorization: Bearer KEY' with an admin key (or serve with "
                               "--public-metrics)", {"WWW-Authenticate": "Bearer"})
        if "admin" not in key.scopes:
            return _error(403, "/metrics needs a key with the admin scope: `ptmlab keys create --scopes admin`")
        return metrics.render()

    @app.post("/v1/predict", response_model=PredictResponse, responses=ERRORS, openapi_extra=REQUEST_BODY)
    async def predict(request: Request):
        """Labels (and probabilities, by the output policy) for each text."""
        key = await authenticate(request)
        if key is None:
            metrics.reject("auth")
            return _error(401, "missing, unknown or revoked API key: send 'Authorization: Bearer KEY' with a key "
                               "from `ptmlab keys create`", {"WWW-Authenticate": "Bearer"})
        if "predict" not in key.scopes:
            metrics.reject("auth")
            return _error(403, "this key may not ask for predictions (no predict scope): use a key created with "
                               "--scopes predict")
        body = await read_body(request, cfg.max_body)
        if body is None:
            metrics.reject("size")
            return _error(413, f"request body exceeds {cfg.max_body} bytes: send fewer or shorter texts")
        req, problem = parse_request(body)
        head = None
        if not problem:
            head, problem = pick_head(req)
        problem = problem or check_limits(req, key, head)
        if problem:
            metrics.reject("invalid")
            return _error(422, problem)
        n = len(req.texts)
        adm = await in_store(store.admit, key.id, n, hold_seconds, detector_policy)
        if not adm.ok:
            return refused(key, adm)
        pairs = req.text_pairs or [None] * n
        try:
            encs, scores = await in_thread(prepare, req)
        except InputError as e:  # the client's input: charged and audited, so it is not free to repeat
            await in_store(store.settle, key.id, adm.hold, audit_rows(req.texts, pairs, [None] * n), (),
                            "invalid", detector_policy)
            metrics.reject("input")
            return _error(422, str(e))
        try:
            fut = batcher.submit(encs, head.name if head else None)
        except QueueFull:
            await in_store(store.release, adm.hold)
            metrics.reject("busy")
            return _error(429, "server busy (too many texts queued): retry shortly", {"Retry-After": "1"})
        try:
            probs = await asyncio.wait_for(fut, cfg.timeout)
        except BatchFailed as e:  # the server's fault: nothing charged
            await in_store(store.release, adm.hold)
            metrics.reject("server")
            return _error(503, str(e), {"Retry-After": "1"})
        except TimeoutError:
            await in_store(store.release, adm.hold)
            metrics.reject("timeout")
            return _error(408, f"no answer within {cfg.timeout:g}s: retry later or send fewer texts")
        except InputError as e:
            await in_store(store.settle, key.id, adm.hold, audit_rows(req.texts, pairs, scores), (), "model_error",
                            detector_policy)
            metrics.reject("input")
            return _error(422, f"{e}: change or drop the offending text")
        answer, marks = [], []
        labels = head.labels if head else info.labels
        if predictor.span:  # tags per word or an answer; no class probabilities to watermark
            answer = [span_answer(text, p, labels) for text, p in zip(req.texts, probs, strict=True)]
            labels = labels if predictor.span == "token-classification" else []
        for enc, text, pair, p in zip(encs, req.texts, pairs, probs, strict=True) if not predictor.span else ():
            if predictor.embedding:  # a vector per text: no labels to hide or to watermark
                answer.append(Embedding(embedding=p))
                continue
            if head is not None and head.regression:  # a score: no labels to hide or to watermark
                answer.append(Score(score=policy.score(p[0])))
                continue
            if info.threshold is not None:  # multi-label: independent probabilities, no distribution to watermark
                ids = [i for i, x in enumerate(p) if x >= info.threshold]
                answer.append(LabelSet(labels=[labels[i] for i in ids], label_ids=ids, probs=policy.render(p)))
                continue
            if watermarker is not None:
                p, mark = watermarker.apply(predictor.tokens(enc), text, pair, p, head.name if head else None)
                if mark is not None:
                    marks.append(mark)
            label_id = max(range(len(p)), key=p.__getitem__)
            answer.append(Prediction(label=labels[label_id], label_id=label_id, probs=policy.render(p)))
        if not await in_store(store.settle, key.id, adm.hold, audit_rows(req.texts, pairs, scores), marks, "ok",
                               detector_policy):
            return refused(key, type(adm)(False, reason="budget"))
        metrics.answered(n)
        return PredictResponse(model=name, policy=policy.name, task=head.name if head else info.task,
                               label_names=labels, predictions=answer)

    def span_answer(text: str, p: dict, labels: list[str]) -> Tags | Answer:
        if predictor.span == "extractive-qa":
            shown = policy.render([p["probability"]])
            return Answer(answer=p["answer"], start=p["start"], end=p["end"], score=policy.score(p["score"]),
                          probability=shown[0] if shown else None)
        from ptmlab.train.spans import entity_groups

        best = [max(range(len(w)), key=w.__getitem__) if w else None for w in p["words"]]
        tags = [labels[b] if b is not None else "O" for b in best]
        shown = [policy.render(w) if w else None for w in p["words"]]
        sentence, spans = p["sentence"], p["spans"]
        groups = entity_groups(sentence, spans, tags, [w[b] if b is not None else None
                                                       for w, b in zip(p["words"], best, strict=True)])
        entities = [Entity(**{**g, "score": policy.score(g["score"]) if policy.show_probs else None}) for g in groups]
        return Tags(tokens=[sentence[s:e] for s, e in spans], tags=tags, probs=shown if policy.show_probs else None,
                    entities=entities)

    def prepare(req: PredictRequest):
        encs = predictor.encode(req.texts, req.text_pairs, req._words)
        scores = detector.score(req.texts) if detector else [None] * len(req.texts)
        return encs, scores

    def audit_rows(texts, pairs, scores) -> list[AuditRow]:
        return [AuditRow(text_hash(t, p), len(t) + len(p or ""), s) for t, p, s in zip(texts, pairs, scores,
                                                                                      strict=True)]

    def refused(key: KeyInfo, adm) -> JSONResponse:
        if adm.reason == "rate":
            metrics.reject("rate")
            slow = " (throttled: this key's queries look like an extraction attack)" if adm.flagged else ""
            return _error(429, f"rate limit of {key.rate:g} texts/s exceeded{slow}: retry after the Retry-After "
                               f"seconds", {"Retry-After": retry_after_header(adm.retry_after)})
        if adm.reason == "blocked":
            metrics.reject("blocked")
            return _error(403, "this key's queries look like a model-extraction attack and it is blocked: contact "
                               "the operator")
        if adm.reason == "revoked":
            metrics.reject("auth")
            return _error(401, "revoked API key", {"WWW-Authenticate": "Bearer"})
        metrics.reject("budget")
        return _error(429, f"daily query budget of {key.daily_budget} texts is spent: retry after the Retry-After "
                           f"seconds (UTC midnight)", {"Retry-After": retry_after_header(_seconds_to_midnight())})

    def parse_request(body: bytes) -> tuple[PredictRequest | None, str | None]:
        try:
            data = json.loads(body.decode("utf-8"), object_pairs_hook=_no_duplicates)  # JSON is UTF-8 (RFC 8259)
        except RecursionError:
            return None, "the body nests too deeply: send JSON {\"texts\": [\"...\"]}"
        except (ValueError, UnicodeDecodeError) as e:
            why = str(e) if str(e).startswith("duplicate key") else type(e).__name__
            return None, f"the body is not JSON ({why}): send JSON {{\"texts\": [\"...\"]}}"
        try:
            if isinstance(data, dict) and {"tokens", "question", "context"} & set(data):
                return span_request(SpanRequest.model_validate(data))
            return PredictRequest.model_validate(data), None
        except ValidationError as e:
            first = e.errors(include_input=False, include_url=False)[0] if e.error_count() else {}
            where = ".".join(str(p) for p in first.get("loc", ())) or "body"
            return None, (f"invalid request at '{excerpt(where)}': {excerpt(first.get('msg', 'malformed'), 200)}; "
                          f'send JSON {{"texts": ["..."]}}')

    def span_request(s: SpanRequest) -> tuple[PredictRequest | None, str | None]:
        """A tokens / question-context request as the texts (and pairs) the rest of the path handles."""
        if s.tokens is not None:
            if predictor.span != "token-classification":
                return None, 'this model does not tag words: send {"texts": ["..."]}' if not predictor.span else \
                    'this model answers questions: send {"question": "...", "context": "..."}'
            if s.question is not None or s.context is not None:
                return None, "send either tokens or question and context, not both"
            bad = next((i for i, t in enumerate(s.tokens) if not t or t != t.strip() or len(t.split()) != 1), None)
            if bad is not None:
                return None, f"token {bad} is empty or holds whitespace: send one word per token"
            req = PredictRequest(texts=[" ".join(s.tokens)], task=s.task)
            req._words = [list(s.tokens)]
            return req, None
        if predictor.span != "extractive-qa":
            return None, 'this model does not answer questions: send {"texts": ["..."]}' if not predictor.span \
                else 'this model tags words: send {"tokens": ["...", "..."]}'
        if s.question is None or s.context is None:
            return None, 'a question needs its context: send {"question": "...", "context": "..."}'
        return PredictRequest(texts=[s.question], text_pairs=[s.context], task=s.task), None

    def pick_head(req: PredictRequest) -> tuple[TaskInfo | None, str | None]:
        """The multi-task head that answers (None for a single-task model), or the problem with ``task``."""
        try:
            return predictor.head(req.task), None
        except PtmlabError as e:
            return None, str(e)

    def check_limits(req: PredictRequest, key: KeyInfo, head: TaskInfo | None) -> str | None:
        if len(req.texts) > cfg.max_texts:
            return f"{len(req.texts)} texts in one request exceed the limit of {cfg.max_texts}: split the request"
        if len(req.texts) > key.burst:
            return (f"{len(req.texts)} texts in one request exceed this key's burst of {key.burst:g} texts: send at "
                    f"most {int(key.burst)} texts per request")
        if req.text_pairs is not None and len(req.text_pairs) != len(req.texts):
            return f"{len(req.text_pairs)} text_pairs for {len(req.texts)} texts: send one pair per text"
        pair, task = (head.pair, head.name) if head else (info.pair, info.task)
        if predictor.span == "extractive-qa":
            pair = True  # every question comes with its context
        if pair is True and req.text_pairs is None:
            return f"task '{task}' takes sentence pairs: send text_pairs with one second sentence per text"
        if pair is False and req.text_pairs is not None:
            return f"task '{task}' takes single sentences: drop text_pairs"
        for i, t in enumerate(req.texts + (req.text_pairs or [])):
            if len(t) > cfg.max_chars:
                return f"text {i % len(req.texts)} has {len(t)} characters, over the limit of {cfg.max_chars}"
        return None

    return app
