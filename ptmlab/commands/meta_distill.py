"""``ptmlab meta-distill``: Meta-KD across domains (a meta-teacher, then meta-distillation into a small student)."""

from __future__ import annotations

import argparse

from ptmlab.core.cli_parser import config_command
from ptmlab.core.config import resolve_config
from ptmlab.distill.metakd import MetaDistillConfig


def register(sub) -> None:
    p = config_command(sub, "meta-distill", MetaDistillConfig, run,
                       help="Meta-KD: a meta-teacher across domains, meta-distilled into a student",
                       description="Meta-KD (Pan et al., ACL 2021): prototype-based domain-expertise weights, a "
                                   "meta-teacher with the transferable-knowledge objective, then meta-distillation "
                                   "with five losses. Writes a normal run directory (evaluate, report, serve) and "
                                   "the meta-teacher under RUN/meta_teacher.")
    p.add_argument("--domain", dest="domain_files", action="append", metavar="NAME=FILE", default=argparse.SUPPRESS,
                   help="an extra domain from a local csv/tsv/jsonl file (repeatable)")
    p.add_argument("--resume", metavar="RUN_DIR", help="continue a killed meta-distillation (a saved meta-teacher "
                                                       "is reused, the student continues from its checkpoint)")


def run(args: argparse.Namespace) -> int:
    import os

    from ptmlab.distill.metakd import run_meta_distill

    if args.resume:
        from ptmlab.core.rundir import RunDir

        cfg = RunDir.resume_config(args.resume, MetaDistillConfig, "meta-distill")
        s = run_meta_distill(cfg, resume=True)
    else:
        cfg = resolve_config(MetaDistillConfig, args, args.config)
        s = run_meta_distill(cfg)
    if int(os.environ.get("RANK", "0")) == 0:
        per = ", ".join(f"{n} {v['student']:.4f}{'' if v['seen'] else ' (unseen)'}"
                        for n, v in s["per_domain_test_accuracy"].items())
        print(f"student {s['model']} on {', '.join(s['student_domains'])}: dev accuracy "
              f"{s['metrics']['accuracy']:.4f} (meta-teacher {s['teacher_metrics']['accuracy']:.4f}); test accuracy "
              f"per domain: {per}")
        print(f"run directory: {cfg.output}")
    return 0
