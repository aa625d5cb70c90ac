"""``ptmlab finetune``: fine-tune a model on a task into a run directory (``--resume RUN`` continues one)."""

from __future__ import annotations

import argparse

from ptmlab.core.cli_parser import config_command
from ptmlab.core.config import resolve_config
from ptmlab.core.errors import PtmlabError
from ptmlab.train.args import FinetuneConfig


def register(sub) -> None:
    p = config_command(sub, "finetune", FinetuneConfig, run, help="fine-tune a model on a task",
                       description="Fine-tune a pretrained encoder on a task; writes a run directory.")
    p.add_argument("--resume", metavar="RUN_DIR", help="continue a killed run exactly where it stopped")


def run(args: argparse.Namespace) -> int:
    from ptmlab.api.verbs import finetune_config

    if args.resume:
        from ptmlab.core.cli_parser import refuse_with_resume
        from ptmlab.core.rundir import RunDir

        refuse_with_resume(args, FinetuneConfig)
        cfg = RunDir.resume_config(args.resume, FinetuneConfig, "finetune")
    else:
        cfg = resolve_config(FinetuneConfig, args, args.config)
        if not cfg.output:
            raise PtmlabError("no output directory: pass --output RUN_DIR")
    summary = finetune_config(cfg, resume=bool(args.resume))  # the Python API's ptmlab.finetune runs the same
    print_summary(summary, cfg.output)
    return 0


def print_summary(summary: dict, output: str) -> None:
    import os

    if int(os.environ.get("RANK", "0")) != 0:
        return
    metrics = ", ".join(f"{k}={v:.4f}" for k, v in summary["metrics"].items())
    print(f"{summary['task']} / {summary['model']} ({summary['strategy']}): dev {metrics}; "
          f"{summary['train_seconds']:.1f}s train, {summary['train_examples_per_second']:.1f} ex/s")
    print(f"run directory: {output}")
