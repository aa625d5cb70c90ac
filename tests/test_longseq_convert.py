"""longify: position tables copied Longformer-style, attention switched, and the change replayed on load."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import assert_clean_error, run_cli
from transformers import DistilBertConfig, DistilBertModel, RobertaConfig, RobertaModel

from ptmlab.core.errors import PtmlabError
from ptmlab.longseq.convert import check_max_length, longify, max_supported_length
from ptmlab.models.zoo import load_model


def test_cli_longify_then_load_with_new_head(tmp_path):
    out = tmp_path / "long"
    proc = run_cli("longify", "tiny", "--max-length", "2048", "--window", "127", "--global", "0,5", "--output",
                   str(out))
    assert proc.returncode == 0, proc.stderr
    assert "window 128" in proc.stdout
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["max_position_embeddings"] == 2048
    assert cfg["ptmlab_modifications"][0]["kind"] == "longify" and cfg["ptmlab_modifications"][0]["window"] == 128
    assert list(out.glob("*.safetensors"))
    model = load_model(str(out), num_labels=13)
    assert model.config._attn_implementation == "ptmlab_window" and model.config.ptmlab_global_tokens == [0, 5]
    assert model.classifier.out_features == 13 and max_supported_length(model) == 2048
    pos = model.bert.embeddings.position_embeddings.weight
    assert torch.equal(pos[1500], pos[1500 - 1024]) and torch.equal(pos[600], pos[88])
    ids = torch.randint(1000, 2000, (2, 1500))
    mask = torch.ones_like(ids)
    mask[1, 900:] = 0
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask).logits
    assert logits.shape == (2, 13) and torch.isfinite(logits).all()
    with pytest.raises(PtmlabError, match="--max-length 4096"):
        check_max_length(model, 4096)


def test_cli_bad_inputs(tmp_path):
    assert_clean_error(run_cli("longify", "tiny", "--max-length", "200", "--window", "256", "--output",
                               str(tmp_path / "a")), "--window 256", "--max-length 200")
    assert_clean_error(run_cli("longify", "tiny", "--max-length", "256", "--output", str(tmp_path / "b")),
                       "shorter")
    assert_clean_error(run_cli("longify", "tiny", "--max-length", "1024", "--global", "x", "--output",
                               str(tmp_path / "c")), "--global")
    assert_clean_error(run_cli("longify", "tiny", "--max-length", "1024", "--global", "5000", "--output",
                               str(tmp_path / "d")), "5000")
    assert_clean_error(run_cli("longify", "tiny", "--max-length", "1024"), "--output")


def test_roberta_keeps_padding_offset_and_distilbert_converts():
    torch.manual_seed(0)
    rob = RobertaModel(RobertaConfig(vocab_size=100, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=32, max_position_embeddings=66, pad_token_id=1)).eval()
    old = rob.embeddings.position_embeddings.weight.detach().clone()
    longify(rob, 256, 16)
    new = rob.embeddings.position_embeddings.weight
    assert new.shape[0] == 258 and max_supported_length(rob) == 256
    assert torch.equal(new[:2], old[:2]) and torch.equal(new[2 + 64], old[2]) and torch.equal(new[2 + 70], old[8])
    with torch.no_grad():
        out = rob(input_ids=torch.randint(3, 100, (1, 250))).last_hidden_state
    assert out.shape == (1, 250, 16)
    dist = DistilBertModel(DistilBertConfig(vocab_size=100, dim=16, n_layers=1, n_heads=2, hidden_dim=32,
                                            max_position_embeddings=32)).eval()
    longify(dist, 100, 10)
    with torch.no_grad():
        assert dist(input_ids=torch.randint(3, 100, (1, 100))).last_hidden_state.shape == (1, 100, 16)


def test_unsupported_family():
    from transformers import GPT2Config, GPT2Model

    model = GPT2Model(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=50))
    with pytest.raises(PtmlabError, match="no structure map"):
        longify(model, 1024, 64)


def test_longify_of_the_random_tiny_model_is_reproducible(tmp_path):
    from safetensors.torch import load_file

    from ptmlab.longseq.pipeline import LongifyConfig, run_longify

    for name in ("a", "b"):
        torch.manual_seed(len(name) * 7 + ord(name))  # whatever state the process is in
        run_longify(LongifyConfig(model="tiny", max_length=1024, window=16, output=str(tmp_path / name)))
    a, b = (load_file(str(tmp_path / n / "model.safetensors")) for n in ("a", "b"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
