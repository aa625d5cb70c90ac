"""``ptmlab analyze heads|layers|attention|explanation|adversarial-attention RUN --task T`` and ``ptmlab analyze
anomaly MODEL``."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from ptmlab.core.config import Validated, add_config_args, at_least, config_to_dict, opt, resolve_config
from ptmlab.core.errors import PtmlabError
from ptmlab.train.args import DataArgs


@dataclass(frozen=True)
class AnalyzeConfig(DataArgs):
    OPTION_GROUP = "analysis"

    output: str | None = opt(None, "output directory for summary.json, tables and report.html")
    split: str = opt("dev", "split to analyse (needs labels)")
    batch_size: int = opt(128, "inference batch size")
    precision: str = opt("auto", "fp32, bf16 or auto (bf16 autocast where the CPU/GPU supports it; heads/layers)",
                         choices=["auto", "fp32", "bf16"])
    examples: int = opt(3, "attention: examples whose attention maps are plotted")
    permutations: int = opt(10, "explanation: attention permutations per example")
    epsilon: float = opt(0.01, "adversarial-attention: largest output change allowed (total variation distance)")
    adv_steps: int = opt(100, "adversarial-attention: Adam steps of the search per example")
    seed: int = opt(42, "seed for --max-eval subsets and permutations")
    overwrite: bool = opt(False, "replace an existing analysis in --output")

    def validate(self) -> None:
        self.validate_data()
        at_least(self, 1, "batch_size", "permutations", "adv_steps")
        if not 0 < self.epsilon < 1:
            raise PtmlabError(f"--epsilon must be in (0, 1) (an output total variation distance), got {self.epsilon}")
        at_least(self, 0, "examples")


@dataclass(frozen=True)
class AnomalyConfig(Validated):
    OPTION_GROUP = "analysis"

    model: str = opt("minilm", "zoo name, model or run directory", cli=False)  # the positional MODEL
    blimp: str | None = opt(None, "BLiMP folder (or file) of jsonl minimal pairs")
    anomaly_sets: str | None = opt(None, "folder (or file) of psycholinguistic csv sets, correct sentence first")
    reference: str | None = opt(None, "reference text file/folder, or 'tweets' (default: ../shared/data/text/"
                                      "wikitext-2 when present, else tweets)")
    max_sentences: int = opt(2000, "reference sentences sampled for the Gaussians")
    covariance: str = opt("full", "full, ledoit-wolf or diag", choices=["full", "ledoit-wolf", "diag"])
    include_special: bool = opt(False, "also score [CLS]/[SEP] token vectors")
    center: bool = opt(True, "subtract each sentence's mean token vector at every layer (--no-center: the plain "
                             "method)")
    per_phenomenon: int = opt(100, "BLiMP pairs per phenomenon file (0: all)")
    gaussians: str | None = opt(None, "saved Gaussians to reuse (fitted and saved there when missing)")
    heatmap_pairs: int = opt(3, "BLiMP pairs whose token surprisal is plotted")
    batch_size: int = opt(64, "encoding batch size")
    seed: int = opt(0, "seed for the reference sample (0, not the usual 42: the sample the committed BLiMP "
                       "results were measured on)")
    output: str | None = opt(None, "output directory")
    overwrite: bool = opt(False, "replace an existing analysis in --output")

    def validate(self) -> None:
        if not self.blimp and not self.anomaly_sets:
            raise PtmlabError("nothing to score: pass --blimp DIR and/or --anomaly-sets DIR")
        at_least(self, 1, "max_sentences", "batch_size")
        at_least(self, 0, "per_phenomenon", "heatmap_pairs")


KINDS = ("heads", "layers", "attention", "explanation", "adversarial-attention")


def register(sub) -> None:
    p = sub.add_parser("analyze", help="look inside a model: head/layer ablation, attention, anomaly detection")
    verbs = p.add_subparsers(dest="analysis", metavar="ANALYSIS", parser_class=type(p))
    helps = {"heads": "remove / make uniform each head in turn and measure the dev metric",
             "layers": "remove / make uniform each layer in turn and measure the dev metric",
             "attention": "attention maps, entropy per head and pattern types per layer",
             "explanation": "attention vs gradient / leave-one-out importance (Kendall tau), permutation test",
             "adversarial-attention": "last-layer [CLS] attention as different as possible (JSD) with the output "
                                      "within --epsilon (Jain & Wallace)"}
    for kind in KINDS:
        q = verbs.add_parser(kind, help=helps[kind])
        q.add_argument("model", metavar="RUN_DIR_OR_MODEL")
        q.add_argument("--config", help="YAML file with options")
        add_config_args(q, AnalyzeConfig)
        q.set_defaults(func=run_task_analysis, kind=kind)
    q = verbs.add_parser("anomaly", help="layer-wise Gaussian anomaly detection on BLiMP / psycholinguistic sets")
    q.add_argument("model", nargs="?", metavar="MODEL", default=argparse.SUPPRESS,
                   help="zoo name, model or run directory (default: minilm)")
    q.add_argument("--model", dest="model", default=argparse.SUPPRESS,
                   help=argparse.SUPPRESS).deprecated_for = "the positional MODEL"
    q.add_argument("--config", help="YAML file with options")
    add_config_args(q, AnomalyConfig)
    q.set_defaults(func=run_anomaly)
    p.set_defaults(func=lambda args: p.print_help() or 2)


def run_task_analysis(args: argparse.Namespace) -> int:
    from ptmlab.analysis import adversarial, runs  # noqa: F401  (adversarial registers adversarial-attention)
    from ptmlab.core.rundir import RunDir, check_output_dir
    from ptmlab.core.seed import configure_threads, set_seed

    configure_threads()
    cfg = resolve_config(AnalyzeConfig, args, args.config)
    if not cfg.output:
        raise PtmlabError("no output directory: pass --output OUT")
    from pathlib import Path

    check_output_dir(Path(cfg.output), cfg.overwrite)
    set_seed(cfg.seed)
    summary = runs.ANALYSES.get(args.kind)(args.model, cfg, lambda: _create(cfg, args))
    print(summary.get("headline") or runs.headline(args.kind, summary))
    print(f"report: {RunDir(cfg.output).file('report.html')}")
    return 0


def _create(cfg, args):
    from ptmlab.core.rundir import RunDir

    run = RunDir.create(cfg.output, cfg.overwrite)
    run.write_config({"model": args.model, **config_to_dict(cfg)}, f"analyze {getattr(args, 'kind', 'anomaly')}")
    return run


def run_anomaly(args: argparse.Namespace) -> int:
    from pathlib import Path

    from ptmlab.analysis.runs import run_anomaly_analysis
    from ptmlab.core.rundir import check_output_dir
    from ptmlab.core.seed import configure_threads

    configure_threads()
    cfg = resolve_config(AnomalyConfig, args, args.config)
    if not cfg.output:
        raise PtmlabError("no output directory: pass --output OUT")
    check_output_dir(Path(cfg.output), cfg.overwrite)
    summary = run_anomaly_analysis(cfg, lambda: _create(cfg, args))
    if "best_layer" in summary:
        print(f"BLiMP: best layer {summary['best_layer']} accuracy {summary['best_accuracy']:.4f} "
              f"({summary['pairs']} pairs); per layer {summary['per_layer']}")
    print(f"report: {Path(cfg.output) / 'report.html'}")
    return 0
