"""``ptmlab predict``: label a file of texts with a trained run (no labels needed)."""

from __future__ import annotations

import argparse

from ptmlab.core.cli_parser import config_command
from ptmlab.core.config import resolve_config


def register(sub) -> None:
    from ptmlab.train.predict import PredictConfig

    config_command(sub, "predict", PredictConfig, run, help="label a file of texts with a trained run",
                   thing=("model", "RUN_DIR", "a run directory (finetune, distill, prune, ...)"),
                   description="Run a trained model over a csv/tsv/jsonl/parquet/arrow file (no labels needed) "
                               "and write one prediction per row to OUTPUT/predictions.jsonl (or .csv): a "
                               "classifier's label, score and every label's probability; a regression head's "
                               "score; a tagger's words, tags and entity groups (entity_group, score, word, "
                               "start, end); a QA run's answer span, its probability (score) and logit sum "
                               "(logit_score).")


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
