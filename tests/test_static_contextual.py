"""Study ``static-vs-contextual``: the decision rule on synthetic numbers (every outcome), the pooled features against
hand computation on `tiny`, the linear head, task resolution without GLUE data, and the study at --budget small."""

import json

import numpy as np
import pytest
import torch

from ptmlab.core.errors import PtmlabError
from ptmlab.studies.static_contextual import decide, pooled_features, probe, resolve_tasks
from ptmlab.studies.verdict import INCONCLUSIVE, NOT_SUPPORTED, SUPPORTED


def runs(acc: float, n: int = 200, seeds: int = 3, offset: int = 0) -> list[list[float]]:
    """Per-seed 1/0 correctness with the given accuracy (deterministic)."""
    k = int(round(acc * n))
    return [[1.0 if (i + offset + s) % n < k else 0.0 for i in range(n)] for s in range(seeds)]


def test_claim_and_rule_are_stated_before_code():
    import ptmlab.studies.static_contextual as mod
    from ptmlab.studies import STUDIES, load_all

    load_all()
    assert mod.CLAIM.study in STUDIES.names() and mod.CLAIM.paper
    assert " ".join(mod.CLAIM.rule.split()) in " ".join(mod.__doc__.split())


def test_decide_every_outcome():
    better = {"static": runs(0.6), "contextual": runs(0.85)}
    worse = {"static": runs(0.85), "contextual": runs(0.6)}
    same = {"static": runs(0.7), "contextual": runs(0.7, offset=7)}
    v, est = decide({"sst2": better, "rte": better})
    assert v.outcome == SUPPORTED and est["sst2"].value == pytest.approx(0.25) and est["sst2"].low > 0
    assert decide({"sst2": worse})[0].outcome == NOT_SUPPORTED
    assert decide({"sst2": same})[0].outcome == INCONCLUSIVE
    assert decide({"sst2": better, "rte": worse})[0].outcome == NOT_SUPPORTED  # any task below 0
    assert decide({"sst2": better, "rte": same})[0].outcome == INCONCLUSIVE
    assert decide({"sst2": {"static": runs(0.6)}})[0].outcome == INCONCLUSIVE
    assert decide({})[0].outcome == INCONCLUSIVE
    # few examples cannot decide a small difference
    assert decide({"t": {"static": runs(0.6, n=10, seeds=1), "contextual": runs(0.7, n=10, seeds=1)}})[0].outcome \
        == INCONCLUSIVE


def test_cola_is_decided_by_mcc_not_accuracy():
    from ptmlab.studies.static_contextual import score

    n = 200
    gold = [[1 if i % 10 < 7 else 0 for i in range(n)] for _ in range(3)]  # 70% acceptable, as CoLA dev
    majority = [[float(g == 1) for g in seed] for seed in gold]  # always "acceptable": 0.70 accuracy, MCC 0
    # the same accuracy (0.70) with real signal: right on every unacceptable sentence, wrong on 30% + s of the rest
    signal = [[1.0 if g == 0 else float((i + s) % 7 >= 3) for i, g in enumerate(seed)] for s, seed in
              enumerate(gold)]
    assert score(majority[0], gold[0], "mcc") == pytest.approx(0.0)
    assert score(majority[0], gold[0], "accuracy") == pytest.approx(0.7)
    assert score(signal[0], gold[0], "mcc") > 0.3
    v, est = decide({"cola": {"static": majority, "contextual": signal}}, {"cola": gold})
    assert v.outcome == SUPPORTED and est["cola"].metric.startswith("cola: mcc gain")
    assert est["cola"].value == pytest.approx(np.mean([score(r, g, "mcc") for r, g in zip(signal, gold, strict=True)]))
    assert "hierarchical bootstrap: 3 seeds then 200 examples" in est["cola"].method  # the seeds differ
    # without the labels MCC cannot be computed: no verdict from accuracy instead
    assert decide({"cola": {"static": majority, "contextual": signal}})[0].outcome == INCONCLUSIVE


