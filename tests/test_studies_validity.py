"""Validity conditions, the fourth outcome ("cannot test"), detectable effects and seed-level statistics: every
outcome from constructed numbers, each study's conditions on constructed records, and every committed result
checked against its own numbers."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest
import scipy.stats

from ptmlab.studies import load_all
from ptmlab.studies.rederive import claim_of, module_of, rederive_record
from ptmlab.studies.verdict import (
    CANNOT_TEST,
    INCONCLUSIVE,
    NOT_SUPPORTED,
    OUTCOMES,
    SUPPORTED,
    Condition,
    Estimate,
    Verdict,
    assess,
    budget_to_decide,
    combine,
    decide_above,
    decide_within,
    detectable_effect,
    hierarchical_bootstrap,
    holds,
    paired_bootstrap,
    paired_seeds,
    resamples_for,
    seed_interval_above,
)
from tests.conftest import ROOT

STUDIES = load_all()
RESULTS = sorted((ROOT / "studies" / "results").glob("*/results.json"))


# ------------------------------------------------------------------------------------------------ the framework
def test_condition_met_follows_its_numbers():
    assert Condition.check("gap", 0.02, ">", 0.0).met
    assert not Condition.check("gap", -0.01, ">", 0.0).met
    assert Condition.check("share", 0.5, "<", 0.8).met and not Condition.check("share", 1.0, "<", 0.8).met
    missing = Condition.check("gap", None, ">", 0.0)
    assert not missing.met and missing.value is None and "not recorded" in missing.text()
    assert not Condition.check("gap", math.nan, ">", 0.0).met
    with pytest.raises(ValueError):
        Condition("gap", 0.5, 0.0, False, ">")  # met must agree with value vs threshold
    with pytest.raises(ValueError):
        Condition("gap", 0.5, 0.0, True, "~")
    d = Condition.check("gap", 0.02, ">=", 0.01).to_dict()
    assert d == {"condition": "gap", "value": 0.02, "threshold": 0.01, "met": True, "compare": ">="}
    assert Condition.from_dict(d).met


def test_one_seed_cannot_establish_a_seed_level_condition_and_says_so():
    one = seed_interval_above([0.87], 0.0, "STS-B Spearman of copy")
    assert not one.met and one.value is None
    assert "one seed gives no interval" in one.text() and "not recorded" not in one.text()
    two = seed_interval_above([0.87, 0.86], 0.0, "STS-B Spearman of copy")
    assert two.met and two.value == pytest.approx(0.865 - 12.706 * 0.005, abs=1e-3)
    assert not seed_interval_above([0.87], None, "x").met  # no trivial score: not recorded


def test_every_outcome_from_constructed_numbers_including_cannot_test():
    good = [Condition.check("teacher above the student", 0.03, ">", 0.0)]
    bad = good + [Condition.check("shared ticket's share of heads", 1.0, "<", 0.8)]
    up = decide_above(paired_seeds([0.84, 0.83, 0.85], [0.80, 0.80, 0.81], "gain"))
    down = decide_above(paired_seeds([0.80, 0.80, 0.81], [0.84, 0.83, 0.85], "gain"))
    unsure = decide_above(paired_seeds([0.80, 0.70, 0.76], [0.75, 0.76, 0.74], "gain"))
    assert [assess(v, good).outcome for v in (up, down, unsure)] == [SUPPORTED, NOT_SUPPORTED, INCONCLUSIVE]
    for v in (up, down, unsure):
        ct = assess(v, bad)
        assert ct.outcome == CANNOT_TEST and ct.rule_outcome == v.outcome
        assert "shared ticket's share of heads: 1 >= 0.8 (unmet)" in ct.reason and ct.estimate == v.estimate
        d = ct.to_dict()
        assert d["outcome"] == CANNOT_TEST and [c["met"] for c in d["validity"]] == [True, False]
        assert d["rule"]["outcome"] == v.outcome
    with pytest.raises(ValueError):  # an unmet condition cannot go with any other outcome
        Verdict(SUPPORTED, "x", validity=tuple(bad))
    assert CANNOT_TEST in OUTCOMES and len(OUTCOMES) == 4
    # a part that cannot test makes the whole claim untestable, whatever the other parts say
    assert combine([up, assess(down, bad)]).outcome == CANNOT_TEST


def test_detectable_effect_is_the_power_formula():
    est = paired_seeds([0.80, 0.82, 0.81], [0.70, 0.71, 0.73], "gain")  # t interval, df 2
    se = (est.high - est.value) / 4.302653
    assert detectable_effect(est) == pytest.approx((4.302653 + 1.060660) * se, rel=1e-4)
    assert detectable_effect(paired_seeds([0.9], [0.1], "g")) is None  # one run: nothing measured
    assert detectable_effect(paired_seeds([0.5, 0.5], [0.5, 0.5], "g")) is None  # no spread: noise unmeasured
    normal = Estimate("m", 0.0, -0.0196, 0.0196, 1000, "bootstrap over 1000 examples (95%)")
    assert detectable_effect(normal) == pytest.approx((1.959964 + 0.841621) * 0.01, rel=1e-4)
    # what would decide it: the spread of one seed, the fewest seeds n whose t quantiles (n - 1 degrees of freedom)
    # give (t + t_power) x SD / sqrt(n) <= the effect; more than the normal formula's count, which ignores df
    sd = se * math.sqrt(3)
    normal_n = math.ceil(((1.959964 + 0.841621) * sd / 0.005) ** 2)
    n = budget_to_decide(est, 0.005)
    t = scipy.stats.t.ppf
    assert n > normal_n
    assert (t(0.975, n - 1) + t(0.8, n - 1)) * sd / math.sqrt(n) <= 0.005
    assert (t(0.975, n - 2) + t(0.8, n - 2)) * sd / math.sqrt(n - 1) > 0.005
    # over examples (no df) it stays the normal formula
    z = scipy.stats.norm.ppf
    normal_sd = 0.0196 / z(0.975) * math.sqrt(1000)
    assert budget_to_decide(normal, 0.005) == math.ceil(((z(0.975) + z(0.8)) * normal_sd / 0.005) ** 2)


def test_underpowered_inconclusive_says_so_with_the_budget_that_would_decide():
    v = decide_above(paired_seeds([0.90, 0.86, 0.91], [0.89, 0.90, 0.89], "gain"))
    assert v.outcome == INCONCLUSIVE and "could detect ±" in v.reason
    small = assess(v, [], paper_effect=0.006)  # super-tickets: +0.6 points
    assert "underpowered: could detect ±" in small.reason and "the paper reports 0.006" in small.reason
    assert re.search(r"about \d+ seeds would decide it", small.reason)
    assert small.to_dict()["detectable_effect"] == pytest.approx(v.detectable_effect)
    assert small.to_dict()["paper_effect"] == 0.006
    big = assess(v, [], paper_effect=0.5)  # an effect the run could have seen: no note
    assert "underpowered" not in big.reason
    eq = decide_within(paired_seeds([0.80, 0.83, 0.78], [0.80, 0.80, 0.80], "d"), 0.01)
    assert eq.outcome == INCONCLUSIVE and "can never fit inside it" in eq.reason


def test_examples_shared_by_every_seed_are_noise_more_seeds_do_not_shrink():
    """A seeds-then-examples interval records the examples' share of its noise; the budget that would decide it
    names seeds on the same examples only while that share alone is below the target, and the examples instead."""
    from ptmlab.studies.verdict import budget_text, examples_to_decide

    rng = np.random.default_rng(3)
    # 3 seeds that agree on 60 examples, each example right or wrong for all of them: the examples are the noise
    a = (rng.random(60) < 0.7).astype(float)
    b = (rng.random(60) < 0.6).astype(float)
    est = hierarchical_bootstrap([a, a, a], [b, b, b], "gain")
    assert est.examples == 60 and est.example_se == pytest.approx(est.half_width() / scipy.stats.t.ppf(0.975, 2),
                                                                   rel=0.1)
    round_trip = Estimate.from_dict(json.loads(json.dumps(est.to_dict())))
    assert round_trip.example_se == pytest.approx(est.example_se) and round_trip.examples == 60
    z = scipy.stats.norm.ppf(0.975) + scipy.stats.norm.ppf(0.8)
    assert budget_to_decide(est, 0.9 * z * est.example_se) is None  # the examples alone hide the effect
    text = budget_text(est, 0.9 * z * est.example_se)
    assert text.startswith("no number of seeds on these 60 examples would; about ")
    m = examples_to_decide(est, 0.9 * z * est.example_se)
    assert m > 60 and f"about {m} examples at 3 seeds would decide it" in text
    # the same examples' noise, far below the target: a few more seeds on the same examples would do
    few = budget_to_decide(est, 2 * z * est.example_se)
    assert 3 < few < 20 and f"about {few} seeds on the same 60 examples" in budget_text(est, 2 * z * est.example_se)
    # an estimate without the split (over seeds alone) keeps the seeds-only answer and text
    seeds_only = paired_seeds([0.90, 0.86, 0.91], [0.89, 0.90, 0.89], "gain")
    assert "examples" not in seeds_only.to_dict()
    assert budget_text(seeds_only, 0.006) == f"about {budget_to_decide(seeds_only, 0.006)} seeds would decide it"
    assert examples_to_decide(seeds_only, 0.006) is None


def test_bootstrap_statistic_is_the_hierarchical_bootstrap_for_a_mean_and_collapses_identical_seeds():
    """For a mean over examples it gives the hierarchical bootstrap's value and a t interval over seeds of about
    its width; seeds that are one run repeated give the examples' interval (normal quantile), not a t over copies."""
    import numpy as np

    from ptmlab.studies.verdict import bootstrap_statistic

    rng = np.random.default_rng(1)
    runs = [(rng.random(400) < p).astype(float) for p in (0.70, 0.74, 0.78)]

    def mean(run, idx):
        return float(run[idx].mean())

    est = bootstrap_statistic(mean, runs, 400, "acc")
    ref = hierarchical_bootstrap(runs, None, "acc")
    assert est.value == pytest.approx(ref.value) and est.df == 2 and est.n == 3
    assert est.half_width() == pytest.approx(ref.half_width(), rel=0.2)
    one = bootstrap_statistic(mean, [runs[0]] * 3, 400, "acc")
    se = float(np.std(runs[0]) / np.sqrt(400))
    assert one.df is None and one.n == 400 and "one run" in one.method
    assert one.half_width() == pytest.approx(1.96 * se, rel=0.15)
    lone = bootstrap_statistic(mean, runs[:1], 400, "acc")  # one seed shows neither spread nor determinism
    assert lone.value == pytest.approx(runs[0].mean()) and lone.low == -math.inf and lone.high == math.inf
    with pytest.raises(ValueError):
        bootstrap_statistic(mean, [], 400, "acc")


