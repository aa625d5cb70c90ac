"""Task kinds: how a label column becomes label ids (or targets), one entry per kind in ``LABEL_KINDS``.

A kind knows its label set (``label_set(values, class_names)``: the class names in id order, () for regression), how
one raw value becomes a target (``convert(raw, label_ids)``, raising ``ValueError`` with a short reason) and its
default metrics. ``--label-kind auto`` (the default) picks classification, regression or multi-label from the
column and refuses a column that could be either classes or scores (whole numbers stored as floats, or many distinct
integers) with a one-line error; integers without class names are classes, never silently scores, and their values
are the class ids (labels 0 and 2 make classes "0", "1", "2"). A column of lists (``["pos", "film"]``; in csv/tsv a
JSON list) is multi-label: the classes are the union of the lists, a target is a multi-hot row, the model a sigmoid
per class trained with binary cross-entropy, and a prediction every class whose probability reaches the decision
threshold chosen on dev (``THRESHOLD_KEY`` in the model's config). A new task kind registers a ``LabelKind`` here
and reads its label column through it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass

from ptmlab.core.errors import PtmlabError
from ptmlab.core.registry import Registry

MAX_AUTO_CLASSES = 20  # more distinct integers than this, with no class names, could be a score: ask
MAX_INT_CLASS = 10_000  # integer classes are class ids: a larger id would need that many outputs
MULTI_LABEL = "multi-label"
PROBLEM_TYPE = "multi_label_classification"  # transformers' problem_type of a multi-label head
THRESHOLD_KEY = "multi_label_threshold"  # the model config's decision threshold (chosen on dev)
DEFAULT_THRESHOLD = 0.5


@dataclass(frozen=True)
class LabelKind:
    name: str
    metrics: tuple[str, ...]
    label_set: Callable[[list, list[str] | None], tuple[str, ...]]
    convert: Callable[[object, dict[str, int]], object]


LABEL_KINDS: Registry[LabelKind] = Registry("label kind")


def _class_key(v) -> str:
    """A class value as the string the label set holds (1 and "1" are the same class; 1.0 too)."""
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    return str(v).strip()


def _ordered(keys: set[str]) -> tuple[str, ...]:
    """Class names in id order: integers are their own ids (0 .. the largest; 0 and 2 make "0", "1", "2"),
    negative integers in numeric order, names sorted. A single integer stays one class (a training column of one
    class is refused by the loader; a dev file of one class is read in the model's own label order)."""
    if keys and all(_is_int(k) for k in keys):
        ints = sorted(int(k) for k in keys)
        if ints[0] >= 0 and len(ints) > 1:
            return tuple(str(i) for i in range(ints[-1] + 1))
        return tuple(str(i) for i in ints)
    return tuple(sorted(keys))


def _class_set(values: list, class_names: list[str] | None) -> tuple[str, ...]:
    if class_names:
        return tuple(str(n) for n in class_names)
    return _ordered({_class_key(v) for v in values if v is not None and _class_key(v) != ""})


def _to_class(raw, label_ids: dict[str, int]) -> int:
    key = _class_key(raw) if raw is not None else ""
    if key not in label_ids:
        raise ValueError(f"label {raw!r} is not in the label set {sorted(label_ids)}")
    return label_ids[key]


def _to_score(raw, label_ids: dict[str, int]) -> float:
    try:
        y = float(raw)
    except (TypeError, ValueError):
        y = float("nan")
    if math.isnan(y) or math.isinf(y):
        raise ValueError(f"regression target {raw!r} is not a finite number")
    return y


def as_label_list(v) -> list | None:
    """A multi-label value as a list: a list or tuple (or an array), or a JSON list written in a csv/tsv cell;
    None for anything else."""
    if isinstance(v, list | tuple):
        return list(v)
    if hasattr(v, "tolist") and not isinstance(v, str | bytes) and getattr(v, "ndim", 0) == 1:
        return list(v.tolist())
    if isinstance(v, str) and v.strip().startswith("["):
        try:
            parsed = json.loads(v)
        except ValueError:
            return None
        return parsed if isinstance(parsed, list) else None
    return None


def _members(v) -> list:
    """The labels of one multi-label value (a single value is a set of one)."""
    items = as_label_list(v)
    return items if items is not None else [v]


def _multi_set(values: list, class_names: list[str] | None) -> tuple[str, ...]:
    if class_names:
        return tuple(str(n) for n in class_names)
    return _ordered({_class_key(x) for v in values if v is not None for x in _members(v)
                     if x is not None and _class_key(x) != ""})


def _to_multi_hot(raw, label_ids: dict[str, int]) -> list[int]:
    """A label set as a multi-hot row over the label set (an empty list: no label applies)."""
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        raise ValueError("missing label set (write [] for an example with no labels)")
    row = [0] * len(label_ids)
    for x in _members(raw):
        key = _class_key(x) if x is not None else ""
        if key not in label_ids:
            raise ValueError(f"label {x!r} is not in the label set {sorted(label_ids)}")
        row[label_ids[key]] = 1
    return row


LABEL_KINDS.add("classification", LabelKind("classification", ("accuracy", "macro_f1"), _class_set, _to_class),
                "one class per example (cross-entropy); class names from ClassLabel or the training data")
LABEL_KINDS.add("regression", LabelKind("regression", ("pearson", "spearman"), lambda v, c: (), _to_score),
                "one score per example (mean squared error)")
LABEL_KINDS.add(MULTI_LABEL, LabelKind(MULTI_LABEL, ("micro_f1", "macro_f1", "subset_accuracy"), _multi_set,
                                       _to_multi_hot),
                "a set of classes per example (a list; sigmoid per class, binary cross-entropy, a threshold chosen "
                "on dev)")

KIND_CHOICES = ("auto", *LABEL_KINDS.names())


def _is_int(s: str) -> bool:
    try:
        int(s)
        return True
    except ValueError:
        return False


def _number(v) -> float | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int | float):
        return float(v)
    if isinstance(v, str):
        try:
            return float(v)
        except ValueError:
            return None
    return None


