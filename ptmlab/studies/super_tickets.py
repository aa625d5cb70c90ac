"""Study ``super-tickets`` (Liang et al., ACL 2021, "Super Tickets in Pre-Trained Language Models").

Claim: mildly pruned "super tickets" (heads and FFN neurons removed, survivors rewound to their pretrained values,
then fine-tuned) beat the unpruned model under the same budget, and past a phase transition heavier pruning falls
below it. Source: ACL 2021 (Liang et al.). Paper: BERT-base on GLUE dev, super tickets +0.6-1.0 points average over
the full model, with the gain turning to a loss beyond roughly 40-60% of heads/FFN removed.

Validity conditions (checked on the run's numbers before the rule; any unmet: cannot test): the unpruned model, the
chosen ticket and the most pruned ticket are each above the task's trivial predictor (majority-class accuracy) by a
t interval over seeds. The reference (ratio 0, the unpruned pretrained model) gets the same fine-tuning as every
ticket by construction (one call, one budget).

Rule: dev examples at even positions choose the ratio, odd positions test it; supported when the
chosen ticket's held-out accuracy gain over the unpruned model has a 95% hierarchical-bootstrap interval above 0 AND the
most pruned ratio above it has an interval of its loss above 0; not supported when either interval lies wholly on
the wrong side; otherwise inconclusive.

In detail: every run's dev examples are split by position, even positions choose the best pruning ratio and odd
positions test it. Part 1: the chosen ticket's accuracy gain over the unpruned model on the held-out half
(hierarchical bootstrap: seeds, then examples, 95%) -- supported when the interval is above 0, not supported when
below, inconclusive when it includes 0. Part 2 (the phase transition): the most heavily pruned ticket of the grid,
if it is above the chosen ratio, must fall below the unpruned model on the held-out half (same bootstrap); no
heavier ratio in the grid leaves part 2 inconclusive. Both parts supported: supported; either not: not supported;
else inconclusive. Every ratio's held-out numbers are reported too, not only the chosen one.

Method: heads and FFN neurons are scored on the fine-tuned model (``ptmlab.compress.importance``); for each ratio
of the grid the same fraction of heads and of FFN neurons is removed from the *pretrained* model (the base zoo model
loaded, the fine-tuned model's keep-masks applied with the pruning surgery), and every ticket is fine-tuned with the
same budget, once per seed (``--seeds``; ``--budget full``: seeds 0,1,2, the whole dev set, mpnet). Ratio 0 is the
unpruned pretrained model under that budget.

Budgets and rough times on 2 CPU cores and one GPU: docs/studies.md.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ptmlab.core.config import opt
from ptmlab.core.errors import PtmlabError
from ptmlab.studies import STUDIES
from ptmlab.studies.common import FULL_FINETUNE, SMALL_FINETUNE, parse_study_args, write_study
from ptmlab.studies.compress_common import CompressStudyArgs
from ptmlab.studies.evidence import pack_runs
from ptmlab.studies.verdict import INCONCLUSIVE, Claim, Verdict, combine, decide_above, hierarchical_bootstrap

CLAIM = Claim(
    study="super-tickets",
    claim="mildly pruned tickets rewound to pretrained weights beat the unpruned model; past a phase transition "
          "heavier pruning falls below it",
    source="ACL 2021: Liang et al., Super Tickets in Pre-Trained Language Models",
    paper="BERT-base, GLUE dev: super tickets +0.6 to +1.0 points average over the full model; gains turn to losses "
          "beyond about 40-60% of heads and FFN removed",
    rule="dev examples at even positions choose the ratio, odd positions test it; supported when the "
         "chosen ticket's held-out accuracy gain over the unpruned model has a 95% hierarchical-bootstrap interval "
         "above 0 "
         "AND the most pruned ratio above it has an interval of its loss above 0; not supported when either "
         "interval lies wholly on the wrong side; otherwise inconclusive",
    conditions=(
        "the unpruned model, the chosen ticket and the most pruned ticket each above the task's trivial "
        "predictor by a t interval over seeds",
    ),
    paper_effect=0.006,
    paper_part=0,  # the paper's +0.6 points is the super ticket's gain (part 1), not the heavy-pruning loss
)


@dataclass(frozen=True)
class SuperTicketsArgs(CompressStudyArgs):
    ratios: list[str] = opt(["0", "0.1", "0.2", "0.3", "0.4", "0.5"], "fractions of heads and FFN neurons removed "
                                                                       "together, each in [0, 1)")
    base: str = opt("", "the pretrained model the tickets rewind to (default: the model the fine-tuned run started "
                        "from)")
    output: str = opt("runs/study-super-tickets", "output directory")

    def validate(self) -> None:
        from ptmlab.studies.compress_common import parse_ratios

        super().validate()
        parse_ratios(self.ratios)


def base_model(a: SuperTicketsArgs, ft: str) -> str:
    """``--base``, else the model the fine-tuned run was trained from, else the study's ``--model``."""
    from ptmlab.core.rundir import RunDir

    if a.base:
        return a.base
    try:
        cfg = RunDir(ft).read_config()
    except Exception:
        cfg = {}
    return str(cfg.get("model") or a.model)


