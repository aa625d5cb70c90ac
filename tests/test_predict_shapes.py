"""What predictions take and the shapes they come back in.

Inputs: ``Run.predict`` and ``ptmlab.predict`` read the same inputs the same way (a text, texts, (text, pair)
tuples, dicts, a DataFrame, a Dataset) and refuse anything else in one line naming the item. Outputs: a tagger
returns entity groups with character offsets into the text beside its tags per word, its words split off punctuation
as the tokenizer pre-tokenizes; an extractive QA answer's ``score`` is the span's probability (p_start * p_end over
the window's context tokens and [CLS]), its logit sum kept as ``logit_score``.
"""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
import torch

from ptmlab.core.errors import PtmlabError
from tests.conftest import run_cli


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _one_line(err: pytest.ExceptionInfo) -> str:
    msg = str(err.value)
    assert "\n" not in msg, msg
    return msg


# ------------------------------------------------------------------------------------------------ inputs
@pytest.fixture(scope="module")
def classifier(tmp_path_factory):
    import ptmlab

    tmp = tmp_path_factory.mktemp("shapes-clf")
    rows = [{"text": f"{['awful', 'great'][i % 2]} film {i}", "label": ["neg", "pos"][i % 2]} for i in range(40)]
    return ptmlab.finetune("tiny", rows, output=str(tmp / "run"), epochs=1, max_steps=6, max_length=32, batch_size=8,
                           lr=3e-3, seed=0, precision="fp32")


@pytest.fixture(scope="module")
def pair_classifier(tmp_path_factory):
    import ptmlab

    tmp = tmp_path_factory.mktemp("shapes-pair")
    rows = [{"premise": f"a {['cat', 'dog'][i % 2]} sat", "hypothesis": f"a {['cat', 'dog'][i % 3 % 2]} sat",
             "label": ["no", "yes"][int(i % 2 == i % 3 % 2)]} for i in range(40)]
    return ptmlab.finetune("tiny", rows, text_col="premise", text_pair_col="hypothesis", output=str(tmp / "run"),
                           epochs=1, max_steps=4, max_length=32, batch_size=8, seed=0, precision="fp32")


def _direct(run, texts, pairs=None) -> list[dict]:
    """Predictions of the run's model on exactly these texts, bypassing every input reader."""
    from ptmlab.data.loaders import Split
    from ptmlab.train.predict import model_head, predict_split

    split = Split(list(texts), list(pairs) if pairs is not None else None, None, list(range(len(texts))))
    return predict_split(run.model, run.tokenizer, split, model_head(run.model), run.max_length)


def _probs(preds: list[dict]) -> list[list[float]]:
    return [[p["probabilities"][k] for k in sorted(p["probabilities"])] for p in preds]


def test_run_predict_reads_dicts_frames_and_datasets_as_ptmlab_predict_does(classifier):
    import datasets
    import pandas as pd

    import ptmlab

    texts = ["a great film", "an awful, awful film"]
    want = _probs(_direct(classifier, texts))
    rows = [{"text": t, "label": "pos"} for t in texts]  # a label column is ignored
    for given in (texts, rows, pd.DataFrame({"text": texts}), datasets.Dataset.from_dict({"text": texts})):
        got = classifier.predict(given)
        assert np.allclose(_probs(got), want, atol=1e-6), type(given).__name__
        assert np.allclose(_probs(ptmlab.predict(classifier, given)), want, atol=1e-6), type(given).__name__
    (one,) = classifier.predict(texts[1])
    assert np.allclose(_probs([one]), want[1:], atol=1e-6)
    # the dict is read through its text column, not scored as the text "{'text': ...}"
    assert not np.allclose(_probs(_direct(classifier, [str(rows[0])])), want[:1], atol=1e-4)


@pytest.mark.parametrize("bad, needle", [
    (None, "nothing to predict"),
    (["fine", None], "item 1 of the input is None"),
    (["fine", 3], "item 1 of the input is an int (3)"),
    ([{"text": "fine"}, {"review": "bad"}], "item 1 of the input has no 'text' (its keys: review)"),
    ([{"text": None}], "item 0 of the input has None in 'text'"),
    (42, "cannot predict from an int"),
])
def test_run_predict_refuses_what_is_not_text_in_one_line(classifier, bad, needle):
    import ptmlab

    for call in (classifier.predict, lambda x: ptmlab.predict(classifier, x)):
        with pytest.raises(PtmlabError) as err:
            call(bad)
        msg = _one_line(err)
        assert needle in msg and "pass a text, a list of texts" in msg, msg


