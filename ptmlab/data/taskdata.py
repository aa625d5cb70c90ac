"""A task's data as a command uses it: loaded from the options every data-reading command shares (``DataArgs``),
with ``--max-train`` / ``--max-eval`` applied and a dev split carved from train when the task has none.

Commands that only evaluate ask for ``need_train=False``: the training split is then left whole and not checked,
instead of being shrunk by changing the caller's config.
"""

from __future__ import annotations

import random

from ptmlab.core.errors import PtmlabError
from ptmlab.data.loaders import TaskData, load_source, load_span_task, load_task, subset
from ptmlab.data.tasks import EMBEDDING, SPAN_KINDS


def load_task_data(cfg, *, need_train: bool = True, source=None) -> TaskData:
    """The task named by ``cfg`` (any config with the ``DataArgs`` fields and ``seed``); never modifies ``cfg``.
    ``source``: data in memory (a Dataset, DatasetDict, DataFrame, list of dicts; ``load_source``) read with
    ``cfg``'s columns, label kind and splits instead of what ``cfg.task`` names."""
    splits = dict(train_split=getattr(cfg, "train_split", "train"), eval_split=getattr(cfg, "eval_split", None))
    kind = getattr(cfg, "task_kind", None)
    if kind == EMBEDDING:  # pairs, triplets, scored pairs or retrieval data (data/embedding.py)
        from ptmlab.data.embedding import load_embedding_task

        data = load_embedding_task(cfg, source)
    elif source is not None and kind in SPAN_KINDS:
        data = load_span_task(kind, cfg.task, {}, cfg.text_col, cfg.label_col, source=source)
    elif source is not None:
        data = load_source(source, cfg.task, cfg.text_col, cfg.text_pair_col, cfg.label_col, cfg.label_kind,
                           **splits)
    else:
        data = load_task(cfg.task, cfg.glue_dir, cfg.train_file, cfg.dev_file, cfg.test_file, cfg.text_col,
                         cfg.text_pair_col, cfg.label_col, cfg.label_kind, **splits, task_kind=kind)
    seed = getattr(cfg, "seed", 42)
    if need_train and "train" not in data.splits:
        raise PtmlabError(f"task '{cfg.task}' has no training data here: pass --train-file")
    if "dev" not in data.splits:
        train = data.splits["train"]
        if len(train) < 10:
            raise PtmlabError(f"the training data has {len(train)} examples and there is no --dev-file: "
                              f"give a dev file or more data")
        idx = list(range(len(train)))
        random.Random(1234).shuffle(idx)
        cut = max(1, len(idx) // 10)
        data.splits["dev"] = train.select(idx[:cut])
        data.splits["train"] = train.select(idx[cut:])
        if kind == EMBEDDING:  # the carved dev split decides the metrics (scores: Spearman; else retrieval)
            from ptmlab.data.embedding import embedding_spec

            data.spec = embedding_spec(data.spec.name, data.splits["dev"])
    if need_train:
        data.splits["train"] = subset(data.splits["train"], cfg.max_train, seed)
        if len(data.splits["train"]) == 0:
            raise PtmlabError("the training split is empty: check --max-train and the data files")
    data.splits["dev"] = subset(data.splits["dev"], cfg.max_eval, seed)  # the test split stays whole
    if need_train and getattr(cfg, "max_train_per_class", None):
        data.splits["train"] = per_class_subset(data, cfg.max_train_per_class, seed)
    if data.spec.kind in SPAN_KINDS:
        span_options(data, cfg)
    return data


def per_class_subset(data: TaskData, k: int, seed: int):
    """``--max-train-per-class K``: K training examples of every class, each class's drawn after its own seeded
    shuffle, kept in their original order. Classification only; a class with fewer than K examples is an error that
    names it."""
    kind = data.spec.kind
    if kind != "classification":
        raise PtmlabError(f"--max-train-per-class keeps K examples of each class, but task '{data.spec.name}' is "
                          f"{kind}: use it with a single-label classification task, or --max-train N")
    train = data.splits["train"]
    names = label_names(data) or []
    by_class: dict = {}
    for i, y in enumerate(train.label):
        by_class.setdefault(y, []).append(i)
    rng = random.Random(seed)
    chosen = []
    for y in range(data.spec.num_labels):
        rows = by_class.get(y, [])
        if len(rows) < k:
            name = names[y] if y < len(names) else y
            fix = f"use --max-train-per-class {len(rows)} or less" if rows else "drop --max-train-per-class"
            raise PtmlabError(f"--max-train-per-class {k}: class '{name}' has {len(rows)} training example"
                              f"{'' if len(rows) == 1 else 's'}: {fix}, or add examples of that class")
        rows = list(rows)
        rng.shuffle(rows)
        chosen.extend(rows[:k])
    return train.select(sorted(chosen))


def span_options(data: TaskData, cfg) -> None:
    """How span-task splits encode: --label-all-subtokens, --doc-stride, and QA's 384-token windows when
    --max-length is left at its default."""
    import dataclasses

    default = next((f.default for f in dataclasses.fields(cfg) if f.name == "max_length"), None) \
        if dataclasses.is_dataclass(cfg) else None
    window = data.spec.extra.get("max_length") if cfg.max_length == default else None
    for split in data.splits.values():
        if hasattr(split, "label_all_subtokens"):
            split.label_all_subtokens = bool(getattr(cfg, "label_all_subtokens", False))
        if hasattr(split, "doc_stride"):
            split.doc_stride = getattr(cfg, "doc_stride", 128)
            split.window = window


def label_names(data: TaskData) -> list[str] | None:
    """Class names of a classification task, tag names of a token classification task (None for regression and
    extractive QA)."""
    spec = data.spec
    if spec.kind in ("regression", "extractive-qa", EMBEDDING):
        return None
    return list(spec.extra.get("label_names") or spec.labels)
