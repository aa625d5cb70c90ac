"""``ptmlab evaluate``: score a run directory or any model on a task's dev (and test) split."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from ptmlab.core.config import add_config_args, opt, resolve_config
from ptmlab.train.args import DataArgs, LongArgs


@dataclass(frozen=True)
class EvaluateConfig(LongArgs, DataArgs):
    split: str = opt("dev", "split to evaluate: dev, test or train")
    eval_batch_size: int = opt(128, "batch size")
    precision: str = opt("auto", "fp32, bf16 (autocast), or auto: as finetune, bf16 where the hardware has fast bf16 "
                                 "(so a run's dev metric is reproduced on the machine that trained it), else fp32",
                         choices=["auto", "fp32", "bf16"])
    seed: int = opt(42, "seed for --max-eval subsets")
    output: str | None = opt(None, "write the metrics as JSON to this file")

    def validate(self) -> None:
        self.validate_data()
        self.validate_long()


def register(sub) -> None:
    p = sub.add_parser("evaluate", help="evaluate a run directory or model on a task")
    p.add_argument("model", metavar="RUN_DIR_OR_MODEL")
    p.add_argument("--config", help="YAML file with options")
    p.add_argument("--trust-pickle", action="store_true", help="load the model's pickle checkpoint "
                   "(pytorch_model.bin) when it has no safetensors: only for a folder you trust")
    add_config_args(p, EvaluateConfig)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import json

    from ptmlab.core.errors import PtmlabError
    from ptmlab.core.io import atomic_write_json
    from ptmlab.core.seed import configure_threads
    from ptmlab.data.encode import encode_split
    from ptmlab.data.taskdata import label_names, load_task_data
    from ptmlab.longseq.runs import check_long_model, long_evaluator
    from ptmlab.models.zoo import load_model, load_tokenizer
    from ptmlab.train.evaluate import evaluate, resolve_precision
    from ptmlab.train.multitask import evaluate_tasks, recorded_tasks

    configure_threads()
    if args.trust_pickle:
        from ptmlab.models.loader import trust_pickle

        trust_pickle(args.model)
    cfg = resolve_config(EvaluateConfig, args, args.config)
    if recorded_tasks(args.model):  # a multi-task run: --task picks a head, none scores every head
        result = evaluate_tasks(args.model, cfg, [cfg.task] if "task" in vars(args) else None)
        if cfg.output:
            atomic_write_json(cfg.output, result)
        print(json.dumps(result, indent=2))
        return 0
    data = load_task_data(cfg, need_train=False)
    split = data.split(cfg.split)
    if all(getattr(split, f, None) is None for f in ("label", "tags", "answers")):  # labels, tags or answers
        raise PtmlabError(f"the '{cfg.split}' split of task '{data.spec.name}' has no labels: evaluate 'dev'")
    model = load_model(args.model)
    spec = data.spec
    names = label_names(data)
    if model.config.num_labels != spec.num_labels:
        raise PtmlabError(f"model '{args.model}' has {model.config.num_labels} outputs but task '{spec.name}' "
                          f"needs {spec.num_labels}: evaluate it on the task it was trained for")
    saved = [model.config.id2label[i] for i in range(model.config.num_labels)]
    if names and saved != names and not all(s.startswith("LABEL_") for s in saved):
        raise PtmlabError(f"model labels {saved} differ from task labels {names}: use the matching task")
    tokenizer = load_tokenizer(args.model)
    check_long_model(model, cfg, data)  # the strategy fits the model and --max-length (one-line errors)
    enc = encode_split(tokenizer, split, cfg.max_length)
    if cfg.long_strategy == "truncate":
        metrics, _ = evaluate(model, enc, spec, tokenizer.pad_token_id or 0, cfg.eval_batch_size,
                              resolve_precision(cfg.precision))
    else:
        metrics, _ = long_evaluator(enc, spec, cfg, resolve_precision(cfg.precision))(model)
    result = {"model": args.model, "task": spec.name, "split": cfg.split, "examples": len(split),
              "long_strategy": cfg.long_strategy, "metrics": metrics}
    if cfg.output:
        atomic_write_json(cfg.output, result)
    print(json.dumps(result, indent=2))
    return 0
