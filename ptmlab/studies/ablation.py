"""Studies ``head-ablation`` (Q13) and ``layer-ablation`` (Q14): does removing a head or a layer hurt?

Claim: removing one attention head (one layer) from a fine-tuned model rarely hurts, and sometimes helps. Source:
Q13/Q14; Michel et al., NeurIPS 2019 ("Are Sixteen Heads Really Better than One?"), Kovaleva et al. 2019. Paper:
BERT-base on MNLI, removing any single head changes accuracy by at most about 1 point for most heads, and some
removals raise it; removing whole layers costs more in small models.

Validity conditions (checked on the run's numbers before the rule; any unmet: cannot test): the intact fine-tuned
model is above the task's majority-class accuracy by a t interval over seeds (``base_per_seed``); the per-unit
intervals resample seeds, then examples (``counts.intervals.seed_level``; one given model: examples alone), never the
seeds' copies of each example pooled as independent examples; a percentile Bonferroni interval has at least 20
resamples beyond its quantile (``counts.intervals.tail_resamples``).

Rule: per unit, the accuracy change on removal, paired per example against the intact model, 95% interval (seeds,
then examples, resampled: a hierarchical bootstrap; one given model: a bootstrap over examples). Part 1 (rarely
hurts), non-inferiority per unit with one-sided 95% bounds: harmless when the lower bound >= -tolerance, harmful when
the upper bound < -tolerance; supported when >= 75% of units are harmless, not supported when > 25% are harmful.
Part 2 (sometimes helps): supported when some unit's Bonferroni-corrected interval lies above 0 (--helps split: the
unit chosen on even dev positions has a 95% interval above 0 on the odd ones); not supported only when intervals
exclude the claim: every unit's one-sided 95% upper bound below 0 (split: the chosen unit's held-out interval below
0), never from point values. Otherwise inconclusive; the claim is supported when both parts are, not supported when
either is not.

In detail: for every unit, the change of dev accuracy when it is removed, paired per example against the intact
model, with a 95% hierarchical bootstrap (seeds, then examples; mean ± t over seeds x SE) -- one given model: a
percentile bootstrap over examples with enough resamples that the Bonferroni tail holds at least 20 of them. Part 1
("rarely hurts") reads each unit's interval as a non-inferiority test at the tolerance: a unit is harmless when its
one-sided 95% lower bound is at or above -tolerance, harmful when its one-sided 95% upper bound is below -tolerance;
supported when at least 75% of units are harmless, not supported when more than 25% are harmful, inconclusive
otherwise. Part 2 ("sometimes helps"): supported when at least one unit's removal raises accuracy with a
Bonferroni-corrected interval (95% over all units, from the unit's standard error) above 0; not supported when every
unit's one-sided 95% upper bound lies below 0 (each removal shown to lower accuracy: the claim "some removal helps"
excluded unit by unit, an intersection-union test that needs no correction); inconclusive otherwise. A unit whose
mean change is not above 0 is no evidence that it cannot help: with three seeds a single unit's interval is several
points wide. With ``--helps split`` part 2 makes one choice and one test instead: the unit whose removal raises
accuracy most on the even dev positions (pooled over seeds) is tested alone on the odd positions, 95% (seeds, then
examples), with no correction, since only one unit is tested on those examples: supported when the interval lies
above 0, not supported when it lies below 0, inconclusive otherwise (``counts.helps``: the chosen unit, every unit's
choosing-half gain, the held-out interval). The claim is both parts (``combine``), each shown with its own outcome.
What the run could detect: per part, the median over units of each unit's detectable effect
(``verdict.detectable_effect``), one-sided 95% for part 1 and at the Bonferroni level for part 2
(``counts.detectable``); with three seeds the corrected t quantile (2 degrees of freedom) makes part 2's far larger
than part 1's.

Confirmatory run of part 2, fixed before it ran: the three-seed ``--budget full`` run (seeds 0-2, Bonferroni design)
could detect only ±0.097 per head at the corrected level, ten times its ±0.0095 at 95%. The split design tests one
head at 95% on half the dev set, about ±0.0095 x √2 ≈ ±0.013 if the seeds vary as much; it runs on fresh seeds,
``ptmlab study head-ablation --budget full --helps split --seeds 3,4,5``, so that no head is chosen on examples or
fine-tunings already looked at. Its result replaces the committed one; part 1 is decided on it as before. Both
committed results (head: seeds 3-5, split; layer: seeds 0-2, Bonferroni) were decided by an earlier rule (part 1 at
two-sided 95%; part 2 "not supported" when no unit's mean change was above 0, a point value); judged again by this
rule from their per-unit intervals they are exploratory.

The model is a fine-tuned run directory, or a zoo model fine-tuned here first (one budget, once per seed:
``--seeds``; ``--budget full``: seeds 0,1,2 and mpnet). Every head (layer) is removed and, separately, made uniform;
uniform attention is reported, the verdict is on removal (``--no-uniform`` skips it; ``head-ablation --budget
full`` does, since 144 heads x 3 seeds of mpnet already take hours of CPU time).

Budgets and rough times on 2 CPU cores and one GPU: docs/studies.md.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ptmlab.core.config import at_least, opt
from ptmlab.studies import STUDIES
from ptmlab.studies.common import (
    FULL_FINETUNE,
    SMALL_FINETUNE,
    StudyArgs,
    finetune_variant,
    parse_study_args,
    seed_dir,
    seed_list,
    write_study,
)
from ptmlab.studies.evidence import pack_runs
from ptmlab.studies.executor import Run, run_grid
from ptmlab.studies.verdict import (
    INCONCLUSIVE,
    NOT_SUPPORTED,
    SUPPORTED,
    Claim,
    Condition,
    Verdict,
    combine,
    detectable_effect,
    hierarchical_bootstrap,
    paired_bootstrap,
    resamples_for,
)

_RULE = ("per unit, the accuracy change on removal, paired per example against the intact model, 95% interval "
         "(seeds, then examples, resampled: a hierarchical bootstrap; one given model: a bootstrap over examples). "
         "Part 1 (rarely hurts), non-inferiority per unit with one-sided 95% bounds: harmless when the lower bound "
         ">= -tolerance, harmful when the upper bound < -tolerance; supported when >= 75% of units are harmless, not "
         "supported when > 25% are harmful. Part 2 (sometimes helps): supported when some unit's Bonferroni-corrected "
         "interval lies above 0 (--helps split: the unit chosen on even dev positions has a 95% interval above 0 on "
         "the odd ones); not supported only when intervals exclude the claim: every unit's one-sided 95% upper bound "
         "below 0 (split: the chosen unit's held-out interval below 0), never from point values. Otherwise "
         "inconclusive; the claim is supported when both parts are, not supported when either is not.")
_CONDITIONS = (
    "the intact fine-tuned model above the task's majority-class accuracy by a t interval over seeds",
    "per-unit intervals resample seeds, then examples (or come from one given model), never seeds' copies pooled",
    "a percentile Bonferroni interval has at least 20 bootstrap resamples beyond its quantile",
)
CLAIMS = {
    "head": Claim(study="head-ablation", claim="removing one attention head rarely hurts and sometimes helps",
                  source="Q13; Michel et al., NeurIPS 2019 (Are Sixteen Heads Really Better than One?)",
                  paper="BERT-base on MNLI: most single-head removals change accuracy by under about 1 point; some "
                        "raise it", rule=_RULE, conditions=_CONDITIONS,
                  metric="dev accuracy change when one head is removed, per head", margin=0.01,
                  parts=("rarely hurts", "sometimes helps")),
    "layer": Claim(study="layer-ablation", claim="removing one layer rarely hurts and sometimes helps",
                   source="Q14; Kovaleva et al. 2019 (Revealing the Dark Secrets of BERT)",
                   paper="BERT-base: disabling single layers or their attention often costs little and sometimes "
                         "helps", rule=_RULE, conditions=_CONDITIONS,
                   metric="dev accuracy change when one layer is removed, per layer", margin=0.01,
                   parts=("rarely hurts", "sometimes helps")),
}
CLAIM = CLAIMS["head"]
HELPS_DESIGNS = ("bonferroni", "split")  # how part 2 is tested (--helps)
FULL = {**FULL_FINETUNE, "model": "mpnet"}  # what --budget full runs
# heads at full budget: removal only (what the verdict reads); uniform attention for 144 heads x 3 seeds would double
# hours of CPU time for a column the verdict never reads
FULL_HEADS = {**FULL, "uniform": False}


@dataclass(frozen=True)
class AblationStudyArgs(StudyArgs):
    model: str = opt("minilm", "fine-tuned run directory, or a zoo model to fine-tune first")
    task: str = opt("", "task (default: sst2 when GLUE data is present, else tweets)")
    glue_dir: str | None = opt(None, "GLUE directory")
    max_train: int = opt(4000, "training examples when fine-tuning first")
    max_eval: int = opt(0, "dev examples to ablate on (0: all)")
    max_length: int = opt(64, "max tokens")
    epochs: float = opt(1.0, "epochs when fine-tuning first")
    batch_size: int = opt(32, "batch size when fine-tuning first")
    tolerance: float = opt(0.01, "a change within this is 'no harm'")
    helps: str = opt("bonferroni", "how part 2 ('sometimes helps') is tested: bonferroni (every unit's interval, "
                                   "corrected over all units) or split (the unit that helps most on even dev "
                                   "positions, tested alone at 95% on the odd ones)", choices=list(HELPS_DESIGNS))
    uniform: bool = opt(True, "also make each unit's attention uniform (reported beside removal, not part of the "
                              "verdict; --no-uniform halves the time)")
    seed: int = opt(0, "seed")
    output: str = opt("runs/study-ablation", "output directory")
    overwrite: bool = opt(False, "rerun a fine-tuning that already finished")

    def validate(self) -> None:
        super().validate()
        at_least(self, 0, "tolerance")


def fine_tuned_model(a, out: Path, seed: int | None = None, seeds: list[int] | None = None) -> str:
    """``a.model`` when it is a saved fine-tuned model, else a fine-tuning of it into ``out/finetuned`` (one per
    seed when ``seeds`` has several)."""
    from ptmlab.core.rundir import RunDir

    if Path(a.model).is_dir() and RunDir(a.model).has_model():
        return a.model
    seed = a.seed if seed is None else seed
    run_dir = seed_dir(out, "finetuned", seed, seeds or [seed])
    finetune_variant(a, run_dir, max_eval=None, seed=seed, test=False)
    return str(run_dir)


def ablate(model: str, a, kind: str):
    """Every unit (head or layer) removed and made uniform on the dev split: the ``AblationTable``, the intact
    model's per-example correctness and each unit's after removal (None for regression tasks)."""
    from ptmlab.analysis.ablation import AblationTable, CachedAblation
    from ptmlab.analysis.taskdata import load_analysis_input
    from ptmlab.core.progress import progress
    from ptmlab.train.evaluate import logits_to_predictions, resolve_precision

    inp = load_analysis_input(model, a, split="dev")
    run = CachedAblation(inp.model, inp.enc, inp.spec, inp.pad_id, 128, resolve_precision("auto"))
    g, labels = run.gates, np.asarray(inp.enc.labels)
    classify = inp.spec.kind != "regression"

    def correct(logits):
        return (logits_to_predictions(logits, inp.spec) == labels).astype(float) if classify else None

    units = [(la, h) for la in range(g.num_layers) for h in range(g.heads_in(la))] if kind == "head" else \
        [(la,) for la in range(g.num_layers)]
    shape = (g.num_layers, max(g.heads_in(i) for i in range(g.num_layers))) if kind == "head" else (g.num_layers,)
    tables = {k: np.full(shape, np.nan) for k in ("removed", "uniform")}
    removed_correct = {}
    for u in progress(units, desc=f"{kind} ablation"):
        la = u[0]
        if kind == "head":
            acts = {"removed": lambda gt, la=la, h=u[1]: gt.remove_head(la, h),
                    "uniform": lambda gt, la=la, h=u[1]: gt.uniform_head(la, h)}
        else:
            acts = {"removed": lambda gt, la=la: gt.skip_layer(la),
                    "uniform": lambda gt, la=la: [gt.uniform_head(la, h) for h in range(gt.heads_in(la))]}
        if not getattr(a, "uniform", True):
            del acts["uniform"]  # its table column stays NaN and is left out of the rows
        for name, act in acts.items():
            logits = run.logits(la, act)
            tables[name][u] = run.score(logits)
            if name == "removed":
                removed_correct[u] = correct(logits)
    table = AblationTable(inp.spec.main_metric, run.score(run.base_logits), tables["removed"], tables["uniform"])
    return table, correct(run.base_logits), removed_correct


def ablate_once(model: str, a, kind: str, cache: Path):
    """``ablate`` with its result kept in ``cache`` (JSON, written atomically): a multi-seed study that was
    stopped resumes at the seed it stopped on. The cache is used only when it was made for the same model, task,
    dev subset and length; ``--overwrite`` recomputes it."""
    from ptmlab.analysis.ablation import AblationTable
    from ptmlab.core.io import atomic_write_json

    key = {"model": str(Path(model).resolve()), "task": a.task, "max_eval": a.max_eval, "max_length": a.max_length,
           "kind": kind} | ({} if getattr(a, "uniform", True) else {"uniform": False})
    try:
        old = json.loads(cache.read_text()) if cache.is_file() and not a.overwrite else None
    except (OSError, ValueError):
        old = None  # unreadable: recompute it
    if isinstance(old, dict) and old.get("key") == key:
        t = old["table"]
        table = AblationTable(t["metric"], t["base"], np.array(t["removed"], dtype=float),
                              np.array(t["uniform"], dtype=float))
        return table, old["base_correct"], {tuple(u): c for u, c in old["removed_correct"]}
    table, base_correct, removed_correct = ablate(model, a, kind)
    lists = {k: None if v is None else np.asarray(v).tolist() for k, v in removed_correct.items()}
    atomic_write_json(cache, {
        "key": key,
        "table": {"metric": table.metric, "base": table.base, "removed": table.removed.tolist(),
                  "uniform": table.uniform.tolist()},
        "base_correct": None if base_correct is None else np.asarray(base_correct).tolist(),
        "removed_correct": [[list(u), c] for u, c in lists.items()]})
    return table, base_correct, removed_correct


def unit_interval(r: list, b: list, metric: str, confidence: float = 0.95):
    """Unit removal minus intact, per example: a hierarchical bootstrap (seeds, then examples) over several
    fine-tunings, a bootstrap over examples for one model -- with enough resamples for ``confidence``'s tail."""
    if len(b) > 1:
        return hierarchical_bootstrap(r, b, metric, confidence)
    return paired_bootstrap(r[0], b[0], metric, confidence, resamples_for(confidence))


