"""distill, prune, compress and pretrain take the data finetune takes (Datasets, frames, lists, files), through
the one data path; pretrain reads raw text from a list of strings or a text column."""

from __future__ import annotations

import json

import datasets
import pandas as pd
import pytest
import yaml

import ptmlab
from ptmlab.core.errors import PtmlabError

FAST = dict(max_length=32, batch_size=8, lr=3e-3, seed=0, precision="fp32", max_steps=3)


def _frame(n=40):
    pos, neg = ["great", "superb", "lovely"], ["awful", "boring", "poor"]
    return pd.DataFrame({"review": [f"the film was {(pos if i % 2 else neg)[i % 3]} {i}" for i in range(n)],
                         "stars": [["neg", "pos"][i % 2] for i in range(n)]})


@pytest.fixture(scope="module")
def teacher(tmp_path_factory):
    out = tmp_path_factory.mktemp("teacher") / "run"
    return ptmlab.finetune("tiny", _frame(), text_col="review", label_col="stars", output=str(out), **FAST)


def test_distill_a_frame_as_its_csv(teacher, tmp_path, capsys):
    frame = _frame()
    frame.to_csv(tmp_path / "reviews.csv", index=False)
    cols = dict(text_col="review", label_col="stars", student="layers:1", **FAST)
    from_frame = ptmlab.distill(teacher, frame, output=str(tmp_path / "frame"), **cols)
    from_file = ptmlab.distill(teacher, str(tmp_path / "reviews.csv"), output=str(tmp_path / "file"), **cols)
    assert from_frame.summary["labels"] == ["neg", "pos"]
    for key in ("train_examples", "eval_examples", "teacher_metrics", "metrics"):
        assert from_frame.summary[key] == from_file.summary[key], key
    assert from_frame.config["task"] == "custom" and from_frame.config["train_file"] is None
    # distill ran twice: the subpackage its first call imported, bound to the verb's name, is still the verb
    assert callable(ptmlab.distill) and ptmlab.distill.pipeline.run_distill
    # a run trained on data held in memory exports: its parity is checked on text it can read (with a note)
    capsys.readouterr()
    parity = json.loads((ptmlab.export(from_frame, str(tmp_path / "export")) / "parity.json").read_text())
    assert parity["label_agreement"] == 1.0 and "trained on data held in memory" in capsys.readouterr().err
    parity = json.loads((ptmlab.export(from_file, str(tmp_path / "export_file")) / "parity.json").read_text())
    assert parity["examples"] == from_file.summary["eval_examples"]  # the csv run's own dev split


def test_prune_evaluates_the_named_split_of_a_datasetdict(teacher, tmp_path):
    ds = datasets.Dataset.from_pandas(_frame())
    splits = datasets.DatasetDict({"train": ds, "held_out": ds.select(range(6))})
    run = ptmlab.prune(teacher, splits, eval_split="held_out", text_col="review", label_col="stars", heads=0.5,
                       output=str(tmp_path / "pruned"), **FAST)
    assert run.summary["heads"] == run.summary["heads_before"] // 2
    assert run.summary["eval_examples"] == 6 and run.summary["train_examples"] == 40
    assert set(run.summary["dev_unpruned"]) >= {"accuracy"}
    with pytest.raises(PtmlabError, match="no split 'dev'"):
        ptmlab.prune(teacher, splits, eval_split="dev", text_col="review", label_col="stars", heads=0.5,
                     output=str(tmp_path / "bad"), **FAST)


def test_compress_a_list_of_dicts(teacher, tmp_path):
    rows = [{"text": r, "label": s} for r, s in zip(_frame()["review"], _frame()["stars"], strict=True)]
    run = ptmlab.compress(teacher, rows, steps=["heads=0.5"], recover_epochs=0, latency_repeats=1,
                          output=str(tmp_path / "compressed"), max_length=32)
    rows_out = run.summary["rows"]
    assert [r["variant"] for r in rows_out] == ["original", "heads=0.5"]
    # the same rows as the teacher's frame, so the same dev split: the unchanged model scores the teacher's dev
    assert rows_out[0]["dev"] == round(teacher.metrics["accuracy"], 4)
    assert run.config["task"] == "custom"
    with pytest.raises(PtmlabError, match="column 'review' .* not found"):
        ptmlab.compress(teacher, rows, text_col="review", steps=["heads=0.5"], output=str(tmp_path / "bad"))


PRETRAIN = dict(valid_fraction=0.25, size="tiny", block_size=16, batch_size=4, max_steps=2, eval_steps=1, seed=0,
                precision="fp32")


def _texts(n):
    return [f"document {i} says the quick brown fox jumps over {i % 7} lazy dogs again" for i in range(n)]


def test_pretrain_from_texts_a_text_column_and_splits(tmp_path):
    run = ptmlab.pretrain(None, _texts(40), tokenizer="tiny", output=str(tmp_path / "list"), **PRETRAIN)
    corpus = run.summary["corpus"]
    assert corpus["train_documents"] + corpus["valid_documents"] == 40
    assert run.config["files"] == ["<list>"]  # not the temporary file it was read from

    ds = datasets.Dataset.from_dict({"body": _texts(30), "n": list(range(30))})
    splits = datasets.DatasetDict({"train": ds, "validation": ds.select(range(5))})
    run = ptmlab.pretrain(None, splits, text_col="body", tokenizer="tiny", output=str(tmp_path / "dd"), **PRETRAIN)
    assert run.summary["corpus"]["train_documents"] == 30 and run.summary["corpus"]["valid_documents"] == 5
    recorded = yaml.safe_load((run.path / "config.yaml").read_text())
    assert recorded["files"] == ["<DatasetDict>"] and recorded["valid_files"] == ["<DatasetDict>"]

    frame = pd.DataFrame({"text": _texts(20)})
    run = ptmlab.pretrain(None, frame, tokenizer="tiny", output=str(tmp_path / "frame"),
                          **PRETRAIN)
    assert run.summary["corpus"]["train_documents"] + run.summary["corpus"]["valid_documents"] == 20

    with pytest.raises(PtmlabError, match="'n' holds a int"):
        ptmlab.pretrain(None, ds, text_col="n", tokenizer="tiny", output=str(tmp_path / "bad"), **PRETRAIN)


def test_pretrain_still_takes_files_and_refuses_a_mix(tmp_path):
    for i in range(2):
        (tmp_path / f"part{i}.txt").write_text("\n\n".join(_texts(10)))
    files = [str(tmp_path / "part0.txt"), str(tmp_path / "part1.txt")]
    run = ptmlab.pretrain(None, files, tokenizer="tiny", output=str(tmp_path / "files"), **PRETRAIN)
    assert run.config["files"] == files
    assert run.summary["corpus"]["train_documents"] + run.summary["corpus"]["valid_documents"] == 20
    with pytest.raises(PtmlabError, match="mixes files"):
        ptmlab.pretrain(None, [files[0], "some text"], tokenizer="tiny", output=str(tmp_path / "bad"), **PRETRAIN)