def test_hierarchical_bootstrap_keeps_seed_noise_that_pooling_hides():
    """Three seeds that disagree (+10, 0 and -2 points) on 800 shared examples: pooling the seeds' copies of each
    example as 2,400 independent examples gives a narrow interval that excludes 0; resampling seeds, then
    examples, keeps the seed-to-seed spread and includes it."""
    rng = np.random.default_rng(0)
    base = (rng.random((3, 800)) < 0.8).astype(float)
    shift = [0.10, 0.0, -0.02]
    other = base.copy()
    for k, s in enumerate(shift):
        idx = rng.choice(800, size=int(abs(s) * 800), replace=False)
        other[k, idx] = 1.0 if s > 0 else 0.0
        base[k, idx] = 0.0 if s > 0 else 1.0
    pooled = paired_bootstrap(other.ravel(), base.ravel(), "gain")
    hier = hierarchical_bootstrap(other, base, "gain")
    assert pooled.low > 0 and decide_above(pooled).outcome == SUPPORTED  # the old, pooled answer
    assert hier.low < 0 < hier.high and hier.df == 2 and hier.n == 3
    assert hier.value == pytest.approx(pooled.value)
    one = hierarchical_bootstrap(other[:1], base[:1], "gain")
    assert math.isinf(one.low) and decide_above(one).outcome == INCONCLUSIVE


