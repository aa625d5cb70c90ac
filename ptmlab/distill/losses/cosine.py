"""``cosine`` (DistilBERT's L_cos): 1 - cos(student state, teacher state) per token, averaged over real tokens."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ptmlab.distill.losses import LOSSES, KDLoss, LossContext, masked_mean


def cosine(student: torch.Tensor, teacher: torch.Tensor, ctx: LossContext) -> torch.Tensor:
    return masked_mean(1 - F.cosine_similarity(student.float(), teacher.float(), dim=-1), ctx.mask)


LOSSES.add("cosine", KDLoss(cosine, ("hidden",), projectable=True), "DistilBERT cosine alignment of hidden states")