def corrected_bound(est, n: int, side: str = "lower") -> float:
    """The Bonferroni-corrected (``1 - 0.05/n``, two-sided) bound of a unit's 95% interval, from its standard
    error: ``value -/+ q(1 - 0.025/n) x SE`` (t quantiles with the interval's df; exact for the seeds-then-examples
    bootstrap, whose standard error does not depend on the level)."""
    from ptmlab.studies.verdict import one_sided_bound

    return one_sided_bound(est, side, 1 - 0.05 / n / 2)


def decide(base: list, removed: dict, tol: float, unit: str = "head",
           helps: str = "bonferroni") -> tuple[Verdict, dict]:
    """The rule of ``CLAIM``: ``base[k]`` is seed k's intact per-example correctness, ``removed[u][k]`` unit u's
    after removal. Returns the verdict and the counts (harmless, harmful, helpful, units) with how the intervals
    were made (``intervals``) and each unit's 95% interval (``bounds``: {unit: (low, high)}). ``helps`` is part 2's
    design (``HELPS_DESIGNS``); ``split`` adds ``counts["helps"]``: the unit chosen on even dev positions, every
    unit's choosing-half gain and the chosen unit's held-out interval. Every count and outcome comes from the
    units' intervals (``decide_units``), so a record's per-unit intervals give the same verdict again."""
    if helps not in HELPS_DESIGNS:
        raise ValueError(f"unknown part-2 design {helps!r}: one of {', '.join(HELPS_DESIGNS)}")
    if any(b is None for b in base):
        return Verdict(INCONCLUSIVE, "no per-example correctness (a regression task): the bootstrap rule cannot "
                                     "run"), {}
    ests = {tuple(u): unit_interval(runs, base, f"{unit} {u}") for u, runs in removed.items()}
    split = _helps_split(base, removed, unit) if helps == "split" else None
    return decide_units(ests, len(base), tol, unit, split)


