"""Hub datasets offline: ``hf:NAME`` loads a dataset from the local datasets cache with HF_DATASETS_OFFLINE=1.

The cache is written by the builder ``load_dataset`` sets up for a hub dataset of parquet files (datasets'
packaged ``Parquet`` builder, configured as ``load_dataset_builder`` configures it from a dataset card, then
``download_and_prepare`` into ``HF_DATASETS_CACHE``), so it is laid out as a download leaves it:
``NAME/default/0.0.0/HASH/`` with ``dataset_info.json`` and one arrow file per split. The builder refuses local
files when given a hub ``repo_id``, so the owner form (``OWNER___NAME/...``, the folder datasets names for
``OWNER/NAME``) is a copy of that build under that folder name. Nothing is fetched: the hub is offline.
"""

from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest

from tests.conftest import run_cli


def _write_hub_cache(tmp_path):
    from datasets import ClassLabel, DatasetInfo, Features, Value
    from datasets.data_files import DataFilesDict
    from datasets.load import configure_builder_class
    from datasets.packaged_modules.parquet.parquet import Parquet, ParquetConfig

    src, cache = tmp_path / "src", tmp_path / "hf_datasets"
    src.mkdir()
    words = {0: ["awful", "boring", "poor"], 1: ["great", "superb", "lovely"]}
    for split, n in (("train", 30), ("validation", 6)):
        pd.DataFrame({"sentence": [f"{split} film was {words[i % 2][i % 3]} {i}" for i in range(n)],
                      "label": [i % 2 for i in range(n)]}).to_parquet(src / f"{split}.parquet")
    files = DataFilesDict.from_patterns({"train": ["train.parquet"], "validation": ["validation.parquet"]},
                                        base_path=str(src))
    # as load_dataset_builder sets up a hub dataset: its card's "default" config holds the data files, its
    # dataset_info the features (a ClassLabel)
    builder_cls = configure_builder_class(Parquet, [ParquetConfig(name="default", data_files=files)], "default",
                                          "tiny_reviews")
    features = Features({"sentence": Value("string"), "label": ClassLabel(names=["neg", "pos"])})
    builder = builder_cls(cache_dir=str(cache), dataset_name="tiny_reviews", info=DatasetInfo(features=features),
                          hash="0f1e2d3c4b5a6978")
    builder.download_and_prepare()
    made = cache / "tiny_reviews"
    assert (made / "default" / "0.0.0" / "0f1e2d3c4b5a6978" / "dataset_info.json").is_file()
    shutil.copytree(made, cache / "ptmlab-test___tiny_reviews")  # hf:ptmlab-test/tiny_reviews
    shutil.rmtree(src)  # only the cache is left to read
    return cache


def test_a_cached_hub_dataset_fine_tunes_offline_from_the_command_line(tmp_path):
    cache = _write_hub_cache(tmp_path)
    env = {"HF_DATASETS_CACHE": str(cache), "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}
    out = tmp_path / "run"
    proc = run_cli("finetune", "--model", "tiny", "--task", "hf:tiny_reviews", "--text-col", "sentence",
                   "--max-steps", "2", "--max-length", "16", "--batch-size", "8", "--precision", "fp32",
                   "--output", str(out), env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["labels"] == ["neg", "pos"]  # the ClassLabel names kept in the cache
    assert summary["train_examples"] == 30 and summary["eval_examples"] == 6  # its own validation split


def test_owner_form_splits_and_a_missing_dataset_through_the_api(tmp_path, monkeypatch):
    import datasets

    import ptmlab

    cache = _write_hub_cache(tmp_path)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", cache)  # what HF_DATASETS_CACHE sets at import
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    opts = dict(text_col="sentence", max_steps=2, max_length=16, batch_size=8, precision="fp32")
    run = ptmlab.finetune("tiny", "hf:ptmlab-test/tiny_reviews", eval_split="validation",
                          output=str(tmp_path / "owner"), **opts)
    assert run.summary["labels"] == ["neg", "pos"] and run.summary["eval_examples"] == 6
    with pytest.raises(ptmlab.PtmlabError, match="no split 'test' .*: it has train, validation"):
        ptmlab.finetune("tiny", "hf:tiny_reviews", eval_split="test", output=str(tmp_path / "y"), **opts)
    with pytest.raises(ptmlab.PtmlabError, match="'not_cached_here' is not in the local datasets cache"):
        ptmlab.finetune("tiny", "hf:not_cached_here", output=str(tmp_path / "x"), **opts)
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()
