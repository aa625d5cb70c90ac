"""Config dataclasses shared by every command that trains: model, data and training options.

Commands compose them by inheritance (``FinetuneConfig(TrainArgs, DataArgs, ModelArgs)``: the last base's fields
come first in --help); each field is a CLI flag and a YAML key.
"""

from __future__ import annotations

from dataclasses import dataclass

from ptmlab.core.config import Validated, at_least, opt
from ptmlab.core.errors import PtmlabError
from ptmlab.data.labels import KIND_CHOICES
from ptmlab.data.tasks import TASK_KINDS
from ptmlab.train.embedding_args import EmbeddingTrainArgs


@dataclass(frozen=True)
class ModelArgs(Validated):
    OPTION_GROUP = "model"

    model: str = opt("minilm", "zoo name (minilm, mpnet, tiny), model directory, run directory or hub id")
    dropout: float | None = opt(None, "override the model's dropout probabilities (0 disables dropout)")
    random_init: bool = opt(False, "same architecture with fresh random weights instead of the pretrained ones")

    def validate_model(self) -> None:
        from ptmlab.models.zoo import check_dropout

        check_dropout(self.dropout)


@dataclass(frozen=True)
class DataArgs(Validated):
    OPTION_GROUP = "data"

    task: str = opt("tweets", "task name (cola sst2 mrpc stsb rte wnli tweets), a name for --train-file data, "
                              "hf:NAME[:CONFIG] (a hub dataset; cached ones offline), or a data file or "
                              "Dataset.save_to_disk directory")
    glue_dir: str | None = opt(None, "GLUE data directory (default ../shared/data/glue when present)")
    train_file: str | None = opt(None, "training data (.csv, .tsv, .jsonl, .parquet or .arrow)")
    dev_file: str | None = opt(None, "development data for evaluation")
    test_file: str | None = opt(None, "test data")
    text_col: str = opt("text", "text column of --train-file data")
    text_pair_col: str | None = opt(None, "second text column for pair tasks")
    label_col: str = opt("label", "label column of --train-file data")
    label_kind: str = opt("auto", "classification, regression, multi-label, or auto: classes for names, integers "
                                  "(their values are the class ids) and ClassLabel columns, regression for "
                                  "fractional numbers, multi-label for lists of labels (csv: JSON lists); a column "
                                  "that could be classes or scores is refused with a request to choose",
                          choices=list(KIND_CHOICES))
    task_kind: str = opt("sentence", "what --train-file data holds: sentence (one label per text or pair; "
                                     "--label-kind), token-classification (tagged words: CoNLL columns, or token "
                                     "and tag lists) or extractive-qa (question, context and answers: SQuAD JSON "
                                     "or tables) or embedding (anchor/positive pairs, triplets, sentence1/sentence2/"
                                     "score pairs or query/positive: a sentence embedder, docs/tasks.md); built-in "
                                     "tasks know their kind", choices=list(TASK_KINDS))
    doc_stride: int = opt(128, "extractive QA: tokens shared by consecutive windows of a context longer than "
                               "--max-length (which defaults to 384 there)")
    label_all_subtokens: bool = opt(False, "token classification: label every sub-token of a word, not only the "
                                           "first (predictions are read from the first either way)")
    train_split: str = opt("train", "split of a hub dataset, DatasetDict or save_to_disk directory to train on")
    eval_split: str | None = opt(None, "split to evaluate on (default: the first of validation, dev, valid, val, "
                                       "eval)")
    max_train: int | None = opt(None, "use the first N training examples after a seeded shuffle")
    max_eval: int | None = opt(None, "use the first N dev examples after a seeded shuffle (the test split stays whole)")
    max_train_per_class: int | None = opt(None, "classification: keep K training examples of every class (seeded, "
                                                "stratified; after --max-train): few-shot training, e.g. with "
                                                "--strategy setfit; a class with fewer than K is an error")
    max_length: int = opt(128, "truncate inputs to this many tokens")

    def validate_data(self) -> None:
        if self.max_length < 8 or self.max_length > 8192:
            raise PtmlabError(f"--max-length {self.max_length} is out of range: use 8..8192 (models take <=512)")
        at_least(self, 0, "max_train", "max_eval", "doc_stride")
        at_least(self, 1, "max_train_per_class")


# ptmlab.longseq.strategies implements them (train may not import it)
LONG_STRATEGIES = ("truncate", "chunk", "window", "recurrence")
SEGMENT_POOLS = ("last", "mean", "max")  # recurrence: segment logits -> document logits