def decide_units(ests: dict, seeds: int, tol: float, unit: str = "head", split: dict | None = None
                 ) -> tuple[Verdict, dict]:
    """The rule of ``CLAIM`` on each unit's 95% interval of the accuracy change on removal (``ests``: {unit:
    Estimate}) and, for the split design, ``split`` (``_helps_split``'s record: the chosen unit and its held-out
    interval). Part 1 ("rarely hurts"), non-inferiority per unit with one-sided 95% bounds: harmless when the lower
    bound is at or above -tol, harmful when the upper bound is below -tol; supported when at least 75% of units are
    harmless, not supported when more than 25% are harmful, else inconclusive. Part 2 ("sometimes helps"): supported
    when a unit's Bonferroni-corrected lower bound is above 0 (split: the chosen unit's held-out 95% interval);
    not supported only when an interval excludes the claim: every unit's one-sided 95% upper bound below 0 (each
    removal shown to lower accuracy; split: the held-out interval below 0) -- never from point values; else
    inconclusive."""
    from ptmlab.studies.verdict import one_sided_bound

    n = len(ests)
    harmless = harmful = helpful = raised = below = 0
    detect, detect_one_sided, detect_corrected = [], [], []
    for est in ests.values():
        detect.append(detectable_effect(est))
        detect_one_sided.append(detectable_effect(est, confidence=0.9))
        detect_corrected.append(detectable_effect(est, confidence=1 - 0.05 / n))
        harmless += one_sided_bound(est, "lower") >= -tol
        harmful += one_sided_bound(est, "upper") < -tol
        raised += est.value > 0
        below += one_sided_bound(est, "upper") < 0
        if split is None:
            helpful += corrected_bound(est, n) > 0
    counts = {"units": n, "harmless": int(harmless), "harmful": int(harmful), "helpful": int(helpful),
              "raised": int(raised), "lowered": int(below),
              "intervals": {"seed_level": 1, "seeds": seeds,
                            "method": "hierarchical bootstrap, t over seeds" if seeds > 1 else
                            "percentile bootstrap over examples (one model)",
                            "tail_resamples": None if seeds > 1 else resamples_for(1 - 0.05 / n) * 0.05 / n / 2},
              "bounds": {u: (e.low, e.high) for u, e in ests.items()}}
    det1, det, det_corrected = (_median_detectable(x) for x in (detect_one_sided, detect, detect_corrected))
    counts["detectable"] = {"per_unit_95": det, "per_unit_one_sided": det1, "per_unit_bonferroni": det_corrected}
    rare = Verdict(SUPPORTED if harmless >= 0.75 * n else NOT_SUPPORTED if harmful > 0.25 * n else INCONCLUSIVE,
                   f"removing one {unit} is harmless (one-sided 95% lower bound at or above -{tol:g}) for {harmless} "
                   f"of {n} and harmful (upper bound below -{tol:g}) for {harmful}"
                   + _could_detect(det1, "per " + unit), detectable_effect=det1)
    if split is not None:
        odd = split["estimate"]
        dodd = detectable_effect(odd)
        said = odd.text() + ("" if dodd is None else f" (could detect ±{dodd:.4f})")
        outcome = SUPPORTED if odd.low > 0 else NOT_SUPPORTED if odd.high < 0 else INCONCLUSIVE
        part2 = Verdict(outcome, f"{unit} {split['record']['chosen']}, chosen on the even dev positions (gain "
                                 f"{split['record']['choosing_gain']:+.4f} there), changes accuracy on the odd ones "
                                 f"by {said}", odd, detectable_effect=dodd, thresholds=(0.0,))
        counts["helps"] = split["record"]
        counts["helpful"] = int(outcome == SUPPORTED)
    else:
        outcome = SUPPORTED if helpful else NOT_SUPPORTED if below == n else INCONCLUSIVE
        part2 = Verdict(outcome, f"removal raises accuracy significantly (Bonferroni over {n}) for {helpful} of {n} "
                                 f"{unit}s and lowers it (one-sided 95% upper bound below 0) for {below}; {raised} "
                                 f"raise it on average" + _could_detect(det_corrected, f"per {unit}, Bonferroni over "
                                                                                        f"{n}"),
                        detectable_effect=det_corrected)
    return combine([rare, part2], names=["rarely hurts", "sometimes helps"]), counts


