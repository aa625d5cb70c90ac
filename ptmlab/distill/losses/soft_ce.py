"""``soft_ce`` (Hinton et al.; DistilBERT's L_ce): KL(teacher_T || student_T) * T^2, mixed with the hard-label
loss by ``alpha``; for regression, MSE to the teacher's prediction mixed with MSE to the label; for multi-label
(``ctx.multi_label``, a sigmoid per class) the T^2-scaled binary KL from the teacher's probabilities (sigmoid of its
logits / T, the soft targets) to the student's, mixed with binary cross-entropy to the label sets, both averaged
over the classes.

Span task kinds (``ctx.span``): a token tagger compares its tag distribution with the teacher's at every labelled
position (the words' first sub-tokens, where tags are read), averaged per sentence; a span extractor compares its
start and end distributions over the window's real positions (padding never wins), the two halves averaged."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ptmlab.data.tokens import IGNORE
from ptmlab.distill.losses import LOSSES, KDLoss, LossContext

NEG = -1e4  # a padded position's logit: never wins a softmax over positions


def kl_t(s: torch.Tensor, t: torch.Tensor, temp: float) -> torch.Tensor:
    """T^2-scaled KL(teacher_T || student_T) over the last dimension."""
    log_ps = F.log_softmax(s / temp, -1)
    log_pt = F.log_softmax(t / temp, -1)
    return (log_pt.exp() * (log_pt - log_ps)).sum(-1) * temp**2


def soft_ce(student: torch.Tensor, teacher: torch.Tensor, ctx: LossContext) -> torch.Tensor:
    s, t = student.float(), teacher.float()
    if ctx.span == "tokens":
        return _tokens(s, t, ctx)
    if ctx.span == "positions":
        return _positions(s, t, ctx)
    if ctx.multi_label:
        return _multi_label(s, t, ctx)
    if ctx.regression:
        soft = (s.squeeze(-1) - t.squeeze(-1)) ** 2
        hard = (s.squeeze(-1) - ctx.labels.float()) ** 2 if ctx.labels is not None else None
    else:
        soft = kl_t(s, t, ctx.temperature)
        hard = F.cross_entropy(s, ctx.labels, reduction="none") if ctx.labels is not None else None
    if hard is None:
        return soft
    return ctx.alpha * soft + (1 - ctx.alpha) * hard


def binary_kl_t(s: torch.Tensor, t: torch.Tensor, temp: float) -> torch.Tensor:
    """T^2-scaled binary KL(sigmoid(t/T) || sigmoid(s/T)) per class: binary cross-entropy to the teacher's soft
    targets less their entropy (0 when the two agree)."""
    target = torch.sigmoid(t / temp)
    cross = F.binary_cross_entropy_with_logits(s / temp, target, reduction="none")
    entropy = F.binary_cross_entropy_with_logits(t / temp, target, reduction="none")
    return (cross - entropy) * temp**2


def _multi_label(s: torch.Tensor, t: torch.Tensor, ctx: LossContext) -> torch.Tensor:
    """s, t [B, C]; labels [B, C] multi-hot: the mean over the classes."""
    soft = binary_kl_t(s, t, ctx.temperature).mean(-1)
    if ctx.labels is None:
        return soft
    hard = F.binary_cross_entropy_with_logits(s, ctx.labels.float(), reduction="none").mean(-1)
    return ctx.alpha * soft + (1 - ctx.alpha) * hard


def _tokens(s: torch.Tensor, t: torch.Tensor, ctx: LossContext) -> torch.Tensor:
    """s, t [B, T, C]; labels [B, T]: the mean over each sentence's labelled positions (its real ones without)."""
    labels = ctx.labels
    keep = (labels != IGNORE).float() if labels is not None else ctx.mask.float()
    count = keep.sum(1).clamp(min=1)
    soft = (kl_t(s, t, ctx.temperature) * keep).sum(1) / count
    if labels is None:
        return soft
    hard = F.cross_entropy(s.transpose(1, 2), labels, ignore_index=IGNORE, reduction="none").sum(1) / count
    return ctx.alpha * soft + (1 - ctx.alpha) * hard


def _positions(s: torch.Tensor, t: torch.Tensor, ctx: LossContext) -> torch.Tensor:
    """s, t [B, T, 2] (start, end logits); labels [B, 2]: the start and end distributions over real positions."""
    pad = (ctx.mask == 0)[:, :, None]
    s, t = s.masked_fill(pad, NEG), t.masked_fill(pad, NEG)
    soft = kl_t(s.transpose(1, 2), t.transpose(1, 2), ctx.temperature).mean(1)
    if ctx.labels is None:
        return soft
    hard = (F.cross_entropy(s[..., 0], ctx.labels[:, 0], reduction="none")
            + F.cross_entropy(s[..., 1], ctx.labels[:, 1], reduction="none")) / 2
    return ctx.alpha * soft + (1 - ctx.alpha) * hard


LOSSES.add("soft_ce", KDLoss(soft_ce, ("logits",)), "soft targets: T^2-scaled KL to the teacher + alpha-mixed labels")
