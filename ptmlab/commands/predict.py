"""``ptmlab predict``: label a file of texts with a trained run (no labels needed)."""

from __future__ import annotations

import argparse

from ptmlab.core.config import add_config_args, resolve_config


def register(sub) -> None:
    from ptmlab.train.predict import PredictConfig

    p = sub.add_parser("predict", help="label a file of texts with a trained run",
                       description="Run a trained model over a csv/tsv/jsonl/parquet/arrow file (no labels needed) "
                                   "and write one prediction per row to OUTPUT/predictions.jsonl (or .csv): a "
                                   "classifier's label, score and every label's probability; a regression head's "
                                   "score; a tagger's words, tags and entity groups (entity_group, score, word, "
                                   "start, end); a QA run's answer span, its probability (score) and logit sum "
                                   "(logit_score).")
    p.add_argument("model", metavar="RUN_DIR", help="a run directory (finetune, distill, prune, ...)")
    p.add_argument("--config", help="YAML file with options (flags override it)")
    add_config_args(p, PredictConfig)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ptmlab.api.verbs import predict_with_config
    from ptmlab.core.errors import PtmlabError
    from ptmlab.train.predict import PredictConfig

    cfg = resolve_config(PredictConfig, args, args.config)
    if not cfg.input or not cfg.output:
        raise PtmlabError("ptmlab predict needs --input FILE and --output DIR")
    preds = predict_with_config(args.model, cfg)
    print(f"{len(preds)} predictions: {cfg.output}/predictions.{cfg.format}")
    return 0
