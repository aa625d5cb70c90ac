"""The decision rules of the studies (``decide`` in each module) on synthetic numbers: every outcome is reachable,
selection is made on one half of the dev examples and tested on the other, and noise keeps a claim inconclusive.
Also the budgets (``--budget full`` presets three seeds), the seed helpers and the spread-out unfreezing schedule."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ptmlab.studies.verdict import INCONCLUSIVE, NOT_SUPPORTED, SUPPORTED

RNG = np.random.default_rng(0)


def coin(p: float, n: int = 600, seed: int | None = None) -> np.ndarray:
    """n examples, each correct with probability p (seeded)."""
    rng = RNG if seed is None else np.random.default_rng(seed)
    return (rng.random(n) < p).astype(float)


def flip(x: np.ndarray, k: int) -> np.ndarray:
    """``x`` with its first k wrong examples made right (a tiny, paired improvement)."""
    y = x.copy()
    y[np.flatnonzero(y == 0)[:k]] = 1
    return y


# ------------------------------------------------------------------------------------------------ helpers, budgets
MODULES = ["super_tickets", "distillation", "unfreezing", "attention_explanation", "anomaly", "random_init",
           "ablation", "ghost", "compression"]


@pytest.mark.parametrize("name", MODULES)
def test_each_study_states_its_claim_and_rule_before_code(name):
    import importlib

    from ptmlab.studies import STUDIES, load_all
    from ptmlab.studies.verdict import Claim

    load_all()
    mod = importlib.import_module(f"ptmlab.studies.{name}")
    claims = [mod.CLAIM, *getattr(mod, "CLAIMS", {}).values()]
    doc = " ".join(mod.__doc__.split())
    for claim in claims:
        assert isinstance(claim, Claim) and claim.study in STUDIES.names()
        assert claim.claim and claim.source and claim.paper and len(claim.rule) > 80
        assert " ".join(claim.rule.split()) in doc  # the docstring carries the rule in the same words
        assert all(word in claim.rule.lower() for word in ("supported", "not supported", "inconclusive"))
    assert callable(mod.decide)


def test_budget_full_presets_three_seeds_and_small_keeps_one():
    from ptmlab.studies.common import parse_study_args, seed_list
    from ptmlab.studies.unfreezing import FULL, UnfreezingArgs

    full = parse_study_args("unfreezing", UnfreezingArgs, ["--budget", "full"], full=FULL)
    assert seed_list(full) == [0, 1, 2] and full.max_eval == 0
    small = parse_study_args("unfreezing", UnfreezingArgs, ["--budget", "small", "--seed", "4"], full=FULL)
    assert seed_list(small) == [4]
    given = parse_study_args("unfreezing", UnfreezingArgs, ["--budget", "full", "--seeds", "5,6,7,8"], full=FULL)
    assert seed_list(given) == [5, 6, 7, 8]


def test_seed_list_rejects_bad_seeds():
    from ptmlab.core.errors import PtmlabError
    from ptmlab.studies.common import parse_study_args, seed_list
    from ptmlab.studies.unfreezing import UnfreezingArgs

    for bad, needle in (("0,x", "not a list of integers"), ("1,1", "repeats a seed")):
        with pytest.raises(PtmlabError, match=needle):
            seed_list(parse_study_args("unfreezing", UnfreezingArgs, ["--seeds", bad]))


def test_dev_correct_reads_predictions_and_choose_then_test_splits_by_position(tmp_path):
    from ptmlab.studies.common import choose_then_test, dev_correct, seed_dir

    (tmp_path / "predictions_dev.json").write_text(json.dumps({"kind": "classification", "pred": [1, 0, 2, 1],
                                                               "gold": [1, 1, 2, 0], "labels": None, "ids": []}))
    assert dev_correct(tmp_path) == [1.0, 0.0, 1.0, 0.0]
    assert dev_correct(tmp_path / "absent") is None
    assert seed_dir(tmp_path, "v", 3, [3]) == tmp_path / "v" and seed_dir(tmp_path, "v", 3, [1, 3]).name == "seed-3"
    # "lucky" wins only on the even (choosing) positions, "steady" is better on both halves but less on the even one
    base = [[0.0, 0.0] * 200] * 3
    lucky = [[1.0, 0.0] * 200] * 3
    steady = [[1.0, 1.0] * 150 + [0.0, 1.0] * 50] * 3
    chosen, choose, est = choose_then_test({"lucky": lucky, "steady": steady}, base, "gain")
    assert chosen == "lucky" and choose == {"lucky": 1.0, "steady": 0.75}
    assert est.value == 0.0 and est.n == 3  # tested on the odd positions only, where lucky has nothing
    assert "hierarchical" in est.method and "200 examples" in est.method  # seeds, then the 200 held-out examples


def test_unfreezing_is_spread_over_the_whole_budget():
    from ptmlab.models.zoo import load_model
    from ptmlab.train.args import FinetuneConfig
    from ptmlab.train.strategies import make_strategy, trainable_parameters, unfreeze_every, unfreeze_schedule

    cfg = FinetuneConfig(strategy="gradual-unfreeze", epochs=3)
    assert unfreeze_every(cfg, 63, 8) == 23  # minilm: 8 groups over 189 steps, not one per epoch
    sched = unfreeze_schedule(["head", "layer.1", "layer.0", "embeddings"], 7)
    assert [s["from_step"] for s in sched] == [0, 7, 14, 21]
    model = load_model("tiny", num_labels=2)
    strat = make_strategy(cfg)
    strat.prepare(model)
    total = sum(p.numel() for p in model.parameters())
    strat.update(model, 0, 0, 10)
    head_only = trainable_parameters(model)
    strat.update(model, 29, 2, 10)  # the last step of 3 epochs x 10 steps: every group trains
    assert head_only < total and trainable_parameters(model) == total
    assert unfreeze_every(FinetuneConfig(unfreeze_every=5), 10, 4) == 5


# ---------------------------------------------------------------------------------------------------- studies
def test_super_tickets_every_outcome_and_honest_selection():
    from ptmlab.studies.super_tickets import decide

    unpruned = [coin(0.7, seed=s) for s in (1, 2, 3)]  # three seeds: the interval is over seeds, then examples
    good = {0.0: unpruned, 0.3: [np.maximum(u, coin(0.5, seed=10 + i)) for i, u in enumerate(unpruned)],
            0.6: [u * coin(0.5, seed=20 + i) for i, u in enumerate(unpruned)]}
    v, chosen, held = decide(good)
    assert v.outcome == SUPPORTED and chosen == 0.3 and held[0.3] > 0 > held[0.6]
    bad = {0.0: unpruned, 0.3: [u * coin(0.6, seed=30 + i) for i, u in enumerate(unpruned)],
           0.6: [u * coin(0.5, seed=40 + i) for i, u in enumerate(unpruned)]}
    assert decide(bad)[0].outcome == NOT_SUPPORTED
    # the reported case: a ticket 2 examples better on each seed -> cannot decide
    tie = {0.0: unpruned, 0.5: [flip(u, 2) for u in unpruned],
           0.7: [u * coin(0.5, seed=50 + i) for i, u in enumerate(unpruned)]}
    v, chosen, _ = decide(tie)
    assert v.outcome == INCONCLUSIVE and chosen == 0.5
    # one seed: no seed-level interval, whatever the examples say
    assert decide({k: c[:1] for k, c in good.items()})[0].outcome == INCONCLUSIVE
    # no ratio above the chosen one: the phase transition is untested, never assumed
    v, _, _ = decide({0.0: unpruned, 0.3: good[0.3]})
    assert v.outcome == INCONCLUSIVE and "not tested" in v.reason


def test_distillation_every_outcome_without_agreement_tiebreak():
    from ptmlab.studies.distillation import decide

    alone = [coin(0.6, seed=s) for s in (1, 2, 3)]
    better = [np.maximum(a, coin(0.4, seed=10 + i)) for i, a in enumerate(alone)]
    worse = [a * coin(0.7, seed=20 + i) for i, a in enumerate(alone)]
    v, chosen = decide({"none": alone, "soft_ce": better, "pkd": worse})
    assert v.outcome == SUPPORTED and chosen == "soft_ce"
    assert decide({"none": alone, "pkd": worse})[0].outcome == NOT_SUPPORTED
    same = [flip(a, 1) for a in alone]  # a tie: formerly decided by agreement with the teacher
    assert decide({"none": alone, "soft_ce": same})[0].outcome == INCONCLUSIVE
    assert decide({"soft_ce": same})[0].outcome == INCONCLUSIVE


def test_unfreezing_is_non_inferiority_and_reaches_every_answer():
    """Full fine-tuning "does as well" when gradual unfreezing's gain has a one-sided 95% upper bound below the
    0.01 margin: a clearly trailing gradual unfreezing supports the claim (the committed case: -0.0169 [-0.0254,
    -0.0085] over nine seeds, upper bound -0.0101), a clear gain beyond the margin refutes it, noise leaves it open."""
    from ptmlab.studies.unfreezing import decide
    from ptmlab.studies.verdict import one_sided_bound

    full = [0.800, 0.810, 0.805]
    assert decide({"full": full, "gradual-unfreeze": [0.801, 0.809, 0.806]}, "accuracy").outcome == SUPPORTED
    assert decide({"full": full, "gradual-unfreeze": [0.850, 0.862, 0.856]}, "accuracy").outcome == NOT_SUPPORTED
    collapse = decide({"full": full, "gradual-unfreeze": [0.694, 0.690, 0.700]}, "accuracy")
    assert collapse.outcome == SUPPORTED and "schedule" in collapse.reason  # trailing: full does at least as well
    assert decide({"full": [0.80], "gradual-unfreeze": [0.80]}, "accuracy").outcome == INCONCLUSIVE  # one seed
    open_ = decide({"full": full, "gradual-unfreeze": [0.78, 0.83, 0.80]}, "accuracy")
    assert open_.outcome == INCONCLUSIVE and open_.paper_effect == 0.01  # the margin: the power note's yardstick
    # the committed numbers: nine seeds, gradual minus full -0.0169, one-sided upper bound -0.0101 < +0.01
    committed = {"full": [0.8406, 0.805, 0.8314, 0.8188, 0.82, 0.8154, 0.8085, 0.8257, 0.8096],
                 "gradual-unfreeze": [0.8108, 0.797, 0.8028, 0.7867, 0.8096, 0.7959, 0.8073, 0.8142, 0.7982]}
    v = decide(committed, "accuracy")
    assert v.outcome == SUPPORTED and v.thresholds == (0.01,)
    assert one_sided_bound(v.estimate, "upper") < v.estimate.high < 0.01


def test_random_init_every_outcome_and_degenerate_ties_do_not_decide():
    from ptmlab.studies.random_init import decide

    win = {"sst2": {"pretrained": [0.82, 0.83, 0.81], "random": [0.58, 0.60, 0.57]},
           "cola": {"pretrained": [0.0, 0.0, 0.0], "random": [0.0, 0.0, 0.0]}}
    v = decide(win)
    assert v.outcome == SUPPORTED and "cola" in v.reason  # a 0/0 tie is flagged, not a loss
    lose = {"rte": {"pretrained": [0.50, 0.51, 0.49], "random": [0.55, 0.56, 0.57]}}
    assert decide(lose).outcome == NOT_SUPPORTED
    mixed = {"rte": {"pretrained": [0.52, 0.56, 0.50], "random": [0.55, 0.51, 0.53]}}
    assert decide(mixed).outcome == INCONCLUSIVE
    assert decide({"sst2": {"pretrained": [0.9], "random": [0.5]}}).outcome == INCONCLUSIVE  # one seed


def _explanations(tau: float, tau_spread: float, grad_loo: float, tvd: float, n: int, seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    keys = ("tau_last_grad", "tau_last_loo", "tau_mean_grad", "tau_mean_loo")
    return [{**{k: float(np.clip(tau + tau_spread * rng.standard_normal(), -1, 1)) for k in keys},
             "tau_grad_loo": float(np.clip(grad_loo + 0.1 * rng.standard_normal(), -1, 1)),
             "permutation_tvd": float(abs(tvd + 0.02 * rng.standard_normal()))} for _ in range(n)]


def test_attention_explanation_every_outcome_uses_the_permutation_part():
    from ptmlab.studies.attention_explanation import decide

    assert decide(_explanations(0.10, 0.1, 0.6, 0.01, 200, 0)).outcome == SUPPORTED
    assert decide(_explanations(0.70, 0.1, 0.3, 0.01, 200, 1)).outcome == NOT_SUPPORTED
    assert decide(_explanations(0.30, 0.4, 0.3, 0.01, 20, 2)).outcome == INCONCLUSIVE
    # weak agreement alone is not enough: permuting attention moves every output
    moved = decide(_explanations(0.10, 0.1, 0.6, 0.30, 200, 3))
    assert moved.outcome == NOT_SUPPORTED and "TVD" in moved.reason


def _peaked(peak: int, n: int, seed: int, layers: int = 7, high: float = 0.85, low: float = 0.55) -> np.ndarray:
    rng = np.random.default_rng(seed)
    p = np.full(layers, low)
    p[peak] = high
    return (rng.random((n, layers)) < p).astype(float)


def test_anomaly_every_outcome_and_ties_are_not_earlier():
    from ptmlab.studies.anomaly import decide, split_phenomena

    flat_commonsense = (np.random.default_rng(9).random((400, 7)) < 0.5).astype(float)
    assert decide(_peaked(1, 300, 0), _peaked(4, 300, 1), flat_commonsense).outcome == SUPPORTED
    later = decide(_peaked(4, 300, 2), _peaked(1, 300, 3), flat_commonsense)
    assert later.outcome == NOT_SUPPORTED
    tie = decide(_peaked(2, 300, 4), _peaked(2, 300, 5), flat_commonsense)
    assert tie.outcome == NOT_SUPPORTED and "no earlier" in tie.reason  # formerly a tie counted as "earlier"
    noisy = decide(_peaked(1, 20, 6, high=0.6), _peaked(3, 20, 7, high=0.6), flat_commonsense)
    assert noisy.outcome == INCONCLUSIVE
    # commonsense anomalies clearly detected -> that part of the claim fails
    assert decide(_peaked(1, 300, 0), _peaked(4, 300, 1), _peaked(3, 400, 8, high=0.9)).outcome == NOT_SUPPORTED
    assert decide(None, None, None).outcome == INCONCLUSIVE
    dev, held = split_phenomena(["c", "a", "b", "d", "a"])
    assert dev == {"a", "c"} and held == {"b", "d"}


def test_ablation_every_outcome():
    from scipy import stats

    from ptmlab.studies.ablation import decide

    base = [coin(0.8, 500, seed=1)]
    harmless = {(0, h): [flip(base[0], h % 2)] for h in range(7)}
    helps = {(0, 7): [flip(base[0], 60)]}
    v, counts = decide(base, {**harmless, **helps}, 0.01)
    assert v.outcome == SUPPORTED and counts["helpful"] == 1 and counts["harmless"] == 8
    low, high = counts["bounds"][(0, 7)]  # the helpful unit's interval lies above 0
    assert 0 < low < high and all(lo >= -0.02 for lo, _ in counts["bounds"].values())
    hurts = {(1, h): [base[0] * coin(0.7, 500, seed=10 + h)] for h in range(4)}
    v, counts = decide(base, {**harmless, **hurts}, 0.01, "head")
    assert v.outcome == NOT_SUPPORTED and counts["harmful"] == 4
    v, counts = decide(base, harmless, 0.01)  # harmless, a few flips up, none significant
    assert v.outcome == INCONCLUSIVE and counts["helpful"] == 0 and counts["raised"] > 0
    assert [p.name for p in v.parts] == ["rarely hurts", "sometimes helps"]
    assert v.reason.startswith("rarely hurts: supported: ") and "sometimes helps: inconclusive: " in v.reason
    assert decide([None], harmless, 0.01)[0].outcome == INCONCLUSIVE
    # what the run could detect, per part: three seeds' Bonferroni-level t quantile (2 df) dwarfs the 95% one
    seeds = [coin(0.8, 500, seed=s) for s in (1, 2, 3)]
    removed = {(0, h): [flip(b, 3 + h + k) for k, b in enumerate(seeds)] for h in range(8)}
    v, counts = decide(seeds, removed, 0.01)
    d = counts["detectable"]
    t = stats.t.ppf
    ratio = (t(1 - 0.05 / 16, 2) + t(0.8, 2)) / (t(0.975, 2) + t(0.8, 2))  # Bonferroni over 8 units, 2 df
    assert 0 < d["per_unit_95"] < 0.05 and d["per_unit_bonferroni"] == pytest.approx(ratio * d["per_unit_95"])
    assert d["per_unit_one_sided"] < d["per_unit_95"]  # part 1 is one-sided
    assert v.outcome == INCONCLUSIVE and v.detectable_effect == d["per_unit_bonferroni"]
    assert "could detect" in v.reason


def test_ablation_not_supported_needs_intervals_that_exclude_the_claim():
    """"Sometimes helps" is refuted only when every unit's one-sided upper bound lies below 0: no unit raising
    accuracy on average (the committed layer-ablation case, 0 of 12) is no evidence against it while the intervals
    reach above 0."""
    from ptmlab.studies.ablation import decide_units
    from ptmlab.studies.verdict import Estimate

    def unit(value, half, n=3):
        return Estimate("u", value, value - half, value + half, n, "hierarchical bootstrap (95%)", n - 1)

    wide = {(k,): unit(-0.01 - 0.001 * k, 0.05) for k in range(12)}  # every mean below 0, every interval across 0
    v, counts = decide_units(wide, 3, 0.01, "layer")
    assert counts["raised"] == 0 and counts["lowered"] == 0
    assert v.parts[1].outcome == INCONCLUSIVE and v.outcome == INCONCLUSIVE
    tight = {(k,): unit(-0.02, 0.005) for k in range(12)}  # every removal shown to cost accuracy
    v, counts = decide_units(tight, 3, 0.01, "layer")
    assert counts["lowered"] == 12 and v.parts[1].outcome == NOT_SUPPORTED
    assert v.parts[0].outcome == NOT_SUPPORTED and counts["harmful"] == 12  # -0.02 +- 0.005: below -0.01 each
    one_up = {**tight, (3,): unit(0.2, 0.01)}  # one removal clearly helps, even after Bonferroni
    assert decide_units(one_up, 3, 0.01, "layer")[0].parts[1].outcome == SUPPORTED


def test_ablation_split_design_every_outcome():
    """``--helps split``: the unit that helps most on even positions is tested alone on odd ones at 95%."""
    from ptmlab.studies.ablation import decide

    seeds = [coin(0.8, 600, seed=s) for s in (1, 2, 3)]
    harmless = {(0, h): [flip(b, 1 + (h + k) % 2) for k, b in enumerate(seeds)] for h in range(6)}

    def wrong_at(b, parity, k):  # b with its first k wrong examples at even (0) or odd (1) positions made right
        y = b.copy()
        idx = [i for i in np.flatnonzero(y == 0) if i % 2 == parity][:k]
        y[idx] = 1
        return y

    helps = {(1, 0): [wrong_at(wrong_at(b, 0, 30), 1, 30 + k) for k, b in enumerate(seeds)]}
    v, counts = decide(seeds, {**harmless, **helps}, 0.01, "head", "split")
    h = counts["helps"]
    assert h["design"] == "split" and h["chosen"] == [1, 0] and h["choosing_gain"] > 0.09
    assert v.outcome == SUPPORTED and h["held_out"]["low"] > 0 and counts["helpful"] == 1
    # the best unit on the choosing half helps only there: its held-out change is 0 everywhere -- not shown
    lucky = {(1, 0): [wrong_at(b, 0, 30) for b in seeds]}
    v, counts = decide(seeds, {**harmless, **lucky}, 0.01, "head", "split")
    assert counts["helps"]["chosen"] == [1, 0] and v.outcome == INCONCLUSIVE
    assert counts["helps"]["held_out"]["value"] == 0 and counts["helpful"] == 0
    # the chosen unit hurts on the held-out half: not supported
    turn = {(1, 0): [wrong_at(b, 0, 30) * np.where(np.arange(600) % 2 == 1, coin(0.8, 600, seed=9 + k), 1)
                     for k, b in enumerate(seeds)]}
    v, _ = decide(seeds, {**harmless, **turn}, 0.01, "head", "split")
    assert v.outcome == NOT_SUPPORTED
    # no removal raises accuracy on the choosing half: the held-out interval decides, never the point values (a
    # chosen unit that changes nothing has no spread and stays open)
    same = {(0, h): [b.copy() for b in seeds] for h in range(3)}
    v, counts = decide(seeds, same, 0.01, "head", "split")
    assert v.parts[1].outcome == INCONCLUSIVE and counts["helps"]["choosing_gain"] == 0
    with pytest.raises(ValueError, match="unknown part-2 design"):
        decide(seeds, same, 0.01, "head", "holm")


def test_ghost_every_outcome():
    from ptmlab.studies.ghost import decide

    pruned = [coin(0.6, seed=s) for s in (1, 2, 3)]
    equal = [coin(0.62, seed=s) for s in (4, 5, 6)]
    strong = [np.maximum(np.maximum(p, e), coin(0.5, seed=7 + i))
              for i, (p, e) in enumerate(zip(pruned, equal, strict=True))]
    assert decide({"pruned": pruned, "ghost": strong, "equal": equal}).outcome == SUPPORTED
    weak = [p * coin(0.6, seed=10 + i) for i, p in enumerate(pruned)]
    assert decide({"pruned": pruned, "ghost": weak, "equal": equal}).outcome == NOT_SUPPORTED
    same = [flip(p, 1) for p in pruned]
    assert decide({"pruned": pruned, "ghost": same, "equal": pruned}).outcome == INCONCLUSIVE
    # one seed: no seed-level interval
    assert decide({"pruned": pruned[:1], "ghost": strong[:1], "equal": equal[:1]}).outcome == INCONCLUSIVE


def test_compression_every_outcome():
    """Each part of the claim (half the layer parameters; 8-bit weights) is decided on its own methods: one that
    keeps accuracy never carries the other (the committed case: int8 supported, every half-layer method not)."""
    from ptmlab.studies.compression import decide

    base = [coin(0.85, 800, seed=s) for s in (1, 2, 3)]
    v, chosen = decide({"none": base, "torch-int8": [b.copy() for b in base],
                        "share": [b * coin(0.5, 800, seed=20 + i) for i, b in enumerate(base)]})
    assert chosen == {"half the layer parameters": "share", "8-bit weights": "torch-int8"}
    assert [p.name for p in v.parts] == ["half the layer parameters", "8-bit weights"]
    assert [p.outcome for p in v.parts] == [NOT_SUPPORTED, SUPPORTED] and v.outcome == NOT_SUPPORTED
    both = decide({"none": base, "torch-int8": [b.copy() for b in base], "prune": [b.copy() for b in base]})[0]
    assert both.outcome == SUPPORTED and all(p.thresholds == (-0.01,) for p in both.parts)
    shared = [b * coin(0.7, 800, seed=30 + i) for i, b in enumerate(base)]
    only_half = decide({"none": base, "share": shared})[0]
    assert only_half.outcome == NOT_SUPPORTED and only_half.parts[1].outcome == INCONCLUSIVE  # 8-bit did not run
    base = base[0]
    small = base[:200]
    lossy = small.copy()
    lossy[np.flatnonzero(small == 1)[:4]] = 0  # about two points lost on the odd half of 200: unresolved
    assert decide({"none": [small], "prune": [lossy]}, 0.01)[0].parts[0].outcome == INCONCLUSIVE
    # three seeds of the same loss resolve it at the seed level; one seed never does
    seeds = [coin(0.85, 400, seed=s) for s in (4, 5, 6)]
    worse = [b * coin(0.7, 400, seed=10 + i) for i, b in enumerate(seeds)]  # about 25 points lost
    assert decide({"none": seeds[:1], "prune": worse[:1]})[0].parts[0].outcome == INCONCLUSIVE
    assert decide({"none": seeds, "prune": worse})[0].parts[0].outcome == NOT_SUPPORTED
