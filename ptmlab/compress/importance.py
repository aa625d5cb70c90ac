"""Importance scores per head and per FFN neuron, computed on a data subset (a registry: ``IMPORTANCE``).

- ``gate``: Michel et al.'s |dL/d gate| with a differentiable gate per head (``Gates(requires_grad=True)``);
  FFN neurons get |grad x weight| (there is no FFN gate in ``Gates``).
- ``grad-weight``: TextPruner's |sum of grad x weight| over each head's (FFN neuron's) rows and columns.
- ``entropy``: mean attention entropy of each head (low entropy = focused head = kept); FFN neurons get their
  mean absolute activation. Needs no labels and no gradients.

Without labels, the model's own predictions serve as targets. Scores are summed over examples, then each layer's
head scores are normalised by their L2 norm as Michel et al. do, so heads of different layers compare.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ptmlab.core.errors import PtmlabError
from ptmlab.core.progress import progress
from ptmlab.core.registry import Registry
from ptmlab.data.batching import collate, eval_batches
from ptmlab.data.encode import Encoded
from ptmlab.data.labels import is_multi_label
from ptmlab.models.loader import model_inputs
from ptmlab.models.structure import structure_of
from ptmlab.train.spans import is_span_batch, span_task_loss, token_loss


@dataclass
class Importance:
    heads: list[torch.Tensor]  # per layer: one score per current head
    ffn: list[torch.Tensor]  # per layer: one score per current FFN neuron
    method: str

    def normalised_heads(self) -> list[torch.Tensor]:
        return [h / h.norm().clamp(min=1e-12) for h in self.heads]


ImportanceFn = Callable[..., Importance]
IMPORTANCE: Registry[ImportanceFn] = Registry("importance score")


def _batches(model, enc: Encoded, pad_id: int, batch_size: int) -> list[dict]:
    if hasattr(enc, "make_batch"):  # tagged sentences or QA windows (data/tokens.py, data/qa.py)
        return [enc.make_batch(idx) for idx in eval_batches(enc.lengths, batch_size)]
    regression = model.config.problem_type == "regression"
    return [collate(enc, idx, pad_id, regression=regression) for idx in eval_batches(enc.lengths, batch_size)]


def _loss(model, batch: dict, use_labels: bool) -> torch.Tensor:
    """Summed loss of the batch: gold labels when present and wanted, else the model's own predictions."""
    if is_multi_label(model.config):  # binary cross-entropy per class, against the label sets or its own
        logits = model(**model_inputs(model, batch)).logits.float()
        labels = batch.get("labels") if use_labels else None
        target = labels.float() if labels is not None else (logits >= 0).float().detach()  # sigmoid >= 0.5
        return F.binary_cross_entropy_with_logits(logits, target, reduction="none").mean(-1).sum()
    if is_span_batch(batch):
        return _span_loss(model, batch, use_labels)
    logits = model(**model_inputs(model, batch)).logits
    logits = logits if logits.dtype == torch.float64 else logits.float()
    labels = batch.get("labels") if use_labels else None
    if model.config.problem_type == "regression" or logits.shape[-1] == 1:
        if labels is None:
            raise PtmlabError("importance on a regression task needs labels: pass labelled data (use_labels=True)")
        return F.mse_loss(logits.squeeze(-1), labels.float(), reduction="sum")
    target = labels if labels is not None else logits.argmax(-1).detach()
    return F.cross_entropy(logits, target, reduction="sum")


def _span_loss(model, batch: dict, use_labels: bool) -> torch.Tensor:
    """Summed token-classification or QA loss (``train.spans``); without labels, against the model's own tags at
    the labelled positions, or its own best start and end."""
    if use_labels:
        return span_task_loss(model, batch).sum()
    out = model(**model_inputs(model, batch))
    if "start_positions" in batch:
        pad = batch["attention_mask"] == 0
        s, e = out.start_logits.float().masked_fill(pad, -1e4), out.end_logits.float().masked_fill(pad, -1e4)
        return (F.cross_entropy(s, s.argmax(-1).detach(), reduction="sum")
                + F.cross_entropy(e, e.argmax(-1).detach(), reduction="sum")) / 2
    own = out.logits.argmax(-1).detach().masked_fill(batch["labels"] == -100, -100)
    return token_loss(out.logits, own).sum()


def _ffn_grad_weight(model) -> list[torch.Tensor]:
    """|sum of grad x weight| per FFN neuron over its input row, bias and output column (after backward)."""
    s = structure_of(model)
    out = []
    for i in range(s.num_layers(model)):
        fin, fout = s.part(model, i, "ffn_in"), s.part(model, i, "ffn_out")
        score = (fin.weight * fin.weight.grad).sum(1) + (fout.weight * fout.weight.grad).sum(0)
        if fin.bias is not None:
            score = score + fin.bias * fin.bias.grad
        out.append(score.detach().abs())
    return out


