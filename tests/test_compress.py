"""Structured pruning: removing heads/neurons/layers equals gating them, round trips, importance by finite
differences, targets."""

from __future__ import annotations

import copy

import pytest
import torch

from ptmlab.compress.importance import Importance, compute_importance
from ptmlab.compress.surgery import ffn_per_layer, heads_per_layer, prune_structure
from ptmlab.compress.targets import ffn_mask, fraction_for_params, head_mask
from ptmlab.core.errors import PtmlabError
from ptmlab.data.encode import Encoded
from ptmlab.models.gates import Gates
from ptmlab.models.loader import save_model
from ptmlab.models.structure import structure_of
from ptmlab.models.zoo import load_model, load_tokenizer


@pytest.fixture()
def tiny():
    torch.manual_seed(0)
    return load_model("tiny", num_labels=2).eval()


def _inputs(seed: int = 0, n: int = 3, t: int = 9) -> dict:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1000, 5000, (n, t), generator=g)
    mask = torch.ones(n, t, dtype=torch.long)
    mask[0, 6:] = 0
    return {"input_ids": ids, "attention_mask": mask}


def _enc(n: int = 6, seed: int = 1) -> Encoded:
    g = torch.Generator().manual_seed(seed)
    ids = [[101, *torch.randint(1000, 5000, (int(k),), generator=g).tolist(), 102]
           for k in torch.randint(3, 10, (n,), generator=g)]
    return Encoded(ids, [[0] * len(x) for x in ids], [i % 2 for i in range(n)])


def test_removing_heads_equals_gating_them_to_zero(tiny):
    x = _inputs()
    gone = {0: [1, 3], 1: [0]}
    with Gates(tiny) as g:
        for layer, hs in gone.items():
            for h in hs:
                g.remove_head(layer, h)
        gated = tiny(**x).logits
    pruned = copy.deepcopy(tiny)
    prune_structure(pruned, heads={0: [0, 2], 1: [1, 2, 3]})
    assert heads_per_layer(pruned) == [2, 3]
    assert torch.allclose(pruned(**x).logits, gated, atol=1e-5)
    # and pruning changes the output (the heads mattered), so the equality is not vacuous
    assert not torch.allclose(tiny(**x).logits, gated, atol=1e-4)


def test_removing_ffn_neurons_and_layers_equals_zeroing_and_skipping(tiny):
    x = _inputs(1)
    s = structure_of(tiny)
    zeroed = copy.deepcopy(tiny)
    drop = [0, 5, 77]
    with torch.no_grad():
        s.part(zeroed, 1, "ffn_out").weight[:, drop] = 0
    with Gates(zeroed) as g:
        g.skip_layer(0)
        expected = zeroed(**x).logits
    pruned = copy.deepcopy(tiny)
    prune_structure(pruned, ffn={1: [j for j in range(128) if j not in drop]}, layers=[0])
    assert s.num_layers(pruned) == 1 and ffn_per_layer(pruned) == [125]
    assert torch.allclose(pruned(**x).logits, expected, atol=1e-5)


def test_pruned_model_round_trips_through_save_and_load(tiny, tmp_path):
    x = _inputs(2)
    prune_structure(tiny, heads={0: [3], 1: [0, 2]}, ffn={0: list(range(0, 128, 2))})
    prune_structure(tiny, heads={1: [1]}, layers=[])  # a second cut replays in order
    save_model(tiny, load_tokenizer("tiny"), tmp_path / "p")
    back = load_model(str(tmp_path / "p"))
    assert heads_per_layer(back) == [1, 1] and ffn_per_layer(back) == [64, 128]
    assert torch.allclose(back(**x).logits, tiny(**x).logits, atol=1e-6)
    n_params = sum(p.numel() for p in back.parameters())
    assert n_params == sum(p.numel() for p in tiny.parameters())


def test_mpnet_heads_prune_like_gating():
    from transformers import MPNetConfig, MPNetForSequenceClassification

    torch.manual_seed(0)
    cfg = MPNetConfig(vocab_size=200, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                      intermediate_size=64, num_labels=2)
    model = MPNetForSequenceClassification(cfg).eval()
    x = {"input_ids": torch.randint(5, 200, (2, 7)), "attention_mask": torch.ones(2, 7, dtype=torch.long)}
    with Gates(model) as g:
        g.remove_head(0, 0).remove_head(1, 2).remove_head(1, 3)
        gated = model(**x).logits
    prune_structure(model, heads={0: [1, 2, 3], 1: [0, 1]})
    assert torch.allclose(model(**x).logits, gated, atol=1e-5)


