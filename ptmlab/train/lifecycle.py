"""The one run lifecycle of every command that trains: prepare -> fine_tune -> finish.

    session = prepare_run(cfg, "finetune", resume=resume)   # threads, rank, output/checkpoint check, seed
    ... load data, tokenizer, model (every input check happens here, before anything is written) ...
    run = session.open()                                      # the run directory + config.yaml (rank 0)
    fit = fine_tune(model, tokenizer, data, cfg, run, loss_fn=..., resume=resume)
    finish_run(session, fit, tokenizer, data, summary)        # model, predictions, summary, report, cleanup

``fine_tune`` takes a model in memory, so pruning recovery, distillation stages, the extraction copy and the
studies train through it without saving and re-reading models. ``FitResult`` carries the final dev (and test)
metrics and predictions; the evaluation made at the kept step is reused rather than repeated.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ptmlab.core.config import config_to_dict
from ptmlab.core.dist import is_main_process
from ptmlab.core.errors import PtmlabError
from ptmlab.core.rundir import RunDir, check_output_dir
from ptmlab.core.seed import configure_threads, set_seed
from ptmlab.data.encode import Encoded, encode_split
from ptmlab.data.labels import MULTI_LABEL, THRESHOLD_KEY
from ptmlab.data.loaders import TaskData
from ptmlab.data.taskdata import label_names
from ptmlab.data.tasks import SPAN_KINDS


@dataclass
class RunSession:
    """A run between its checks and its end: which process this is and where the run directory lives."""

    cfg: Any
    command: str
    resume: bool = False
    main: bool = True
    run: RunDir | None = None

    def open(self, config: dict | None = None) -> RunDir:
        """Create the run directory and write config.yaml (rank 0; a resumed run keeps its directory)."""
        if self.run is not None:
            return self.run
        if not self.main:
            self.run = RunDir(self.cfg.output)
        elif self.resume:
            self.run = RunDir.open(self.cfg.output)
        else:
            self.run = RunDir.create(self.cfg.output, getattr(self.cfg, "overwrite", False))
            self.run.write_config(config if config is not None else config_to_dict(self.cfg), self.command)
        return self.run


def prepare_run(cfg, command: str, *, resume: bool = False) -> RunSession:
    """Everything before the inputs are read: threads, rank, the output (or checkpoint) check, seeding."""
    configure_threads()
    main = is_main_process()
    if not getattr(cfg, "output", None):
        raise PtmlabError("no output directory: pass --output RUN_DIR")
    if resume:
        from ptmlab.train.checkpoint import find_checkpoint

        find_checkpoint(Path(cfg.output))  # no checkpoint: a clean error before any work
    elif main:
        check_output_dir(Path(cfg.output), getattr(cfg, "overwrite", False))
    set_seed(cfg.seed)
    return RunSession(cfg, command, resume, main)


def mark_stage(run: RunDir, stage: str, **info) -> None:
    """A ``{"stage": ...}`` row in metrics.jsonl as a stage starts, so a run that is killed says where it was."""
    if is_main_process():
        run.log({"stage": stage, "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **info})


def build_task_model(cfg, data: TaskData):
    """``cfg.model`` with a head for ``data``'s task (labels, regression), dropout and random-init options."""
    from ptmlab.models.zoo import load_model, with_revision

    spec = data.spec
    return load_model(with_revision(cfg.model, getattr(cfg, "revision", None)), num_labels=spec.num_labels,
                      regression=spec.kind == "regression", multi_label=spec.kind == MULTI_LABEL,
                      label_names=label_names(data), dropout=getattr(cfg, "dropout", None),
                      random_init=getattr(cfg, "random_init", False),
                      task_head=spec.kind if spec.kind in SPAN_KINDS else True)  # tags per token, QA spans


def encode_task(tokenizer, data: TaskData, max_length: int) -> dict[str, Encoded]:
    return {name: encode_split(tokenizer, split, max_length) for name, split in data.splits.items()}


@dataclass
class FitResult:
    model: Any  # the final model (best kept step when keep_best), strategy-finalised
    trainer: Any
    state: Any
    enc: dict[str, Encoded]
    precision: str
    trainable_params: int
    dev_metrics: dict = field(default_factory=dict)
    dev_preds: Any = None
    test_metrics: dict = field(default_factory=dict)
    test_preds: Any = None
    eval_seconds: float = 0.0

    def train_summary(self) -> dict:
        """The training numbers every run's summary.json carries."""
        st, tr = self.state, self.trainer
        return {
            "metrics": self.dev_metrics, "test_metrics": self.test_metrics,
            "train_seconds": round(st.train_seconds, 3), "eval_seconds": round(self.eval_seconds, 3),
            "train_examples": len(self.enc["train"]), "eval_examples": len(self.enc["dev"]),
            "steps": st.step, "epochs": round(st.step / tr.steps_per_epoch, 4),
            "train_examples_per_second": round(st.examples / max(st.train_seconds, 1e-9), 2),
            "train_tokens": st.tokens,
            "best_step": st.best_step, "stopped_early": st.stopped_early,
            "trainable_params": self.trainable_params,
            "params": sum(p.numel() for p in self.model.parameters()),
            "precision": self.precision, "world_size": tr.world,
        }


