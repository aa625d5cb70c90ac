"""The served model: any ptmlab run or model directory, loaded through the zoo, answering batches of encodings.

Serving tokenizes every request on its own (``encode``) before it joins a batch, so a text the tokenizer cannot
handle fails only its own request; ``forward`` pads the encodings of many requests into one pass. ``--max-length``
is checked against the model's position embeddings up front, so no text can index past them.

A multi-task run (``ptmlab finetune --tasks ...``) has one head per task; ``info.tasks`` lists them (name, kind,
labels, whether it reads pairs) and ``forward(encs, task)`` routes one pass through one head (the first head when no
task is named), under a lock, since the head to use is state of the model. A classification head answers
probabilities, a regression head (STS-B) one score per example, a multi-label head (``problem_type``
``multi_label_classification``) a sigmoid probability per label, its label set being the labels at or above the
decision threshold saved with the model (``info.threshold``). A sentence embedder (an embedding run: the
sentence-transformers layout) answers its vector per text (``embedding``; single texts only).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

import torch

from ptmlab.core.errors import PtmlabError
from ptmlab.serve.excerpt import excerpt


class InputError(Exception):
    """A request's own input cannot be processed (the client gets 422 naming the text)."""


@dataclass(frozen=True)
class TaskInfo:
    """One head of a multi-task model."""
    name: str
    kind: str  # classification or regression
    labels: list[str]  # class names ([] for regression: the head answers a score)
    pair: bool | None

    @property
    def regression(self) -> bool:
        return self.kind == "regression"


@dataclass(frozen=True)
class ModelInfo:
    path: str
    labels: list[str]
    pair: bool | None  # True: pairs required; False: single texts only; None: either
    max_length: int
    task: str | None
    model_type: str = ""
    positions: int = 0
    parameters: int = 0
    tasks: tuple[TaskInfo, ...] = ()  # the heads of a multi-task model, the default (first) one first; () otherwise
    threshold: float | None = None  # a multi-label model's decision threshold (None: one label per text)


Encoding = dict[str, list[int]]


