"""Features read with forward hooks addressed through the structure map (no model class is rewritten).

Raw hooks record the embedding output, each layer's output and the outputs of its query/key/value projections;
``feature`` turns them into what a loss compares, per example and padded to the batch:

    logits [B, C] (per token [B, T, C]; span extractors [B, T, 2], start and end)
    embeddings / hidden [B, T, H]   cls [B, H]   attention [B, heads, T, T]
    qk_relation / vv_relation [B, R, T, T]   (MiniLM: R relation heads, any width)

Attention probabilities are recomputed as softmax(q k^T / sqrt(d) + mask) from the projections, which is what
eager BERT-style attention computes before dropout, so it works under the default ``sdpa`` attention too.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ptmlab.core.errors import PtmlabError
from ptmlab.models.structure import structure_of

FEATURES = ("logits", "embeddings", "hidden", "cls", "attention", "qk_relation", "vv_relation")
_RAW_FOR = {"embeddings": ("embeddings",), "hidden": ("out",), "cls": ("out",), "attention": ("q", "k"),
            "qk_relation": ("q", "k"), "vv_relation": ("v",)}


def output_logits(out) -> torch.Tensor:
    """A model output's logits: [B, C] per sentence, [B, T, C] per token, or [B, T, 2] for a span extractor (its
    start and end logits over the positions, stacked on the last axis)."""
    logits = getattr(out, "logits", None)
    if logits is not None:
        return logits
    return torch.stack([out.start_logits, out.end_logits], -1)


def layered(feature: str) -> bool:
    """Whether a feature belongs to one transformer layer (embeddings and logits do not)."""
    return feature not in ("logits", "embeddings")


class FeatureTap:
    """Hooks on a transformer that record the raw tensors ``needs`` asks for, while ``recording`` is on."""

    def __init__(self, model: nn.Module, needs: set[tuple[str, int]], who: str = "model"):
        self.model = model
        self.records: dict[tuple[str, int], torch.Tensor] = {}
        self.recording = False
        self._handles = []
        if not needs:
            return
        if getattr(model.config, "ptmlab_rnn", None):
            raise PtmlabError(f"the {who} is a {model.config.ptmlab_rnn} (no layers, attention or embeddings to "
                              f"match): distill it with --losses soft_ce")
        s = structure_of(model)
        self.num_layers = s.num_layers(model)
        self.num_heads = getattr(model.config, "num_attention_heads", getattr(model.config, "n_heads", None))
        self.hidden = getattr(model.config, "hidden_size", getattr(model.config, "dim", None))
        raw = {(r, layer) for f, layer in needs for r in _RAW_FOR.get(f, ())}
        for r, layer in sorted(raw):
            if r == "embeddings":
                mod = s.embedding_module(model)
            elif r == "out":
                mod = s.layer(model, layer)
            else:
                mod = s.part(model, layer, {"q": "query", "k": "key", "v": "value"}[r])
            self._handles.append(mod.register_forward_hook(self._hook((r, layer))))

    def _hook(self, key):
        def hook(module, args, output):
            if self.recording:
                self.records[key] = output[0] if isinstance(output, tuple) else output

        return hook

    def run(self, model: nn.Module, inputs: dict):
        """One forward pass with recording on; returns the model output."""
        self.records = {}
        self.recording = True
        try:
            return model(**inputs)
        finally:
            self.recording = False

    def feature(self, name: str, layer: int, mask: torch.Tensor, relation_heads: int | None = None) -> torch.Tensor:
        """A recorded feature (see the module docstring for shapes)."""
        if name == "embeddings":
            return self.records[("embeddings", -1)]
        if name == "hidden":
            return self.records[("out", layer)]
        if name == "cls":
            return self.records[("out", layer)][:, 0]
        if name == "attention":
            return relation(self.records[("q", layer)], self.records[("k", layer)], self.num_heads, mask)
        heads = relation_heads or self.num_heads
        if name == "qk_relation":
            return relation(self.records[("q", layer)], self.records[("k", layer)], heads, mask)
        if name == "vv_relation":
            v = self.records[("v", layer)]
            return relation(v, v, heads, mask)
        raise PtmlabError(f"unknown feature '{name}': choose from {', '.join(FEATURES)}")

    def remove(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []


def relation(a: torch.Tensor, b: torch.Tensor, heads: int, mask: torch.Tensor) -> torch.Tensor:
    """softmax(a_h b_h^T / sqrt(d_h)) per head h over non-padding keys: [B, heads, T, T]."""
    bsz, t, width = a.shape
    if width % heads:
        raise PtmlabError(f"width {width} is not divisible by {heads} relation heads: choose --relation-heads "
                          f"dividing both models' hidden sizes")
    d = width // heads
    ah = a.view(bsz, t, heads, d).transpose(1, 2)
    bh = b.view(bsz, t, heads, d).transpose(1, 2)
    scores = ah.float() @ bh.float().transpose(-1, -2) / math.sqrt(d)
    scores = scores.masked_fill(mask[:, None, None, :] == 0, torch.finfo(scores.dtype).min)
    return scores.softmax(-1)
