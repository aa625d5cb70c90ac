"""Fine-tune a model on a task: data -> model -> the training loop -> run directory with model and report."""

from __future__ import annotations

import dataclasses

from ptmlab.core.seed import set_seed
from ptmlab.data.taskdata import label_names, load_task_data
from ptmlab.train.args import FinetuneConfig
from ptmlab.train.lifecycle import build_task_model, encode_task, fine_tune, finish_run, prepare_run
from ptmlab.train.strategies import make_strategy


def apply_recipes(cfg: FinetuneConfig) -> FinetuneConfig:
    """The ULMFiT recipe fills in its schedule and discriminative rates unless the user set them; SetFit its head
    phase's rate and steps (``train.setfit.setfit_recipe``)."""
    if cfg.strategy == "ulmfit":
        changes = {}
        if cfg.schedule == "linear":
            changes["schedule"] = "stlr"
        if cfg.llrd == 1.0:
            changes["llrd"] = round(1 / 2.6, 4)
        cfg = dataclasses.replace(cfg, **changes)
    if cfg.strategy == "setfit":  # the head phase's rate and steps, unless the user set them
        from ptmlab.train.setfit import setfit_recipe

        cfg = setfit_recipe(cfg)
    return cfg


STATIC_STUDENT_LR = 3e-3  # a token table and a fresh linear head: best of 1e-3..3e-2 on SST-2 (docs/distillation.md)


def static_student_lr(cfg, model):
    """A static-embedding student (``--student static``, ``distill_static``) trains at 3e-3 when ``--lr`` is left at
    its default (5e-5 is for transformer layers: a table and a fresh head barely move); an explicit rate stays."""
    if getattr(getattr(model, "config", None), "ptmlab_static", None) is None:
        return cfg
    default = next(f.default for f in dataclasses.fields(cfg) if f.name == "lr")
    return dataclasses.replace(cfg, lr=STATIC_STUDENT_LR) if cfg.lr == default else cfg


def run_finetune(cfg: FinetuneConfig, resume: bool = False, command: str = "finetune", loss_fn=None,
                 evaluator=None, source=None) -> dict:
    """Run (or resume) a fine-tuning job; returns the summary written to summary.json.

    ``loss_fn(model, batch) -> per-example losses`` replaces the task loss (recovery with a teacher, say);
    ``evaluator(model) -> (metrics, predictions)`` replaces the dev evaluation (long documents read in chunks).
    ``source``: data in memory (a Dataset, DatasetDict, DataFrame, list of dicts) instead of what ``cfg`` names."""
    from ptmlab.models.zoo import load_tokenizer, with_revision

    cfg = apply_recipes(cfg)
    if getattr(cfg, "tasks", None):  # several tasks, one head each (ptmlab.train.multitask)
        from ptmlab.core.errors import PtmlabError
        from ptmlab.train.multitask import run_multitask_finetune

        if source is not None:
            raise PtmlabError("multi-task fine-tuning (tasks=...) reads each task by name: drop the data object")
        if cfg.strategy == "setfit":
            raise PtmlabError("--strategy setfit trains one task: pass --task, not --tasks")

        return run_multitask_finetune(cfg, resume=resume, command=command, loss_fn=loss_fn)
    if getattr(cfg, "task_kind", None) == "embedding":  # a sentence embedder (ptmlab.train.embedding)
        from ptmlab.train.embedding import run_embedding_finetune

        if loss_fn is not None or evaluator is not None:
            from ptmlab.core.errors import PtmlabError

            raise PtmlabError("--task-kind embedding trains with its own loss and evaluation: drop loss_fn/evaluator")
        return run_embedding_finetune(cfg, resume=resume, command=command, source=source)
    session = prepare_run(cfg, command, resume=resume)
    data = load_task_data(cfg, source=source)  # all input checks happen before anything is written
    tokenizer = load_tokenizer(with_revision(cfg.model, getattr(cfg, "revision", None)))
    set_seed(cfg.seed)
    model = build_task_model(cfg, data)
    cfg = session.cfg = static_student_lr(cfg, model)
    strategy = make_strategy(cfg)
    strategy.check(data, model)
    random_base = _random_lora_base(cfg, model)
    enc = encode_task(tokenizer, data, cfg.max_length)  # encoding checks too (a QA window too short for a question)
    run = session.open()
    fit = fine_tune(model, tokenizer, data, cfg, run, loss_fn=loss_fn, strategy=strategy, resume=resume,
                     evaluator=evaluator, enc=enc)
    summary = {"task": data.spec.name, "model": cfg.model, "strategy": cfg.strategy, **fit.train_summary(),
               "labels": label_names(data), "main_metric": data.spec.main_metric}
    if getattr(strategy, "summary", None):
        summary["setfit"] = strategy.summary

    return finish_run(session, fit, tokenizer, data, summary,
                      extra_save=lambda path: save_strategy_files(fit, strategy, cfg, tokenizer, path, random_base))


def save_strategy_files(fit, strategy, cfg, tokenizer, path, random_base=None) -> None:
    """What a strategy writes beside the model: a LoRA run its adapter as kept before the merge (the saved model
    has none), in PEFT's format; adapters their weights."""
    from ptmlab.models.zoo import with_revision

    adapter = getattr(fit.trainer, "lora_adapter", None)
    if adapter is not None:
        adapter.save(path / "lora", with_revision(cfg.model, getattr(cfg, "revision", None)),
                     base_model=random_base, tokenizer=tokenizer)
    else:
        strategy.extra_save(fit.trainer.raw_model, path)


def _random_lora_base(cfg, model):
    """A copy of a LoRA run's base where its weights are random (``tiny``, ``--random-init``): no name loads them
    again, so the adapter is saved with it. None otherwise."""
    if cfg.strategy != "lora":
        return None
    import copy

    from ptmlab.models.adapters import lora_base

    return copy.deepcopy(model) if lora_base(cfg.model, getattr(cfg, "random_init", False))[2] else None