def _helps_split(base: list, removed: dict, unit: str) -> dict:
    """Part 2 by the split design: the unit whose removal raises accuracy most on the even dev positions (pooled
    over seeds; a tie goes to the first unit) is tested alone on the odd positions, 95% (seeds, then examples; one
    model: examples). Returns the held-out ``estimate`` and the ``record`` (``counts.helps``: the chosen unit, its
    choosing-half gain, every unit's, and the held-out interval)."""
    from ptmlab.studies.common import choose_then_test

    names = {str(list(u)): u for u in removed}
    gains = {k: [np.asarray(r, dtype=float) - np.asarray(b, dtype=float) for r, b in zip(removed[u], base,
                                                                                       strict=True)]
             for k, u in names.items()}
    zero = [np.zeros_like(np.asarray(b, dtype=float)) for b in base]
    best, choose, _ = choose_then_test(gains, zero, "choosing")
    u = names[best]
    odd = unit_interval([np.asarray(r, dtype=float)[1::2] for r in removed[u]],
                        [np.asarray(b, dtype=float)[1::2] for b in base], f"{unit} {list(u)} removal gain, held out")
    record = {"design": "split", "chosen": list(u), "choosing_gain": float(choose[best]), "held_out": odd.to_dict(),
              "choosing_gains": {k: float(v) for k, v in choose.items()}}
    return {"estimate": odd, "record": record}


