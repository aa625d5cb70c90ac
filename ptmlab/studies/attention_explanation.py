"""Study ``attention-explanation`` (Q12, Jain & Wallace): is attention an explanation?

Claim: attention weights are not a faithful explanation: they agree only weakly with importance measures, and
permuting them often leaves the prediction almost unchanged. Source: Q12; Jain & Wallace, NAACL 2019 ("Attention is
not Explanation"). Paper: BiLSTM-attention models, Kendall tau between attention and gradient importance mostly
below 0.3-0.5 across datasets, while permuting attention changes the output by a median TVD under about 0.05 on
most datasets.

Validity conditions (checked on the run's numbers before the rule; any unmet: cannot test): the explained models are
above the task's trivial predictor (majority-class accuracy) by a t interval over seeds (``fine_tuned_dev``):
attention of a model that has learnt nothing explains nothing.

Rule: the measure is fixed here: ``tau_last_grad``, Kendall's tau between the last layer's [CLS] attention and
gradient importance -- the analogue of Jain & Wallace's single attention layer feeding the classifier, against their
first importance measure (gradients); the three other attention-importance pairs are reported beside it, never
chosen. 95% interval (hierarchical bootstrap: seeds, then dev examples; one given model: a bootstrap over
examples): mean tau_last_grad below 0.3, AND gradient vs leave-one-out agreeing better than it (paired difference
above 0), AND the share of examples with permutation TVD < 0.05 above 0.5; not supported when any part lies wholly
on the wrong side; else inconclusive.

In detail, three parts, each with that interval: (1) weak agreement: the mean Kendall tau of tau_last_grad is below
0.3; (2) the two importance measures (gradient, leave-one-out) agree better with each other than the last layer's
attention does with gradients (paired per example, difference above 0); (3) permutation: the share of examples
whose output moves by a TVD below 0.05 is above one half. Supported when all three are; not supported when any
part's interval lies wholly on the wrong side; inconclusive otherwise.

``--explain heldout`` explains rows no run has read: training rows that no fine-tuning of seeds 0 to the largest
seed reads, outside the dev split, of at least ``--min-words`` words and holding none of the fine-tuned phrases of
three words or more (``studies.fresh``); the fine-tunings' own dev metric still decides the validity condition.

On fine-tuned models (a run directory, or a zoo model fine-tuned here first: once per ``--seeds`` seed, the examples
of every seed in the hierarchical bootstrap; ``--budget full``: seeds 0,1,2 and the whole dev set), per dev example:
Kendall's tau between [CLS] attention (last layer, or the mean over layers) and gradient / leave-one-out importance,
and the output change when the last layer's attention is permuted. Reported beside the rule (not part of it):
adversarial attention (Jain & Wallace section 4, ``ptmlab.analysis.adversarial``): the share of examples whose
last-layer [CLS] attention can move by a mean JSD >= 0.5 nats with the output within ``--epsilon`` TVD, and the
distribution of that JSD.

Budgets and rough times on 2 CPU cores and one GPU: docs/studies.md.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from ptmlab.core.config import at_least, opt
from ptmlab.core.errors import PtmlabError
from ptmlab.studies import STUDIES
from ptmlab.studies.ablation import fine_tuned_model
from ptmlab.studies.common import SMALL_FINETUNE, StudyArgs, parse_study_args, seed_dir, seed_list, write_study
from ptmlab.studies.executor import Run, run_grid
from ptmlab.studies.verdict import (
    INCONCLUSIVE,
    NOT_SUPPORTED,
    SUPPORTED,
    Claim,
    Verdict,
    bootstrap_mean,
    combine,
    decide_above,
    detectable_effect,
    hierarchical_bootstrap,
)

CLAIM = Claim(
    study="attention-explanation",
    claim="attention is not explanation: it agrees only weakly with importance, and permuting it often leaves the "
          "prediction almost unchanged",
    source="Q12; Jain & Wallace, NAACL 2019 (Attention is not Explanation)",
    paper="BiLSTM-attention models: Kendall tau of attention vs gradient importance mostly below 0.3-0.5; permuted "
          "attention moves the output by a median TVD under about 0.05 on most datasets",
    rule="the measure is fixed here: ``tau_last_grad``, Kendall's tau between the last layer's [CLS] attention and "
         "gradient importance -- the analogue of Jain & Wallace's single attention layer feeding the classifier, "
         "against their first importance measure (gradients); the three other attention-importance pairs are "
         "reported beside it, never chosen. 95% interval (hierarchical bootstrap: seeds, then dev examples; one "
         "given model: a bootstrap over examples): mean tau_last_grad below 0.3, AND gradient vs leave-one-out "
         "agreeing better than it (paired difference above 0), AND the share of examples with permutation TVD < 0.05"
         " above 0.5; not supported when any part lies wholly on the wrong side; else inconclusive.",
    conditions=(
        "the explained fine-tuned models above the task's majority-class accuracy by a t interval over seeds",
    ),
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
    explain: str = opt("dev", "rows to explain: dev (the task's dev split, --max-eval of them) or heldout (training "
                              "rows no fine-tuning of seeds 0 to the largest seed reads, see HELDOUT)",
                       choices=("dev", "heldout"))
    min_words: int = opt(10, "--explain heldout: only training rows of at least this many words (sentences, not "
                             "SST-2's phrases)")
    seed: int = opt(0, "seed")
    output: str = opt("runs/study-attention-explanation", "output directory")
    overwrite: bool = opt(False, "rerun a fine-tuning that already finished")

    def validate(self) -> None:
        super().validate()
        at_least(self, 1, "permutations")
        at_least(self, 0, "adv_steps")
        at_least(self, 1, "min_words")
        if not 0 < self.epsilon < 1:
            raise PtmlabError(f"--epsilon must be in (0, 1) (an output total variation distance), got {self.epsilon}")


SMALL = {**SMALL_FINETUNE, "max_eval": 12, "permutations": 3, "adv_steps": 10}  # what --budget small runs (tests, CI)
FULL = {"max_eval": 0, "seeds": ["0", "1", "2"]}  # what --budget full runs: every dev example, three fine-tunings


@STUDIES.register("attention-explanation", help="Q12: is attention an explanation? (Kendall tau, permutations)")
def run(argv: list[str]) -> int:
    from ptmlab.analysis import plots

    a = parse_study_args("attention-explanation", ExplanationStudyArgs, argv, __doc__, small=SMALL,
                         full=FULL)
    out = Path(a.output)
    seeds = seed_list(a)
    if Path(a.model).is_dir():
        seeds = [a.seed]  # a given fine-tuned model: one model, no seeds to repeat
    done = run_grid(a, {seed: Run(_explain_seed, seed_dir(out, "finetuned", seed, seeds), (a, out, seed, seeds))
                        for seed in seeds})
    res = [r for seed in seeds for r in done[seed][0]]
    adv_runs = [done[seed][1] for seed in seeds if done[seed][1] is not None]
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
    where = "held-out training rows" if a.explain == "heldout" else "dev"
    write_study(out, f"Study: attention vs explanation ({a.model} on {a.task}, {where})", rows, verdict, figs,
                extra={"explained": a.explain, "examples": res, "adversarial": adversarial,
                       "fine_tuned_dev": _fine_tuned_dev(a, out, seeds)},
                claim=CLAIM, budget=a.budget, seeds=seeds, validity=validity)
    return 0


def _fine_tuned_dev(a, out: Path, seeds: list[int]) -> dict | None:
    """Each explained model's dev metric ({"metric", "per_seed"}), for the validity condition; None when a given
    model has no recorded evaluation."""
    from ptmlab.core.rundir import RunDir

    scores, metric = [], None
    for seed in seeds:
        run = Path(fine_tuned_model(a, out, seed, seeds))
        summary = RunDir(run).summary() if (run / "summary.json").is_file() else {}
        metric = summary.get("main_metric") or metric
        if not metric or metric not in (summary.get("metrics") or {}):
            return None
        scores.append(float(summary["metrics"][metric]))
    return {"metric": metric, "per_seed": scores}


def _per_seed_rows(res: list[dict], seeds: list[int]) -> list[dict]:
    """With several fine-tunings: each one's mean Kendall tau (attention vs gradient) and permutation share, so a
    reader sees how much the pooled numbers move from model to model."""
    if len(seeds) < 2:
        return []
    rows = []
    for seed in seeds:
        mine = [r for r in res if r["seed"] == seed]
        taus = [r["tau_last_grad"] for r in mine]
        rows.append({"statistic": f"seed {seed}: tau_last_grad", "median": float(np.nanmedian(taus)),
                     "mean": float(np.nanmean(taus))})
        rows.append({"statistic": f"seed {seed}: share of examples with TVD < 0.05",  # as the pooled row: median
                     "median": float((np.array([r["permutation_tvd"] for r in mine]) < 0.05).mean())})
    return rows


def _explain_seed(a: ExplanationStudyArgs, out: Path, seed: int, seeds: list[int]) -> tuple[list[dict], object]:
    """One seed of the study's grid: its fine-tuning (unless ``--model`` is one), every dev example's explanation
    statistics and, with ``--adv-steps``, the adversarial search (else None)."""
    from ptmlab.analysis.explanation import explain
    from ptmlab.analysis.taskdata import load_analysis_input

    rows = heldout_rows(a, seeds) if a.explain == "heldout" else None
    inp = load_analysis_input(fine_tuned_model(a, out, seed, seeds), a, attn_implementation="eager", split="dev",
                              rows=rows)
    res = [{"seed": seed, **asdict(r)} for r in explain(inp.model, inp.enc, set(inp.tokenizer.all_special_ids),
                                                        a.permutations, seed)]
    return res, _adversarial_search(inp, a, seed) if a.adv_steps else None


def heldout_rows(a, seeds: list[int]):
    """``--explain heldout``: ``--max-eval`` (0: all) fresh training rows (``studies.fresh``) for fine-tunings of
    seeds 0 to ``max(seeds)`` at ``--max-train``, of at least ``--min-words`` words."""
    from ptmlab.studies.fresh import fresh_rows

    return fresh_rows(a.task, a.glue_dir, a.max_train, max(seeds), a.max_eval, a.min_words)


def data_split(cfg) -> dict:
    """What the preregistration adds to the rows it hashes: with ``--explain heldout``, the explained rows."""
    from ptmlab.studies.fresh import rows_hash

    if getattr(cfg, "explain", "dev") != "heldout":
        return {}
    try:
        rows = heldout_rows(cfg, [int(s) for s in cfg.seeds] or [cfg.seed])
    except (PtmlabError, OSError, ValueError) as e:
        return {"explained": {"note": f"not at hand here ({str(e).splitlines()[0][:120]})"}}
    return {"explained": {**rows_hash(rows), "rows": "heldout"}}


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


PRIMARY = "tau_last_grad"   # the attention-importance pair the rule decides on, fixed before any run


def _interval(per_seed: list[np.ndarray], metric: str, against: list[np.ndarray] | None = None):
    """A mean's interval: the hierarchical bootstrap (seeds, then examples) over several fine-tunings, a bootstrap
    over examples for one model (NaN values, undefined taus, left out)."""
    if len(per_seed) > 1:
        return hierarchical_bootstrap(per_seed, against, metric)
    d = per_seed[0] if against is None else per_seed[0] - against[0]
    return bootstrap_mean(d[~np.isnan(d)], metric)


def decide(res: list[dict], tau_max: float = 0.3, tvd_small: float = 0.05) -> Verdict:
    """The rule of ``CLAIM`` on per-example results (``seed``, ``tau_*`` keys and ``permutation_tvd``; every seed
    explains the same dev examples in the same order); examples where a tau is undefined (NaN: constant scores)
    are left out of that part."""
    seeds = list(dict.fromkeys(r.get("seed", 0) for r in res))

    def column(k):
        return [np.array([r[k] for r in res if r.get("seed", 0) == s], dtype=float) for s in seeds]

    att, imp = column(PRIMARY), column("tau_grad_loo")
    if not any((~np.isnan(x)).any() for x in att):
        return Verdict(INCONCLUSIVE, "no example has a defined Kendall tau (too few tokens)")
    weak = _interval(att, f"mean Kendall tau ({PRIMARY})")
    side = SUPPORTED if weak.high < tau_max else NOT_SUPPORTED if weak.low > tau_max else INCONCLUSIVE
    word = {SUPPORTED: "is below", NOT_SUPPORTED: "is above", INCONCLUSIVE: "includes"}[side]
    part1 = Verdict(side, f"mean {PRIMARY} {weak.text()} {word} {tau_max:g}", weak,
                    detectable_effect=detectable_effect(weak), thresholds=(tau_max,))
    part2 = decide_above(_interval(imp, f"tau_grad_loo minus {PRIMARY}", att), 0.0)
    part3 = decide_above(_interval([(x < tvd_small).astype(float) for x in column("permutation_tvd")],
                                   f"share of examples with permutation TVD < {tvd_small:g}"), 0.5)
    return combine([part1, part2, part3], names=["weak agreement", "importance measures agree better",
                                                 "permutation rarely matters"])


def validity(record: dict) -> list:
    """The conditions of ``CLAIM`` on a results record (``fine_tuned_dev``: the explained models' dev metric)."""
    from ptmlab.studies.common import above_trivial, task_of

    ft = record.get("fine_tuned_dev") if isinstance(record.get("fine_tuned_dev"), dict) else {}
    return above_trivial(record, task_of(record), str(ft.get("metric") or "accuracy"),
                         {"the explained model": ft.get("per_seed") or []}, 0)


RESTATES_RECORDED_INTERVALS = True  # restate recomputes the hierarchical intervals from the per-example records


def recomputed_from(record: dict) -> tuple[str, str]:
    """How ``restate`` recomputed ``record``'s verdict (``rederive``'s ``recompute`` block)."""
    return "recomputed", "every seed's per-example Kendall taus and permutation TVDs (examples)"


def restate(record: dict, name: str = "attention-explanation") -> Verdict | None:
    """The rule on the record's per-example results (the measure fixed, seeds resampled before examples)."""
    examples = [r for r in record.get("examples") or [] if isinstance(r, dict)]
    return decide(examples) if examples else None
