"""Study ``scaling`` (Q8, Q19): a sweep of model sizes x FLOP budgets on the shared text, with the compute frontier,
power-law fits and two verdicts.

Claims. Q8 (Kaplan et al. 2020, "Scaling laws for neural language models"; Hoffmann et al. 2022): under a fixed
compute budget, parameters and training steps should grow together, so the loss-optimal size grows with the budget
(Kaplan: N_opt ∝ C^0.73; Hoffmann: C^0.50). Q19 (Kaplan et al. 2020; Li et al. 2020, "Train large, then compress"):
larger models reach a given loss in fewer steps and can even be faster in wall-clock time.

Rules (fixed before the runs; see ``ptmlab.scaling.analysis``): Q8 compares the optimum set of sizes (ties within
``--loss-tolerance`` or two standard errors across seeds) at the smallest and largest budget; Q19 compares the tokens
and training seconds each size needs to reach the worst size's best held-out loss (a ``--margin`` fraction and the
widest evaluation interval must separate them). Each is "supported", "not supported" or "inconclusive".

Every run is an ordinary pre-training run (masked LM, BERT architecture) with a small WordPiece vocabulary trained
on the training text first, so tiny models spend their compute in the transformer rather than in a 30k-word softmax.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ptmlab.core.config import build_config, opt
from ptmlab.core.errors import PtmlabError
from ptmlab.studies import STUDIES
from ptmlab.studies.common import StudyBase, parse_study_args, write_study

SMALL = dict(sizes=["1x16", "2x32", "2x64"], budgets=["1e9", "2.5e9", "6e9"], block_size=32, batch_size=16,
             eval_blocks=32, evals=16, vocab_size=2048)


@dataclass(frozen=True)
class ScalingStudyArgs(StudyBase):
    output: str = opt("runs/study-scaling", "output directory (the sweep is under OUTPUT/sweep)")
    sizes: list[str] = opt(["1x32", "2x64", "4x128"], "model sizes LAYERSxHIDDEN[xHEADS]")
    budgets: list[str] = opt(["3e10", "1e11", "3e11"], "training-FLOP budgets")
    seeds: list[str] = opt(["0"], "seeds (each size x budget once per seed)")
    files: list[str] = opt([], "training text (default: the shared WikiText-2 validation text)")
    tokenizer: str = opt("", "tokenizer (default: a WordPiece of --vocab-size trained on the training text)")
    vocab_size: int = opt(4096, "vocabulary of the trained WordPiece tokenizer")
    objective: str = opt("mlm", "pre-training objective")
    block_size: int = opt(64, "tokens per block")
    batch_size: int = opt(16, "blocks per step")
    lr: float = opt(2e-3, "peak learning rate")
    evals: int = opt(20, "held-out evaluations per run")
    eval_blocks: int = opt(64, "held-out blocks per evaluation")
    workers: int = opt(1, "worker processes (wall-clock numbers then share the CPUs)")
    loss_tolerance: float = opt(0.02, "Q8 tie tolerance in nats")
    margin: float = opt(0.1, "Q19 margin")


def default_text() -> list[str]:
    from ptmlab.tokenization.corpora import shared_data_dir

    root = shared_data_dir()
    path = root / "text" / "wikitext-2" / "valid.txt" if root else None
    if path is None or not path.is_file():
        raise PtmlabError("the shared text (../shared/data/text/wikitext-2/valid.txt) is not on this machine: pass "
                          "--files with English text files")
    return [str(path)]


def study_tokenizer(a: ScalingStudyArgs, files: list[str], out: Path) -> str:
    """The given tokenizer, or a WordPiece trained on ``files`` once and kept under OUT/tokenizer."""
    if a.tokenizer:
        return a.tokenizer
    from ptmlab.pretrain.corpus import expand_paths
    from ptmlab.tokenization.corpora import file_source
    from ptmlab.tokenization.train import train_and_save

    target = out / f"tokenizer-{a.vocab_size}"
    if not (target / "tokenizer.json").is_file():
        sources = [file_source(p) for p in expand_paths(files)]
        train_and_save(["wordpiece"], sources, a.vocab_size, target, lowercase=True)
    return str(target)


@STUDIES.register("scaling", help="Q8/Q19: sizes x FLOP budgets; compute frontier, power laws, optimal size")
def run(argv: list[str]) -> int:
    from ptmlab.scaling.config import ScaleConfig
    from ptmlab.scaling.plots import frontier_plot, isoflop_plot, tokens_plot
    from ptmlab.scaling.report import COLUMNS
    from ptmlab.scaling.sweep import run_sweep

    a = parse_study_args("scaling", ScalingStudyArgs, argv, __doc__, small=SMALL)
    out = Path(a.output)
    files = a.files or default_text()
    values = {k: getattr(a, k) for k in ("sizes", "budgets", "seeds", "objective", "block_size", "batch_size", "lr",
                                         "evals", "eval_blocks", "workers", "loss_tolerance", "margin")}
    cfg = build_config(ScaleConfig, {**values, "files": files, "tokenizer": "minilm", "output": str(out / "sweep"),
                                     "overwrite": a.overwrite}, source="study")  # inputs checked first
    from dataclasses import replace

    cfg = replace(cfg, tokenizer=study_tokenizer(a, files, out))
    r = run_sweep(cfg)
    columns = [c for c in COLUMNS if c not in ("name", "flops")]
    figures = []
    if r["curves"]:
        figures = [(frontier_plot(r), "frontier", "held-out loss vs training FLOPs, with the frontier and its fit"),
                   (tokens_plot(r), "loss_vs_tokens", "held-out loss vs tokens per size (Q19)"),
                   (isoflop_plot(r), "isoflop", "final loss vs size per budget (Q8)")]
    extra = {k: r[k] for k in ("q8", "q19", "fit_compute", "fit_params", "frontier", "cells", "pending")}
    write_study(out, "Study: scaling (Q8, Q19)", r["rows"], r["verdict"], figures, extra=extra, columns=columns)
    return 0
