"""Study ``unfreezing`` (Q1, Q7): full fine-tuning vs frozen features vs gradual unfreezing vs the ULMFiT recipe
vs adapters vs LoRA, on one task under one budget (same data, epochs and batch size).

Learning rates follow each method's usual setting: 5e-5 for methods that move the whole encoder, 1e-3 for the
few parameters of frozen features and adapters, 5e-4 for LoRA.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ptmlab.core.config import opt
from ptmlab.studies import STUDIES
from ptmlab.studies.common import SMALL_FINETUNE, StudyArgs, finetune_variant, parse_study_args, write_study

LRS = {"full": 5e-5, "gradual-unfreeze": 5e-5, "ulmfit": 5e-5, "frozen": 1e-3, "adapter": 1e-3, "lora": 5e-4}


@dataclass(frozen=True)
class UnfreezingArgs(StudyArgs):
    model: str = opt("minilm", "model to fine-tune")
    task: str = opt("", "task (default: sst2 when GLUE data is present, else tweets)")
    glue_dir: str | None = opt(None, "GLUE directory")
    strategies: list[str] = opt(["full", "frozen", "gradual-unfreeze", "ulmfit", "adapter", "lora"],
                                "strategies to compare")
    max_train: int = opt(2000, "training examples")
    max_eval: int = opt(1000, "dev examples")
    max_length: int = opt(64, "max tokens")
    epochs: float = opt(3.0, "epochs (the same budget for every strategy)")
    batch_size: int = opt(32, "batch size")
    seed: int = opt(0, "seed")
    output: str = opt("runs/study-unfreezing", "output directory")
    overwrite: bool = opt(False, "rerun variants that already finished")


@STUDIES.register("unfreezing", help="Q7: is gradual unfreezing needed? full vs frozen vs ULMFiT vs adapters vs LoRA")
def run(argv: list[str]) -> int:
    a = parse_study_args("unfreezing", UnfreezingArgs, argv, __doc__, small=SMALL_FINETUNE)
    out = Path(a.output)
    rows = []
    for s in a.strategies:
        summ = finetune_variant(a, out / s, strategy=s, lr=LRS.get(s, 5e-5), test=False)
        rows.append({"strategy": s, a_metric(summ): summ["metrics"][summ["main_metric"]],
                     "trainable_params": summ["trainable_params"],
                     "trainable_%": 100.0 * summ["trainable_params"] / summ["params"],
                     "train_seconds": summ["train_seconds"], "lr": LRS.get(s, 5e-5)})
    metric = a_metric(summ)
    score = {r["strategy"]: r[metric] for r in rows}
    verdict = verdict_text(score, metric)
    from ptmlab.report.plots import bar_plot

    fig = bar_plot([r["strategy"] for r in rows], [r[metric] for r in rows], f"dev {metric}",
                   f"{a.task}: {a.epochs:g} epochs, {a.max_train} examples")
    write_study(out, f"Study: unfreezing ({a.model} on {a.task})", rows, verdict,
                [(fig, "strategies", "dev metric per strategy")])
    return 0


def a_metric(summary: dict) -> str:
    return summary["main_metric"]


def verdict_text(score: dict[str, float], metric: str) -> str:
    parts = []
    if "full" in score and "gradual-unfreeze" in score:
        d = score["gradual-unfreeze"] - score["full"]
        supported = d <= 0.005
        parts.append(f"gradual unfreezing {'does not beat' if supported else 'beats'} full fine-tuning "
                     f"({score['gradual-unfreeze']:.4f} vs {score['full']:.4f} {metric}, {d:+.4f}): the claim that "
                     f"it is not needed is {'supported' if supported else 'not supported'} here")
    if "full" in score and "ulmfit" in score:
        parts.append(f"the ULMFiT recipe reaches {score['ulmfit']:.4f}")
    for s in ("adapter", "lora", "frozen"):
        if "full" in score and s in score and score["full"] > 0:
            parts.append(f"{s} keeps {100 * score[s] / score['full']:.1f}% of full fine-tuning")
    return "; ".join(parts) + "." if parts else "not enough strategies to compare."
