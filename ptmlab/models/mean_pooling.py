"""Mean pooling for a sequence classifier: its head reads the mean of the last hidden states, not the first position.

The heads of BERT, RoBERTa, ELECTRA, MPNet, DistilBERT and DeBERTa-v2 read position 0 of the encoder's last
hidden state ([CLS] / <s>); BERT passes it through a pooler (dense + tanh) first. A sentence embedder (SetFit,
sentence-transformers) is trained with the mean of the real tokens' states instead, so a head trained on its
embeddings must read that mean. The modification ``mean_pooling`` makes it so:

- a forward hook on the encoder replaces position 0 of the last hidden state by the mean over the attention mask and
  sets ``pooler_output`` to the same vector; every head above then reads the mean;
- an encoder pooler (BERT's dense + tanh) is removed, so the head's first layer is applied to the mean
  itself (a BERT classifier becomes logistic regression on the sentence embedding).

It is recorded in ``config.ptmlab_modifications``, so ``load_model`` (``predict``, ``evaluate``, ``serve``,
``distill``, ``prune``, ``export``, ``optimize``) rebuilds the same model; the hook is traced into ONNX exports.
``sentence_vectors(model, batch)`` returns the pooled vectors (what the head reads) with gradients.
``first_token_only`` (a training speed-up that keeps position 0 alone in the last layer) does not apply to it.
"""

from __future__ import annotations

import torch
from torch import nn

from ptmlab.core.errors import PtmlabError
from ptmlab.models.loader import MODIFIERS, record_modification

MEAN_POOLING = "mean_pooling"
# families whose sequence-classification head reads position 0 of the encoder's last hidden state
FIRST_POSITION_HEADS = ("bert", "roberta", "xlm-roberta", "electra", "mpnet", "distilbert", "deberta-v2")


def is_mean_pooled(model) -> bool:
    """The model carries the ``mean_pooling`` modification."""
    mods = getattr(getattr(model, "config", None), "ptmlab_modifications", None) or []
    return any(m.get("kind") == MEAN_POOLING for m in mods)


def masked_mean(states: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """[B, T, H] states -> [B, H]: the mean over positions whose mask is 1 (every position without a mask)."""
    if mask is None or mask.dim() != 2:
        return states.mean(1)
    m = mask.unsqueeze(-1).to(states.dtype)
    return (states * m).sum(1) / m.sum(1).clamp_min(1e-9)


def _hook(module: nn.Module, args, kwargs, output):
    mask = kwargs.get("attention_mask")
    if mask is None and len(args) > 1:
        mask = args[1]
    if isinstance(output, tuple):
        states = output[0]
        mean = masked_mean(states, mask)
        states = torch.cat([mean[:, None].to(states.dtype), states[:, 1:]], dim=1)
        return (states, mean, *output[2:]) if module.pooled_by_mean else (states, *output[1:])
    states = output.last_hidden_state
    mean = masked_mean(states, mask)
    fields = {k: v for k, v in output.items()}
    fields["last_hidden_state"] = torch.cat([mean[:, None].to(states.dtype), states[:, 1:]], dim=1)
    if "pooler_output" in type(output).__dataclass_fields__:
        fields["pooler_output"] = mean
    return type(output)(**fields)  # built anew: a field that was None keeps its place in the tuple view


@MODIFIERS.register(MEAN_POOLING, help="the sequence-classification head reads the mean of the last hidden states "
                                       "over the real tokens (SetFit), not the first position")
def use_mean_pooling(model, record: bool = True):
    """Make ``model``'s head read mean-pooled vectors (see the module docstring); idempotent."""
    if getattr(model, "_ptmlab_mean_pooling", None) is not None:
        return model
    family = getattr(model.config, "model_type", None)
    if family not in FIRST_POSITION_HEADS or not type(model).__name__.endswith("ForSequenceClassification"):
        raise PtmlabError(f"mean pooling needs a sequence classifier whose head reads the first position "
                          f"({', '.join(FIRST_POSITION_HEADS)}); this model is a {type(model).__name__} "
                          f"('{family}')")
    encoder = model.base_model
    encoder.pooled_by_mean = getattr(encoder, "pooler", None) is not None
    if encoder.pooled_by_mean:
        encoder.pooler = None
    model._ptmlab_mean_pooling = encoder.register_forward_hook(_hook, with_kwargs=True)
    if record and not is_mean_pooled(model):
        record_modification(model, MEAN_POOLING)
    return model


def sentence_vectors(model, batch: dict) -> torch.Tensor:
    """[B, H]: the mean-pooled vectors a mean-pooled model's head reads, for a collated batch (with gradients)."""
    model = getattr(model, "module", model)
    if not is_mean_pooled(model):
        raise PtmlabError("sentence vectors need a mean-pooled model: apply use_mean_pooling first")
    inputs = {k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids") if k in batch}
    return model.base_model(**inputs).last_hidden_state[:, 0]
