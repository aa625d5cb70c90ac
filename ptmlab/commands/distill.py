"""``ptmlab distill``: distil a teacher (run directory or model) into a student run directory."""

from __future__ import annotations

import argparse

from ptmlab.core.cli_parser import config_command
from ptmlab.core.config import resolve_config
from ptmlab.distill.config import DistillConfig


def register(sub) -> None:
    p = config_command(sub, "distill", DistillConfig, run,
                       help="distil a teacher into a smaller student (soft targets, TinyBERT, MiniLM, PKD)",
                       description="Knowledge distillation: train a student whose loss reads the teacher; writes a "
                                   "normal run directory (evaluate, report, serve). Matches can be declared in "
                                   "--config under 'matches:'.")
    p.add_argument("--resume", metavar="RUN_DIR", help="continue a killed distillation exactly where it stopped")


def run(args: argparse.Namespace) -> int:
    import os

    from ptmlab.distill.pipeline import run_distill

    if args.resume:
        from ptmlab.core.cli_parser import refuse_with_resume
        from ptmlab.core.rundir import RunDir

        refuse_with_resume(args, DistillConfig)
        cfg = RunDir.resume_config(args.resume, DistillConfig, "distill")
        s = run_distill(cfg, resume=True)
    else:
        cfg = resolve_config(DistillConfig, args, args.config)
        s = run_distill(cfg)
    if int(os.environ.get("RANK", "0")) == 0:
        main = s["main_metric"]
        print(f"{s['task']}: student {s['model']} dev {main}={s['metrics'][main]:.4f} vs teacher "
              f"{s['teacher_metrics'][main]:.4f} ({s['retained_pct']}% kept), agreement "
              f"{s['agreement_with_teacher']:.4f}; {s['params']:,} vs {s['teacher_params']:,} parameters; "
              f"teacher outputs {s['teacher_cache']}")
        print(f"run directory: {cfg.output}")
    return 0