def test_pair_inputs_as_tuples_dicts_or_pairs_agree(pair_classifier):
    import ptmlab

    run = pair_classifier
    premises, hypotheses = ["a cat sat", "a dog sat"], ["a dog sat", "a dog sat"]
    want = _probs(_direct(run, premises, hypotheses))
    assert not np.allclose(want, _probs(_direct(run, premises)), atol=1e-5)  # the pair matters to the model
    tuples = list(zip(premises, hypotheses, strict=True))
    rows = [{"premise": p, "hypothesis": h} for p, h in tuples]
    for got in (run.predict(tuples), run.predict(premises, pairs=hypotheses), run.predict(rows),
                ptmlab.predict(run, tuples), ptmlab.predict(run, rows)):
        assert np.allclose(_probs(got), want, atol=1e-6)
    with pytest.raises(PtmlabError) as err:
        run.predict([("a cat sat", None)])
    assert "item 0 of the input" in _one_line(err)
    with pytest.raises(PtmlabError) as err:
        run.predict([("a cat sat", "a dog sat"), "a cat sat"])
    assert "item 1 of the input has no pair" in _one_line(err)


# ------------------------------------------------------------------------------------------------ taggers
def test_entity_groups_merge_b_and_i_tags_with_offsets_and_mean_scores():
    from ptmlab.train.spans import entity_groups

    text = "Ada Lovelace met Charles Babbage in London ."
    words = text.split()
    spans, at = [], 0
    for w in words:
        at = text.index(w, at)
        spans.append((at, at + len(w)))
        at += len(w)
    tags = ["B-PER", "I-PER", "O", "B-PER", "B-PER", "O", "I-LOC", "O"]
    scores = [0.9, 0.7, 0.99, 0.8, 0.6, 0.95, 0.5, 0.9]
    groups = entity_groups(text, spans, tags, scores)
    assert [(g["entity_group"], g["word"], g["start"], g["end"]) for g in groups] == [
        ("PER", "Ada Lovelace", 0, 12), ("PER", "Charles", 17, 24), ("PER", "Babbage", 25, 32),
        ("LOC", "London", 36, 42)]  # B- always opens a group; I- after O opens one too (as transformers groups)
    assert [g["score"] for g in groups] == pytest.approx([0.8, 0.8, 0.6, 0.5])
    assert all(text[g["start"]:g["end"]] == g["word"] for g in groups)


def test_words_come_from_the_tokenizers_pre_tokenizer_with_offsets():
    from ptmlab.models.zoo import load_tokenizer
    from ptmlab.train.spans import text_words

    text = "  Paris, the city;  Café-au-lait!"
    spans = text_words(load_tokenizer("tiny"), text)
    assert [text[s:e] for s, e in spans] == ["Paris", ",", "the", "city", ";", "Café", "-", "au", "-", "lait", "!"]


def _punctuated(n: int, seed: int) -> list[list[tuple[str, str]]]:
    """test_ner_cli's people, places and filler, with punctuation and a few more filler words (all O) between."""
    import random

    from tests.test_ner_cli import _sentences

    rng = random.Random(seed)
    out = []
    for sent in _sentences(n, seed):
        words = []
        for w, t in sent:
            words.append((w, t))
            if t in ("O", "E-PER", "S-GEO") and rng.random() < 0.3:
                words.append((rng.choice([",", ".", ";", "yesterday", "then"]), "O"))
        out.append(words)
    return out


@pytest.fixture(scope="module")
def tagger(tmp_path_factory):
    import ptmlab
    from tests.test_ner_cli import _write_conll

    d = tmp_path_factory.mktemp("shapes-ner")
    _write_conll(d / "train.conll", _punctuated(240, 0))
    _write_conll(d / "dev.conll", _punctuated(60, 1))
    run = ptmlab.finetune("tiny", None, task="geo-ner", task_kind="token-classification",
                          train_file=str(d / "train.conll"), dev_file=str(d / "dev.conll"), epochs=6,
                          batch_size=16, lr=2e-3, precision="fp32", output=str(d / "run"))
    assert run.metrics["entity_f1"] > 0.9, run.metrics
    return d, run


def _word_probs(run, words: list[str]) -> np.ndarray:
    """Each word's tag distribution at its first sub-token, straight from the model."""
    enc = run.tokenizer(words, is_split_into_words=True, return_tensors="pt")
    with torch.no_grad():
        logits = run.model(**enc).logits[0].numpy()
    probs, seen, out = _softmax(logits), set(), []
    for pos, w in enumerate(enc.word_ids(0)):
        if w is not None and w not in seen:
            seen.add(w)
            out.append(probs[pos])
    return np.array(out)


