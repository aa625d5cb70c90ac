"""Matches (TextBrewer's idea): which student feature learns from which teacher feature, with which loss, weight
and projection. They come from ``--losses`` and ``--layer-map`` or, declared one by one, from ``matches:`` in the
``--config`` YAML, e.g. ``{loss: hidden_mse, student: 1, teacher: 3, weight: 0.5, projection: true}``."""

from __future__ import annotations

from dataclasses import dataclass

from ptmlab.core.errors import PtmlabError
from ptmlab.distill.features import layered
from ptmlab.distill.losses import load_losses
from ptmlab.distill.maps import check_pairs


@dataclass(frozen=True)
class ModelInfo:
    layers: int
    hidden: int
    heads: int | None
    rnn: str | None = None  # "bilstm"/"cnn" for non-transformer students

    @classmethod
    def of(cls, model) -> ModelInfo:
        c = model.config
        rnn = getattr(c, "ptmlab_rnn", None)
        if rnn:
            return cls(0, c.hidden_size, None, rnn)
        return cls(getattr(c, "num_hidden_layers", getattr(c, "n_layers", 0)),
                   getattr(c, "hidden_size", getattr(c, "dim", 0)),
                   getattr(c, "num_attention_heads", getattr(c, "n_heads", None)))


@dataclass(frozen=True)
class Match:
    loss: str
    feature: str
    student: int | None = None  # layer index for layered features
    teacher: int | None = None
    weight: float = 1.0
    projection: bool | None = None  # None: project when widths differ

    @property
    def key(self) -> tuple[str, int]:
        return self.feature, -1 if self.teacher is None else self.teacher


def parse_losses(names: list[str]) -> list[tuple[str, float]]:
    """``soft_ce,hidden_mse:0.5`` -> [(soft_ce, 1.0), (hidden_mse, 0.5)]; checks each name."""
    losses = load_losses()
    out = []
    for item in names:
        name, _, w = item.partition(":")
        losses.get(name)
        try:
            weight = float(w) if w else 1.0
        except ValueError:
            raise PtmlabError(f"loss weight '{w}' in '{item}' is not a number: write NAME:WEIGHT, e.g. "
                              f"hidden_mse:0.5") from None
        out.append((name, weight))
    if not out:
        raise PtmlabError("no distillation loss given: pass --losses, e.g. soft_ce")
    return out


def default_matches(losses: list[tuple[str, float]], pairs: list[tuple[int, int]], student: ModelInfo,
                    teacher: ModelInfo) -> list[Match]:
    """Expand each loss over the layer map (minilm: the last layers; pkd: all but the student's last layer)."""
    reg = load_losses()
    out: list[Match] = []
    for name, w in losses:
        for feature in reg.get(name).features if name == "minilm" else reg.get(name).features[:1]:
            if not layered(feature):
                out.append(Match(name, feature, weight=w))
            elif name == "minilm":
                out.append(Match(name, feature, student.layers - 1, teacher.layers - 1, w))
            else:
                use = pairs[:-1] if name == "pkd" and len(pairs) > 1 else pairs
                out.extend(Match(name, feature, s, t, w) for s, t in use)
    return out


def parse_matches(raw: list) -> list[Match]:
    """Matches declared in a config file."""
    reg = load_losses()
    if not isinstance(raw, list):
        raise PtmlabError("'matches' in the config must be a list of {loss, student, teacher, weight} mappings")
    out = []
    allowed = {"loss", "feature", "student", "teacher", "weight", "projection"}
    for i, m in enumerate(raw):
        if not isinstance(m, dict) or "loss" not in m:
            raise PtmlabError(f"match {i} ({m!r}) needs at least a 'loss' key: e.g. {{loss: hidden_mse, student: 0, "
                              f"teacher: 1}}")
        extra = set(m) - allowed
        if extra:
            raise PtmlabError(f"match {i} has unknown key(s) {sorted(extra)}: use {sorted(allowed)}")
        spec = reg.get(m["loss"])
        feature = m.get("feature", spec.features[0])
        if feature not in spec.features:
            raise PtmlabError(f"match {i}: loss '{m['loss']}' compares {', '.join(spec.features)}, not '{feature}'")
        if layered(feature) and ("student" not in m or "teacher" not in m):
            raise PtmlabError(f"match {i}: loss '{m['loss']}' on '{feature}' needs 'student' and 'teacher' layers")
        out.append(Match(m["loss"], feature, m.get("student"), m.get("teacher"), float(m.get("weight", 1.0)),
                         m.get("projection")))
    return out


def check_matches(matches: list[Match], student: ModelInfo, teacher: ModelInfo) -> None:
    """Layers in range, heads compatible, no layer-level loss on a student without layers."""
    reg = load_losses()
    for m in matches:
        spec = reg.get(m.loss)
        if m.feature != "logits" and student.rnn:
            raise PtmlabError(f"loss '{m.loss}' needs {m.feature} from the student, but a {student.rnn} student has "
                              f"none: use --losses soft_ce")
        if layered(m.feature):
            check_pairs([(m.student, m.teacher)], student.layers, teacher.layers, f"{m.student}:{m.teacher}")
        if spec.same_heads and student.heads != teacher.heads:
            raise PtmlabError(f"loss '{m.loss}' compares attention maps head by head, but the student has "
                              f"{student.heads} heads and the teacher {teacher.heads}: use 'minilm' (relation heads) "
                              f"or a student with {teacher.heads} heads")
        if m.projection is False and spec.projectable and student.hidden != teacher.hidden:
            raise PtmlabError(f"loss '{m.loss}' without projection needs equal widths (student {student.hidden}, "
                              f"teacher {teacher.hidden}): set projection: true")