@dataclass(frozen=True)
class LongArgs:
    """How documents longer than the model's window are read (docs/long_inputs.md); only ``finetune`` and
    ``evaluate`` take these, so commands that would ignore them do not offer them."""

    OPTION_GROUP = "long inputs"

    long_strategy: str = opt("truncate", "long inputs: truncate to --max-length (the usual), chunk (overlapping "
                                         "--long-chunk windows, logits pooled), window (a `ptmlab longify` model "
                                         "reads all --max-length tokens) or recurrence (--long-chunk segments in "
                                         "order, each attending to the previous one's states)",
                             choices=list(LONG_STRATEGIES))
    long_chunk: int = opt(512, "chunk and recurrence strategies: tokens per chunk / segment, special tokens included")
    long_stride: int = opt(256, "chunk strategy: tokens between the starts of consecutive chunks")
    long_pool: str = opt("mean", "chunk strategy: pool the chunks' logits by mean or max", choices=["mean", "max"])
    long_memory: int | None = opt(None, "recurrence strategy: memory tokens from earlier segments (default: one "
                                        "segment, --long-chunk; 0: no memory)")
    long_segment_pool: str = opt("last", "recurrence strategy: the last segment's logits (its [CLS] has seen the "
                                         "document through the memory) or mean / max over every segment's",
                                 choices=list(SEGMENT_POOLS))

    def validate_long(self) -> None:
        if self.long_strategy not in LONG_STRATEGIES:
            raise PtmlabError(f"--long-strategy '{self.long_strategy}' is unknown: choose {', '.join(LONG_STRATEGIES)}")
        if self.long_pool not in ("mean", "max"):
            raise PtmlabError(f"--long-pool '{self.long_pool}' is unknown: choose mean or max")
        if self.long_segment_pool not in SEGMENT_POOLS:
            raise PtmlabError(f"--long-segment-pool '{self.long_segment_pool}' is unknown: choose "
                              f"{', '.join(SEGMENT_POOLS)}")
        if (self.long_memory or 0) < 0:
            raise PtmlabError(f"--long-memory {self.long_memory} is negative: use 0 (no memory) or more tokens, "
                              f"e.g. 512")
        if self.long_chunk < 3:
            raise PtmlabError(f"--long-chunk {self.long_chunk} is too short: use at least 3 tokens (e.g. 512)")
        if self.long_strategy != "recurrence" and not 1 <= self.long_stride <= self.long_chunk - 2:  # unused there
            raise PtmlabError(f"--long-stride {self.long_stride} must be between 1 and --long-chunk - 2 = "
                              f"{self.long_chunk - 2}: e.g. {max(1, self.long_chunk // 2)}")


# the options that choose how a pretrained model is fine-tuned: commands whose model always trains fully
# (distillation, pre-training) leave them out of their flags (``CLI_EXCLUDE``)
STRATEGY_OPTIONS = ("strategy", "unfreeze_every", "adapter_size", "lora_r", "lora_alpha", "lora_dropout",
                    "lora_target_modules", "setfit_pairs", "setfit_lr", "setfit_batch_size")


# one set of --precision choices for every command that runs a model (training, evaluation, prediction, serving)
PRECISIONS = ("auto", "fp32", "bf16", "fp16")
PRECISION_HELP = ("auto (bf16 autocast where the hardware runs bf16 fast, else fp32), fp32, bf16 or fp16 (autocast; "
                  "training adds a gradient scaler, for GPUs without fast bf16)")

MAX_EPOCHS = 100_000  # beyond any real run: a larger number is a typo, and would train until stopped


