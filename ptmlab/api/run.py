"""``Run``: a run directory as an object (``ptmlab.load(dir)``, or what ``ptmlab.finetune`` returns)."""

from __future__ import annotations

import os
from functools import cached_property
from pathlib import Path
from typing import Any

from ptmlab.core.errors import PtmlabError
from ptmlab.core.rundir import RunDir


class Run:
    """A finished (or resumable) run directory: its options, numbers, model and tokenizer, and predictions.

    ``config`` is the options it ran with (config.yaml), ``summary`` its summary.json, ``metrics`` the final dev
    metrics, ``history`` every log row (metrics.jsonl); ``model`` and ``tokenizer`` load on first use."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self._dir = RunDir.open(self.path)

    def __repr__(self) -> str:
        done = self._dir.file("summary.json").is_file()
        return f"Run('{self.path}', command={self.command!r}, {'finished' if done else 'not finished'})"

    def __fspath__(self) -> str:
        return str(self.path)

    # ---------------------------------------------------------------------------------------------- records
    @cached_property
    def config(self) -> dict:
        return {k: v for k, v in self._dir.read_config().items() if k != "command"}

    @property
    def command(self) -> str | None:
        return self._dir.read_config().get("command")

    @property
    def summary(self) -> dict:
        return self._dir.summary()

    @property
    def metrics(self) -> dict:
        """The final dev metrics (``summary["metrics"]``)."""
        return dict(self.summary.get("metrics") or {})

    @property
    def history(self) -> list[dict]:
        """Every row of metrics.jsonl: training losses and evaluations by step."""
        return self._dir.metrics() if self._dir.file("metrics.jsonl").is_file() else []

    # ---------------------------------------------------------------------------------------------- model
    @cached_property
    def model(self):
        if not self._dir.has_model():
            raise PtmlabError(f"run '{self.path}' holds no model (config.json and safetensors weights): it did not "
                              f"finish, or its command writes none")
        from ptmlab.models.zoo import load_model

        model = load_model(str(self.path))
        model.eval()
        return model

    @cached_property
    def tokenizer(self):
        from ptmlab.models.zoo import load_tokenizer

        return load_tokenizer(str(self.path))

    def predict(self, texts, pairs=None, *, task: str | None = None, batch_size: int = 128,
                max_length: int | None = None, precision: str = "fp32", text_col: str | None = None,
                text_pair_col: str | None = None) -> list[dict]:
        """Predictions for ``texts``: whatever ``ptmlab.predict`` takes (a text, a list of texts, (text, pair)
        tuples, dicts with the run's text column(s), a DataFrame, a Dataset, a data file), read by the same function;
        ``pairs`` gives a second text per text (a QA run: the contexts of the questions). A classifier answers
        ``{"label", "score", "probabilities"}`` per text, a regression head ``{"score"}``, a tagger its words, tags
        and entity groups, a QA run its answers; ``task`` picks a multi-task run's head."""
        from ptmlab.train.predict import model_head, predict_split, prediction_split, run_columns
        from ptmlab.train.spans import span_kind

        if self.is_embedding:  # a sentence embedder: {"embedding": [...]} per text
            from ptmlab.train.embedding import embedding_predictions

            return embedding_predictions(self.embed(texts, pairs, batch_size=batch_size, max_length=max_length,
                                                    precision=precision, text_col=text_col))
        if span_kind(self.path) is not None:  # a tagger or a QA run: ptmlab.predict's span path
            from ptmlab.api.verbs import predict

            if pairs is not None:
                from ptmlab.train.spans import question_pairs

                texts = question_pairs(texts, pairs, span_kind(self.path))
            return predict(self, texts, task=task, batch_size=batch_size, max_length=max_length, precision=precision)
        col, pair_col = run_columns(self.config)
        split = prediction_split(texts, text_col or col, text_pair_col or pair_col, pairs)
        head = model_head(self.model, task)
        return predict_split(self.model, self.tokenizer, split, head, max_length or self.max_length, batch_size,
                             precision)

    @property
    def is_embedding(self) -> bool:
        """Whether the run holds a sentence embedder (``--task-kind embedding``, ``distill-embeddings``)."""
        from ptmlab.train.embedding import is_embedding_dir

        return is_embedding_dir(self.path)

    @cached_property
    def sentence_model(self):
        """An embedding run's model: encoder, pooling and normalisation (``train.sentence.SentenceEncoder``)."""
        if not self.is_embedding:
            raise PtmlabError(f"run '{self.path}' holds no sentence embedder: its model answers labels or scores; "
                              f"use predict()")
        from ptmlab.train.sentence import load_sentence_model

        model, _ = load_sentence_model(str(self.path))
        return model.eval()

    def embed(self, texts, pairs=None, *, batch_size: int = 128, max_length: int | None = None,
              precision: str = "fp32", text_col: str | None = None):
        """An embedding run's vectors for ``texts`` (what ``predict`` takes: a text, a list, a DataFrame, a
        Dataset, a data file) as a float32 numpy array [n, dim], L2-normalised as the model's pipeline makes them;
        ``predict`` returns the same vectors as ``{"embedding": [...]}`` per text."""
        from ptmlab.train.embedding import embed_texts
        from ptmlab.train.evaluate import resolve_precision
        from ptmlab.train.predict import prediction_split

        if pairs is not None:
            raise PtmlabError("an embedding model embeds one text at a time: drop pairs")
        split = prediction_split(texts, text_col or "text", None)
        if split.text_pair is not None:
            raise PtmlabError("an embedding model embeds one text at a time: pass single texts, not pairs")
        return embed_texts(self.sentence_model, self.tokenizer, split.text, max_length or self.max_length,
                           batch_size, resolve_precision(precision))

    def evaluate(self, data: Any = None, **options) -> dict:
        """``ptmlab.evaluate(self, data, **options)``: metrics on the run's own task unless told otherwise."""
        from ptmlab.api.verbs import evaluate

        return evaluate(self, data, **options)

    @property
    def max_length(self) -> int:
        return int(self.config.get("max_length") or 128)


def load(path: str | os.PathLike) -> Run:
    """Open a run directory written by ptmlab (finetune, distill, prune, ...)."""
    return Run(path)