def test_mcc_gain_of_identical_seeds_keeps_the_dev_examples_noise():
    """With the whole training set every seed trains the same deterministic probe: a t interval over such seeds had
    no width. The MCC gain's interval then comes from the dev examples (one run), and shrinks as they grow."""
    from ptmlab.data.metrics import mcc

    def case(n: int):
        gold = [1 if i % 10 < 7 else 0 for i in range(n)]
        weak = [float(bool(i % 5) if g == 1 else i % 4 != 1) for i, g in enumerate(gold)]  # MCC about 0.36
        strong = [1.0 if (g == 1 or i % 3 == 0) else 0.0 for i, g in enumerate(gold)]  # about 0.51
        return gold, weak, strong

    gold, weak, strong = case(300)
    v, est = decide({"cola": {"static": [weak] * 3, "contextual": [strong] * 3}}, {"cola": [gold] * 3})
    e = est["cola"]
    preds = [[g if c else 1 - g for c, g in zip(r, gold, strict=True)] for r in (strong, weak)]
    assert e.value == pytest.approx(mcc(preds[0], gold) - mcc(preds[1], gold))
    assert e.high - e.low > 0.05 and e.df is None and e.n == 300  # examples, not three copies of one seed
    assert "one run" in e.method and v.outcome in (SUPPORTED, INCONCLUSIVE)
    assert v.outcome == (SUPPORTED if e.low > 0 else INCONCLUSIVE)
    gold4, weak4, strong4 = case(1200)
    e4 = decide({"cola": {"static": [weak4] * 3, "contextual": [strong4] * 3}}, {"cola": [gold4] * 3})[1]["cola"]
    assert e4.value == pytest.approx(e.value, abs=0.02)
    assert (e4.high - e4.low) == pytest.approx((e.high - e.low) / 2, rel=0.25)  # about 1/sqrt(n)


def _record(cola: dict[str, tuple[float, float] | None], sst2: dict[str, list[float]] | None = None) -> dict:
    """A results record of the current design: CoLA's systems as (MCC, lower end) recorded intervals."""
    rows = [{"task": "cola", "system": name, "metric": "mcc", "mcc": v[0], "per_seed": [v[0]] * 3}
            for name, v in cola.items() if v is not None]
    rows += [{"task": "sst2", "system": name, "metric": "accuracy", "accuracy": float(np.mean(ps)), "per_seed": ps}
             for name, ps in (sst2 or {}).items()]
    intervals = {"cola": {name: {"value": v[0], "low": v[1], "high": 2 * v[0] - v[1], "n": 1043,
                                 "method": "bootstrap over 1043 examples"} for name, v in cola.items() if v}}
    return {"tasks": ["cola"] + (["sst2"] if sst2 else []), "rows": rows, "mcc_intervals": intervals,
            "run": {"command": "ptmlab study static-vs-contextual --budget full", "budget": "full",
                    "seeds": [0, 1, 2]}}


def test_validity_asks_the_fine_tuned_model_and_one_frozen_system_above_chance():
    from ptmlab.studies.static_contextual import validity

    def met(record):
        return [c.met for c in validity(record)]

    # static at chance beside contextual above it: the claim's own case, testable
    assert met(_record({"static": (0.02, -0.04), "contextual": (0.10, 0.05), "finetuned": (0.3, 0.25)})) == \
        [True, True]
    # both frozen systems at chance: a tie of constant predictors
    both = validity(_record({"static": (0.02, -0.04), "contextual": (0.03, -0.01), "finetuned": (0.3, 0.25)}))
    assert [c.met for c in both] == [True, False] and both[1].value == pytest.approx(-0.01)
    assert "static -0.0400, contextual -0.0100" in both[1].condition
    # the fine-tuned model stuck at the majority class: the budget does not learn the task
    stuck = validity(_record({"static": (0.02, -0.04), "contextual": (0.10, 0.05), "finetuned": (0.0, 0.0)}))
    assert not stuck[0].met and "finetuned" in stuck[0].condition
    # not fine-tuned at all: not established
    none = validity(_record({"static": (0.02, -0.04), "contextual": (0.10, 0.05), "finetuned": None}))
    assert none[0].value is None and not none[0].met


def test_a_record_without_mcc_intervals_is_judged_from_its_seeds():
    """The earlier design's record (no per-example intervals) keeps its t interval over seeds: identical seeds at
    0.0194 pass, the fine-tuned model's MCC 0 does not."""
    from ptmlab.studies.static_contextual import restate, validity

    record = _record({"static": (0.0194, 0.0), "contextual": (0.0708, 0.0), "finetuned": (0.0, 0.0)})
    del record["mcc_intervals"]
    conds = validity(record)
    assert [c.met for c in conds] == [False, True] and conds[1].value == pytest.approx(0.0708)
    assert restate(record) is not None
    assert restate({**record, "mcc_intervals": {}}) is None  # the current design's rule stands as recorded


