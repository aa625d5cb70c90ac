"""Distillation losses: one small module per loss, each registered in ``LOSSES`` under the name the CLI uses.

A loss compares one feature (see ``ptmlab.distill.features``) of student and teacher and returns one value per
example; ``LossContext`` carries what some losses need beyond the two tensors (mask, labels, temperature).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

import torch

from ptmlab.core.registry import Registry


@dataclass
class LossContext:
    mask: torch.Tensor  # [B, T] 1 for real tokens
    labels: torch.Tensor | None = None  # [B]; tags [B, T] (-100: not read); answer [B, 2] (start, end)
    regression: bool = False
    temperature: float = 2.0
    alpha: float = 0.5  # weight of the teacher term in soft_ce (1 - alpha goes to the hard labels)
    span: str | None = None  # "tokens": logits [B, T, C] per tag; "positions": [B, T, 2] start/end over positions
    multi_label: bool = False  # a sigmoid per class: labels are multi-hot rows [B, C]


@dataclass(frozen=True)
class KDLoss:
    fn: Callable[[torch.Tensor, torch.Tensor, LossContext], torch.Tensor]  # (student, teacher, ctx) -> [B]
    features: tuple[str, ...]  # the features it may compare (the first is the default)
    projectable: bool = False  # a learned projection maps the student's width to the teacher's
    same_heads: bool = False  # student and teacher must have the same number of attention heads


LOSSES: Registry[KDLoss] = Registry("distillation loss")
LOSS_MODULES = ["soft_ce", "hidden_mse", "attention", "cosine", "minilm", "pkd", "sentence_mse"]


def load_losses() -> Registry[KDLoss]:
    for m in LOSS_MODULES:
        importlib.import_module(f"{__name__}.{m}")
    return LOSSES


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean over the valid positions of each example: x [B, T], mask [B, T] -> [B]."""
    m = mask.to(x.dtype)
    return (x * m).sum(-1) / m.sum(-1).clamp_min(1)
