"""``ptmlab demo``: the guided tour on built-in defaults. Fine-tunes minilm on the built-in tweets task, evaluates
on the test split, adds distilled, pruned and quantized variants timed side by side (about 6 minutes on 2 CPU cores
in all) and writes a report with the loss curve, confusion matrix, per-class scores and the variants table."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from ptmlab.core.config import add_config_args, build_config, opt, resolve_config

QUICK_EXAMPLES = 1000


@dataclass(frozen=True)
class DemoConfig:
    output: str = opt("runs/demo", "run directory")
    model: str = opt("minilm", "model to fine-tune")
    max_train: int | None = opt(16000, "training examples (of the ~29,800 tweets in the train split)")
    max_eval: int | None = opt(None, "dev examples (default: all)")
    epochs: float = opt(1.0, "epochs")
    max_length: int = opt(64, "max tokens (tweets are short)")
    lr: float = opt(5e-5, "learning rate")
    seed: int = opt(42, "seed")
    overwrite: bool = opt(False, "replace an earlier demo run")
    quick: bool = opt(False, "a short tour (a few minutes): at most 1,000 training and 500 dev examples per stage")


def register(sub) -> None:
    p = sub.add_parser("demo", help="fine-tune minilm on the built-in tweets task and write a report")
    p.add_argument("--config", help="YAML file with options")
    add_config_args(p, DemoConfig)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import dataclasses

    from ptmlab.train.args import FinetuneConfig
    from ptmlab.train.finetune import run_finetune

    d = resolve_config(DemoConfig, args, args.config)
    if d.quick:
        d = dataclasses.replace(d, max_train=min(d.max_train or QUICK_EXAMPLES, QUICK_EXAMPLES),
                                max_eval=min(d.max_eval or QUICK_EXAMPLES // 2, QUICK_EXAMPLES // 2))
    print(f"ptmlab demo: fine-tuning {d.model} on the built-in 'tweets' task "
          f"({d.max_train or 'all'} examples, {d.epochs:g} epoch(s)), then distilled, pruned and quantized variants; "
          f"about {2 if d.quick else 6} minutes on 2 cores")
    options = {k: v for k, v in dataclasses.asdict(d).items() if k != "quick"}
    cfg = build_config(FinetuneConfig, {**options, "task": "tweets", "batch_size": 32, "eval_steps": 150,
                                        "test": True}, source="demo")
    summary = run_finetune(cfg, command="demo")
    from pathlib import Path

    from ptmlab.compress import demo_stages  # noqa: F401  (registers the pruned and quantized stages)
    from ptmlab.core.rundir import RunDir
    from ptmlab.data.loaders import load_task
    from ptmlab.distill import demo_stage  # noqa: F401  (registers the distilled stage)
    from ptmlab.models.zoo import load_model, load_tokenizer
    from ptmlab.optimize import demo_stage as _optimized  # noqa: F401  (registers the optimized stage, full demo)
    from ptmlab.report.run_report import write_run_report
    from ptmlab.train.demo import DemoContext, run_stages, variants_section

    run_dir = Path(d.output)
    ctx = DemoContext(d, run_dir, summary)
    texts = load_task("tweets").splits["test"].text[:64]
    ctx.variants.append(ctx.variant(f"{d.model} fine-tuned", load_model(str(run_dir)), load_tokenizer(str(run_dir)),
                                    summary["test_metrics"], run_dir))
    run_stages(ctx)
    print("timing every variant side by side (batch 1 and 32, round-robin)")
    ctx.time_variants(texts)
    write_run_report(RunDir(run_dir), [variants_section(ctx)])
    dev = ", ".join(f"{k}={v:.4f}" for k, v in summary["metrics"].items())
    test = ", ".join(f"{k}={v:.4f}" for k, v in summary["test_metrics"].items())
    print(f"dev: {dev}")
    print(f"test: {test}")
    print(f"train: {summary['train_seconds']:.0f}s at {summary['train_examples_per_second']:.0f} examples/s")
    from ptmlab.report.table import print_table

    print_table(ctx.variants)
    print(f"report: {run_dir / 'report.html'}")
    return 0
