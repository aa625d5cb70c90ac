"""Loss, inference and evaluation of the task kinds whose labels are not one per example: token classification
(a tag per word, entity-level F1) and extractive QA (a span per question, SQuAD EM/F1).

Their data (``data/tokens.py``, ``data/qa.py``) are batch sources the one loop trains on; ``span_task_loss`` is the
loop's task loss for their batches (``loop.task_loss`` hands over to it) and ``evaluate_span`` is what
``train.evaluate.evaluate`` does for them.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ptmlab.core.progress import progress
from ptmlab.data.batching import eval_batches
from ptmlab.data.metrics import entity_scores, squad_scores
from ptmlab.data.qa import QAFeatures, best_answers
from ptmlab.data.tokens import IGNORE, TokenFeatures, word_predictions
from ptmlab.models.loader import model_inputs

NEG = -1e4  # padded positions never win a softmax over positions


def is_span_batch(batch: dict) -> bool:
    return "start_positions" in batch or ("labels" in batch and batch["labels"].dim() == 2)


def span_task_loss(model, batch: dict) -> torch.Tensor:
    """Per-example losses: token classification, the mean cross-entropy over the example's labelled sub-tokens;
    extractive QA, the mean of the start and end cross-entropies over the window's positions."""
    out = model(**model_inputs(model, batch))
    if "start_positions" in batch:
        pad = batch["attention_mask"] == 0
        start = out.start_logits.float().masked_fill(pad, NEG)
        end = out.end_logits.float().masked_fill(pad, NEG)
        return (F.cross_entropy(start, batch["start_positions"], reduction="none")
                + F.cross_entropy(end, batch["end_positions"], reduction="none")) / 2
    return token_loss(out.logits, batch["labels"])


def token_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy per example over its labelled positions (0 for an example with none)."""
    per_tok = F.cross_entropy(logits.float().transpose(1, 2), labels, ignore_index=IGNORE, reduction="none")
    count = (labels != IGNORE).sum(1)
    return per_tok.sum(1) / count.clamp(min=1)


@torch.no_grad()
def span_logits(model, feats, batch_size: int = 64, precision: str = "fp32", desc: str = "evaluate") -> list:
    """Per window or sentence, in order: token logits [len, labels] (token classification) or a pair (start [len],
    end [len]) (extractive QA), without padding."""
    from ptmlab.train.evaluate import autocast_ctx

    model.eval()
    device = next(model.parameters()).device
    qa = isinstance(feats, QAFeatures)
    out: list = [None] * len(feats)
    for idx in progress(eval_batches(feats.lengths, batch_size), desc=desc,
                        disable=None if len(feats) > 2000 else True):
        batch = feats.make_batch(idx)
        inputs = {k: v.to(device) for k, v in model_inputs(model, batch).items()}
        with autocast_ctx(precision, device):
            res = model(**inputs)
        if qa:
            s, e = res.start_logits.float().cpu().numpy(), res.end_logits.float().cpu().numpy()
        else:
            logits = res.logits.float().cpu().numpy()
        for row, i in enumerate(idx):
            n = len(feats.input_ids[i])
            out[i] = (s[row, :n], e[row, :n]) if qa else logits[row, :n]
    return out


def token_predictions(feats: TokenFeatures, logits: list, labels) -> list[list[str]]:
    """Tag names per word of every sentence."""
    return [[labels[t] for t in word_predictions(lg, w, n)]
            for lg, w, n in zip(logits, feats.word_ids, feats.n_words, strict=True)]


def evaluate_span(model, feats, spec, batch_size: int = 64, precision: str = "fp32") -> tuple[dict, list]:
    """The task's official scores and the predictions: tags per word (entity P/R/F1, each type's F1, token
    accuracy) or answers (SQuAD exact match and F1, in percent)."""
    logits = span_logits(model, feats, batch_size, precision)
    if isinstance(feats, QAFeatures):
        split = feats.split
        answers = best_answers(split, feats, [x[0] for x in logits], [x[1] for x in logits])
        if split.answers is None:
            return {}, answers
        return squad_scores([a.text for a in answers], [[t for t, _ in gold] for gold in split.answers]), answers
    labels = spec.labels
    preds = token_predictions(feats, logits, labels)
    if feats.word_labels is None:
        return {}, preds
    refs = [[labels[t] for t in sent] for sent in feats.word_labels]
    s = entity_scores(refs, preds)
    metrics = {k: s[k] for k in ("entity_f1", "entity_precision", "entity_recall", "token_accuracy")}
    metrics.update({f"f1_{t}": v["f1"] for t, v in sorted(s["per_type"].items())})
    return metrics, preds

