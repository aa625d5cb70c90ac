"""Train a copy of the victim on its answers through the one lifecycle (``fine_tune``), and measure agreement.

With probabilities the loss is cross-entropy against the victim's (renormalised) soft labels; with labels only it
is the ordinary cross-entropy on hard labels. Agreement is the fraction of dev examples where the copy predicts the
victim's label.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from ptmlab.core.rundir import RunDir
from ptmlab.data.encode import encode_split
from ptmlab.data.loaders import Split
from ptmlab.data.metrics import compute_metrics
from ptmlab.data.tasks import TaskSpec
from ptmlab.extraction.client import Answers
from ptmlab.models.loader import model_inputs, save_model


def soft_targets(answers: Answers) -> torch.Tensor | None:
    """Rows summing to 1 (rounded probabilities renormalised; an all-zero row becomes the label's one-hot)."""
    if answers.probs is None:
        return None
    p = torch.tensor(answers.probs, dtype=torch.float).clamp_min(0)
    sums = p.sum(-1, keepdim=True)
    onehot = F.one_hot(torch.tensor(answers.labels), p.shape[-1]).float()
    return torch.where(sums > 0, p / sums.clamp_min(1e-12), onehot)


def soft_label_loss(targets: torch.Tensor):
    """Per-example cross-entropy against the victim's probabilities, looked up by the batch's example ids."""

    def loss(model, batch):
        logits = model(**model_inputs(model, batch)).logits.float()
        t = targets.to(logits.device)[batch["index"].to(logits.device)]
        return -(t * F.log_softmax(logits, -1)).sum(-1)

    return loss


def agreement(a, b) -> float:
    a, b = np.asarray(a), np.asarray(b)
    return float((a == b).mean()) if len(a) else float("nan")


def to_task_ids(label_names: list[str], spec: TaskSpec, task_names: list[str] | None) -> list[int]:
    """Map the victim's label ids to the task's label ids by name (identity when names differ)."""
    names = list(task_names or spec.labels)
    if all(n in names for n in label_names):
        return [names.index(n) for n in label_names]
    return list(range(len(label_names)))


def train_copy(cfg, run: RunDir, texts: list[str], pairs: list[str] | None, answers: Answers, dev: Split,
               spec: TaskSpec, task_names: list[str] | None, victim_dev: list[int]) -> dict:
    """Fine-tune ``cfg.model`` on the answers into ``run``; returns dev agreement with the victim and dev metrics."""
    from ptmlab.core.seed import set_seed
    from ptmlab.data.loaders import TaskData
    from ptmlab.models.zoo import load_model, load_tokenizer
    from ptmlab.train.evaluate import predict_logits, resolve_precision
    from ptmlab.train.lifecycle import fine_tune

    set_seed(cfg.seed)
    tokenizer = load_tokenizer(cfg.model)
    model = load_model(cfg.model, num_labels=len(answers.label_names), label_names=answers.label_names,
                       dropout=cfg.dropout)
    pad_id = tokenizer.pad_token_id or 0
    train = Split(texts, pairs, list(answers.labels))
    enc = {"train": encode_split(tokenizer, train, cfg.max_length), "dev": encode_split(tokenizer, dev, cfg.max_length)}
    targets = soft_targets(answers)
    mapping = np.array(to_task_ids(answers.label_names, spec, task_names))
    precision = resolve_precision(cfg.precision)

    def agreement_with_victim(m):
        pred = predict_logits(m, enc["dev"], pad_id, cfg.eval_batch_size, precision).argmax(-1)
        metrics = compute_metrics(spec.metrics, mapping[pred], dev.label) if dev.label is not None else {}
        return {"agreement": agreement(pred, victim_dev), **metrics}, pred

    fit = fine_tune(model, tokenizer, TaskData(spec, {"train": train, "dev": dev}), cfg, run, enc=enc,
                    loss_fn=soft_label_loss(targets) if targets is not None else None, test=False,
                    evaluator=agreement_with_victim, main_metric="agreement")
    save_model(fit.model, tokenizer, run.path)
    fit.trainer.cleanup()
    metrics = dict(fit.dev_metrics)
    return {"agreement": metrics.pop("agreement"), "metrics": metrics, "steps": fit.state.step,
            "train_seconds": round(fit.state.train_seconds, 3), "soft_labels": targets is not None,
            "queries": len(texts), "dev_predictions": [int(x) for x in fit.dev_preds]}
