"""The options of ``prune``, ``compress`` and ``quantize``, in a module that imports no torch (so that their
``--help`` is instant); ``prune``, ``pipeline`` and ``quantize`` re-export them beside the code that runs them."""

from __future__ import annotations

from dataclasses import dataclass

from ptmlab.core.config import at_least, opt
from ptmlab.core.errors import PtmlabError
from ptmlab.train.args import DataArgs, ModelArgs, TrainArgs

DEFAULT_KEEP_FP32 = ["classifier*", "pre_classifier*", "*pooler*"]
QUANT_METHODS = ("torch-int8", "onnx-int8", "kbit")


@dataclass(frozen=True)
class RecoveryArgs:
    """Recovery fine-tuning after each pruning (or other structural) step, optionally distilled from the model as
    it was before: the options and checks ``prune`` and ``compress`` share."""

    recover_epochs: float = opt(1.0, "recovery fine-tuning epochs after each pruning or structural step (0: none)")
    distill_alpha: float = opt(0.0, "recovery: weight of soft_ce to the outputs of the model before pruning (1 - "
                                    "alpha on the labels); 0: plain fine-tuning")
    distill_temperature: float = opt(2.0, "recovery: soft_ce temperature (the KL term is scaled by T^2)")

    def validate_recovery(self) -> None:
        at_least(self, 0, "recover_epochs")
        if not 0 <= self.distill_alpha <= 1:
            raise PtmlabError(f"--distill-alpha {self.distill_alpha} is out of range: give a weight in [0, 1]")
        if not self.distill_temperature > 0:
            raise PtmlabError(f"--distill-temperature must be positive, got {self.distill_temperature}")
        if self.distill_alpha and not self.recover_epochs > 0:
            raise PtmlabError("--distill-alpha applies to recovery fine-tuning: pass --recover-epochs > 0")


@dataclass(frozen=True)
class PruneConfig(ModelArgs, DataArgs, TrainArgs, RecoveryArgs):
    heads: float = opt(0.0, "fraction of attention heads to remove, in [0, 1)")
    ffn: float = opt(0.0, "fraction of FFN neurons to remove in every layer, in [0, 1)")
    params: float = opt(0.0, "fraction of all parameters to remove by pruning heads and FFN alike (overrides "
                             "--heads/--ffn)")
    layers: list[str] = opt([], "whole layers to remove, e.g. 0,5")
    importance: str = opt("gate", "importance score: gate (|dL/d gate|), grad-weight, entropy")
    importance_examples: int = opt(500, "training examples used to score heads and neurons")
    use_labels: bool = opt(True, "score with gold labels (--no-use-labels: the model's own predictions)")
    iterations: int = opt(1, "prune in this many equal steps, each followed by recovery")

    def validate(self) -> None:
        self.validate_model()
        self.validate_data()
        self.validate_recovery()
        from ptmlab.compress.importance import IMPORTANCE
        from ptmlab.compress.targets import check_fraction

        for name in ("heads", "ffn", "params"):
            check_fraction(name, getattr(self, name))
        IMPORTANCE.get(self.importance)
        at_least(self, 1, "iterations", "importance_examples")
        for layer in self.layers:
            if not str(layer).isdigit():
                raise PtmlabError(f"--layers entry '{layer}' is not a layer number: give numbers like 0,5")
        if not (self.heads or self.ffn or self.params or self.layers):
            raise PtmlabError("nothing to prune: pass --heads, --ffn, --params or --layers")
        if self.recover_epochs > 0:
            self.validate_train()


@dataclass(frozen=True)
class CompressConfig(ModelArgs, DataArgs, TrainArgs, RecoveryArgs):
    steps: list[str] = opt(["vocab", "heads=0.4", "ffn=0.3", "int8"], "steps in order: vocab, heads=F, ffn=F, "
                                                                         "layers=I+J, params=F, magnitude=F, "
                                                                         "lowrank=R, share=G, int8, torch-int8")
    importance: str = opt("gate", "importance score for heads/ffn steps: gate, grad-weight, entropy")
    importance_examples: int = opt(500, "training examples used to score heads and neurons")
    latency_repeats: int = opt(5, "timed repeats per latency measurement (median reported)")

    def validate(self) -> None:
        self.validate_model()
        self.validate_data()
        self.validate_train()
        self.validate_recovery()
        from ptmlab.compress.importance import IMPORTANCE
        from ptmlab.compress.pipeline import RECOVERED_STEPS, SLICING_STEPS, parse_step

        IMPORTANCE.get(self.importance)
        parsed = [parse_step(s) for s in self.steps]
        if not parsed:
            raise PtmlabError("--steps is empty: give steps like vocab,heads=0.4,int8")
        for i, (name, _) in enumerate(parsed):
            if name in ("int8", "torch-int8") and i != len(parsed) - 1:
                raise PtmlabError(f"step '{name}' must come last: a quantized model cannot be pruned further")
        for i, (name, _) in enumerate(parsed):
            later = [n for n, _ in parsed[i + 1:] if n in SLICING_STEPS]
            if name in ("lowrank", "share") and later:
                raise PtmlabError(f"step '{later[0]}' cannot follow '{name}': prune heads, FFN, layers and weights "
                                  f"before low-rank factorisation or weight sharing")
        at_least(self, 1, "importance_examples", "latency_repeats")
        names = [n for n, _ in parsed]
        if self.distill_alpha and "vocab" in names and any(n in RECOVERED_STEPS for n in names[:names.index("vocab")]):
            raise PtmlabError("step 'vocab' must come before every recovered step with --distill-alpha: the teacher "
                              "reads the token ids of the vocabulary it was given")


@dataclass(frozen=True)
class QuantizeConfig(DataArgs):
    model: str = opt("", "run directory or model to quantize")
    output: str | None = opt(None, "run directory for the ONNX int8 model, table and report")
    methods: list[str] = opt(["torch-int8", "onnx-int8", "kbit"], "variants to measure: torch-int8, onnx-int8, "
                                                                 "kbit")
    bits: list[str] = opt(["8", "4", "2"], "weight bits for the simulated k-bit curve")
    keep_fp32: list[str] = opt(DEFAULT_KEEP_FP32, "module-name patterns kept in fp32 (torch-int8 and kbit)")
    eval_batch_size: int = opt(64, "evaluation batch size")
    latency_repeats: int = opt(5, "timed repeats per latency measurement (median reported)")
    seed: int = opt(42, "seed for --max-eval subsets")
    overwrite: bool = opt(False, "replace an existing run in --output")

    def validate(self) -> None:
        self.validate_data()
        for m in self.methods:
            if m not in QUANT_METHODS:
                raise PtmlabError(f"unknown quantization method '{m}': use {', '.join(QUANT_METHODS)}")
        for b in self.bits:
            if b not in ("2", "3", "4", "8"):
                raise PtmlabError(f"--bits entry '{b}' is not supported: use 8, 4, 3 or 2")
        at_least(self, 1, "eval_batch_size", "latency_repeats")
