"""A prediction's body read as what the model answers: JSON with no key given twice, the request's shape (``texts``,
or ``tokens`` / ``question`` and ``context`` for span models), the head it names and the limits. Each check returns
the problem as a message (answered 422) instead of raising."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from pydantic import ValidationError

from ptmlab.core.errors import PtmlabError
from ptmlab.serve.config import ServeConfig
from ptmlab.serve.excerpt import excerpt
from ptmlab.serve.schemas import PredictRequest, SpanRequest
from ptmlab.serve.state import KeyInfo

if TYPE_CHECKING:
    from ptmlab.serve.predictor import Predictor, TaskInfo


def _no_duplicates(pairs: list[tuple]) -> dict:
    """A JSON object, refusing a key given twice (which of two values counts would otherwise be a guess)."""
    out: dict = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"duplicate key '{excerpt(k)}'")
        out[k] = v
    return out


def parse_request(predictor: Predictor, body: bytes) -> tuple[PredictRequest | None, str | None]:
    try:
        data = json.loads(body.decode("utf-8"), object_pairs_hook=_no_duplicates)  # JSON is UTF-8 (RFC 8259)
    except RecursionError:
        return None, "the body nests too deeply: send JSON {\"texts\": [\"...\"]}"
    except (ValueError, UnicodeDecodeError) as e:
        why = str(e) if str(e).startswith("duplicate key") else type(e).__name__
        return None, f"the body is not JSON ({why}): send JSON {{\"texts\": [\"...\"]}}"
    try:
        if isinstance(data, dict) and {"tokens", "question", "context"} & set(data):
            return span_request(predictor, SpanRequest.model_validate(data))
        return PredictRequest.model_validate(data), None
    except ValidationError as e:
        first = e.errors(include_input=False, include_url=False)[0] if e.error_count() else {}
        where = ".".join(str(p) for p in first.get("loc", ())) or "body"
        return None, (f"invalid request at '{excerpt(where)}': {excerpt(first.get('msg', 'malformed'), 200)}; "
                      f'send JSON {{"texts": ["..."]}}')


def span_request(predictor: Predictor, s: SpanRequest) -> tuple[PredictRequest | None, str | None]:
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


def pick_head(predictor: Predictor, req: PredictRequest) -> tuple[TaskInfo | None, str | None]:
    """The multi-task head that answers (None for a single-task model), or the problem with ``task``."""
    try:
        return predictor.head(req.task), None
    except PtmlabError as e:
        return None, str(e)


def check_limits(cfg: ServeConfig, predictor: Predictor, req: PredictRequest, key: KeyInfo,
                 head: TaskInfo | None) -> str | None:
    if len(req.texts) > cfg.max_texts:
        return f"{len(req.texts)} texts in one request exceed the limit of {cfg.max_texts}: split the request"
    if len(req.texts) > key.burst:
        return (f"{len(req.texts)} texts in one request exceed this key's burst of {key.burst:g} texts: send at "
                f"most {int(key.burst)} texts per request")
    if req.text_pairs is not None and len(req.text_pairs) != len(req.texts):
        return f"{len(req.text_pairs)} text_pairs for {len(req.texts)} texts: send one pair per text"
    pair, task = (head.pair, head.name) if head else (predictor.info.pair, predictor.info.task)
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


def read_request(cfg: ServeConfig, predictor: Predictor, body: bytes,
                 key: KeyInfo) -> tuple[PredictRequest | None, TaskInfo | None, str | None]:
    """The request, the head that answers it, and the first problem found (None: none)."""
    req, problem = parse_request(predictor, body)
    head = None
    if not problem:
        head, problem = pick_head(predictor, req)
    problem = problem or check_limits(cfg, predictor, req, key, head)
    return req, head, problem
