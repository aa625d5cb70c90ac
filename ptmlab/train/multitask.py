"""Multi-task fine-tuning (MT-DNN): one encoder, one head per task, task-homogeneous batches, one run directory.

The model is the task model of ``--model`` whose head (``classifier`` on the structure map) is replaced by a
``MultiTaskHead``: a copy of that head per task, each with its own output layer (classes, or one output for a
regression task such as STS-B), and an ``active`` task that the forward pass routes through. The change is the
``multitask_heads`` model modification (``models.loader.MODIFIERS``): it records each task's name, kind, output
count and labels in ``config.json``, so ``load_model(RUN)`` rebuilds every head and loads the weights strictly
(``classifier.heads.<task>.*``), wherever a run directory is read.

Training is the one loop (``fine_tune``) with a ``MultiTaskSource`` (``data.multitask``) that plans batches of one
task each, a loss that switches the head by the batch's ``task_id`` (cross-entropy or MSE per task), and an
evaluator that scores every task's dev split with its head. The main metric, ``task_mean``, is the mean over tasks
of each task's main metric (accuracy, F1, Pearson, Matthews correlation); the per-task numbers are logged as
``TASK/METRIC`` in metrics.jsonl and summary.json.
"""

from __future__ import annotations

import copy
import json
import statistics
from pathlib import Path

from torch import nn

from ptmlab.core.errors import PtmlabError
from ptmlab.data.encode import Encoded, encode_split
from ptmlab.data.loaders import TaskData
from ptmlab.data.tasks import TaskSpec
from ptmlab.models.loader import MODIFIERS, record_modification
from ptmlab.models.structure import structure_of

TASK_HEADS = "multitask_heads"
MEAN = "task_mean"  # the main metric of a multi-task run: the mean of the tasks' main metrics
MULTITASK_SPEC = TaskSpec("multitask", "classification", metrics=(MEAN,), description="several tasks, one head each")


class MultiTaskHead(nn.Module):
    """One head per task; ``active`` names the head the forward pass uses."""

    def __init__(self, heads: dict[str, nn.Module], tasks: list[dict]):
        super().__init__()
        self.heads = nn.ModuleDict(heads)
        self.tasks = tasks  # [{"name", "kind", "num_labels", "labels"}], as recorded in the config
        self.active = next(iter(heads))

    def forward(self, *args, **kwargs):
        return self.heads[self.active](*args, **kwargs)


def _fresh_linear(like: nn.Linear, n: int, std: float) -> nn.Linear:
    lin = nn.Linear(like.in_features, n).to(like.weight.device, like.weight.dtype)
    nn.init.normal_(lin.weight, std=std)
    nn.init.zeros_(lin.bias)
    return lin


def _head_for(template: nn.Module, n: int, std: float) -> nn.Module:
    """A copy of ``template`` whose last Linear has ``n`` outputs (freshly initialised)."""
    if isinstance(template, nn.Linear):
        return _fresh_linear(template, n, std)
    head = copy.deepcopy(template)
    names = [name for name, m in head.named_modules() if isinstance(m, nn.Linear)]
    if not names:
        raise PtmlabError(f"the task head {type(template).__name__} has no Linear layer to give each task its outputs")
    parent, _, attr = names[-1].rpartition(".")
    owner = head.get_submodule(parent) if parent else head
    setattr(owner, attr, _fresh_linear(getattr(owner, attr), n, std))
    return head


def task_entry(data: TaskData) -> dict:
    """What the modification records about one task."""
    from ptmlab.data.taskdata import label_names

    spec = data.spec
    return {"name": spec.name, "kind": spec.kind, "num_labels": spec.num_labels, "labels": label_names(data)}


@MODIFIERS.register(TASK_HEADS, help="one task head per task (multi-task fine-tuning, MT-DNN)")
def add_task_heads(model, tasks: list[dict], record: bool = True) -> MultiTaskHead:
    """Replace the model's task head by one head per task (``tasks``: name, kind, num_labels, labels)."""
    path = structure_of(model).head[-1]
    current = model.get_submodule(path)
    if isinstance(current, MultiTaskHead):
        raise PtmlabError("the model already has one head per task: load it without adding task heads again")
    if not tasks:
        raise PtmlabError("no tasks to add heads for: give two or more tasks, e.g. --tasks sst2,mrpc")
    std = getattr(model.config, "initializer_range", 0.02)
    tasks = [dict(t) for t in tasks]
    head = MultiTaskHead({t["name"]: _head_for(current, int(t["num_labels"]), std) for t in tasks}, tasks)
    parent, _, attr = path.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, attr, head)
    if record:  # one record: a student copied from a multi-task teacher's config replaces the teacher's
        mods = [m for m in getattr(model.config, "ptmlab_modifications", None) or [] if m["kind"] != TASK_HEADS]
        model.config.ptmlab_modifications = mods
        record_modification(model, TASK_HEADS, tasks=tasks)
    return head


