"""``predictions_<split>.json`` of a run: predictions beside the gold labels (read by the report's plots)."""

from __future__ import annotations

import numpy as np

from ptmlab.core.io import atomic_write_json
from ptmlab.core.rundir import RunDir


def write_predictions(run: RunDir, split_name: str, split, preds: np.ndarray, spec, labels) -> None:
    gold = split.label
    atomic_write_json(run.file(f"predictions_{split_name}.json"), {
        "labels": labels, "kind": spec.kind,
        "pred": [float(p) if spec.kind == "regression" else int(p) for p in preds],
        "gold": list(gold) if gold is not None else None,
        "ids": [i if isinstance(i, int | float) else str(i) for i in split.ids],
    })
