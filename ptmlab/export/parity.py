"""Parity of an exported model with ptmlab's PyTorch model on real dev text: max |logit diff| and label agreement.

The text is the dev split of the run's own task (read from its config.yaml), of ``--task`` when given, or of the
built-in tweets task; both models see the same tokenized batches, so any difference is the export's.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import torch

from ptmlab.core.config import build_config
from ptmlab.core.errors import PtmlabError
from ptmlab.train.args import DataArgs

DATA_FIELDS = {f.name for f in dataclasses.fields(DataArgs)}


def parity_data_args(source: str, task: str | None, overrides: dict, max_examples: int) -> DataArgs:
    """The data options for the parity text: ``task`` (+ overrides) if given, else the run's, else tweets."""
    values: dict = {}
    cfg_file = Path(source) / "config.yaml"
    if task is None and cfg_file.is_file():
        import yaml

        try:
            saved = yaml.safe_load(cfg_file.read_text()) or {}
        except yaml.YAMLError:
            saved = {}
        values = {k: v for k, v in saved.items() if k in DATA_FIELDS and v is not None} if isinstance(saved, dict) \
            else {}
    if task is not None:
        values = {"task": task}
    elif values and not overrides.get("dev_file") and not _rereadable(values):
        print("note: the run was trained on data held in memory, which it does not keep: parity is checked on the "
              "built-in tweets dev text (pass --task or --dev-file to choose)", file=sys.stderr)
        values = {}
    values.update({k: v for k, v in overrides.items() if v is not None})
    values.update(max_eval=max_examples, max_train=None)
    return build_config(DataArgs, values, source="export parity")


def _rereadable(values: dict) -> bool:
    """Whether a run's recorded data options name data that can be read again (files, a task, hf:, a folder)."""
    from ptmlab.data.tasks import TASKS

    task = str(values.get("task", "tweets"))
    return bool(values.get("train_file") or values.get("dev_file") or task in TASKS or task.startswith("hf:")
                or Path(task).expanduser().is_dir())


def dev_split(args: DataArgs):
    from ptmlab.data.taskdata import load_task_data

    data = load_task_data(args, need_train=False)
    split = data.splits["dev"]
    if len(split) == 0:
        raise PtmlabError(f"task '{args.task}' has an empty dev split: pass --task with dev data for the parity check")
    return data.spec.name, split


@torch.no_grad()
def logits(model, tokenizer, split, max_length: int, batch_size: int = 32) -> torch.Tensor:
    """Logits of ``model`` (anything called with tokenizer outputs and returning ``.logits``) in split order."""
    from ptmlab.models.loader import model_inputs

    order = sorted(range(len(split)), key=lambda i: len(split.text[i]))
    out: list[torch.Tensor | None] = [None] * len(split)
    for start in range(0, len(order), batch_size):
        idx = order[start:start + batch_size]
        texts = [split.text[i] for i in idx]
        pairs = [split.text_pair[i] for i in idx] if split.text_pair is not None else None
        enc = tokenizer(texts, pairs, truncation=True, max_length=max_length, padding=True, return_tensors="pt")
        feed = model_inputs(model, dict(enc)) if hasattr(model, "config") else dict(enc)
        lg = model(**feed).logits.float()
        for j, i in enumerate(idx):
            out[i] = lg[j]
    return torch.stack(out)  # type: ignore[arg-type]


def compare(reference: torch.Tensor, exported: torch.Tensor, task: str) -> dict:
    """Max |logit diff| and the share of examples whose predicted label (argmax) agrees."""
    diff = float((reference - exported).abs().max()) if reference.numel() else 0.0
    if reference.shape[-1] > 1:
        agree = float((reference.argmax(-1) == exported.argmax(-1)).float().mean())
    else:  # regression: no labels to agree on
        agree = None
    return {"task": task, "examples": int(reference.shape[0]), "max_abs_logit_diff": diff, "label_agreement": agree}