def test_tagger_returns_entity_groups_with_offsets_into_the_text(tagger):
    _, run = tagger
    text = "Yesterday alice smith met  elena garcia in oslo, then lima."
    (p,) = run.predict(text)
    assert p["text"] == text
    assert p["tokens"] == ["Yesterday", "alice", "smith", "met", "elena", "garcia", "in", "oslo", ",", "then",
                           "lima", "."]
    probs = _word_probs(run, p["tokens"])
    labels = [run.model.config.id2label[i] for i in range(run.model.config.num_labels)]
    assert p["tags"] == [labels[i] for i in probs.argmax(-1)]
    assert p["scores"] == pytest.approx(probs.max(-1).tolist(), abs=1e-4)
    got = [(e["entity_group"], e["word"], e["start"], e["end"]) for e in p["entities"]]
    assert got == [("PER", "alice smith", 10, 21), ("PER", "elena garcia", 27, 39), ("GEO", "oslo", 43, 47),
                   ("GEO", "lima", 54, 58)]
    for e in p["entities"]:
        assert text[e["start"]:e["end"]] == e["word"] and set(e) == {"entity_group", "score", "word", "start", "end"}
    mean = probs.max(-1)
    assert [e["score"] for e in p["entities"]] == pytest.approx(
        [mean[1:3].mean(), mean[4:6].mean(), mean[7], mean[10]], abs=1e-4)