def build_ticket(base: str, keep_heads: dict, keep_ffn: dict, spec, labels, seed: int):
    """The pretrained ``base`` with a task head for ``spec`` (seeded), rewound to the kept heads / neurons."""
    from ptmlab.compress.tickets import build_ticket as rewind

    return rewind(base, keep_heads, keep_ffn, spec.num_labels, spec.kind == "regression", labels, seed)


# what --budget small runs (tests, CI)
SMALL = {
    **SMALL_FINETUNE,
    "latency_repeats": 1,
    "importance_examples": 32,
    "ratios": ["0", "0.3", "0.6"],
}
FULL = {**FULL_FINETUNE, "model": "mpnet"}  # what --budget full runs


@STUDIES.register("super-tickets", help="Liang et al.: rewound pruned tickets vs the unpruned model across ratios")
def run(argv: list[str]) -> int:
    from ptmlab.compress.importance import compute_importance
    from ptmlab.compress.surgery import heads_per_layer, mask_to_keep
    from ptmlab.compress.targets import ffn_mask, head_mask
    from ptmlab.data.encode import encode_split
    from ptmlab.data.loaders import subset
    from ptmlab.data.taskdata import label_names, load_task_data
    from ptmlab.models.latency import parameter_count
    from ptmlab.models.loader import save_model
    from ptmlab.models.zoo import load_model, load_tokenizer
    from ptmlab.studies.common import dev_correct, finetune_run, seed_dir, seed_list
    from ptmlab.studies.compress_common import parse_ratios, start
    from ptmlab.studies.executor import run_grid

    a = parse_study_args("super-tickets", SuperTicketsArgs, argv, __doc__, small=SMALL, full=FULL)
    ratios = parse_ratios(a.ratios)
    if 0.0 not in ratios:
        ratios = [0.0, *ratios]  # the unpruned model under the same budget is the reference line
    seeds = seed_list(a)
    out, ft = start(a)
    base = base_model(a, ft)
    data = load_task_data(a)
    spec, labels = data.spec, label_names(data)
    tokenizer = load_tokenizer(ft)
    if load_tokenizer(base).get_vocab() != tokenizer.get_vocab():
        raise PtmlabError(f"base model '{base}' has a different vocabulary from the fine-tuned model: pass the "
                          f"pretrained model it was fine-tuned from with --base")
    scored = load_model(ft)
    config_heads = scored.config.num_attention_heads
    if getattr(scored.config, "ptmlab_modifications", None) or set(heads_per_layer(scored)) != {config_heads}:
        raise PtmlabError(f"'{ft}' is already modified (pruned, ...): super tickets score an unpruned fine-tuned "
                          f"model")
    enc = encode_split(tokenizer, subset(data.splits["train"], a.importance_examples, a.seed), a.max_length)
    imp = compute_importance(a.importance, scored, enc, tokenizer.pad_token_id or 0)
    metric = spec.main_metric
    grid = {}  # the tickets are built here (seeded), their fine-tunings are the study's grid
    for r in ratios:
        name = f"ticket-{r:g}"
        for seed in seeds:
            run_dir = seed_dir(out, name, seed, seeds)
            if r == 0:
                grid[r, seed] = finetune_run(a, run_dir, model=base, seed=seed, test=False)
            else:
                keep_h, keep_f = mask_to_keep(head_mask(imp, r)), mask_to_keep(ffn_mask(imp, r))
                init = seed_dir(out / "tickets-init", name, seed, seeds)
                if not (init / "config.json").is_file() or a.overwrite:
                    save_model(build_ticket(base, keep_h, keep_f, spec, labels, seed), tokenizer, init)
                grid[r, seed] = finetune_run(a, run_dir, model=str(init), seed=seed, test=False)
    done = run_grid(a, grid)
    rows, correct = [], {}
    for r in ratios:
        name = f"ticket-{r:g}"
        scores, correct[r] = [], []
        for seed in seeds:
            run_dir = seed_dir(out, name, seed, seeds)
            s = done[r, seed]
            scores.append(s["metrics"][metric])
            correct[r].append(dev_correct(run_dir))
        rows.append({"ratio": r, metric: float(np.mean(scores)), "per_seed": [round(x, 4) for x in scores],
                     "params": s["params"], "heads": sum(heads_per_layer(load_model(str(run_dir))))})
    ft_metric = _fine_tuned_metric(ft, metric)
    unpruned = rows[0][metric]
    for row in rows:
        row["vs_unpruned"] = round(row[metric] - unpruned, 4)
    usable = all(c is not None for runs in correct.values() for c in runs)
    v, chosen, held_out = decide(correct) if usable else (Verdict(
        INCONCLUSIVE, f"{spec.name} has no per-example correctness (regression): the bootstrap rule cannot run"),
        None, {})
    for row in rows:
        row["held_out_gain"] = held_out.get(row["ratio"])
    best = next((row for row in rows if row["ratio"] == chosen), None)
    transition = phase_transition(rows, metric, unpruned)
    fig = _plot(rows, metric, unpruned, best, transition, a)
    write_study(out, f"Study: super tickets ({base} on {a.task})", rows, v,
                [(fig, "super_tickets", f"dev {metric} of each ticket against the ratio of heads and FFN removed")],
                extra={"metric": metric, "base": base, "fine_tuned": ft, "fine_tuned_dev": ft_metric,
                       "unpruned_params": parameter_count(scored), "chosen_ratio": chosen,
                       "selection": "dev examples at even positions choose the ratio; odd positions report",
                       "phase_transition_point_estimate": transition, "importance": a.importance,
                       "evidence": {"correct": {str(r): pack_runs(runs) for r, runs in correct.items()}}
                       if usable else None},
                claim=CLAIM, budget=a.budget, seeds=seeds, validity=validity)
    return 0


