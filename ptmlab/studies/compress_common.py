"""What the compression studies (``ghost``, ``super-tickets``, ``compression``) share: their options, running a
compression command once into a sub-directory (reused on a rerun), measuring a variant with the row every
compression table uses (``ptmlab.compress.measure``), and its per-example dev correctness for the verdicts' paired
bootstrap."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ptmlab.core.config import at_least, opt
from ptmlab.core.errors import PtmlabError
from ptmlab.studies.common import StudyArgs, command_config


@dataclass(frozen=True)
class CompressStudyArgs(StudyArgs):
    model: str = opt("minilm", "fine-tuned run directory, or a zoo model fine-tuned first (into OUTPUT/finetuned)")
    task: str = opt("", "task (default: sst2 when GLUE data is present, else tweets)")
    max_train: int | None = opt(2000, "training examples of every fine-tuning")
    max_eval: int | None = opt(500, "dev examples")
    max_length: int = opt(64, "max tokens")
    epochs: float = opt(1.0, "epochs of every fine-tuning (the same budget for every variant)")
    lr: float = opt(5e-5, "learning rate of every fine-tuning")
    batch_size: int = opt(32, "batch size")
    eval_batch_size: int = opt(128, "evaluation batch size")
    importance: str = opt("gate", "importance score for heads and FFN neurons: gate, grad-weight, entropy")
    importance_examples: int = opt(500, "training examples used to score heads and neurons")
    latency_repeats: int = opt(5, "timed repeats per latency measurement (median reported)")
    seed: int = opt(0, "seed")
    overwrite: bool = opt(False, "rerun variants that already finished")

    def validate(self) -> None:
        from ptmlab.compress.importance import IMPORTANCE

        super().validate()
        IMPORTANCE.get(self.importance)
        if not self.epochs > 0:
            raise PtmlabError(f"--epochs must be positive, got {self.epochs}")
        if not self.lr > 0:
            raise PtmlabError(f"--lr must be positive, got {self.lr}")
        at_least(self, 1, "batch_size", "eval_batch_size", "importance_examples", "latency_repeats")


def start(a: CompressStudyArgs) -> tuple[Path, str]:
    """The output folder and the fine-tuned model every variant starts from (fine-tuned here if needed)."""
    from ptmlab.core.seed import configure_threads
    from ptmlab.studies.ablation import fine_tuned_model

    configure_threads()  # every row is timed with the thread count the commands inside set
    out = Path(a.output)
    return out, fine_tuned_model(a, out)


def parse_ratios(values: list[str], name: str = "ratios") -> list[float]:
    """Fractions in [0, 1), sorted, duplicates dropped."""
    from ptmlab.compress.targets import check_fraction

    out = []
    for v in values:
        try:
            x = float(v)
        except (TypeError, ValueError):
            raise PtmlabError(f"--{name} entry '{v}' is not a number: give fractions like 0,0.1,0.2") from None
        check_fraction(name, x)
        out.append(x)
    if not out:
        raise PtmlabError(f"--{name} is empty: give fractions like 0,0.1,0.2")
    return sorted(set(out))


def once(a, out: Path, fn) -> dict:
    """``fn()`` writes a run into ``out``; a finished run (summary.json) is reused unless ``--overwrite``."""
    from ptmlab.core.rundir import RunDir

    if (out / "summary.json").is_file() and not a.overwrite:
        return RunDir(out).summary()
    return fn()


def prune_run(a, model: str, out: Path, **target) -> dict:
    """``ptmlab prune`` (no recovery) into ``out``: heads/ffn/params fractions of ``model``."""
    from ptmlab.compress.prune import PruneConfig, run_prune

    return once(a, out, lambda: run_prune(command_config(a, PruneConfig, model=model, output=str(out),
                                                       recover_epochs=0.0, **target)))


def change_run(a, verb: str, model: str, out: Path, **options) -> dict:
    """``ptmlab lowrank`` / ``share`` / ``ghost`` with ``a.epochs`` of recovery fine-tuning into ``out``."""
    from ptmlab.compress.transform import CHANGES, run_change

    cls, change = CHANGES[verb]
    return once(a, out, lambda: run_change(command_config(a, cls, model=model, output=str(out),
                                                        recover_epochs=a.epochs, **options), change, verb))


def measurer(a, tokenizer):
    """One ``Measurer`` (dev split + latency texts) for every variant of a study."""
    from ptmlab.compress.measure import Measurer
    from ptmlab.train.args import FinetuneConfig

    cfg = command_config(a, FinetuneConfig, model="tiny", output=None)
    return Measurer(cfg, tokenizer, a.latency_repeats)


def dev_correctness(meas, model, tokenizer=None):
    """Per dev example 1.0 / 0.0 (prediction equals gold) of ``model`` on the measurer's dev split, the same
    examples for every variant: the input of ``verdict.paired_bootstrap``. None for regression tasks."""
    import numpy as np

    from ptmlab.data.encode import encode_split
    from ptmlab.train.evaluate import evaluate

    if meas.spec.kind == "regression":
        return None
    tok = tokenizer or meas.tokenizer
    enc = encode_split(tok, meas.data.splits["dev"], meas.cfg.max_length)
    _, preds = evaluate(model, enc, meas.spec, tok.pad_token_id or 0, meas.cfg.eval_batch_size)
    return (np.asarray(preds) == np.asarray(enc.labels)).astype(float)


def measure_run(meas, name: str, run: str | Path, **extra) -> dict:
    """The measurement row of a saved model (dev metric, params, size on disk, batch-1/32 latency)."""
    from ptmlab.models.latency import size_on_disk_mb
    from ptmlab.models.zoo import load_model

    model = load_model(str(run))
    row = meas.row(name, model, round(size_on_disk_mb(run), 2))
    row.update(extra)
    return row
