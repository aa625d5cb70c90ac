"""``hidden_mse`` and ``embedding_mse`` (TinyBERT): MSE between (projected) student and teacher states, averaged
over the hidden dimension and the real tokens of each example."""

from __future__ import annotations

import torch

from ptmlab.distill.losses import LOSSES, KDLoss, LossContext, masked_mean


def state_mse(student: torch.Tensor, teacher: torch.Tensor, ctx: LossContext) -> torch.Tensor:
    per_token = ((student.float() - teacher.float()) ** 2).mean(-1)
    return masked_mean(per_token, ctx.mask)


LOSSES.add("hidden_mse", KDLoss(state_mse, ("hidden", "embeddings"), projectable=True),
           "TinyBERT hidden-state MSE (learned projection when widths differ)")
LOSSES.add("embedding_mse", KDLoss(state_mse, ("embeddings",), projectable=True),
           "TinyBERT embedding-layer MSE (learned projection when widths differ)")
