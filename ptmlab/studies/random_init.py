"""Study ``random-init`` (Q15): fine-tune the same architecture from pretrained and from random weights.

Every available GLUE task (a subset of its training data, one budget: same examples, epochs, batch size and
learning rate) is fine-tuned twice; the verdict says whether pretraining wins on every task and by how much.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ptmlab.core.config import opt
from ptmlab.studies import STUDIES
from ptmlab.studies.common import SMALL_FINETUNE, StudyArgs, finetune_variant, parse_study_args, write_study


@dataclass(frozen=True)
class RandomInitArgs(StudyArgs):
    model: str = opt("minilm", "zoo model (its config gives the random-init architecture)")
    tasks: list[str] = opt(["sst2", "mrpc", "rte", "cola", "stsb"], "GLUE tasks (those without data are skipped)")
    glue_dir: str | None = opt(None, "GLUE directory")
    max_train: int = opt(2000, "training examples per task")
    max_eval: int = opt(500, "dev examples per task")
    max_length: int = opt(64, "max tokens")
    epochs: float = opt(2.0, "epochs (the same budget for both initialisations)")
    batch_size: int = opt(32, "batch size")
    lr: float = opt(5e-5, "learning rate")
    seed: int = opt(0, "seed")
    output: str = opt("runs/study-random-init", "output directory")
    overwrite: bool = opt(False, "rerun variants that already finished")


def available(tasks: list[str], glue_dir: str | None) -> list[str]:
    from ptmlab.core.errors import PtmlabError
    from ptmlab.data.loaders import load_task

    out = []
    for t in tasks:
        try:
            load_task(t, glue_dir)
            out.append(t)
        except PtmlabError:
            continue
    return out


SMALL = {**SMALL_FINETUNE, "tasks": ["tweets"]}  # what --budget small runs (tests, CI)


@STUDIES.register("random-init", help="Q15: pretrained vs random initialisation under one fine-tuning budget")
def run(argv: list[str]) -> int:
    from ptmlab.report.plots import bar_plot

    a = parse_study_args("random-init", RandomInitArgs, argv, __doc__, small=SMALL)
    tasks = available(a.tasks, a.glue_dir) or ["tweets"]  # a fresh machine without GLUE: the built-in task
    out = Path(a.output)
    rows = []
    for t in tasks:
        summ = {init: finetune_variant(a, out / f"{t}-{init}", task=t, random_init=init == "random", test=False)
                for init in ("pretrained", "random")}
        metric = summ["pretrained"]["main_metric"]
        pre, rnd = (summ[k]["metrics"][metric] for k in ("pretrained", "random"))
        rows.append({"task": t, "metric": metric, "pretrained": pre, "random": rnd, "margin": pre - rnd})
    wins = [r for r in rows if r["margin"] > 0]
    small = min(rows, key=lambda r: r["margin"])
    margins = ", ".join(f"{r['task']} {r['margin']:+.3f}" for r in rows)
    verdict = (f"pretraining wins on {len(wins)} of {len(rows)} tasks (margins {margins}; smallest on "
               f"{small['task']}). The claim "
               f"that pretrained weights beat random initialisation everywhere is "
               f"{'supported' if len(wins) == len(rows) else 'not supported'} here.")
    fig = bar_plot([f"{r['task']} {k}" for r in rows for k in ("pretrained", "random")],
                   [r[k] for r in rows for k in ("pretrained", "random")], "dev metric",
                   f"{a.model}: {a.max_train} examples, {a.epochs:g} epochs")
    write_study(out, f"Study: pretrained vs random init ({a.model})", rows, verdict,
                [(fig, "random_init", "dev metric per task and initialisation")])
    return 0
