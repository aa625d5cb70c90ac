"""Masked language modelling: BERT's token masking (``mlm``) and whole-word masking (``wwm``).

``mlm``: Devlin et al. 2019 (BERT), 15% of the tokens, 80% [MASK] / 10% random / 10% unchanged; with
``masking="dynamic"`` a block gets a new mask every epoch (Liu et al. 2019, RoBERTa §4.1), with ``"static"``
the same mask in every epoch (BERT's fixed, pre-computed masks).
``wwm``: whole-word masking (BERT's 2019 release; Cui et al. 2019): whole words are picked until 15% of the
tokens are covered, every piece of a picked word is predicted; the 80/10/10 replacement stays per token.
"""

from __future__ import annotations

import numpy as np
import torch

from ptmlab.core.errors import PtmlabError
from ptmlab.pretrain.objectives.base import OBJECTIVES, Objective, PretrainModel, stack
from ptmlab.pretrain.objectives.heads import masked_lm_loss
from ptmlab.pretrain.objectives.masking import budget, choose_positions, replace_80_10_10, with_specials, word_ids


class MaskedLM(Objective):
    name = "mlm"
    arch_kind = "encoder"
    head = "mlm"
    default_arch = "bert"
    needs_mask = True

    def __init__(self, tokenizer, mask_prob: float = 0.15, masking: str = "dynamic"):
        super().__init__(tokenizer, masking)
        if not 0 < mask_prob < 1:
            raise PtmlabError(f"--mask-prob must be in (0, 1), got {mask_prob}")
        self.mask_prob = mask_prob

    def select(self, rng: np.random.Generator, ids: np.ndarray, cand: np.ndarray) -> np.ndarray:
        return choose_positions(rng, cand, self.mask_prob)

    def corrupt(self, block: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        ids, cand = with_specials(block, self.tok)
        return replace_80_10_10(rng, ids, self.select(rng, ids, cand), self.tok)

    def make_batch(self, blocks, rngs, *, source=None, indices=None) -> dict[str, torch.Tensor]:
        pairs = [self.corrupt(b, r) for b, r in zip(blocks, rngs, strict=True)]
        return {"input_ids": stack([p[0] for p in pairs]), "labels": stack([p[1] for p in pairs])}

    def forward(self, pm: PretrainModel, batch: dict) -> torch.Tensor:
        return masked_lm_loss(pm.model, batch)[0]


OBJECTIVES.add("mlm", MaskedLM, "BERT masked LM: 15% of tokens, 80/10/10, static or dynamic (RoBERTa) masking")


class WholeWordMask(MaskedLM):
    name = "wwm"

    def select(self, rng: np.random.Generator, ids: np.ndarray, cand: np.ndarray) -> np.ndarray:
        words = word_ids(ids, self.tok)
        k = budget(int(cand.sum()), self.mask_prob)
        sizes = np.bincount(words)
        cand_words = np.unique(words[cand])
        chosen, total = [], 0
        for w in rng.permutation(cand_words):  # Google's rule: skip a word that would overshoot the budget
            s = sizes[w]
            if total + s > k:
                continue
            chosen.append(w)
            total += s
            if total == k:
                break
        return np.flatnonzero(np.isin(words, chosen) & cand)


OBJECTIVES.add("wwm", WholeWordMask, "whole-word masking: every piece of a picked word is predicted (15% budget)")
