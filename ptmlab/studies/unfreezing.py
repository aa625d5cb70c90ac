"""Study ``unfreezing`` (Q1, Q7): is gradual unfreezing needed, or does full fine-tuning do as well?

Claim: with modern pretrained encoders, gradual unfreezing (ULMFiT) is not needed: full fine-tuning does as well.
Source: Q7 (Howard & Ruder, ACL 2018, ULMFiT; Peters et al. 2019, "To tune or not to tune"). Paper: ULMFiT's
ablation credits gradual unfreezing with a gain for its LSTM; later work with BERT-size encoders reports full
fine-tuning at least as good, with adapters within about 0.4 GLUE points (Houlsby et al. 2019).

Validity conditions (checked on the run's numbers before the rule; any unmet: cannot test): each compared strategy's
dev metric is above its task's trivial predictor (majority-class accuracy) by a t interval over seeds.

Rule: d = gradual unfreezing minus full fine-tuning, paired by seed, t over seeds; a non-inferiority test of full
fine-tuning at the margin 0.01 with one-sided 95% bounds: supported when the upper bound of d is below +0.01 (gradual
unfreezing gains at most the margin), not supported when the lower bound of d is above +0.01 (gradual unfreezing
helps), inconclusive otherwise.

In detail: d = gradual unfreezing minus full fine-tuning on the dev metric, paired by seed, with a t interval over
seeds (``--seeds``; one seed gives no interval). The claim "full fine-tuning does as well" is a non-inferiority claim:
whatever gradual unfreezing adds must stay under the margin of 0.01 stated in the preregistration
(``studies/preregistered/unfreezing.json``). Supported when d's one-sided 95% upper bound is below +0.01; not
supported when its one-sided 95% lower bound is above +0.01; inconclusive otherwise. A gradual unfreezing that
trails full fine-tuning clearly supports the claim (full fine-tuning does at least as well); the results say so
beside the verdict, since under this budget it also measures the unfreezing schedule.

Compared under one budget (same data, epochs and batch size): full fine-tuning, frozen features, gradual unfreezing,
the ULMFiT recipe (gradual unfreezing + slanted triangular schedule + discriminative rates), adapters and LoRA.
Gradual unfreezing spreads its groups over the whole budget, as ULMFiT does over its epochs: one layer group every
(training steps / groups) steps, head first; the schedule is in results.json. Learning rates follow each method's
usual setting: 5e-5 for methods that move the whole encoder, 1e-3 for the few parameters of frozen features and
adapters, 5e-4 for LoRA.

The committed result (nine seeds, ``--seeds 3,4,5,6,7,8,9,10,11``, sized from seeds 0-2, which are not pooled into
it) was judged under an earlier rule, an equivalence test that called a clearly trailing gradual unfreezing
inconclusive and so could not reach the answer its data give; judged again by this rule it is exploratory. A
confirmatory answer takes a preregistration of this rule and fresh seeds (docs/studies.md).

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
    eval_size,
    finetune_run,
    parse_study_args,
    rows_per_seed,
    seed_dir,
    seed_list,
    write_study,
)
from ptmlab.studies.executor import run_grid
from ptmlab.studies.verdict import (
    INCONCLUSIVE,
    NOT_SUPPORTED,
    SUPPORTED,
    Claim,
    Verdict,
    decide_noninferior,
    one_sided_bound,
    paired_seeds,
)

CLAIM = Claim(
    study="unfreezing",
    claim="gradual unfreezing is not needed: full fine-tuning of a pretrained encoder does as well",
    source="Q7; Howard & Ruder 2018 (ULMFiT), Peters et al. 2019 (To tune or not to tune)",
    paper="ULMFiT credits gradual unfreezing with a gain for its LSTM; BERT-size encoders fine-tuned in full are at "
          "least as good in later work",
    rule="d = gradual unfreezing minus full fine-tuning, paired by seed, t over seeds; a non-inferiority test of "
         "full fine-tuning at the margin 0.01 with one-sided 95% bounds: supported when the upper bound of d is "
         "below +0.01 (gradual unfreezing gains at most the margin), not supported when the lower bound of d is "
         "above +0.01 (gradual unfreezing helps), inconclusive otherwise",
    conditions=("full fine-tuning and gradual unfreezing each above the task's majority-class accuracy by a t "
                "interval over seeds",),
    metric="dev metric (accuracy on SST-2): gradual unfreezing minus full fine-tuning, paired by seed",
    margin=0.01,
)
MARGIN = 0.01
LRS = {"full": 5e-5, "gradual-unfreeze": 5e-5, "ulmfit": 5e-5, "frozen": 1e-3, "adapter": 1e-3, "lora": 5e-4}
FULL = dict(FULL_FINETUNE)  # what --budget full runs: seeds 0,1,2 and the whole dev set


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
    from ptmlab.report.plots import bar_plot

    a = parse_study_args("unfreezing", UnfreezingArgs, argv, __doc__, small=SMALL_FINETUNE, full=FULL)
    seeds = seed_list(a)
    out = Path(a.output)
    done = run_grid(a, {(s, seed): finetune_run(a, seed_dir(out, s, seed, seeds), strategy=s, lr=LRS.get(s, 5e-5),
                                                seed=seed, test=False) for s in a.strategies for seed in seeds})
    rows, per_seed = [], {}
    for s in a.strategies:
        summ = [done[s, seed] for seed in seeds]
        metric = summ[0]["main_metric"]
        per_seed[s] = [x["metrics"][metric] for x in summ]
        rows.append({"strategy": s, metric: float(np.mean(per_seed[s])), "per_seed": list(per_seed[s]),
                     "trainable_params": summ[0]["trainable_params"],
                     "trainable_%": 100.0 * summ[0]["trainable_params"] / summ[0]["params"],
                     "train_seconds": summ[0]["train_seconds"], "lr": LRS.get(s, 5e-5)})
    steps = summ[0]["steps"]
    v = decide(per_seed, metric)
    fig = bar_plot([r["strategy"] for r in rows], [r[metric] for r in rows], f"dev {metric}",
                   f"{a.task}: {a.epochs:g} epochs, {a.max_train} examples (mean of {len(seeds)} seed(s))")
    write_study(out, f"Study: unfreezing ({a.model} on {a.task})", rows, v,
                [(fig, "strategies", "dev metric per strategy")],
                extra={"metric": metric, "unfreeze_schedule": schedule(a, steps),
                       "summary": summary_text(per_seed, metric)},
                claim=CLAIM, budget=a.budget, seeds=seeds, validity=validity)
    return 0


def validity(record: dict) -> list:
    """The conditions of ``CLAIM`` on a results record: the compared strategies above the trivial predictor."""
    from ptmlab.studies.common import above_trivial, task_of

    per_seed = rows_per_seed(record.get("rows") or [], "strategy")
    compared = {k: per_seed.get(k, []) for k in ("full", "gradual-unfreeze")}
    return above_trivial(record, task_of(record), str(record.get("metric") or "accuracy"), compared,
                         eval_size(record, 1000))


def restate(record: dict, name: str = "unfreezing") -> Verdict:
    """The rule of ``CLAIM`` recomputed from the record's per-seed scores."""
    return decide(rows_per_seed(record.get("rows") or [], "strategy"), str(record.get("metric") or "accuracy"))


