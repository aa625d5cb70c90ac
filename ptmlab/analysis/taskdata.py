"""The model and evaluation split an analysis command works on: a run directory plus a task's dev data."""

from __future__ import annotations

from dataclasses import dataclass

from ptmlab.core.errors import PtmlabError
from ptmlab.data.encode import Encoded, encode_split
from ptmlab.data.loaders import Split
from ptmlab.data.tasks import TaskSpec


@dataclass
class AnalysisInput:
    model: object
    tokenizer: object
    split: Split
    enc: Encoded
    spec: TaskSpec
    pad_id: int


def load_analysis_input(model_name: str, cfg, attn_implementation: str | None = None,
                        split: str | None = None, rows: Split | None = None) -> AnalysisInput:
    """The model (eval mode) and the labelled ``split`` (default ``cfg.split``) of ``cfg.task``, subset to
    ``cfg.max_eval`` with ``cfg.seed`` (42 when the config has none); ``rows`` (labelled rows of the task chosen by
    the caller) instead of the split when given."""
    from ptmlab.data.taskdata import load_task_data
    from ptmlab.models.zoo import load_model, load_tokenizer

    name = split or cfg.split
    data = load_task_data(cfg, need_train=False)
    from ptmlab.data.labels import refuse_multi_label

    refuse_multi_label(data.spec.kind, "the analyses", f"task '{data.spec.name}' has label sets; analyse a "
                                                       f"single-label task")
    split = data.split(name) if rows is None else rows
    if split.label is None:
        raise PtmlabError(f"the '{name}' split of task '{data.spec.name}' has no labels: analyse 'dev'")
    model = load_model(model_name, attn_implementation=attn_implementation).eval()
    if model.config.num_labels != data.spec.num_labels:
        raise PtmlabError(f"model '{model_name}' has {model.config.num_labels} outputs but task '{data.spec.name}' "
                          f"needs {data.spec.num_labels}: analyse a model fine-tuned on this task")
    tokenizer = load_tokenizer(model_name)
    enc = encode_split(tokenizer, split, cfg.max_length)
    return AnalysisInput(model, tokenizer, split, enc, data.spec, tokenizer.pad_token_id or 0)
