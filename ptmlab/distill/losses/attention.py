"""``attention_mse`` and ``attention_kl`` (TinyBERT): compare attention distributions of mapped layers, head by
head, over real query and key tokens. Both need the same number of heads in student and teacher."""

from __future__ import annotations

import torch

from ptmlab.distill.losses import LOSSES, KDLoss, LossContext

EPS = 1e-12


def _pair_mask(mask: torch.Tensor) -> torch.Tensor:
    m = mask.float()
    return m[:, None, :, None] * m[:, None, None, :]  # [B, 1, T, T]


def attention_mse(student: torch.Tensor, teacher: torch.Tensor, ctx: LossContext) -> torch.Tensor:
    pm = _pair_mask(ctx.mask)
    sq = (student.float() - teacher.float()) ** 2 * pm
    heads = student.shape[1]
    return sq.sum((1, 2, 3)) / (pm.sum((1, 2, 3)) * heads).clamp_min(1)


def row_kl(student: torch.Tensor, teacher: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """KL(teacher row || student row), averaged over heads and real query rows: [B]."""
    t, s = teacher.float(), student.float()
    kl = (t * (torch.log(t + EPS) - torch.log(s + EPS))).sum(-1)  # [B, heads, T]
    rows = mask.float()[:, None, :]
    return (kl * rows).sum((1, 2)) / (rows.sum((1, 2)) * kl.shape[1]).clamp_min(1)


def attention_kl(student: torch.Tensor, teacher: torch.Tensor, ctx: LossContext) -> torch.Tensor:
    return row_kl(student, teacher, ctx.mask)


LOSSES.add("attention_mse", KDLoss(attention_mse, ("attention",), same_heads=True),
           "TinyBERT attention-map MSE (needs equal head counts)")
LOSSES.add("attention_kl", KDLoss(attention_kl, ("attention",), same_heads=True),
           "KL between attention distributions (needs equal head counts)")
