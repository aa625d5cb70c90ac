"""Study ``multitask`` (Q18, MT-DNN): does training one encoder on several tasks help the small ones?

Claim: multi-task fine-tuning (one encoder, a head per task, task-sampled batches) beats single-task fine-tuning on
the small GLUE tasks (MRPC, RTE, STS-B, CoLA), which borrow from the larger ones. Source: Q18; Liu et al. 2019,
"Multi-Task Deep Neural Networks for Natural Language Understanding" (MT-DNN). Paper: on the GLUE test set MT-DNN
(BERT-large) reaches RTE 75.5 against BERT-large's 70.1, the largest gain, with smaller gains on MRPC, STS-B and CoLA.

Validity conditions (checked on the run's numbers before the rule; any unmet: cannot test): every single-task and
multi-task model on every task is above the task's trivial predictor (majority-class accuracy, the all-positive F1,
MCC 0, correlation 0, by the task's main metric) by a t interval over seeds: a task where the models sit at chance
cannot show one training regime beating another.

Rule (the same words as ``CLAIM.rule``): per seed, multi-task minus single-task dev main metric averaged over the
small tasks present; paired over seeds with a 95% t interval: supported when above 0, not supported when below 0,
inconclusive when it includes 0. Per-task margins are reported beside it, the large tasks' too.

Budget: every task keeps the same training examples, epochs, batch size and learning rate in both arms, so the
multi-task run takes as many steps as the single-task runs together (``--task-sampling proportional``: each example
is seen ``--epochs`` times in expectation). MT-DNN's second step (fine-tuning each task again from the multi-task
encoder) is not part of the claim tested here. ``--budget small``: tiny model, tweets + small MRPC and RTE subsets,
one seed (an interval needs two or more: it comes out inconclusive); default: seeds 0,1,2, 1,000 examples per task,
2 epochs; full: seeds 0,1,2, whole dev sets, 2,000 examples per task, 3 epochs, rate 1e-4 (see ``FULL``), where
minilm's RTE stays at the majority class and its single-task MRPC at the all-positive F1. ``--budget gpu`` is sized
to decide the claim on one GPU: the full budget with mpnet (BERT-base size, as the paper's base model), every task's
whole training set (SST-2's 67,349 rows included, so the multi-task run samples them as MT-DNN does), 128 tokens,
rate 2e-5 (the usual rate for BERT-base-size encoders, fixed here, not chosen on dev), bf16 where the device has
it: about 530,000 training examples per seed over both arms, some 40 minutes on one H100 (estimated from examples
per second, not measured).
Rough times per budget on 2 CPU cores and one GPU: docs/studies.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ptmlab.core.config import opt
from ptmlab.core.errors import PtmlabError
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
from ptmlab.studies.verdict import Claim, Verdict, decide_above, paired_seeds

CLAIM = Claim(
    study="multitask",
    claim="multi-task fine-tuning (one encoder, a head per task) beats single-task fine-tuning on the small GLUE "
          "tasks (MRPC, RTE, STS-B, CoLA) at the same budget",
    source="Q18; Liu et al. 2019 (MT-DNN)",
    paper="GLUE test, BERT-large vs MT-DNN: RTE 70.1 -> 75.5, smaller gains on MRPC, STS-B and CoLA",
    rule="per seed, multi-task minus single-task dev main metric averaged over the small tasks present; paired over "
         "seeds with a 95% t interval: supported when above 0, not supported when below 0, inconclusive when it "
         "includes 0",
    conditions=(
        "every single-task and multi-task model above its task's trivial predictor by a t interval over seeds",
    ),
    paper_effect=0.02,
)

TASKS = ("sst2", "mrpc", "rte", "stsb", "cola")  # the default order: the multi-task run lists and samples them in it
SMALL_TASKS = ("mrpc", "rte", "stsb", "cola")


@dataclass(frozen=True)
class MultitaskStudyArgs(StudyArgs):
    model: str = opt("minilm", "zoo model or model directory both arms start from")
    tasks: list[str] = opt(list(TASKS), "tasks trained together (those without data are skipped)")
    small_tasks: list[str] = opt(list(SMALL_TASKS), "the tasks the claim is about (those among --tasks)")
    task_sampling: str = opt("proportional", "how the multi-task run draws tasks: proportional, uniform, sqrt",
                             choices=["proportional", "uniform", "sqrt"])
    max_train: int | None = opt(1000, "training examples per task (both arms)")
    max_eval: int | None = opt(500, "dev examples per task (0: all)")
    epochs: float = opt(2.0, "epochs per task (both arms)")
    seeds: list[str] = opt(["0", "1", "2"], "seeds both arms are repeated with")
    output: str = opt("runs/study-multitask", "output directory")


SMALL = {**SMALL_FINETUNE, "tasks": ["tweets", "mrpc", "rte"], "small_tasks": ["mrpc", "rte"], "seeds": ["0"]}
# --budget full: three seeds, whole dev sets, 2,000 training examples per task for 3 epochs at rate 1e-4. At the
# default 1,000 x 2 epochs x 5e-5, minilm's single-task CoLA and MRPC runs stay at the majority class (MCC 0, F1 0.812
# on every seed), which says nothing about transfer. The rate was chosen on seed 0's single-task CoLA and MRPC dev
# scores among 5e-5, 1e-4 and 2e-4 (2,000 x 3 epochs: CoLA MCC 0.000 / 0.103 / 0.126, MRPC F1 0.842 / 0.850 / 0.853)
# as the smallest at which both leave the majority class; both arms use it.
FULL = {**FULL_FINETUNE, "max_train": 2000, "epochs": 3.0, "lr": 1e-4}
GPU = {**FULL, "model": "mpnet", "max_train": None, "max_length": 128, "lr": 2e-5, "precision": "auto"}


def available(tasks: list[str], glue_dir: str | None) -> list[str]:
    """The tasks whose data is here (GLUE tasks need the GLUE directory)."""
    from ptmlab.data.loaders import load_task

    out = []
    for t in tasks:
        try:
            load_task(t, glue_dir)
            out.append(t)
        except PtmlabError:
            continue
    return out


def tasks_with_data(a, what: str) -> tuple[list[str], list[str]]:
    """The study's tasks that have data here and the small ones among them; one-line errors when too few."""
    from ptmlab.data.multitask import parse_tasks

    parse_tasks(a.tasks)
    tasks = available(a.tasks, a.glue_dir)
    if len(tasks) < 2:
        raise PtmlabError(f"only {', '.join(tasks) or 'no task'} of --tasks {','.join(a.tasks)} has data here: "
                          f"{what} needs two or more (GLUE data in ../shared/data/glue or --glue-dir)")
    small = [t for t in a.small_tasks if t in tasks]
    if not small:
        raise PtmlabError(f"none of --small-tasks {','.join(a.small_tasks)} is among the tasks with data "
                          f"({', '.join(tasks)}): name small tasks that are trained")
    return tasks, small