def resolve_label_kind(label_kind: str, values: list, class_names: list[str] | None, label_col: str,
                       where: str) -> str:
    """The kind of a label column: ``label_kind`` when explicit, else decided from the values (see module doc)."""
    present = [v for v in values if v is not None and str(v).strip() != ""]
    lists = sum(as_label_list(v) is not None for v in present)
    kind = label_kind if label_kind != "auto" else None
    if kind is not None:
        LABEL_KINDS.get(kind)
        if lists and kind != MULTI_LABEL:
            raise PtmlabError(f"label column '{label_col}' of {where} holds lists of labels (e.g. "
                              f"{_example(present)}): pass --label-kind {MULTI_LABEL} (or auto), not {kind}")
    elif lists:
        if lists != len(present):
            raise PtmlabError(f"label column '{label_col}' of {where} mixes lists of labels and single labels: write "
                              f"every label set as a list, or pass --label-kind {MULTI_LABEL} (a single label is a "
                              f"set of one)")
        kind = MULTI_LABEL
    elif class_names:
        return "classification"
    elif not present:
        raise PtmlabError(f"label column '{label_col}' of {where} is empty: fill it or set --label-col")
    else:
        kind = _scalar_kind(present, label_col, where)
    if kind in ("classification", MULTI_LABEL) and not class_names:
        _check_classes(kind, values, label_col, where)
    return kind


def _example(present: list) -> str:
    first = next((v for v in present if as_label_list(v) is not None), present[0])
    text = repr(first)
    return text if len(text) <= 60 else text[:57] + "..."


def _check_classes(kind: str, values: list, label_col: str, where: str) -> None:
    """A multi-label column names some label; integer class ids need no more outputs than ``MAX_INT_CLASS``."""
    keys = LABEL_KINDS.get(kind).label_set(values, None)
    if kind == MULTI_LABEL and not keys:
        raise PtmlabError(f"label column '{label_col}' of {where} names no label in any of its label sets: give "
                          f"some examples labels")
    if len(keys) > MAX_INT_CLASS and all(_is_int(k) for k in keys):
        raise PtmlabError(f"label column '{label_col}' of {where} holds class ids up to {keys[-1]} (integer labels "
                          f"are class ids, 0 to the largest): number the classes from 0 or write them as names")


def _scalar_kind(present: list, label_col: str, where: str) -> str:
    """classification or regression for a column of single values (see the module doc)."""
    numbers = [_number(v) for v in present]
    if any(n is None for n in numbers):
        return "classification"  # names (or a mix of names and numbers): classes
    if any(not n.is_integer() for n in numbers):
        return "regression"
    whole_floats = any(isinstance(v, float) or (isinstance(v, str) and not _is_int(v.strip())) for v in present)
    distinct = len(set(numbers))
    if whole_floats:
        raise PtmlabError(f"label column '{label_col}' of {where} holds whole numbers written as floats (e.g. "
                          f"{present[0]!r}): pass --label-kind classification (classes) or regression (scores)")
    if distinct > MAX_AUTO_CLASSES:
        raise PtmlabError(f"label column '{label_col}' of {where} holds {distinct} distinct integers and no class "
                          f"names: pass --label-kind classification (classes) or regression (scores)")
    return "classification"


def is_multi_label(config) -> bool:
    """Whether a model config describes a multi-label head (transformers' ``problem_type``)."""
    return getattr(config, "problem_type", None) == PROBLEM_TYPE


def decision_threshold(config) -> float:
    """The decision threshold a multi-label model was saved with (chosen on dev), 0.5 when it records none."""
    value = getattr(config, THRESHOLD_KEY, None)
    if value is None:
        return DEFAULT_THRESHOLD
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < 1:
        raise PtmlabError(f"the model config's {THRESHOLD_KEY} is {value!r}, not a probability in (0, 1): fix "
                          f"config.json or fine-tune the model again")
    return float(value)


def refuse_multi_label(kind: str, what: str, fix: str) -> None:
    """A one-line error for a path that supports single-label tasks only (never a silent single-label run)."""
    if kind == MULTI_LABEL:
        raise PtmlabError(f"multi-label tasks are not supported by {what}: {fix}")