RESTATES_RECORDED_INTERVALS = True  # restate reads each unit's recorded interval, never per-seed scores


def recomputed_from(record: dict) -> tuple[str, str]:
    """How ``restate`` recomputed ``record``'s verdict (``rederive``'s ``recompute`` block)."""
    from ptmlab.studies.evidence import recomputed_or_partly

    return recomputed_or_partly(
        record, "every seed's per-example correctness of the intact model and of each unit's removal",
        "counts and outcomes from each unit's recorded 95% interval (rows' removal_low and removal_high) and, for the "
        "split design, the recorded choosing-half gains and held-out interval; those intervals need the per-example "
        "records a rerun keeps")


def unit_estimates_of(record: dict) -> dict | None:
    """Each unit's 95% interval of the change on removal, from a results record's rows (``removal_low`` /
    ``removal_high`` beside ``removed_delta``); None when the rows do not carry them."""
    from ptmlab.studies.verdict import Estimate

    counts = record.get("counts") or {}
    seeds = int((counts.get("intervals") or {}).get("seeds") or len(record.get("base_per_seed") or []) or 1)
    ests = {}
    for r in record.get("rows") or []:
        low, high = r.get("removal_low"), r.get("removal_high")
        if not isinstance(low, int | float) or not isinstance(high, int | float):
            return None
        u = (r["layer"], r["head"]) if "head" in r else (r["layer"],)
        value = (low + high) / 2 if seeds > 1 else float(r.get("removed_delta"))
        ests[u] = Estimate(f"unit {list(u)}", value, float(low), float(high), seeds,
                           "hierarchical bootstrap, t over seeds (95%)" if seeds > 1 else "bootstrap over examples",
                           seeds - 1 if seeds > 1 else None)
    return ests or None


