"""Sentence-embedding models as distillation sees them: the encoder itself lives in ``ptmlab.train.sentence`` (training,
prediction, serving and export use it too); distillation adds the teacher-cache key of a sentence model."""

from __future__ import annotations

from ptmlab.train.sentence import SentenceEncoder


def pooling_fingerprint(model: SentenceEncoder) -> str:
    """The teacher-cache key part of a sentence model: weights and config, pooling and normalisation."""
    from ptmlab.distill.teacher import fingerprint

    return f"{fingerprint(model)}|{model.describe()}"
