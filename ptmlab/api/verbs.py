"""The verbs of the Python API. Each builds the command's frozen config from keyword options (validated as the CLI
validates them) and calls the function the CLI command calls; the commands are thin layers over these."""

from __future__ import annotations

import contextlib
import dataclasses
import os
from pathlib import Path
from typing import Any

from ptmlab.api.errors import keyword_errors
from ptmlab.api.inputs import data_options, model_option, text_options, training_data
from ptmlab.api.run import Run
from ptmlab.core.config import build_config, load_yaml
from ptmlab.core.errors import PtmlabError
from ptmlab.core.provenance import api_call


def make_config(cls, config: Any = None, **options):
    """``cls`` from a base ``config`` (a config object, a dict or a YAML file) with ``options`` on top."""
    return build_config(cls, {**base_values(config), **options}, source="options")


def base_values(config: Any = None) -> dict:
    """The options of a base ``config``: a config object, a dict or a YAML file (None: none)."""
    if isinstance(config, str | os.PathLike):
        return dict(load_yaml(config))
    if dataclasses.is_dataclass(config):
        return dataclasses.asdict(config)
    if isinstance(config, dict):
        return dict(config)
    if config is not None:
        raise PtmlabError(f"config= takes a config object, a dict or a YAML file, not a {type(config).__name__}")
    return {}


def _call(verb: str, *args, **options) -> str:
    shown = [a if isinstance(a, str) else f"<{type(a).__name__}>" for a in args]
    parts = [repr(a) if not a.startswith("<") else a for a in shown]
    parts += [f"{k}={v!r}" for k, v in options.items()]
    return f"ptmlab.{verb}({', '.join(parts)})"


@contextlib.contextmanager
def _verb(verb: str, *args, **options):
    """The block of an API verb: its runs record the call, and its errors name keywords, not flags."""
    from ptmlab.train.args import DataArgs, ModelArgs, TrainArgs

    with keyword_errors(TrainArgs, DataArgs, ModelArgs), api_call(_call(verb, *args, **options)):
        yield


def _path(x) -> str:
    return str(x.path) if isinstance(x, Run) else str(x)


# -------------------------------------------------------------------------------------------------- finetune
def finetune_config(cfg, *, resume: bool = False, source: Any = None) -> dict:
    """Fine-tune with a built ``FinetuneConfig`` (``ptmlab finetune`` runs this); returns the summary. Long inputs
    (``--long-strategy`` other than truncate, or over 512 tokens) are planned by ``ptmlab.longseq``."""
    from ptmlab.train.finetune import run_finetune

    if cfg.long_strategy == "truncate" and cfg.max_length <= 512:
        return run_finetune(cfg, resume=resume, source=source)
    if source is not None:
        raise PtmlabError(f"--long-strategy {cfg.long_strategy} reads its data from files: write the data to a file "
                          f"and pass it as data")
    from ptmlab.longseq.runs import plan_long_finetune, print_notes

    plan = plan_long_finetune(cfg, resume=resume)
    print_notes(plan.notes)
    return run_finetune(plan.cfg, resume=resume, loss_fn=plan.loss_fn, evaluator=plan.evaluator)


def finetune(model: Any = "minilm", data: Any = None, *, tokenizer: Any = None, config: Any = None,
             resume: bool = False, **options) -> Run:
    """Fine-tune ``model`` on ``data`` into ``output``; returns the ``Run``.

    ``model``: zoo name, directory, hub id (``NAME``, ``OWNER/NAME``, ``@REVISION``) or a transformers model with
    its tokenizer (``(model, tokenizer)`` or ``tokenizer=``). ``data``: a Dataset/DatasetDict, DataFrame, list of
    dicts, data file, ``hf:NAME`` or task name (or ``task=``/``train_file=`` options). ``options``: the flags of
    ``ptmlab finetune`` (``epochs=1``, ``output="runs/x"``, ``strategy="lora"``, ...); ``config``: a base config
    (``FinetuneConfig``, dict or YAML file). ``resume=True`` continues the killed run in ``output``."""
    from ptmlab.core.rundir import RunDir
    from ptmlab.train.args import FinetuneConfig

    with model_option(model, tokenizer) as (name, label), _verb("finetune", model, data, **options):
        if resume:
            if not options.get("output"):
                raise PtmlabError("resume=True needs output= (the run directory to continue)")
            cfg = RunDir.resume_config(options["output"], FinetuneConfig, "finetune")
            opts, source = data_options(data)
        else:
            opts, source = training_data(data, options)
            cfg = make_config(FinetuneConfig, config, **{"model": name, **opts, **options})
        finetune_config(cfg, resume=resume, source=source)
        if label is not None:  # the record names the model object, not the temporary directory it was read from
            _amend_record(cfg.output, {"model": label}, {"model": label})
    return Run(cfg.output)