def _head_grad_weight(model) -> list[torch.Tensor]:
    from ptmlab.compress.surgery import head_dim

    s = structure_of(model)
    d = head_dim(model)
    out = []
    for i in range(s.num_layers(model)):
        total = 0
        for part in ("query", "key", "value"):
            lin = s.part(model, i, part)
            per_row = (lin.weight * lin.weight.grad).sum(1)
            if lin.bias is not None:
                per_row = per_row + lin.bias * lin.bias.grad
            total = total + per_row.view(-1, d).sum(1)
        o = s.part(model, i, "attn_output")
        total = total + (o.weight * o.weight.grad).sum(0).view(-1, d).sum(1)
        out.append(total.detach().abs())
    return out


def _accumulate(acc: list[torch.Tensor] | None, new: list[torch.Tensor]) -> list[torch.Tensor]:
    return new if acc is None else [a + b for a, b in zip(acc, new, strict=True)]


@IMPORTANCE.register("gate", help="|dL/d gate| per head (Michel et al.); |grad x weight| per FFN neuron")
def gate_importance(model, enc: Encoded, pad_id: int, batch_size: int = 32, use_labels: bool = True) -> Importance:
    from ptmlab.compress.surgery import heads_per_layer
    from ptmlab.models.gates import Gates

    model.eval()
    heads_acc = ffn_acc = None
    with Gates(model, requires_grad=True) as g:
        for batch in progress(_batches(model, enc, pad_id, batch_size), desc="importance (gate)"):
            model.zero_grad(set_to_none=True)
            g.head_scale.grad = None
            _loss(model, batch, use_labels).backward()
            grads = g.head_scale.grad.detach().abs()
            heads_acc = _accumulate(heads_acc, [grads[i, :n] for i, n in enumerate(heads_per_layer(model))])
            ffn_acc = _accumulate(ffn_acc, _ffn_grad_weight(model))
    model.zero_grad(set_to_none=True)
    return Importance(heads_acc, ffn_acc, "gate")


@IMPORTANCE.register("grad-weight", help="|grad x weight| per head and per FFN neuron (TextPruner)")
def grad_weight_importance(model, enc: Encoded, pad_id: int, batch_size: int = 32,
                           use_labels: bool = True) -> Importance:
    model.eval()
    heads_acc = ffn_acc = None
    for batch in progress(_batches(model, enc, pad_id, batch_size), desc="importance (grad x weight)"):
        model.zero_grad(set_to_none=True)
        _loss(model, batch, use_labels).backward()
        heads_acc = _accumulate(heads_acc, _head_grad_weight(model))
        ffn_acc = _accumulate(ffn_acc, _ffn_grad_weight(model))
    model.zero_grad(set_to_none=True)
    return Importance(heads_acc, ffn_acc, "grad-weight")


@IMPORTANCE.register("entropy", help="negative mean attention entropy per head; mean |activation| per FFN neuron")
@torch.no_grad()
def entropy_importance(model, enc: Encoded, pad_id: int, batch_size: int = 32, use_labels: bool = True) -> Importance:
    s = structure_of(model)
    model.eval()
    previous = model.config._attn_implementation
    model.set_attn_implementation("eager")
    acts: dict[int, torch.Tensor] = {}
    handles = [s.part(model, i, "ffn_out").register_forward_pre_hook(
        lambda m, inp, i=i: acts.__setitem__(i, inp[0])) for i in range(s.num_layers(model))]
    heads_acc = ffn_acc = None
    try:
        for batch in progress(_batches(model, enc, pad_id, batch_size), desc="importance (entropy)"):
            out = model(**model_inputs(model, batch), output_attentions=True)
            mask = batch["attention_mask"].float()  # [b, t]
            ent = []
            for att in out.attentions:  # [b, h, t, t]
                e = -(att * att.clamp(min=1e-12).log()).sum(-1)  # [b, h, t]
                ent.append(-(e * mask[:, None]).sum((0, 2)))  # higher = more focused
            heads_acc = _accumulate(heads_acc, ent)
            ffn_acc = _accumulate(ffn_acc, [(acts[i].abs() * mask[..., None]).sum((0, 1))
                                            for i in range(s.num_layers(model))])
    finally:
        for h in handles:
            h.remove()
        model.set_attn_implementation(previous)
    n_tokens = float(sum(enc.lengths))
    # shift so every score is positive (pruning ranks by it; normalisation needs a non-zero norm)
    heads = [h / n_tokens for h in heads_acc]
    low = min(float(h.min()) for h in heads)
    return Importance([h - low + 1e-6 for h in heads], [f / n_tokens for f in ffn_acc], "entropy")


def compute_importance(method: str, model, enc: Encoded, pad_id: int, batch_size: int = 32,
                       use_labels: bool = True) -> Importance:
    """Scores by the named method (see ``IMPORTANCE``)."""
    fn = IMPORTANCE.get(method)
    if use_labels and getattr(enc, "labels", getattr(enc, "start_positions", None)) is None:
        use_labels = False
    return fn(model, enc, pad_id, batch_size=batch_size, use_labels=use_labels)
