"""``ptmlab <verb>``: each verb lives in ``ptmlab/commands/<verb>.py`` and registers its own parser.

Errors in the user's input (``PtmlabError``) print one line and exit with code 2; set ``PTMLAB_DEBUG=1`` to see
tracebacks.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from ptmlab.core.cli_parser import ArgParser
from ptmlab.core.errors import PtmlabError

# One module per verb group; each defines ``register(subparsers)`` and sets ``func`` on its parser.
COMMAND_MODULES = [
    "ptmlab.commands.finetune",
    "ptmlab.commands.evaluate",
    "ptmlab.commands.predict",
    "ptmlab.commands.glue",
    "ptmlab.commands.models",
    "ptmlab.commands.data",
    "ptmlab.commands.report",
    "ptmlab.commands.study",
    "ptmlab.commands.demo",
    "ptmlab.commands.tokenizer",
    "ptmlab.commands.analyze",
    "ptmlab.commands.compress",
    "ptmlab.commands.distill",
    "ptmlab.commands.distill_embeddings", "ptmlab.commands.retrieval", "ptmlab.commands.meta_distill",
    "ptmlab.commands.pretrain",
    "ptmlab.commands.serve", "ptmlab.commands.keys", "ptmlab.commands.extract",
    "ptmlab.commands.clean",
    "ptmlab.commands.scale",
    "ptmlab.commands.longify",
    "ptmlab.commands.export", "ptmlab.commands.push",
    "ptmlab.commands.optimize",
]


# verbs registered by a module not named after them (every other verb V lives in ptmlab.commands.V, - as _)
VERB_MODULES = {verb: "ptmlab.commands.compress"
                for verb in ("prune", "quantize", "compress", "lowrank", "share", "magnitude", "ghost")}


def module_of(verb: str) -> str | None:
    """The command module that registers ``verb``; None for a word that is no verb."""
    name = VERB_MODULES.get(verb, f"ptmlab.commands.{verb.replace('-', '_')}")
    return name if name in COMMAND_MODULES else None


# each verb's line in ``ptmlab --help``: listed here so that the top-level help imports no command module (some
# import torch and transformers to declare their options); tests check it against what the modules register
COMMAND_HELP = {
    "finetune": "fine-tune a model on a task",
    "evaluate": "evaluate a run directory or model on a task",
    "predict": "label a file of texts with a trained run",
    "glue": "fine-tune and evaluate on every available GLUE task",
    "models": "list zoo models (or install the optional mpnet)",
    "data": "list the built-in tasks, where each is read from here and how to get it; `data get TASK` fetches one",
    "report": "write a report for one run or a comparison of several",
    "study": "run a study (a source claim as an experiment with a verdict); `study all`, `study dashboard`, "
             "`study collect`, `study restore`, `study preregister`",
    "demo": "fine-tune minilm on the built-in tweets task and write a report",
    "tokenizer": "train, evaluate and swap tokenizers",
    "analyze": "look inside a model: head/layer ablation, attention, anomaly detection",
    "prune": "remove attention heads, FFN neurons or layers, then recover by fine-tuning",
    "quantize": "int8 / k-bit quantization with size, latency and dev metric",
    "compress": "run compression steps in order and tabulate each step's cost",
    "lowrank": "factorise Linear layers by truncated SVD, then recover by fine-tuning",
    "share": "tie groups of consecutive layers to one set of weights (ALBERT-style), then recover",
    "magnitude": "zero the smallest encoder weights (unstructured), then recover",
    "ghost": "add GhostBERT ghost features to a pruned model, then fine-tune",
    "distill": "distil a teacher into a smaller student (soft targets, TinyBERT, MiniLM, PKD)",
    "distill-embeddings": "multilingual sentence embeddings by distillation on parallel sentences (Reimers & "
                          "Gurevych 2020)",
    "retrieval": "bitext retrieval accuracy (nearest neighbour by cosine), both directions",
    "meta-distill": "Meta-KD: a meta-teacher across domains, meta-distilled into a student",
    "pretrain": "pre-train (or continue pre-training) with a self-supervised objective",
    "serve": "serve a model over HTTP with keys, quotas and output policies",
    "keys": "manage API keys of `ptmlab serve` (stored hashed)",
    "extract": "model extraction: copy a served model, or verify a watermark",
    "clean": "clean pre-training text: C4/Gopher filters, language id, deduplication",
    "scale": "scaling sweep: model sizes x FLOP budgets, power-law fits, compute frontier",
    "longify": "make a model read long inputs with sliding-window + global attention",
    "export": "write a model as transformers, ONNX, ONNX int8 or torch int8, with parity",
    "optimize": "find the fastest model within a dev-score loss of a run, on this machine",
    "push": "upload a run directory or export to the Hugging Face Hub",
}


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The ``ptmlab`` parser. When ``argv`` starts with a verb only that verb's module is imported: some modules
    import torch and transformers to declare their options, seconds that ``ptmlab keys list`` or a bad flag should
    not pay. Without a verb (``--help``, a typo) each verb is listed from ``COMMAND_HELP`` without importing its
    module (a module none of whose verbs is listed there is imported and registered)."""
    parser = ArgParser(prog="ptmlab", description="Transfer learning with pre-trained language models. "
                                                  "Command grammar: docs/cli.md.")
    from ptmlab import __version__

    parser.add_argument("--version", action="version", version=f"ptmlab {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=ArgParser)
    only = module_of(argv[0]) if argv and not argv[0].startswith("-") else None
    if only:
        importlib.import_module(only).register(sub)
        _offer_trust_pickle(sub)
        return parser
    listed = {module_of(verb) for verb in COMMAND_HELP}
    for name in COMMAND_MODULES:
        if name not in listed:
            importlib.import_module(name).register(sub)
    for verb, help_ in COMMAND_HELP.items():
        sub.add_parser(verb, help=help_)
    return parser


TRUST_PICKLE_HELP = ("load the pickle checkpoint (pytorch_model.bin, *.pt) of the model folders named on this command "
                     "line when they have no safetensors weights: only for folders you trust (unpickling runs code)")


def _offer_trust_pickle(sub) -> None:
    """Every verb that reads a model takes ``--trust-pickle`` the same way (a verb may declare its own)."""
    for verb_parser in sub.choices.values():
        if not any("--trust-pickle" in a.option_strings for a in verb_parser._actions):
            verb_parser.add_argument("--trust-pickle", action="store_true", default=argparse.SUPPRESS,
                                     help=TRUST_PICKLE_HELP)


def _trust_named_folders(args: argparse.Namespace) -> None:
    """``--trust-pickle``: the folders named by the command's arguments may load from pickle weights."""
    if not getattr(args, "trust_pickle", False):
        return
    from pathlib import Path

    from ptmlab.models.loader import trust_pickle

    for value in vars(args).values():
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, str) and Path(item).expanduser().is_dir():
                trust_pickle(item)


def _quiet_libraries() -> None:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    # offline by default: zoo models and data come from installed packages and local files. Online users set
    # HF_HUB_OFFLINE=0 (and HF_DATASETS_OFFLINE=0) to load hub ids and hub datasets.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    # transformers' warnings and progress bars off, through the variables it reads when imported, so that commands
    # which never need it do not import it (and torch) just to silence it
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    import warnings

    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    warnings.filterwarnings("ignore", message=".*TypedStorage.*")
    if "transformers" in sys.modules:  # already imported (ptmlab used as a library, then main() called)
        transformers = sys.modules["transformers"]
        transformers.logging.set_verbosity_error()
        transformers.logging.disable_progress_bar()


def main(argv: list[str] | None = None) -> int:
    _quiet_libraries()
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        _trust_named_folders(args)
        rc = args.func(args)
        return int(rc or 0)
    except PtmlabError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # an unexpected failure: still one line unless debugging
        if os.environ.get("PTMLAB_DEBUG"):
            raise
        print(f"error: internal error {type(e).__name__}: {e} (rerun with PTMLAB_DEBUG=1 for a traceback)",
              file=sys.stderr)
        return 1
