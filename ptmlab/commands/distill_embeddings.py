"""``ptmlab distill-embeddings``: make a sentence-embedding model multilingual by distillation on parallel text."""

from __future__ import annotations

import argparse

from ptmlab.core.cli_parser import config_command
from ptmlab.core.config import resolve_config
from ptmlab.distill.multilingual import EmbedDistillConfig
from ptmlab.distill.parallel import add_pairs_arg


def register(sub) -> None:
    p = config_command(sub, "distill-embeddings", EmbedDistillConfig, run,
                       help="multilingual sentence embeddings by distillation on parallel sentences (Reimers & "
                            "Gurevych 2020)",
                       description="Train a student so that a sentence and its translation both land on the "
                                   "teacher's vector of the source sentence: MSE(S(src), T(src)) + MSE(S(tgt), "
                                   "T(src)). Writes a run directory that is also a sentence-transformers model.")
    add_pairs_arg(p, required=False)


def run(args: argparse.Namespace) -> int:
    import os

    from ptmlab.distill.multilingual import run_embedding_distill

    cfg = resolve_config(EmbedDistillConfig, args, args.config)
    s = run_embedding_distill(cfg)
    if int(os.environ.get("RANK", "0")) == 0:
        m = s["metrics"]
        print(f"student {s['model']} ({s['pooling']}): dev MSE {-m['dev_neg_mse']:.6f}, dev retrieval "
              f"{m['dev_src_to_tgt']:.2f}% / {m['dev_tgt_to_src']:.2f}% (src->tgt / tgt->src), {s['steps']} steps "
              f"on {s['train_examples']} pairs; teacher vectors {s['teacher_cache']}")
        print(f"run directory (a sentence-transformers model): {cfg.output}")
    return 0
