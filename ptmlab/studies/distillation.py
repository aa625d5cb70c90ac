"""Study ``distillation`` (Q16, Q18, Q20): at one student size and budget, does a teacher beat training the small
model alone? Compares no teacher (the student fine-tuned on labels), soft_ce, DistilBERT (soft_ce + cosine),
TinyBERT (embedding + hidden + attention, then soft_ce), MiniLM (relations + soft_ce) and PKD (+ soft_ce):
dev metric, share of the teacher, agreement with the teacher, parameters and batch-32 CPU speed-up."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ptmlab.core.config import opt
from ptmlab.studies import STUDIES
from ptmlab.studies.common import SMALL_FINETUNE, StudyArgs, parse_study_args, write_study

METHODS = {
    "soft_ce": dict(losses=["soft_ce"]),
    "distilbert": dict(losses=["soft_ce", "cosine"]),
    "tinybert": dict(losses=["soft_ce", "embedding_mse", "hidden_mse", "attention_mse"], intermediate_epochs=1.0),
    "minilm": dict(losses=["soft_ce", "minilm"]),
    "pkd": dict(losses=["soft_ce", "pkd"], layer_map="skip"),
}


@dataclass(frozen=True)
class DistillationStudyArgs(StudyArgs):
    teacher: str = opt("", "teacher run directory (default: fine-tune minilm on the task first, into OUTPUT/teacher)")
    task: str = opt("", "task (default: sst2 when GLUE data is present, else tweets)")
    glue_dir: str | None = opt(None, "GLUE directory")
    student: str = opt("layers:3", "student size, the same for every method")
    methods: list[str] = opt(["none", *METHODS], "methods: none (no teacher), soft_ce, distilbert, tinybert, "
                                                 "minilm, pkd")
    max_train: int = opt(2000, "training examples")
    max_eval: int = opt(500, "dev examples")
    max_length: int = opt(64, "max tokens")
    epochs: float = opt(2.0, "student epochs (the same budget for every method)")
    lr: float = opt(1e-4, "student learning rate")
    batch_size: int = opt(32, "batch size")
    seed: int = opt(0, "seed")
    output: str = opt("runs/study-distillation", "output directory")
    overwrite: bool = opt(False, "rerun methods that already finished")


def _teacher(a: DistillationStudyArgs, out: Path) -> str:
    from ptmlab.studies.common import finetune_variant

    if a.teacher:
        return a.teacher
    finetune_variant(a, out / "teacher", epochs=1.0, lr=5e-5, test=False)  # --model, fine-tuned
    return str(out / "teacher")


def _distill(a: DistillationStudyArgs, teacher: str, method: str, out: Path) -> dict:
    from ptmlab.core.config import build_config
    from ptmlab.core.rundir import RunDir
    from ptmlab.distill.config import DistillConfig
    from ptmlab.distill.pipeline import run_distill

    if (out / "summary.json").is_file() and not a.overwrite:
        return RunDir(out).summary()
    extra = METHODS.get(method, dict(losses=["soft_ce"], alpha=0.0))  # none: alpha 0 = labels only
    values = dict(teacher=teacher, student=a.student, task=a.task, glue_dir=a.glue_dir, max_train=a.max_train,
                  max_eval=a.max_eval, max_length=a.max_length, epochs=a.epochs, lr=a.lr, batch_size=a.batch_size,
                  seed=a.seed, output=str(out), overwrite=True, test=False, **extra)
    return run_distill(build_config(DistillConfig, values, source="study"), command="study")


def _latency(run: str, texts: list[str]) -> float:
    from ptmlab.models.latency import measure_latency
    from ptmlab.models.zoo import load_model, load_tokenizer

    return measure_latency(load_model(run), load_tokenizer(run), texts, 32, repeats=5)


# what --budget small runs (tests, CI)
SMALL = {
    **SMALL_FINETUNE,
    "student": "layers:1",
    "methods": ["none", "soft_ce", "tinybert"],
}


@STUDIES.register("distillation", help="Q18/Q20: does a teacher beat training the small model alone? soft_ce, "
                                       "DistilBERT, TinyBERT, MiniLM, PKD")
def run(argv: list[str]) -> int:
    from ptmlab.core.errors import PtmlabError
    from ptmlab.data.loaders import load_task
    from ptmlab.report.plots import bar_plot

    a = parse_study_args("distillation", DistillationStudyArgs, argv, __doc__, small=SMALL)
    bad = [m for m in a.methods if m != "none" and m not in METHODS]
    if bad:
        raise PtmlabError(f"unknown method '{bad[0]}': choose from none, {', '.join(METHODS)}")
    out = Path(a.output)
    teacher = _teacher(a, out)
    texts = load_task(a.task, a.glue_dir).splits["dev"].text[:64]
    t_lat = _latency(teacher, texts)
    rows = []
    for method in a.methods:
        s = _distill(a, teacher, method, out / method)
        main = s["main_metric"]
        rows.append({"method": method, main: s["metrics"][main], "teacher_%": s["retained_pct"],
                     "agreement": s["agreement_with_teacher"], "params": s["params"],
                     "speedup_b32": round(t_lat / _latency(str(out / method), texts), 2),
                     "train_seconds": s["train_seconds"]})
    teacher_score = s["teacher_metrics"][main]
    rows.insert(0, {"method": "teacher", main: teacher_score, "teacher_%": 100.0, "agreement": 1.0,
                    "params": s["teacher_params"], "speedup_b32": 1.0, "train_seconds": None})
    fig = bar_plot([r["method"] for r in rows], [r[main] for r in rows], f"dev {main}",
                   f"{a.task}: student {a.student}, {a.max_train} examples, {a.epochs:g} epochs")
    write_study(out, f"Study: distillation ({a.student} on {a.task})", rows, verdict(rows, main),
                [(fig, "methods", "dev metric per method (teacher first)")])
    return 0


def verdict(rows: list[dict], main: str) -> str:
    by = {r["method"]: r for r in rows}
    taught = [r for r in rows if r["method"] not in ("teacher", "none")]
    if "none" not in by or not taught:
        return "the study needs 'none' and at least one distillation method to compare."
    best = max(taught, key=lambda r: (r[main], r["agreement"]))
    alone = by["none"]
    d = best[main] - alone[main]
    beats = d > 0.005 or (abs(d) <= 0.005 and best["agreement"] > alone["agreement"] + 0.01)
    return (f"the best teacher-trained student ({best['method']}: {best[main]:.4f} {main}, {best['teacher_%']}% of "
            f"the teacher, agreement {best['agreement']:.3f}) {'beats' if beats else 'does not beat'} the same "
            f"student trained alone ({alone[main]:.4f}, agreement {alone['agreement']:.3f}; {d:+.4f}), at "
            f"{best['speedup_b32']}x the teacher's batch-32 speed with {best['params']:,} parameters: the claim that "
            f"distillation helps a small model is {'supported' if beats else 'not supported'} here.")