@dataclass(frozen=True)
class TrainArgs(Validated):
    OPTION_GROUP = "training"
    FIELD_GROUPS = {**dict.fromkeys(("lr", "weight_decay", "warmup", "schedule", "stlr_cut_frac", "stlr_ratio",
                                     "max_grad_norm"), "optimizer and schedule"),
                    **dict.fromkeys(STRATEGY_OPTIONS + ("llrd",), "fine-tuning strategy"),
                    **dict.fromkeys(("device", "precision", "group_by_length", "first_token_only", "fast_dropout",
                                     "reuse_host_memory", "compile"), "hardware and speed")}

    output: str | None = opt(None, "run directory to create", aliases=("--output-dir",))
    epochs: float = opt(3.0, "training epochs (fractions allowed)", aliases=("--num-train-epochs",))
    max_steps: int = opt(0, "stop after this many optimizer steps (0: use --epochs)")
    batch_size: int = opt(32, "global batch size per optimizer step (split across processes; on one process the "
                              "same as transformers' per-device batch)", aliases=("--per-device-train-batch-size",))
    grad_accum: int = opt(1, "micro-batches per optimizer step (the batch size is split into them)",
                          aliases=("--gradient-accumulation-steps",))
    eval_batch_size: int = opt(128, "evaluation batch size", aliases=("--per-device-eval-batch-size",))
    lr: float = opt(5e-5, "peak learning rate", aliases=("--learning-rate",))
    weight_decay: float = opt(0.01, "AdamW weight decay (not applied to biases and LayerNorms)")
    warmup: float = opt(0.06, "warm-up as a fraction of training steps (linear and cosine schedules)",
                        aliases=("--warmup-ratio",))
    schedule: str = opt("linear", "learning-rate schedule: linear, cosine, stlr, constant",
                        aliases=("--lr-scheduler-type",))
    stlr_cut_frac: float = opt(0.1, "slanted triangular: fraction of steps spent increasing the rate")
    stlr_ratio: float = opt(32.0, "slanted triangular: ratio of the peak to the lowest rate")
    strategy: str = opt("full", "fine-tuning strategy: full, frozen, gradual-unfreeze, adapter, lora, ulmfit, setfit")
    llrd: float = opt(1.0, "layer-wise learning-rate decay factor (discriminative fine-tuning); 1 = off")
    unfreeze_every: int = opt(0, "gradual-unfreeze: steps between unfreezing groups (0: the training steps spread "
                                            "evenly over the groups)")
    adapter_size: int = opt(64, "bottleneck size of adapters")
    lora_r: int = opt(8, "LoRA rank")
    lora_alpha: int = opt(16, "LoRA scaling alpha")
    lora_dropout: float = opt(0.1, "LoRA dropout")
    lora_target_modules: list[str] = opt([], "LoRA: names of the modules to adapt (e.g. query,key,value,dense; a "
                                             "module matches when its name ends with one); default: the attention "
                                             "query and value of the architecture's structure map")
    setfit_pairs: int = opt(0, "setfit: same-class / different-class training pairs for the contrastive phase "
                               "(0: 40 per training example, half of each kind, at most 5000)")
    setfit_lr: float = opt(2e-5, "setfit: learning rate of the encoder in the contrastive phase")
    setfit_batch_size: int = opt(16, "setfit: pairs per optimizer step in the contrastive phase")
    max_grad_norm: float = opt(1.0, "gradient clipping norm (0: off)")
    eval_steps: int = opt(0, "evaluate every N steps (0: at the end of each epoch)")
    save_steps: int = opt(0, "write a resumable checkpoint every N steps (0: at each evaluation)")
    logging_steps: int = opt(10, "log the training loss every N steps")
    report_to: str = opt("none", "also send the log rows to an experiment tracker (accelerate's): none, "
                                 "tensorboard, trackio, mlflow or wandb, written under RUN/tracking (pip install "
                                 "ptmlab[NAME])", choices=["none", "tensorboard", "trackio", "mlflow", "wandb"])
    early_stopping: int = opt(0, "stop after N evaluations without improvement (0: off)")
    keep_best: bool = opt(True, "keep the best evaluated weights as the final model")
    seed: int = opt(42, "random seed for every RNG")
    device: str = opt("auto", "where to train: auto (a CUDA GPU, else an Apple GPU (mps), else the CPU), cpu, cuda or "
                              "mps", choices=["auto", "cpu", "cuda", "mps"])
    precision: str = opt("auto", PRECISION_HELP, choices=list(PRECISIONS))
    group_by_length: bool = opt(True, "batch examples of similar length together (less padding)")
    first_token_only: bool = opt(True, "sequence classification: run the last layer's feed-forward block on the one "
                                       "position the head reads (exact: same logits and gradients; less work)")
    fast_dropout: bool = opt(True, "CPU training: draw dropout masks 16 bits per element from one 64-bit random word "
                                   "(same keep probability to 1/65536, about 3x cheaper than torch's; attention "
                                   "dropout too on sdpa models); --no-fast-dropout uses torch's")
    reuse_host_memory: bool = opt(True, "CPU training: keep freed memory in the process while training (glibc "
                                        "malloc settings, restored after), sparing tens of thousands of page faults "
                                        "per step (its evaluations follow); --no-reuse-host-memory leaves malloc be")
    compile: str = opt("off", "torch.compile the model: off, default, reduce-overhead (CUDA graphs), max-autotune; "
                              "batches are then padded to multiples of 32 tokens so shapes repeat",
                       choices=["off", "default", "reduce-overhead", "max-autotune"])
    overwrite: bool = opt(False, "replace an existing run in --output")
    test: bool = opt(True, "evaluate on the test split at the end when it has labels")

    def validate_train(self) -> None:
        from ptmlab.train.device import resolve_device
        from ptmlab.train.optim import SCHEDULES
        from ptmlab.train.strategies import STRATEGIES

        if not self.lr > 0:
            raise PtmlabError(f"--lr must be positive, got {self.lr}")
        if not self.epochs > 0 and self.max_steps <= 0:
            raise PtmlabError(f"--epochs must be positive, got {self.epochs}")
        if not self.epochs <= MAX_EPOCHS:  # NaN and 1e308 too: a run that would never end
            raise PtmlabError(f"--epochs must be at most {MAX_EPOCHS:,}, got {self.epochs}")
        if not 0 <= self.seed < 2**32:  # what numpy's generators take
            raise PtmlabError(f"--seed must be in 0..{2**32 - 1}, got {self.seed}")
        at_least(self, 1, "batch_size", "grad_accum", "eval_batch_size", "adapter_size", "lora_r", "logging_steps")
        at_least(self, 0, "max_steps", "unfreeze_every", "max_grad_norm", "eval_steps", "save_steps", "early_stopping",
                 "setfit_pairs")
        at_least(self, 1, "setfit_batch_size")
        if not self.setfit_lr > 0:
            raise PtmlabError(f"--setfit-lr must be positive, got {self.setfit_lr}")
        if self.batch_size % self.grad_accum:
            raise PtmlabError(f"--batch-size {self.batch_size} must be a multiple of --grad-accum {self.grad_accum}")
        if not 0 < self.llrd <= 1:
            raise PtmlabError(f"--llrd must be in (0, 1], got {self.llrd}")
        if not 0 <= self.warmup < 1:
            raise PtmlabError(f"--warmup is a fraction in [0, 1), got {self.warmup}")
        if not 0 < self.stlr_cut_frac < 1:
            raise PtmlabError(f"--stlr-cut-frac must be in (0, 1), got {self.stlr_cut_frac}")
        if self.weight_decay < 0:
            raise PtmlabError(f"--weight-decay must be >= 0, got {self.weight_decay}")
        if not self.lora_alpha > 0 or not 0 <= self.lora_dropout < 1:
            raise PtmlabError(f"--lora-alpha must be positive and --lora-dropout in [0, 1), got {self.lora_alpha} and "
                              f"{self.lora_dropout}")
        if not self.stlr_ratio >= 1:
            raise PtmlabError(f"--stlr-ratio (peak over lowest rate) must be >= 1, got {self.stlr_ratio}")
        SCHEDULES.get(self.schedule)
        resolve_device(self.device)  # an absent --device cuda/mps fails here, before the run directory is made
        for s in self.strategy.split("+"):
            STRATEGIES.get(s)
        if self.report_to != "none":  # the tracker's package, checked before anything is written
            from ptmlab.core.extras import require_extra

            require_extra(self.report_to, f"--report-to {self.report_to}")


