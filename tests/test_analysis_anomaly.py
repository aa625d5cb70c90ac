"""Gaussian scoring (against scipy, on synthetic anomalies), BLiMP/psycholinguistic loading and the minilm run."""

import json

import numpy as np
import pytest
import torch
from scipy.stats import multivariate_normal

from ptmlab.analysis.anomaly import BlimpPair, Encoder, blimp_results, load_anomaly_sets, load_blimp, split_sentences
from ptmlab.analysis.gaussian import LayerGaussians, fit_gaussians
from ptmlab.core.errors import PtmlabError
from tests.conftest import SHARED, run_cli

needs_blimp = pytest.mark.skipif(not (SHARED / "blimp" / "adjunct_island.jsonl").is_file(),
                                 reason=f"BLiMP data not found at {SHARED / 'blimp'} (shared data is absent)")


def _data(seed=0, n=3000, d=5):
    rng = np.random.default_rng(seed)
    a = rng.normal(size=(d, d))
    cov = a @ a.T + np.eye(d)
    return rng.multivariate_normal(np.arange(d, dtype=float), cov, size=n), cov


def test_log_likelihood_equals_scipy_for_each_covariance():
    x, _ = _data()
    for cov_kind in ("full", "diag", "ledoit-wolf"):
        g = fit_gaussians([x, 2 * x], cov_kind)
        mean, cov = x.mean(0), np.cov(x.T)
        if cov_kind == "diag":
            cov = np.diag(np.diag(cov))
        if cov_kind == "ledoit-wolf":
            from sklearn.covariance import LedoitWolf

            cov = LedoitWolf().fit(x).covariance_
        q = x[:7]
        expected = multivariate_normal(mean, cov + np.eye(5) * 1e-6 * np.trace(cov) / 5).logpdf(q)
        assert np.allclose(g.log_likelihood(0, torch.from_numpy(q)).numpy(), expected, rtol=1e-6)
        # layer 1 holds 2x: log density of 2q under the scaled Gaussian is shifted by -d log 2
        assert np.allclose(g.log_likelihood(1, torch.from_numpy(2 * q)).numpy(), expected - 5 * np.log(2),
                           rtol=1e-6)


def test_summed_token_scores_find_the_anomalous_sentence():
    """Sentences are bags of token vectors; the bad one replaces one token by a vector 6 standard deviations off the
    mean along the least-varying direction (the good token's squared distance exceeds 36 with chance ~1e-6)."""
    x, cov = _data(1)
    g = fit_gaussians([x], "full")
    rng = np.random.default_rng(2)
    good = bad = 0
    values, vectors = np.linalg.eigh(cov)
    off = np.arange(5.0) + 6 * np.sqrt(values[0]) * vectors[:, 0]
    for _ in range(50):
        sent = rng.multivariate_normal(np.arange(5.0), cov, size=8)
        anomalous = sent.copy()
        anomalous[3] = off
        s_good = g.log_likelihood(0, torch.from_numpy(sent)).sum().item()
        s_bad = g.log_likelihood(0, torch.from_numpy(anomalous)).sum().item()
        good += s_good > s_bad
        bad += s_bad > s_good
    assert good == 50 and bad == 0


def test_blimp_results_by_hand():
    pairs = [BlimpPair("g", "b", "p1", "t1", "syntax"), BlimpPair("g", "b", "p1", "t1", "syntax"),
             BlimpPair("g", "b", "p2", "t2", "semantics"), BlimpPair("g", "b", "p2", "t2", "semantics")]
    good = np.array([[1.0, 5.0], [1.0, 5.0], [3.0, 0.0], [3.0, 5.0]])
    bad = np.array([[2.0, 4.0], [0.0, 4.0], [2.0, 1.0], [2.0, 1.0]])
    r = blimp_results(good, bad, pairs)
    assert r["per_layer"] == [0.75, 0.75] and r["best_layer"] == 0 and r["best_accuracy"] == 0.75
    assert r["per_field"] == {"semantics": [1.0, 0.5], "syntax": [0.5, 1.0]}
    assert r["per_phenomenon"]["p2"] == [1.0, 0.5]


def test_too_few_tokens_fall_back_to_shrinkage_and_say_so(capsys):
    x, _ = _data(n=6)
    g = fit_gaussians([x], "full")
    assert g.covariance == "ledoit-wolf"
    assert "falling back to Ledoit-Wolf" in capsys.readouterr().err
    with pytest.raises(PtmlabError, match="unknown covariance"):
        fit_gaussians([x], "spherical")


