"""Parity of an exported model with ptmlab's PyTorch model on real dev text: max |logit diff| and label agreement.

The text is the dev split of the run's own task (read from its config.yaml), of ``--task`` when given, or of the
built-in tweets task; both models see the same tokenized batches, so any difference is the export's.

Token classification and extractive QA compare what their tasks read: the logits of every real (non-padding)
token of each sentence or window, and the decoded result, the tag of every word (read at its first sub-token) or
the answer span of every question (best over its windows). ``label_agreement`` is then the share of words whose
tag agrees, or of questions whose answer span is the same.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import torch

from ptmlab.core.config import build_config
from ptmlab.core.errors import PtmlabError
from ptmlab.data.tasks import SPAN_KINDS
from ptmlab.train.args import DataArgs

DATA_FIELDS = {f.name for f in dataclasses.fields(DataArgs)}


def parity_data_args(source: str, task: str | None, overrides: dict, max_examples: int,
                     kind: str = "sentence") -> DataArgs:
    """The data options for the parity text: ``task`` (+ overrides) if given, else the run's, else tweets (for
    sentence models; a token-classification or QA model, ``kind``, needs data of its kind named)."""
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
    elif kind in SPAN_KINDS and not overrides.get("dev_file") and not (values and _rereadable(values)):
        built_in = "conll2003" if kind == "token-classification" else "squad"
        raise PtmlabError(f"a {kind} model's parity text must be of its kind and the run records no data to read "
                          f"again: pass --task {built_in} or --dev-file FILE (--task-kind {kind})")
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


def dev_split(args: DataArgs, kind: str = "sentence"):
    """(task name, dev split) of the parity text; PtmlabError when its kind is not the model's ``kind``."""
    from ptmlab.data.taskdata import load_task_data

    data = load_task_data(args, need_train=False)
    split = data.splits["dev"]
    if len(split) == 0:
        raise PtmlabError(f"task '{args.task}' has an empty dev split: pass --task with dev data for the parity check")
    data_kind = data.spec.kind if data.spec.kind in SPAN_KINDS else "sentence"
    if data_kind != kind:
        model = f"a {kind} model" if kind in SPAN_KINDS else "a sentence classification model"
        raise PtmlabError(f"the parity text of task '{data.spec.name}' is {data_kind} data, but the model is {model}: "
                          f"pass --task or --dev-file with data of the model's kind"
                          + (f" (--task-kind {kind})" if kind in SPAN_KINDS else ""))
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


def compare(reference: torch.Tensor, exported: torch.Tensor, task: str, threshold: float | None = None) -> dict:
    """Max |logit diff| and the share of examples whose predicted label (argmax) agrees; for a multi-label model
    (``threshold``: its decision threshold) the share whose label sets (sigmoid >= threshold) agree."""
    diff = float((reference - exported).abs().max()) if reference.numel() else 0.0
    if threshold is not None:
        same = (torch.sigmoid(reference) >= threshold) == (torch.sigmoid(exported) >= threshold)
        agree = float(same.all(-1).float().mean()) if reference.numel() else None
    elif reference.shape[-1] > 1:
        agree = float((reference.argmax(-1) == exported.argmax(-1)).float().mean())
    else:  # regression: no labels to agree on
        agree = None
    return {"task": task, "examples": int(reference.shape[0]), "max_abs_logit_diff": diff, "label_agreement": agree}


def span_parity(model, exported, tokenizer, split, task: str, kind: str, max_length: int) -> dict:
    """Parity of a token-classification or QA export: max |logit diff| over the real tokens of every sentence or
    window (both QA outputs), and agreement of the decoded tags per word or answer spans per question."""
    from ptmlab.train.spans import span_logits

    feats = split.encode(tokenizer, max_length)
    ref = span_logits(model, feats, desc="parity")
    got = span_logits(exported, feats, desc="parity")
    return {"task": task, **span_agreement(split, feats, ref, feats, got, kind,
                                           [model.config.id2label[i] for i in range(model.config.num_labels)]
                                           if kind != "extractive-qa" else None)}


def span_agreement(split, ref_feats, ref: list, got_feats, got: list, kind: str, labels: list | None) -> dict:
    """Agreement of two span models' decoded outputs on ``split`` (each with its own features: the tokenizers may
    differ): the tag of every word or the answer span of every question; ``max_abs_logit_diff`` over the real tokens
    when both tokenized alike (None otherwise)."""
    alike = list(ref_feats.input_ids) == list(got_feats.input_ids)
    diff = None
    if alike:
        pairs = [(r, g) for a, b in zip(ref, got, strict=True)
                 for r, g in (zip(a, b, strict=True) if kind == "extractive-qa" else [(a, b)])]
        diff = max((float(abs(r - g).max()) for r, g in pairs if r.size), default=0.0)
    if kind == "extractive-qa":
        from ptmlab.data.qa import best_answers

        a_ref = best_answers(split, ref_feats, [x[0] for x in ref], [x[1] for x in ref])
        a_got = best_answers(split, got_feats, [x[0] for x in got], [x[1] for x in got])
        same = [(a.start, a.end) == (b.start, b.end) for a, b in zip(a_ref, a_got, strict=True)]
        return {"kind": kind, "examples": len(split), "windows": len(got_feats), "max_abs_logit_diff": diff,
                "label_agreement": sum(same) / max(len(same), 1)}
    from ptmlab.train.spans import token_predictions

    t_ref, t_got = token_predictions(ref_feats, ref, labels), token_predictions(got_feats, got, labels)
    words = [a == b for s_ref, s_got in zip(t_ref, t_got, strict=True) for a, b in zip(s_ref, s_got, strict=True)]
    return {"kind": kind, "examples": len(split), "words": len(words), "max_abs_logit_diff": diff,
            "label_agreement": sum(words) / max(len(words), 1),
            "sentences_identical": sum(a == b for a, b in zip(t_ref, t_got, strict=True)) / max(len(t_ref), 1)}
