"""Sentence-pair objectives trained alongside MLM on a BertForPreTraining model.

``nsp``: next-sentence prediction (Devlin et al. 2019, BERT §3.1 task #2): half the time segment B follows A in
the text (label 0), half the time B comes from another, random block (label 1).
``sop``: sentence-order prediction (Lan et al. 2020, ALBERT §4.2): A and B are always consecutive, and half the
time they are swapped (label 1); topic cues cannot solve it, only coherence.
A block is cut at a random point into A and B and laid out as ``[CLS] A [SEP] B [SEP]`` with token types 0 / 1;
15% of A and B are masked with 80/10/10 as in ``mlm``. The loss is the MLM loss plus the pair loss.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from ptmlab.core.errors import PtmlabError
from ptmlab.pretrain.objectives.base import OBJECTIVES, PretrainModel, stack
from ptmlab.pretrain.objectives.heads import masked_positions_ce
from ptmlab.pretrain.objectives.masking import choose_positions, replace_80_10_10
from ptmlab.pretrain.objectives.mlm import MaskedLM


class SentencePair(MaskedLM):
    name = "nsp"
    head = "pretraining"
    swap = False  # sop: swap A and B; nsp: replace B

    def content_length(self, block_size: int) -> int:
        return block_size - 3

    def check(self, tokenizer=None, model_config=None) -> None:
        super().check(tokenizer, model_config)
        if self.tok.cls_id is None or self.tok.sep_id is None:
            raise PtmlabError(f"objective {self.name} lays out [CLS] A [SEP] B [SEP], but the tokenizer lacks a "
                              f"CLS or SEP token: use a BERT-style tokenizer")

    def pair(self, block: np.ndarray, rng: np.random.Generator, source, index: int | None):
        """(A, B, label) from one block."""
        n = len(block)
        cut = int(rng.integers(1, n))
        a, b = block[:cut], block[cut:]
        flip = bool(rng.random() < 0.5)
        if flip and self.swap:
            a, b = b, a
        elif flip:
            other = block if source is None or len(source) < 2 else source[self._other(rng, source, index)]
            start = int(rng.integers(0, len(other) - len(b) + 1))
            b = other[start:start + len(b)]
        return a, b, int(flip)

    @staticmethod
    def _other(rng: np.random.Generator, source, index: int | None) -> int:
        if index is None:
            return int(rng.integers(len(source)))
        return (index + 1 + int(rng.integers(len(source) - 1))) % len(source)

    def make_batch(self, blocks, rngs, *, source=None, indices=None) -> dict[str, torch.Tensor]:
        cls, sep = self.tok.cls_id, self.tok.sep_id
        inputs, labels, types, pair_labels = [], [], [], []
        for i, (block, rng) in enumerate(zip(blocks, rngs, strict=True)):
            a, b, y = self.pair(block, rng, source, None if indices is None else int(indices[i]))
            ids = np.concatenate([[cls], a, [sep], b, [sep]]).astype(np.int64)
            cand = ~self.tok.special[ids]
            inp, lab = replace_80_10_10(rng, ids, choose_positions(rng, cand, self.mask_prob), self.tok)
            inputs.append(inp)
            labels.append(lab)
            types.append(np.concatenate([np.zeros(len(a) + 2, np.int64), np.ones(len(b) + 1, np.int64)]))
            pair_labels.append(y)
        return {"input_ids": stack(inputs), "labels": stack(labels), "token_type_ids": stack(types),
                "next_sentence_label": torch.tensor(pair_labels, dtype=torch.long)}

    def forward(self, pm: PretrainModel, batch: dict) -> torch.Tensor:
        model = pm.model
        if type(model).__name__ != "BertForPreTraining":
            raise PtmlabError(f"objective {self.name} needs a BertForPreTraining model, not {type(model).__name__}")
        out = model.bert(input_ids=batch["input_ids"], token_type_ids=batch["token_type_ids"])
        mlm = masked_positions_ce(model.cls.predictions, out.last_hidden_state, batch["labels"])
        pair = F.cross_entropy(model.cls.seq_relationship(out.pooler_output).float(), batch["next_sentence_label"],
                               reduction="none")
        return mlm + pair


OBJECTIVES.add("nsp", SentencePair, "BERT next-sentence prediction + MLM (B from a random block half the time)")


class SentenceOrder(SentencePair):
    name = "sop"
    swap = True


OBJECTIVES.add("sop", SentenceOrder, "ALBERT sentence-order prediction + MLM (A and B swapped half the time)")
