"""``soft_ce`` (Hinton et al.; DistilBERT's L_ce): KL(teacher_T || student_T) * T^2, mixed with the hard-label
loss by ``alpha``; for regression, MSE to the teacher's prediction mixed with MSE to the label."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ptmlab.distill.losses import LOSSES, KDLoss, LossContext


def soft_ce(student: torch.Tensor, teacher: torch.Tensor, ctx: LossContext) -> torch.Tensor:
    s, t = student.float(), teacher.float()
    if ctx.regression:
        soft = (s.squeeze(-1) - t.squeeze(-1)) ** 2
        hard = (s.squeeze(-1) - ctx.labels.float()) ** 2 if ctx.labels is not None else None
    else:
        temp = ctx.temperature
        log_ps = F.log_softmax(s / temp, -1)
        log_pt = F.log_softmax(t / temp, -1)
        soft = (log_pt.exp() * (log_pt - log_ps)).sum(-1) * temp**2
        hard = F.cross_entropy(s, ctx.labels, reduction="none") if ctx.labels is not None else None
    if hard is None:
        return soft
    return ctx.alpha * soft + (1 - ctx.alpha) * hard


LOSSES.add("soft_ce", KDLoss(soft_ce, ("logits",)), "soft targets: T^2-scaled KL to the teacher + alpha-mixed labels")