def test_pooled_features_match_hand_computation():
    from ptmlab.data.encode import Encoded
    from ptmlab.models.zoo import load_model, load_tokenizer

    torch.manual_seed(0)
    model, tok = load_model("tiny", num_labels=2).eval(), load_tokenizer("tiny")
    texts = ["a good film", "the plot was dull and far too long for anyone"]
    ids = [tok(t)["input_ids"] for t in texts]
    enc = Encoded(ids, None, [0, 1])
    special = set(tok.all_special_ids)
    static, ctx = pooled_features(model, enc, tok.pad_token_id, special)
    assert static.shape == ctx.shape == (2, 64)
    words = model.bert.embeddings.word_embeddings.weight
    plain = [t for t in ids[0] if t not in special]
    assert np.allclose(static[0], words[plain].mean(0).detach().numpy(), atol=1e-5)
    with torch.no_grad():
        hidden = model.bert(input_ids=torch.tensor([ids[0]]))[0][0]
    keep = torch.tensor([t not in special for t in ids[0]])
    assert np.allclose(ctx[0], hidden[keep].mean(0).numpy(), atol=1e-4)  # padding in the batch changes nothing
    assert not np.allclose(static[0], ctx[0], atol=1e-2)
    alone_static, alone_ctx = pooled_features(model, Encoded(ids[:1], None, [0]), tok.pad_token_id, special)
    assert np.allclose(alone_ctx[0], ctx[0], atol=1e-4) and np.allclose(alone_static[0], static[0], atol=1e-6)


def test_probe_learns_a_separable_problem():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(80, 5))
    y = (x[:, 0] + 0.5 * x[:, 1] > 0).astype(int)
    correct = probe(x[:60], y[:60], x[60:], y[60:])
    assert len(correct) == 20 and np.mean(correct) >= 0.9  # L2 strength chosen by cross-validation
    assert np.mean(probe(x[:60], y[:60], x[60:], y[60:], c=1.0)) >= 0.9  # a fixed one
    with pytest.raises(PtmlabError, match="one label"):
        probe(x[:10], np.zeros(10), x[60:], y[60:])


def test_cross_fit_never_scores_a_sentence_with_a_probe_that_trained_on_it():
    """One-hot features let a probe memorise its training rows: scored on them it is right nearly everywhere, scored
    cross-fitted it is at chance. A learnable signal survives cross-fitting; the folds do not depend on anything
    but the data."""
    from ptmlab.studies.static_contextual import cross_fit

    rng = np.random.default_rng(0)
    n = 120
    memorise, y = np.eye(n), rng.integers(0, 2, size=n)
    assert np.mean(probe(memorise, y, memorise, y, c=10.0)) > 0.95  # in-sample: memorised
    held_out = cross_fit(memorise, y, 5, c=10.0)
    assert len(held_out) == n and 0.3 < np.mean(held_out) < 0.7
    x = rng.normal(size=(n, 4))
    signal = (x[:, 0] > 0).astype(int)
    first = cross_fit(x, signal, 5)
    assert np.mean(first) > 0.9 and first == cross_fit(x, signal, 5)
    with pytest.raises(PtmlabError, match="--probe-folds 5"):
        cross_fit(x[:12], np.r_[np.zeros(9), np.ones(3)].astype(int), 5)  # the rarer label has 3 examples
    with pytest.raises(PtmlabError, match="at least 2 folds"):
        cross_fit(x, signal, 1)