def restate(record: dict, name: str = "head-ablation") -> Verdict | None:
    """The rule of ``CLAIM`` recomputed from the record: from its per-example records (``evidence``: each seed's
    intact and per-unit correctness) when it carries them, every interval recomputed; else from the per-unit 95%
    intervals its rows hold (the counts and outcomes recomputed, the intervals as the run computed them) and, for
    the split design, the recorded choosing-half gains and held-out interval."""
    from ptmlab.studies.evidence import evidence_of, unpack_runs
    from ptmlab.studies.verdict import Estimate

    kind = "layer" if name.startswith("layer") else "head"
    tol = float(record.get("tolerance") if isinstance(record.get("tolerance"), int | float) else 0.01)
    helps = ((record.get("counts") or {}).get("helps") or {})
    ev = evidence_of(record)
    if ev.get("base") and ev.get("removed"):
        base = unpack_runs(ev["base"])
        removed = {tuple(int(x) for x in k.split("-")): unpack_runs(v) for k, v in ev["removed"].items()}
        return decide(base, removed, tol, kind, helps.get("design") or "bonferroni")[0]
    ests = unit_estimates_of(record)
    if ests is None:
        return None
    split = None
    if helps.get("design") == "split":
        gains = helps.get("choosing_gains") or {}
        if not gains or not isinstance(helps.get("held_out"), dict):
            return None
        best = max(gains, key=gains.get)  # ties: the first unit, as choose_then_test
        if [int(x) for x in best.strip("[]").split(",")] != list(helps.get("chosen") or []):
            return None  # the recorded choice is not the one its gains give: nothing to restate from
        split = {"estimate": Estimate.from_dict(helps["held_out"]), "record": helps}
    seeds = int(((record.get("counts") or {}).get("intervals") or {}).get("seeds") or 1)
    return decide_units(ests, seeds, tol, kind, split)[0]