def fine_tune(model, tokenizer, data: TaskData, cfg, run: RunDir, *, enc: dict[str, Encoded] | None = None,
              loss_fn=None, loss_module=None, strategy=None, extra_metrics=None, resume: bool = False,
              test: bool | None = None, on_model=None, evaluator=None, main_metric: str | None = None) -> FitResult:
    """Train ``model`` (in memory) on ``data`` with the one training loop; evaluate on dev (and test).

    ``enc``: pre-encoded splits (a student's tokenizer, augmented training data); encoded from ``data`` otherwise.
    ``loss_fn`` / ``loss_module``: the loop's pluggable loss (default: the task loss). ``extra_metrics(preds)``
    adds numbers to each dev evaluation (distillation's agreement with its teacher). ``on_model(model)`` runs on the
    final model before its last evaluation (a distillation objective removes its hooks there).
    ``evaluator(model) -> (metrics, predictions)`` replaces the dev evaluation (the extraction copy scores agreement
    with its victim), with ``main_metric`` naming the number that picks the best step."""
    from ptmlab.train.evaluate import evaluate, resolve_precision
    from ptmlab.train.loop import Trainer
    from ptmlab.train.strategies import make_strategy, trainable_parameters

    spec = data.spec
    enc = dict(enc) if enc is not None else encode_task(tokenizer, data, cfg.max_length)
    pad_id = (tokenizer.pad_token_id or 0) if tokenizer is not None else 0
    precision = resolve_precision(cfg.precision)
    evals: dict[int, tuple] = {}  # step -> (metrics, predictions): the final model reuses its evaluation
    eval_time = [0.0]  # seconds spent evaluating: every dev evaluation and the test split

    def evaluate_dev(m):
        t = time.perf_counter()
        try:
            return _evaluate_dev(m)
        finally:
            eval_time[0] += time.perf_counter() - t

    def _evaluate_dev(m):
        if evaluator is not None:
            metrics, preds = evaluator(m)
        else:
            metrics, preds = evaluate(m, enc["dev"], spec, pad_id, cfg.eval_batch_size, precision,
                                      choose_threshold=True)  # multi-label: the dev threshold
        if extra_metrics is not None:
            metrics.update(extra_metrics(preds))
        evals[trainer.state.step] = (metrics, preds)
        return metrics

    strategy = strategy or make_strategy(cfg)
    strategy.before_fit(model, enc, cfg, run, pad_id, resume=resume)  # SetFit: its contrastive phase
    cut = None  # the last layer's feed-forward block on position 0 only, for losses that read nothing else
    if getattr(cfg, "first_token_only", False) and loss_module is None and all(
            f is None or getattr(f, "logits_only", False) for f in (loss_fn, evaluator)):
        from ptmlab.models.first_token import first_token_only

        cut = first_token_only(model)
    trainer = Trainer(model, enc["train"], cfg, run, pad_id, loss_fn=loss_fn, loss_module=loss_module,
                      strategy=strategy, evaluate_fn=evaluate_dev, main_metric=main_metric or spec.main_metric,
                      regression=spec.kind == "regression")
    if resume:
        trainer.resume()
    trainable = trainable_parameters(trainer.raw_model)
    try:
        state = trainer.train()
    finally:
        if cut is not None:
            cut.remove()
    final = trainer.final_model()
    if on_model is not None:
        on_model(final)
    final_step = state.best_step if cfg.keep_best and state.best_step is not None else state.step
    if final_step not in evals:  # kept before a resume: evaluated again (evaluate_dev files it under this step)
        evaluate_dev(final)
        final_step = trainer.state.step
    dev_metrics, dev_preds = evals[final_step]
    if spec.kind == MULTI_LABEL and "threshold" in dev_metrics:  # predict, serve and export read it from here
        setattr(final.config, THRESHOLD_KEY, float(dev_metrics["threshold"]))
    fit = FitResult(final, trainer, state, enc, precision, trainable, dict(dev_metrics), dev_preds)
    run_test = cfg.test if test is None else test
    if run_test and "test" in enc:  # unlabelled test splits still get predictions (GLUE submissions)
        t = time.perf_counter()
        fit.test_metrics, fit.test_preds = evaluate(final, enc["test"], spec, pad_id, cfg.eval_batch_size,
                                                    precision)
        eval_time[0] += time.perf_counter() - t
    fit.eval_seconds = eval_time[0]
    return fit


def finish_run(session: RunSession, fit: FitResult, tokenizer, data: TaskData | None, summary: dict, *,
               report=None, extra_save=None) -> dict:
    """Rank 0 saves the model (safetensors, with its tokenizer), predictions (with task ``data``), summary.json and
    report.html and removes the resumable state; every rank waits for it. Returns ``summary``."""
    from ptmlab.models.loader import save_model
    from ptmlab.report.predictions import write_predictions
    from ptmlab.report.run_report import write_run_report

    run = session.open()
    acc = fit.trainer.accelerator
    if acc.is_main_process:
        save_model(fit.model, tokenizer, run.path)
        if extra_save is not None:
            extra_save(run.path)
        labels = label_names(data) if data is not None else None
        if data is not None and fit.dev_preds is not None:
            write_predictions(run, "dev", data.splits["dev"], fit.dev_preds, data.spec, labels)
        if data is not None and fit.test_preds is not None:
            write_predictions(run, "test", data.splits["test"], fit.test_preds, data.spec, labels)
        if getattr(fit.model.config, THRESHOLD_KEY, None) is not None:  # multi-label: the dev-chosen threshold
            summary.setdefault("threshold", getattr(fit.model.config, THRESHOLD_KEY))
        run.write_summary(summary, data=data, model=fit.model)  # provenance: training data, hub commit
        from ptmlab.report.model_card import write_model_card
        write_model_card(run.path)
        (report or write_run_report)(run)
        fit.trainer.cleanup()
    acc.wait_for_everyone()
    return summary
