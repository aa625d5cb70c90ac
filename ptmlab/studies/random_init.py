"""Study ``random-init`` (Q15): fine-tune the same architecture from pretrained and from random weights.

Claim: pretrained weights beat random initialisation of the same architecture under the same fine-tuning budget.
Source: Q15 (Kovaleva et al. 2019, "Revealing the Dark Secrets of BERT"; Hao et al. 2019). Paper: BERT-base
pretrained vs randomly initialised on GLUE: pretraining ahead on every task, by a few points (MRPC) to tens of points
(STS-B, CoLA).

Validity conditions (checked on the run's numbers before the rule; any unmet: cannot test): on every task the
pretrained model is above the task's trivial predictor (majority-class accuracy, the all-positive F1, MCC 0,
correlation 0) by a t interval over seeds (``per_seed``); a randomly initialised model at chance is what the claim
expects, not a fault of the comparison.

Rule: per seed, pretrained minus random averaged over the tasks; 95% t interval over seeds: supported when above 0,
not supported when below 0, inconclusive when it includes 0 (ties at a degenerate score are flagged, not counted as
losses).

In detail: per seed, the margin (pretrained minus random, dev metric) is averaged over the tasks; the mean over
seeds gets a 95% t interval (``--seeds``; one seed gives no interval). Supported when the interval is above 0, not
supported when below 0, inconclusive when it includes 0. Per-task intervals are reported; a task where both
initialisations sit at the same degenerate score (CoLA's MCC 0 when both predict one class) is flagged, not counted
as a loss.

Every available GLUE task (a subset of its training data, one budget: same examples, epochs, batch size and
learning rate) is fine-tuned twice per seed. ``--budget full``: seeds 0,1,2, whole dev sets and mpnet.

Budgets and rough times on 2 CPU cores and one GPU: docs/studies.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ptmlab.core.config import opt
from ptmlab.studies import STUDIES
from ptmlab.studies.common import (
    FULL_FINETUNE,
    SMALL_FINETUNE,
    StudyArgs,
    finetune_run,
    parse_study_args,
    seed_dir,
    seed_list,
    write_study,
)
from ptmlab.studies.executor import run_grid
from ptmlab.studies.verdict import Claim, Verdict, decide_above, mean_interval, paired_seeds, same_within_seeds

CLAIM = Claim(
    study="random-init",
    claim="pretrained weights beat random initialisation of the same architecture under one fine-tuning budget",
    source="Q15; Kovaleva et al. 2019 (Revealing the Dark Secrets of BERT)",
    paper="BERT-base pretrained vs random init on GLUE: pretrained ahead on every task, by a few points (MRPC) to "
          "tens of points (STS-B, CoLA)",
    rule="per seed, pretrained minus random averaged over the tasks; 95% t interval over seeds: supported when above "
         "0, not supported when below 0, inconclusive when it includes 0 (ties at a degenerate score are flagged, "
         "not counted as losses)",
    conditions=(
        "on every task, the pretrained model above the task's trivial predictor by a t interval over seeds",
    ),
)


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
FULL = {**FULL_FINETUNE, "model": "mpnet"}  # what --budget full runs


@STUDIES.register("random-init", help="Q15: pretrained vs random initialisation under one fine-tuning budget")
def run(argv: list[str]) -> int:
    from ptmlab.report.plots import bar_plot

    a = parse_study_args("random-init", RandomInitArgs, argv, __doc__, small=SMALL, full=FULL)
    tasks = available(a.tasks, a.glue_dir) or ["tweets"]  # a fresh machine without GLUE: the built-in task
    seeds = seed_list(a)
    out = Path(a.output)
    inits = ("pretrained", "random")
    done = run_grid(a, {(t, init, seed): finetune_run(a, seed_dir(out, f"{t}-{init}", seed, seeds), task=t, tasks=[],
                                                      seed=seed, random_init=init == "random", test=False)
                        for t in tasks for init in inits for seed in seeds})
    rows, margins = [], {}
    for t in tasks:
        score = {}
        for init in inits:
            summ = [done[t, init, seed] for seed in seeds]
            metric = summ[0]["main_metric"]
            score[init] = [x["metrics"][metric] for x in summ]
        margins[t] = score
        est = paired_seeds(score["pretrained"], score["random"], f"{t} {metric} margin")
        rows.append({"task": t, "metric": metric, "pretrained": float(np.mean(score["pretrained"])),
                     "random": float(np.mean(score["random"])), "margin": est.value,
                     "low": _finite(est.low), "high": _finite(est.high), "degenerate_tie": degenerate(score),
                     "per_seed": {k: list(v) for k, v in score.items()}})
    v = decide(margins)
    fig = bar_plot([f"{r['task']} {k}" for r in rows for k in ("pretrained", "random")],
                   [r[k] for r in rows for k in ("pretrained", "random")], "dev metric",
                   f"{a.model}: {a.max_train} examples, {a.epochs:g} epochs, {len(seeds)} seed(s)")
    write_study(out, f"Study: pretrained vs random init ({a.model})", rows, v,
                [(fig, "random_init", "dev metric per task and initialisation (mean over seeds)")],
                claim=CLAIM, budget=a.budget, seeds=seeds, validity=validity)
    return 0


def _finite(x: float) -> float | None:
    return x if np.isfinite(x) else None


def degenerate(score: dict[str, list[float]]) -> bool:
    """Both initialisations at the same score on every seed (e.g. MCC 0: both predict one class)."""
    return same_within_seeds({k: score[k] for k in ("pretrained", "random")})


def decide(scores: dict[str, dict[str, list[float]]]) -> Verdict:
    """The rule of ``CLAIM``: ``scores[task]["pretrained" | "random"]`` are per-seed dev metrics."""
    n_seeds = len(next(iter(scores.values()))["pretrained"])
    per_seed = [float(np.mean([s["pretrained"][k] - s["random"][k] for s in scores.values()]))
                for k in range(n_seeds)]
    est = mean_interval(per_seed, "pretrained minus random, mean over tasks")
    v = decide_above(est, 0.0)
    ties = [t for t, s in scores.items() if degenerate(s)]
    note = f" ({', '.join(ties)}: both initialisations at the same score, uninformative)" if ties else ""
    return Verdict(v.outcome, f"{v.reason} over {len(scores)} task(s){note}", est, thresholds=v.thresholds)


def restate(record: dict, name: str = "random-init") -> Verdict | None:
    """The rule of ``CLAIM`` recomputed from the record's per-seed scores (rows' ``per_seed``, per task and
    initialisation)."""
    scores = {str(r["task"]): r["per_seed"] for r in record.get("rows") or []
              if isinstance(r.get("per_seed"), dict) and {"pretrained", "random"} <= set(r["per_seed"])}
    return decide(scores) if scores else None


def validity(record: dict) -> list:
    """The conditions of ``CLAIM`` on a results record (rows: one per task with ``per_seed`` scores)."""
    from ptmlab.studies.common import above_trivial, eval_size

    conds = []
    for r in record.get("rows") or []:
        ps = (r.get("per_seed") or {}).get("pretrained") if isinstance(r.get("per_seed"), dict) else None
        conds += above_trivial(record, str(r.get("task")), str(r.get("metric") or "accuracy"),
                               {"the pretrained model": ps or []}, eval_size(record, 500))
    return conds or above_trivial(record, "", "accuracy", {"the pretrained model": []})