def test_choose_then_test_tests_at_the_seed_level():
    from ptmlab.studies.common import choose_then_test

    rng = np.random.default_rng(1)
    base = [list((rng.random(400) < 0.8).astype(float)) for _ in range(3)]
    cand = [list(b) for b in base]
    for k, flips in enumerate([40, -10, -10]):  # one lucky seed
        for i in range(1, 400, 2)[:abs(flips)]:
            cand[k][i] = 1.0 if flips > 0 else 0.0
    chosen, _, est = choose_then_test({"a": cand}, base, "gain")
    assert chosen == "a" and "hierarchical" in est.method and est.n == 3 and est.low < 0


def test_bonferroni_tail_gets_enough_resamples():
    n = resamples_for(1 - 0.05 / 144)
    assert n * 0.05 / 144 / 2 >= 20 and n >= 115_000
    assert resamples_for(0.95) == 2000


# ------------------------------------------------------------------------------------------------ each study
def _record(**kw) -> dict:
    return {"run": {"command": "ptmlab study x --budget full --output runs/x", "budget": "full", "seeds": [0, 1, 2]},
            **kw}


def test_distillation_needs_a_teacher_that_beats_the_student_alone():
    from ptmlab.studies.distillation import validity

    def rows(teacher):
        return [{"method": "teacher", "accuracy": teacher},
                {"method": "none", "accuracy": 0.78, "per_seed": [0.775, 0.783, 0.778]},
                {"method": "pkd", "accuracy": 0.78, "per_seed": [0.779, 0.790, 0.778]}]
    weak = {c.condition: c for c in validity(_record(rows=rows(0.7706), chosen_method="pkd",
                                                     train_epochs={"reference": 1, "compared": 1}))}
    strong = {c.condition: c for c in validity(_record(rows=rows(0.90), chosen_method="pkd",
                                                       train_epochs={"reference": 1, "compared": 1}))}
    key = next(k for k in weak if k.startswith("teacher"))
    assert not weak[key].met and weak[key].value < 0
    assert strong[key].met and strong[key].value > 0.1
    assert all(c.met for c in strong.values()) or not any("trivial" in k for k in strong)


def test_reference_budget_condition():
    from ptmlab.studies.common import reference_budget

    assert reference_budget({"train_epochs": {"reference": 1.0, "compared": 2.0}})[0].value == 0.5
    assert not reference_budget({"train_epochs": {"reference": 1.0, "compared": 2.0}})[0].met
    assert reference_budget({"train_epochs": {"reference": 2.0, "compared": 2.0}})[0].met
    missing = reference_budget({})[0]
    assert missing.value is None and not missing.met


def test_ticket_sharing_needs_a_ticket_smaller_than_the_model():
    from ptmlab.studies.ticket_sharing import validity

    def share(heads):
        conds = validity(_record(shared_ticket_size=[{"heads": heads, "heads_total": 72}], tasks=[]))
        return next(c for c in conds if "share of heads" in c.condition)
    assert not share(72).met and share(72).value == 1.0
    assert share(40).met


def test_trivial_predictor_condition_reads_the_task_data():
    from ptmlab.studies.common import above_trivial, trivial_scores

    t = trivial_scores("sst2")
    if t is None:
        pytest.skip("no GLUE data here")
    assert t["accuracy"] == pytest.approx(444 / 872) and t["f1"] == pytest.approx(2 * 444 / (444 + 872))
    above, at = above_trivial(_record(), "sst2", "accuracy", {"good": [0.80, 0.81, 0.82], "chance": [0.51] * 3}, 0)
    assert above.met and not at.met
    mrpc = trivial_scores("mrpc")
    assert mrpc["f1"] == pytest.approx(0.8122, abs=1e-4)  # the all-positive F1: "0.8122" is chance on MRPC


def test_data_quality_is_decided_downstream_and_a_tie_is_not_support():
    from ptmlab.studies.data_quality import decide

    tie = decide([0.08, 0.07, 0.09], [0.0, 0.0, 0.0])
    assert tie.outcome == INCONCLUSIVE and "does not separate" in tie.reason
    assert decide([0.0, 0.0, 0.0], [0.02, 0.03, 0.025]).outcome == SUPPORTED  # downstream decides, loss beside
    assert decide([0.2, 0.2, 0.2], [-0.02, -0.03, -0.025]).outcome == NOT_SUPPORTED


def test_pretraining_must_leave_the_unigram_plateau():
    from ptmlab.studies.pretrain_common import pretrain_validity

    runs = [{"objective": "mlm", "seed": s, "eval_loss": loss} for s, loss in enumerate([6.1, 6.2, 6.0])]
    plateau = pretrain_validity(_record(per_seed=runs, tasks=[], unigram_entropy=6.3), "objective")[-1]
    learnt = pretrain_validity(_record(per_seed=runs, tasks=[], unigram_entropy=8.0), "objective")[-1]
    unknown = pretrain_validity(_record(per_seed=runs, tasks=[]), "objective")[-1]
    assert not plateau.met and learnt.met and unknown.value is None and not unknown.met