def schedule(a: UnfreezingArgs, steps: int) -> list[dict]:
    """The step at which each layer group of ``a.model`` starts training under gradual unfreezing with ``steps``
    training steps (what ``GradualUnfreeze`` does, written down for the results)."""
    import dataclasses

    from ptmlab.models.zoo import load_model
    from ptmlab.train.args import FinetuneConfig
    from ptmlab.train.optim import depth_groups
    from ptmlab.train.strategies import unfreeze_every, unfreeze_schedule

    names = [g for g, _ in depth_groups(load_model(a.model, num_labels=2))]
    cfg = dataclasses.replace(FinetuneConfig(), max_steps=steps, unfreeze_every=a.unfreeze_every)
    return unfreeze_schedule(names, unfreeze_every(cfg, steps, len(names)))


def decide(per_seed: dict[str, list[float]], metric: str) -> Verdict:
    """The rule of ``CLAIM`` on per-seed dev metrics of ``full`` and ``gradual-unfreeze``: ``decide_noninferior``
    on gradual minus full with the margin (the claim: d below +MARGIN, one-sided 95% bounds)."""
    if "full" not in per_seed or "gradual-unfreeze" not in per_seed:
        return Verdict(INCONCLUSIVE, "the study needs both 'full' and 'gradual-unfreeze' to compare")
    est = paired_seeds(per_seed["gradual-unfreeze"], per_seed["full"],
                       f"{metric} of gradual unfreezing minus full fine-tuning")
    v = decide_noninferior(est, MARGIN, "gradual unfreezing minus full fine-tuning", above=False)
    trails = one_sided_bound(est, "upper") < -MARGIN
    note = {SUPPORTED: ": full fine-tuning does as well" + (
                " (gradual unfreezing trails it by more than the margin: under this budget that also measures the "
                "unfreezing schedule)" if trails else ""),
            NOT_SUPPORTED: ": gradual unfreezing helps here", INCONCLUSIVE: ""}[v.outcome]
    return Verdict(v.outcome, v.reason + note, est, detectable_effect=v.detectable_effect,
                   paper_effect=MARGIN if v.outcome == INCONCLUSIVE else None, thresholds=v.thresholds)


def summary_text(per_seed: dict[str, list[float]], metric: str) -> str:
    """The other strategies against full fine-tuning, for the reader (they do not enter the verdict)."""
    if "full" not in per_seed:
        return ""
    full = float(np.mean(per_seed["full"]))
    return "; ".join(f"{s} {float(np.mean(v)):.4f} {metric} ({100 * float(np.mean(v)) / full:.1f}% of full)"
                     for s, v in per_seed.items() if s != "full" and full > 0)
