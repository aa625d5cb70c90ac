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
    """Matthews correlation coefficient (CoLA). Binary 0/1 labels are counted directly (bootstraps call this
    thousands of times); other labels go through scikit-learn. 0 when the confusion table has an empty row or
    column (one class predicted or present), as scikit-learn returns."""
    p, r = np.asarray(preds), np.asarray(refs)
    if p.size and np.isin(p, (0, 1)).all() and np.isin(r, (0, 1)).all():
        p, r = p.astype(bool), r.astype(bool)
        tp, tn, fp, fn = (float(np.sum(x)) for x in (p & r, ~p & ~r, p & ~r, ~p & r))
        den = (tp + fp) * (tp + fn) * (tn + fp) * (tn + fn)
        return float((tp * tn - fp * fn) / np.sqrt(den)) if den > 0 else 0.0
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


# ---------------------------------------------------------------------------------------------------- multi-label
# predictions and references are multi-hot rows [n, labels] (a 1-D array of class ids reads as one class per row)
THRESHOLD_GRID = tuple(round(0.05 * k, 2) for k in range(1, 20))  # 0.05, 0.10, ..., 0.95


def _micro_counts(preds, refs) -> tuple[float, float, float]:
    p, r = np.asarray(preds).astype(bool), np.asarray(refs).astype(bool)
    return float(np.sum(p & r)), float(np.sum(p & ~r)), float(np.sum(~p & r))


@METRICS.register("micro_f1")
def micro_f1(preds, refs) -> float:
    """F1 over every (example, label) decision pooled: 2 TP / (2 TP + FP + FN); for one class per example, the
    accuracy. 0 when nothing is predicted or present."""
    p, r = np.asarray(preds), np.asarray(refs)
    if p.ndim == 1:
        return accuracy(p, r)
    tp, fp, fn = _micro_counts(p, r)
    return 2 * tp / (2 * tp + fp + fn) if tp else 0.0


@METRICS.register("subset_accuracy")
def subset_accuracy(preds, refs) -> float:
    """Share of examples whose predicted label set is exactly the gold set (exact match)."""
    p, r = np.asarray(preds), np.asarray(refs)
    if not len(r):
        return float("nan")
    return float((p == r).all(-1).mean()) if p.ndim > 1 else accuracy(p, r)


def best_threshold(probs, refs, grid=THRESHOLD_GRID) -> float:
    """The decision threshold on ``grid`` whose label sets (every class with probability >= it) have the highest
    micro-F1 against ``refs``; ties go to the threshold nearest 0.5."""
    probs, refs = np.asarray(probs, dtype=float), np.asarray(refs)
    best, best_f1 = 0.5, -1.0
    for t in sorted(grid, key=lambda t: (abs(t - 0.5), t)):
        f1_t = micro_f1((probs >= t).astype(int), refs)
        if f1_t > best_f1 + 1e-12:
            best, best_f1 = float(t), f1_t
    return best


def compute_metrics(names, preds, refs) -> dict[str, float]:
    return {n: METRICS.get(n)(preds, refs) for n in names}


def glue_score(metrics: dict[str, float]) -> float:
    """A task's single GLUE score: the mean of its official metrics (MRPC: F1 and acc; STS-B: both corrs)."""
    return float(np.mean(list(metrics.values())))


# ------------------------------------------------------------------------------------------ token classification
def entity_scores(refs: list[list[str]], preds: list[list[str]]) -> dict:
    """Entity-level precision, recall and F1 (micro over entities, as CoNLL's conlleval and seqeval's default
    mode count them: an entity is right when its type and its exact span are), each entity type's numbers and
    token accuracy. Tags are strings (IOB2, as ptmlab normalises them); one list per sentence, same lengths."""
    from seqeval.metrics import classification_report

    if len(refs) != len(preds) or any(len(r) != len(p) for r, p in zip(refs, preds, strict=False)):
        raise ValueError("entity_scores: predictions and references differ in sentences or tokens")
    tokens = sum(len(r) for r in refs)
    right = sum(a == b for r, p in zip(refs, preds, strict=True) for a, b in zip(r, p, strict=True))
    if all(t == "O" for sentence in (*refs, *preds) for t in sentence):  # no entity anywhere: 0, as seqeval says,
        report = {}  # without its averages over no types warning on the console
    else:
        report = classification_report(refs, preds, output_dict=True, zero_division=0)
    micro = report.get("micro avg", {"precision": 0.0, "recall": 0.0, "f1-score": 0.0})
    per_type = {t: {"precision": float(v["precision"]), "recall": float(v["recall"]), "f1": float(v["f1-score"]),
                    "support": int(v["support"])}
                for t, v in report.items() if not t.endswith(" avg")}
    return {"entity_f1": float(micro["f1-score"]), "entity_precision": float(micro["precision"]),
            "entity_recall": float(micro["recall"]), "token_accuracy": right / tokens if tokens else float("nan"),
            "per_type": per_type}


