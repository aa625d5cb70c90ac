"""ELECTRA replaced-token detection (Clark et al. 2020, "ELECTRA", §2 and §3.2).

A small generator (a masked LM ``generator_fraction`` of the discriminator's width, 1/4 in the paper) fills 15%
masked positions with tokens sampled from its softmax; the discriminator labels every token original (0) or
replaced (1). A sampled token equal to the original counts as original. The generator and discriminator share
the token and position embeddings (the whole embedding block, as the released code does); the loss is the
generator's MLM loss plus 50 times the discriminator's mean binary cross-entropy. The discriminator is the model
kept; the generator is trained alongside inside the wrapped module and dropped at the end.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ptmlab.core.errors import PtmlabError
from ptmlab.pretrain.objectives.base import OBJECTIVES, Objective, PretrainModel, per_example_mean, stack
from ptmlab.pretrain.objectives.masking import choose_positions, with_specials


def build_generator(discriminator: nn.Module, fraction: float) -> nn.Module:
    """An ElectraForMaskedLM ``fraction`` as wide as the discriminator, sharing its embeddings."""
    from transformers import ElectraConfig, ElectraForMaskedLM

    cfg = discriminator.config
    hidden = max(1, int(round(cfg.hidden_size * fraction)))
    heads = max(1, hidden // 64) if hidden >= 64 else 1
    hidden = max(heads, hidden // heads * heads)
    gcfg = ElectraConfig(**{**cfg.to_dict(), "hidden_size": hidden, "num_attention_heads": heads,
                            "intermediate_size": max(1, int(round(cfg.intermediate_size * fraction))),
                            "architectures": ["ElectraForMaskedLM"]})
    gen = ElectraForMaskedLM._from_config(gcfg, attn_implementation=getattr(cfg, "_attn_implementation", None))
    gen.electra.embeddings = discriminator.electra.embeddings
    gen.generator_lm_head.weight = discriminator.electra.embeddings.word_embeddings.weight
    return gen


class ReplacedTokenDetection(Objective):
    name = "electra"
    arch_kind = "encoder"
    head = "rtd"
    default_arch = "electra"
    needs_mask = True

    def __init__(self, tokenizer, mask_prob: float = 0.15, generator_fraction: float = 0.25,
                 disc_weight: float = 50.0, masking: str = "dynamic"):
        super().__init__(tokenizer, masking)
        if not 0 < mask_prob < 1:
            raise PtmlabError(f"--mask-prob must be in (0, 1), got {mask_prob}")
        if not 0 < generator_fraction <= 1:
            raise PtmlabError(f"--generator-fraction must be in (0, 1], got {generator_fraction}")
        self.mask_prob = mask_prob
        self.generator_fraction = generator_fraction
        self.disc_weight = disc_weight

    def make_batch(self, blocks, rngs, *, source=None, indices=None) -> dict[str, torch.Tensor]:
        inputs, labels = [], []
        for b, r in zip(blocks, rngs, strict=True):
            ids, cand = with_specials(b, self.tok)
            pos = choose_positions(r, cand, self.mask_prob)
            lab = np.full(len(ids), -100, np.int64)
            lab[pos] = ids[pos]
            x = ids.copy()
            x[pos] = self.tok.mask_id
            inputs.append(x)
            labels.append(lab)
        return {"input_ids": stack(inputs), "labels": stack(labels)}

    def wrap(self, model: nn.Module) -> PretrainModel:
        if type(model).__name__ != "ElectraForPreTraining":
            raise PtmlabError(f"objective electra trains an ElectraForPreTraining discriminator, not "
                              f"{type(model).__name__}: use --arch electra")
        return PretrainModel(model, self, generator=build_generator(model, self.generator_fraction))

    @staticmethod
    def replace(input_ids: torch.Tensor, labels: torch.Tensor,
                samples: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(corrupted ids, discriminator labels): masked positions take the samples; a label is 1 exactly where
        the corrupted token differs from the original."""
        sel = labels != -100
        original = torch.where(sel, labels, input_ids)
        corrupted = original.clone()
        corrupted[sel] = samples
        return corrupted, (corrupted != original).float()

    def forward(self, pm: PretrainModel, batch: dict) -> torch.Tensor:
        gen, disc = pm.generator, pm.model
        input_ids, labels = batch["input_ids"], batch["labels"]
        hidden = gen.electra(input_ids=input_ids).last_hidden_state
        sel = labels != -100
        rows = sel.nonzero()[:, 0]
        logits = gen.generator_lm_head(gen.generator_predictions(hidden[sel])).float()
        gen_loss = per_example_mean(F.cross_entropy(logits, labels[sel], reduction="none"), rows, len(labels))
        with torch.no_grad():
            samples = torch.multinomial(torch.softmax(logits.detach(), -1), 1).squeeze(-1)
        corrupted, is_replaced = self.replace(input_ids, labels, samples)
        disc_logits = disc(input_ids=corrupted).logits.float()
        bce = F.binary_cross_entropy_with_logits(disc_logits, is_replaced, reduction="none").mean(-1)
        return gen_loss + self.disc_weight * bce


OBJECTIVES.add("electra", ReplacedTokenDetection, "ELECTRA replaced-token detection: generator (1/4 width, shared "
                                                  "embeddings) + 50 x discriminator loss")