def test_each_run_is_judged_against_its_own_recorded_unigram_entropy():
    """Every pre-training study reads the eval loss and the unigram cross-entropy each run recorded, through the
    one condition (``unigram_condition``): objectives and tokenizers-downstream (largest LM ratio; ELECTRA's
    discriminator loss left out), data-quality (every corpus: each run its own training corpus's counts) and
    scaling (the best run at the largest budget)."""
    from ptmlab.studies.data_quality import validity as dq
    from ptmlab.studies.pretrain_common import UNIGRAM_RATIO, pretrain_validity
    from ptmlab.studies.scaling import validity as scaling

    runs = [{"objective": "mlm", "seed": 0, "eval_loss": 5.0, "unigram_entropy": 7.0},
            {"objective": "clm", "seed": 0, "eval_loss": 6.0, "unigram_entropy": 7.5},
            {"objective": "electra", "seed": 0, "eval_loss": 0.3, "unigram_entropy": 7.0}]
    c = pretrain_validity(_record(per_seed=runs, tasks=[]), "objective")[-1]
    assert c.value == pytest.approx(6.0 / 7.5) and c.met and c.threshold == UNIGRAM_RATIO
    runs[1]["eval_loss"] = 7.0  # the causal LM stayed on the plateau: nothing may be compared downstream
    c = pretrain_validity(_record(per_seed=runs, tasks=[]), "objective")[-1]
    assert c.value == pytest.approx(7.0 / 7.5) and not c.met
    del runs[0]["unigram_entropy"]  # a run that did not record its entropy: unknown, unmet
    assert pretrain_validity(_record(per_seed=runs, tasks=[]), "objective")[-1].value is None

    rows = [{"variant": v, "seed": 0, "eval_loss": loss, "unigram_entropy": h, "task_metric": 0.8}
            for v, loss, h in (("clean", 4.0, 6.0), ("raw_equal", 5.0, 6.5), ("raw_full", 4.5, 6.4))]
    c = dq(_record(rows=rows))[-1]
    assert "unigram" in c.condition and c.value == pytest.approx(5.0 / 6.5) and c.met

    # scaling: every size at Q8's two budgets (each cell's seed-mean loss) and Q19's target, not the best cell alone
    sweep = [{"budget": 1e9, "size": "a", "eval_loss": 3.0, "unigram_entropy": 6.0},
             {"budget": 1e9, "size": "b", "eval_loss": 5.0, "unigram_entropy": 6.0},
             {"budget": 3e9, "size": "a", "eval_loss": 5.9, "unigram_entropy": 6.0},
             {"budget": 3e9, "size": "b", "eval_loss": 4.0, "unigram_entropy": 6.2},
             {"budget": 3e9, "size": "b", "status": "not started"}]
    small, large, target = scaling(_record(rows=sweep, q19={"target_loss": 5.0}))
    assert small.value == pytest.approx(5.0 / 6.0) and small.met
    assert large.value == pytest.approx(5.9 / 6.0) and not large.met  # the worst size at the largest budget
    assert target.value == pytest.approx(5.0 / 6.05) and target.met
    sweep[2]["eval_loss"] = 4.0
    assert all(c.met for c in scaling(_record(rows=sweep, q19={"target_loss": 5.0})))
    assert not scaling(_record(rows=sweep, q19={"target_loss": 5.9}))[2].met  # a target on the plateau


def test_attention_explanation_measure_is_fixed_not_chosen():
    from ptmlab.studies.attention_explanation import PRIMARY, decide

    rng = np.random.default_rng(2)
    res = [{"seed": s, "tau_last_grad": 0.6 + 0.01 * rng.standard_normal(), "tau_last_loo": 0.1,
            "tau_mean_grad": 0.1, "tau_mean_loo": 0.1, "tau_grad_loo": 0.3, "permutation_tvd": 0.01}
           for s in range(3) for _ in range(50)]
    v = decide(res)
    # the low-agreement measures would make part 1 "supported"; the fixed measure decides it
    assert PRIMARY == "tau_last_grad" and v.parts[0].outcome == NOT_SUPPORTED and PRIMARY in v.parts[0].reason


def test_every_registered_study_declares_conditions_and_checks_them():
    for name in STUDIES.names():
        module = module_of(name, STUDIES)
        claim = claim_of(module, name)
        assert claim is not None and claim.conditions, name
        assert callable(getattr(module, "validity", None)), name
        doc = module.__doc__ or ""
        assert doc.find("Validity conditions") >= 0, name
        conds = module.validity({"run": {}})  # an empty record: every condition unmet, value null
        assert conds and all(isinstance(c, Condition) for c in conds), name
        assert not all(c.met for c in conds), name


# ------------------------------------------------------------------------------------------------ committed results
# results whose run kept none of the per-example records its interval was computed from: rederive keeps the rule
# verdict the run recorded (it cannot recompute it), so the guard below checks only their conditions; each needs a
# rerun of the current code, which keeps the records (``evidence``). The list can only shrink.
AS_RECORDED = {"distillation", "extraction", "ghost", "super-tickets", "tokenizers"}
# results whose outcome is recomputed from recorded intervals that only a rerun could recompute (per-unit intervals,
# one part's bootstrap, the sweep's learning curves) or from per-seed scores where the rule reads per-example ones
PARTLY = {"anomaly", "head-ablation", "scaling"}
# results that do not decide their claim and could measure no noise: every seed tied ([0, 0]), or one seed
NO_NOISE = {"data-quality": "every seed's fine-tuned metric tied", "span-corruption": "one seed"}


