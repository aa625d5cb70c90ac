"""The options of ``ptmlab optimize`` (no torch imported here, so that ``--help`` is instant)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ptmlab.core.config import at_least, opt
from ptmlab.core.errors import PtmlabError
from ptmlab.train.args import STRATEGY_OPTIONS, TrainArgs

# the inference runtimes a candidate can run on (docs/optimize.md, "Backends")
BACKENDS = ("torch-fp32", "torch-bf16", "onnx", "onnx-fused", "onnx-int8", "onnx-int8-static")
# on request only (not in the default list): the fp32 ONNX graph on OpenVINO, and NNCF's int8 of it
OPTIONAL_BACKENDS = {"openvino": ("openvino",), "openvino-int8": ("openvino", "nncf")}
NOT_YET: dict[str, str] = {}
OBJECTIVES = ("latency", "throughput", "size")
HELD_OUT = ("auto", "test", "dev")
SAMPLERS = ("tpe", "random")
# the run's reading options, recorded in OUT/config.yaml for serve and predict (not options of optimize)
RUN_KEYS = ("max_length", "task_kind", "doc_stride", "label_all_subtokens")
STRUCTURE_KINDS = ("source", "vocab", "layers", "shrink", "prune", "static")
# training options that mean nothing here: students and recoveries always train fully, once, without a test pass
EXCLUDED = (*STRATEGY_OPTIONS, "llrd", "test", "max_steps", "report_to", "compile", "early_stopping", "eval_steps",
            "save_steps")


def parse_budget(text: str) -> float:
    """``90s``, ``20m``, ``1.5h`` or plain seconds -> seconds."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*", str(text))
    if not m or float(m.group(1)) <= 0:
        raise PtmlabError(f"--budget '{text}' is not a time: give seconds, minutes or hours, e.g. 90s, 20m or 1h")
    return float(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[m.group(2)]


def parse_batches(items: list) -> tuple[int, ...]:
    out = []
    for b in items:
        s = str(b).strip()
        if not s.isdigit() or int(s) < 1:
            raise PtmlabError(f"--batch entry '{b}' is not a batch size: give whole numbers >= 1, e.g. --batch 1,32")
        out.append(int(s))
    if not out:
        raise PtmlabError("--batch is empty: give the batch sizes to time, e.g. --batch 1,32")
    return tuple(sorted(set(out) | {1}))  # batch 1 is always timed


@dataclass(frozen=True)
class OptimizeConfig(TrainArgs):
    OPTION_GROUP = "search"
    FIELD_GROUPS = {**dict.fromkeys(("epochs", "lr", "batch_size", "eval_batch_size", "weight_decay", "warmup",
                                     "distill_alpha", "distill_temperature", "seed"), "training of students and "
                                                                                     "pruned models")}
    CLI_EXCLUDE = EXCLUDED

    model: str = opt("", "the fine-tuned run directory to optimize")
    max_loss: float | None = opt(None, "largest drop of the run's dev score allowed, in points of its main metric "
                                       "(1 = one accuracy point)")
    batch: list[str] = opt(["1", "32"], "batch sizes timed (batch 1 always)")
    objective: str = opt("latency", "latency (mean speed-up over --batch), throughput (examples/s at the largest "
                                    "--batch) or size (MB on disk)", choices=list(OBJECTIVES))
    budget: str = opt("30m", "time for the search (90s, 20m, 1h); a resumed search gets what is left")
    trials: int = opt(0, "stop after this many trials (0: when the budget or the search space is used up)")
    backends: list[str] = opt(list(BACKENDS), "runtimes to try: " + ", ".join(BACKENDS)
                              + " (torch-bf16 only where the CPU runs bf16 fast); on request: openvino, "
                                "openvino-int8 (NNCF)")
    structures: list[str] = opt(["auto"], "structures to try: auto (a default set for the run's size), source, vocab, "
                                          "layers:K (a student of K layers), shrink:layers=L/hidden=H/heads=A/ffn=F "
                                          "(TinyBERT-style), prune:heads=F/ffn=F (recovered by distillation), "
                                          "static[:dim=D] (a static-embedding student; sentence tasks)")
    sampler: str = opt("tpe", "Optuna sampler: tpe or random", choices=list(SAMPLERS))
    held_out: str = opt("auto", "held-out part for the winner's report: test (the run's labelled test split), dev "
                                "(a part of dev the search never reads), auto (test when labelled, else dev)",
                        choices=list(HELD_OUT))
    held_out_fraction: float = opt(0.5, "with a dev held-out part: the share of dev set aside")
    calibration_examples: int = opt(256, "training rows that calibrate static int8")
    latency_texts: int = opt(64, "dev texts the latency batches are drawn from")
    latency_rounds: int = opt(5, "round-robin rounds of the final side-by-side timing (median reported)")
    search_rounds: int = opt(3, "round-robin rounds, candidate and source, when a trial is timed in the search")
    threads: int = opt(0, "threads of every model timed and scored, PyTorch and onnxruntime alike (0: this machine's "
                          "cores, at most OMP_NUM_THREADS)")
    finalists: int = opt(8, "feasible trials (plus the front) timed again side by side at the end")
    distill_alpha: float = opt(0.5, "students and pruned models: weight of soft_ce to the run's outputs (1 - alpha "
                                    "on the labels)")
    distill_temperature: float = opt(2.0, "soft_ce temperature for students and pruned models")
    epochs: float = opt(1.0, "epochs of distillation for a student and of recovery for a pruned model")

    def validate(self) -> None:
        if self.max_loss is None:
            raise PtmlabError("--max-loss is missing: give the dev-score drop you accept in points, e.g. --max-loss 1")
        if not self.max_loss >= 0:
            raise PtmlabError(f"--max-loss {self.max_loss} must be >= 0 points")
        parse_batches(self.batch)
        parse_budget(self.budget)
        if self.objective not in OBJECTIVES:
            raise PtmlabError(f"--objective '{self.objective}' is unknown: choose {', '.join(OBJECTIVES)}")
        if self.sampler not in SAMPLERS:
            raise PtmlabError(f"--sampler '{self.sampler}' is unknown: choose {', '.join(SAMPLERS)}")
        if self.held_out not in HELD_OUT:
            raise PtmlabError(f"--held-out '{self.held_out}' is unknown: choose {', '.join(HELD_OUT)}")
        if not self.backends:
            raise PtmlabError(f"--backends is empty: choose from {', '.join(BACKENDS)}")
        import importlib.util

        for b in self.backends:
            if b in NOT_YET:
                raise PtmlabError(f"backend '{b}': {NOT_YET[b]}; choose from {', '.join(BACKENDS)}")
            if b in OPTIONAL_BACKENDS:
                missing = [m for m in OPTIONAL_BACKENDS[b] if importlib.util.find_spec(m) is None]
                if missing:
                    raise PtmlabError(f"backend '{b}' needs {' and '.join(missing)}, which is not installed: "
                                      f"pip install {' '.join(missing)}")
                continue
            if b not in BACKENDS:
                raise PtmlabError(f"unknown backend '{b}': choose from {', '.join((*BACKENDS, *OPTIONAL_BACKENDS))}")
        if not self.structures:
            raise PtmlabError("--structures is empty: give auto or structures like source,layers:3")
        from ptmlab.optimize.space import parse_structure

        for s in self.structures:
            if s != "auto":
                parse_structure(s)
        if not 0 < self.held_out_fraction < 1:
            raise PtmlabError(f"--held-out-fraction {self.held_out_fraction} must be in (0, 1), e.g. 0.5")
        at_least(self, 0, "trials", "threads")
        at_least(self, 1, "calibration_examples", "latency_texts", "latency_rounds", "search_rounds", "finalists")
        if not 0 <= self.distill_alpha <= 1:
            raise PtmlabError(f"--distill-alpha {self.distill_alpha} is out of range: give a weight in [0, 1]")
        if not self.distill_temperature > 0:
            raise PtmlabError(f"--distill-temperature must be positive, got {self.distill_temperature}")
        self.validate_train()