def _heads(model) -> MultiTaskHead | None:
    for m in model.modules():
        if isinstance(m, MultiTaskHead):
            return m
    return None


def model_tasks(model) -> list[dict]:
    """The tasks a multi-task model has heads for ([] for a single-task model)."""
    head = _heads(model)
    return list(head.tasks) if head is not None else []


def set_task(model, name: str) -> None:
    """Route the model's forward pass through ``name``'s head."""
    head = _heads(model)
    if head is None:
        raise PtmlabError(f"the model has one task head, not one per task: it cannot score task '{name}' by name")
    if name not in head.heads:
        raise PtmlabError(f"the model has no head for task '{name}': its heads are {', '.join(head.heads)}")
    head.active = name


def recorded_tasks(name: str) -> list[dict]:
    """The tasks a saved model directory has heads for, read from its config.json alone ([] when none)."""
    from ptmlab.models.zoo import resolve

    try:
        path, _ = resolve(name)
        config = json.loads((Path(path) / "config.json").read_text())
    except (PtmlabError, OSError, ValueError):
        return []
    mods = [m for m in config.get("ptmlab_modifications") or [] if m.get("kind") == TASK_HEADS]
    return list(mods[-1]["tasks"]) if mods else []


def multitask_loss(names: list[str], kinds: list[str]):
    """The loop's loss: the batch's task picks the head and the loss (cross-entropy, or MSE for regression)."""
    from ptmlab.train.loop import task_loss

    losses = [task_loss(kind == "regression") for kind in kinds]

    def loss(model, batch):
        k = int(batch["task_id"][0])
        set_task(model, names[k])
        return losses[k](model, batch)

    return loss


def task_mean(per_task: dict[str, dict], specs: dict[str, TaskSpec]) -> float:
    return statistics.fmean(per_task[t][specs[t].main_metric] for t in per_task)


def multitask_evaluator(devs: dict[str, Encoded], specs: dict[str, TaskSpec], pad_id: int, batch_size: int,
                        precision: str):
    """``evaluator(model) -> (metrics, predictions)`` for ``fine_tune``: every task's dev split with its head;
    metrics ``TASK/METRIC`` and ``task_mean``, predictions per task."""
    from ptmlab.train.evaluate import evaluate

    def run(model):
        per_task, preds = {}, {}
        for t, enc in devs.items():
            set_task(model, t)
            per_task[t], preds[t] = evaluate(model, enc, specs[t], pad_id, batch_size, precision)
        metrics = {f"{t}/{k}": v for t, m in per_task.items() for k, v in m.items()}
        metrics[MEAN] = task_mean(per_task, specs)
        return metrics, preds

    return run


def split_metrics(metrics: dict) -> dict[str, dict]:
    """``{"sst2/accuracy": x, ...}`` -> ``{"sst2": {"accuracy": x}, ...}`` (``task_mean`` left out)."""
    out: dict[str, dict] = {}
    for key, v in metrics.items():
        task, sep, name = key.partition("/")
        if sep:
            out.setdefault(task, {})[name] = v
    return out


def build_multitask_model(cfg, datas: dict[str, TaskData]):
    """``cfg.model`` with one head per task of ``datas`` (seed torch first: the heads start random)."""
    from ptmlab.train.lifecycle import build_task_model

    model = build_task_model(cfg, next(iter(datas.values())))
    add_task_heads(model, [task_entry(d) for d in datas.values()])
    return model


def multitask_sources(tokenizer, datas: dict[str, TaskData], cfg) -> dict:
    """``fine_tune``'s ``enc``: the task-sampled training source and every task's dev split."""
    from ptmlab.data.multitask import MultiTaskSource

    pad = tokenizer.pad_token_id or 0
    train = {t: encode_split(tokenizer, d.splits["train"], cfg.max_length) for t, d in datas.items()}
    devs = {t: encode_split(tokenizer, d.splits["dev"], cfg.max_length) for t, d in datas.items()}
    reg = {t: d.spec.kind == "regression" for t, d in datas.items()}
    return {"train": MultiTaskSource(train, pad, cfg.task_sampling, reg), "dev": MultiTaskSource(devs, pad),
            "devs": devs}


def write_task_predictions(run, datas: dict[str, TaskData], preds: dict) -> None:
    """predictions_dev_TASK.json for every task."""
    from ptmlab.data.taskdata import label_names
    from ptmlab.report.predictions import write_predictions

    for t, d in datas.items():
        if t in (preds or {}):
            write_predictions(run, f"dev_{t}", d.splits["dev"], preds[t], d.spec, label_names(d))


