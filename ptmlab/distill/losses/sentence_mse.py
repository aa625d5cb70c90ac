"""``sentence_mse`` (Reimers & Gurevych 2020): MSE between the student's and the teacher's output vectors, averaged
over the vector's dimensions, one value per example. A ``SentenceEncoder``'s output vectors are its pooled sentence
embeddings, so multilingual distillation applies it twice per pair (the student's source vector and its target
vector, both against the teacher's source vector); on classifiers it is logit regression (Ba & Caruana 2014)."""

from __future__ import annotations

import torch

from ptmlab.distill.losses import LOSSES, KDLoss, LossContext


def sentence_mse(student: torch.Tensor, teacher: torch.Tensor, ctx: LossContext | None = None) -> torch.Tensor:
    return ((student.float() - teacher.float()) ** 2).mean(-1)


LOSSES.add("sentence_mse", KDLoss(sentence_mse, ("logits",)),
           "MSE between output vectors: sentence embeddings (distill-embeddings) or logits (logit regression)")
