"""The teacher: a fine-tuned run directory or any model with a task head, checked against the student's task."""

from __future__ import annotations

import hashlib
from pathlib import Path

import torch
from torch import nn

from ptmlab.core.errors import PtmlabError
from ptmlab.data.labels import MULTI_LABEL, is_multi_label
from ptmlab.data.tasks import TaskSpec


def load_teacher(name: str, spec: TaskSpec, labels: list[str] | None) -> nn.Module:
    """Load a teacher and check it predicts the task's label set; frozen, in eval mode."""
    from ptmlab.core.rundir import RunDir
    from ptmlab.models.zoo import ZOO, load_model

    p = Path(name).expanduser()
    if p.is_dir() and (p / "config.yaml").is_file():
        run = RunDir(p)
        if not run.has_model():
            raise PtmlabError(f"teacher run directory '{name}' has no model weights (config.json + "
                              f"model.safetensors): pass a finished run")
        summary = run.summary() if run.file("summary.json").is_file() else {}
        trained_on, its_labels = summary.get("task"), summary.get("labels")
        # another task with the same labels is fine (a teacher of pooled domains distilled on one domain)
        if trained_on and trained_on != spec.name and (its_labels is None or labels is None
                                                       or list(its_labels) != list(labels)):
            raise PtmlabError(f"teacher '{name}' was trained on task '{trained_on}', not '{spec.name}': use a "
                              f"teacher fine-tuned on {spec.name} or pass --task {trained_on}")
    if name in ZOO:  # an untrained head: usable for general distillation and tests, flagged in the summary
        model = load_model(name, num_labels=spec.num_labels, regression=spec.kind == "regression",
                           label_names=labels, multi_label=spec.kind == MULTI_LABEL)
    else:
        model = load_model(name)
    check_labels(model, name, spec, labels)
    model.eval()
    for q in model.parameters():
        q.requires_grad_(False)
    return model


def check_labels(model: nn.Module, name: str, spec: TaskSpec, labels: list[str] | None) -> None:
    n = model.config.num_labels
    if n != spec.num_labels:
        raise PtmlabError(f"teacher '{name}' has {n} outputs but task '{spec.name}' has {spec.num_labels}: use a "
                          f"teacher trained on this task")
    if is_multi_label(model.config) != (spec.kind == MULTI_LABEL):
        has, wants = ("multi-label", "single-label")[::1 if is_multi_label(model.config) else -1]
        raise PtmlabError(f"teacher '{name}' is a {has} classifier but task '{spec.name}' is {wants}: use a teacher "
                          f"fine-tuned on this task")
    saved = [model.config.id2label[i] for i in range(n)]
    if labels and saved != labels and not all(s.startswith("LABEL_") for s in saved):
        raise PtmlabError(f"teacher labels {saved} differ from the task's labels {labels}: use a teacher trained "
                          f"on the same label set")


def fingerprint(model: nn.Module) -> str:
    """A hash of the teacher's weights and config: the teacher part of the output cache key."""
    h = hashlib.sha256(model.config.to_json_string().encode())
    for k, v in sorted(model.state_dict().items()):
        h.update(k.encode())
        h.update(v.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()[:24]