def _median_detectable(effects: list) -> float | None:
    """The median over units of what each unit's interval could have detected; units whose removal changed no
    prediction on any seed (no spread) are left out. None when no unit has a finite interval (one seed)."""
    known = [e for e in effects if e is not None]
    return float(np.median(known)) if known else None


def _could_detect(effect: float | None, what: str) -> str:
    return "" if effect is None else f" (could detect ±{effect:.4f}, median {what})"


def _run(kind: str, argv: list[str]) -> int:
    from ptmlab.analysis import plots

    a = parse_study_args(f"{kind}-ablation", AblationStudyArgs, argv, __doc__, small=SMALL_FINETUNE,
                         full=FULL_HEADS if kind == "head" else FULL)
    out = Path(a.output)
    seeds = seed_list(a)
    if Path(a.model).is_dir():
        seeds = [a.seed]  # a given fine-tuned model: one model, no seeds to repeat
    base, removed, tables = [], {}, []
    caches = {seed: seed_dir(out, f"{kind}-ablation", seed, seeds).with_suffix(".json") for seed in seeds}
    done = run_grid(a, {seed: Run(seed_ablation, cache, (a, out, kind, seed, seeds, cache))
                        for seed, cache in caches.items()})
    for seed in seeds:
        table, b, rem = done[seed]
        tables.append(table)
        base.append(b)
        for u, c in rem.items():
            removed.setdefault(u, []).append(c)
    table = tables[0] if len(tables) == 1 else _mean_table(tables)
    v, counts = decide(base, removed, a.tolerance, kind, a.helps)
    bounds = counts.pop("bounds", {})
    evidence = None if any(b is None for b in base) else {
        "base": pack_runs(base), "removed": {"-".join(map(str, u)): pack_runs(r) for u, r in removed.items()}}
    rows = table.rows()
    for r in rows:  # each unit's removal interval beside its mean change
        low_high = bounds.get((r["layer"], r["head"]) if "head" in r else (r["layer"],))
        if low_high is not None:
            r["removal_low"], r["removal_high"] = low_high
    if kind == "head":
        fig = plots.heatmap(table.removed - table.base, f"{table.metric} change, head removed")
    else:
        fig = plots.grouped_bars([str(i) for i in range(len(table.removed))],
                                 {"removed": list(table.removed), "uniform": list(table.uniform)}, table.metric,
                                 "layer ablation", base=table.base)
    write_study(out, f"Study: {kind} ablation ({a.model} on {a.task})", rows, v,
                [(fig, f"{kind}_ablation", f"dev {table.metric} per ablated {kind} (mean over seeds)")],
                extra={"base": table.base, "metric": table.metric, "counts": counts, "tolerance": a.tolerance,
                       "base_per_seed": [t.base for t in tables], "evidence": evidence},
                claim=CLAIMS[kind], budget=a.budget, seeds=seeds, validity=validity)
    return 0


