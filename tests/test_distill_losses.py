"""Each distillation loss against a hand-computed value; layer maps; hook features against eager attention."""

import math

import pytest
import torch

from ptmlab.core.errors import PtmlabError
from ptmlab.distill.features import FeatureTap, relation
from ptmlab.distill.losses import LossContext, load_losses
from ptmlab.distill.maps import layer_map
from ptmlab.distill.matches import ModelInfo, check_matches, default_matches, parse_losses

L = load_losses()


def ctx(mask=None, **kw):
    return LossContext(torch.ones(1, 2) if mask is None else mask, **kw)


def test_soft_ce_is_t_squared_scaled_kl_mixed_with_labels():
    s, t = torch.tensor([[0.0, 0.0]]), torch.tensor([[math.log(3.0), 0.0]])
    pt = [math.sqrt(3) / (math.sqrt(3) + 1), 1 / (math.sqrt(3) + 1)]  # softmax(t / 2)
    kl = sum(p * math.log(p / 0.5) for p in pt)
    got = L.get("soft_ce").fn(s, t, ctx(temperature=2.0, alpha=1.0))
    assert got.item() == pytest.approx(4 * kl, rel=1e-5)
    mixed = L.get("soft_ce").fn(s, t, ctx(labels=torch.tensor([1]), temperature=2.0, alpha=0.25))
    assert mixed.item() == pytest.approx(0.25 * 4 * kl + 0.75 * math.log(2), rel=1e-5)
    t1 = L.get("soft_ce").fn(s, t, ctx(temperature=1.0, alpha=1.0))  # T=1: plain KL, no scaling
    assert t1.item() == pytest.approx(0.75 * math.log(1.5) + 0.25 * math.log(0.5), rel=1e-5)


def test_soft_ce_regression_is_mse_to_teacher_and_label():
    got = L.get("soft_ce").fn(torch.tensor([[1.0]]), torch.tensor([[3.0]]),
                              ctx(labels=torch.tensor([2.0]), regression=True, alpha=0.5))
    assert got.item() == pytest.approx(0.5 * 4 + 0.5 * 1)


def test_hidden_and_embedding_mse_ignore_padding():
    s = torch.tensor([[[1.0, 1.0], [3.0, 3.0], [9.0, 9.0]]])
    mask = torch.tensor([[1, 1, 0]])
    for name in ("hidden_mse", "embedding_mse"):
        assert L.get(name).fn(s, torch.zeros_like(s), ctx(mask)).item() == pytest.approx(5.0)


def test_attention_mse_and_kl():
    s = torch.tensor([[[[1.0, 0.0], [0.5, 0.5]]]])
    t = torch.tensor([[[[0.0, 1.0], [0.5, 0.5]]]])
    assert L.get("attention_mse").fn(s, t, ctx()).item() == pytest.approx(0.5)
    s2 = torch.tensor([[[[0.5, 0.5], [0.5, 0.5]]]])
    assert L.get("attention_kl").fn(s2, t, ctx()).item() == pytest.approx(math.log(2) / 2, rel=1e-5)


def test_cosine_and_pkd():
    s = torch.tensor([[[1.0, 0.0], [1.0, 1.0]]])
    t = torch.tensor([[[0.0, 1.0], [2.0, 2.0]]])
    assert L.get("cosine").fn(s, t, ctx()).item() == pytest.approx(0.5)
    got = L.get("pkd").fn(torch.tensor([[3.0, 4.0]]), torch.tensor([[1.0, 0.0]]), ctx())
    assert got.item() == pytest.approx(0.16 + 0.64)


def test_minilm_relations_work_across_widths():
    torch.manual_seed(0)
    mask = torch.tensor([[1, 1, 1, 0]])
    a = torch.randn(1, 4, 8)
    rel = relation(a, a, 2, mask)
    q = a.view(1, 4, 2, 4).transpose(1, 2)
    scores = q @ q.transpose(-1, -2) / 2.0
    scores[..., 3] = -1e9
    assert torch.allclose(rel, scores.softmax(-1), atol=1e-6)
    wide = relation(torch.randn(1, 4, 12), torch.randn(1, 4, 12), 2, mask)  # teacher width 12, student 8
    assert wide.shape == rel.shape
    loss = L.get("minilm")
    assert loss.fn(rel, rel, ctx(mask)).item() == pytest.approx(0.0, abs=1e-6)
    assert loss.fn(rel, wide, ctx(mask)).item() > 0


def test_layer_maps():
    assert layer_map("uniform", 3, 6) == [(0, 1), (1, 3), (2, 5)]
    assert layer_map("uniform", 4, 6) == [(0, 1), (1, 2), (2, 3), (3, 5)]
    assert layer_map("skip", 4, 6) == [(0, 0), (1, 1), (2, 2), (3, 3)]
    assert layer_map("last", 2, 6) == [(0, 4), (1, 5)]
    assert layer_map("1,3", 2, 6) == [(0, 1), (1, 3)]
    assert layer_map("0:1,1:5", 2, 6) == [(0, 1), (1, 5)]
    with pytest.raises(PtmlabError, match="teacher layer 7"):
        layer_map("0:7", 2, 6)
    with pytest.raises(PtmlabError, match="student layer 2"):
        layer_map("2:1", 2, 6)


def test_default_matches_and_checks():
    s, t = ModelInfo(3, 64, 4), ModelInfo(6, 128, 8)
    m = default_matches(parse_losses(["soft_ce", "hidden_mse:0.5", "pkd", "minilm"]), layer_map("uniform", 3, 6), s, t)
    kinds = [(x.loss, x.feature, x.student, x.teacher, x.weight) for x in m]
    assert kinds == [("soft_ce", "logits", None, None, 1.0), ("hidden_mse", "hidden", 0, 1, 0.5),
                     ("hidden_mse", "hidden", 1, 3, 0.5), ("hidden_mse", "hidden", 2, 5, 0.5),
                     ("pkd", "cls", 0, 1, 1.0), ("pkd", "cls", 1, 3, 1.0),
                     ("minilm", "qk_relation", 2, 5, 1.0), ("minilm", "vv_relation", 2, 5, 1.0)]
    check_matches(m, s, t)
    att = default_matches(parse_losses(["attention_kl"]), [(0, 1)], s, t)
    with pytest.raises(PtmlabError, match="4 heads and the teacher 8"):
        check_matches(att, s, t)
    with pytest.raises(PtmlabError, match="bilstm student has none"):
        check_matches(default_matches(parse_losses(["hidden_mse"]), [(0, 1)], s, t), ModelInfo(0, 64, None, "bilstm"),
                      t)
    with pytest.raises(PtmlabError, match="unknown distillation loss 'hiden_mse'"):
        parse_losses(["hiden_mse"])


def test_hooked_attention_equals_eager_attention():
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=4, intermediate_size=32)
    model = BertModel(cfg, add_pooling_layer=False).eval()
    model.set_attn_implementation("eager")
    ids = torch.randint(5, 50, (2, 6))
    mask = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]])
    tap = FeatureTap(model, {("attention", 1), ("hidden", 0)})
    with torch.no_grad():
        out = tap.run(model, {"input_ids": ids, "attention_mask": mask, "output_attentions": True,
                              "output_hidden_states": True})
    assert torch.allclose(tap.feature("attention", 1, mask)[:, :, :, :4], out.attentions[1][:, :, :, :4], atol=1e-5)
    assert torch.allclose(tap.feature("hidden", 0, mask), out.hidden_states[1], atol=1e-6)
    tap.remove()
