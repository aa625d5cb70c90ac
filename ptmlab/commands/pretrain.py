"""``ptmlab pretrain``: pre-train a model from scratch or continue one, with any registered objective."""

from __future__ import annotations

import argparse

from ptmlab.core.cli_parser import config_command
from ptmlab.core.config import resolve_config
from ptmlab.pretrain.config import PretrainConfig


def register(sub) -> None:
    p = config_command(sub, "pretrain", PretrainConfig, run,
                       help="pre-train (or continue pre-training) with a self-supervised objective",
                       description="Pre-train a new model (--arch, --size) or continue an encoder (--model) on text "
                                   "(--files) with an objective: clm mlm wwm span t5 bart electra nsp sop plm. "
                                   "Writes a run directory that `ptmlab finetune --model RUN` accepts.")
    p.add_argument("--resume", metavar="RUN_DIR", help="continue a killed pre-training exactly where it stopped")
    p.add_argument("--list-objectives", action="store_true", help="list the objectives and exit")


def run(args: argparse.Namespace) -> int:
    from ptmlab.core.dist import is_main_process
    from ptmlab.pretrain.run import run_pretrain

    if args.list_objectives:
        from ptmlab.pretrain.objectives import OBJECTIVES

        for name in OBJECTIVES:
            print(f"  {name:10} {OBJECTIVES.help(name)}")
        return 0
    if args.resume:
        from ptmlab.core.cli_parser import refuse_with_resume
        from ptmlab.core.rundir import RunDir

        refuse_with_resume(args, PretrainConfig)
        cfg = RunDir.resume_config(args.resume, PretrainConfig, "pretrain")
        s = run_pretrain(cfg, resume=True)
    else:
        cfg = resolve_config(PretrainConfig, args, args.config)
        s = run_pretrain(cfg)
    if is_main_process():
        m = s["metrics"]
        print(f"{s['objective']} on {s['architecture']} ({s['params']:,} parameters): eval loss "
              f"{m['initial_eval_loss']:.4f} -> {m['eval_loss']:.4f} (perplexity {m['perplexity']:.2f}); "
              f"{m['tokens']:,} tokens, {m['flops']:.3g} FLOPs, {m['tokens_per_second']:,.0f} tokens/s")
        print(f"run directory: {cfg.output}")
    return 0
