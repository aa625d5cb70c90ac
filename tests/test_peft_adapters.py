"""A LoRA run's adapter: saved before the merge, in PEFT's format, loadable with ``PeftModel.from_pretrained`` on
its base and giving the merged run model's logits; its recorded base names what it was trained from."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from ptmlab.cli import main

COMMON = ["--task", "tweets", "--max-train", "32", "--max-eval", "16", "--batch-size", "16", "--max-length", "32",
          "--strategy", "lora", "--max-steps", "2", "--lr", "1e-2", "--no-test"]
TEXTS = ["a wonderful, moving film", "the worst service I have had in years, never again", "ok"]


@torch.no_grad()
def _logits(model, run: Path) -> torch.Tensor:
    from transformers import AutoTokenizer

    enc = AutoTokenizer.from_pretrained(run)(TEXTS, padding=True, return_tensors="pt")
    return model.eval()(**enc).logits


def _adapter_tensors(run: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(run / "lora" / "adapter_model.safetensors")


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("lora") / "run"
    assert main(["finetune", "--model", "tiny", *COMMON, "--output", str(out)]) == 0
    return out


def test_tiny_lora_adapter_loads_on_its_saved_base_and_matches_the_merged_model(tiny_run):
    from peft import PeftModel
    from transformers import AutoModelForSequenceClassification

    state = _adapter_tensors(tiny_run)
    lora_b = [v for k, v in state.items() if "lora_B" in k]
    assert len(lora_b) == 4 and all(v.abs().max() > 0 for v in lora_b)  # 2 layers x query, value; trained
    assert len([k for k in state if "lora_A" in k]) == 4
    assert {k for k in state if "classifier" in k} == {"base_model.model.classifier.weight",
                                                       "base_model.model.classifier.bias"}
    conf = json.loads((tiny_run / "lora" / "adapter_config.json").read_text())
    # tiny's weights are random (drawn from the run's seed): no name loads them, so none is claimed
    assert conf["base_model_name_or_path"] is None and conf["task_type"] == "SEQ_CLS"
    assert conf["inference_mode"] is True and "classifier" in conf["modules_to_save"]

    merged = _logits(AutoModelForSequenceClassification.from_pretrained(tiny_run), tiny_run)
    base = AutoModelForSequenceClassification.from_pretrained(tiny_run / "lora" / "base")
    base_only = _logits(base, tiny_run)
    adapted = _logits(PeftModel.from_pretrained(base, tiny_run / "lora"), tiny_run)
    assert torch.allclose(adapted, merged, atol=1e-5), (adapted - merged).abs().max()
    assert (base_only - merged).abs().max() > 1e-3  # the adapter changes the predictions


def test_minilm_lora_adapter_records_the_zoo_name_and_loads_on_the_zoo_model(tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForSequenceClassification

    from ptmlab.models.zoo import resolve

    run = tmp_path / "run"
    assert main(["finetune", "--model", "minilm", *COMMON, "--output", str(run)]) == 0
    conf = json.loads((run / "lora" / "adapter_config.json").read_text())
    assert conf["base_model_name_or_path"] == "zoo:minilm" and not (run / "lora" / "base").exists()
    base = AutoModelForSequenceClassification.from_pretrained(resolve("minilm")[0], num_labels=3)
    adapted = _logits(PeftModel.from_pretrained(base, run / "lora"), run)
    merged = _logits(AutoModelForSequenceClassification.from_pretrained(run), run)
    assert torch.allclose(adapted, merged, atol=1e-5), (adapted - merged).abs().max()


def test_lora_base_names(tmp_path):
    from ptmlab.models.adapters import lora_base

    (tmp_path / "m").mkdir()
    assert lora_base("tiny") == (None, None, True)
    assert lora_base("zoo:tiny") == (None, None, True)
    assert lora_base("minilm") == ("zoo:minilm", None, False)
    assert lora_base("minilm", random_init=True) == (None, None, True)
    assert lora_base("bert-base-uncased@abc123") == ("bert-base-uncased", "abc123", False)
    assert lora_base("owner/name") == ("owner/name", None, False)
    assert lora_base(str(tmp_path / "m")) == (str((tmp_path / "m").resolve()), None, False)


def test_a_multi_task_lora_run_saves_its_trained_adapter(tmp_path):
    from safetensors.torch import load_file

    from tests.conftest import needs_glue

    if needs_glue.args[0]:
        pytest.skip(needs_glue.kwargs["reason"])
    out = tmp_path / "mt"
    assert main(["finetune", "--model", "tiny", "--tasks", "rte,mrpc", "--strategy", "lora", "--max-steps", "2",
                 "--max-train", "32", "--max-eval", "16", "--max-length", "32", "--lr", "1e-2",
                 "--output", str(out)]) == 0
    state = load_file(out / "lora" / "adapter_model.safetensors")
    lora_b = [v for k, v in state.items() if "lora_B" in k]
    assert lora_b and any(float(v.abs().sum()) > 0 for v in lora_b)  # trained, not the zeros LoRA starts from