def _amend_record(output: str, config_changes: dict, summary_changes: dict | None = None) -> None:
    """Rewrite what a run recorded about an input given as an object (config.yaml, summary.json, model card)."""
    from ptmlab.core.rundir import RunDir

    run = RunDir(output)
    config = run.read_config()
    command = config.pop("command", "finetune")
    run.write_config({**config, **config_changes}, command)
    if summary_changes:
        run.write_summary({**run.summary(), **summary_changes})
    if run.file("README.md").is_file():  # the model card names the base model too
        from ptmlab.report.model_card import write_model_card

        write_model_card(run.path)


# -------------------------------------------------------------------------------------------------- predict
def predict(model: Any, data: Any, *, task: str | None = None, output: str | None = None, **options):
    """Predictions of a run (``Run`` or directory) for ``data``: a string, a list of strings, a data file, a
    DataFrame, Dataset or list of dicts (read with ``text_col``/``text_pair_col``, the run's by default). Returns
    one dict per example; with ``output`` also writes ``predictions.jsonl`` (or ``format="csv"``) there."""
    from ptmlab.train.predict import PredictConfig

    with _verb("predict", model, data, task=task, output=output, **options):
        source = None
        if isinstance(data, str | os.PathLike) and Path(str(data)).expanduser().is_file():
            options["input"] = str(data)
        else:
            source = data
        cfg = make_config(PredictConfig, None, task=task, output=output, **options)
        return predict_with_config(_path(model), cfg, source=source)


def predict_with_config(run_dir: str, cfg, source: Any = None) -> list[dict]:
    """``ptmlab predict`` with a built ``PredictConfig`` (the command runs this)."""
    from ptmlab.core.seed import configure_threads
    from ptmlab.train.predict import predict_config

    configure_threads()
    return predict_config(run_dir, cfg, source=source)


# -------------------------------------------------------------------------------------------------- the others
def evaluate(model: Any, data: Any = None, **options) -> dict:
    """Metrics of a run or model on a task's split: the run's own task and data unless ``data``/``task`` say
    otherwise (the options of ``ptmlab evaluate``)."""
    from ptmlab.api.evaluation import EvaluateConfig, evaluate_config, run_data_defaults
    from ptmlab.core.seed import configure_threads
    from ptmlab.train.multitask import recorded_tasks

    configure_threads()
    name = _path(model)
    with _verb("evaluate", model, data, **options):
        opts, source = data_options(data)
        if source is not None:
            opts.setdefault("task", options.get("task", "custom"))
            if not isinstance(source, dict) and type(source).__name__ != "DatasetDict":
                source = {"validation": source}  # one table of examples: all of it is evaluated
        given = {**opts, **options}
        defaults = {} if source is not None or recorded_tasks(name) else run_data_defaults(name, given)
        cfg = make_config(EvaluateConfig, None, **{**defaults, **given})
        return evaluate_config(name, cfg, task_given="task" in options, source=source)


def distill(teacher: Any, data: Any = None, *, student: str | None = None, config: Any = None, **options) -> Run:
    """Distil ``teacher`` (a fine-tuned ``Run`` or run directory) into ``student`` on ``data`` (what ``finetune``
    takes: a Dataset/DatasetDict, DataFrame, list of dicts, data file, ``hf:NAME`` or task name); returns the Run."""
    from ptmlab.distill.config import DistillConfig
    from ptmlab.distill.pipeline import run_distill

    with _verb("distill", teacher, data, student=student, **options):
        opts, source = training_data(data, options)
        if student is not None:
            opts["student"] = student
        cfg = make_config(DistillConfig, config, teacher=_path(teacher), **opts, **options)
        run_distill(cfg, source=source)
    return Run(cfg.output)


def prune(model: Any, data: Any = None, *, config: Any = None, **options) -> Run:
    """Prune heads and FFN neurons of ``model`` (a Run, directory or zoo name), scored and recovered on ``data``
    (any data ``finetune`` takes); returns the Run."""
    from ptmlab.compress.prune import PruneConfig, run_prune

    with _verb("prune", model, data, **options):
        opts, source = training_data(data, options)
        cfg = make_config(PruneConfig, config, model=_path(model), **opts, **options)
        run_prune(cfg, source=source)
    return Run(cfg.output)


