import pytest
import torch

from ptmlab.core.errors import PtmlabError
from ptmlab.models.gates import Gates
from ptmlab.models.structure import structure_of
from ptmlab.models.zoo import load_model, load_tokenizer


@pytest.fixture(scope="module")
def model_and_batch():
    torch.manual_seed(0)
    model = load_model("tiny", num_labels=2).eval()
    tok = load_tokenizer("tiny")
    batch = tok(["a short one", "a much longer sentence with more tokens in it"], return_tensors="pt",
                padding=True)
    return model, batch


def test_gate_zero_equals_zeroing_the_heads_output_weights(model_and_batch):
    model, batch = model_and_batch
    with Gates(model) as g:
        g.remove_head(1, 2)
        gated = model(**batch).logits
    plain = model(**batch).logits
    assert not torch.allclose(gated, plain, atol=1e-5)  # the head mattered, and the hook is gone again
    s = structure_of(model)
    proj = s.part(model, 1, "attn_output")
    saved = proj.weight.data.clone()
    proj.weight.data[:, 2 * 16:3 * 16] = 0  # head 2 of 4, head_dim 16
    try:
        assert torch.allclose(model(**batch).logits, gated, atol=1e-5)
    finally:
        proj.weight.data.copy_(saved)


def test_uniform_attention_gives_the_mean_of_values(model_and_batch):
    model, batch = model_and_batch
    s = structure_of(model)
    captured = {}
    with Gates(model) as g:  # capture hooks registered after the gates see the gated context
        g.uniform_head(0, 1)
        h1 = s.part(model, 0, "attn_output").register_forward_pre_hook(
            lambda m, inp: captured.__setitem__("ctx", inp[0].detach().clone()))
        h2 = s.part(model, 0, "value").register_forward_hook(
            lambda m, inp, out: captured.__setitem__("v", out.detach().clone()))
        try:
            model(**batch)
        finally:
            h1.remove()
            h2.remove()
    ctx, v = captured["ctx"], captured["v"]
    mask = batch["attention_mask"]
    for b in range(2):
        n = int(mask[b].sum())
        expected = v[b, :n, 16:32].mean(0)
        assert torch.allclose(ctx[b, :, 16:32], expected.expand(ctx.shape[1], 16), atol=1e-5)
    assert not torch.allclose(ctx[0, 0, 16:32], ctx[1, 0, 16:32])  # each example's own mean


def test_layer_skip_is_identity(model_and_batch):
    model, batch = model_and_batch
    with Gates(model) as g:
        g.skip_layer(1)
        out = model(**batch, output_hidden_states=True).hidden_states
    assert torch.equal(out[2], out[1])
    with pytest.raises(PtmlabError, match="layer 7 is out of range"):
        Gates(model).skip_layer(7)
    with pytest.raises(PtmlabError, match="head 4 of layer 0 is out of range"):
        Gates(model).remove_head(0, 4)


def test_head_gate_gradients_match_finite_differences(model_and_batch):
    import copy

    model, batch = model_and_batch
    model = copy.deepcopy(model).double()  # float64 so the finite difference is not rounding noise
    labels = torch.tensor([0, 1])
    g = Gates(model, requires_grad=True).attach()
    g.head_scale.data = g.head_scale.data.double()
    try:
        loss = torch.nn.functional.cross_entropy(model(**batch).logits, labels)
        loss.backward()
        grad = g.head_scale.grad.clone()
        eps = 1e-4
        for layer, head in ((0, 3), (1, 0)):
            with torch.no_grad():
                g.head_scale[layer, head] += eps
                up = torch.nn.functional.cross_entropy(model(**batch).logits, labels)
                g.head_scale[layer, head] -= 2 * eps
                down = torch.nn.functional.cross_entropy(model(**batch).logits, labels)
                g.head_scale[layer, head] += eps
            fd = ((up - down) / (2 * eps)).item()
            assert grad[layer, head].item() == pytest.approx(fd, rel=1e-4, abs=1e-9)
    finally:
        g.detach()
    assert grad.abs().sum() > 0
