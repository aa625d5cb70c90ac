"""Evaluation of a run or model on a task's split: ``ptmlab evaluate`` and ``ptmlab.evaluate`` run this."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from ptmlab.core.config import at_least, opt
from ptmlab.core.errors import PtmlabError
from ptmlab.train.args import PRECISION_HELP, PRECISIONS, DataArgs, LongArgs
from ptmlab.train.embedding_args import EmbeddingDataArgs


@dataclass(frozen=True)
class EvaluateConfig(EmbeddingDataArgs, LongArgs, DataArgs):
    split: str = opt("dev", "split to evaluate: dev, test or train")
    eval_batch_size: int = opt(128, "batch size")
    precision: str = opt("auto", f"{PRECISION_HELP}; auto as finetune, so a run's dev metric is reproduced on the "
                                 f"machine that trained it", choices=list(PRECISIONS))
    seed: int = opt(42, "seed for --max-eval subsets")
    output: str | None = opt(None, "directory for evaluation.json (default: printed only)")

    def validate(self) -> None:
        self.validate_data()
        self.validate_long()
        self.validate_embedding_data()
        at_least(self, 1, "eval_batch_size")


# what evaluating a run reads from the run's own config.yaml unless given: its data and the --max-eval subset
# (same task, files, columns, max length and seed, so the dev subset it was scored on is drawn again)
_DATA_SOURCE = ("task", "glue_dir", "train_file", "dev_file", "test_file")
# how a run read its own data: what new files for it are read with unless given
_READING = ("text_col", "text_pair_col", "label_col", "label_kind", "task_kind", "max_length", "doc_stride",
            "label_all_subtokens", "score_range")


def run_data_defaults(model: str, given) -> dict:
    """The run's recorded data options (and seed) for every option not in ``given``, when none of the data source
    options is given: ``evaluate RUN`` scores the run's own task and dev subset."""
    import dataclasses

    if not (Path(model) / "config.yaml").is_file():
        return {}
    from ptmlab.core.rundir import RunDir
    from ptmlab.data.tasks import TASKS

    recorded = RunDir(model).read_config()
    task = str(recorded.get("task") or "")
    if any(name in given for name in _DATA_SOURCE):
        if "task" in given or task in TASKS:
            return {}
        # new files for a run trained on its own data: read them as the run read its data (columns, kinds)
        return {n: recorded[n] for n in _READING if n in recorded and n not in given} | {"task": task or "custom"}
    if not (task in TASKS or task.startswith("hf:") or Path(task).exists() or
            any(recorded.get(f) for f in _DATA_SOURCE[2:])):
        raise PtmlabError(f"run '{model}' was trained on data held in memory, which it does not keep: pass the "
                          f"data to evaluate on (data=... in Python, --dev-file on the command line)")
    names = {f.name for f in dataclasses.fields(DataArgs)} | {f.name for f in dataclasses.fields(LongArgs)} | {"seed"} \
        | {f.name for f in dataclasses.fields(EmbeddingDataArgs)}
    taken = {n: recorded[n] for n in names if n in recorded and n not in given}
    if "task" in taken:
        subset = f"first {taken['max_eval']} after a seed-{taken.get('seed')} shuffle" if taken.get("max_eval") \
            else "all"
        print(f"note: evaluating the run's own task '{taken['task']}' (dev examples: {subset}); pass --task to "
              f"choose another", file=sys.stderr)
    return taken


def evaluate_config(model: str, cfg: EvaluateConfig, *, task_given: bool = False, source=None) -> dict:
    """Metrics of ``model`` on ``cfg``'s split (a multi-task run: every head, or ``cfg.task``'s when
    ``task_given``); ``source``: data in memory instead of what ``cfg`` names. Writes evaluation.json into
    ``cfg.output`` when set; returns the result."""
    from ptmlab.core.cli_parser import output_file
    from ptmlab.core.io import atomic_write_json
    from ptmlab.train.multitask import evaluate_tasks, recorded_tasks

    if recorded_tasks(model):  # a multi-task run: --task picks a head, none scores every head
        result = evaluate_tasks(model, cfg, [cfg.task] if task_given else None)
    else:
        result = _evaluate_one(model, cfg, source)
    if cfg.output:
        atomic_write_json(output_file(cfg.output, "evaluation.json"), result)
    return result