def test_gate_importance_matches_finite_differences(tiny):
    model = tiny.double()
    enc = _enc()
    imp = compute_importance("gate", model, enc, pad_id=0, batch_size=64)
    from ptmlab.compress.importance import _batches, _loss

    (batch,) = _batches(model, enc, 0, 64)
    eps = 1e-4
    with Gates(model) as g:
        for layer, head in [(0, 0), (0, 3), (1, 2)]:
            vals, at = [], []
            for sign in (1, -1):
                with torch.no_grad():
                    g.head_scale[layer, head] = 1 + sign * eps
                    at.append(float(g.head_scale[layer, head]))  # the gate is float32: use its stored value
                    vals.append(float(_loss(model, batch, True)))
            with torch.no_grad():
                g.head_scale[layer, head] = 1.0
            fd = abs(vals[0] - vals[1]) / (at[0] - at[1])
            assert imp.heads[layer][head].item() == pytest.approx(fd, rel=1e-4, abs=1e-8)


def test_grad_weight_importance_matches_finite_differences(tiny):
    """|sum grad x weight| of a head is |dL/d alpha| when the head's q/k/v rows and output columns scale by alpha."""
    model = tiny.double()
    enc = _enc(seed=3)
    imp = compute_importance("grad-weight", model, enc, pad_id=0, batch_size=64)
    from ptmlab.compress.importance import _batches, _loss

    (batch,) = _batches(model, enc, 0, 64)
    s = structure_of(model)
    d = 16

    def loss_with_scaled_head(alpha: float, layer: int, head: int) -> float:
        m = copy.deepcopy(model)
        rows = slice(head * d, (head + 1) * d)
        with torch.no_grad():
            for part in ("query", "key", "value"):
                s.part(m, layer, part).weight[rows] *= alpha
                s.part(m, layer, part).bias[rows] *= alpha
            s.part(m, layer, "attn_output").weight[:, rows] *= alpha
            return float(_loss(m, batch, True))

    def loss_with_scaled_neuron(alpha: float, layer: int, j: int) -> float:
        m = copy.deepcopy(model)
        with torch.no_grad():
            s.part(m, layer, "ffn_in").weight[j] *= alpha
            s.part(m, layer, "ffn_in").bias[j] *= alpha
            s.part(m, layer, "ffn_out").weight[:, j] *= alpha
            return float(_loss(m, batch, True))

    eps = 1e-5
    for layer, head in [(0, 1), (1, 3)]:
        fd = abs(loss_with_scaled_head(1 + eps, layer, head) - loss_with_scaled_head(1 - eps, layer, head)) / (2 * eps)
        assert imp.heads[layer][head].item() == pytest.approx(fd, rel=1e-3, abs=1e-8)
    for layer, j in [(0, 7), (1, 100)]:
        fd = abs(loss_with_scaled_neuron(1 + eps, layer, j) - loss_with_scaled_neuron(1 - eps, layer, j)) / (2 * eps)
        assert imp.ffn[layer][j].item() == pytest.approx(fd, rel=1e-3, abs=1e-8)


def test_entropy_importance_without_labels(tiny):
    enc = _enc(seed=4)
    imp = compute_importance("entropy", tiny, Encoded(enc.input_ids, enc.token_type_ids, None), pad_id=0)
    assert [len(h) for h in imp.heads] == [4, 4] and [len(f) for f in imp.ffn] == [128, 128]
    assert all(bool((h > 0).all()) for h in imp.heads)
    assert tiny.config._attn_implementation == "sdpa"  # restored


def test_targets_by_hand():
    imp = Importance(heads=[torch.tensor([0.1, 0.9, 0.8, 0.7]), torch.tensor([0.2, 0.3, 0.25, 0.9])],
                     ffn=[torch.arange(10.0), torch.arange(10.0).flip(0)], method="x")
    # normalised per layer, the three lowest are layer0/h0, layer1/h0, layer1/h2
    assert head_mask(imp, 0.3) == [[False, True, True, True], [False, True, False, True]]
    # never the last head of a layer
    assert [sum(r) for r in head_mask(imp, 0.99)] == [1, 1]
    assert ffn_mask(imp, 0.2)[0] == [False, False] + [True] * 8
    assert ffn_mask(imp, 0.2)[1] == [True] * 8 + [False, False]
    per_head, per_neuron = 4 * 64 * 16 + 3 * 16, 2 * 64 + 1

    def removed(f):  # what the masks really remove at fraction f (heads: one global count; FFN: per layer)
        heads = sum(not k for row in head_mask(imp, f) for k in row)
        neurons = sum(not k for row in ffn_mask(imp, f) for k in row)
        return heads * per_head + neurons * per_neuron

    f = fraction_for_params(0.1, 200_000, 64, 16, [4, 4], [10, 10])  # the widths of `imp`
    assert removed(f) >= 20_000 > removed(f - 0.01)
    with pytest.raises(PtmlabError, match="--heads 1.0"):
        head_mask(imp, 1.0)
    with pytest.raises(PtmlabError, match="removable"):
        fraction_for_params(0.9, 200_000, 64, 16, [4, 4], [128, 128])


def test_pruning_every_head_of_a_layer_is_refused(tiny):
    with pytest.raises(PtmlabError, match="every head of layer 1"):
        prune_structure(tiny, heads={1: []})
    with pytest.raises(PtmlabError, match="no layer"):
        prune_structure(tiny, layers=[0, 1])