@STUDIES.register("multitask", help="Q18 MT-DNN: multi-task vs single-task fine-tuning on the small GLUE tasks")
def run(argv: list[str]) -> int:
    from ptmlab.report.plots import bar_plot

    a = parse_study_args("multitask", MultitaskStudyArgs, argv, __doc__, small=SMALL, full=FULL, gpu=GPU)
    tasks, small = tasks_with_data(a, "multi-task training")
    seeds = seed_list(a)
    out = Path(a.output)
    single: dict[str, list[float]] = {t: [] for t in tasks}
    multi: dict[str, list[float]] = {t: [] for t in tasks}
    metric_of: dict[str, str] = {}
    grid = {}
    for seed in seeds:
        grid[seed, None] = finetune_run(a, seed_dir(out, "multitask", seed, seeds), task=tasks[0], tasks=tasks,
                                        seed=seed, test=False)
        grid.update({(seed, t): finetune_run(a, seed_dir(out, f"single-{t}", seed, seeds), task=t, seed=seed,
                                             test=False) for t in tasks})
    done = run_grid(a, grid)
    for seed in seeds:
        mt = done[seed, None]
        for t in tasks:
            st = done[seed, t]
            metric_of[t] = st["main_metric"]
            single[t].append(float(st["metrics"][metric_of[t]]))
            multi[t].append(float(mt["task_metrics"][t][metric_of[t]]))
    rows = []
    for t in tasks:
        est = paired_seeds(multi[t], single[t], f"{t} margin")
        rows.append({"task": t, "small": t in small, "metric": metric_of[t], "single": float(np.mean(single[t])),
                     "multi": float(np.mean(multi[t])), "margin": est.value, "low": _finite(est.low),
                     "high": _finite(est.high)})
    v = decide({t: single[t] for t in small}, {t: multi[t] for t in small})
    fig = bar_plot([f"{r['task']} {k}" for r in rows for k in ("single", "multi")],
                   [r[k] for r in rows for k in ("single", "multi")], "dev main metric",
                   f"{a.model}: {a.max_train} examples per task, {a.epochs:g} epochs, {len(seeds)} seed(s)")
    write_study(out, f"Study: multi-task vs single-task fine-tuning ({a.model})", rows, v,
                [(fig, "multitask", "dev main metric per task, single-task and multi-task (mean over seeds)")],
                extra={"tasks": tasks, "small_tasks": small, "task_sampling": a.task_sampling,
                       "per_seed": {"single": single, "multi": multi}},
                claim=CLAIM, budget=a.budget, seeds=seeds, validity=validity)
    return 0


