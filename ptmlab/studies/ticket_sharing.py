"""Study ``ticket-sharing`` (Liang et al., ACL 2021): do the super tickets of different tasks overlap, and does a
shared ticket help multi-task learning?

Claim: the super tickets found per task (SST-2, MRPC, RTE, CoLA, STS-B) overlap more than tickets of the same sizes
drawn at random, and one multi-task model fine-tuned on the shared ticket beats the same multi-task model on the full
network, most on the small tasks. Source: ACL 2021, Liang et al., "Super Tickets in Pre-Trained Language Models"
(ticket sharing in multi-task learning). Paper: MT-DNN on a shared super ticket gains on GLUE dev over MT-DNN on the
full BERT-base, with the larger gains on the small tasks (RTE, MRPC, STS-B, CoLA).

Validity conditions (checked on the run's numbers before the rule; any unmet: cannot test): the shared ticket is
clearly smaller than the full model (it keeps under 80% of the heads on every seed: a ticket of every head compares
the full model with itself); every full and shared-ticket multi-task model on every task is above the task's trivial
predictor (by its main metric) by a t interval over seeds.

Rule (the same words as ``CLAIM.rule``): (1) per seed, mean pairwise Jaccard of kept heads and FFN neurons minus
that of random tickets of the same per-layer sizes; (2) per seed, shared-ticket multi-task minus full multi-task dev
main metric, mean over the small tasks; each paired over seeds with a 95% t interval: above 0 supported, below 0 not
supported, including 0 inconclusive; the claim is supported when both parts are, not supported when either is not.

Method: each task is fine-tuned from ``--model`` (per seed); heads and FFN neurons are scored on it
(``compress.importance``) and ``--ratio`` of each removed (``compress.targets``): that task's ticket. The shared
ticket is a fixed-size vote over the tasks' tickets (``--share votes``, the default: in every layer as many units as
the tasks' tickets keep, the ones most tasks keep, so at ``--ratio`` 0.3 it keeps 70% of the heads and neurons;
``union``: every unit some task keeps, which at ratio 0.3 over five tasks is nearly the whole model and so cannot
test the claim; ``intersection``: those all keep, which can leave a layer empty and is then a one-line error)
applied to the *pretrained* model
(``compress.tickets.build_ticket``), then given a head per task and fine-tuned multi-task (``ptmlab finetune
--tasks``) with the same budget as the full model. ``--budget small``: tiny model, tweets + small MRPC and RTE
subsets, one seed (no interval: inconclusive); default: seeds 0,1,2; full: the ``multitask`` study's full budget
(2,000 examples per task, 3 epochs, rate 1e-4, whole dev sets), so the two studies' single-task and full multi-task
runs are the same runs; gpu: the ``multitask`` study's gpu budget (mpnet, every task's whole training set, rate
2e-5), where the small tasks can leave their trivial predictors, plus the ticket runs: about an hour and a half on
one H100 (estimated, not measured).

It runs in this process under either ``--executor``: the shared ticket is built from every task's
single-task run of the seed, and the multi-task ticket run starts from it.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from ptmlab.core.config import at_least, opt
from ptmlab.core.errors import PtmlabError
from ptmlab.studies import STUDIES
from ptmlab.studies.common import (
    SMALL_FINETUNE,
    StudyArgs,
    finetune_variant,
    parse_study_args,
    seed_dir,
    seed_list,
    write_study,
)
from ptmlab.studies.multitask import FULL as MULTITASK_FULL
from ptmlab.studies.multitask import GPU as MULTITASK_GPU
from ptmlab.studies.multitask import SMALL_TASKS
from ptmlab.studies.multitask import TASKS as MULTITASK_TASKS
from ptmlab.studies.verdict import Claim, Verdict, combine, decide_above, paired_seeds

CLAIM = Claim(
    study="ticket-sharing",
    claim="super tickets of different tasks overlap more than random tickets of the same sizes, and a multi-task "
          "model on the shared ticket beats one on the full model, most on the small tasks",
    source="ACL 2021: Liang et al., Super Tickets in Pre-Trained Language Models (ticket sharing)",
    paper="MT-DNN on a shared super ticket above MT-DNN on the full BERT-base on GLUE dev, larger gains on the small "
          "tasks (RTE, MRPC, STS-B, CoLA)",
    rule="(1) per seed, mean pairwise Jaccard of kept heads and FFN neurons minus that of random tickets of the same "
         "per-layer sizes; (2) per seed, shared-ticket multi-task minus full multi-task dev main metric, mean over the "
         "small tasks; each paired over seeds with a 95% t interval: above 0 supported, below 0 not supported, "
         "including 0 inconclusive; the claim is supported when both parts are, not supported when either is not",
    conditions=(
        "the shared ticket keeps under 80% of the heads on every seed",
        "every full and shared-ticket multi-task model above its task's trivial predictor by a t interval "
        "over seeds",
    ),
)


@dataclass(frozen=True)
class TicketSharingArgs(StudyArgs):
    model: str = opt("minilm", "pretrained zoo model or model directory every task and ticket starts from")
    tasks: list[str] = opt(list(MULTITASK_TASKS), "tasks whose tickets are compared and shared (those without data "
                                                  "are skipped)")
    small_tasks: list[str] = opt(list(SMALL_TASKS), "the tasks part (2) of the claim is about")
    ratio: float = opt(0.3, "fraction of heads and of FFN neurons each task's ticket removes, in (0, 1)")
    share: str = opt("votes", "the shared ticket: votes (the tasks' ticket size, the units most tasks keep), union "
                              "(kept by any task) or intersection (kept by every task)",
                     choices=["votes", "union", "intersection"])
    importance: str = opt("gate", "importance score for heads and FFN neurons: gate, grad-weight, entropy")
    importance_examples: int = opt(500, "training examples used to score heads and neurons")
    task_sampling: str = opt("proportional", "how the multi-task runs draw tasks: proportional, uniform, sqrt",
                             choices=["proportional", "uniform", "sqrt"])
    max_train: int | None = opt(1000, "training examples per task")
    max_eval: int | None = opt(500, "dev examples per task (0: all)")
    epochs: float = opt(2.0, "epochs per task (every fine-tuning)")
    seeds: list[str] = opt(["0", "1", "2"], "seeds every fine-tuning is repeated with")
    output: str = opt("runs/study-ticket-sharing", "output directory")

    def validate(self) -> None:
        from ptmlab.compress.importance import IMPORTANCE

        super().validate()
        if not 0 < self.ratio < 1:
            raise PtmlabError(f"--ratio {self.ratio} must be in (0, 1): 0 keeps the whole model (no ticket), 1 "
                              f"keeps nothing; e.g. 0.3")
        IMPORTANCE.get(self.importance)
        at_least(self, 1, "importance_examples")


SMALL = {**SMALL_FINETUNE, "tasks": ["tweets", "mrpc", "rte"], "small_tasks": ["mrpc", "rte"], "seeds": ["0"],
         "importance_examples": 32}
FULL = {**MULTITASK_FULL}  # the multitask study's full budget: its single-task and full multi-task runs are these
GPU = {**MULTITASK_GPU}  # and its gpu budget, the same way


def task_ticket(a: TicketSharingArgs, task: str, run_dir: Path, seed: int) -> dict:
    """The ticket of ``task`` from its fine-tuned run: keep-masks over heads and FFN neurons."""
    from ptmlab.compress.importance import compute_importance
    from ptmlab.compress.targets import ffn_mask, head_mask
    from ptmlab.data.encode import encode_split
    from ptmlab.data.loaders import subset
    from ptmlab.data.taskdata import load_task_data
    from ptmlab.models.zoo import load_model, load_tokenizer

    data = load_task_data(replace(a, task=task, seed=seed))
    tokenizer = load_tokenizer(str(run_dir))
    enc = encode_split(tokenizer, subset(data.splits["train"], a.importance_examples, seed), a.max_length)
    imp = compute_importance(a.importance, load_model(str(run_dir)), enc, tokenizer.pad_token_id or 0)
    return {"heads": head_mask(imp, a.ratio), "ffn": ffn_mask(imp, a.ratio)}


def overlap(tickets: dict[str, dict], seed: int) -> dict:
    """Pairwise Jaccard of kept heads and neurons, observed and for random tickets of the same per-layer sizes."""
    from ptmlab.compress.tickets import jaccard, random_jaccard

    pairs = {}
    for s, t in itertools.combinations(tickets, 2):
        pairs[f"{s}-{t}"] = {kind: {"observed": jaccard(tickets[s][kind], tickets[t][kind]),
                                    "random": random_jaccard(tickets[s][kind], tickets[t][kind], seed=seed)}
                             for kind in ("heads", "ffn")}
    observed = float(np.mean([p[k]["observed"] for p in pairs.values() for k in ("heads", "ffn")]))
    chance = float(np.mean([p[k]["random"] for p in pairs.values() for k in ("heads", "ffn")]))
    return {"pairs": pairs, "observed": observed, "random": chance}


@STUDIES.register("ticket-sharing", help="Liang et al.: per-task super tickets overlap; a shared ticket for MTL")
def run(argv: list[str]) -> int:
    from ptmlab.compress.surgery import mask_to_keep
    from ptmlab.compress.tickets import build_ticket, check_ticket, share
    from ptmlab.data.taskdata import label_names, load_task_data
    from ptmlab.models.loader import save_model
    from ptmlab.models.zoo import load_tokenizer
    from ptmlab.report.plots import bar_plot
    from ptmlab.studies.multitask import tasks_with_data

    a = parse_study_args("ticket-sharing", TicketSharingArgs, argv, __doc__, small=SMALL, full=FULL, gpu=GPU)
    tasks, small = tasks_with_data(a, "ticket sharing")
    seeds = seed_list(a)
    out = Path(a.output)
    first = load_task_data(replace(a, task=tasks[0]))
    tokenizer = load_tokenizer(a.model)
    overlaps, full, ticket, sizes = [], {t: [] for t in tasks}, {t: [] for t in tasks}, []
    metric_of: dict[str, str] = {}
    for seed in seeds:
        tickets_file = seed_dir(out / "tickets", "masks", seed, seeds).with_suffix(".json")
        if tickets_file.is_file() and not a.overwrite:
            tickets = json.loads(tickets_file.read_text())
        else:
            tickets = {}
            for t in tasks:
                run_dir = seed_dir(out, f"single-{t}", seed, seeds)
                finetune_variant(a, run_dir, model=a.model, task=t, seed=seed, test=False)
                tickets[t] = task_ticket(a, t, run_dir, seed)
            from ptmlab.core.io import atomic_write_json

            atomic_write_json(tickets_file, tickets)
        overlaps.append(overlap(tickets, seed))
        heads = share([tickets[t]["heads"] for t in tasks], a.share, seed)
        ffn = share([tickets[t]["ffn"] for t in tasks], a.share, seed)
        check_ticket(heads, ffn, f"the {a.share} of the tasks' tickets")
        sizes.append({"heads": sum(map(sum, heads)), "heads_total": sum(map(len, heads)),
                      "ffn": sum(map(sum, ffn)), "ffn_total": sum(map(len, ffn))})
        init = seed_dir(out / "tickets-init", "shared", seed, seeds)
        if not (init / "config.json").is_file() or a.overwrite:
            spec = first.spec
            save_model(build_ticket(a.model, mask_to_keep(heads), mask_to_keep(ffn), spec.num_labels,
                                    spec.kind == "regression", label_names(first), seed), tokenizer, init)
        mt_full = finetune_variant(a, seed_dir(out, "mt-full", seed, seeds), model=a.model, task=tasks[0],
                                   tasks=tasks, seed=seed, test=False)
        mt_ticket = finetune_variant(a, seed_dir(out, "mt-ticket", seed, seeds), model=str(init), task=tasks[0],
                                     tasks=tasks, seed=seed, test=False)
        for t in tasks:
            metric_of[t] = _main_metric(t)
            full[t].append(float(mt_full["task_metrics"][t][metric_of[t]]))
            ticket[t].append(float(mt_ticket["task_metrics"][t][metric_of[t]]))
    rows = []
    for t in tasks:
        est = paired_seeds(ticket[t], full[t], f"{t} margin")
        rows.append({"task": t, "small": t in small, "metric": metric_of[t], "full_mt": float(np.mean(full[t])),
                     "ticket_mt": float(np.mean(ticket[t])), "margin": est.value, "low": _finite(est.low),
                     "high": _finite(est.high)})
    v = decide([o["observed"] for o in overlaps], [o["random"] for o in overlaps],
               {t: ticket[t] for t in small}, {t: full[t] for t in small})
    pairs = overlaps[0]["pairs"]
    fig = bar_plot([f"{p} {k} {w}" for p in pairs for k in ("heads", "ffn") for w in ("observed", "random")],
                   [pairs[p][k][w] for p in pairs for k in ("heads", "ffn") for w in ("observed", "random")],
                   "Jaccard of kept units", f"ticket overlap at ratio {a.ratio:g} (seed {seeds[0]})")
    write_study(out, f"Study: ticket sharing across tasks ({a.model})", rows, v,
                [(fig, "ticket_overlap", "pairwise Jaccard of kept heads / FFN neurons: tickets vs random tickets")],
                extra={"tasks": tasks, "small_tasks": small, "share": a.share, "ratio": a.ratio,
                       "overlap": overlaps, "shared_ticket_size": sizes,
                       "per_seed": {"full_mt": full, "ticket_mt": ticket}},
                claim=CLAIM, budget=a.budget, seeds=seeds, validity=validity)
    return 0


def _main_metric(task: str) -> str:
    from ptmlab.data.tasks import TASKS

    return TASKS.get(task).main_metric


def _finite(x: float) -> float | None:
    return x if np.isfinite(x) else None


def decide(observed: list[float], chance: list[float], ticket: dict[str, list[float]],
           full: dict[str, list[float]]) -> Verdict:
    """The rule of ``CLAIM``: per-seed mean overlaps (tickets, random tickets) and per-seed dev metrics of the small
    tasks for the multi-task model on the shared ticket and on the full model."""
    est_o = paired_seeds(observed, chance, "ticket overlap minus random-ticket overlap (Jaccard)")
    n = len(next(iter(ticket.values())))
    tk = [float(np.mean([ticket[t][k] for t in ticket])) for k in range(n)]
    fl = [float(np.mean([full[t][k] for t in ticket])) for k in range(n)]
    est_s = paired_seeds(tk, fl, "shared-ticket minus full multi-task, mean over the small tasks")
    return combine([decide_above(est_o, 0.0), decide_above(est_s, 0.0)], names=["tickets overlap", "shared ticket"])


def restate(record: dict, name: str = "ticket-sharing") -> Verdict | None:
    """The rule of ``CLAIM`` recomputed from the record's per-seed overlaps (``overlap``: observed and random-ticket
    Jaccard per seed) and per-seed scores of the small tasks (``per_seed``)."""
    overlaps = [o for o in record.get("overlap") or [] if isinstance(o, dict) and "observed" in o and "random" in o]
    ps = record.get("per_seed") if isinstance(record.get("per_seed"), dict) else {}
    small = [t for t in record.get("small_tasks") or [] if t in (ps.get("ticket_mt") or {})
             and t in (ps.get("full_mt") or {})]
    if not overlaps or not small:
        return None
    return decide([o["observed"] for o in overlaps], [o["random"] for o in overlaps],
                  {t: ps["ticket_mt"][t] for t in small}, {t: ps["full_mt"][t] for t in small})


MAX_SHARED = 0.8   # the largest share of heads a shared ticket may keep and still be a ticket


def validity(record: dict) -> list:
    """The conditions of ``CLAIM`` on a results record (``shared_ticket_size`` per seed; ``per_seed``)."""
    from ptmlab.studies.multitask import _per_task_trivial
    from ptmlab.studies.verdict import Condition

    sizes = [s for s in record.get("shared_ticket_size") or [] if isinstance(s, dict) and s.get("heads_total")]
    share = max(s["heads"] / s["heads_total"] for s in sizes) if sizes else None
    return [Condition.check("share of heads the shared ticket keeps (largest over seeds)", share, "<", MAX_SHARED)] \
        + _per_task_trivial(record, ("full_mt", "ticket_mt"))
