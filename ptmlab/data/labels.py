"""Task kinds: how a label column becomes label ids (or targets), one entry per kind in ``LABEL_KINDS``.

A kind knows its label set (``label_set(values, class_names)``: the class names in id order, () for regression), how
one raw value becomes a target (``convert(raw, label_ids)``, raising ``ValueError`` with a short reason) and its
default metrics. ``--label-kind auto`` (the default) picks classification or regression from the column and refuses
a column that could be either (whole numbers stored as floats, or many distinct integers) with a one-line error;
integers without class names are classes, never silently scores. A new task kind (token classification, say)
registers a ``LabelKind`` here and reads its label column through it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from ptmlab.core.errors import PtmlabError
from ptmlab.core.registry import Registry

MAX_AUTO_CLASSES = 20  # more distinct integers than this, with no class names, could be a score: ask


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


def _class_set(values: list, class_names: list[str] | None) -> tuple[str, ...]:
    if class_names:
        return tuple(str(n) for n in class_names)
    keys = {_class_key(v) for v in values if v is not None and _class_key(v) != ""}
    if keys and all(_is_int(k) for k in keys):  # numeric classes in numeric order (2 before 10)
        return tuple(sorted(keys, key=int))
    return tuple(sorted(keys))


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


LABEL_KINDS.add("classification", LabelKind("classification", ("accuracy", "macro_f1"), _class_set, _to_class),
                "one class per example (cross-entropy); class names from ClassLabel or the training data")
LABEL_KINDS.add("regression", LabelKind("regression", ("pearson", "spearman"), lambda v, c: (), _to_score),
                "one score per example (mean squared error)")

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
    if label_kind != "auto":
        LABEL_KINDS.get(label_kind)
        return label_kind
    if class_names:
        return "classification"
    present = [v for v in values if v is not None and str(v).strip() != ""]
    if not present:
        raise PtmlabError(f"label column '{label_col}' of {where} is empty: fill it or set --label-col")
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
