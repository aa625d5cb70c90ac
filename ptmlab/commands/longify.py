"""``ptmlab longify``: extend a model to long inputs (copied position embeddings + sliding-window attention)."""

from __future__ import annotations

import argparse

from ptmlab.core.cli_parser import config_command
from ptmlab.core.config import resolve_config


def register(sub) -> None:
    from ptmlab.longseq.pipeline import LongifyConfig

    p = config_command(sub, "longify", LongifyConfig, _longify,
                       help="make a model read long inputs with sliding-window + global attention",
                       thing=("model", "MODEL", "zoo name, model directory or run directory"), exclude=("model",),
                       description="Extend the position embeddings to --max-length (the learned 512 copied "
                                   "repeatedly, as Longformer does), switch attention to a sliding window of "
                                   "--window tokens plus global tokens, and save the model; finetune, evaluate, "
                                   "serve and analyze load it like any other.")
    p.add_argument("--global", dest="global_tokens", type=_positions, metavar="P,Q,...", default=argparse.SUPPRESS,
                   help="positions with global attention (default: 0, the [CLS] token)")


def _positions(s: str) -> list[str]:
    return [p.strip() for p in s.split(",") if p.strip()]


def _longify(args: argparse.Namespace) -> int:
    from ptmlab.longseq.pipeline import LongifyConfig, run_longify

    s = run_longify(resolve_config(LongifyConfig, args, args.config))
    rounded = f" (odd {s['window_requested']} rounded up)" if s["window"] != s["window_requested"] else ""
    print(f"{s['family']}: max length {s['max_length_before']} -> {s['max_length']} tokens; window {s['window']}"
          f"{rounded}; global positions {s['global_tokens']}")
    print(f"long model: {s['output']}")
    return 0
