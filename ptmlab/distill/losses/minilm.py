"""``minilm`` (MiniLM deep self-attention distillation): on the last layers, KL between teacher and student
query-key attention relations and value-value relations. Both are computed with the same number of relation
heads (``--relation-heads``) on each side, so the models may differ in heads and width."""

from __future__ import annotations

import torch

from ptmlab.distill.losses import LOSSES, KDLoss, LossContext
from ptmlab.distill.losses.attention import row_kl


def relation_kl(student: torch.Tensor, teacher: torch.Tensor, ctx: LossContext) -> torch.Tensor:
    return row_kl(student, teacher, ctx.mask)


LOSSES.add("minilm", KDLoss(relation_kl, ("qk_relation", "vv_relation")),
           "MiniLM attention (q-k) and value (v-v) relation KL on the last layer, via relation heads")