class Predictor:
    """Softmax probabilities for (text, pair) examples; ``encode`` per request, ``forward`` per batch."""

    def __init__(self, model_dir: str | Path, max_length: int | None = None, precision: str = "fp32",
                 chunk: int = 0):
        from ptmlab.models.zoo import load_model, load_tokenizer
        from ptmlab.train.evaluate import resolve_precision
        from ptmlab.train.multitask import model_tasks
        from ptmlab.train.spans import span_kind

        path = Path(model_dir).expanduser()
        if not path.is_dir():
            raise PtmlabError(f"model '{model_dir}' is not a directory: pass a ptmlab run directory")
        path = path.resolve()
        cfg = _run_config(path)
        from ptmlab.train.embedding import is_embedding_dir

        self.embedding = is_embedding_dir(path)  # a sentence embedder: a vector per text
        if self.embedding:
            from ptmlab.train.sentence import load_sentence_model

            self.model = load_sentence_model(str(path))[0]
        else:
            self.model = load_model(str(path))
        self.model.eval()
        self.precision = resolve_precision(precision, next(self.model.parameters()).device)
        self.chunk = chunk
        self.tokenizer = load_tokenizer(str(path))
        self.lock = threading.Lock()  # a fast tokenizer must not be called from two threads at once
        self.head_lock = threading.Lock()  # a multi-task model's active head is state: one pass at a time
        config = self.model.config
        heads = tuple(_task_info(t, path) for t in model_tasks(self.model))
        self.span = span_kind(path)  # a tagger (tags per word) or a span extractor (answers); None: a classifier
        self.doc_stride = int(cfg.get("doc_stride") or 128)
        if self.span == "extractive-qa" and not max_length and (cfg.get("max_length") or 128) == 128:
            max_length = 384  # the QA window a run trains with when --max-length is left alone (data/qa.py)
        from ptmlab.data.labels import decision_threshold, is_multi_label

        self.multi_label = not self.span and not heads and is_multi_label(config)  # a sigmoid per label
        if not self.span and not heads and not self.embedding and (getattr(config, "problem_type", None) == "regression"
                                            or (config.num_labels < 2 and not self.multi_label)):
            raise PtmlabError(f"model '{model_dir}' is a regression model: serving supports classifiers (and the "
                              f"regression heads of multi-task runs) only")
        positions = usable_positions(config)
        length = max_length or _run_max_length(cfg, path)
        if positions and length > positions:
            raise PtmlabError(f"--max-length {length} exceeds the {positions} positions of model '{model_dir}': pass "
                              f"--max-length {positions} or less")
        labels, task = ([] if self.embedding else _labels(config, path)), cfg.get("task")
        if task is not None and not isinstance(task, str):
            raise PtmlabError(f"'{path / 'config.yaml'}' names task {excerpt(task)!r}, not a task name: restore the "
                              f"run's config.yaml")
        if heads:  # the default head answers requests that name no task
            labels, task = heads[0].labels, heads[0].name
        self.info = ModelInfo(str(path), labels, False if self.embedding else _is_pair(task), length, task,
                              str(getattr(config, "model_type", "")), positions,
                              sum(p.numel() for p in self.model.parameters()), heads,
                              decision_threshold(config) if self.multi_label else None)

    def head(self, task: str | None) -> TaskInfo | None:
        """The head answering a request for ``task`` (None: the default head); None for a single-task model.
        A task the model has no head for is a ``PtmlabError`` naming the tasks it has."""
        heads = {t.name: t for t in self.info.tasks}
        if heads:
            if task is None:
                return self.info.tasks[0]
            if task not in heads:
                raise PtmlabError(f"unknown task '{excerpt(task)}': this model has a head for each of "
                                  f"{', '.join(heads)}: send one of them as 'task'")
            return heads[task]
        if task is not None and task != self.info.task:
            served = f"task '{self.info.task}'" if self.info.task else "a model without a task name"
            raise PtmlabError(f"unknown task '{excerpt(task)}': this model serves {served} only (known tasks: "
                              f"{self.info.task or 'none'}): drop 'task'")
        return None

    def encode(self, texts: list[str], pairs: list[str] | None = None,
               words: list[list[str]] | None = None) -> list[Encoding]:
        """Token ids per example (truncated to ``max_length``); ``InputError`` names the first text that fails.
        ``words``: a tagger's sentences given as words (a ``tokens`` request), instead of ``texts`` split by the
        tokenizer's pre-tokenizer."""
        try:
            return self._encode(texts, pairs, words)
        except Exception:  # find the culprit, so the client learns which text to fix
            for i, t in enumerate(texts):
                try:
                    self._encode([t], [pairs[i]] if pairs is not None else None, [words[i]] if words else None)
                except Exception as e:
                    raise InputError(f"text {i} cannot be tokenized ({type(e).__name__}: {_short(e)})") from None
            raise

    def _encode(self, texts: list[str], pairs: list[str] | None, words=None) -> list[Encoding]:
        if self.span:
            return self._encode_span(texts, pairs, words)
        with self.lock:
            enc = self.tokenizer(texts, pairs, truncation=True, max_length=self.info.max_length)
        keys = [k for k in ("input_ids", "token_type_ids") if k in enc]
        out = [{k: list(enc[k][i]) for k in keys} for i in range(len(texts))]
        for e in out:
            e["attention_mask"] = [1] * len(e["input_ids"])
        return out

    def _encode_span(self, texts: list[str], pairs: list[str] | None, words=None) -> list[Encoding]:
        """One encoding per sentence (its words as ``ptmlab predict`` splits a text: the tokenizer's pre-tokenizer,
        or the words given) or per question (every window of its context, ``pairs``), holding the features
        ``train.spans`` reads and, for a sentence, its text and the character spans of its words."""
        from ptmlab.data.qa import QASplit, qa_features
        from ptmlab.data.tokens import TokenSplit, encode_tokens
        from ptmlab.train.spans import sentence_spans

        out = []
        for i, text in enumerate(texts):
            with self.lock:
                if self.span == "token-classification":
                    sentence, spans = sentence_spans(self.tokenizer, words[i] if words else text)
                    if not spans:
                        raise InputError(f"text {i} has no words to tag")
                    feats = encode_tokens(self.tokenizer, TokenSplit([[sentence[s:e] for s, e in spans]], None, [0]),
                                          self.info.max_length)
                    out.append({"input_ids": [t for ids in feats.input_ids for t in ids], "span": feats,
                                "sentence": sentence, "spans": spans})
                    continue
                if pairs is None:
                    raise InputError("a question needs its context: send {\"question\": ..., \"context\": ...}")
                try:
                    feats = qa_features(self.tokenizer, QASplit([text], [pairs[i]], None, [0]),
                                        self.info.max_length, min(self.doc_stride, self.info.max_length // 4),
                                        where=f"question {i}")
                except PtmlabError as e:
                    raise InputError(str(e)) from None
            out.append({"input_ids": [t for ids in feats.input_ids for t in ids], "span": feats})
        return out

    def _forward_span(self, encs: list[Encoding]) -> list[dict]:
        """Each word's tag distribution (``{"words", "sentence", "spans"}``) or the best answer
        (``{"answer", "start", "end", "score", "probability"}``) of every encoding, in one batched pass."""
        import numpy as np

        from ptmlab.data.qa import best_answers
        from ptmlab.train.spans import span_logits

        feats = [e["span"] for e in encs]
        merged = _merge(feats)
        logits = span_logits(self.model, merged, max(len(merged), 1), self.precision, desc="serve")
        out, pos = [], 0
        for e, f in zip(encs, feats, strict=True):
            part = logits[pos:pos + len(f)]
            pos += len(f)
            if self.span == "extractive-qa":
                (a,) = best_answers(f.split, f, [x[0] for x in part], [x[1] for x in part])
                out.append({"answer": a.text, "start": a.start, "end": a.end, "score": a.score,
                            "probability": a.probability})
                continue
            lg = part[0]
            probs = np.exp(lg - lg.max(-1, keepdims=True))
            probs /= probs.sum(-1, keepdims=True)
            words, seen = [[] for _ in range(f.n_words[0])], set()
            for t, w in enumerate(f.word_ids[0]):
                if w is not None and w not in seen:
                    seen.add(w)
                    words[w] = probs[t].tolist()
            out.append({"words": words, "sentence": e["sentence"], "spans": e["spans"]})  # past --max-length: []
        return out

    def tokens(self, enc: Encoding) -> list[str]:
        """The tokens of an encoding, specials dropped (for the watermark key)."""
        special = set(self.tokenizer.all_special_ids)
        return self.tokenizer.convert_ids_to_tokens([i for i in enc["input_ids"] if i not in special])

    @torch.inference_mode()
    def forward(self, encs: list[Encoding], task: str | None = None) -> list[list[float]]:
        """Probabilities per encoding (``[score]`` from a regression head), through ``task``'s head on a multi-task
        model (default: the first); with ``chunk`` the examples run as length-sorted chunks (less padding)."""
        if self.span:
            return self._forward_span(encs)
        head = self.head(task)
        if head is None:
            return self._chunked(encs, False)
        from ptmlab.train.multitask import set_task

        with self.head_lock:
            set_task(self.model, head.name)
            return self._chunked(encs, head.regression)

    def _chunked(self, encs: list[Encoding], regression: bool) -> list[list[float]]:
        if not self.chunk or len(encs) <= self.chunk:
            return self._forward(encs, regression)
        order = sorted(range(len(encs)), key=lambda i: len(encs[i]["input_ids"]))
        out: list[list[float]] = [[] for _ in encs]
        for s in range(0, len(order), self.chunk):
            idx = order[s:s + self.chunk]
            for i, row in zip(idx, self._forward([encs[i] for i in idx], regression), strict=True):
                out[i] = row
        return out

    def predict(self, texts: list[str], pairs: list[str] | None = None, task: str | None = None) -> list[list[float]]:
        """Probabilities per example (encode + forward, for local use: verification, extraction); ``task`` picks
        a multi-task model's head."""
        return self.forward(self.encode(texts, pairs), task)

    def _forward(self, encs: list[Encoding], regression: bool = False) -> list[list[float]]:
        from ptmlab.models.loader import model_inputs
        from ptmlab.train.evaluate import autocast_ctx

        width = max(len(e["input_ids"]) for e in encs)
        pad = {"input_ids": self.tokenizer.pad_token_id or 0, "token_type_ids": 0, "attention_mask": 0}
        batch = {k: torch.tensor([e[k] + [pad[k]] * (width - len(e[k])) for e in encs]) for k in encs[0]}
        device = next(self.model.parameters()).device
        batch = {k: v.to(device) for k, v in batch.items()}
        with autocast_ctx(self.precision, device):
            logits = self.model(**model_inputs(self.model, batch)).logits.float()
        if self.embedding:  # the sentence vectors themselves
            return logits.tolist()
        if regression:
            return logits[:, :1].tolist()
        return (torch.sigmoid(logits) if self.multi_label else torch.softmax(logits, -1)).tolist()


def _merge(feats: list):
    """One batch source from the features of several requests (windows of a question stay together)."""
    from dataclasses import replace

    from ptmlab.data.qa import QAFeatures

    first = feats[0]
    if isinstance(first, QAFeatures):
        example = [i for i, f in enumerate(feats) for _ in f.example]
        tt = [x for f in feats for x in f.token_type_ids] if first.token_type_ids is not None else None
        return replace(first, input_ids=[x for f in feats for x in f.input_ids], token_type_ids=tt,
                       offsets=[x for f in feats for x in f.offsets], example=example, split=None)
    return replace(first, input_ids=[x for f in feats for x in f.input_ids],
                   word_ids=[x for f in feats for x in f.word_ids], labels=None,
                   n_words=[x for f in feats for x in f.n_words], word_labels=None)


def usable_positions(config) -> int:
    """Token positions the model can embed (RoBERTa-style models reserve padding_idx + 1 of them)."""
    n = int(getattr(config, "max_position_embeddings", 0) or 0)
    if n and getattr(config, "model_type", "") in ("roberta", "xlm-roberta", "camembert", "longformer"):
        n -= int(getattr(config, "pad_token_id", 1) or 1) + 1
    return n


def _short(e: Exception) -> str:
    return str(e).splitlines()[0][:200] if str(e) else "no message"


def _run_config(path: Path) -> dict:
    if not (path / "config.yaml").is_file():
        return {}
    from ptmlab.core.rundir import RunDir

    cfg = RunDir(path).read_config()
    if not isinstance(cfg, dict):
        raise PtmlabError(f"'{path / 'config.yaml'}' holds a YAML {type(cfg).__name__}, not the mapping a run writes: "
                          f"restore the run's config.yaml or delete it to serve the model alone")
    return cfg


def _run_max_length(cfg: dict, path: Path) -> int:
    """The run's ``max_length`` (128 when it records none), checked at start: a bad one would fail every request."""
    value = cfg.get("max_length") or 128
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise PtmlabError(f"'{path / 'config.yaml'}' sets max_length {excerpt(value)!r}: it must be a whole number "
                          f">= 1; fix the run's config.yaml or pass --max-length N")
    return value


def _labels(config, path: Path) -> list[str]:
    """Class names by class id; the saved ``id2label`` must number the classes 0..num_labels-1."""
    id2label = getattr(config, "id2label", None) or {}
    try:
        ids = sorted(int(i) for i in id2label)
    except (TypeError, ValueError):
        ids = None
    if ids != list(range(len(id2label))) or len(ids) != config.num_labels:
        raise PtmlabError(f"'{path / 'config.json'}' numbers its labels {excerpt(sorted(map(str, id2label)))}, not "
                          f"0..{config.num_labels - 1}: the model's config is inconsistent")
    return [str(id2label[i]) for i in range(len(id2label))]


def _task_info(entry: dict, path: Path) -> TaskInfo:
    """A head as the ``multitask_heads`` modification recorded it (labels fall back to class numbers)."""
    try:
        n, kind, name = int(entry["num_labels"]), str(entry["kind"]), entry["name"]
        if not isinstance(name, str) or n < 1 or kind not in ("classification", "regression"):
            raise ValueError
        labels = [] if kind == "regression" else [str(x) for x in entry.get("labels") or range(n)]
    except (KeyError, TypeError, ValueError, AttributeError):
        raise PtmlabError(f"'{path / 'config.json'}' records a task head {excerpt(entry)} that ptmlab did not write: "
                          f"the model's config is inconsistent") from None
    return TaskInfo(name, kind, labels, _is_pair(name))


def _is_pair(task: str | None) -> bool | None:
    from ptmlab.data.tasks import TASKS

    if task and task in TASKS:
        return TASKS.get(task).is_pair
    return None


def load_predictor(model_dir: str | Path, max_length: int | None = None, precision: str = "fp32") -> Predictor:
    """A served model for local use (``predict(texts, pairs)`` -> probabilities), as ``ptmlab serve`` loads it."""
    return Predictor(model_dir, max_length, precision)
