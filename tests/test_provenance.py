"""summary.json's provenance: the seed, the training data's fingerprint, the hub commit of a hub model, whether the
checkout was modified, and the versions of the libraries a run depends on; from the command line and from Python."""

from __future__ import annotations

import csv
import json
import subprocess
from importlib import metadata

import pandas as pd

from tests.conftest import ROOT, run_cli
from tests.synthetic import write_task

FAST = dict(max_length=16, batch_size=8, lr=3e-3, precision="fp32", max_steps=2)


def _checkout_dirty() -> bool | None:
    if not (ROOT / ".git").exists():
        return None
    out = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                         capture_output=True, text=True, check=True)
    return bool(out.stdout.strip())


def test_a_cli_run_records_seed_data_fingerprint_checkout_and_versions(tmp_path):
    import ptmlab

    files = write_task(tmp_path / "data", n_train=60, n_dev=20)
    out = tmp_path / "run"
    proc = run_cli("finetune", "--model", "tiny", "--task", "t", "--train-file", files["train"], "--dev-file",
                   files["dev"], "--seed", "7", "--max-steps", "2", "--batch-size", "8", "--max-length", "16",
                   "--precision", "fp32", "--output", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    prov = json.loads((out / "summary.json").read_text())["provenance"]
    assert prov["seed"] == 7
    assert prov["model_commit"] is None  # a zoo model
    for lib in ("datasets", "peft", "accelerate", "torch", "transformers"):
        assert prov[lib] == metadata.version(lib), lib
    assert prov["git_dirty"] is _checkout_dirty()
    assert (prov["git_commit"] is None) is (prov["git_dirty"] is None)
    data = prov["data"]
    assert data["source"] == files["train"] and data["rows"] == 60 and data["fingerprint_kind"] == "sha256"
    assert len(data["fingerprint"]) == 64

    # the same rows read in memory (a list of dicts, through the Python API) give the same fingerprint
    with open(files["train"], newline="") as f:
        rows = list(csv.DictReader(f))
    run = ptmlab.finetune("tiny", rows, output=str(tmp_path / "api"), seed=3, **FAST)
    api = run.summary["provenance"]
    assert api["data"] == {"source": "list of dicts", "fingerprint": data["fingerprint"],
                           "fingerprint_kind": "sha256", "rows": 60}
    assert api["seed"] == 3 and api["command_line"].startswith("ptmlab.finetune('tiny', <list>")
    assert json.loads((run.path / "summary.json").read_text())["provenance"]["data"] == api["data"]


def test_in_memory_data_fingerprints_follow_the_rows(tmp_path):
    import datasets

    import ptmlab

    rows = [{"text": f"the film was {'great' if i % 2 else 'awful'} {i}", "label": ["neg", "pos"][i % 2]}
            for i in range(40)]
    changed = [dict(r) for r in rows]
    changed[5]["text"] = "the film was great 5, twice"

    def record(source, name):
        return ptmlab.finetune("tiny", source, output=str(tmp_path / name), seed=0, **FAST).summary["provenance"]

    frame = record(pd.DataFrame(rows), "frame")["data"]
    again = record([dict(r) for r in rows], "records")["data"]
    other = record(changed, "changed")["data"]
    assert frame["source"] == "DataFrame" and again["source"] == "list of dicts"
    assert frame["fingerprint"] == again["fingerprint"]  # the same rows, however they arrive
    assert other["fingerprint"] != frame["fingerprint"]  # one row changed
    assert frame["rows"] == again["rows"] == other["rows"] == 40

    ds = datasets.Dataset.from_list(rows)
    prov = record(ds, "dataset")
    assert prov["data"] == {"source": "Dataset", "fingerprint": ds._fingerprint, "fingerprint_kind": "datasets",
                            "rows": 40}
    assert datasets.Dataset.from_list(rows)._fingerprint == ds._fingerprint
    assert prov["model_commit"] is None and prov["seed"] == 0


def _hub_model(cache, repo: str, commit: str):
    """A tiny BERT classifier with the MiniLM tokenizer, laid out as the hub cache holds a downloaded model."""
    from transformers import BertConfig, BertForSequenceClassification

    from ptmlab.models.zoo import load_tokenizer

    tok = load_tokenizer("minilm")
    folder = cache / ("models--" + repo.replace("/", "--"))
    snap = folder / "snapshots" / commit
    config = BertConfig(vocab_size=tok.vocab_size, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=64)
    BertForSequenceClassification(config).save_pretrained(snap, safe_serialization=True)
    tok.save_pretrained(snap)
    (folder / "refs").mkdir(parents=True)
    (folder / "refs" / "main").write_text(commit)
    return snap


def test_a_hub_model_records_its_snapshot_commit_and_a_local_one_none(tmp_path, monkeypatch):
    import huggingface_hub.constants as hc

    import ptmlab
    from ptmlab.core.provenance import hub_commit
    from ptmlab.models.zoo import load_model

    commit = "0123456789abcdef0123456789abcdef01234567"
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(hc, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(hc, "HF_HUB_OFFLINE", True)
    _hub_model(tmp_path / "hub", "ptmlab-test/tiny-bert", commit)
    rows = [{"text": f"a {'good' if i % 2 else 'bad'} film {i}", "label": i % 2} for i in range(24)]
    run = ptmlab.finetune("ptmlab-test/tiny-bert", rows, output=str(tmp_path / "hub-run"), **FAST)
    assert run.summary["provenance"]["model_commit"] == commit
    # the run directory it wrote is a local model: no hub commit (nor for a zoo model)
    assert hub_commit(load_model(str(run.path), num_labels=2)) is None
    assert hub_commit(load_model("tiny", num_labels=2)) is None
    assert hub_commit(str(tmp_path / "hub" / "models--ptmlab-test--tiny-bert" / "snapshots" / commit)) == commit


def test_git_state_says_whether_tracked_files_changed(tmp_path):
    from ptmlab.core.provenance import git_state

    def git(*args):
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)

    assert git_state(tmp_path) == (None, None)  # not a checkout
    git("init", "-q")
    git("config", "user.email", "t@example.com")
    git("config", "user.name", "t")
    (tmp_path / "a.py").write_text("x = 1\n")
    git("add", "a.py")
    git("commit", "-q", "-m", "one")
    head = subprocess.run(["git", "-C", str(tmp_path), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()
    assert git_state(tmp_path) == (head, False)
    (tmp_path / "notes.txt").write_text("untracked\n")
    assert git_state(tmp_path) == (head, False)  # untracked files do not count
    (tmp_path / "a.py").write_text("x = 2\n")
    assert git_state(tmp_path) == (head, True)
