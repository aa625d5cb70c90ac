"""SpanBERT span masking (Joshi et al. 2020, "SpanBERT", §3.1-3.2).

Span lengths are drawn in *words* from a geometric distribution with p = 0.2 truncated at 10 words (and
renormalised, mean 3.8 words); a span starts at a uniformly drawn word and covers whole words; spans are added
until 15% of the tokens are masked (the last one cut at the budget), and the 80/10/10 replacement is decided
once per span, not per token. The optional span-boundary objective (SBO, ``sbo=True``) predicts every token of
a span from the encoder states just outside the span and the token's position inside it, through a 2-layer
feed-forward network with GeLU and LayerNorm, then the model's output embeddings; its loss adds to the MLM's.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ptmlab.core.errors import PtmlabError
from ptmlab.pretrain.objectives.base import OBJECTIVES, PretrainModel, per_example_mean, stack
from ptmlab.pretrain.objectives.heads import encoder_and_head, encoder_inputs, masked_positions_ce
from ptmlab.pretrain.objectives.masking import budget, replace_80_10_10, with_specials, word_ids
from ptmlab.pretrain.objectives.mlm import MaskedLM

MAX_SPAN_POSITION = 256  # positions inside a span the boundary head can tell apart (longer spans share the last)


def span_length_probs(p: float, max_len: int) -> np.ndarray:
    """P(length = 1..max_len) of a geometric distribution with success rate p, truncated and renormalised."""
    w = p * (1 - p) ** np.arange(max_len)
    return w / w.sum()


def mean_span_length(p: float, max_len: int) -> float:
    return float((np.arange(1, max_len + 1) * span_length_probs(p, max_len)).sum())


class SpanBoundaryHead(nn.Module):
    """f(x_{s-1}, x_{e+1}, p_i): SpanBERT's boundary representation of a token inside span [s, e]."""

    def __init__(self, hidden: int, eps: float = 1e-12):
        super().__init__()
        self.position = nn.Embedding(MAX_SPAN_POSITION, hidden)
        self.mlp = nn.Sequential(nn.Linear(3 * hidden, hidden), nn.GELU(), nn.LayerNorm(hidden, eps=eps),
                                 nn.Linear(hidden, hidden), nn.GELU(), nn.LayerNorm(hidden, eps=eps))

    def forward(self, hidden: torch.Tensor, rows: torch.Tensor, left: torch.Tensor, right: torch.Tensor,
                rel: torch.Tensor) -> torch.Tensor:
        x = torch.cat([hidden[rows, left], hidden[rows, right], self.position(rel.clamp_max(MAX_SPAN_POSITION - 1))],
                      dim=-1)
        return self.mlp(x)


