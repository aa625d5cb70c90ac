"""``PretrainConfig``: the pre-training options, composed with the foundation's training options."""

from __future__ import annotations

from dataclasses import dataclass

from ptmlab.core.config import at_least, opt
from ptmlab.core.errors import PtmlabError
from ptmlab.train.args import STRATEGY_OPTIONS, TrainArgs


@dataclass(frozen=True)
class PretrainArgs:
    files: list[str] = opt([], "training text: files, folders, .gz, .jsonl (a 'text' field); comma-separated")
    valid_files: list[str] = opt([], "held-out text for eval loss (default: --valid-fraction of --files)")
    valid_fraction: float = opt(0.05, "share of --files documents held out for eval loss, in (0, 1)")
    doc_sep: str = opt("blank", "documents in .txt files: blank (split at blank lines) or file (one per file)",
                       choices=["blank", "file"])
    objective: str = opt("mlm", "clm mlm wwm span t5 bart electra nsp sop plm")
    model: str | None = opt(None, "continue pre-training this encoder (zoo name, run or model directory); "
                                  "default: a new model from --arch and its size")
    arch: str | None = opt(None, "architecture of a new model: bert roberta electra gpt2 t5 bart xlnet "
                                 "(default: the objective's)")
    size: str = opt("tiny", "named size of a new model: tiny mini small base (--layers etc. override it)")
    layers: int = opt(0, "transformer layers of a new model (0: from --size)")
    hidden: int = opt(0, "hidden size of a new model (0: from --size)")
    heads: int = opt(0, "attention heads of a new model (0: from --size)")
    ffn: int = opt(0, "feed-forward size of a new model (0: from --size)")
    tokenizer: str | None = opt(None, "tokenizer: zoo name, run directory or a `ptmlab tokenizer train` directory "
                                      "(default: --model's, else minilm)")
    block_size: int = opt(128, "tokens per training block")
    masking: str | None = opt(None, "static (BERT: the same masks every epoch) or dynamic (RoBERTa)")
    mask_prob: float | None = opt(None, "masking rate of the masking objectives (default 0.15)")
    noise_density: float | None = opt(None, "t5: share of tokens corrupted (default 0.15)")
    mean_span: float | None = opt(None, "t5: mean corrupted span length (default 3)")
    corruptions: list[str] | None = opt(None, "bart: token_masking token_deletion text_infilling "
                                              "sentence_permutation document_rotation (default text_infilling)")
    generator_fraction: float | None = opt(None, "electra: generator width as a fraction of the discriminator's")
    sbo: bool | None = opt(None, "span: add SpanBERT's span-boundary objective")
    max_tokens: int = opt(0, "stop after this many training tokens (0: off)")
    max_flops: float = opt(0.0, "stop after this many training FLOPs (6N per token plus attention; 0: off)")
    eval_blocks: int = opt(256, "held-out blocks used for eval loss (0: all)")


@dataclass(frozen=True)
class PretrainConfig(TrainArgs, PretrainArgs):
    CLI_EXCLUDE = (*STRATEGY_OPTIONS, "test")  # every weight trains; pre-training has no test split

    lr: float = opt(5e-4, "peak learning rate")
    epochs: float = opt(1.0, "passes over the training blocks (--max-steps/--max-tokens/--max-flops stop earlier)")
    eval_steps: int = opt(100, "evaluate the held-out loss every N steps")
    keep_best: bool = opt(False, "keep the weights with the lowest eval loss (default: the last ones)")
    test: bool = opt(False, "unused by pre-training")

    def validate(self) -> None:
        self.validate_train()
        if self.strategy != "full":
            raise PtmlabError(f"--strategy {self.strategy} does not apply to pre-training: every weight trains")
        if not self.files:
            raise PtmlabError("no training text: pass --files FILE_OR_FOLDER[,...]")
        if not 0 < self.valid_fraction < 1:
            raise PtmlabError(f"--valid-fraction must be in (0, 1), got {self.valid_fraction}")
        if self.block_size < 8:
            raise PtmlabError(f"--block-size must be at least 8, got {self.block_size}")
        at_least(self, 0, "layers", "hidden", "heads", "ffn", "max_tokens", "eval_blocks", "max_flops")
        at_least(self, 1, "mean_span")
        for name in ("mask_prob", "noise_density"):  # also checked where each objective is built (the Python API)
            value = getattr(self, name)
            if value is not None and not 0 < value < 1:
                raise PtmlabError(f"--{name.replace('_', '-')} must be in (0, 1), got {value}")
        if self.generator_fraction is not None and not 0 < self.generator_fraction <= 1:
            raise PtmlabError(f"--generator-fraction must be in (0, 1], got {self.generator_fraction}")
        if self.model and (self.arch or self.layers or self.hidden or self.heads or self.ffn):
            raise PtmlabError("--model continues an existing model: drop --arch/--layers/--hidden/--heads/--ffn, "
                              "or drop --model to build a new one")
