"""Masked-LM models split into (encoder, vocabulary head), so the head runs on the predicted positions only.

A masked LM predicts ~15% of the positions, yet transformers' ``*ForMaskedLM.forward`` projects every position
onto the vocabulary; for a small model (hidden 128, vocabulary 30,522) that projection costs several times the
encoder. The split below is by class; an unknown class falls back to the full forward.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from ptmlab.pretrain.objectives.base import per_example_mean, token_ce

Parts = tuple[nn.Module, Callable[[torch.Tensor], torch.Tensor]]


def encoder_and_head(model: nn.Module) -> Parts | None:
    """(encoder returning last_hidden_state, head mapping hidden [..., H] -> logits [..., V]) or None."""
    name = type(model).__name__
    if name == "BertForMaskedLM":
        return model.bert, model.cls
    if name == "BertForPreTraining":
        return model.bert, model.cls.predictions
    if name in ("RobertaForMaskedLM", "MPNetForMaskedLM"):
        return getattr(model, model.base_model_prefix), model.lm_head
    if name == "ElectraForMaskedLM":
        return model.electra, lambda h: model.generator_lm_head(model.generator_predictions(h))
    return None


def encoder_inputs(model: nn.Module, batch: dict) -> dict:
    """input_ids, plus token_type_ids / attention_mask when the batch has them and the model takes them."""
    out = {"input_ids": batch["input_ids"]}
    if "attention_mask" in batch:
        out["attention_mask"] = batch["attention_mask"]
    if "token_type_ids" in batch and getattr(model.config, "type_vocab_size", 0) > 1:
        out["token_type_ids"] = batch["token_type_ids"]
    return out


def masked_positions_ce(head: Callable, hidden: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Per-example mean cross-entropy of ``head`` applied to the positions whose label is not -100."""
    sel = labels != -100
    rows = sel.nonzero()[:, 0]
    logits = head(hidden[sel]).float()
    ce = F.cross_entropy(logits, labels[sel], reduction="none")
    return per_example_mean(ce, rows, labels.shape[0])


def masked_lm_loss(model: nn.Module, batch: dict) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(per-example MLM loss, last hidden states or None when the model had to run whole)."""
    parts = encoder_and_head(model)
    if parts is None:
        logits = model(**encoder_inputs(model, batch)).logits
        return token_ce(logits, batch["labels"]), None
    encoder, head = parts
    hidden = encoder(**encoder_inputs(model, batch)).last_hidden_state
    return masked_positions_ce(head, hidden, batch["labels"]), hidden