class SpanMask(MaskedLM):
    name = "span"

    def __init__(self, tokenizer, mask_prob: float = 0.15, masking: str = "dynamic", geometric_p: float = 0.2,
                 max_span: int = 10, sbo: bool = False):
        super().__init__(tokenizer, mask_prob, masking)
        if not 0 < geometric_p <= 1:
            raise PtmlabError(f"--geometric-p must be in (0, 1], got {geometric_p}")
        if max_span < 1:
            raise PtmlabError(f"--max-span must be at least 1, got {max_span}")
        self.lengths = np.arange(1, max_span + 1)
        self.probs = span_length_probs(geometric_p, max_span)
        self.sbo = sbo

    def sample_lengths(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.choice(self.lengths, size=n, p=self.probs)

    def spans(self, rng: np.random.Generator, ids: np.ndarray, cand: np.ndarray) -> list[tuple[int, int]]:
        """Inclusive token ranges [s, e] of the spans masked in one sequence."""
        words = word_ids(ids, self.tok)
        first = np.searchsorted(words, np.arange(words[-1] + 2))  # first position of each word (+ end)
        cand_words = np.unique(words[cand])
        k = budget(int(cand.sum()), self.mask_prob)
        masked = np.zeros(len(ids), dtype=bool)
        out: list[tuple[int, int]] = []
        count, tries = 0, 0
        draws = 2 * k + 8  # lengths and anchors drawn in bulk (numpy's per-call cost dominates one draw)
        lengths = anchors = np.zeros(0, np.int64)
        while count < k and tries < 20 * k + 20:
            if tries % draws == 0:
                lengths = self.sample_lengths(rng, draws)
                anchors = rng.integers(len(cand_words), size=draws)
            length, a = int(lengths[tries % draws]), int(anchors[tries % draws])
            tries += 1
            run = cand_words[a:a + length]
            run = run[:int(np.argmin(np.diff(np.append(run, -1)) == 1)) + 1]  # stop at a gap (a special token)
            s, e = int(first[run[0]]), int(first[run[-1] + 1]) - 1
            if masked[s:e + 1].any():
                continue
            e = min(e, s + (k - count) - 1)
            masked[s:e + 1] = True
            count += e - s + 1
            out.append((s, e))
        return sorted(out)

    def corrupt_spans(self, block: np.ndarray, rng: np.random.Generator):
        ids, cand = with_specials(block, self.tok)
        spans = self.spans(rng, ids, cand)
        if spans:
            positions = np.concatenate([np.arange(s, e + 1) for s, e in spans])
            units = np.concatenate([np.full(e - s + 1, i) for i, (s, e) in enumerate(spans)])
        else:
            positions = units = np.zeros(0, dtype=np.int64)
        inputs, labels = replace_80_10_10(rng, ids, positions, self.tok, units=units)
        left = np.zeros(len(ids), np.int64)
        right = np.zeros(len(ids), np.int64)
        rel = np.zeros(len(ids), np.int64)
        for s, e in spans:
            left[s:e + 1] = max(s - 1, 0)
            right[s:e + 1] = min(e + 1, len(ids) - 1)
            rel[s:e + 1] = np.arange(e - s + 1)
        return inputs, labels, left, right, rel

    def make_batch(self, blocks, rngs, *, source=None, indices=None) -> dict[str, torch.Tensor]:
        rows = [self.corrupt_spans(b, r) for b, r in zip(blocks, rngs, strict=True)]
        batch = {"input_ids": stack([r[0] for r in rows]), "labels": stack([r[1] for r in rows])}
        if self.sbo:
            batch.update(span_left=stack([r[2] for r in rows]), span_right=stack([r[3] for r in rows]),
                         span_rel=stack([r[4] for r in rows]))
        return batch

    def wrap(self, model: nn.Module) -> PretrainModel:
        if not self.sbo:
            return PretrainModel(model, self)
        eps = getattr(model.config, "layer_norm_eps", 1e-12)
        return PretrainModel(model, self, boundary=SpanBoundaryHead(model.config.hidden_size, eps))

    def forward(self, pm: PretrainModel, batch: dict) -> torch.Tensor:
        if not self.sbo:
            return super().forward(pm, batch)
        model = pm.model
        parts = encoder_and_head(model)
        if parts is None:
            raise PtmlabError(f"the span-boundary objective needs a BERT, RoBERTa or ELECTRA masked LM, not "
                              f"{type(model).__name__}: drop --sbo")
        encoder, head = parts
        hidden = encoder(**encoder_inputs(model, batch)).last_hidden_state
        labels = batch["labels"]
        mlm = masked_positions_ce(head, hidden, labels)
        sel = labels != -100
        rows = sel.nonzero()[:, 0]
        rep = pm.boundary(hidden, rows, batch["span_left"][sel], batch["span_right"][sel], batch["span_rel"][sel])
        logits = model.get_output_embeddings()(rep).float()
        sbo = per_example_mean(F.cross_entropy(logits, labels[sel], reduction="none"), rows, labels.shape[0])
        return mlm + sbo


OBJECTIVES.add("span", SpanMask, "SpanBERT: whole-word spans, geometric lengths (p=0.2, max 10), optional SBO")
