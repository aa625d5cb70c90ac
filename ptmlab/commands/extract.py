"""``ptmlab extract``: copy a served model by querying it; ``ptmlab extract verify-watermark MODEL``: check a
suspect model for the server's watermark."""

from __future__ import annotations

import argparse
import dataclasses
import os

from ptmlab.core.config import add_config_args, resolve_config
from ptmlab.core.errors import PtmlabError


def register(sub) -> None:
    from ptmlab.extraction.extract import ExtractConfig
    from ptmlab.extraction.queries import QUERY_STRATEGIES

    p = sub.add_parser("extract", help="model extraction: copy a served model, or verify a watermark",
                       description="ptmlab extract --victim URL --key K --task T --strategy random|wiki|task "
                                   "--budget N --output RUN_DIR  |  ptmlab extract verify-watermark MODEL")
    p.add_argument("action", nargs="?", choices=["verify-watermark"], help="verify-watermark: test a suspect model")
    p.add_argument("suspect", nargs="?", metavar="MODEL", help="suspect model directory (for verify-watermark)")
    p.add_argument("--config", help="YAML file with options (flags override it)")
    p.add_argument("--strategy", dest="query_strategy", choices=QUERY_STRATEGIES.names(), default=argparse.SUPPRESS,
                   help="query generator: " + "; ".join(f"{n}: {QUERY_STRATEGIES.help(n)}" for n in QUERY_STRATEGIES))
    p.add_argument("--key-name", help="verify-watermark: only the records of this key (id or name)")
    p.add_argument("--head", help="verify-watermark: the task a multi-task server answered the queries with (the "
                                  "'task' of the requests; its records are kept per head)")
    p.add_argument("--alpha", type=float, default=0.01, help="verify-watermark: significance level (default 0.01)")
    p.add_argument("--queries", help="verify-watermark: the queries the suspect learned from (an extraction run's "
                                     "queries.json or a text file, one per line); the server stores only their hashes")
    p.add_argument("--trust-pickle", action="store_true",
                   help="verify-watermark: load MODEL's pickle checkpoint (pytorch_model.bin) when it has no "
                        "safetensors; a suspect is untrusted by definition, so only for a folder you vouch for")
    p.add_argument("--state", help="verify-watermark: the server's state (a directory or postgresql://...; default "
                                   "$PTMLAB_STATE, else $PTMLAB_HOME)")
    add_config_args(p, ExtractConfig, exclude=("strategy", "query_strategy"))
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ptmlab.core.extras import require_extra

    require_extra("serve", "extract")  # the attack talks HTTP to a served model
    if args.action == "verify-watermark":
        return verify(args)
    if args.suspect:
        raise PtmlabError(f"unexpected argument '{args.suspect}': did you mean "
                          f"`ptmlab extract verify-watermark MODEL`?")
    from ptmlab.extraction.extract import ExtractConfig, run_extract

    cfg = resolve_config(ExtractConfig, args, args.config)
    if not cfg.key and os.environ.get("PTMLAB_VICTIM_KEY"):
        cfg = dataclasses.replace(cfg, key=os.environ["PTMLAB_VICTIM_KEY"])
    s = run_extract(cfg)
    metric = s["main_metric"]
    print(f"{s['query_strategy']} x {s['budget']} queries ({'soft' if s['soft_labels'] else 'hard'} labels): "
          f"agreement {s['agreement']:.4f} with the victim, dev {metric} {s['metrics'].get(metric, float('nan')):.4f} "
          f"(victim {s['victim_metrics'].get(metric, float('nan')):.4f})")
    for p in s["curve"][:-1]:
        print(f"  budget {p['budget']}: agreement {p['agreement']:.4f}")
    print(f"run directory: {cfg.output}")
    return 0


def verify(args: argparse.Namespace) -> int:
    from ptmlab.serve import open_store, verify_watermark
    from ptmlab.serve.defences import read_queries

    if not args.suspect:
        raise PtmlabError("verify-watermark needs a model: ptmlab extract verify-watermark MODEL_DIR --queries FILE")
    if not 0 < args.alpha < 1:
        raise PtmlabError(f"--alpha must be in (0, 1), got {args.alpha}")
    if not args.queries:
        raise PtmlabError("verify-watermark needs --queries FILE (the suspect's training queries): the server keeps "
                          "only hashes of the watermarked queries")
    texts, pairs = read_queries(args.queries)
    store = open_store(args.state)
    key_id = store.resolve_key(args.key_name).id if args.key_name else None
    r = verify_watermark(args.suspect, store, texts, pairs, key_id, args.alpha, task=args.head)
    print(f"{r['mark_matches']}/{r['marks']} watermarked answers reproduced ({r['mark_match_rate']:.1%}); "
          f"chance rate from {r['controls']} controls {r['null_rate']:.1%}; p = {r['p_value']:.2e}")
    verdict = "WATERMARKED: the model learned from this API" if r["watermarked"] else "no evidence of the watermark"
    print(f"verdict: {verdict}")
    return 0
