"""Fine-tune a model on a task: data -> model -> the training loop -> run directory with model and report."""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path

import numpy as np

from ptmlab.core.config import config_to_dict
from ptmlab.core.errors import PtmlabError
from ptmlab.core.rundir import RunDir, check_output_dir
from ptmlab.core.seed import configure_threads, set_seed
from ptmlab.data.encode import Encoded, encode_split
from ptmlab.data.loaders import TaskData, load_task, subset
from ptmlab.train.args import FinetuneConfig


def load_task_data(cfg) -> TaskData:
    """The task with --max-train/--max-eval applied; a dev split carved from train when there is none."""
    data = load_task(cfg.task, cfg.glue_dir, cfg.train_file, cfg.dev_file, cfg.test_file, cfg.text_col,
                     cfg.text_pair_col, cfg.label_col, cfg.label_kind)
    if "dev" not in data.splits:
        train = data.splits["train"]
        if len(train) < 10:
            raise PtmlabError(f"the training data has {len(train)} examples and there is no --dev-file: "
                              f"give a dev file or more data")
        import random

        idx = list(range(len(train)))
        random.Random(1234).shuffle(idx)
        cut = max(1, len(idx) // 10)
        data.splits["dev"] = train.select(idx[:cut])
        data.splits["train"] = train.select(idx[cut:])
    data.splits["train"] = subset(data.splits["train"], cfg.max_train, cfg.seed)
    data.splits["dev"] = subset(data.splits["dev"], cfg.max_eval, cfg.seed)  # the test split stays whole
    if len(data.splits["train"]) == 0:
        raise PtmlabError("the training split is empty: check --max-train and the data files")
    return data


def apply_recipes(cfg: FinetuneConfig) -> FinetuneConfig:
    """The ULMFiT recipe fills in its schedule and discriminative rates unless the user set them."""
    if cfg.strategy == "ulmfit":
        changes = {}
        if cfg.schedule == "linear":
            changes["schedule"] = "stlr"
        if cfg.llrd == 1.0:
            changes["llrd"] = round(1 / 2.6, 4)
        cfg = dataclasses.replace(cfg, **changes)
    return cfg


def label_names(data: TaskData) -> list[str] | None:
    spec = data.spec
    if spec.kind == "regression":
        return None
    return list(spec.extra.get("label_names") or spec.labels)


def build_model(cfg, data: TaskData):
    from ptmlab.models.zoo import load_model

    spec = data.spec
    model = load_model(cfg.model, num_labels=spec.num_labels, regression=spec.kind == "regression",
                       label_names=label_names(data), dropout=getattr(cfg, "dropout", None),
                       random_init=getattr(cfg, "random_init", False))
    return model


def run_finetune(cfg: FinetuneConfig, resume: bool = False, command: str = "finetune", loss_fn=None) -> dict:
    """Run (or resume) a fine-tuning job; returns the summary written to summary.json.

    ``loss_fn(model, batch) -> per-example losses`` replaces the task loss (recovery with a teacher, say)."""
    from ptmlab.models.loader import save_model
    from ptmlab.models.zoo import load_tokenizer
    from ptmlab.report.run_report import write_run_report
    from ptmlab.train.evaluate import evaluate
    from ptmlab.train.loop import Trainer
    from ptmlab.train.strategies import make_strategy, trainable_parameters

    configure_threads()
    cfg = apply_recipes(cfg)
    main_process = int(os.environ.get("RANK", "0")) == 0  # under torchrun only rank 0 writes
    if not resume:
        if not cfg.output:
            raise PtmlabError("no output directory: pass --output RUN_DIR")
        if main_process:
            check_output_dir(Path(cfg.output), cfg.overwrite)
    set_seed(cfg.seed)
    data = load_task_data(cfg)  # all input checks happen before anything is written
    spec = data.spec
    tokenizer = load_tokenizer(cfg.model)
    set_seed(cfg.seed)
    model = build_model(cfg, data)
    if resume or not main_process:
        run = RunDir(cfg.output) if not main_process else RunDir.open(cfg.output)
    else:
        run = RunDir.create(cfg.output, cfg.overwrite)
        run.write_config(config_to_dict(cfg), command)
    pad_id = tokenizer.pad_token_id or 0
    enc: dict[str, Encoded] = {name: encode_split(tokenizer, split, cfg.max_length)
                               for name, split in data.splits.items()}
    from ptmlab.train.evaluate import resolve_precision

    precision = resolve_precision(cfg.precision)

    evals: dict[int, tuple] = {}  # step -> (metrics, predictions): the final model reuses its evaluation

    def evaluate_fn(m):
        metrics, preds = evaluate(m, enc["dev"], spec, pad_id, cfg.eval_batch_size, precision)
        evals[trainer.state.step] = (metrics, preds)
        return metrics

    strategy = make_strategy(cfg)
    trainer = Trainer(model, enc["train"], cfg, run, pad_id, loss_fn=loss_fn, strategy=strategy,
                      evaluate_fn=evaluate_fn, main_metric=spec.main_metric, regression=spec.kind == "regression")
    if resume:
        trainer.resume()
    trainable = trainable_parameters(trainer.raw_model)
    state = trainer.train()
    model = trainer.final_model()
    final_step = state.best_step if cfg.keep_best and state.best_step is not None else state.step
    t_eval = time.perf_counter()
    if final_step in evals:
        dev_metrics, dev_preds = evals[final_step]
    else:
        dev_metrics, dev_preds = evaluate(model, enc["dev"], spec, pad_id, cfg.eval_batch_size, precision)
    eval_seconds = time.perf_counter() - t_eval
    test_metrics, test_preds = {}, None
    if cfg.test and "test" in enc:
        test_metrics, test_preds = evaluate(model, enc["test"], spec, pad_id, cfg.eval_batch_size, precision)
    summary = {
        "task": spec.name,
        "model": cfg.model,
        "strategy": cfg.strategy,
        "metrics": dev_metrics,
        "test_metrics": test_metrics,
        "train_seconds": round(state.train_seconds, 3),
        "eval_seconds": round(eval_seconds, 3),
        "train_examples": len(enc["train"]),
        "eval_examples": len(enc["dev"]),
        "steps": state.step,
        "epochs": round(state.step / trainer.steps_per_epoch, 4),
        "train_examples_per_second": round(state.examples / max(state.train_seconds, 1e-9), 2),
        "best_step": state.best_step,
        "stopped_early": state.stopped_early,
        "trainable_params": trainable,
        "params": sum(p.numel() for p in model.parameters()),
        "precision": precision,
        "world_size": trainer.world,
        "labels": label_names(data),
        "main_metric": spec.main_metric,
    }
    if trainer.accelerator.is_main_process:
        save_model(model, tokenizer, run.path)
        strategy.extra_save(trainer.raw_model, run.path)
        write_predictions(run, "dev", data.splits["dev"], dev_preds, spec, label_names(data))
        if test_preds is not None:
            write_predictions(run, "test", data.splits["test"], test_preds, spec, label_names(data))
        run.write_summary(summary)
        write_run_report(run)
        trainer.cleanup()
    trainer.accelerator.wait_for_everyone()
    return summary


def write_predictions(run: RunDir, split_name: str, split, preds: np.ndarray, spec, labels) -> None:
    """Predictions next to the gold labels (used by the report's confusion matrix)."""
    from ptmlab.core.io import atomic_write_json

    gold = split.label
    atomic_write_json(run.file(f"predictions_{split_name}.json"), {
        "labels": labels, "kind": spec.kind,
        "pred": [float(p) if spec.kind == "regression" else int(p) for p in preds],
        "gold": list(gold) if gold is not None else None,
        "ids": [i if isinstance(i, int | float) else str(i) for i in split.ids],
    })
