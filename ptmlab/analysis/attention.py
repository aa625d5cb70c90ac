"""Attention maps, entropy per head and Kovaleva et al.'s five pattern types.

Pattern rule (per attention map of one head on one example; each row sums to 1; rows of plain query tokens):
  v = mean over those query rows of the mass on special-token columns ([CLS], [SEP]),
  d = mean mass on the query's own and its two neighbouring positions (|i - j| <= 1), special columns excluded,
  b = mean mass on the other non-special tokens of the query's own segment.
  vertical: v >= 0.5 and d < 0.2;  diagonal: d >= 0.5 and v < 0.2;
  vertical+diagonal: v >= 0.2 and d >= 0.2 and v + d >= 0.6;  block: b >= 0.5;  heterogeneous: everything else.
A head's type is its most frequent type over the examples; layer shares count every (example, head) map.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np
import torch

from ptmlab.core.errors import PtmlabError
from ptmlab.core.progress import progress
from ptmlab.data.batching import collate, eval_batches
from ptmlab.data.encode import Encoded
from ptmlab.models.loader import model_inputs
from ptmlab.models.structure import structure_of

PATTERNS = ("vertical", "diagonal", "vertical+diagonal", "block", "heterogeneous")


def require_attentions(model) -> None:
    """Attention weights are only returned by eager attention; say how to load the model so."""
    impl = getattr(model.config, "_attn_implementation", None)
    if impl not in (None, "eager"):
        raise PtmlabError(f"the model uses attn_implementation='{impl}', which returns no attention weights: load it "
                          f"with load_model(name, attn_implementation='eager')")


class LastLayerAttentionEdit(ABC):
    """Context manager: the last layer's self-attention output rewritten from its attention weights.

    Hooks the last layer's value projection (keeping its output) and its self-attention module, whose output a
    subclass's ``edit(output)`` replaces; ``values()`` gives the kept values as ``[B, heads, T, head size]``. Eager
    attention only: the module must return its weights (``output[1]``)."""

    def __init__(self, model):
        s = structure_of(model)
        last = s.num_layers(model) - 1
        self.attn = s.part(model, last, "self_attention")
        self.value = s.part(model, last, "value")
        self.heads = model.config.num_attention_heads
        self._v = None
        self._h: list = []

    def __enter__(self):
        self._h.append(self.value.register_forward_hook(lambda m, i, o: setattr(self, "_v", o)))
        self._h.append(self.attn.register_forward_hook(lambda m, i, o: self.edit(o)))
        return self

    def __exit__(self, *exc):
        for h in self._h:
            h.remove()
        self._h.clear()

    def values(self) -> torch.Tensor:
        b, t, width = self._v.shape
        return self._v.view(b, t, self.heads, width // self.heads).transpose(1, 2)

    @abstractmethod
    def edit(self, output: tuple) -> tuple:
        """The self-attention module's new output, from its own ``output`` (context, weights, ...)."""


@torch.no_grad()
def attentions(model, batch: dict) -> torch.Tensor:
    """Attention weights ``[layers, batch, heads, tokens, tokens]`` for one collated batch."""
    require_attentions(model)
    out = model(**model_inputs(model, batch), output_attentions=True)
    if not getattr(out, "attentions", None) or out.attentions[0] is None:
        raise PtmlabError("the model returned no attention weights: load it with "
                          "load_model(name, attn_implementation='eager')")
    return torch.stack([a.float() for a in out.attentions])


def special_mask(input_ids: torch.Tensor, special_ids: set[int]) -> torch.Tensor:
    return torch.isin(input_ids, torch.tensor(sorted(special_ids), dtype=input_ids.dtype))


@dataclass
class AttentionStats:
    """Per head: mean entropy (nats) and pattern counts; per (layer, type): share of maps of that type."""

    entropy: np.ndarray  # [layers, heads]
    counts: np.ndarray  # [layers, heads, 5]
    features: np.ndarray  # [layers, heads, 3]: mean v, d, b

    def head_types(self) -> list[list[str]]:
        return [[PATTERNS[int(k)] for k in row] for row in self.counts.argmax(-1)]

    def layer_shares(self) -> np.ndarray:
        per_layer = self.counts.sum(1)
        return per_layer / np.maximum(per_layer.sum(-1, keepdims=True), 1)