def test_cross_fitted_probes_are_one_run_with_the_examples_noise():
    """Probes that do not depend on the seed are one run: the accuracy gain's interval is a bootstrap over the
    pooled sentences (normal quantile), even for one seed, and it shrinks about as 1/sqrt(n)."""
    def case(n: int, seeds: int):
        return decide({"sst2": {"static": runs(0.70, n, seeds=1) * seeds,
                                "contextual": runs(0.75, n, seeds=1, offset=7) * seeds}}, one_run=True)[1]["sst2"]

    one, three, big = case(400, 1), case(400, 3), case(1600, 3)
    assert one.value == pytest.approx(0.05) and np.isfinite(one.low) and one.df is None and "one run" in one.method
    assert (three.low, three.high) == pytest.approx((one.low, one.high))  # copies of one run add nothing
    assert (big.high - big.low) == pytest.approx((three.high - three.low) / 2, rel=0.25)
    # seeds that happen to be identical (the whole training set, a deterministic probe) are one run as well
    same = decide({"sst2": {"static": runs(0.70, 400, seeds=1) * 3,
                            "contextual": runs(0.75, 400, seeds=1, offset=7) * 3}})[1]["sst2"]
    assert (same.low, same.high) == pytest.approx((one.low, one.high)) and "3 seeds' runs identical" in same.method
    # without one_run a single seed shows nothing about the seeds: no interval
    assert not np.isfinite(decide({"sst2": {"static": runs(0.70, 400, seeds=1),
                                            "contextual": runs(0.75, 400, seeds=1)}})[1]["sst2"].low)


def test_cross_fitted_validity_uses_the_majority_share_of_the_sentences_scored():
    from ptmlab.studies.static_contextual import validity

    def record(static_low: float, ctx_low: float, tuned_low: float) -> dict:
        iv = {"static": {"low": static_low, "trivial": 0.70, "method": "bootstrap over 9594 examples"},
              "contextual": {"low": ctx_low, "trivial": 0.70, "method": "bootstrap over 9594 examples"},
              "finetuned": {"low": tuned_low, "trivial": 0.69, "method": "hierarchical bootstrap"}}
        rows = [{"task": "sst2", "system": k, "metric": "accuracy", "accuracy": 0.8, "per_seed": [0.8] * 3}
                for k in iv]
        return {"tasks": ["sst2"], "rows": rows, "intervals": {"sst2": iv},
                "run": {"command": "ptmlab study static-vs-contextual --budget full --probe-folds 5",
                        "budget": "full", "seeds": [0, 1, 2]}}

    ok = validity(record(0.69, 0.75, 0.80))
    assert [c.met for c in ok] == [True, True] and ok[0].value == pytest.approx(0.11)
    assert "minus the trivial predictor 0.6900" in ok[0].condition
    tie = validity(record(0.65, 0.699, 0.80))  # both frozen systems under the pool's majority share
    assert [c.met for c in tie] == [True, False] and tie[1].value == pytest.approx(-0.001)
    assert [c.met for c in validity(record(0.69, 0.75, 0.689))] == [False, True]


def test_tasks_without_glue_are_skipped_with_a_reason(tmp_path, monkeypatch):
    from ptmlab.studies.static_contextual import StaticContextualArgs

    monkeypatch.setenv("PTMLAB_GLUE_DIR", str(tmp_path / "none"))
    monkeypatch.chdir(tmp_path)
    empty = tmp_path / "glue"
    empty.mkdir()
    tasks, skipped = resolve_tasks(StaticContextualArgs(tasks=["sst2", "cola"], glue_dir=str(empty)))
    assert tasks == ["tweets"] and len(skipped) == 2 and "GLUE data not found" in skipped[0]
    (empty / "SST-2").mkdir()
    (empty / "SST-2" / "train.tsv").write_text("sentence\tlabel\n")
    tasks, skipped = resolve_tasks(StaticContextualArgs(tasks=["sst2", "cola"], glue_dir=str(empty)))
    assert tasks == ["sst2"] and skipped[0].startswith("cola")
    with pytest.raises(PtmlabError, match="sst3"):
        resolve_tasks(StaticContextualArgs(tasks=["sst3"]))
    (empty / "STS-B").mkdir()
    (empty / "STS-B" / "train.tsv").write_text("x\n")
    with pytest.raises(PtmlabError, match="regression"):
        resolve_tasks(StaticContextualArgs(tasks=["stsb"], glue_dir=str(empty)))