def _close(a, b, tol: float = 1e-9) -> bool:
    if isinstance(a, int | float) and isinstance(b, int | float) and not isinstance(a, bool):
        return a == b or abs(a - b) <= tol * max(1.0, abs(a), abs(b))
    return a == b


def _estimate_numbers(e) -> dict:
    return {k: (e or {}).get(k) for k in ("value", "low", "high", "n", "df", "confidence", "examples", "example_se")}


def differences(committed: dict, again: dict) -> list[str]:
    """What a record judged again from its own records gives that the committed record does not say: outcomes,
    every interval's numbers, each part's outcome and interval, the validity block's numbers, what the run could
    detect, the rule's lines and the two statuses. Reasons are never compared: they are text the rule wrote."""
    out = []
    for key in ("outcome", "detectable_effect", "paper_effect"):
        if not _close(committed.get(key), again.get(key)):
            out.append(f"{key}: {committed.get(key)!r} committed, {again.get(key)!r} from the records")
    if (committed.get("rule") or {}).get("outcome") != (again.get("rule") or {}).get("outcome"):
        out.append("the rule's own outcome")
    for k, (a, b) in {k: (v, _estimate_numbers(again.get("estimate"))[k])
                      for k, v in _estimate_numbers(committed.get("estimate")).items()}.items():
        if not _close(a, b):
            out.append(f"estimate {k}: {a!r} committed, {b!r} from the records")
    parts_a, parts_b = committed.get("parts") or [], again.get("parts") or []
    if len(parts_a) != len(parts_b):
        out.append(f"{len(parts_a)} parts committed, {len(parts_b)} from the records")
    for i, (a, b) in enumerate(zip(parts_a, parts_b, strict=False)):
        if a.get("outcome") != b.get("outcome") or a.get("part") != b.get("part"):
            out.append(f"part {i}: {a.get('part')} {a.get('outcome')} committed, {b.get('outcome')} from the records")
        if not _close(a.get("detectable_effect"), b.get("detectable_effect")):
            out.append(f"part {i}: detectable effect")
        for k, (x, y) in {k: (v, _estimate_numbers(b.get("estimate"))[k])
                          for k, v in _estimate_numbers(a.get("estimate")).items()}.items():
            if not _close(x, y):
                out.append(f"part {i} estimate {k}: {x!r} committed, {y!r} from the records")
    va, vb = committed.get("validity") or [], again.get("validity") or []
    if len(va) != len(vb):
        out.append(f"{len(va)} validity conditions committed, {len(vb)} from the records")
    for a, b in zip(va, vb, strict=False):
        if a.get("met") != b.get("met") or not all(_close(a.get(k), b.get(k)) for k in ("value", "threshold")):
            out.append(f"condition {a.get('condition')!r}: {a.get('value')} committed, {b.get('value')} from the "
                       "records")
    if committed.get("thresholds") != again.get("thresholds"):
        out.append("the rule's lines (thresholds)")
    for key in ("recompute", "preregistration"):
        if (committed.get(key) or {}).get("status") != (again.get(key) or {}).get("status"):
            out.append(f"{key} status")
    return out


@pytest.mark.parametrize("path", RESULTS, ids=[p.parent.name for p in RESULTS])
def test_committed_result_is_what_its_records_give(path):
    """Every committed interval, condition and outcome recomputed from the records the result keeps (per-seed
    scores, per-example records, per-unit intervals): any difference fails. Only the results in ``AS_RECORDED``
    keep their run's interval, because their runs kept no records to recompute it from."""
    res = json.loads(path.read_text(encoding="utf-8"))
    name = path.parent.name
    again = rederive_record(name, res, STUDIES)
    assert differences(res, again) == []
    expected = "as recorded" if name in AS_RECORDED else "partly recomputed" if name in PARTLY else "recomputed"
    assert res["recompute"]["status"] == expected, res["recompute"]
    assert res["validity"], "every result lists its conditions"
    for c in res["validity"]:
        assert c["met"] == holds(c["value"], c.get("compare", ">"), c["threshold"]), c
    assert (res["outcome"] == CANNOT_TEST) == any(not c["met"] for c in res["validity"])
    if res["outcome"] in (INCONCLUSIVE, CANNOT_TEST):  # a result that does not decide says what it could detect
        assert isinstance(res.get("detectable_effect"), float) or name in NO_NOISE, name
    text = path.read_text(encoding="utf-8")
    assert not re.search(r'"/(work|tmp|home|root|Users)/', text) and "/work/" not in text, "absolute machine path"
    # confirmatory only with a preregistration committed before the run (none precedes the committed results)
    pre = res["preregistration"]
    assert pre["status"] == "exploratory" or (pre.get("commit") and pre.get("rule_hash") == pre.get(
        "preregistered_rule_hash") and (ROOT / pre["file"]).is_file())


def _mutated(name: str, res: dict) -> dict:
    """``res`` with one of the records its interval is computed from changed (not its stated numbers)."""
    import copy

    res = copy.deepcopy(res)
    if name == "unfreezing":
        res["rows"][1]["per_seed"][0] -= 0.05
    elif name == "attention-explanation":
        for r in res["examples"][:400]:
            r["tau_last_grad"] = -0.5
    elif name == "layer-ablation" and res.get("evidence"):  # one seed's intact model right on every example
        from ptmlab.studies.evidence import pack_bits, unpack_bits

        res["evidence"]["base"][0] = pack_bits([1.0] * len(unpack_bits(res["evidence"]["base"][0])))
    elif name == "layer-ablation":  # every unit's interval half as wide: what the run could detect halves
        for r in res["rows"]:
            r["removal_high"] = (r["removal_low"] + r["removal_high"]) / 2 + (r["removal_high"] - r["removal_low"]) / 4
            r["removal_low"] = r["removal_high"] - (r["removal_high"] - r["removal_low"]) / 2
    elif name == "long-attention":
        res["seed_correct"]["window"][0] = [0.0] * len(res["seed_correct"]["window"][0])
    elif name == "multilingual-distillation":
        row = next(r for r in res["rows"] if r.get("model") != "teacher" and r.get("part", "report") == "report")
        row["src_to_tgt"] -= 5.0
    return res


