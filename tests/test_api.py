"""The Python API: ptmlab.finetune over objects, ptmlab.load(...).predict, configs validated wherever they are built."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pandas as pd
import pytest
from safetensors.torch import load_file

from ptmlab.core.errors import PtmlabError

FAST = dict(epochs=1, max_length=32, batch_size=8, lr=3e-3, seed=0, precision="fp32", max_steps=4)


def _rows(n=40):
    pos, neg = ["great", "superb", "lovely"], ["awful", "boring", "poor"]
    return [{"text": f"the film was {(pos if i % 2 else neg)[i % 3]} {i}", "label": ["neg", "pos"][i % 2]}
            for i in range(n)]


def test_fresh_process_finetune_a_dataset_then_load_and_predict(tmp_path):
    """The check as a user runs it: a new interpreter, a datasets.Dataset, tiny, one epoch, load, predict."""
    out = tmp_path / "run"
    code = textwrap.dedent(f"""
        import json, sys
        import ptmlab, datasets
        assert "torch" not in sys.modules, "import ptmlab must stay light"
        ds = datasets.Dataset.from_dict({{"text": ["good movie", "bad movie"] * 10, "label": [1, 0] * 10}})
        run = ptmlab.finetune("tiny", ds, epochs=1, output={str(out)!r}, max_length=16, batch_size=4)
        preds = ptmlab.load({str(out)!r}).predict(["a good movie", "a bad one"])
        print(json.dumps({{"preds": preds, "run": repr(run), "metrics": run.metrics}}))
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**__import__("os").environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert [set(p) for p in result["preds"]] == [{"label", "score", "probabilities"}] * 2
    assert all(p["label"] in ("0", "1") for p in result["preds"])
    assert all(abs(sum(p["probabilities"].values()) - 1) < 1e-5 for p in result["preds"])
    assert "accuracy" in result["metrics"]


def test_csv_pandas_parquet_and_records_fine_tune_the_same(tmp_path):
    import ptmlab

    rows = _rows()
    df = pd.DataFrame(rows)
    df.to_csv(tmp_path / "d.csv", index=False)
    df.to_parquet(tmp_path / "d.parquet")
    weights = {}
    for name, data in (("csv", tmp_path / "d.csv"), ("pandas", df), ("parquet", str(tmp_path / "d.parquet")),
                       ("records", rows)):
        run = ptmlab.finetune("tiny", data, output=str(tmp_path / name), **FAST)
        weights[name] = load_file(run.path / "model.safetensors")
        assert run.summary["labels"] == ["neg", "pos"] and run.summary["train_examples"] == 36
    ref = weights.pop("csv")
    for name, w in weights.items():
        assert all((w[k] == ref[k]).all() for k in ref), name


def test_model_object_with_tokenizer(tmp_path):
    from transformers import AutoConfig, AutoModelForSequenceClassification

    import ptmlab
    from ptmlab.models.zoo import load_tokenizer, resolve

    path, entry = resolve("tiny")
    model = AutoModelForSequenceClassification.from_config(
        AutoConfig.from_pretrained(path, **entry.random_config, num_labels=2))
    tok = load_tokenizer("tiny")
    run = ptmlab.finetune((model, tok), _rows(), output=str(tmp_path / "obj"), **FAST)
    assert run.config["model"] == model.config._name_or_path == run.summary["model"]  # not the temporary copy
    assert "ptmlab-model-" not in (run.path / "README.md").read_text()
    assert len(run.predict("a great film")) == 1
    with pytest.raises(PtmlabError, match="needs its tokenizer"):
        ptmlab.finetune(model, _rows(), output=str(tmp_path / "x"))


def test_options_are_validated_wherever_a_config_is_built(tmp_path):
    import ptmlab
    from ptmlab.train.args import FinetuneConfig

    with pytest.raises(PtmlabError, match="--lr must be positive"):
        FinetuneConfig(lr=-1.0)
    with pytest.raises(PtmlabError, match="unknown option 'epoch'.*did you mean 'epochs'"):
        ptmlab.finetune("tiny", _rows(), epoch=1, output=str(tmp_path / "o"))
    with pytest.raises(PtmlabError, match="^batch_size=6 must be a multiple of grad_accum=4"):  # keywords, not flags
        ptmlab.finetune("tiny", _rows(), batch_size=6, grad_accum=4, output=str(tmp_path / "o"))
    assert not (tmp_path / "o").exists()  # nothing written before the checks pass


def test_run_records_and_lazy_api(tmp_path):
    import ptmlab

    assert {"finetune", "load", "predict", "evaluate", "distill", "prune", "compress", "export", "pretrain",
            "study", "Run"} <= set(dir(ptmlab))
    ptmlab.finetune("tiny", _rows(), output=str(tmp_path / "r"), **FAST)
    run = ptmlab.load(tmp_path / "r")
    assert run.command == "finetune" and run.config["max_length"] == 32
    assert run.metrics == run.summary["metrics"] and run.history[-1]["step"] == 4
    assert run.model.config.num_labels == 2 and run.tokenizer.pad_token_id is not None
    preds = ptmlab.predict(run, ["great", "awful"])
    assert [set(p) for p in preds] == [{"label", "score", "probabilities"}] * 2
    assert preds == run.predict(["great", "awful"])
    prov = run.summary["provenance"]
    assert prov["command_line"].startswith("ptmlab.finetune('tiny', <list>")
    with pytest.raises(PtmlabError, match="not a ptmlab run directory"):
        ptmlab.load(tmp_path)


def test_evaluate_scores_the_runs_own_task_or_given_data(tmp_path):
    import ptmlab

    rows = _rows()
    pd.DataFrame(rows).to_csv(tmp_path / "d.csv", index=False)
    run = ptmlab.finetune("tiny", str(tmp_path / "d.csv"), output=str(tmp_path / "r"), **FAST)
    own = ptmlab.evaluate(run)  # the run's own file and dev split, as `ptmlab evaluate RUN`
    assert own["metrics"] == pytest.approx(run.metrics) and own["examples"] == run.summary["eval_examples"]
    given = run.evaluate(pd.DataFrame(rows[:10]))  # a frame: all of it is scored
    assert given["examples"] == 10 and 0 <= given["metrics"]["accuracy"] <= 1
    preds = run.predict([r["text"] for r in rows[:10]])
    correct = sum(p["label"] == r["label"] for p, r in zip(preds, rows[:10], strict=True))
    assert given["metrics"]["accuracy"] == pytest.approx(correct / 10)
