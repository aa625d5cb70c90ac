"""Official task metrics. Each takes predictions and references and returns a float."""

from __future__ import annotations

import numpy as np

from ptmlab.core.registry import Registry

METRICS: Registry = Registry("metric")


@METRICS.register("accuracy")
def accuracy(preds, refs) -> float:
    """Share of exact matches."""
    preds, refs = np.asarray(preds), np.asarray(refs)
    return float((preds == refs).mean()) if len(refs) else float("nan")


@METRICS.register("f1")
def f1(preds, refs) -> float:
    """Binary F1 of the positive class (label 1), as GLUE's MRPC."""
    from sklearn.metrics import f1_score

    return float(f1_score(refs, preds, pos_label=1, average="binary", zero_division=0))


@METRICS.register("macro_f1")
def macro_f1(preds, refs) -> float:
    """Unweighted mean of per-class F1."""
    from sklearn.metrics import f1_score

    return float(f1_score(refs, preds, average="macro", zero_division=0))


@METRICS.register("mcc")
def mcc(preds, refs) -> float:
    """Matthews correlation coefficient (CoLA)."""
    from sklearn.metrics import matthews_corrcoef

    return float(matthews_corrcoef(refs, preds))


@METRICS.register("pearson")
def pearson(preds, refs) -> float:
    """Pearson correlation (STS-B)."""
    from scipy.stats import pearsonr

    preds, refs = np.asarray(preds, float), np.asarray(refs, float)
    if preds.std() == 0 or refs.std() == 0:
        return 0.0
    return float(pearsonr(preds, refs)[0])


@METRICS.register("spearman")
def spearman(preds, refs) -> float:
    """Spearman rank correlation (STS-B)."""
    from scipy.stats import spearmanr

    preds, refs = np.asarray(preds, float), np.asarray(refs, float)
    if preds.std() == 0 or refs.std() == 0:
        return 0.0
    return float(spearmanr(preds, refs)[0])


def compute_metrics(names, preds, refs) -> dict[str, float]:
    return {n: METRICS.get(n)(preds, refs) for n in names}


def glue_score(metrics: dict[str, float]) -> float:
    """A task's single GLUE score: the mean of its official metrics (MRPC: F1 and acc; STS-B: both corrs)."""
    return float(np.mean(list(metrics.values())))
