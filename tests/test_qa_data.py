"""Extractive QA data: SQuAD and table readers, windowed features with a document stride, answers from logits,
and SQuAD's official exact match and F1."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ptmlab.core.errors import PtmlabError
from ptmlab.data.metrics import squad_exact, squad_normalize, squad_scores, squad_token_f1
from ptmlab.data.qa import QASplit, best_answers, qa_features, read_qa_source, read_squad_json

CONTEXT = ("The Normans were the people who in the 10th and 11th centuries gave their name to Normandy, a region "
           "in France. They were descended from Norse raiders and pirates from Denmark, Iceland and Norway who, "
           "under their leader Rollo, agreed to swear fealty to King Charles III of West Francia. Through "
           "generations of assimilation and mixing with the native Frankish and Roman-Gaulish populations, their "
           "descendants would gradually merge with the Carolingian-based cultures of West Francia.")


def _squad(tmp_path, answer_start=None):
    start = CONTEXT.index("Rollo") if answer_start is None else answer_start
    doc = {"version": "1.1", "data": [{"title": "Normans", "paragraphs": [{"context": CONTEXT, "qas": [
        {"id": "q1", "question": "Who led the Norse raiders?", "answers": [{"text": "Rollo", "answer_start": start}]},
        {"id": "q2", "question": "Where is Normandy?", "answers": [
            {"text": "France", "answer_start": CONTEXT.index("France")},
            {"text": "in France", "answer_start": CONTEXT.index("in France")}]}]}]}]}
    path = tmp_path / "train.json"
    path.write_text(json.dumps(doc))
    return path


def test_read_squad_json_and_tables(tmp_path):
    split = read_qa_source(_squad(tmp_path))
    assert split.ids == ["q1", "q2"] and split.contexts == [CONTEXT, CONTEXT]
    assert split.answers[1] == [("France", CONTEXT.index("France")), ("in France", CONTEXT.index("in France"))]
    rows = [{"id": "a", "question": "Who?", "context": CONTEXT,
             "answers": {"text": ["Rollo"], "answer_start": [CONTEXT.index("Rollo")]}}]
    jl = tmp_path / "q.jsonl"
    jl.write_text(json.dumps(rows[0]) + "\n")
    import datasets

    for src in (jl, datasets.Dataset.from_list(rows), rows):
        got = read_qa_source(src)
        assert got.answers == [[("Rollo", CONTEXT.index("Rollo"))]] and got.ids == ["a"], src
    unlabelled = tmp_path / "questions.jsonl"
    unlabelled.write_text(json.dumps({"question": "Who?", "context": CONTEXT}) + "\n")
    assert read_qa_source(unlabelled).answers is None


def test_answer_outside_its_context_is_an_error(tmp_path):
    with pytest.raises(PtmlabError, match="question q1: answer 'Rollo' is not in its context at offset 3"):
        read_squad_json(_squad(tmp_path, answer_start=3))
    with pytest.raises(PtmlabError, match="not in its context at offset 10000"):
        read_squad_json(_squad(tmp_path, answer_start=10_000))


def _tok():
    from ptmlab.models.zoo import load_tokenizer

    return load_tokenizer("tiny")


def test_windows_with_stride_cover_the_context_and_label_the_answer():
    tok = _tok()
    split = QASplit(["Who agreed to swear fealty?"], [CONTEXT], [[("King Charles III", CONTEXT.index("King"))]],
                    ["q"])
    feats = qa_features(tok, split, max_length=48, doc_stride=16, train=True)
    assert len(feats) > 3 and set(feats.example) == {0}
    spans = [(min(o[0] for o in offs if o), max(o[1] for o in offs if o)) for offs in feats.offsets]
    assert spans[0][0] == 0 and spans[-1][1] == len(CONTEXT)  # the windows cover the whole context
    for (_, a_end), (b_start, _) in zip(spans, spans[1:], strict=False):
        assert b_start < a_end  # consecutive windows overlap (doc_stride tokens)
    labelled = [f for f in range(len(feats)) if feats.start_positions[f]]
    assert labelled  # some window holds the answer ...
    for f in range(len(feats)):
        s, e = feats.start_positions[f], feats.end_positions[f]
        if s:
            assert CONTEXT[feats.offsets[f][s][0]:feats.offsets[f][e][1]] == "King Charles III"
        else:
            assert e == 0  # ... the others point at [CLS]
    # logits peaked on the gold tokens of one window give the answer back, with character offsets
    f = labelled[-1]
    start = [np.full(len(x), -5.0) for x in feats.input_ids]
    end = [np.full(len(x), -5.0) for x in feats.input_ids]
    start[f][feats.start_positions[f]] = 5.0
    end[f][feats.end_positions[f]] = 5.0
    (ans,) = best_answers(split, feats, start, end)
    assert ans.text == "King Charles III" == CONTEXT[ans.start:ans.end]
    assert ans.logit_score == pytest.approx(10.0) and 0.99 < ans.score < 1 and 0.5 < ans.probability <= 1.0


def test_answers_are_context_spans_within_max_length_and_never_in_the_question():
    tok = _tok()
    split = QASplit(["Who led them?"], [CONTEXT], None, ["q"])
    feats = qa_features(tok, split, max_length=64, doc_stride=24)
    rng = np.random.default_rng(0)
    start = [rng.normal(size=len(x)) for x in feats.input_ids]
    end = [rng.normal(size=len(x)) for x in feats.input_ids]
    for f in range(len(feats)):  # the highest logits sit on the question and [CLS], which are never answers
        start[f][:5] = 50.0
        end[f][:5] = 50.0
    (ans,) = best_answers(split, feats, start, end, max_answer_length=4)
    assert ans.text and ans.text == CONTEXT[ans.start:ans.end]
    assert len(tok(ans.text, add_special_tokens=False)["input_ids"]) <= 4


def test_window_errors():
    tok = _tok()
    long_question = " ".join(["word"] * 60)
    with pytest.raises(PtmlabError, match="leaves 1 context tokens per window at --max-length 64"):
        qa_features(tok, QASplit([long_question], [CONTEXT], None, ["q"]), max_length=64, doc_stride=16)
    answer = CONTEXT[:200]
    with pytest.raises(PtmlabError, match="longer than the context part of any window"):
        qa_features(tok, QASplit(["Who?"], [CONTEXT], [[(answer, 0)]], ["q"]), max_length=32, doc_stride=8,
                    train=True)


# ---------------------------------------------------------------------------- SQuAD v1.1's official metric
def test_squad_normalisation_and_scores_as_the_official_script():
    assert squad_normalize("The  Denver Broncos!") == "denver broncos"
    assert squad_normalize("an apple, a pear") == "apple pear"
    assert squad_normalize("Theatre") == "theatre"  # only whole-word articles go
    assert squad_exact("the Denver Broncos.", "Denver Broncos") == 1.0
    assert squad_token_f1("Denver", "Denver Broncos") == pytest.approx(2 * 1 * 0.5 / 1.5)
    assert squad_token_f1("the", "a") == 0.0 and squad_exact("the", "a") == 1.0  # both empty: EM 1, F1 0
    # repeated tokens count with multiplicity (Counter intersection)
    assert squad_token_f1("New York New York", "New York") == pytest.approx(2 * 0.5 * 1 / 1.5)
    # per question the best gold answer, then the mean, in percent
    scores = squad_scores(["Denver", "Carolina Panthers", "x"],
                          [["Denver Broncos", "Denver"], ["the Panthers"], ["y"]])
    assert scores["exact_match"] == pytest.approx(100 / 3)
    assert scores["f1"] == pytest.approx(100 * (1 + 2 * 0.5 * 1 / 1.5 + 0) / 3)