def compress(model: Any, data: Any = None, *, config: Any = None, **options) -> Run:
    """The compression pipeline (``ptmlab compress``) on ``model``, measured and recovered on ``data`` (any data
    ``finetune`` takes); returns the Run."""
    from ptmlab.compress.pipeline import CompressConfig, run_compress

    with _verb("compress", model, data, **options):
        opts, source = training_data(data, options)
        cfg = make_config(CompressConfig, config, model=_path(model), **opts, **options)
        run_compress(cfg, source=source)
    return Run(cfg.output)


def export(model: Any, output: str, *, format: str = "transformers", **options) -> Path:  # noqa: A002
    """Export a run or model (``ptmlab export``) to ``output``; returns the export directory."""
    from ptmlab.export.run import ExportConfig, export_model

    with _verb("export", model, output=output, format=format, **options):
        cfg = make_config(ExportConfig, None, model=_path(model), output=str(output), format=format, **options)
        info = export_model(cfg)
    return Path(info["output"])


def optimize(model: Any, *, max_loss: float | None = None, output: str | None = None, resume: bool = False,
             config: Any = None, **options) -> Run:
    """The fastest (``objective="latency"``, or highest-throughput, or smallest) model within ``max_loss`` points of
    the dev score of ``model`` (a fine-tuned ``Run`` or run directory), searched on this machine into ``output``
    (``ptmlab optimize``'s options: ``batch=[1, 32]``, ``budget="20m"``, ``backends=[...]``, ...); returns the Run of
    ``output``, whose model is the winner. ``resume=True`` continues a killed search in ``output``."""
    if max_loss is not None:
        options["max_loss"] = max_loss
    if output is not None:
        options["output"] = str(output)
    with _verb("optimize", model, **options):
        cfg = optimize_config(_path(model), {**base_values(config), **options}, resume=resume)
    return Run(cfg.output)


def optimize_config(model: str, given: dict, config_file: str | None = None, resume: bool = False):
    """``ptmlab optimize`` with the options given (the command runs this): a new search, or with ``resume`` the one
    in ``given["output"]`` continued; returns the config it ran with."""
    from ptmlab.optimize.config import OptimizeConfig
    from ptmlab.optimize.run import resume_config, run_optimize

    values = {**(load_yaml(config_file) if config_file else {}), **given}
    if resume and values.get("overwrite"):
        raise PtmlabError("--resume continues the search in --output and --overwrite starts it again: pass one")
    if resume:
        if not values.get("output"):
            raise PtmlabError("--resume needs --output (the search to continue)")
        cfg = resume_config(values["output"], {**values, "model": model})
    else:
        cfg = build_config(OptimizeConfig, {**values, "model": model}, source="options")
    run_optimize(cfg, resume=resume)
    return cfg


def pretrain(model: Any = None, data: Any = None, *, text_col: str = "text", config: Any = None,
             **options) -> Run:
    """Pre-train (``ptmlab pretrain``) from ``model`` (continued pre-training; None: from scratch) on ``data``;
    returns the Run. ``data``: a text file or folder or a list of them (the ``files`` option), a list of strings (one
    document each), a Dataset, DataFrame or list of dicts (one document per row of ``text_col``), or a
    DatasetDict, ``save_to_disk`` directory or ``hf:NAME[:CONFIG]`` (``train_split`` trained on, its evaluation
    split held out for the eval loss)."""
    from ptmlab.pretrain.config import PretrainConfig
    from ptmlab.pretrain.run import run_pretrain

    splits = {k: options.pop(k) for k in ("train_split", "eval_split") if k in options}
    with _verb("pretrain", model, data, **options), text_options(data, text_col, **splits) as (opts, label):
        if model is not None:
            opts["model"] = _path(model)
        cfg = make_config(PretrainConfig, config, **opts, **options)
        run_pretrain(cfg)
        if label is not None:  # the record names the data, not the temporary files it was read from
            _amend_record(cfg.output, {k: [label] for k in ("files", "valid_files") if k in opts})
    return Run(cfg.output)


def study(name: str, **options) -> dict:
    """Run the registered study ``name`` with its options (``budget="small"``, ``output=...``); returns its
    results.json."""
    import json

    from ptmlab.studies import load_all

    argv: list[str] = []
    for k, v in options.items():
        flag = "--" + k.replace("_", "-")
        if v is True:
            argv.append(flag)
        elif v is False:
            argv.append("--no-" + k.replace("_", "-"))
        elif v is not None:
            argv += [flag, ",".join(map(str, v)) if isinstance(v, list | tuple) else str(v)]
    with _verb("study", name, **options):
        rc = load_all().get(name)(argv)
    if rc:
        raise PtmlabError(f"study '{name}' failed (exit code {rc})")
    out = options.get("output")
    results = Path(str(out)) / "results.json" if out else None
    return json.loads(results.read_text()) if results is not None and results.is_file() else {}
