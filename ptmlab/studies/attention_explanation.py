"""Study ``attention-explanation`` (Q12, Jain & Wallace): is attention an explanation?

Claim: attention weights are not a faithful explanation: they agree only weakly with importance measures, and
permuting them often leaves the prediction almost unchanged. Source: Q12; Jain & Wallace, NAACL 2019 ("Attention is
not Explanation"). Paper: BiLSTM-attention models, Kendall tau between attention and gradient importance mostly
below 0.3-0.5 across datasets, while permuting attention changes the output by a median TVD under about 0.05 on
most datasets.

Rule: 95% bootstrap over examples: mean tau of the best-agreeing attention measure below 0.3, AND gradient vs
leave-one-out agreeing better than it (paired difference above 0), AND the share of examples with permutation TVD <
0.05 above 0.5; not supported when any part lies wholly on the wrong side; else inconclusive.

In detail, three parts, each a 95% bootstrap over dev examples: (1) weak agreement: the mean Kendall tau of the
attention measure that agrees best with an importance measure is below 0.3; (2) the two importance measures
(gradient, leave-one-out) agree better with each other than that attention measure does with its importance measure
(paired per example, difference above 0); (3) permutation: the share of examples whose output moves by a TVD below
0.05 is above one half. Supported when all three are; not supported when any part's interval lies wholly on the
wrong side; inconclusive otherwise.

On fine-tuned models (a run directory, or a zoo model fine-tuned here first: once per ``--seeds`` seed, the examples
of every seed pooled in the bootstrap; ``--budget full``: seeds 0,1,2 and the whole dev set), per dev example:
Kendall's tau between [CLS] attention (last layer, or the mean over layers) and gradient / leave-one-out importance,
and the output change when the last layer's attention is permuted. Reported beside the rule (not part of it):
adversarial attention (Jain & Wallace section 4, ``ptmlab.analysis.adversarial``): the share of examples whose
last-layer [CLS] attention can move by a mean JSD >= 0.5 nats with the output within ``--epsilon`` TVD, and the
distribution of that JSD.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from ptmlab.core.config import opt
from ptmlab.studies import STUDIES
from ptmlab.studies.ablation import fine_tuned_model
from ptmlab.studies.common import SMALL_FINETUNE, StudyArgs, parse_study_args, seed_list, write_study
from ptmlab.studies.verdict import (
    INCONCLUSIVE,
    NOT_SUPPORTED,
    SUPPORTED,
    Claim,
    Verdict,
    bootstrap_mean,
    combine,
    decide_above,
    paired_bootstrap,
)

CLAIM = Claim(
    study="attention-explanation",
    claim="attention is not explanation: it agrees only weakly with importance, and permuting it often leaves the "
          "prediction almost unchanged",
    source="Q12; Jain & Wallace, NAACL 2019 (Attention is not Explanation)",
    paper="BiLSTM-attention models: Kendall tau of attention vs gradient importance mostly below 0.3-0.5; permuted "
          "attention moves the output by a median TVD under about 0.05 on most datasets",
    rule="95% bootstrap over examples: mean tau of the best-agreeing attention measure below 0.3, AND gradient vs "
         "leave-one-out agreeing better than it (paired difference above 0), AND the share of examples with "
         "permutation TVD < 0.05 above 0.5; not supported when any part lies wholly on the wrong side; else "
         "inconclusive",
)
KEYS = ("tau_last_grad", "tau_last_loo", "tau_mean_grad", "tau_mean_loo")


@dataclass(frozen=True)
class ExplanationStudyArgs(StudyArgs):
    model: str = opt("minilm", "fine-tuned run directory, or a zoo model to fine-tune first")
    task: str = opt("", "task (default: sst2 when GLUE data is present, else tweets)")
    glue_dir: str | None = opt(None, "GLUE directory")
    max_train: int = opt(4000, "training examples when fine-tuning first")
    max_eval: int = opt(200, "dev examples to explain")
    max_length: int = opt(64, "max tokens")
    epochs: float = opt(1.0, "epochs when fine-tuning first")
    batch_size: int = opt(32, "batch size when fine-tuning first")
    permutations: int = opt(10, "attention permutations per example")
    epsilon: float = opt(0.01, "adversarial attention: largest output TVD allowed")
    adv_steps: int = opt(100, "adversarial attention: Adam steps per example (0: skip the adversarial section)")
    seed: int = opt(0, "seed")
    output: str = opt("runs/study-attention-explanation", "output directory")
    overwrite: bool = opt(False, "rerun a fine-tuning that already finished")


SMALL = {**SMALL_FINETUNE, "max_eval": 12, "permutations": 3, "adv_steps": 10}  # what --budget small runs (tests, CI)
FULL = {"max_eval": 0, "seeds": ["0", "1", "2"]}  # what --budget full runs: every dev example, three fine-tunings


@STUDIES.register("attention-explanation", help="Q12: is attention an explanation? (Kendall tau, permutations)")
def run(argv: list[str]) -> int:
    from ptmlab.analysis import plots
    from ptmlab.analysis.explanation import explain
    from ptmlab.analysis.taskdata import load_analysis_input

    a = parse_study_args("attention-explanation", ExplanationStudyArgs, argv, __doc__, small=SMALL,
                         full=FULL)
    out = Path(a.output)
    seeds = seed_list(a)
    if Path(a.model).is_dir():
        seeds = [a.seed]  # a given fine-tuned model: one model, no seeds to repeat
    res, adv_runs = [], []
    for seed in seeds:
        inp = load_analysis_input(fine_tuned_model(a, out, seed, seeds), a, attn_implementation="eager",
                                  split="dev")
        res += [{"seed": seed, **asdict(r)} for r in explain(inp.model, inp.enc, set(inp.tokenizer.all_special_ids),
                                                               a.permutations, seed)]
        if a.adv_steps:
            adv_runs.append(_adversarial_search(inp, a, seed))
    keys = (*KEYS, "tau_grad_loo")
    med = {k: float(np.nanmedian([r[k] for r in res])) for k in keys}
    tvd = np.array([r["permutation_tvd"] for r in res])
    rows = [{"statistic": k, "median": med[k], "mean": float(np.nanmean([r[k] for r in res]))} for k in keys] + \
        [{"statistic": "median output TVD after permutation", "median": float(np.median(tvd))},
         {"statistic": "share of examples with TVD < 0.05", "median": float((tvd < 0.05).mean())}]
    rows += _per_seed_rows(res, seeds)
    adversarial, adv_fig = _adversarial(adv_runs, a, rows) if adv_runs else (None, None)
    verdict = decide(res)
    figs = [(plots.histograms({k: [r[k] for r in res] for k in keys}, "Kendall tau", "attention vs importance"),
             "kendall_tau", "distribution of Kendall tau over examples"),
            (plots.scatter([r["max_attention"] for r in res], list(tvd), "max [CLS] attention (last layer)",
                           "median output TVD", "permutation counterfactual"), "permutation",
             "output change when the last layer's attention is permuted")] + ([adv_fig] if adv_fig else [])
    write_study(out, f"Study: attention vs explanation ({a.model} on {a.task})", rows, verdict, figs,
                extra={"examples": res, "adversarial": adversarial}, claim=CLAIM, budget=a.budget, seeds=seeds)
    return 0


def _per_seed_rows(res: list[dict], seeds: list[int]) -> list[dict]:
    """With several fine-tunings: each one's mean Kendall tau (attention vs gradient) and permutation share, so a
    reader sees how much the pooled numbers move from model to model."""
    if len(seeds) < 2:
        return []
    rows = []
    for seed in seeds:
        mine = [r for r in res if r["seed"] == seed]
        rows.append({"statistic": f"seed {seed}: mean tau_last_grad / share with TVD < 0.05",
                     "median": float((np.array([r["permutation_tvd"] for r in mine]) < 0.05).mean()),
                     "mean": float(np.nanmean([r["tau_last_grad"] for r in mine]))})
    return rows


def _adversarial_search(inp, a: ExplanationStudyArgs, seed: int):
    """Jain & Wallace section 4 on one fine-tuned model: per example, the last layer's [CLS] attention (all heads)
    as different as possible (JSD) with the output within ``a.epsilon`` TVD."""
    from ptmlab.analysis.adversarial import adversarial_attention

    return adversarial_attention(inp.model, inp.enc, inp.pad_id, a.epsilon, a.adv_steps, seed=seed)


def _adversarial(runs: list, a: ExplanationStudyArgs, rows: list[dict]) -> tuple[dict, tuple]:
    """The adversarial searches of every seed pooled (reported beside the rule, not part of it)."""
    from ptmlab.analysis import plots
    from ptmlab.analysis.adversarial import JSD_THRESHOLD, AdversarialResult, summarize

    r = AdversarialResult(np.concatenate([x.jsd for x in runs]), np.concatenate([x.max_head_jsd for x in runs]),
                          np.concatenate([x.tvd for x in runs]), [o for x in runs for o in x.own],
                          [v for x in runs for v in x.adversarial], a.epsilon)
    s = summarize(r)
    rows += [{"statistic": f"share of examples with an adversarial attention (JSD >= {JSD_THRESHOLD}, output TVD "
                           f"<= {a.epsilon:g})", "median": s["share_jsd_at_least_threshold"]},
             {"statistic": "max JSD of adversarial attention (nats, max ln 2)", "median": s["jsd_q50"],
              "mean": s["mean_jsd"]}]
    fig = (plots.histograms({"max JSD within tolerance": list(r.jsd)}, "mean JSD over heads (nats)",
                            "adversarial attention"), "adversarial_jsd",
           f"largest JSD from the model's own last-layer [CLS] attention with the output within TVD {a.epsilon:g}")
    return {**s, "per_example_jsd": [round(float(x), 4) for x in r.jsd]}, fig


def decide(res: list[dict], tau_max: float = 0.3, tvd_small: float = 0.05) -> Verdict:
    """The rule of ``CLAIM`` on per-example results (``tau_*`` keys and ``permutation_tvd``); examples where a tau
    is undefined (NaN: constant scores) are left out of that part."""
    def column(k):
        return np.array([r[k] for r in res], dtype=float)

    means = {k: float(np.nanmean(column(k))) for k in KEYS}
    best = max(means, key=means.get)
    att, imp = column(best), column("tau_grad_loo")
    ok = ~np.isnan(att)
    if not ok.any():
        return Verdict(INCONCLUSIVE, "no example has a defined Kendall tau (too few tokens)")
    weak = bootstrap_mean(att[ok], f"mean Kendall tau ({best})")
    side = SUPPORTED if weak.high < tau_max else NOT_SUPPORTED if weak.low > tau_max else INCONCLUSIVE
    word = {SUPPORTED: "is below", NOT_SUPPORTED: "is above", INCONCLUSIVE: "includes"}[side]
    part1 = Verdict(side, f"mean {best} {weak.text()} {word} {tau_max:g}", weak)
    both = ok & ~np.isnan(imp)
    part2 = decide_above(paired_bootstrap(imp[both], att[both], f"tau_grad_loo minus {best}"), 0.0) if both.any() \
        else Verdict(INCONCLUSIVE, "no example with both taus defined")
    part3 = decide_above(bootstrap_mean((column("permutation_tvd") < tvd_small).astype(float),
                                        f"share of examples with permutation TVD < {tvd_small:g}"), 0.5)
    return combine([part1, part2, part3])
