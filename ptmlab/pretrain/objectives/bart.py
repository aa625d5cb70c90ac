"""BART denoising (Lewis et al. 2020, "BART", §2.2): corrupt the input, reconstruct the original text.

The corruptions, applied in this order when several are chosen (``corruptions=[...]``):
- ``permute``: sentence permutation: the block is split after every full stop (".", "!", "?") and after each
  document separator, and the sentences are shuffled;
- ``mask``: token masking: ``mask_ratio`` of the tokens become [MASK] (as BERT, without 80/10/10);
- ``delete``: token deletion: ``mask_ratio`` of the tokens are removed, so the model must find where;
- ``infill``: text infilling: span lengths from Poisson(λ=3) are drawn until ``mask_ratio`` of the tokens are
  covered; each span (merged with any it touches) becomes one [MASK], a 0-length span inserts a [MASK];
- ``rotate``: document rotation: a token is drawn uniformly and the block rotated to start with it.
The paper's best mix is text infilling plus sentence permutation (the default, with mask ratio 0.3 of BART-large).
The encoder reads ``[start] corrupted [end]`` (padded to the block size); the decoder reproduces
``[start] original [end]``.
"""

from __future__ import annotations

import numpy as np
import torch

from ptmlab.core.errors import PtmlabError
from ptmlab.pretrain.objectives.base import OBJECTIVES, Objective, PretrainModel, stack
from ptmlab.pretrain.objectives.t5 import seq2seq_loss

CORRUPTIONS = ("permute", "mask", "delete", "infill", "rotate")


class Denoising(Objective):
    name = "bart"
    arch_kind = "seq2seq"
    head = "seq2seq"
    default_arch = "bart"

    def __init__(self, tokenizer, corruptions: list[str] | str = ("infill", "permute"), mask_ratio: float = 0.3,
                 poisson_lambda: float = 3.0, masking: str = "dynamic"):
        super().__init__(tokenizer, masking)
        if isinstance(corruptions, str):
            corruptions = [c.strip() for c in corruptions.split(",") if c.strip()]
        bad = [c for c in corruptions if c not in CORRUPTIONS]
        if bad or not corruptions:
            raise PtmlabError(f"unknown BART corruption {', '.join(bad) or '(none given)'}: choose one or more of "
                              f"{', '.join(CORRUPTIONS)}")
        if not 0 < mask_ratio < 1:
            raise PtmlabError(f"--mask-ratio must be in (0, 1), got {mask_ratio}")
        self.corruptions = [c for c in CORRUPTIONS if c in corruptions]
        self.needs_mask = "mask" in self.corruptions or "infill" in self.corruptions
        self.mask_ratio = mask_ratio
        self.poisson_lambda = poisson_lambda

    def content_length(self, block_size: int) -> int:
        return block_size - 2

    def _ends(self) -> tuple[int, int]:
        start, end = self.tok.start_id, self.tok.end_id
        return (self.tok.pad_id if start is None else start), (self.tok.doc_sep_id if end is None else end)

    # ------------------------------------------------------------------ the corruptions
    def permute(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        ends = self.tok.sentence_end[x] | (x == self.separator())
        ends[-1] = True
        bounds = np.concatenate([[0], np.flatnonzero(ends) + 1])
        order = rng.permutation(len(bounds) - 1)
        return np.concatenate([x[bounds[i]:bounds[i + 1]] for i in order])

    def mask(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        k = int(round(len(x) * self.mask_ratio))
        x = x.copy()
        x[rng.choice(len(x), size=k, replace=False)] = self.tok.mask_id
        return x

    def delete(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        k = int(round(len(x) * self.mask_ratio))
        keep = np.ones(len(x), dtype=bool)
        keep[rng.choice(len(x), size=k, replace=False)] = False
        return x[keep]

    def infill(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        n = len(x)
        target = int(round(n * self.mask_ratio))
        lengths: list[int] = []
        while sum(lengths) < target:
            lengths.extend(rng.poisson(self.poisson_lambda, size=max(4, target // 3)).tolist())
        lengths_a = np.asarray(lengths)
        lengths_a = lengths_a[:int(np.searchsorted(np.cumsum(lengths_a), target)) + 1]
        lengths_a[-1] -= lengths_a.sum() - target  # the last span is cut to hit the budget exactly
        starts = rng.choice(n, size=min(len(lengths_a), n), replace=False)
        lengths_a = lengths_a[:len(starts)]
        covered = np.zeros(n + 1, dtype=np.int64)
        np.add.at(covered, starts, 1)
        np.add.at(covered, np.minimum(starts + lengths_a, n), -1)
        noise = np.cumsum(covered)[:n] > 0
        run_start = noise & ~np.concatenate([[False], noise[:-1]])
        out = np.where(run_start, self.tok.mask_id, x)[~noise | run_start]
        inserts = np.sort(starts[lengths_a == 0])  # 0-length spans: a [MASK] before that token
        inserts = inserts[~noise[inserts]]
        if len(inserts):
            pos = np.cumsum(~noise | run_start) - 1  # index of each kept token in `out`
            out = np.insert(out, pos[inserts], self.tok.mask_id)
        return out

    def rotate(self, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return np.roll(x, -int(rng.integers(len(x))))

    def corrupt(self, block: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        x = block
        for c in self.corruptions:
            x = getattr(self, c)(x, rng)
        return x

    def make_batch(self, blocks, rngs, *, source=None, indices=None) -> dict[str, torch.Tensor]:
        start, end = self._ends()
        size = len(blocks[0]) + 2
        inputs, mask, labels = [], [], []
        for b, r in zip(blocks, rngs, strict=True):
            x = np.concatenate([[start], self.corrupt(b, r)[:size - 2], [end]])
            pad = size - len(x)
            inputs.append(np.concatenate([x, np.full(pad, self.tok.pad_id)]))
            mask.append(np.concatenate([np.ones(len(x), np.int64), np.zeros(pad, np.int64)]))
            labels.append(np.concatenate([[start], b, [end]]))
        return {"input_ids": stack(inputs), "attention_mask": stack(mask), "labels": stack(labels)}

    def forward(self, pm: PretrainModel, batch: dict) -> torch.Tensor:
        return seq2seq_loss(pm.model, batch)


OBJECTIVES.add("bart", Denoising, "BART denoising: token masking/deletion, text infilling, sentence permutation, "
                                  "document rotation (combinable)")
