"""``pkd`` (Patient-KD): squared distance between L2-normalised [CLS] states of mapped intermediate layers
(PKD-skip and PKD-last are the ``skip`` and ``last`` layer maps)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ptmlab.distill.losses import LOSSES, KDLoss, LossContext


def pkd(student: torch.Tensor, teacher: torch.Tensor, ctx: LossContext) -> torch.Tensor:
    s = F.normalize(student.float(), dim=-1)
    t = F.normalize(teacher.float(), dim=-1)
    return ((s - t) ** 2).sum(-1)


LOSSES.add("pkd", KDLoss(pkd, ("cls",), projectable=True), "Patient-KD: normalised [CLS] states of intermediate layers")
