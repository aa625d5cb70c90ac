"""XLNet permutation language modelling (Yang et al. 2019, "XLNet", §2.2-2.3), on transformers' XLNetLMHeadModel.

Partial prediction: about 1/K of the tokens (K = 6 in the paper) are targets, chosen as n-gram spans
(n in 1..5, P(n) ∝ 1/n, each span placed at random inside a stretch of K·n tokens, as XLNet's data pipeline
does). A factorisation order is drawn per example: all non-target tokens first (they see each other), then the
targets in a random order. ``perm_mask[i, j] = 1`` forbids i to attend to j: a token sees only tokens earlier in
the order, so a target never sees itself or a later target, and no context token sees any target. The model's
query stream predicts each target through ``target_mapping``.
"""

from __future__ import annotations

import numpy as np
import torch

from ptmlab.core.errors import PtmlabError
from ptmlab.pretrain.objectives.base import OBJECTIVES, Objective, PretrainModel, stack, token_ce


class PermutationLM(Objective):
    name = "plm"
    arch_kind = "permutation"
    head = "plm"
    default_arch = "xlnet"

    def __init__(self, tokenizer, plm_k: float = 6.0, max_span: int = 5, masking: str = "dynamic"):
        super().__init__(tokenizer, masking)
        if plm_k <= 1:
            raise PtmlabError(f"--plm-k must be above 1 (1/K of the tokens are predicted), got {plm_k}")
        if max_span < 1:
            raise PtmlabError(f"--max-span must be at least 1, got {max_span}")
        self.k = plm_k
        self.spans = np.arange(1, max_span + 1)
        self.span_p = (1 / self.spans) / (1 / self.spans).sum()

    def content_length(self, block_size: int) -> int:
        return block_size

    def targets(self, rng: np.random.Generator, n: int, candidates: np.ndarray) -> np.ndarray:
        """Bool [n]: the positions to predict."""
        t = np.zeros(n, dtype=bool)
        draws = n // max(2, int(round(self.k))) + 1  # enough stretches to cover n (each is that long at least)
        spans = rng.choice(self.spans, size=draws, p=self.span_p)
        offsets = rng.random(draws)
        cur = 0
        for span, u in zip(spans.tolist(), offsets.tolist(), strict=True):
            if cur >= n:
                break
            ctx = max(span + 1, int(round(span * self.k)))
            start = cur + int(u * (ctx - span + 1))
            t[start:min(start + span, n)] = True
            cur += ctx
        t &= candidates
        if not t.any() and candidates.any():
            t[rng.choice(np.flatnonzero(candidates))] = True
        return t

    @staticmethod
    def perm_mask(rng: np.random.Generator, is_target: np.ndarray) -> np.ndarray:
        """Float [n, n]: 1 where position i may not attend to position j."""
        rank = np.zeros(len(is_target), dtype=np.int64)
        tgt = np.flatnonzero(is_target)
        rank[tgt] = rng.permutation(len(tgt)) + 1
        sees = (rank[None, :] < rank[:, None]) | ((rank[:, None] == 0) & (rank[None, :] == 0))
        return (~sees).astype(np.float32)

    def make_batch(self, blocks, rngs, *, source=None, indices=None) -> dict[str, torch.Tensor]:
        n = len(blocks[0])
        masks, tgts = [], []
        for b, r in zip(blocks, rngs, strict=True):
            t = self.targets(r, n, ~self.tok.special[b])
            tgts.append(np.flatnonzero(t))
            masks.append(self.perm_mask(r, t))
        p = max(len(t) for t in tgts)
        mapping = np.zeros((len(blocks), p, n), np.float32)
        labels = np.full((len(blocks), p), -100, np.int64)
        for i, (b, t) in enumerate(zip(blocks, tgts, strict=True)):
            mapping[i, np.arange(len(t)), t] = 1.0
            labels[i, :len(t)] = b[t]
        ids = stack(blocks)
        return {"input_ids": ids, "token_type_ids": torch.zeros_like(ids),
                "perm_mask": torch.from_numpy(np.stack(masks)), "target_mapping": torch.from_numpy(mapping),
                "labels": torch.from_numpy(labels)}

    def forward(self, pm: PretrainModel, batch: dict) -> torch.Tensor:
        dtype = next(pm.model.parameters()).dtype
        # one segment: token types all 0 (they still pass through the segment terms, so DDP sees every parameter)
        out = pm.model(input_ids=batch["input_ids"], token_type_ids=batch["token_type_ids"],
                       perm_mask=batch["perm_mask"].to(dtype),
                       target_mapping=batch["target_mapping"].to(dtype), use_mems=False)
        return token_ce(out.logits, batch["labels"])


OBJECTIVES.add("plm", PermutationLM, "XLNet permutation LM (two-stream attention, 1/6 of tokens predicted)")