def classify(v: np.ndarray, d: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Pattern index (into ``PATTERNS``) for each map from its v, d, b features (the documented rule)."""
    kind = np.full(v.shape, 4)
    kind[b >= 0.5] = 3
    kind[(v >= 0.2) & (d >= 0.2) & (v + d >= 0.6)] = 2
    kind[(d >= 0.5) & (v < 0.2)] = 1
    kind[(v >= 0.5) & (d < 0.2)] = 0
    return kind


def map_features(att: torch.Tensor, mask: torch.Tensor, special: torch.Tensor,
                 segments: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """v, d, b and entropy per map, averaged over plain query rows: ``att`` is [layers, batch, heads, T, T]; the
    rest are [batch, T]."""
    valid = mask.bool()
    t = att.shape[-1]
    pos = torch.arange(t)
    near = ((pos.view(-1, 1) - pos.view(1, -1)).abs() <= 1)  # [T, T]
    same_seg = segments.unsqueeze(-1) == segments.unsqueeze(-2)  # [batch, T, T]
    col_special = special & valid
    col_plain = valid & ~special
    v_cols = col_special.unsqueeze(1).float()  # [batch, 1, T]
    d_cells = (near.unsqueeze(0) & col_plain.unsqueeze(1)).float()  # [batch, T, T]
    b_cells = (same_seg & ~near.unsqueeze(0) & col_plain.unsqueeze(1)).float()
    rows = col_plain.float()  # query rows that count: the plain tokens ([CLS]/[SEP] rows are left out)
    n = rows.sum(-1).clamp(min=1)

    def row_mean(mass: torch.Tensor) -> torch.Tensor:  # mass [L, B, H, T] -> [L, B, H]
        return (mass * rows.view(1, -1, 1, t)).sum(-1) / n.view(1, -1, 1)

    v = row_mean((att * v_cols.unsqueeze(0).unsqueeze(2)).sum(-1))
    d = row_mean((att * d_cells.unsqueeze(0).unsqueeze(2)).sum(-1))
    b = row_mean((att * b_cells.unsqueeze(0).unsqueeze(2)).sum(-1))
    ent = row_mean(-(att * att.clamp(min=1e-12).log()).sum(-1))
    return v, d, b, ent


def attention_stats(model, enc: Encoded, pad_id: int, special_ids: set[int], batch_size: int = 64) -> AttentionStats:
    """Entropy, pattern features and pattern counts per head over every example of ``enc``."""
    ent_sum = feat_sum = counts = None
    total = 0
    for idx in progress(eval_batches(enc.lengths, batch_size), desc="attention"):
        batch = collate(enc, idx, pad_id, pad_to=1)
        att = attentions(model, batch)
        segments = batch.get("token_type_ids", torch.zeros_like(batch["input_ids"]))
        v, d, b, ent = map_features(att, batch["attention_mask"], special_mask(batch["input_ids"], special_ids),
                                    segments)
        kinds = classify(v.numpy(), d.numpy(), b.numpy())  # [L, B, H]
        onehot = np.eye(len(PATTERNS))[kinds].sum(1)  # [L, H, 5]
        feats = torch.stack([v, d, b], -1).sum(1).numpy()
        ent_sum = ent.sum(1).numpy() + (0 if ent_sum is None else ent_sum)
        feat_sum = feats + (0 if feat_sum is None else feat_sum)
        counts = onehot + (0 if counts is None else counts)
        total += len(idx)
    if not total:
        raise PtmlabError("no examples to analyse: check --max-eval and the task data")
    return AttentionStats(ent_sum / total, counts, feat_sum / total)


def example_maps(model, tokenizer, texts: list[str], max_length: int = 64) -> list[tuple[list[str], np.ndarray]]:
    """(tokens, attention [layers, heads, T, T]) for each text, for plotting."""
    out = []
    for text in texts:
        batch = tokenizer([text], return_tensors="pt", truncation=True, max_length=max_length)
        att = attentions(model, dict(batch))[:, 0].numpy()
        out.append((tokenizer.convert_ids_to_tokens(batch["input_ids"][0].tolist()), att))
    return out
