"""``ptmlab tokenizer train|eval|swap``: train tokenizers, measure them on texts, give a model a new one."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from ptmlab.core.cli_parser import ListAction
from ptmlab.core.config import add_config_args, opt, resolve_config
from ptmlab.core.errors import PtmlabError


@dataclass(frozen=True)
class TrainArgs:
    type: str = opt("bpe", "bpe, wordpiece, unigram, or all (one folder each under --output)")
    vocab_size: int = opt(8000, "vocabulary size, special tokens included")
    files: list[str] = opt([], cli=False)
    output: str = opt("", "output directory")
    lowercase: bool = opt(False, "lowercase the text before training")
    min_frequency: int = opt(2, "least count of a pair to merge (bpe, wordpiece)")


@dataclass(frozen=True)
class EvalArgs:
    tokenizers: list[str] = opt([], cli=False)
    files: list[str] = opt([], cli=False)
    lang: str | None = opt(None, "language of every file (default: guessed from names like .deu, .de.gz)")
    split_punct: bool = opt(False, "split punctuation off words as well (default: whitespace only)")
    output: str | None = opt(None, "directory for metrics.json and the bar charts (default: table only)")


@dataclass(frozen=True)
class SwapArgs:
    model: str = opt("", cli=False)
    tokenizer: str = opt("", "the new tokenizer: a directory, a tokenizer.json, or a zoo name")
    output: str = opt("", "output directory for the model with its new tokenizer")


_FILES_HELP = ("text, comma-separated (or space-separated): files, .gz files, folders, or built-in corpora "
               "tatoeba:LANG, multi30k:LANG[:SPLIT], "
               "tweets, wordfreq:LANG[:N]")


def register(sub) -> None:
    p = sub.add_parser("tokenizer", help="train, evaluate and swap tokenizers")
    verbs = p.add_subparsers(dest="tokenizer_verb", metavar="ACTION", parser_class=type(p))
    p.set_defaults(func=lambda args: _usage(p))

    t = verbs.add_parser("train", help="train BPE / WordPiece / Unigram tokenizers on text")
    t.add_argument("--config", help="YAML file with options")
    t.add_argument("--files", action=ListAction, default=argparse.SUPPRESS, metavar="F", help=_FILES_HELP)
    add_config_args(t, TrainArgs)
    t.set_defaults(func=run_train)

    e = verbs.add_parser("eval", help="fertility, continued words, unknowns... of tokenizers on texts")
    e.add_argument("tokenizers", nargs="+", metavar="TOKENIZER",
                   help="tokenizer directories, tokenizer.json files, minilm, xlmr or other zoo names")
    e.add_argument("--config", help="YAML file with options")
    e.add_argument("--files", action=ListAction, default=argparse.SUPPRESS, metavar="F", help=_FILES_HELP)
    add_config_args(e, EvalArgs)
    e.set_defaults(func=run_eval)

    s = verbs.add_parser("swap", help="give a model a new tokenizer, keeping the embeddings of shared tokens")
    s.add_argument("model", help="model directory or zoo name")
    s.add_argument("--config", help="YAML file with options")
    add_config_args(s, SwapArgs)
    s.set_defaults(func=run_swap)


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2


def run_train(args: argparse.Namespace) -> int:
    from ptmlab.tokenization.corpora import resolve_sources
    from ptmlab.tokenization.train import resolve_types, train_and_save

    a = resolve_config(TrainArgs, args, args.config)
    if not a.output:
        raise PtmlabError("no output directory: pass --output DIR")
    kinds = resolve_types(a.type)
    results = train_and_save(kinds, resolve_sources(a.files), a.vocab_size, a.output, a.lowercase,
                             a.min_frequency)
    for kind, r in results.items():
        print(f"{kind:<10} vocab {r['vocab_size']:>7}  {r['seconds']:8.2f} s  -> {r['path']}")
    return 0


def run_eval(args: argparse.Namespace) -> int:
    from ptmlab.tokenization.compare import evaluate, format_table, load_all, write_outputs
    from ptmlab.tokenization.corpora import resolve_sources

    a = resolve_config(EvalArgs, args, args.config)
    sources = resolve_sources(a.files, a.lang)
    report = evaluate(load_all(a.tokenizers), sources, a.split_punct)
    print(format_table(report))
    if a.output:
        written = write_outputs(report, a.output)
        print(f"\nwrote {written[0]} and {len(written) - 1} charts in {a.output}")
    return 0


def run_swap(args: argparse.Namespace) -> int:
    from ptmlab.tokenization.swap import format_report, swap_tokenizer

    a = resolve_config(SwapArgs, args, args.config)
    if not a.tokenizer or not a.output:
        raise PtmlabError("swap needs --tokenizer DIR and --output OUT")
    print(format_report(swap_tokenizer(a.model, a.tokenizer, a.output)))
    return 0