def _finite(x: float) -> float | None:
    return x if np.isfinite(x) else None


def decide(single: dict[str, list[float]], multi: dict[str, list[float]]) -> Verdict:
    """The rule of ``CLAIM``: per-seed dev metrics of the small tasks, ``single[task][k]`` / ``multi[task][k]``."""
    n = len(next(iter(single.values())))
    st = [float(np.mean([single[t][k] for t in single])) for k in range(n)]
    mt = [float(np.mean([multi[t][k] for t in single])) for k in range(n)]
    est = paired_seeds(mt, st, "multi-task minus single-task, mean over the small tasks")
    v = decide_above(est, 0.0)
    return Verdict(v.outcome, f"{v.reason} ({', '.join(single)}; {n} seed(s))", est, thresholds=v.thresholds)


def restate(record: dict, name: str = "multitask") -> Verdict | None:
    """The rule of ``CLAIM`` recomputed from the record's per-seed scores of the small tasks (``per_seed``)."""
    ps = record.get("per_seed") if isinstance(record.get("per_seed"), dict) else {}
    small = [t for t in record.get("small_tasks") or []
             if t in (ps.get("single") or {}) and t in (ps.get("multi") or {})]
    if not small:
        return None
    return decide({t: ps["single"][t] for t in small}, {t: ps["multi"][t] for t in small})


def _per_task_trivial(record: dict, systems: tuple[str, ...]) -> list:
    """Each system of ``record["per_seed"]`` ({system: {task: per-seed scores}}) above each task's trivial predictor
    (the task's main metric: majority-class accuracy, all-positive F1, MCC 0, correlation 0) by a t interval."""
    from ptmlab.studies.common import above_trivial, eval_size

    per_seed = record.get("per_seed") if isinstance(record.get("per_seed"), dict) else {}
    metrics = {r.get("task"): r.get("metric") for r in record.get("rows") or []}
    conds = []
    for task in record.get("tasks") or []:
        scores = {s: (per_seed.get(s) or {}).get(task) or [] for s in systems}
        conds += above_trivial(record, task, str(metrics.get(task) or "accuracy"), scores, eval_size(record, 500))
    return conds or above_trivial(record, "", "accuracy", {systems[0]: []})


def validity(record: dict) -> list:
    """The conditions of ``CLAIM`` on a results record (``per_seed`` of single and multi per task)."""
    return _per_task_trivial(record, ("single", "multi"))