@pytest.mark.parametrize("name", ["unfreezing", "attention-explanation", "layer-ablation", "long-attention",
                                  "multilingual-distillation"])
def test_the_guard_fails_when_a_record_or_a_stated_number_changes(name):
    """The guard can fail: a changed per-seed score, per-example record or per-unit interval gives other numbers
    than the committed ones, and so does a committed interval edited without its records."""
    res = json.loads((ROOT / "studies" / "results" / name / "results.json").read_text(encoding="utf-8"))
    assert differences(res, rederive_record(name, _mutated(name, res), STUDIES)) != []
    forged = json.loads(json.dumps(res))
    target = forged["estimate"] or next((p["estimate"] for p in forged.get("parts") or [] if p.get("estimate")), None)
    if target is not None:
        target["low"] = target["low"] - 0.01
        assert any("low" in d for d in differences(forged, rederive_record(name, forged, STUDIES)))


def test_committed_results_named_by_the_issue():
    """Distillation is judged with a teacher that has something to teach (and a student alone trained as long as the
    distilled ones); the comparisons that still cannot test their claims say so (downstream models at chance)."""
    def result(name):
        return json.loads((ROOT / "studies" / "results" / name / "results.json").read_text())
    distil = result("distillation")
    teacher = [c for c in distil["validity"] if c["condition"].startswith("teacher accuracy minus")]
    assert teacher and teacher[0]["met"] and teacher[0]["value"] > 0
    heads = [c for c in result("ticket-sharing")["validity"] if c["condition"].startswith("share of heads")]
    assert heads and heads[0]["met"] and heads[0]["value"] < 0.8  # a shared ticket, not the full model
    for name in ("data-quality", "objectives"):
        assert result(name)["outcome"] == CANNOT_TEST, name
    # static-vs-contextual: the confirmatory design scores the probes on SST-2 sentences no fine-tuning read
    svc = result("static-vs-contextual")
    assert svc["scored_on"] == "fresh" and svc["fresh_rows"]["sst2"] > 0 and svc["evidence"]["sst2"]["static"]
    assert svc["preregistration"]["status"] == "confirmatory"

def test_long_attention_is_restated_by_its_current_rule():
    """A record made when Q11 compared window with truncation alone is judged by today's rule from its own cost
    rows and per-seed accuracies: a window that ties chunk-and-pool leaves Q11 undecided, and cost rows with one
    timing per length leave Q10 undecided (no interval over repeated timings)."""
    mod = module_of("long-attention", STUDIES)
    cost = [{"impl": impl, "length": n, "latency_s": (n / 1024) ** (2 if impl == "sdpa" else 1),
             "latency_reps": [(n / 1024) ** ((2 if impl == "sdpa" else 1) + e) for e in (0.0, 0.02, -0.02)]}
            for impl in ("sdpa", "window") for n in (1024, 2048, 4096, 8192)]
    acc = {"truncate": [0.30, 0.31, 0.29], "window": [0.40, 0.42, 0.41], "chunk": [0.40, 0.43, 0.40]}
    tie = mod.restate({"cost_rows": cost, "seed_accuracy": acc})
    assert tie.outcome == INCONCLUSIVE and "window is as good as chunk-and-pool" in tie.reason
    assert tie.parts[0].outcome == SUPPORTED and "n^1.00" in tie.reason
    ahead = mod.restate({"cost_rows": cost, "seed_accuracy": {**acc, "chunk": [0.33, 0.35, 0.33]}})
    assert ahead.outcome == SUPPORTED
    single = [{k: v for k, v in r.items() if k != "latency_reps"} for r in cost]
    assert mod.restate({"cost_rows": single, "seed_accuracy": {**acc, "chunk": [0.33, 0.35, 0.33]}}).outcome \
        == INCONCLUSIVE
    assert mod.restate({"seed_accuracy": acc}) is None  # no cost rows: nothing to restate from


def test_every_study_has_a_row_in_the_budget_table():
    """docs/studies.md says per study what each budget runs and how long it takes: a study registered without its
    row would leave a user guessing whether its full budget takes minutes or a day."""
    text = (ROOT / "docs" / "studies.md").read_text(encoding="utf-8")
    rows = set(re.findall(r"^\| `([a-z0-9-]+)` \|", text, flags=re.M))
    assert sorted(set(STUDIES.names()) - rows) == []


PAGES = [ROOT / "README.md", ROOT / "BENCHMARKS.md", *sorted((ROOT / "docs").glob("*.md"))]
BOLD_OUTCOME = re.compile(r"\*\*(supported|not\s+supported|inconclusive|cannot\s+test)\*\*")


def quoted_outcomes(text: str) -> list[tuple[str, str, int]]:
    """(study, outcome, line) for each ``studies/results/<study>/`` a page names, with the first bold outcome written
    after it and before the next result it names (none: nothing quoted)."""
    spans = list(re.finditer(r"studies/results/([a-z0-9-]+)/", text))
    found = []
    for k, m in enumerate(spans):
        end = spans[k + 1].start() if k + 1 < len(spans) else len(text)
        bold = BOLD_OUTCOME.search(text, m.end(), min(end, m.end() + 800))
        if bold:
            found.append((m.group(1), " ".join(bold.group(1).split()), text.count("\n", 0, m.start()) + 1))
    return found