@dataclass(frozen=True)
class MultiTaskArgs:
    """Several tasks, one encoder, a head per task (MT-DNN; docs/finetuning.md): ``finetune`` and ``distill``."""

    OPTION_GROUP = "multi-task"

    tasks: list[str] = opt([], "multi-task: two or more tasks trained together, one head each (e.g. sst2,mrpc,rte); "
                               "replaces --task")
    task_sampling: str = opt("proportional", "multi-task: how often each task's batches are drawn: proportional to "
                                             "its size, uniform, or sqrt of its size",
                             choices=["proportional", "uniform", "sqrt"])

    def validate_tasks(self) -> None:
        from ptmlab.data.multitask import parse_tasks, task_probabilities

        task_probabilities([1], self.task_sampling)
        if self.tasks:
            parse_tasks(self.tasks)


@dataclass(frozen=True)
class FinetuneConfig(TrainArgs, EmbeddingTrainArgs, LongArgs, MultiTaskArgs, DataArgs, ModelArgs):  # model first
    revision: str | None = opt(None, "hub models: the branch, tag or commit to load (same as MODEL@REVISION)",
                               group="model")

    def validate(self) -> None:
        self.validate_embedding()
        self.validate_tasks()
        self.validate_model()
        self.validate_data()
        self.validate_long()
        self.validate_train()