def _evaluate_one(model_name: str, cfg: EvaluateConfig, source) -> dict:
    from ptmlab.data.encode import encode_split
    from ptmlab.data.taskdata import label_names, load_task_data
    from ptmlab.longseq.runs import check_long_model, long_evaluator
    from ptmlab.models.zoo import load_model, load_tokenizer
    from ptmlab.train.evaluate import evaluate, resolve_precision

    if cfg.task_kind == "embedding":  # a sentence embedder: Spearman of cosines, or recall@k and MRR
        return _evaluate_embedding(model_name, cfg, source)
    data = load_task_data(cfg, need_train=False, source=source)
    split = data.split(cfg.split)
    if all(getattr(split, f, None) is None for f in ("label", "tags", "answers")):  # labels, tags or answers
        raise PtmlabError(f"the '{cfg.split}' split of task '{data.spec.name}' has no labels: evaluate 'dev'")
    model = load_model(model_name)
    _in_model_label_order(model, data)
    split = data.split(cfg.split)
    spec = data.spec
    names = label_names(data)
    if model.config.num_labels != spec.num_labels:
        raise PtmlabError(f"model '{model_name}' has {model.config.num_labels} outputs but task '{spec.name}' "
                          f"needs {spec.num_labels}: evaluate it on the task it was trained for")
    saved = [model.config.id2label[i] for i in range(model.config.num_labels)]
    if names and saved != names and not all(s.startswith("LABEL_") for s in saved):
        raise PtmlabError(f"model labels {saved} differ from task labels {names}: use the matching task")
    from ptmlab.data.labels import MULTI_LABEL, is_multi_label

    if spec.kind in ("classification", MULTI_LABEL) and is_multi_label(model.config) != (spec.kind == MULTI_LABEL):
        answers = "label sets" if is_multi_label(model.config) else "one label"
        raise PtmlabError(f"model '{model_name}' answers {answers} per text but task '{spec.name}' is {spec.kind}: "
                          f"evaluate it on the task it was trained for")
    tokenizer = load_tokenizer(model_name)
    check_long_model(model, cfg, data)  # the strategy fits the model and --max-length (one-line errors)
    enc = encode_split(tokenizer, split, cfg.max_length)
    if cfg.long_strategy == "truncate":
        metrics, _ = evaluate(model, enc, spec, tokenizer.pad_token_id or 0, cfg.eval_batch_size,
                              resolve_precision(cfg.precision))
    else:
        metrics, _ = long_evaluator(enc, spec, cfg, resolve_precision(cfg.precision))(model)
    result = {"model": model_name, "task": spec.name, "split": cfg.split, "examples": len(split),
              "long_strategy": cfg.long_strategy, "metrics": metrics}
    return result


def _evaluate_embedding(model_name: str, cfg: EvaluateConfig, source) -> dict:
    """An embedding run (or any encoder, pooled as its sentence-transformers config says, else mean) on embedding
    data: scored pairs give Spearman and Pearson of cosine vs gold, other data recall@1/5/10 and MRR."""
    from ptmlab.data.taskdata import load_task_data
    from ptmlab.train.embedding import embedding_metrics
    from ptmlab.train.sentence import load_sentence_model

    data = load_task_data(cfg, need_train=False, source=source)
    split = data.split(cfg.split)
    model, tokenizer = load_sentence_model(model_name)
    metrics, _ = embedding_metrics(model.eval(), tokenizer, split, cfg.max_length, cfg.eval_batch_size)
    return {"model": model_name, "task": data.spec.name, "split": cfg.split, "examples": len(split),
            "kind": "embedding", "layout": split.layout, "pooling": model.describe(), "metrics": metrics}


def _in_model_label_order(model, data) -> None:
    """Data read from new files or memory names its classes from what it holds (a dev file may lack a class or
    order them otherwise): its labels are read as the model's own classes, so the model's ids keep their meaning.
    A label the model does not know is an error naming it. Built-in tasks and other kinds are left as they are."""
    import dataclasses

    spec = data.spec
    saved = [str(model.config.id2label[i]) for i in range(model.config.num_labels)]
    if spec.kind not in ("classification", "multi-label") or spec.extra.get("label_names") \
            or all(s.startswith("LABEL_") for s in saved):
        return
    from ptmlab.data.tasks import TASKS

    if spec.name in TASKS or list(map(str, spec.labels)) == saved:
        return
    used = set()  # the classes the data holds (integer classes name every id up to the largest)
    for other in data.splits.values():
        for x in other.label or []:
            used.update([i for i, on in enumerate(x) if on] if spec.kind == "multi-label" else [x])
    unknown = sorted({str(spec.labels[i]) for i in used} - set(saved))
    if unknown:
        raise PtmlabError(f"the evaluation data has label(s) {', '.join(unknown)} that the model does not know (it "
                          f"predicts {', '.join(saved)}): evaluate on data with the run's labels")
    remap = {i: saved.index(str(name)) for i, name in enumerate(spec.labels) if str(name) in saved}
    data.spec = dataclasses.replace(spec, labels=tuple(saved))
    for name, other in data.splits.items():
        if other.label is not None and spec.kind == "multi-label":  # multi-hot rows over the model's labels
            rows = [[0] * len(saved) for _ in other.label]
            for row, old in zip(rows, other.label, strict=True):
                for i, on in enumerate(old):
                    if on:
                        row[remap[i]] = 1
            data.splits[name] = dataclasses.replace(other, label=rows)
        elif other.label is not None:
            data.splits[name] = dataclasses.replace(other, label=[remap[x] for x in other.label])