def test_tagger_cli_jsonl_and_csv_carry_entities(tagger):
    d, run = tagger
    (d / "in.jsonl").write_text(json.dumps({"text": "the visit to lima, with bruno okafor"}) + "\n"
                                + json.dumps({"tokens": ["alice", "smith", "met", "oslo"]}) + "\n")
    proc = run_cli("predict", str(run.path), "--input", str(d / "in.jsonl"), "--output", str(d / "J"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [json.loads(x) for x in (d / "J" / "predictions.jsonl").read_text().splitlines()]
    assert rows[0]["tokens"] == ["the", "visit", "to", "lima", ",", "with", "bruno", "okafor"]
    assert [(e["entity_group"], e["word"], e["start"], e["end"]) for e in rows[0]["entities"]] == [
        ("GEO", "lima", 13, 17), ("PER", "bruno okafor", 24, 36)]
    # words given as a list: offsets index the words joined by single spaces, which is the row's text
    assert rows[1]["text"] == "alice smith met oslo" and rows[1]["tags"] == ["B-PER", "I-PER", "O", "B-GEO"]
    assert [(e["word"], e["start"], e["end"]) for e in rows[1]["entities"]] == [("alice smith", 0, 11),
                                                                               ("oslo", 16, 20)]
    proc = run_cli("predict", str(run.path), "--input", str(d / "in.jsonl"), "--output", str(d / "C"),
                   "--format", "csv")
    assert proc.returncode == 0, proc.stderr[-2000:]
    with open(d / "C" / "predictions.csv", newline="") as f:
        table = list(csv.DictReader(f))
    assert json.loads(table[0]["entities"]) == rows[0]["entities"]
    assert table[1]["tokens"] == "alice smith met oslo"


def test_tagger_inputs_refused_in_one_line(tagger):
    import ptmlab

    _, run = tagger
    for bad, needle in [(None, "nothing to predict"), (["alice met oslo", None], "item 1 of the input is None"),
                        (["  ", "oslo"], "item 0 of the input has no words")]:
        with pytest.raises(PtmlabError) as err:
            run.predict(bad)
        assert needle in _one_line(err)
        with pytest.raises(PtmlabError) as err:
            ptmlab.predict(run, bad)
        assert needle in _one_line(err)


# ------------------------------------------------------------------------------------------------ QA
def test_qa_score_is_the_span_probability_and_logit_score_the_sum():
    from ptmlab.data.qa import QASplit, best_answers, qa_features
    from ptmlab.models.zoo import load_tokenizer

    tok = load_tokenizer("tiny")
    context = "The river was cold and the password is otter near the town."
    split = QASplit(["what is the password?"], [context], None, ["q"])
    feats = qa_features(tok, split, max_length=64, doc_stride=16)
    (offs,) = feats.offsets
    target = next(t for t, o in enumerate(offs) if o is not None and context[o[0]:o[1]] == "otter")
    rng = np.random.default_rng(0)
    start, end = rng.normal(size=len(offs)), rng.normal(size=len(offs))
    start[target], end[target] = 4.0, 3.0
    start[1:4] = end[1:4] = 9.0  # question tokens: never answers, and no part of the softmax
    (a,) = best_answers(split, feats, [start], [end])
    assert a.text == "otter" == context[a.start:a.end]
    assert a.logit_score == pytest.approx(7.0)
    keep = np.array([t == 0 or o is not None for t, o in enumerate(offs)])  # the context tokens and [CLS]
    p_start = _softmax(np.where(keep, start, -np.inf))
    p_end = _softmax(np.where(keep, end, -np.inf))
    assert a.score == pytest.approx(p_start[target] * p_end[target], rel=1e-6)
    assert 0 < a.score < 1 and 0 < a.probability <= 1


@pytest.fixture(scope="module")
def reader(tmp_path_factory):
    import ptmlab
    from tests.test_qa_cli import _examples, _jsonl

    d = tmp_path_factory.mktemp("shapes-qa")
    _jsonl(d / "train.jsonl", _examples(160, 0))
    _jsonl(d / "dev.jsonl", _examples(40, 1))
    run = ptmlab.finetune("tiny", None, task="passwords", task_kind="extractive-qa",
                          train_file=str(d / "train.jsonl"), dev_file=str(d / "dev.jsonl"), max_length=48,
                          doc_stride=16, epochs=6, batch_size=16, lr=2e-3, precision="fp32", output=str(d / "run"))
    return d, run


def test_qa_predictions_score_is_a_probability_from_the_models_logits(reader):
    import ptmlab
    from ptmlab.data.qa import QASplit, qa_features
    from tests.test_qa_cli import _examples

    d, run = reader
    rows = [{"question": r["question"], "context": r["context"]} for r in _examples(6, 7)]
    preds = ptmlab.predict(run, rows)
    feats = qa_features(run.tokenizer, QASplit([r["question"] for r in rows], [r["context"] for r in rows]),
                        48, 16)
    best = {}
    for f, ex in enumerate(feats.example):  # the pipeline's probability of the chosen span, window by window
        enc = {"input_ids": torch.tensor([feats.input_ids[f]]),
               "token_type_ids": torch.tensor([feats.token_type_ids[f]])}
        with torch.no_grad():
            out = run.model(**enc)
        s, e = out.start_logits[0].numpy(), out.end_logits[0].numpy()
        keep = np.array([t == 0 or o is not None for t, o in enumerate(feats.offsets[f])])
        ps, pe = _softmax(np.where(keep, s, -np.inf)), _softmax(np.where(keep, e, -np.inf))
        for i, o_s in enumerate(feats.offsets[f]):
            for j, o_e in enumerate(feats.offsets[f]):
                if o_s is not None and o_e is not None and i <= j < i + 30:
                    cand = (float(s[i] + e[j]), float(ps[i] * pe[j]), o_s[0], o_e[1])
                    if ex not in best or cand[0] > best[ex][0]:
                        best[ex] = cand
    for k, (p, r) in enumerate(zip(preds, rows, strict=True)):
        logit, prob, cs, ce = best[k]
        assert (p["start"], p["end"]) == (cs, ce) and r["context"][cs:ce] == p["answer"]
        assert p["logit_score"] == pytest.approx(logit, abs=1e-3)
        assert p["score"] == pytest.approx(prob, abs=1e-4) and 0 <= p["score"] <= 1
    assert all(0 < p["score"] < 1 < p["logit_score"] for p in preds)
    # Run.predict reads questions with pairs= as their contexts, or (question, context) tuples, the same way
    qs, cs = [r["question"] for r in rows], [r["context"] for r in rows]
    assert run.predict(qs, pairs=cs) == preds == run.predict(list(zip(qs, cs, strict=True)))
    with pytest.raises(PtmlabError) as err:
        run.predict(["what is the password?"])
    assert "item 0 of the input is a str" in _one_line(err) and "(question, context)" in str(err.value)


def test_qa_cli_writes_score_and_logit_score(reader):
    from tests.test_qa_cli import _examples, _jsonl

    d, run = reader
    _jsonl(d / "q.jsonl", [{"question": r["question"], "context": r["context"]} for r in _examples(4, 3)])
    proc = run_cli("predict", str(run.path), "--input", str(d / "q.jsonl"), "--output", str(d / "A"),
                   "--format", "csv")
    assert proc.returncode == 0, proc.stderr[-2000:]
    with open(d / "A" / "predictions.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 4 and {"score", "logit_score", "probability"} <= set(rows[0])
    assert all(0 <= float(r["score"]) <= 1 for r in rows)
    assert any(float(r["logit_score"]) > 1 for r in rows)  # a sum of logits, not a probability