def test_gaussians_round_trip_through_safetensors(tmp_path):
    x, _ = _data()
    g = fit_gaussians([x, x + 1], "full", {"model": "m"})
    g.save(tmp_path / "g.safetensors")
    h = LayerGaussians.load(tmp_path / "g.safetensors")
    q = torch.from_numpy(x[:4])
    assert torch.equal(g.log_likelihood(1, q), h.log_likelihood(1, q))
    assert h.covariance == "full" and h.tokens == 3000 and h.meta["model"] == "m"
    (tmp_path / "bad.safetensors").write_bytes(b"not a tensor file")
    with pytest.raises(PtmlabError, match="not a saved Gaussians file"):
        LayerGaussians.load(tmp_path / "bad.safetensors")


def test_loaders_check_their_inputs(tmp_path):
    (tmp_path / "p.jsonl").write_text(json.dumps({"sentence_good": "A cat sleeps.", "sentence_bad": "A cat sleep.",
                                                  "field": "syntax/semantics", "UID": "u"}) + "\n")
    pairs = load_blimp(tmp_path)
    assert pairs[0].field == "syntax-semantics" and pairs[0].phenomenon == "u" and pairs[0].bad == "A cat sleep."
    (tmp_path / "q.jsonl").write_text(json.dumps({"good": "x"}) + "\n")
    with pytest.raises(PtmlabError, match=r"q.jsonl:1 has no 'sentence_good'"):
        load_blimp(tmp_path)
    with pytest.raises(PtmlabError, match="does not exist"):
        load_blimp(tmp_path / "none")
    (tmp_path / "s.csv").write_text("correct,wrong\nThe dog barked.,The dog barked the.\n")
    header, rows = load_anomaly_sets(tmp_path / "s.csv")["s"]
    assert header == ["correct", "wrong"] and rows == [["The dog barked.", "The dog barked the."]]


def test_split_sentences_cleans_wikitext():
    text = (" = Heading = \n\n The bridge is 3 @-@ lane wide , and old . It has <unk> parts in it . "
            "Short one . The river flows north to the sea every year .\n")
    assert split_sentences(text) == ["The bridge is 3-lane wide, and old.",
                                     "The river flows north to the sea every year."]


@needs_blimp
def test_blimp_subset_on_minilm_end_to_end(tmp_path):
    blimp = tmp_path / "blimp"
    blimp.mkdir()
    for name in ("determiner_noun_agreement_1", "regular_plural_subject_verb_agreement_1"):
        lines = (SHARED / "blimp" / f"{name}.jsonl").read_text().splitlines()[:15]
        (blimp / f"{name}.jsonl").write_text("\n".join(lines) + "\n")
    ref = tmp_path / "ref.txt"
    ref.write_text("\n\n".join(split_sentences((SHARED / "text/wikitext-2/valid.txt").read_text())[:120]))
    sets = tmp_path / "sets.csv"
    sets.write_text("\n".join((SHARED / "anomaly" / "osterhout-nicol.csv").read_text().splitlines()[:9]) + "\n")
    out = tmp_path / "out"
    proc = run_cli("analyze", "anomaly", "minilm", "--blimp", str(blimp), "--reference", str(ref),
                   "--covariance", "ledoit-wolf", "--output", str(out), "--heatmap-pairs", "1",
                   "--anomaly-sets", str(sets))
    assert proc.returncode == 0, proc.stderr[-2000:]
    s = json.loads((out / "summary.json").read_text())
    assert s["pairs"] == 30 and len(s["per_layer"]) == 7
    assert s["best_accuracy"] == max(s["per_layer"]) == s["per_layer"][s["best_layer"]]
    assert set(s["per_field"]) == {"morphology"} and s["best_accuracy"] > 0.5
    psy = s["psycholinguistic"]
    assert [r["variant"] for r in psy] == ["syntactic_anomaly", "semantic_anomaly"] and psy[0]["pairs"] == 8
    assert len(psy[0]["gap"]) == 7 and all(0 <= a <= 1 for a in psy[0]["accuracy"])
    assert (out / "plots" / "surprisal_0_bad.png").is_file() and (out / "gaussians.safetensors").is_file()
    # the saved Gaussians are reused: same numbers without the reference corpus
    out2 = tmp_path / "out2"
    proc = run_cli("analyze", "anomaly", "minilm", "--blimp", str(blimp), "--reference", "missing.txt",
                   "--gaussians", str(out / "gaussians.safetensors"), "--output", str(out2), "--heatmap-pairs", "0")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads((out2 / "summary.json").read_text())["per_layer"] == s["per_layer"]