def test_quoted_outcomes_are_read_after_the_result_they_name():
    text = ("see `studies/results/ghost/`): **cannot\n  test**, the rule alone **supported**; and "
            "`studies/results/anomaly/` then **inconclusive** and `studies/results/tokenizers/` with no outcome")
    assert quoted_outcomes(text) == [("ghost", "cannot test", 1), ("anomaly", "inconclusive", 2)]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_pages_quote_the_committed_outcome(page):
    """A page that names a committed result and writes its outcome in bold writes the outcome the result holds: a
    rerun that turns "supported" into "cannot test" leaves no page still saying "supported"."""
    wrong = []
    for study, outcome, line in quoted_outcomes(page.read_text(encoding="utf-8")):
        path = ROOT / "studies" / "results" / study / "results.json"
        if path.is_file() and json.loads(path.read_text(encoding="utf-8"))["outcome"] != outcome:
            wrong.append(f"{page.name}:{line} says {outcome!r} of {study}")
    assert not wrong, wrong


def test_rederive_keeps_a_runs_hierarchical_interval():
    """A fresh record's rule rests on the held-out, seed-then-example interval; judging it again must not swap in a
    paired t over whole-dev per-seed scores (narrower, and with the half that chose the method let in)."""
    rows = [{"method": "teacher", "accuracy": 0.9},
            {"method": "none", "per_seed": [0.80, 0.81, 0.82], "accuracy": 0.81},
            {"method": "soft_ce", "per_seed": [0.83, 0.84, 0.85], "accuracy": 0.84}]
    est = Estimate("held-out gain", 0.01, -0.05, 0.07, 3, "hierarchical bootstrap: 3 seeds then 400 examples, "
                   "t over seeds (95%)")
    rule = decide_above(est, 0.0, "soft_ce (chosen on the even half): held-out gain")
    record = {"rows": rows, "chosen_method": "soft_ce", "train_epochs": {"reference": 2, "compared": 2},
              "rule": {"outcome": rule.outcome, "reason": rule.reason}, "estimate": est.to_dict(),
              "outcome": rule.outcome, "reason": rule.reason}
    again = rederive_record("distillation", record, STUDIES)
    assert again["estimate"]["low"] == pytest.approx(-0.05) and "hierarchical bootstrap" in again["reason"]
    assert again["outcome"] == INCONCLUSIVE
    pooled = {**record, "rule": {"outcome": SUPPORTED, "reason": "supported: gain 0.03 [0.02, 0.04] (bootstrap "
                                 "over 2616 examples, seeds pooled (95%))"}, "estimate": None}
    restated = rederive_record("distillation", pooled, STUDIES)
    assert "paired t over 3 seeds" in restated["reason"]  # a legacy pooled record gets the seed-level interval
    assert restated["estimate"]["value"] == pytest.approx(0.03)


def test_unigram_entropy_is_the_frequency_only_loss():
    import math

    from ptmlab.models.zoo import load_tokenizer
    from ptmlab.studies.pretrain_common import unigram_entropy

    tok = load_tokenizer("tiny")
    the, cat = (tok(w, add_special_tokens=False)["input_ids"] for w in ("the", "cat"))
    assert len(the) == len(cat) == 1 and the != cat
    vocab = len(tok)
    h = unigram_entropy(tok, ["the the the cat"], ["the"])
    assert h == pytest.approx(-math.log((3 + 1) / (4 + vocab)))
    assert unigram_entropy(tok, ["the the the cat"], ["cat"]) > h  # the rarer token costs more
    with pytest.raises(ValueError):
        unigram_entropy(tok, ["the"], [""])


def test_domain_majority_is_read_from_the_rows_each_seed_was_tested_on():
    from ptmlab.studies.common import above_domain_majority, majority_share

    assert majority_share(["a", "b", "a", "a"]) == 0.75 and majority_share([]) is None
    rows = [{"domain": "my-reviews", "seed": s, "kd": score, "test_majority": maj, "test_rows": 200}
            for s, (score, maj) in enumerate([(0.80, 0.50), (0.83, 0.52), (0.81, 0.51)])]
    (cond,) = above_domain_majority(rows, ("kd",))
    assert cond.met and "0.5100" in cond.condition  # a NAME=FILE domain has no shared file; its rows say the share
    assert abs(cond.value - 0.2989) < 0.05  # the seeds' margins over their own test rows, 0.30, 0.31, 0.30
    (unknown,) = above_domain_majority([{k: v for k, v in r.items() if k != "test_majority"} for r in rows], ("kd",))
    assert not unknown.met and unknown.value is None
    close = [{**r, "test_majority": r["kd"] - 0.004} for r in rows]  # under one of 200 test rows above: not above
    (at_chance,) = above_domain_majority(close, ("kd",))
    assert not at_chance.met


def test_rederive_recomputes_a_count_rule_from_its_units_intervals():
    """The ablation rule counts units: judged again, its counts and outcome come from each unit's recorded interval
    (not from the reason), so a record whose rows say otherwise than its reason is corrected, and what it could
    detect is the median over units of each unit's detectable effect."""
    path = ROOT / "studies" / "results" / "layer-ablation" / "results.json"
    # without its per-example records (as an earlier run kept none): the units' recorded intervals decide
    committed = {k: v for k, v in json.loads(path.read_text(encoding="utf-8")).items() if k != "evidence"}
    lying = {**committed, "rule": {"outcome": NOT_SUPPORTED, "reason": "not supported: made up"},
             "outcome": NOT_SUPPORTED, "reason": "not supported: made up"}
    again = rederive_record("layer-ablation", lying, STUDIES)
    assert again["outcome"] == INCONCLUSIVE and "made up" not in again["reason"]
    assert again["recompute"]["status"] == "partly recomputed"
    # every layer's interval shifted up by 0.2: each unit's removal now clearly helps
    up = {**committed, "rows": [{**r, "removal_low": r["removal_low"] + 0.2, "removal_high": r["removal_high"] + 0.2}
                                for r in committed["rows"]]}
    moved = rederive_record("layer-ablation", up, STUDIES)
    assert moved["parts"][1]["outcome"] == SUPPORTED


