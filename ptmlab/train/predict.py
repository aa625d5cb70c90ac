"""Predictions of a trained model on texts with no labels: ``ptmlab predict`` and ``Run.predict`` both come here.

A classifier gives each text its label, the label's probability (``score``) and every label's probability; a
regression head gives its ``score``. A multi-task run answers through the head of the task it is asked for.
Texts are encoded (not cached) and run in length-sorted batches by the evaluation's ``predict_logits``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ptmlab.core.config import Validated, at_least, opt
from ptmlab.core.errors import PtmlabError
from ptmlab.data.loaders import Split, rows_to_split
from ptmlab.data.tasks import TASKS, TaskSpec
from ptmlab.train.args import PRECISION_HELP, PRECISIONS


@dataclass(frozen=True)
class Head:
    """What the model answers: a task name, its kind and class names ([] for regression)."""
    task: str | None
    kind: str
    labels: list[str]
    threshold: float = 0.5  # multi-label: a label is in the set when its probability reaches this (chosen on dev)


def model_head(model, task: str | None = None) -> Head:
    """The head answering ``task`` (a multi-task model needs one when it has several heads)."""
    from ptmlab.train.multitask import model_tasks, set_task

    kind = next((k for k in ("TokenClassification", "QuestionAnswering") if type(model).__name__.endswith(k)), None)
    if kind is not None:
        raise PtmlabError(f"this model is a {type(model).__name__}: whole-text predictions need a sequence "
                          f"classification or regression head; predict a tagger or QA run with ptmlab predict RUN")
    heads = model_tasks(model)
    if heads:
        names = [h["name"] for h in heads]
        if task is None and len(heads) > 1:
            raise PtmlabError(f"this run has a head per task ({', '.join(names)}): pass --task NAME to pick one")
        entry = heads[0] if task is None else next((h for h in heads if h["name"] == task), None)
        if entry is None:
            raise PtmlabError(f"this run has no head for task '{task}': its heads are {', '.join(names)}")
        set_task(model, entry["name"])
        labels = [str(x) for x in entry.get("labels") or range(int(entry["num_labels"]))]
        return Head(entry["name"], entry["kind"], [] if entry["kind"] == "regression" else labels)
    config = model.config
    from ptmlab.data.labels import MULTI_LABEL, decision_threshold, is_multi_label

    if is_multi_label(config):  # a sigmoid per label: label sets, at the threshold chosen on dev
        return Head(task, MULTI_LABEL, [str(config.id2label[i]) for i in range(config.num_labels)],
                    decision_threshold(config))
    if getattr(config, "problem_type", None) == "regression" or config.num_labels == 1:
        return Head(task, "regression", [])
    return Head(task, "classification", [str(config.id2label[i]) for i in range(config.num_labels)])


def predict_split(model, tokenizer, split: Split, head: Head, max_length: int = 128, batch_size: int = 128,
                  precision: str = "fp32", bar: bool = False) -> list[dict]:
    """One prediction per example of ``split``: ``{"label", "score", "probabilities"}`` from a classifier,
    ``{"score"}`` from a regression head."""
    import torch

    from ptmlab.data.encode import encode_split
    from ptmlab.train.evaluate import predict_logits

    if len(split) == 0:
        return []
    enc = encode_split(tokenizer, split, max_length, use_cache=False)
    logits = predict_logits(model, enc, tokenizer.pad_token_id or 0, batch_size, precision, desc="predict",
                            bar=bar)
    if head.kind == "regression":
        return [{"score": float(v)} for v in logits[:, 0]]
    if head.kind == "multi-label":  # {"labels": the set (label order), "scores": every label's probability}
        probs = torch.sigmoid(torch.from_numpy(np.asarray(logits, dtype=np.float32))).numpy()
        return [{"labels": [n for n, p in zip(head.labels, row, strict=True) if p >= head.threshold],
                 "scores": {n: float(p) for n, p in zip(head.labels, row, strict=True)}} for row in probs]
    probs = torch.softmax(torch.from_numpy(np.asarray(logits, dtype=np.float32)), -1).numpy()
    out = []
    for row in probs:
        best = int(row.argmax())
        out.append({"label": head.labels[best], "score": float(row[best]),
                    "probabilities": {name: float(p) for name, p in zip(head.labels, row, strict=True)}})
    return out


def accepted_inputs(text_col: str = "text") -> str:
    """What predictions take, for error messages."""
    return (f"pass a text, a list of texts, (text, pair) tuples or dicts with '{text_col}', a DataFrame, a Dataset "
            f"or a data file")


def describe_item(item) -> str:
    """How an error message names a bad input item: None, or its type and (shortened) value."""
    if item is None:
        return "None"
    name = type(item).__name__
    shown = repr(item)
    shown = shown if len(shown) <= 40 else shown[:37] + "..."
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name} ({shown})"


def _text_of(value, i: int, what: str, col: str | None = None) -> str:
    """One text of item ``i``: a non-empty string (``col``: the dict key it came from)."""
    if not isinstance(value, str):
        where = f"has {describe_item(value)} in '{col}'" if col is not None else f"holds {describe_item(value)}"
        raise PtmlabError(f"item {i} of the input {where}: {what}")
    if not value.strip():
        raise PtmlabError(f"text {i} is empty: give every example some text")
    return value


def _example(item, i: int, text_col: str, pair_col: str | None, what: str) -> tuple[str, str | None]:
    """(text, pair or None) of one input item: a string, a (text, pair) tuple or a dict with the text column."""
    if isinstance(item, str):
        return _text_of(item, i, what), None
    if isinstance(item, tuple | list) and len(item) == 2:
        return _text_of(item[0], i, what), _text_of(item[1], i, what)
    if isinstance(item, dict):
        if text_col not in item:
            raise PtmlabError(f"item {i} of the input has no '{text_col}' (its keys: {', '.join(map(str, item))}): "
                              f"{what}")
        text = _text_of(item[text_col], i, what, text_col)
        if pair_col is None:
            return text, None
        if pair_col not in item:
            raise PtmlabError(f"item {i} of the input has no '{pair_col}', the run's second text (its keys: "
                              f"{', '.join(map(str, item))}): give every dict its '{pair_col}'")
        return text, _text_of(item[pair_col], i, what, pair_col)
    raise PtmlabError(f"item {i} of the input is {describe_item(item)}: {what}")


def prediction_split(source, text_col: str = "text", pair_col: str | None = None, pairs=None) -> Split:
    """The one reader of what predictions take (``ptmlab.predict`` and ``Run.predict``): a text, a list of texts,
    of (text, pair) tuples or of dicts holding ``text_col`` (and ``pair_col`` when the run reads pairs), a DataFrame
    or Dataset with those columns, or a data file (a path, or a string naming a file that exists). ``pairs`` gives a
    second text per text. Anything else (None, a number, a dict without the text column) is refused naming the
    item, before any model loads."""
    import os

    from ptmlab.data.sources import _kind, table_of

    what = accepted_inputs(text_col)
    if source is None:
        raise PtmlabError(f"nothing to predict: {what}")
    if isinstance(source, os.PathLike) or (isinstance(source, str) and Path(source).expanduser().is_file()):
        if pairs is not None:
            raise PtmlabError("pairs= goes with texts given in Python: name a data file's second column with "
                              "text_pair_col instead")
        return file_split(Path(source).expanduser(), text_col, pair_col)
    if isinstance(source, str):
        items = [source]
    elif isinstance(source, list | tuple):
        items = list(source)
    elif _kind(source) in ("Dataset", "DataFrame"):
        from ptmlab.data.loaders import _check_cols

        table = table_of(source)
        _check_cols(table.columns, {"text_col": text_col, "text_pair_col": pair_col}, table.where, True)
        items = table.rows
    else:
        raise PtmlabError(f"cannot predict from {describe_item(source)}: {what}")
    if not items:
        raise PtmlabError(f"the input holds no examples: {what}")
    if pairs is not None:
        pairs = [pairs] if isinstance(pairs, str) else list(pairs)
        if len(pairs) != len(items):
            raise PtmlabError(f"{len(items)} texts but {len(pairs)} pairs: give one pair per text")
        bad = next((i for i, t in enumerate(items) if not isinstance(t, str)), None)
        if bad is not None:
            raise PtmlabError(f"item {bad} of the input is {describe_item(items[bad])}: pairs= goes with texts given "
                              f"as strings (or pass (text, pair) tuples without pairs=)")
        items = list(zip(items, pairs, strict=True))
    examples = [_example(item, i, text_col, pair_col, what) for i, item in enumerate(items)]
    with_pair = [p is not None for _, p in examples]
    if any(with_pair) and not all(with_pair):
        i, j = with_pair.index(False), with_pair.index(True)
        raise PtmlabError(f"item {i} of the input has no pair but item {j} has one: give every example a pair, or "
                          f"none")
    texts = [t for t, _ in examples]
    return Split(texts, [p for _, p in examples] if any(with_pair) else None, None, list(range(len(texts))))


def text_split(texts, pairs=None) -> Split:
    """A Split of unlabelled texts (and pairs) given in Python (``prediction_split`` with the default columns)."""
    return prediction_split(texts, pairs=pairs)


def run_columns(run_config: dict) -> tuple[str, str | None]:
    """The text (and pair) column a run was trained on, for reading new files the same way."""
    task = run_config.get("task")
    if task in TASKS and not run_config.get("train_file"):
        spec = TASKS.get(task)
        if isinstance(spec.text_col, str):
            return spec.text_col, spec.pair_col if isinstance(spec.pair_col, str) else None
    return run_config.get("text_col") or "text", run_config.get("text_pair_col")


def file_split(path: str | Path, text_col: str, pair_col: str | None) -> Split:
    """The texts of a data file (any format the data layer reads); a label column, if any, is ignored."""
    from ptmlab.data.loaders import _check_cols
    from ptmlab.data.sources import read_file

    table = read_file(path)
    _check_cols(table.columns, {"--text-col": text_col, "--text-pair-col": pair_col}, table.where, True)
    spec = TaskSpec("predict", "classification", text_col=text_col, pair_col=pair_col, id_col=None)
    return rows_to_split(spec, Path(table.where), table.rows, labelled=False, first_line=table.first_line)


@dataclass(frozen=True)
class PredictConfig(Validated):
    input: str | None = opt(None, "the texts to label: a .csv, .tsv, .jsonl, .parquet or .arrow file (labels "
                                  "not needed; a label column is ignored)")
    output: str | None = opt(None, "directory to write predictions.jsonl (or .csv) into")
    task: str | None = opt(None, "multi-task runs: the task whose head answers")
    text_col: str | None = opt(None, "text column of --input (default: the run's)")
    text_pair_col: str | None = opt(None, "second text column for pair tasks (default: the run's)")
    max_length: int | None = opt(None, "truncate inputs to this many tokens (default: the run's)")
    eval_batch_size: int = opt(128, "examples per forward pass", deprecated=("--batch-size",))
    precision: str = opt("fp32", PRECISION_HELP, choices=list(PRECISIONS))
    format: str = opt("jsonl", "predictions file format: jsonl (probabilities as an object) or csv (one "
                               "prob_LABEL column per label)", choices=["jsonl", "csv"])
    overwrite: bool = opt(False, "replace predictions already in --output")

    def validate(self) -> None:
        at_least(self, 1, "eval_batch_size")
        if self.max_length is not None and not 8 <= self.max_length <= 8192:
            raise PtmlabError(f"--max-length {self.max_length} is out of range: use 8..8192")
        if self.format not in ("jsonl", "csv"):
            raise PtmlabError(f"--format '{self.format}' is unknown: choose jsonl or csv")
        if self.precision not in PRECISIONS:
            raise PtmlabError(f"--precision '{self.precision}' is unknown: choose {', '.join(PRECISIONS)}")


def predict_config(run_dir: str, cfg: PredictConfig, source=None) -> list[dict]:
    """Predictions of the run in ``run_dir`` for ``cfg.input`` (or ``source``: a string, a list of strings, a
    DataFrame, Dataset or list of dicts); written to ``cfg.output`` when set. Every input check happens before the
    model loads."""
    from ptmlab.core.rundir import RunDir
    from ptmlab.models.zoo import load_model, load_tokenizer
    from ptmlab.train.spans import predict_spans, span_kind, write_span_predictions

    run_cfg = RunDir(run_dir).read_config() if (Path(run_dir) / "config.yaml").is_file() else {}
    text_col, pair_col = run_columns(run_cfg)
    text_col, pair_col = cfg.text_col or text_col, cfg.text_pair_col or pair_col
    out_file = None
    if cfg.output:
        out_file = Path(cfg.output) / f"predictions.{cfg.format}"
        if out_file.exists() and not cfg.overwrite:
            raise PtmlabError(f"'{out_file}' exists: choose another --output or pass --overwrite")
        if Path(cfg.output).exists() and not Path(cfg.output).is_dir():
            raise PtmlabError(f"--output '{cfg.output}' is a file: pass a directory")
    from ptmlab.train.embedding import is_embedding_dir

    if is_embedding_dir(run_dir):  # a sentence embedder: one vector per text
        return _predict_embeddings(run_dir, cfg, run_cfg, text_col, source, out_file)
    kind = span_kind(run_dir)
    if kind is not None:  # a tagger (tags per word) or a span extractor (answers with character offsets)
        preds = predict_spans(run_dir, kind, cfg, run_cfg, source)
        if out_file is not None:
            write_span_predictions(out_file, preds)
        return preds
    split = file_split(cfg.input, text_col, pair_col) if cfg.input else prediction_split(source, text_col, pair_col)
    from ptmlab.train.evaluate import resolve_precision

    model = load_model(run_dir)
    model.eval()
    head = model_head(model, cfg.task)
    preds = predict_split(model, load_tokenizer(run_dir), split, head, cfg.max_length or
                          int(run_cfg.get("max_length") or 128), cfg.eval_batch_size, resolve_precision(cfg.precision),
                          bar=True)
    if out_file is not None:
        write_predictions_file(out_file, split, preds, head)
    return preds


def _predict_embeddings(run_dir: str, cfg: PredictConfig, run_cfg: dict, text_col: str, source, out_file) -> list[dict]:
    """``{"embedding": [...]}`` per text of ``cfg.input`` (its text column) or ``source``: single texts only."""
    from ptmlab.train.embedding import embed_texts, embedding_predictions
    from ptmlab.train.evaluate import resolve_precision
    from ptmlab.train.sentence import load_sentence_model

    if cfg.text_pair_col:
        raise PtmlabError("an embedding model embeds one text at a time: drop --text-pair-col")
    split = file_split(cfg.input, text_col, None) if cfg.input else prediction_split(source, text_col, None)
    if split.text_pair is not None:
        raise PtmlabError("an embedding model embeds one text at a time: pass single texts, not pairs")
    model, tokenizer = load_sentence_model(run_dir)
    vectors = embed_texts(model, tokenizer, split.text, cfg.max_length or int(run_cfg.get("max_length") or 128),
                          cfg.eval_batch_size, resolve_precision(cfg.precision), bar=True)
    preds = embedding_predictions(vectors)
    if out_file is not None:
        write_predictions_file(out_file, split, preds, Head(None, "embedding", []))
    return preds


def write_predictions_file(path: Path, split: Split, preds: list[dict], head: Head) -> None:
    """One row per example: its index, text (and pair), label, score and every label's probability."""
    import csv
    import io
    import json

    from ptmlab.core.io import atomic_write_text

    rows = []
    for i, p in enumerate(preds):
        row: dict = {"index": i, "text": split.text[i]}
        if split.text_pair is not None:
            row["text_pair"] = split.text_pair[i]
        row.update(p)
        rows.append(row)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".jsonl":
        atomic_write_text(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
        return
    buf = io.StringIO()
    fields = list(rows[0].keys() - {"probabilities"}) if rows else ["index", "text"]
    fields = [f for f in ("index", "text", "text_pair", "label", "labels", "score", "embedding") if f in fields]
    fields += [f"prob_{name}" for name in head.labels]
    writer = csv.DictWriter(buf, fieldnames=fields)
    writer.writeheader()
    for r in rows:
        probs = r.pop("probabilities", None) or r.pop("scores", {})  # multi-label: "scores"
        if "labels" in r:  # a label set as a JSON list, as multi-label csv data holds it
            r["labels"] = json.dumps(r["labels"], ensure_ascii=False)
        if "embedding" in r:  # a sentence vector as a JSON list
            r["embedding"] = json.dumps(r["embedding"])
        writer.writerow({**r, **{f"prob_{k}": v for k, v in probs.items()}})
    atomic_write_text(path, buf.getvalue())
