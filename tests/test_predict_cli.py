"""``ptmlab predict RUN --input F --output DIR``: one prediction per row of an unlabelled file, any format."""

from __future__ import annotations

import csv
import json

import pandas as pd
import pytest
from conftest import assert_clean_error, run_cli


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    import ptmlab

    tmp = tmp_path_factory.mktemp("predict")
    rows = [{"text": f"{['awful', 'great'][i % 2]} film {i}", "label": ["neg", "pos"][i % 2]} for i in range(40)]
    ptmlab.finetune("tiny", rows, output=str(tmp / "run"), epochs=1, max_steps=6, max_length=32, batch_size=8,
                    lr=3e-3, seed=0, precision="fp32")
    return tmp


def test_predict_writes_one_prediction_per_row_of_an_unlabelled_csv(trained):
    texts = ["a great film", "an awful film", "great, great", "dull, awful", "neither"]
    pd.DataFrame({"text": texts}).to_csv(trained / "unlabelled.csv", index=False)
    proc = run_cli("predict", str(trained / "run"), "--input", str(trained / "unlabelled.csv"), "--output",
                   str(trained / "P"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [json.loads(line) for line in (trained / "P" / "predictions.jsonl").read_text().splitlines()]
    assert [r["text"] for r in rows] == texts and [r["index"] for r in rows] == list(range(5))
    for r in rows:
        assert r["label"] in ("neg", "pos") and set(r["probabilities"]) == {"neg", "pos"}
        assert r["score"] == pytest.approx(max(r["probabilities"].values()))
    import ptmlab

    assert [r["label"] for r in rows] == [p["label"] for p in ptmlab.load(trained / "run").predict(texts)]


def test_predict_reads_parquet_and_writes_csv(trained):
    pd.DataFrame({"text": ["great", "awful", "fine"], "label": ["pos", "neg", "pos"]}).to_parquet(
        trained / "x.parquet")
    proc = run_cli("predict", str(trained / "run"), "--input", str(trained / "x.parquet"), "--output",
                   str(trained / "Q"), "--format", "csv")
    assert proc.returncode == 0, proc.stderr[-2000:]
    with open(trained / "Q" / "predictions.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 3 and set(rows[0]) == {"index", "text", "label", "score", "prob_neg", "prob_pos"}
    assert abs(float(rows[0]["prob_neg"]) + float(rows[0]["prob_pos"]) - 1) < 1e-5


def test_predict_errors_are_one_line(trained):
    (trained / "bad.csv").write_text("sentence\nhello\n")
    proc = run_cli("predict", str(trained / "run"), "--input", str(trained / "bad.csv"), "--output",
                   str(trained / "R"))
    assert_clean_error(proc, "column 'text' (--text-col) not found")
    proc = run_cli("predict", str(trained / "run"), "--input", str(trained / "bad.csv"), "--output",
                   str(trained / "R"), "--text-col", "sentence")
    assert proc.returncode == 0, proc.stderr
    again = run_cli("predict", str(trained / "run"), "--input", str(trained / "bad.csv"), "--output",
                    str(trained / "R"), "--text-col", "sentence")
    assert_clean_error(again, "predictions.jsonl' exists", "--overwrite")
