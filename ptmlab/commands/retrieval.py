"""``ptmlab retrieval``: bitext retrieval accuracy of a sentence-embedding model, both directions (Tatoeba)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from ptmlab.core.cli_parser import config_command
from ptmlab.core.config import Validated, at_least, opt, resolve_config
from ptmlab.core.errors import PtmlabError


@dataclass(frozen=True)
class RetrievalConfig(Validated):
    pairs: list[str] = opt([], "parallel files, flat: SRC1 TGT1 ... (CLI: --pairs SRC TGT, repeatable)", cli=False)
    max_pairs: int | None = opt(None, "use the first N pairs of each set")
    max_length: int = opt(128, "truncate sentences to this many tokens")
    batch_size: int = opt(128, "encoding batch size")
    pooling: str | None = opt(None, "override the model's pooling: mean, cls or max (default: its "
                                    "sentence-transformers config, else mean)")
    output: str | None = opt(None, "directory for retrieval.json (default: table only)")

    def validate(self) -> None:
        if len(self.pairs) % 2:
            raise PtmlabError(f"pairs must list source and target files two by two; got {self.pairs}")
        if self.batch_size < 1 or not 8 <= self.max_length <= 8192:
            raise PtmlabError("--batch-size must be >= 1 and --max-length in 8..8192")
        at_least(self, 0, "max_pairs")


def register(sub) -> None:
    from ptmlab.distill.parallel import add_pairs_arg

    p = config_command(sub, "retrieval", RetrievalConfig, run,
                       help="bitext retrieval accuracy (nearest neighbour by cosine), both directions",
                       thing=("model", "MODEL", "a zoo name, run directory or sentence-transformers directory"),
                       description="For every source sentence, the nearest target sentence by cosine over the whole "
                                   "target side (the Tatoeba protocol); accuracy in both directions. MODEL: a zoo "
                                   "name, run directory or sentence-transformers directory.")
    add_pairs_arg(p, required=False)


def run(args: argparse.Namespace) -> int:
    from ptmlab.core.cli_parser import output_file
    from ptmlab.core.io import atomic_write_json
    from ptmlab.core.seed import configure_threads
    from ptmlab.distill.parallel import pair_files, read_pairs
    from ptmlab.distill.retrieval import evaluate_pairs
    from ptmlab.report.table import print_table
    from ptmlab.train.sentence import load_sentence_model

    configure_threads()
    cfg = resolve_config(RetrievalConfig, args, args.config)
    sets = [read_pairs(s, t, cfg.max_pairs or None) for s, t in pair_files(cfg.pairs)]
    model, tok = load_sentence_model(args.model, cfg.pooling)
    rows = [{k: v for k, v in evaluate_pairs(model, tok, p, cfg.max_length, cfg.batch_size).items() if k != "hits"}
            for p in sets]
    result = {"model": args.model, "pooling": model.describe(), "results": rows}
    if cfg.output:
        atomic_write_json(output_file(cfg.output, "retrieval.json"), result)
    print_table(rows, ["src", "tgt", "pairs", "src_to_tgt", "tgt_to_src"])
    return 0
