"""Predictions from each kind of head: a classifier's labels and probabilities, a regression score, and a multi-task
model answering through the head it is asked for."""

from __future__ import annotations

import pytest

from ptmlab.core.errors import PtmlabError
from ptmlab.models.zoo import load_model, load_tokenizer
from ptmlab.train.predict import model_head, predict_split, text_split


def test_classifier_regression_and_multitask_heads():
    tok = load_tokenizer("tiny")
    texts = text_split(["a short text", "another, somewhat longer text here"])
    clf = load_model("tiny", num_labels=3, label_names=["a", "b", "c"]).eval()
    head = model_head(clf)
    preds = predict_split(clf, tok, texts, head, max_length=16)
    assert head.kind == "classification" and head.labels == ["a", "b", "c"]
    for p in preds:
        assert p["label"] == max(p["probabilities"], key=p["probabilities"].get)
        assert sum(p["probabilities"].values()) == pytest.approx(1, abs=1e-5)
    reg = load_model("tiny", num_labels=1, regression=True).eval()
    scores = predict_split(reg, tok, texts, model_head(reg), max_length=16)
    assert [set(p) for p in scores] == [{"score"}] * 2

    from ptmlab.train.multitask import add_task_heads

    multi = load_model("tiny", num_labels=2)
    add_task_heads(multi, [{"name": "sent", "kind": "classification", "num_labels": 2, "labels": ["neg", "pos"]},
                           {"name": "sim", "kind": "regression", "num_labels": 1, "labels": None}])
    multi.eval()
    with pytest.raises(PtmlabError, match="a head per task \\(sent, sim\\): pass --task"):
        model_head(multi)
    with pytest.raises(PtmlabError, match="no head for task 'nli'"):
        model_head(multi, "nli")
    sent = predict_split(multi, tok, texts, model_head(multi, "sent"), max_length=16)
    assert set(sent[0]["probabilities"]) == {"neg", "pos"}
    sim = predict_split(multi, tok, texts, model_head(multi, "sim"), max_length=16)
    assert set(sim[0]) == {"score"}
    with pytest.raises(PtmlabError, match="text 1 is empty"):
        text_split(["fine", "  "])


def test_run_predict_of_a_tagger_gives_a_tag_per_word(tmp_path):
    import ptmlab

    words = [("alice", "B-PER"), ("smith", "E-PER"), ("met", "O"), ("oslo", "S-GEO"), ("today", "O")]
    conll = "\n".join(["-DOCSTART-\tO", ""] + [line for i in range(30) for line in
                                                 [f"{w}\tNN\t{t}" for w, t in words[i % 2:]] + [""]])
    (tmp_path / "train.conll").write_text(conll)
    run = ptmlab.finetune("tiny", None, task="ner", task_kind="token-classification",
                          train_file=str(tmp_path / "train.conll"), max_steps=2, batch_size=8,
                          output=str(tmp_path / "run"), precision="fp32")
    preds = run.predict(["alice smith met oslo", "today"])
    assert [p["tokens"] for p in preds] == [["alice", "smith", "met", "oslo"], ["today"]]
    assert [len(p["tags"]) for p in preds] == [4, 1]
    with pytest.raises(PtmlabError, match="whole-text predictions need a sequence classification"):
        model_head(run.model)