def decide(correct: dict[float, list[list[float]]]) -> tuple[Verdict, float | None, dict[float, float]]:
    """The rule of ``CLAIM`` on per-seed, per-example correctness of each ratio (``correct[0.0]`` the unpruned
    model): the verdict, the chosen ratio and each ratio's held-out gain over the unpruned model."""
    from ptmlab.studies.common import choose_then_test

    unpruned = correct[0.0]
    others = {r: c for r, c in correct.items() if r != 0.0}
    if not others:
        return Verdict(INCONCLUSIVE, "the grid has no ratio above 0 to compare with the unpruned model"), None, {}

    def odd(runs):
        return [x for run in runs for x in run[1::2]]

    held_out = {r: round(float(np.mean(odd(c)) - np.mean(odd(unpruned))), 4) for r, c in others.items()}
    held_out[0.0] = 0.0
    chosen, _, est = choose_then_test({str(r): c for r, c in others.items()}, unpruned,
                                      "held-out accuracy gain of the chosen ticket over the unpruned model")
    chosen_r = float(chosen)
    part1 = decide_above(est, 0.0, f"ticket {chosen_r:g} (chosen on the even half): held-out gain")
    heavier = [r for r in others if r > chosen_r]
    if heavier:
        top = max(heavier)
        loss = hierarchical_bootstrap([run[1::2] for run in unpruned], [run[1::2] for run in others[top]],
                                      "held-out accuracy loss of the most pruned ticket")
        part2 = decide_above(loss, 0.0, f"ticket {top:g} (most pruned): held-out loss against the unpruned model")
    else:
        part2 = Verdict(INCONCLUSIVE, f"no ratio above the chosen {chosen_r:g} in the grid: the phase transition is "
                                      f"not tested")
    return combine([part1, part2]), chosen_r, held_out