def seed_ablation(a, out: Path, kind: str, seed: int, seeds: list[int], cache: Path):
    """One seed of the study's grid: its fine-tuning (unless ``a.model`` is one), then ``ablate_once``."""
    return ablate_once(fine_tuned_model(a, out, seed, seeds), a, kind, cache)


def _mean_table(tables):
    from ptmlab.analysis.ablation import AblationTable

    return AblationTable(tables[0].metric, float(np.mean([t.base for t in tables])),
                         np.mean([t.removed for t in tables], axis=0), np.mean([t.uniform for t in tables], axis=0))


@STUDIES.register("head-ablation", help="Q13: does removing one attention head hurt? (every head, removed/uniform)")
def run_heads(argv: list[str]) -> int:
    return _run("head", argv)


@STUDIES.register("layer-ablation", help="Q14: does removing one layer hurt? (every layer, removed/uniform)")
def run_layers(argv: list[str]) -> int:
    return _run("layer", argv)


MIN_TAIL = 20   # resamples beyond a percentile interval's quantile for the quantile to mean something


def validity(record: dict) -> list:
    """The conditions of the ablation claims on a results record."""
    from ptmlab.studies.common import above_trivial, task_of

    iv = (record.get("counts") or {}).get("intervals") or {}
    conds = above_trivial(record, task_of(record), str(record.get("metric") or "accuracy"),
                          {"the intact model": record.get("base_per_seed") or []}, 0)
    conds.append(Condition.check("per-unit intervals resample seeds, then examples (1: yes)", iv.get("seed_level"),
                                 ">=", 1))
    if iv.get("tail_resamples") is not None or not iv:
        conds.append(Condition.check("bootstrap resamples beyond the Bonferroni quantile", iv.get("tail_resamples"),
                                     ">=", MIN_TAIL))
    return conds