def test_study_small_budget(tmp_path):
    from ptmlab.studies.static_contextual import run

    assert run(["--budget", "small", "--output", str(tmp_path / "s")]) == 0
    r = json.loads((tmp_path / "s" / "results.json").read_text())
    systems = {row["system"]: row for row in r["rows"]}
    assert {"static", "contextual", "finetuned"} <= set(systems)
    assert r["claim"]["study"] == "static-vs-contextual" and r["rule"]["outcome"] == INCONCLUSIVE  # one seed
    assert r["outcome"] == "cannot test"  # one seed: no system shown above chance by a seed-level interval
    gain = systems["contextual - static (hierarchical bootstrap)"]["accuracy"]
    assert gain == pytest.approx(systems["contextual"]["accuracy"] - systems["static"]["accuracy"], abs=1e-9)
    assert r["run"]["budget"] == "small" and r["run"]["seeds"] == [0]


def test_study_cross_fitted_small_budget(tmp_path):
    from ptmlab.studies.static_contextual import run

    out = tmp_path / "x"
    with pytest.raises(PtmlabError, match="--max-eval 0"):
        run(["--budget", "small", "--probe-folds", "3", "--output", str(out)])
    assert not out.exists()  # refused before anything is written
    assert run(["--budget", "small", "--probe-folds", "3", "--max-eval", "0", "--output", str(out)]) == 0
    r = json.loads((out / "results.json").read_text())
    pool = r["probe_pool"]["tweets"]
    systems = {row["system"]: row for row in r["rows"]}
    assert pool["folds"] == 3 and pool["examples"] == pool["dev_from"] + systems["finetuned"]["dev_examples"]
    assert pool["dev_from"] == 64 and systems["static"]["examples"] == pool["examples"]
    assert systems["static"]["scored_on"].startswith("cross-fitted") and systems["finetuned"]["scored_on"] == "dev"
    iv = r["intervals"]["tweets"]
    assert np.isfinite(iv["static"]["low"]) and "one run" in iv["static"]["method"]  # one seed, yet an interval
    assert iv["finetuned"]["low"] is None  # the fine-tuned encoder does depend on the seed: one seed, no interval
    assert 0.3 < iv["static"]["trivial"] < 0.7  # the pool's majority share
    assert r["outcome"] == "cannot test"  # the one-seed fine-tuning is not shown above chance
    gain = next(v for k, v in systems.items() if k.startswith("contextual - static (cross-fitted"))
    assert gain["accuracy"] == pytest.approx(systems["contextual"]["accuracy"] - systems["static"]["accuracy"])
    assert r["finetuned_minus_static"]["tweets"]["n"] == 1



def test_fresh_sentences_are_scored_and_the_records_give_the_verdict_again(tmp_path):
    """``--score-on fresh``: the probes of every seed are scored on the same training sentences that no seed's
    fine-tuning subset holds; the per-sentence records (evidence) give the rule's verdict again."""
    from ptmlab.core.config import build_config
    from ptmlab.data.loaders import load_task, subset
    from ptmlab.studies.fresh import fresh_rows
    from ptmlab.studies.static_contextual import SMALL, StaticContextualArgs, restate, run

    out = tmp_path / "svc"
    assert run(["--budget", "small", "--score-on", "fresh", "--fresh-rows", "60", "--min-words", "4", "--seeds", "0,1",
                "--no-finetune", "--output", str(out)]) == 0
    res = json.loads((out / "results.json").read_text())
    assert res["scored_on"] == "fresh" and res["fresh_rows"] == {"tweets": 60}
    ev = res["evidence"]["tweets"]
    assert [s.split(":")[0] for s in ev["static"] + ev["contextual"]] == ["60"] * 4
    rows = {r["system"]: r for r in res["rows"] if r["task"] == "tweets"}
    assert rows["static"]["scored_on"].startswith("fresh: 60") and rows["static"]["examples"] == 60
    again = restate(res)
    assert again.reason == (res.get("rule") or {}).get("reason", res["reason"])
    # the scored rows lie outside both seeds' training subsets
    max_train = SMALL["max_train"]
    fresh = fresh_rows("tweets", None, max_train, 1, 60, 4)
    train = load_task("tweets").splits["train"]
    read = {t.strip() for s in (0, 1) for t in subset(train, max_train, s).text}
    assert len(fresh) == 60 and not {t.strip() for t in fresh.text} & read
    with pytest.raises(PtmlabError, match="--score-on fresh"):
        build_config(StaticContextualArgs, {"score_on": "fresh", "probe_folds": 5, "max_eval": 0})