def _fine_tuned_metric(ft: str, metric: str):
    from ptmlab.core.rundir import RunDir

    try:
        return RunDir(ft).summary()["metrics"].get(metric)
    except Exception:
        return None


def phase_transition(rows: list[dict], metric: str, unpruned: float) -> float | None:
    """The first ratio from which every ticket's mean is below the unpruned model (None: never, in this grid): a
    point estimate for the plot; the verdict rests on ``decide``."""
    below = None
    for row in rows[1:]:
        if row[metric] < unpruned:
            below = row["ratio"] if below is None else below
        else:
            below = None
    return below


def _plot(rows, metric, unpruned, best, transition, a):
    from ptmlab.report.html import new_figure

    fig, ax = new_figure()
    xs = [r["ratio"] for r in rows]
    ax.plot(xs, [r[metric] for r in rows], "o-", label="ticket (rewound to pretrained, fine-tuned)")
    ax.axhline(unpruned, color="gray", ls="--", lw=1, label=f"unpruned model ({unpruned:.4f})")
    if best is not None:
        ax.plot([best["ratio"]], [best[metric]], "*", color="tab:red", ms=14, label=f"best ticket ({best['ratio']:g})")
    if transition is not None:
        ax.axvline(transition, color="tab:orange", ls=":", lw=1.5, label=f"phase transition ({transition:g})")
    ax.set_xlabel("fraction of heads and FFN neurons removed")
    ax.set_ylabel(f"dev {metric}")
    ax.set_title(f"super tickets: {a.max_train} examples, {a.epochs:g} epoch(s) each")
    ax.legend(fontsize=7)
    return fig


def validity(record: dict) -> list:
    """The conditions of ``CLAIM`` on a results record (rows with per-seed scores per ratio, the chosen ratio)."""
    from ptmlab.studies.common import above_trivial, task_of

    rows = [r for r in record.get("rows") or [] if isinstance(r.get("per_seed"), list)]
    if not rows:
        return above_trivial(record, task_of(record), str(record.get("metric") or "accuracy"), {"unpruned": []})
    top = max(r["ratio"] for r in rows)
    keep = {0.0, top, record.get("chosen_ratio")}
    systems = {f"ticket {r['ratio']:g}" if r["ratio"] else "the unpruned model": r["per_seed"] for r in rows
               if r["ratio"] in keep}
    return above_trivial(record, task_of(record), str(record.get("metric") or "accuracy"), systems)


def restate(record: dict, name: str = "super-tickets") -> Verdict | None:
    """From the record's per-example records (``evidence``) when it carries them: the rule itself. From a committed
    record without them: both parts as paired t intervals over the seeds' whole-dev scores (the choosing half
    included for part 1: a rerun gives the held-out seed-level interval)."""
    import dataclasses

    from ptmlab.studies.evidence import evidence_of, unpack_runs
    from ptmlab.studies.verdict import paired_seeds

    ev = evidence_of(record).get("correct")
    if isinstance(ev, dict) and "0.0" in ev:
        return decide({float(r): unpack_runs(v) for r, v in ev.items()})[0]
    rows = {r["ratio"]: r["per_seed"] for r in record.get("rows") or [] if isinstance(r.get("per_seed"), list)}
    chosen = record.get("chosen_ratio")
    if 0.0 not in rows or chosen not in rows:
        return None
    note = ", whole dev, choosing half included"
    est = paired_seeds(rows[chosen], rows[0.0], "gain of the chosen ticket over the unpruned model")
    part1 = decide_above(dataclasses.replace(est, method=est.method + note), 0.0,
                         f"ticket {chosen:g} (chosen on the even half): gain")
    heavier = [r for r in rows if r > chosen]
    if not heavier:
        return combine([part1, Verdict(INCONCLUSIVE, "no ratio above the chosen one: the phase transition is not "
                                                     "tested")])
    top = max(heavier)
    loss = paired_seeds(rows[0.0], rows[top], "loss of the most pruned ticket")
    part2 = decide_above(dataclasses.replace(loss, method=loss.method + ", whole dev"), 0.0,
                         f"ticket {top:g} (most pruned): loss against the unpruned model")
    return combine([part1, part2])
