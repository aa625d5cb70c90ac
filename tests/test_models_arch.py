"""Any model a user has: structure maps of XLM-R, DeBERTa-v2/v3, ModernBERT and ALBERT (tiny random models built from
their config classes), features refusing architectures they cannot handle, hub ids in every form (offline cache)."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoConfig, AutoModelForSequenceClassification

from ptmlab.core.errors import PtmlabError
from ptmlab.models.structure import STRUCTURES, structure_of
from ptmlab.train.optim import build_optimizer, depth_groups

SMALL = dict(hidden_size=32, num_hidden_layers=3, num_attention_heads=2, intermediate_size=64, vocab_size=100,
             max_position_embeddings=64, num_labels=3)
ARCHS = {
    "bert": {}, "xlm-roberta": {}, "deberta-v2": {}, "albert": {"embedding_size": 16},
    "modernbert": dict(pad_token_id=0, bos_token_id=1, eos_token_id=2, cls_token_id=1, sep_token_id=2),
}
PARTS = ("self_attention", "query", "key", "value", "attn_output", "attn_layernorm", "ffn_in", "ffn_out",
         "ffn_layernorm")


def tiny(model_type: str):
    torch.manual_seed(0)
    cfg = AutoConfig.for_model(model_type, **SMALL, **ARCHS[model_type])
    return AutoModelForSequenceClassification.from_config(cfg)


@pytest.mark.parametrize("arch", list(ARCHS))
def test_structure_map_finds_every_part(arch):
    model = tiny(arch)
    s = structure_of(model)
    layers = 1 if s.shared_layers else 3  # ALBERT applies one layer's weights at every depth
    assert s.num_layers(model) == layers
    for i in range(layers):
        for part in PARTS:
            assert isinstance(s.part(model, i, part), torch.nn.Module)
    assert s.embedding_module(model) is not None
    assert s.encoder(model).get_submodule(s.word_embeddings).weight.shape[0] == 100
    assert s.head_modules(model)


@pytest.mark.parametrize("arch", ["bert", "xlm-roberta", "deberta-v2", "modernbert"])
def test_depth_groups_cover_every_parameter_and_llrd_scales_them(arch):
    model = tiny(arch)
    groups = depth_groups(model, "--llrd")
    assert [g for g, _ in groups][:1] == ["head"] and groups[-1][0] == "embeddings"
    assert [g for g, _ in groups[1:4]] == ["layer.2", "layer.1", "layer.0"]
    names = [n for names in (ns for _, ns in groups) for n in names]
    assert sorted(names) == sorted(n for n, _ in model.named_parameters())
    opt = build_optimizer(model, 1e-3, 0.0, llrd=0.5)
    rates = {g["group"]: g["lr"] for g in opt.param_groups}
    assert rates["head"] == rates["layer.2"] == pytest.approx(1e-3)
    assert rates["layer.0"] == pytest.approx(1e-3 * 0.25) and rates["embeddings"] == pytest.approx(1e-3 * 0.125)


def test_features_refuse_architectures_they_cannot_handle():
    albert = tiny("albert")
    with pytest.raises(PtmlabError, match="--llrd needs separate weights per layer.*'albert'"):
        build_optimizer(albert, 1e-3, 0.0, llrd=0.8)
    assert build_optimizer(albert, 1e-3, 0.0)  # llrd 1: one group, no map needed
    funnel = AutoModelForSequenceClassification.from_config(AutoConfig.for_model(
        "gpt2", n_embd=32, n_layer=2, n_head=2, vocab_size=100, n_positions=64, pad_token_id=0))
    with pytest.raises(PtmlabError, match="--strategy gradual-unfreeze needs to know where the layers are, but "
                                          "architecture 'gpt2' has no structure map"):
        depth_groups(funnel, "--strategy gradual-unfreeze")
    from ptmlab.models.structure import require_split_qkv

    with pytest.raises(PtmlabError, match="head pruning needs separate query/key/value.*'modernbert'"):
        require_split_qkv(tiny("modernbert"), "head pruning")
    from ptmlab.compress.surgery import prune_structure

    with pytest.raises(PtmlabError, match="head pruning needs separate query/key/value.*'modernbert'"):
        prune_structure(tiny("modernbert"), heads={0: [1]})
    xlmr = tiny("xlm-roberta")
    prune_structure(xlmr, heads={0: [1]})  # a mapped architecture prunes: one head of 2 left in layer 0
    assert structure_of(xlmr).part(xlmr, 0, "query").out_features == 16
    assert {"xlm-roberta", "deberta-v2", "modernbert", "albert"} <= set(STRUCTURES.names())


@pytest.mark.parametrize("arch", ["xlm-roberta", "deberta-v2", "modernbert", "albert"])
def test_lora_trains_each_architecture(arch):
    from ptmlab.train.args import FinetuneConfig
    from ptmlab.train.strategies import make_strategy

    model = tiny(arch)
    strategy = make_strategy(FinetuneConfig(model="tiny", strategy="lora", output="x"))
    peft_model = strategy.prepare(model)
    trainable = [n for n, p in peft_model.named_parameters() if p.requires_grad]
    assert any("lora_A" in n for n in trainable) and any("classifier" in n for n in trainable)
    ids = torch.randint(3, 90, (2, 7))
    out = peft_model(input_ids=ids, attention_mask=torch.ones_like(ids), labels=torch.tensor([0, 2]))
    out.loss.backward()
    merged = strategy.finalize(peft_model)
    assert type(merged).__name__ == type(model).__name__


def test_lora_target_modules_option():
    from ptmlab.train.args import FinetuneConfig
    from ptmlab.train.strategies import make_strategy

    cfg = FinetuneConfig(model="tiny", strategy="lora", output="x", lora_target_modules=["query", "key", "dense"])
    peft_model = make_strategy(cfg).prepare(tiny("bert"))
    adapted = {n.split(".lora_A")[0].split(".")[-1] for n, _ in peft_model.named_parameters() if "lora_A" in n}
    assert adapted == {"query", "key", "dense"}
    bad = FinetuneConfig(model="tiny", strategy="lora", output="x", lora_target_modules=["q_proj"])
    with pytest.raises(PtmlabError, match="--lora-target-modules q_proj names no module of this 'bert' model"):
        make_strategy(bad).prepare(tiny("bert"))


def _fake_cache(root, repo: str, model, revision: str = "main"):
    """The hub cache layout huggingface_hub reads offline: models--OWNER--NAME/{refs/REV, snapshots/HASH/...}."""
    folder = root / ("models--" + repo.replace("/", "--"))
    commit = "a" * 40
    snap = folder / "snapshots" / commit
    model.save_pretrained(snap, safe_serialization=True)
    (folder / "refs").mkdir(parents=True)
    (folder / "refs" / revision).write_text(commit)
    return snap


def test_hub_ids_with_and_without_owner_load_from_the_cache_offline(tmp_path, monkeypatch):
    import huggingface_hub.constants as hc

    from ptmlab.models.zoo import load_model, resolve

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(hc, "HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setattr(hc, "HF_HUB_OFFLINE", True)
    snap = _fake_cache(tmp_path, "bert-tiny-test", tiny("bert"))
    _fake_cache(tmp_path, "someone/xlmr-tiny", tiny("xlm-roberta"), revision="v1")
    assert resolve("bert-tiny-test")[0] == str(snap)
    model = load_model("someone/xlmr-tiny@v1", num_labels=3)
    assert model.config.model_type == "xlm-roberta"
    with pytest.raises(PtmlabError, match="unknown model 'bert-base-uncased': .*as a hub id it is not in the "
                                          "local hub cache while the hub is offline"):
        resolve("bert-base-uncased")
    with pytest.raises(PtmlabError, match="'someone/xlmr-tiny' at revision 'v2': .*not in the local hub cache"):
        resolve("someone/xlmr-tiny@v2")
    with pytest.raises(PtmlabError, match="unknown model 'no such/model'"):
        resolve("no such/model")


def test_cli_names_the_uncached_hub_id_offline(tmp_path):
    from conftest import assert_clean_error, run_cli

    f = tmp_path / "t.csv"
    f.write_text("text,label\n" + "".join(f"row {i},{i % 2}\n" for i in range(12)))
    proc = run_cli("finetune", "--model", "bert-base-uncased", "--task", "t", "--train-file", str(f), "--output",
                   str(tmp_path / "o"), env={"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")})
    assert_clean_error(proc, "unknown model 'bert-base-uncased'", "not in the local hub cache")
