"""The verdict rules of the extraction, tokenizer, long-input, pre-training, distillation, scaling and data-quality
studies on synthetic numbers: each study's ``decide`` reaches every outcome (supported, not supported,
inconclusive), one seed never decides, and each module states its claim and rule before any code."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

from ptmlab.studies.verdict import INCONCLUSIVE, NOT_SUPPORTED, SUPPORTED, Claim

S, N, I = SUPPORTED, NOT_SUPPORTED, INCONCLUSIVE
MODULES = ["extraction", "tokenizers", "long_attention", "objectives", "span_corruption", "domain_adaptation",
           "tokenizers_downstream", "multilingual", "meta_kd", "scaling", "data_quality"]


@pytest.mark.parametrize("name", MODULES)
def test_each_study_states_its_claim_and_rule_before_code(name):
    from ptmlab.studies import STUDIES

    mod = importlib.import_module(f"ptmlab.studies.{name}")
    claim = mod.CLAIM
    assert isinstance(claim, Claim) and claim.study in STUDIES.names()  # the name it is registered under
    assert claim.claim and claim.source and claim.paper and len(claim.rule) > 80
    doc = " ".join(mod.__doc__.split())
    assert " ".join(claim.rule.split()) in doc  # the docstring carries the rule in the same words
    assert all(word in claim.rule.lower() for word in ("supported", "not supported", "inconclusive"))
    assert callable(mod.decide)


# ------------------------------------------------------------------------------------------------ pre-training
@pytest.mark.parametrize("scores,outcome", [
    ({"x": [0.80, 0.82, 0.81], "y": [0.70, 0.71, 0.72], "z": [0.60, 0.70, 0.66]}, S),  # every paired gain > 0
    ({"x": [0.80, 0.82, 0.81], "y": [0.78, 0.86, 0.80]}, I),  # gains +.02 -.04 +.01: interval includes 0
    ({"x": [0.70, 0.72, 0.71], "y": [0.80, 0.81, 0.82], "z": [0.60, 0.62, 0.61]}, N),  # y beats x every seed
    ({"x": [0.90], "y": [0.10]}, I),  # one seed: no interval
])
def test_compare_rivals_every_outcome(scores, outcome):
    from ptmlab.studies.pretrain_common import compare_rivals

    v = compare_rivals(scores, "x")
    assert v.outcome == outcome, v.reason
    assert v.estimate is not None and v.estimate.n == len(scores["x"])


def test_compare_rivals_pairs_by_seed_not_by_spread():
    from ptmlab.studies.pretrain_common import compare_rivals

    # seeds move both variants together: the spreads overlap, but x wins on every seed by 0.01
    v = compare_rivals({"x": [0.61, 0.71, 0.81], "y": [0.60, 0.70, 0.80]}, "x")
    assert v.outcome == S and v.estimate.value == pytest.approx(0.01)


def test_compare_rivals_calls_a_tie_on_every_seed_inconclusive_even_against_a_margin():
    from ptmlab.studies.pretrain_common import compare_rivals
    from ptmlab.studies.span_corruption import decide as span_decide
    from ptmlab.studies.tokenizers_downstream import decide as tok_decide

    # every fine-tuned model predicts the majority class: the same dev score for every variant on each seed
    tie = {"x": [0.5092, 0.5092, 0.4908], "y": [0.5092, 0.5092, 0.4908], "z": [0.5092, 0.5092, 0.4908]}
    for threshold in (0.0, -0.01):  # a non-inferiority margin would otherwise call the tie "supported"
        v = compare_rivals(tie, "x", threshold)
        assert v.outcome == I and "does not separate" in v.reason and "0.5092" in v.reason, v.reason
        assert v.estimate is not None and v.estimate.value == 0
    # one variant apart on one seed is no longer a tie: the ordinary rule decides
    assert compare_rivals({**tie, "x": [0.5092, 0.5092, 0.4910]}, "x", -0.01).outcome == S
    for v in (span_decide({"0.15/3": tie["x"], "0.3/3": tie["y"]}),
              tok_decide({"unigram": tie["x"], "bpe": tie["y"], "wordpiece": [0.6, 0.7, 0.8]})):
        assert v.outcome == I and "does not separate" in v.reason, v.reason


def test_objectives_decide():
    from ptmlab.studies.objectives import decide

    clear = {"electra": [0.80, 0.81, 0.82], "mlm": [0.70, 0.71, 0.71], "clm": [0.65, 0.66, 0.66]}
    assert decide(clear, 0.01).outcome == S
    assert decide({**clear, "mlm": [0.90, 0.91, 0.93]}, 0.01).outcome == N
    assert decide({**clear, "mlm": [0.79, 0.83, 0.80]}, 0.01).outcome == I
    assert decide({k: v[:1] for k, v in clear.items()}, 0.01).outcome == I  # --budget small: one seed
    v = decide(clear, 0.08)  # the same numbers at unequal FLOPs say nothing
    assert v.outcome == I and "8.0%" in v.reason


def test_span_corruption_decide_is_non_inferiority_within_a_point():
    from ptmlab.studies.span_corruption import decide

    rivals = {"0.15/1": [0.700, 0.720, 0.710], "0.5/3": [0.600, 0.610, 0.620]}
    assert decide({**rivals, "0.15/3": [0.702, 0.719, 0.712]}).outcome == S  # ties 0.15/1, beats 0.5/3
    assert decide({**rivals, "0.15/3": [0.620, 0.630, 0.640]}).outcome == N  # 0.15/1 is 8 points better
    assert decide({**rivals, "0.15/3": [0.690, 0.730, 0.680]}).outcome == I  # within a point? not resolved
    assert decide(rivals).outcome == I  # the claimed cell is not in the grid


def test_tokenizers_downstream_decide_compares_unigram_with_bpe_only():
    from ptmlab.studies.tokenizers_downstream import decide

    wp = {"wordpiece": [0.99, 0.99, 0.99]}  # reported, not part of the rule
    assert decide({"unigram": [0.80, 0.81, 0.80], "bpe": [0.80, 0.805, 0.801], **wp}).outcome == S  # matches
    assert decide({"unigram": [0.70, 0.72, 0.71], "bpe": [0.80, 0.81, 0.80], **wp}).outcome == N
    assert decide({"unigram": [0.75, 0.80, 0.70], "bpe": [0.76, 0.78, 0.77], **wp}).outcome == I


def test_domain_adaptation_decide():
    from ptmlab.studies.domain_adaptation import decide

    assert decide({"base": [0.80, 0.81, 0.79], "adapted": [0.84, 0.85, 0.84]}).outcome == S
    assert decide({"base": [0.84, 0.85, 0.84], "adapted": [0.80, 0.81, 0.79]}).outcome == N
    assert decide({"base": [0.80, 0.82, 0.79], "adapted": [0.81, 0.80, 0.80]}).outcome == I
    assert decide({"base": [0.50], "adapted": [0.90]}).outcome == I


def test_data_quality_decide():
    """Decided downstream: the fine-tuned gap decides, the held-out loss gap is reported beside it, and a tie on
    every seed (an interval [0, 0]) is inconclusive, never support."""
    from ptmlab.studies.data_quality import decide

    assert decide([0.20, 0.25, 0.22], [0.02, 0.03, 0.025]).outcome == S  # better downstream
    assert decide([-0.20, -0.25, -0.22], [0.02, 0.03, 0.025]).outcome == S  # the loss does not decide
    assert decide([0.20, 0.25, 0.22], [0.02, -0.01, 0.00]).outcome == I  # downstream within noise
    assert decide([0.20, 0.25, 0.22], [-0.05, -0.06, -0.055]).outcome == N  # raw is better downstream
    assert decide([0.30], [0.05]).outcome == I  # one seed
    same = decide([0.08, 0.07, 0.09], [0.0, 0.0, 0.0])  # every fine-tuned model equal: no evidence either way
    assert same.outcome == I and "does not separate" in same.reason and "secondary: held-out loss" in same.reason


# ------------------------------------------------------------------------------------------------ long inputs
def _cost_rows(sdpa: float, passes: list[float], longest: int = 8192) -> list[dict]:
    """Cost rows whose sdpa latency grows as n^(sdpa + noise of each pass), three timing passes kept."""
    lengths = [longest // 8, longest // 4, longest // 2, longest]
    return [{"impl": impl, "length": n, "latency_s": min(reps), "latency_reps": reps}
            for n in lengths for impl, reps in (
                ("sdpa", [(n / 1024) ** (sdpa + e) for e in passes]),
                ("window", [(n / 1024) ** (1.05 + e) for e in passes]))]


def test_long_attention_decide_combines_both_parts():
    """Q10's exponent is decided by its interval over repeated timing passes, one timing per length decides
    nothing; each part is named and shown."""
    from ptmlab.studies.long_attention import decide, exponent_interval

    acc = {"truncate": [0.40, 0.42, 0.41], "window": [0.60, 0.61, 0.62]}
    steep = exponent_interval(_cost_rows(1.9, [0.0, 0.02, -0.02]), "sdpa")
    assert steep.n == 3 and steep.low > 1.5 and "repeated timing passes" in steep.method
    v = decide(1.9, 8192, 1.05, acc, sdpa_interval=steep)
    assert v.outcome == S and v.estimate.value == pytest.approx(0.20)
    assert [p.name for p in v.parts] == ["Q10", "Q11"] and v.reason.startswith("Q10: supported: ")
    flat = exponent_interval(_cost_rows(1.1, [0.0, 0.01, -0.01]), "sdpa")
    assert decide(1.1, 8192, 1.05, acc, sdpa_interval=flat).outcome == N  # Q10 refuted: interval below 1.5
    reversed_acc = {"truncate": acc["window"], "window": acc["truncate"]}
    assert decide(1.9, 8192, 1.05, reversed_acc, sdpa_interval=steep).outcome == N
    assert decide(1.9, 8192, 1.05, {"truncate": [0.4], "window": [0.6]}, sdpa_interval=steep).outcome == I
    noisy = exponent_interval(_cost_rows(1.5, [0.0, 0.3, -0.3]), "sdpa")
    assert decide(1.5, 8192, 1.05, acc, sdpa_interval=noisy).parts[0].outcome == I  # straddles 1.5
    alone = decide(1.9, 8192, 1.05, acc)  # one timing per length: no interval, Q10 open
    assert alone.parts[0].outcome == I and "no interval over repeated timings" in alone.parts[0].reason
    assert exponent_interval([{k: v for k, v in r.items() if k != "latency_reps"}
                              for r in _cost_rows(1.9, [0.0, 0.1])], "sdpa") is None


# ------------------------------------------------------------------------------------------------ distillation
def _metakd_rows(meta: list[float], single: list[float], pooled: list[float]) -> list[dict]:
    return [{"seed": s, "domain": d, "single_kd": single[s], "pooled_kd": pooled[s], "meta_kd": meta[s]}
            for s in range(len(meta)) for d in ("a", "b")]


def test_meta_kd_decide():
    from ptmlab.studies.meta_kd import decide, method_scores

    assert decide(method_scores(_metakd_rows([0.85, 0.86, 0.85], [0.80, 0.81, 0.80], [0.81, 0.82, 0.82]))).outcome == S
    assert decide(method_scores(_metakd_rows([0.75, 0.76, 0.75], [0.80, 0.81, 0.80], [0.74, 0.74, 0.73]))).outcome == N
    assert decide(method_scores(_metakd_rows([0.85, 0.70, 0.86], [0.80, 0.81, 0.80], [0.81, 0.82, 0.82]))).outcome == I
    assert decide(method_scores(_metakd_rows([0.95], [0.80], [0.81]))).outcome == I  # one seed
    assert decide(method_scores([{"seed": 0, "domain": "a", "meta_kd": 0.9}])).outcome == I  # parts missing


def _ml_rows(model, seed, held_out, dev, sts):
    rows = [{"model": model, "seed": seed, "part": "report", "set": f"newstest:{lang}:test:en->newstest:{lang}:test",
             "src_to_tgt": held_out, "tgt_to_src": held_out, "sts_spearman": None} for lang in ("de", "fr")]
    rows += [{"model": model, "seed": seed, "part": "dev", "set": f"val.en.gz->val.{lang}.gz", "src_to_tgt": dev,
              "tgt_to_src": dev, "sts_spearman": None} for lang in ("de", "fr")]
    rows[-1]["sts_spearman"] = sts
    return rows


def test_multilingual_decide_every_outcome_and_selection_on_dev():
    from ptmlab.studies.multilingual import choose_student, decide

    teacher = _ml_rows("teacher", "-", 10.0, 20.0, 0.85)

    def student(name, tatoeba, sts=(0.85, 0.85, 0.85), dev=50.0):
        return [r for s, (t, x) in enumerate(zip(tatoeba, sts, strict=True)) for r in _ml_rows(name, s, t, dev, x)]

    assert decide(teacher + student("copy", [40.0, 42.0, 41.0]), ["copy"]).outcome == S  # +31 points, STS kept
    assert decide(teacher + student("copy", [12.0, 13.0, 12.5]), ["copy"]).outcome == N  # gains under 20 points
    # +31 points in three directions but about +15 in one: every language and direction must gain 20 points
    one_short = teacher + student("copy", [40.0, 42.0, 41.0])
    for r in one_short:
        if r["model"] == "copy" and r["set"].startswith("newstest:fr"):
            r["tgt_to_src"] = 25.0 + 0.5 * r["seed"]
    v = decide(one_short, ["copy"])
    assert v.outcome == N and v.estimate.value == pytest.approx(15.5)  # the weakest direction is the one shown
    assert "fr -> en" in v.estimate.metric  # French queries finding their English translations
    assert decide(teacher + student("copy", [40.0, 42.0, 41.0], (0.70, 0.71, 0.70)), ["copy"]).outcome == N
    assert decide(teacher + student("copy", [40.0, 15.0, 30.0]), ["copy"]).outcome == I  # seeds disagree
    assert decide(teacher + student("copy", [40.0], (0.85,)), ["copy"]).outcome == I  # one seed
    no_sts = [{**r, "sts_spearman": None} for r in teacher + student("copy", [40.0, 42.0, 41.0])]
    assert decide(no_sts, ["copy"]).outcome == I  # English unmeasured
    # the student judged is the best on the development sets, whatever its Tatoeba numbers
    both = teacher + student("copy", [40.0, 42.0, 41.0], dev=30.0) + student("xlmr", [12.0, 13.0, 12.0], dev=60.0)
    assert choose_student(both, ["copy", "xlmr"]) == "xlmr"
    assert decide(both, ["copy", "xlmr"]).outcome == N


# ------------------------------------------------------------------------------------------------ scaling
def test_scaling_decide():
    from ptmlab.studies.scaling import decide

    q = {v: {"verdict": v, "reason": f"synthetic {v}"} for v in (S, N, I)}
    growth = {"a": 0.6, "a_stderr": 0.05, "n": 3}
    v = decide(q[S], q[S], 3, growth)
    assert v.outcome == S and v.estimate.low == pytest.approx(0.5) and v.estimate.high == pytest.approx(0.7)
    assert decide(q[S], q[N], 3).outcome == N
    assert decide(q[I], q[S], 2).outcome == I
    assert decide(q[S], q[S], 1).outcome == I  # one seed: the noise of the losses is unmeasured


# ------------------------------------------------------------------------------------------------ extraction
def test_extraction_decide_bootstraps_dev_agreement():
    from ptmlab.studies.extraction import decide

    assert decide(([1.0] * 970 + [0.0] * 30, 0.5), 1000).outcome == S  # 97% agreement, interval above 90%
    assert decide(([1.0] * 700 + [0.0] * 300, 0.5), 1000).outcome == N  # 70%
    assert decide(([1.0] * 45 + [0.0] * 5, 0.5), 1000).outcome == I  # 90% of 50 examples: the interval straddles
    v = decide(([1.0] * 970 + [0.0] * 30, 0.95), 1000)  # a victim that answers one label: agreement is trivial
    assert v.outcome == I and "constant copy" in v.reason
    assert decide(None, 1000).outcome == I
    rows = [{"strategy": "random", "budget": 1000, "defence": "label", "agreement": 0.6, "cost_to_users": "x"}]
    assert "label: 60.0%" in decide(([1.0] * 970 + [0.0] * 30, 0.5), 1000, rows).reason


def test_extraction_over_seeds_resamples_seeds_then_examples():
    """Several victim/copy seeds: the interval is a bootstrap over seeds, then examples, and seeds that disagree
    widen it past what the examples alone give; the per-example records give the verdict again."""
    from ptmlab.studies.evidence import pack_runs
    from ptmlab.studies.extraction import decide, restate

    seeds = [[1.0] * 930 + [0.0] * 70, [1.0] * 910 + [0.0] * 90, [1.0] * 950 + [0.0] * 50]
    v = decide((seeds, 0.5), 1000)
    assert "3 seeds then 1000 examples" in v.estimate.method and abs(v.estimate.value - 0.93) < 1e-9
    one = decide((seeds[0], 0.5), 1000).estimate
    assert v.estimate.high - v.estimate.low > one.high - one.low  # the seeds' spread is in the interval
    assert decide(([[1.0] * 990 + [0.0] * 10] * 3, 0.5), 1000).outcome == S
    record = {"largest_budget": 1000, "agreement_on": ["dev"], "rows": [],
              "evidence": {"agreement": pack_runs(seeds), "majority": [0.5, 0.52, 0.51]}}
    again = restate(record)
    assert again.outcome == v.outcome and again.estimate.value == v.estimate.value
    assert restate({"rows": []}) is None  # an earlier record without the per-example agreement


def test_extraction_agreement_pools_dev_and_test_examples(tmp_path):
    import json

    from ptmlab.studies.extraction import agreement

    (tmp_path / "predictions_dev.json").write_text(json.dumps({"victim": [0, 1, 1, 0], "copy": [0, 1, 0, 0]}))
    assert agreement(tmp_path, ["dev", "test"]) == (None, {"dev": 4})  # test asked for, not scored: no estimate
    (tmp_path / "predictions_test.json").write_text(json.dumps({"victim": [1] * 6, "copy": [1] * 5 + [0]}))
    (agree, majority), counts = agreement(tmp_path, ["dev", "test"])
    assert agree == [1.0, 1.0, 0.0, 1.0] + [1.0] * 5 + [0.0] and counts == {"dev": 4, "test": 6}
    assert majority == 0.8  # label 1 on 8 of the 10 examples of both splits
    (agree, majority), counts = agreement(tmp_path)
    assert agree == [1.0, 1.0, 0.0, 1.0] and majority == 0.5 and counts == {"dev": 4}


# ------------------------------------------------------------------------------------------------ tokenizers
def _counts(words, pieces, continued):
    return {"words": np.asarray(words, float), "pieces": np.asarray(pieces, float),
            "continued": np.asarray(continued, float)}


def test_tokenizers_decide_every_outcome():
    from ptmlab.studies.tokenizers import decide

    rng = np.random.default_rng(0)
    words = rng.integers(5, 15, size=400)
    mine = _counts(words, words * 1.2, words * 0.15)
    worse = _counts(words, words * 1.6, words * 0.40)  # the multilingual rival: more pieces, more continued
    assert decide({"en: joint": (mine, worse)}).outcome == S
    assert decide({"en: joint": (worse, mine)}).outcome == N
    e1, e2 = rng.normal(0, 3, size=400), rng.normal(0, 3, size=400)
    noisy = _counts(words, words * 1.2 + e1 - e1.mean(), words * 0.15 + e2 - e2.mean())  # no difference on average
    v = decide({"en: joint": (mine, noisy)})
    assert v.outcome == I and v.estimate.low < 0 < v.estimate.high
    assert decide({}).outcome == I


def test_tokenizers_sentence_counts_match_the_corpus_metrics():
    from ptmlab.studies.tokenizers import sentence_counts

    class Fake:  # pieces = ceil(len / 3) per word
        def encode_words(self, words):
            return [[0] * -(-len(w) // 3) for w in words]

    c = sentence_counts(Fake(), ["a bb ccc", "", "dddd eeeeeee"], False)
    assert c["words"].tolist() == [3, 2] and c["pieces"].tolist() == [3, 5] and c["continued"].tolist() == [0, 2]


@pytest.mark.parametrize("name", [m for m in MODULES if m not in ("extraction", "tokenizers")])
def test_full_budget_runs_at_least_three_seeds_and_small_one(name):
    mod = importlib.import_module(f"ptmlab.studies.{name}")
    assert len(mod.FULL["seeds"]) >= 3
    assert mod.SMALL["seeds"] == ["0"]  # --budget small: one seed, so seed-based rules say inconclusive
