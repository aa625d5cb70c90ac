"""``DistillConfig``: the distillation options composed with the foundation's data and training options."""

from __future__ import annotations

from dataclasses import dataclass

from ptmlab.core.config import at_least, opt
from ptmlab.core.errors import PtmlabError
from ptmlab.train.args import STRATEGY_OPTIONS, DataArgs, MultiTaskArgs, TrainArgs


@dataclass(frozen=True)
class DistillArgs:
    teacher: str | None = opt(None, "teacher: a fine-tuned run directory or a model with a task head; multi-task: a "
                                    "multi-task run or one run per task, sst2=RUN1,mrpc=RUN2")
    student: str = opt("layers:3", "student: layers:K, layers:0,2,4, shrink:layers=4,hidden=312,heads=12,ffn=1200"
                                   "[,init=random], bilstm, cnn, static[:dim=256,weights=zipf|none,tune=1] (a token "
                                   "table from the teacher), or a zoo model / model directory")
    losses: list[str] = opt(["soft_ce"], "losses to combine, NAME or NAME:WEIGHT: soft_ce hidden_mse embedding_mse "
                                         "attention_mse attention_kl cosine minilm pkd")
    layer_map: str = opt("uniform", "student->teacher layers: uniform, skip, last, or explicit (1,3,5 or 0:1,2:5)")
    matches: list | None = opt(None, "matches declared in --config (loss, student, teacher, feature, weight, "
                                     "projection); replace --losses", cli=False)
    temperature: float = opt(2.0, "soft_ce temperature T (the KL term is scaled by T^2)")
    alpha: float = opt(0.5, "soft_ce weight of the teacher term (1 - alpha goes to the hard labels)")
    relation_heads: int = opt(0, "minilm relation heads (0: the teacher's head count)")
    teacher_batch_size: int = opt(64, "batch size for computing teacher outputs")
    teacher_cache: bool = opt(True, "keep teacher outputs on disk (written batch by batch, read per batch) and "
                                    "reuse them across epochs and runs; --no-teacher-cache runs the teacher on the "
                                    "fly for every batch")
    intermediate_epochs: float = opt(0.0, "TinyBERT task stage: epochs on the layer losses alone before the "
                                          "prediction-layer (soft_ce) epochs")
    augment: int = opt(0, "TinyBERT augmentation: N extra copies of each training example with words replaced by "
                          "nearest neighbours in the teacher's embedding space")
    augment_prob: float = opt(0.3, "share of words replaced in an augmented copy")
    general_text: str | None = opt(None, "TinyBERT general distillation first, on these text files or folders "
                                         "(comma-separated; e.g. ../shared/data/text)")
    general_examples: int = opt(2000, "text chunks used for general distillation")
    general_epochs: float = opt(1.0, "epochs of general distillation")


@dataclass(frozen=True)
class DistillConfig(DistillArgs, MultiTaskArgs, DataArgs, TrainArgs):
    CLI_EXCLUDE = STRATEGY_OPTIONS  # the student always trains fully

    def validate(self) -> None:
        self.validate_tasks()
        self.validate_data()
        self.validate_train()
        if self.strategy != "full":
            raise PtmlabError(f"--strategy {self.strategy} is not supported for distillation: the student trains "
                              f"fully (use --strategy full)")
        if self.temperature <= 0:
            raise PtmlabError(f"--temperature must be positive, got {self.temperature}")
        if not 0 <= self.alpha <= 1:
            raise PtmlabError(f"--alpha must be in [0, 1], got {self.alpha}")
        at_least(self, 0, "relation_heads", "augment", "intermediate_epochs", "general_examples")
        if not 0 < self.augment_prob <= 1:
            raise PtmlabError(f"--augment-prob must be in (0, 1], got {self.augment_prob}")
        at_least(self, 1, "teacher_batch_size")
        at_least(self, 0, "general_epochs")
