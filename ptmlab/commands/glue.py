"""``ptmlab glue --model M``: fine-tune and evaluate every available GLUE task (or those ``--only`` names), each
in a run of its own; table, GLUE average, and test-set predictions in the GLUE submission format. (``--tasks``
is finetune's and distill's list of tasks trained jointly into one model; glue's older ``--tasks`` still works.)"""

from __future__ import annotations

import argparse
import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

from ptmlab.core.config import Validated, add_config_args, at_least, opt, positive, resolve_config
from ptmlab.core.errors import PtmlabError
from ptmlab.data.tasks import GLUE_TASKS, TASKS

SUBMISSION_NAMES = {"cola": "CoLA", "sst2": "SST-2", "mrpc": "MRPC", "stsb": "STS-B", "rte": "RTE",
                    "wnli": "WNLI"}


@dataclass(frozen=True)
class GlueConfig(Validated):
    model: str = opt("minilm", "model to fine-tune")
    glue_dir: str | None = opt(None, "GLUE directory (default ../shared/data/glue when present)")
    only: list[str] = opt(list(GLUE_TASKS), "GLUE tasks to run, each fine-tuned separately into its own run",
                          deprecated=("--tasks",))
    strategy: str = opt("full", "fine-tuning strategy")
    max_train: int | None = opt(None, "training examples per task")
    max_eval: int | None = opt(None, "dev examples per task")
    max_length: int = opt(128, "max tokens")
    epochs: float = opt(3.0, "epochs per task")
    batch_size: int = opt(32, "batch size")
    lr: float = opt(5e-5, "learning rate")
    seed: int = opt(42, "seed")
    output: str | None = opt(None, "output directory (default runs/glue-<model>)")
    overwrite: bool = opt(False, "replace existing task runs")

    def validate(self) -> None:
        for t in self.only:
            if t not in GLUE_TASKS:
                TASKS.get(t)
                raise PtmlabError(f"'{t}' is not a GLUE task: choose from {', '.join(GLUE_TASKS)}")
        at_least(self, 0, "max_train", "max_eval")
        at_least(self, 1, "batch_size")
        at_least(self, 8, "max_length")
        positive(self, "epochs", "lr")


def register(sub) -> None:
    p = sub.add_parser("glue", help="fine-tune and evaluate on every available GLUE task")
    p.add_argument("--config", help="YAML file with options")
    add_config_args(p, GlueConfig)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ptmlab.core.config import config_to_dict
    from ptmlab.core.io import atomic_write_json, atomic_write_text
    from ptmlab.data.loaders import default_glue_dir
    from ptmlab.data.metrics import glue_score
    from ptmlab.report.table import print_table
    from ptmlab.studies.common import finetune_variant
    from ptmlab.studies.verdict import run_metadata

    cfg = resolve_config(GlueConfig, args, args.config)
    glue_dir = Path(cfg.glue_dir) if cfg.glue_dir else default_glue_dir()
    if glue_dir is None or not glue_dir.is_dir():
        raise PtmlabError(f"GLUE directory '{cfg.glue_dir or '../shared/data/glue'}' does not exist: "
                          f"pass --glue-dir DIR")
    cfg = dataclasses.replace(cfg, glue_dir=str(glue_dir))
    out = Path(cfg.output or f"runs/glue-{Path(cfg.model).name}")
    available = [t for t in cfg.only if (glue_dir / TASKS.get(t).glue_dir / "train.tsv").is_file()]
    if not available:
        raise PtmlabError(f"no GLUE task folders ({', '.join(SUBMISSION_NAMES.values())}) in '{glue_dir}'")
    rows, scores = [], {}
    for task in available:
        print(f"== {task}")
        summ = finetune_variant(cfg, out / task, task=task, test=True)
        scores[task] = glue_score(summ["metrics"])
        rows.append({"task": task, **{k: round(v, 4) for k, v in summ["metrics"].items()},
                     "score": round(100 * scores[task], 2), "train_examples": summ["train_examples"],
                     "train_s": round(float(summ.get("train_seconds", 0.0)), 3)})
        write_submission(out / task, out / "submission", task)
    average = 100 * sum(scores.values()) / len(scores)
    rows.append({"task": "GLUE average", "score": round(average, 2),
                 "train_s": round(sum(r["train_s"] for r in rows), 3)})
    columns = ["task", "accuracy", "f1", "mcc", "pearson", "spearman", "score", "train_examples", "train_s"]
    print()
    print_table(rows, columns)
    atomic_write_json(out / "glue.json", {"model": cfg.model, "tasks": rows, "glue_average": average,
                                          "settings": config_to_dict(cfg), "run": run_metadata(None, [cfg.seed]),
                                          "note": "score = mean of the task's official metrics x 100; the "
                                                  "average is over the tasks run; train_s = training time of "
                                                  "each task's run (the last row: their sum)"})
    atomic_write_text(out / "glue.md", "| " + " | ".join(columns) + " |\n|" + "---|" * len(columns) + "\n" + "".join(
        "| " + " | ".join(str(r.get(c, "")) for c in columns) + " |\n" for r in rows))
    print(f"\nGLUE average over {len(scores)} tasks: {average:.2f}; test predictions in {out / 'submission'}")
    return 0


def write_submission(run_dir: Path, sub_dir: Path, task: str) -> None:
    """``index<TAB>prediction`` files named as the GLUE leaderboard expects."""
    from ptmlab.core.io import atomic_write_text

    f = run_dir / "predictions_test.json"
    if not f.is_file():
        return
    p = json.loads(f.read_text())
    lines = ["index\tprediction"]
    for i, pred in zip(p["ids"], p["pred"], strict=True):
        if p["kind"] == "regression":
            value = f"{min(5.0, max(0.0, float(pred))):.3f}"
        else:
            value = p["labels"][int(pred)]
        lines.append(f"{i}\t{value}")
    atomic_write_text(sub_dir / f"{SUBMISSION_NAMES[task]}.tsv", "\n".join(lines) + "\n")
