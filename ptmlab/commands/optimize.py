"""``ptmlab optimize RUN --max-loss POINTS --output OUT``: the fastest (or smallest) model within a dev-score loss of
the run, on this machine: students, shrunk and pruned models and the vocabulary crossed with PyTorch and onnxruntime
backends, searched with Optuna (resumable), timed side by side, checked on a held-out part, exported into OUT."""

from __future__ import annotations

import argparse

from ptmlab.core.config import add_config_args


def register(sub) -> None:
    from ptmlab.optimize.config import OptimizeConfig

    p = sub.add_parser("optimize", help="find the fastest model within a dev-score loss of a run, on this machine",
                       description="Search students, TinyBERT-style shrinking, pruning recovered by distillation and "
                                   "vocabulary pruning crossed with PyTorch fp32/bf16 and onnxruntime (plain, fused, "
                                   "dynamic and static int8) for the fastest (--objective latency), highest-throughput "
                                   "or smallest model whose dev score is within --max-loss points of the run's. The "
                                   "search is an Optuna study in OUT/study.db (--resume continues it); the finalists "
                                   "are timed side by side, the winner is scored once on a held-out part and exported "
                                   "into OUT (ONNX or transformers) with a model card and report.html.")
    p.add_argument("model", metavar="RUN_DIR", help="a fine-tuned run directory (sentence classification or "
                                                   "regression)")
    p.add_argument("--config", help="YAML file with options (flags override it)")
    p.add_argument("--resume", action="store_true",
                   help="continue the search in --output where it stopped (only --budget, --trials, --finalists and "
                        "--latency-rounds may change)")
    add_config_args(p, OptimizeConfig, exclude=("model",))
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ptmlab.api.verbs import optimize_config

    optimize_config(args.model, _given(args), config_file=args.config, resume=args.resume)
    return 0


def _given(args: argparse.Namespace) -> dict:
    """The options given as flags (defaults are not in ``args``)."""
    import dataclasses

    from ptmlab.optimize.config import OptimizeConfig

    known = {f.name for f in dataclasses.fields(OptimizeConfig)}
    return {k: v for k, v in vars(args).items() if k in known and k != "model"}