def run_multitask_finetune(cfg, resume: bool = False, command: str = "finetune", loss_fn=None) -> dict:
    """Fine-tune one encoder on every task of ``cfg.tasks`` (a head each); returns the summary (summary.json)."""
    from ptmlab.core.seed import set_seed
    from ptmlab.data.multitask import load_multitask_data, parse_tasks
    from ptmlab.models.zoo import load_tokenizer
    from ptmlab.train.evaluate import resolve_precision
    from ptmlab.train.lifecycle import fine_tune, finish_run, prepare_run
    from ptmlab.train.strategies import make_strategy

    names = parse_tasks(cfg.tasks)
    if getattr(cfg, "long_strategy", "truncate") != "truncate":
        raise PtmlabError(f"--long-strategy {cfg.long_strategy} reads one long-document task: multi-task runs "
                          f"truncate (drop --long-strategy or use --task)")
    session = prepare_run(cfg, command, resume=resume)
    datas = load_multitask_data(cfg, names)  # every input check before anything is written
    tokenizer = load_tokenizer(cfg.model)
    set_seed(cfg.seed)
    model = build_multitask_model(cfg, datas)
    run = session.open()
    enc = multitask_sources(tokenizer, datas, cfg)
    specs = {t: d.spec for t, d in datas.items()}
    evaluator = multitask_evaluator(enc.pop("devs"), specs, tokenizer.pad_token_id or 0, cfg.eval_batch_size,
                                    resolve_precision(cfg.precision))
    strategy = make_strategy(cfg)
    fit = fine_tune(model, tokenizer, TaskData(MULTITASK_SPEC, {}), cfg, run, enc=enc, strategy=strategy,
                    loss_fn=loss_fn or multitask_loss(names, [specs[t].kind for t in names]), resume=resume,
                    evaluator=evaluator, main_metric=MEAN, test=False)
    summary = {"task": "+".join(names), "tasks": names, "model": cfg.model, "strategy": cfg.strategy,
               **fit.train_summary(), "task_metrics": split_metrics(fit.dev_metrics),
               "task_sampling": cfg.task_sampling,
               "train_examples_per_task": {t: len(d.splits["train"]) for t, d in datas.items()},
               "heads": model_tasks(fit.model), "main_metric": MEAN}

    def save_extra(path):
        from ptmlab.train.finetune import save_strategy_files

        save_strategy_files(fit, strategy, cfg, tokenizer, path)
        write_task_predictions(run, datas, fit.dev_preds)

    return finish_run(session, fit, tokenizer, None, summary, extra_save=save_extra)


def evaluate_tasks(model_name: str, cfg, tasks: list[str] | None) -> dict:
    """``ptmlab evaluate`` on a multi-task model: ``tasks`` (default: every head) on ``cfg.split``, each with its
    head; ``task_mean`` over them."""
    import dataclasses

    from ptmlab.data.taskdata import load_task_data
    from ptmlab.models.zoo import load_model, load_tokenizer
    from ptmlab.train.evaluate import evaluate, resolve_precision

    heads = [t["name"] for t in recorded_tasks(model_name)]
    tasks = tasks or heads
    missing = [t for t in tasks if t not in heads]
    if missing:
        raise PtmlabError(f"model '{model_name}' has no head for task '{missing[0]}': its heads are "
                          f"{', '.join(heads)} (drop --task to score them all)")
    datas = {t: load_task_data(dataclasses.replace(cfg, task=t), need_train=False) for t in tasks}
    for t, d in datas.items():
        if d.split(cfg.split).label is None:
            raise PtmlabError(f"the '{cfg.split}' split of task '{t}' has no labels: evaluate 'dev'")
    model = load_model(model_name)
    tokenizer = load_tokenizer(model_name)
    pad, precision = tokenizer.pad_token_id or 0, resolve_precision(cfg.precision)
    per_task = {}
    for t, d in datas.items():
        set_task(model, t)
        enc = encode_split(tokenizer, d.split(cfg.split), cfg.max_length)
        metrics, _ = evaluate(model, enc, d.spec, pad, cfg.eval_batch_size, precision)
        per_task[t] = {"examples": len(enc), "metrics": metrics}
    result = {"model": model_name, "split": cfg.split, "tasks": per_task,
              MEAN: task_mean({t: r["metrics"] for t, r in per_task.items()}, {t: d.spec for t, d in datas.items()})}
    if len(tasks) == 1:
        result.update({"task": tasks[0], "examples": per_task[tasks[0]]["examples"],
                       "metrics": per_task[tasks[0]]["metrics"]})
    return result