@METRICS.register("entity_f1")
def entity_f1(preds, refs) -> float:
    """Entity-level micro F1 (seqeval / conlleval) of tag sequences."""
    return entity_scores(refs, preds)["entity_f1"]


@METRICS.register("entity_precision")
def entity_precision(preds, refs) -> float:
    """Entity-level micro precision (seqeval / conlleval) of tag sequences."""
    return entity_scores(refs, preds)["entity_precision"]


@METRICS.register("entity_recall")
def entity_recall(preds, refs) -> float:
    """Entity-level micro recall (seqeval / conlleval) of tag sequences."""
    return entity_scores(refs, preds)["entity_recall"]


# ------------------------------------------------------------------------------------------------ extractive QA
def squad_normalize(s: str) -> str:
    """SQuAD v1.1's official answer normalisation: lower case, no punctuation, no articles (a, an, the), single
    spaces (evaluate-v1.1.py's ``normalize_answer``)."""
    import re
    import string

    s = s.lower()
    s = "".join(ch for ch in s if ch not in set(string.punctuation))
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    return " ".join(s.split())


def squad_exact(prediction: str, gold: str) -> float:
    return float(squad_normalize(prediction) == squad_normalize(gold))


def squad_token_f1(prediction: str, gold: str) -> float:
    """Bag-of-tokens F1 of two normalised answers (0 when nothing is shared)."""
    from collections import Counter

    p, g = squad_normalize(prediction).split(), squad_normalize(gold).split()
    common = Counter(p) & Counter(g)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(p), same / len(g)
    return 2 * precision * recall / (precision + recall)


def squad_scores(predictions: list[str], golds: list[list[str]]) -> dict[str, float]:
    """SQuAD v1.1's exact match and F1 in percent: per question the best over its gold answers, then the mean."""
    if len(predictions) != len(golds):
        raise ValueError("squad_scores: one prediction per question")
    if not golds:
        return {"exact_match": float("nan"), "f1": float("nan")}
    em = [max(squad_exact(p, g) for g in gs) for p, gs in zip(predictions, golds, strict=True)]
    f1 = [max(squad_token_f1(p, g) for g in gs) for p, gs in zip(predictions, golds, strict=True)]
    return {"exact_match": 100.0 * sum(em) / len(em), "f1": 100.0 * sum(f1) / len(f1)}


def ranking_metrics(query_vec: np.ndarray, doc_vec: np.ndarray, relevant: list[int],
                    ks: tuple[int, ...] = (1, 5, 10)) -> dict:
    """Recall@k and MRR of nearest-neighbour search on normalised vectors: query i's relevant document is
    ``doc_vec[relevant[i]]``; its rank is one plus the number of documents scored strictly above it."""
    sim = query_vec @ doc_vec.T
    gold = sim[np.arange(len(query_vec)), relevant]
    rank = (sim > gold[:, None]).sum(1) + 1
    out = {"mrr": float((1.0 / rank).mean())}
    out.update({f"recall@{k}": float((rank <= k).mean()) for k in ks})
    return out


def cosine_correlations(a: np.ndarray, b: np.ndarray, gold: list[float]) -> dict:
    """Spearman and Pearson correlation of cosine(a_i, b_i) (normalised rows) with the gold scores."""
    from scipy.stats import pearsonr, spearmanr

    cos = (a * b).sum(1)
    if len(cos) < 2 or np.ptp(np.asarray(gold, dtype=np.float64)) == 0:
        return {"spearman": float("nan"), "pearson": float("nan")}
    return {"spearman": float(spearmanr(cos, gold).statistic), "pearson": float(pearsonr(cos, gold).statistic)}
