"""The request and response bodies of ``POST /v1/predict`` (and the OpenAPI spec's error bodies)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr


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