def test_encoder_rejects_gaussians_of_another_shape():
    enc = Encoder.load("tiny")
    g = fit_gaussians([np.random.default_rng(0).normal(size=(300, 8))] * 3, "diag")
    with pytest.raises(PtmlabError, match="fit them again"):
        enc.scores(g, ["a sentence"])



def test_centred_token_vectors_have_zero_sentence_mean_and_saved_gaussians_remember_it(tmp_path):
    sents = ["the cat sat on the mat .", "a dog barks", "colourless green ideas sleep furiously tonight"]
    plain = Encoder.load("tiny", center=False)
    centred = Encoder(plain.model, plain.tokenizer)  # the same weights, centred (the default)
    for (_, raw, keep), (_, cen, keep2) in zip(plain.batches(sents), centred.batches(sents), strict=True):
        assert torch.equal(keep, keep2)
        for b in range(keep.shape[0]):
            k = keep[b]
            assert torch.allclose(cen[:, b][:, k].mean(1), torch.zeros(1), atol=1e-5)  # every layer, every sentence
            assert torch.allclose(cen[:, b][:, k], raw[:, b][:, k] - raw[:, b][:, k].mean(1, keepdim=True), atol=1e-5)
    g = centred.fit(sents * 40, "diag")
    g.save(tmp_path / "g.safetensors")
    with pytest.raises(PtmlabError, match="--center"):
        plain.scores(LayerGaussians.load(tmp_path / "g.safetensors"), sents)
    assert centred.scores(LayerGaussians.load(tmp_path / "g.safetensors"), sents).shape == (3, plain.num_layers)



def test_scores_many_encodes_once_and_matches_one_fit_at_a_time():
    from dataclasses import replace

    sents = ["the cat sat on the mat .", "a dog barks", "colourless green ideas sleep furiously tonight"]
    centred = Encoder.load("tiny")
    plain = replace(centred, center=False)  # the same weights
    fits = [(centred.fit(sents * 30, "diag"), True), (plain.fit(sents * 30, "diag"), False),
            (centred.fit(sents[:2] * 40, "diag"), True)]
    calls = []
    forward = centred.model.forward
    centred.model.forward = lambda *a, **k: calls.append(1) or forward(*a, **k)
    many = centred.scores_many(fits, sents)
    assert len(calls) == 1  # one batch, one forward pass for the three fits
    for got, (g, center) in zip(many, fits, strict=True):
        assert np.allclose(got, replace(centred, center=center).scores(g, sents))
    assert not np.allclose(many[0], many[1])  # centring changes the scores
    with pytest.raises(PtmlabError, match="fit on centred token vectors: pass --center"):
        centred.scores_many([(fits[0][0], False)], sents)  # Gaussians fit on centred vectors, scored plain


@needs_blimp
def test_anomaly_study_runs_plain_and_centred(tmp_path):
    blimp = tmp_path / "blimp"
    blimp.mkdir()
    for name in ("determiner_noun_agreement_1", "anaphor_gender_agreement"):  # one dev and one held-out phenomenon
        lines = (SHARED / "blimp" / f"{name}.jsonl").read_text().splitlines()[:6]
        (blimp / f"{name}.jsonl").write_text("\n".join(lines) + "\n")
    ref = tmp_path / "ref.txt"
    ref.write_text("\n\n".join(split_sentences((SHARED / "text/wikitext-2/valid.txt").read_text())[:60]))
    for variant in ("centred", "plain"):
        out = tmp_path / variant
        proc = run_cli("study", "anomaly", "--model", "tiny", "--blimp", str(blimp), "--reference", str(ref),
                       "--anomaly-sets", str(tmp_path / "none"), "--variants", variant, "--output", str(out))
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert "verdict" in proc.stdout and (out / "results.json").is_file()
        res = json.loads((out / "results.json").read_text())
        assert res["chosen_variant"] == variant and res["pairs"] == {"dev": 6, "held_out": 6}
        assert res["rule"]["outcome"] == "inconclusive"  # no commonsense set, and too few fields to compare
        assert (res["outcome"] == "cannot test") == any(not c["met"] for c in res["validity"])
