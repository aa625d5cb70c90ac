"""``ScaleConfig``: a sweep's options. Sizes are ``LAYERSxHIDDEN`` (or ``LAYERSxHIDDENxHEADS``), budgets are
training FLOPs; every other option is shared by all runs of the sweep, so runs differ only in size, budget and seed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ptmlab.core.config import Validated, at_least, opt, positive
from ptmlab.core.errors import PtmlabError
from ptmlab.train.args import PRECISION_HELP, PRECISIONS

_SIZE = re.compile(r"^(\d+)x(\d+)(?:x(\d+))?$")


@dataclass(frozen=True)
class Size:
    layers: int
    hidden: int
    heads: int
    ffn: int

    @property
    def name(self) -> str:
        return f"{self.layers}x{self.hidden}"


def parse_size(text: str, head_dim: int = 16, ffn_mult: int = 4) -> Size:
    """``2x64`` -> 2 layers, hidden 64, hidden/head_dim heads, FFN ffn_mult*hidden; ``2x64x2`` sets the heads."""
    m = _SIZE.match(text.strip().lower())
    if not m:
        raise PtmlabError(f"size '{text}' is not LAYERSxHIDDEN (e.g. 2x64) or LAYERSxHIDDENxHEADS (e.g. 2x64x4)")
    layers, hidden = int(m.group(1)), int(m.group(2))
    heads = int(m.group(3)) if m.group(3) else max(1, hidden // head_dim)
    if layers < 1 or hidden < 1 or heads < 1:
        raise PtmlabError(f"size '{text}' needs at least 1 layer, hidden size 1 and 1 head")
    if hidden % heads:
        raise PtmlabError(f"size '{text}': hidden {hidden} is not a multiple of {heads} heads: pick sizes that divide")
    return Size(layers, hidden, heads, ffn_mult * hidden)


def parse_budget(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise PtmlabError(f"budget '{text}' is not a number of FLOPs (e.g. 1e10)") from None
    if not v > 0:
        raise PtmlabError(f"budget '{text}' must be a positive number of FLOPs (e.g. 1e10)")
    return v


@dataclass(frozen=True)
class ScaleConfig(Validated):
    OPTION_GROUP = "sweep"
    FIELD_GROUPS = {**dict.fromkeys(("files", "valid_files", "valid_fraction", "doc_sep", "tokenizer", "block_size"),
                                    "data"),
                    **dict.fromkeys(("objective", "arch", "head_dim", "ffn_mult", "batch_size", "lr", "warmup",
                                     "schedule", "evals", "eval_blocks", "precision"), "every run's training")}

    output: str = opt("runs/scale", "sweep directory (runs/, sweep.json, results.json, report.html)")
    sizes: list[str] = opt(["1x32", "2x64", "4x128"], "model sizes LAYERSxHIDDEN[xHEADS], comma-separated")
    budgets: list[str] = opt(["3e10", "1e11", "3e11"], "training-FLOP budgets, comma-separated (e.g. 1e10,3e10)")
    seeds: list[str] = opt(["0"], "seeds: every size x budget is trained once per seed")
    files: list[str] = opt([], "training text: files, folders, .gz, .jsonl; comma-separated")
    valid_files: list[str] = opt([], "held-out text for eval loss (default: --valid-fraction of --files)")
    valid_fraction: float = opt(0.05, "share of --files documents held out when --valid-files is not given")
    doc_sep: str = opt("blank", "documents in .txt files: blank or file", choices=["blank", "file"])
    objective: str = opt("mlm", "pre-training objective of every run")
    arch: str | None = opt(None, "architecture (default: the objective's)")
    tokenizer: str | None = opt(None, "tokenizer (zoo name or a `ptmlab tokenizer train` directory; default "
                                      "minilm). A small vocabulary keeps tiny models compute-bound, not softmax-bound")
    head_dim: int = opt(16, "hidden units per attention head when a size does not name its heads")
    ffn_mult: int = opt(4, "feed-forward size as a multiple of hidden")
    block_size: int = opt(64, "tokens per block")
    batch_size: int = opt(16, "blocks per optimizer step (the same for every run)")
    lr: float = opt(2e-3, "peak learning rate (the same for every run)")
    warmup: float = opt(0.06, "warm-up fraction of each run's steps")
    schedule: str = opt("linear", "learning-rate schedule: linear, cosine, constant")
    evals: int = opt(20, "held-out evaluations per run (the loss-vs-tokens curve; checkpoints: 4 per run)")
    eval_blocks: int = opt(64, "held-out blocks per evaluation")
    precision: str = opt("fp32", PRECISION_HELP, choices=list(PRECISIONS))
    workers: int = opt(1, "worker processes that train runs side by side (wall-clock numbers then share the CPUs)")
    loss_tolerance: float = opt(0.02, "Q8: losses closer than this (nats) are a tie (with seeds: at least 2 SE)")
    margin: float = opt(0.1, "Q19: the larger model must need this fraction fewer tokens/seconds to count")
    overwrite: bool = opt(False, "delete the sweep in --output and start again")

    def validate(self) -> None:
        if not self.sizes:
            raise PtmlabError("no sizes: pass --sizes LAYERSxHIDDEN[,...] (e.g. 1x32,2x64)")
        if not self.budgets:
            raise PtmlabError("no budgets: pass --budgets FLOPS[,...] (e.g. 1e10,3e10)")
        if not self.files:
            raise PtmlabError("no training text: pass --files FILE_OR_FOLDER[,...]")
        if not self.seeds:
            raise PtmlabError("no seeds: pass --seeds 0[,1,...]")
        for s in self.seeds:
            if not s.lstrip("-").isdigit():
                raise PtmlabError(f"seed '{s}' is not an integer: pass --seeds 0,1")
        at_least(self, 1, "head_dim", "ffn_mult", "batch_size", "evals", "workers")
        at_least(self, 8, "block_size")
        at_least(self, 0, "eval_blocks")
        positive(self, "lr")
        if not 0 < self.valid_fraction < 1 or not 0 <= self.warmup < 1:
            raise PtmlabError(f"--valid-fraction must be in (0, 1) and --warmup in [0, 1), got {self.valid_fraction} "
                              f"and {self.warmup}")
        if not 0 <= self.margin < 1:
            raise PtmlabError(f"--margin must be in [0, 1), got {self.margin}")
        if self.loss_tolerance < 0:
            raise PtmlabError(f"--loss-tolerance must be >= 0, got {self.loss_tolerance}")
        self.parsed_sizes()
        self.parsed_budgets()

    def parsed_sizes(self) -> list[Size]:
        sizes = [parse_size(s, self.head_dim, self.ffn_mult) for s in self.sizes]
        names = [s.name for s in sizes]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise PtmlabError(f"size {dup[0]} is listed twice in --sizes: list each size once")
        return sizes

    def parsed_budgets(self) -> list[float]:
        budgets = sorted({parse_budget(b) for b in self.budgets})
        return budgets

    def seed_list(self) -> list[int]:
        return sorted({int(s) for s in self.seeds})
