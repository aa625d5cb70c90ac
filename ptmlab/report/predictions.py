"""``predictions_<split>.json`` of a run: predictions beside the gold labels (read by the report's plots)."""

from __future__ import annotations

import numpy as np

from ptmlab.core.io import atomic_write_json
from ptmlab.core.rundir import RunDir


def write_predictions(run: RunDir, split_name: str, split, preds: np.ndarray, spec, labels) -> None:
    if spec.kind in ("token-classification", "extractive-qa"):
        atomic_write_json(run.file(f"predictions_{split_name}.json"), span_predictions(split, preds, spec))
        return
    gold = split.label
    if spec.kind == "multi-label":  # a multi-hot row per example (1: the label is in the set)
        pred = [[int(x) for x in p] for p in preds]
    else:
        pred = [float(p) if spec.kind == "regression" else int(p) for p in preds]
    atomic_write_json(run.file(f"predictions_{split_name}.json"), {
        "labels": labels, "kind": spec.kind,
        "pred": pred,
        "gold": list(gold) if gold is not None else None,
        "ids": [i if isinstance(i, int | float) else str(i) for i in split.ids],
    })


def span_predictions(split, preds: list, spec) -> dict:
    """Tags per word beside the gold tags (token classification); answers with their score and character offsets
    beside the gold answer texts (extractive QA)."""
    ids = [i if isinstance(i, int | float) else str(i) for i in split.ids]
    if spec.kind == "token-classification":
        gold = [[spec.labels[t] for t in s] for s in split.tags] if split.tags is not None else None
        return {"kind": spec.kind, "labels": list(spec.labels), "ids": ids, "tokens": split.tokens,
                "pred": [list(p) for p in preds], "gold": gold}
    gold = [[t for t, _ in a] for a in split.answers] if split.answers is not None else None
    return {"kind": spec.kind, "ids": ids,
            "pred": [{"answer": a.text, "start": a.start, "end": a.end, "score": round(a.score, 4),
                      "probability": round(a.probability, 4)} for a in preds], "gold": gold}