def test_a_combined_verdict_keeps_its_parts_through_results_json_and_rederive():
    """A claim of parts writes each part's outcome, estimate and detectable effect; judging the record again keeps
    them, and a record written before parts were kept gets them back from its reason, with the same numbers."""
    from ptmlab.studies.rederive import parts_in, recorded_rule

    seeds = Estimate("gain on task a", 0.02, 0.01, 0.03, 3, "paired t over 3 seeds (95%)", df=2)
    examples = Estimate("gain on task b", -0.01, -0.05, 0.03, 900, "bootstrap over 900 examples (95%)")
    joined = assess(combine([decide_above(seeds, 0.0, "task a: gain"), decide_above(examples, 0.0, "task b: gain")]))
    written = json.loads(json.dumps(joined.to_dict()))
    assert [p["outcome"] for p in written["parts"]] == [SUPPORTED, INCONCLUSIVE]
    assert written["parts"][0]["estimate"]["df"] == 2
    assert written["parts"][1]["detectable_effect"] == pytest.approx(detectable_effect(examples))
    kept = recorded_rule(written)
    assert [p.estimate.value for p in kept.parts] == [0.02, -0.01] and kept.parts[0].estimate.df == 2
    legacy = parts_in(written["reason"])  # the same reason without the parts block
    assert [p.outcome for p in legacy] == [SUPPORTED, INCONCLUSIVE]
    assert [p.estimate.metric for p in legacy] == ["task a: gain", "task b: gain"]
    assert [p.detectable_effect for p in legacy] == pytest.approx([detectable_effect(seeds),
                                                                   detectable_effect(examples)], rel=1e-3)
    assert parts_in("gain 0.0100 [0.0000, 0.0200] (paired t over 3 seeds (95%)) is above 0") == ()
    counts = parts_in("inconclusive: 85 of 144 harmless (could detect ±0.0104, median per head); not supported: "
                      "0 of 12 raise it")
    assert counts[0].estimate is None and counts[0].detectable_effect == 0.0104 and counts[1].outcome == NOT_SUPPORTED


def test_a_hierarchical_interval_read_back_from_a_reason_keeps_its_seed_level_quantile():
    """"hierarchical bootstrap: 3 seeds then 872 examples, t over seeds" is a t interval over 3 seeds: read back
    from a committed reason, its detectable effect is the one the run reported (not a normal quantile's, which
    reads the same interval as 1.15 times larger)."""
    from ptmlab.studies.rederive import estimates_in

    est = Estimate("gain", 0.0057, -0.0228, 0.0343, 3, "hierarchical bootstrap: 3 seeds then 872 examples, t over "
                   "seeds (95%)", df=2)
    (back,) = estimates_in(decide_above(est).reason)
    assert back.n == 3 and back.df == 2
    assert detectable_effect(back) == pytest.approx(detectable_effect(est), rel=1e-3)
    (examples,) = estimates_in("x 0.5000 [0.4000, 0.6000] (bootstrap over 1000 pairs (95%))")
    assert examples.n == 1000 and examples.df is None


def test_the_power_note_reads_the_part_the_papers_effect_is_about():
    """super-tickets' paper effect (+0.6 points) is the ticket's gain, part 1; the heavy-pruning loss, part 2, is
    noisier: "underpowered" and the seeds that would decide it come from part 1's spread, and a decided part 1 needs
    no power note even when part 2 stays open."""
    gain = Estimate("gain", -0.015, -0.053, 0.023, 3, "hierarchical bootstrap: 3 seeds then 436 examples, t over "
                    "seeds (95%)", df=2)
    loss = Estimate("loss", 0.049, -0.025, 0.122, 3, "hierarchical bootstrap: 3 seeds then 436 examples, t over "
                    "seeds (95%)", df=2)
    rule = combine([decide_above(gain), decide_above(loss)])
    by_part = assess(rule, (), 0.006, paper_part=0)
    assert f"underpowered: could detect ±{detectable_effect(gain):.4f}, the paper reports 0.006" in by_part.reason
    assert f"about {budget_to_decide(gain, 0.006)} seeds" in by_part.reason
    assert budget_to_decide(gain, 0.006) < budget_to_decide(loss, 0.006)
    widest = assess(rule, (), 0.006)  # no part named: the widest open part, as for ghost's two gains
    assert f"could detect ±{detectable_effect(loss):.4f}, the paper reports" in widest.reason
    decided = Estimate("gain", 0.02, 0.01, 0.03, 3, "paired t over 3 seeds (95%)", df=2)
    quiet = assess(combine([decide_above(decided), decide_above(loss)]), (), 0.006, paper_part=0)
    assert quiet.outcome == INCONCLUSIVE and "underpowered" not in quiet.reason
    from ptmlab.studies.dashboard import Entry

    parts = [Verdict.part_dict(p) for p in rule.parts]
    entry = Entry("s", INCONCLUSIVE, "c", "src", detectable_effect=detectable_effect(loss), paper_effect=0.006,
                  parts=parts, paper_part=0)
    assert entry.power_text().startswith("underpowered: could detect ±")
    closed = Entry("s", INCONCLUSIVE, "c", "src", detectable_effect=detectable_effect(loss), paper_effect=0.006,
                   parts=[{**parts[0], "outcome": SUPPORTED}, parts[1]], paper_part=0)
    assert not closed.power_text().startswith("underpowered")
