"""Studies ``head-ablation`` (Q13) and ``layer-ablation`` (Q14): does removing a head or a layer hurt?

The model is a fine-tuned run directory, or a zoo model fine-tuned here first (one budget, seeded). Every head
(layer) is removed and, separately, made uniform; the verdict counts the units whose removal changes the dev metric
by at most ``--tolerance`` and the units whose removal helps.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ptmlab.core.config import opt
from ptmlab.studies import STUDIES
from ptmlab.studies.common import SMALL_FINETUNE, StudyArgs, finetune_variant, parse_study_args, write_study


@dataclass(frozen=True)
class AblationStudyArgs(StudyArgs):
    model: str = opt("minilm", "fine-tuned run directory, or a zoo model to fine-tune first")
    task: str = opt("", "task (default: sst2 when GLUE data is present, else tweets)")
    glue_dir: str | None = opt(None, "GLUE directory")
    max_train: int = opt(4000, "training examples when fine-tuning first")
    max_eval: int = opt(0, "dev examples to ablate on (0: all)")
    max_length: int = opt(64, "max tokens")
    epochs: float = opt(1.0, "epochs when fine-tuning first")
    batch_size: int = opt(32, "batch size when fine-tuning first")
    tolerance: float = opt(0.01, "a change within this is 'no harm'")
    seed: int = opt(0, "seed")
    output: str = opt("runs/study-ablation", "output directory")
    overwrite: bool = opt(False, "rerun a fine-tuning that already finished")


def fine_tuned_model(a, out: Path) -> str:
    """``a.model`` when it is a saved fine-tuned model, else a fine-tuning of it into ``out/finetuned``."""
    from ptmlab.core.rundir import RunDir

    if Path(a.model).is_dir() and RunDir(a.model).has_model():
        return a.model
    finetune_variant(a, out / "finetuned", max_eval=None, test=False)
    return str(out / "finetuned")


def _table(a, kind: str):
    from ptmlab.analysis.ablation import head_ablation, layer_ablation
    from ptmlab.analysis.taskdata import load_analysis_input
    from ptmlab.train.evaluate import resolve_precision

    out = Path(a.output)
    model = fine_tuned_model(a, out)
    inp = load_analysis_input(model, a, split="dev")
    fn = head_ablation if kind == "head" else layer_ablation
    return fn(inp.model, inp.enc, inp.spec, inp.pad_id, 128, resolve_precision("auto")), out


def verdict(table, unit: str, tol: float) -> str:
    n = table.removed.size
    harmless = int((table.removed - table.base >= -tol).sum())
    helps = len(table.helpful("removed"))
    worst = float(np.nanmin(table.removed - table.base))
    uniform_harmless = int((table.uniform - table.base >= -tol).sum())
    supported = harmless >= 0.75 * n
    return (f"removing one {unit} costs at most {tol:g} {table.metric} for {harmless} of {n} {unit}s "
            f"(worst {worst:+.4f}), and helps for {helps}; uniform attention is harmless for {uniform_harmless} of "
            f"{n}. The claim that removing a {unit} rarely hurts and sometimes helps is "
            f"{'supported' if supported and helps else 'partly supported' if supported else 'not supported'} here "
            f"(intact {table.metric} {table.base:.4f}).")


def _run(kind: str, argv: list[str]) -> int:
    from ptmlab.analysis import plots

    a = parse_study_args(f"{kind}-ablation", AblationStudyArgs, argv, __doc__, small=SMALL_FINETUNE)
    table, out = _table(a, kind)
    rows = table.rows()
    if kind == "head":
        fig = plots.heatmap(table.removed - table.base, f"{table.metric} change, head removed")
    else:
        fig = plots.grouped_bars([str(i) for i in range(len(table.removed))],
                                 {"removed": list(table.removed), "uniform": list(table.uniform)}, table.metric,
                                 "layer ablation", base=table.base)
    write_study(out, f"Study: {kind} ablation ({a.model} on {a.task})", rows, verdict(table, kind, a.tolerance),
                [(fig, f"{kind}_ablation", f"dev {table.metric} per ablated {kind}")],
                extra={"base": table.base, "metric": table.metric})
    return 0


@STUDIES.register("head-ablation", help="Q13: does removing one attention head hurt? (every head, removed/uniform)")
def run_heads(argv: list[str]) -> int:
    return _run("head", argv)


@STUDIES.register("layer-ablation", help="Q14: does removing one layer hurt? (every layer, removed/uniform)")
def run_layers(argv: list[str]) -> int:
    return _run("layer", argv)
