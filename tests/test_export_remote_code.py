"""An export that carries modelling code (a pruned run) loads only with ``trust_remote_code=True``: without it every
transformers loader fails and says to pass it, and never loads the stock class with other (re-initialised) weights;
a plain export still loads in a stock pipeline with no flag. Checked in a Python that cannot import ptmlab."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from ptmlab.cli import main
from ptmlab.models.zoo import load_model, load_tokenizer

COMMON = ["--task", "tweets", "--max-train", "48", "--max-eval", "32", "--batch-size", "16", "--max-length", "48",
          "--no-test"]
TEXTS = ["a wonderful, moving film", "the worst service I have had in years, never again", "ok"]
FLAG = "trust_remote_code=True"

# each way a user loads the directory; prints one JSON line per attempt: the error, or the logits it gives
LOADER = r"""
import json, sys, warnings
warnings.filterwarnings("ignore")
import torch
from transformers import AutoConfig, AutoModelForSequenceClassification, AutoTokenizer, pipeline
path, texts = sys.argv[1], json.loads(sys.argv[2])
tok = AutoTokenizer.from_pretrained(path, trust_remote_code=True)
enc = tok(texts, padding=True, return_tensors="pt")

def logits(model):
    with torch.no_grad():
        return model.eval()(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]).logits.tolist()

attempts = {
    "model": lambda: logits(AutoModelForSequenceClassification.from_pretrained(path)),
    "model_ignore_mismatched": lambda: logits(AutoModelForSequenceClassification.from_pretrained(
        path, ignore_mismatched_sizes=True)),
    "model_untrusted": lambda: logits(AutoModelForSequenceClassification.from_pretrained(path,
                                                                                         trust_remote_code=False)),
    "config": lambda: type(AutoConfig.from_pretrained(path)).__name__,
    "pipeline": lambda: [r["score"] for r in pipeline("text-classification", model=path)(texts)],
    "model_trusted": lambda: logits(AutoModelForSequenceClassification.from_pretrained(path,
                                                                                       trust_remote_code=True)),
    "pipeline_trusted": lambda: [r["score"] for r in pipeline("text-classification", model=path,
                                                              trust_remote_code=True)(texts)],
}
for name, load in attempts.items():
    try:
        print(json.dumps({"name": name, "value": load()}))
    except Exception as e:
        print(json.dumps({"name": name, "error": f"{type(e).__name__}: {e}"}))
"""


def _load_without_ptmlab(path) -> dict:
    """Run LOADER in an isolated Python (no ptmlab on its path), stdin closed: transformers' trust prompt reads
    EOF, as in any script that runs without a terminal."""
    import sysconfig

    head = f"import sys\nsys.path.append({sysconfig.get_paths()['purelib']!r})\n"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PTMLAB_DEBUG")}
    proc = subprocess.run([sys.executable, "-I", "-S", "-c", head + LOADER, str(path), json.dumps(TEXTS)],
                          cwd=path, env={**env, "HF_HUB_OFFLINE": "1"}, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads(line[line.index("{"):]) for line in proc.stdout.splitlines() if '{"name"' in line]
    return {r["name"]: r for r in rows}


@torch.no_grad()
def _ptmlab_logits(run) -> torch.Tensor:
    tok = load_tokenizer(str(run))
    enc = tok(TEXTS, padding=True, return_tensors="pt")
    return load_model(str(run)).eval()(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]).logits


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A fine-tuned tiny run, its head-pruned copy, and their transformers exports."""
    d = tmp_path_factory.mktemp("remote")
    assert main(["finetune", "--model", "tiny", *COMMON, "--epochs", "1", "--output", str(d / "ft")]) == 0
    assert main(["prune", str(d / "ft"), *COMMON, "--heads", "0.4", "--importance-examples", "32",
                 "--recover-epochs", "1", "--output", str(d / "pruned")]) == 0
    for run in ("ft", "pruned"):
        assert main(["export", str(d / run), "--format", "transformers", "--output", str(d / f"{run}-exp"),
                     "--parity-examples", "16"]) == 0
    return d


def test_pruned_export_loads_only_with_trust_remote_code(runs):
    exp = runs / "pruned-exp"
    got = _load_without_ptmlab(exp)
    for name in ("model", "model_ignore_mismatched", "model_untrusted", "config", "pipeline"):
        assert "error" in got[name], (name, got[name])  # never the stock class with other weights
        assert FLAG in got[name]["error"], (name, got[name]["error"])
    expected = _ptmlab_logits(runs / "pruned")
    assert torch.allclose(torch.tensor(got["model_trusted"]["value"]), expected, atol=1e-5)
    assert torch.allclose(torch.tensor(got["pipeline_trusted"]["value"]), expected.softmax(-1).max(-1).values,
                          atol=1e-5)
    config = json.loads((exp / "config.json").read_text())  # a model type transformers does not register
    assert config["model_type"] == "ptmlab-bert" and config["ptmlab_base_model_type"] == "bert"
    assert config["auto_map"]["AutoConfig"] == "configuration_ptmlab.PtmlabConfig"


def test_plain_export_loads_in_a_stock_pipeline_with_no_flag(runs):
    exp = runs / "ft-exp"
    assert json.loads((exp / "config.json").read_text())["model_type"] == "bert"
    assert not (exp / "modeling_ptmlab.py").exists()
    got = _load_without_ptmlab(exp)
    expected = _ptmlab_logits(runs / "ft")
    for name in ("model", "model_untrusted", "model_trusted"):
        assert torch.allclose(torch.tensor(got[name]["value"]), expected, atol=1e-5), name
    assert got["config"]["value"] == "BertConfig"
    assert torch.allclose(torch.tensor(got["pipeline"]["value"]), expected.softmax(-1).max(-1).values, atol=1e-5)


def test_ptmlab_loads_its_own_custom_code_export_without_running_it(runs):
    """ptmlab rebuilds an export with modelling code from its recorded modifications (no trust_remote_code)."""
    got = _ptmlab_logits(runs / "pruned-exp")
    assert torch.allclose(got, _ptmlab_logits(runs / "pruned"), atol=1e-5)
