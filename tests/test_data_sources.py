"""Any data a user has: datasets objects, pandas, parquet, arrow, lists of dicts, hub names; label kinds."""

from __future__ import annotations

import datasets
import pandas as pd
import pytest

from ptmlab.core.errors import PtmlabError
from ptmlab.data.labels import LABEL_KINDS
from ptmlab.data.loaders import load_source, load_task
from ptmlab.data.sources import READERS

ROWS = [{"text": f"example {i}", "label": ["neg", "pos"][i % 2]} for i in range(12)]


def _same(a, b):
    assert a.spec.kind == b.spec.kind and a.spec.labels == b.spec.labels
    for name in a.splits:
        assert a.splits[name].text == b.splits[name].text
        assert a.splits[name].label == b.splits[name].label


def test_csv_parquet_arrow_pandas_dataset_and_records_read_the_same(tmp_path):
    df = pd.DataFrame(ROWS)
    df.to_csv(tmp_path / "d.csv", index=False)
    df.to_parquet(tmp_path / "d.parquet")
    ds = datasets.Dataset.from_pandas(df)
    ds.save_to_disk(str(tmp_path / "saved"))
    arrow = next((tmp_path / "saved").glob("*.arrow"))
    ref = load_task("t", train_file=str(tmp_path / "d.csv"))
    assert ref.spec.labels == ("neg", "pos") and ref.splits["train"].label[:2] == [0, 1]
    _same(ref, load_task("t", train_file=str(tmp_path / "d.parquet")))
    _same(ref, load_task("t", train_file=str(arrow)))
    _same(ref, load_task(str(tmp_path / "saved")))  # a save_to_disk directory given as the task
    for source in (df, ds, ROWS, str(tmp_path / "d.parquet")):
        _same(ref, load_source(source, "t"))
    assert {".csv", ".tsv", ".jsonl", ".parquet", ".arrow"} <= set(READERS.names())


def test_datasetdict_classlabel_names_and_splits():
    feats = datasets.Features({"sentence": datasets.Value("string"),
                               "label": datasets.ClassLabel(names=["neg", "pos"])})
    mk = lambda n: datasets.Dataset.from_dict(  # noqa: E731
        {"sentence": [f"s{i}" for i in range(n)], "label": [i % 2 for i in range(n)]}, features=feats)
    test = datasets.Dataset.from_dict({"sentence": ["a", "b"], "label": [-1, -1]}, features=feats)
    dd = datasets.DatasetDict({"train": mk(8), "validation": mk(4), "test": test, "other": mk(3)})
    data = load_source(dd, "sst", text_col="sentence")
    assert data.spec.kind == "classification" and data.spec.labels == ("neg", "pos")
    assert len(data.splits["train"]) == 8 and len(data.splits["dev"]) == 4
    assert data.splits["test"].label is None  # -1: no label
    picked = load_source(dd, "sst", text_col="sentence", train_split="other", eval_split="train")
    assert len(picked.splits["train"]) == 3 and len(picked.splits["dev"]) == 8
    with pytest.raises(PtmlabError, match="no split 'dev2' \\(--eval-split\\)"):
        load_source(dd, "sst", text_col="sentence", eval_split="dev2")


def test_label_kind_auto_never_turns_integers_into_regression():
    ints = datasets.Dataset.from_dict({"text": [f"t{i}" for i in range(10)], "label": [i % 3 for i in range(10)]})
    data = load_source(ints)
    assert data.spec.kind == "classification" and data.spec.labels == ("0", "1", "2")
    tens = load_source([{"text": f"t{i}", "label": [2, 10][i % 2]} for i in range(6)])
    assert tens.spec.labels == tuple(str(i) for i in range(11))  # integers are their own class ids, 0 to 10
    assert tens.splits["train"].label[:2] == [2, 10]
    scores = load_source([{"text": f"t{i}", "label": i / 3} for i in range(6)])
    assert scores.spec.kind == "regression" and scores.splits["train"].label[1] == pytest.approx(1 / 3)
    whole = [{"text": f"t{i}", "label": float(i % 2)} for i in range(6)]
    with pytest.raises(PtmlabError, match="whole numbers written as floats.*--label-kind classification"):
        load_source(whole)
    assert load_source(whole, label_kind="regression").spec.kind == "regression"
    assert load_source(whole, label_kind="classification").spec.labels == ("0", "1")
    many = [{"text": f"t{i}", "label": i} for i in range(30)]
    with pytest.raises(PtmlabError, match="30 distinct integers .*--label-kind"):
        load_source(many)
    assert "classification" in LABEL_KINDS and "regression" in LABEL_KINDS


def test_bad_objects_and_rows_give_one_line_errors(tmp_path):
    with pytest.raises(PtmlabError, match="list of dicts"):
        load_source(["just text"])
    with pytest.raises(PtmlabError, match="cannot read data from a int"):
        load_source(3)
    with pytest.raises(PtmlabError, match="DataFrame:1: empty text"):
        load_source(pd.DataFrame([{"text": "a", "label": "x"}, {"text": " ", "label": "y"}]))
    with pytest.raises(PtmlabError, match="unsupported data file .*\\.parquet"):
        load_task("t", train_file=str(tmp_path / "d.xlsx"))
    (tmp_path / "bad.parquet").write_text("not parquet")
    with pytest.raises(PtmlabError, match="cannot read .*bad.parquet"):
        load_task("t", train_file=str(tmp_path / "bad.parquet"))


def test_uncached_hub_dataset_offline_names_it(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    with pytest.raises(PtmlabError, match="hub dataset 'no-owner-dataset-xyz' is not in the local datasets cache"):
        load_task("hf:no-owner-dataset-xyz")
