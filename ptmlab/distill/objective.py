"""The distillation loss the Trainer calls: one student forward pass with hooks, cached teacher features looked
up by the batch's example ids, and the weighted sum of every match's loss, per example. The same for every task
kind: a sentence, a tagged sentence or a QA window is one example; only ``soft_ce`` reads the head's logits
differently (``span``)."""

from __future__ import annotations

import torch
from torch import nn

from ptmlab.distill.cache import TeacherOutputs
from ptmlab.distill.features import FeatureTap, layered, output_logits
from ptmlab.distill.losses import LossContext, load_losses
from ptmlab.distill.matches import Match, ModelInfo
from ptmlab.models.loader import model_inputs


class DistillObjective(nn.Module):
    """``loss_module`` of the Trainer: holds the learned projections (student width -> teacher width)."""

    def __init__(self, student: nn.Module, matches: list[Match], teacher_out: TeacherOutputs, student_info: ModelInfo,
                 teacher_info: ModelInfo, *, temperature: float = 2.0, alpha: float = 0.5, regression: bool = False,
                 relation_heads: int | None = None, span: str | None = None, multi_label: bool = False):
        super().__init__()
        self.multi_label = multi_label  # a sigmoid per class (soft_ce's binary KL, BCE to the label sets)
        self.span = span  # None (a label per example), "tokens" (a tag per token), "positions" (answer start/end)
        self.matches = matches
        self.teacher_out = teacher_out
        self.temperature, self.alpha, self.regression = temperature, alpha, regression
        self.relation_heads = relation_heads
        self.losses = load_losses()
        self.projections = nn.ModuleDict()
        for j, m in enumerate(matches):
            spec = self.losses.get(m.loss)
            wants = m.projection if m.projection is not None else student_info.hidden != teacher_info.hidden
            if spec.projectable and wants:
                self.projections[str(j)] = nn.Linear(student_info.hidden, teacher_info.hidden)
        needs = {(m.feature, m.student if layered(m.feature) else -1) for m in matches if m.feature != "logits"}
        self.tap = FeatureTap(student, needs, who="student")
        self.last_parts: dict[str, float] = {}

    def forward(self, model: nn.Module, batch: dict) -> torch.Tensor:
        out = self.tap.run(model, model_inputs(model, batch))
        mask = batch["attention_mask"]
        idx = batch["index"].tolist()
        ctx = LossContext(mask, batch_labels(batch), self.regression, self.temperature, self.alpha, self.span,
                          self.multi_label)
        total = torch.zeros(len(idx), device=mask.device)
        parts: dict[str, float] = {}
        for j, m in enumerate(self.matches):
            if m.feature == "logits":
                s = output_logits(out)
            else:
                s = self.tap.feature(m.feature, m.student if layered(m.feature) else -1, mask, self.relation_heads)
            if str(j) in self.projections:
                s = self.projections[str(j)](s)
            t = self.teacher_out.gather(m.key, idx, mask.shape[1]).to(s.device)
            value = self.losses.get(m.loss).fn(s, t, ctx)
            total = total + m.weight * value
            name = m.loss if m.feature != "logits" else "soft_ce"
            parts[name] = parts.get(name, 0.0) + float(value.detach().mean())
        self.last_parts = parts
        return total

    def detach(self) -> None:
        """Remove the student's hooks (before saving or serving it)."""
        self.tap.remove()


def batch_labels(batch: dict) -> torch.Tensor | None:
    """The hard labels soft_ce mixes in: a label per example, tags [B, T], or an answer's (start, end) [B, 2]."""
    if "start_positions" in batch:
        return torch.stack([batch["start_positions"], batch["end_positions"]], 1)
    return batch.get("labels")
