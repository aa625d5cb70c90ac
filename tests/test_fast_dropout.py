"""The cheaper CPU dropout: the keep rate and scaling of torch's dropout, gradients through the same mask,
reproducible from torch's seed, attention equal to sdpa when nothing is dropped, and a model restored exactly after
training."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from ptmlab.train.fast_dropout import ATTN_NAME, FastDropout, _attention, _math_attention, dropout, fast_dropout


def test_keep_rate_and_scale_match_bernoulli():
    torch.manual_seed(0)
    x = torch.ones(400_000)
    for p in (0.1, 0.25, 0.5):
        y = dropout(x, p)
        kept = (y != 0).float().mean().item()
        # binomial standard deviation over 400k elements is under 0.001: 5 of them
        assert abs(kept - (1 - p)) < 0.004, (p, kept)
        assert torch.allclose(y[y != 0], torch.full_like(y[y != 0], 65536 / (65536 - round(p * 65536))))
        assert abs(y.mean().item() - 1.0) < 0.01  # unbiased: E[dropout(x)] = x
    # every one of the 16 bits matters: the four elements sharing one random word are independent
    y = dropout(torch.ones(4, 200_000), 0.5).ne(0).float()
    assert abs((y[0] * y[1]).mean().item() - 0.25) < 0.005 and abs((y[2] * y[3]).mean().item() - 0.25) < 0.005


def test_identity_in_eval_and_p_zero_and_gradient_through_the_mask():
    x = torch.randn(3, 5, 7, requires_grad=True)
    assert dropout(x, 0.1, training=False) is x and dropout(x, 0.0) is x
    torch.manual_seed(1)
    y = dropout(x, 0.3)
    y.backward(torch.ones_like(y))
    scale = 65536 / (65536 - round(0.3 * 65536))
    assert torch.allclose(x.grad, (y != 0).float() * scale)
    assert torch.equal(dropout(torch.ones(3), 1.0), torch.zeros(3))


def test_reproducible_from_torch_seed():
    x = torch.randn(1000)
    torch.manual_seed(7)
    a = dropout(x, 0.1)
    torch.manual_seed(7)
    b = dropout(x, 0.1)
    c = dropout(x, 0.1)
    assert torch.equal(a, b) and not torch.equal(b, c)


def test_attention_math_path_equals_sdpa_without_dropout():
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, 9, 8) for _ in range(3))
    pad = torch.ones(2, 1, 9, 9, dtype=torch.bool)
    pad[1, :, :, 6:] = False  # the second example has 3 padding keys
    bias = torch.randn(1, 4, 9, 9)
    module = nn.Module()
    module.is_causal = False
    for mask, pb in ((None, None), (pad, None), (torch.where(pad, 0.0, -1e9), None), (pad, bias)):
        want, _ = sdpa_attention_forward(module, q, k, v, mask, dropout=0.0, scaling=0.3, position_bias=pb)
        got = _math_attention(q, k, v, mask, 0.3, pb, 0.0)
        assert torch.allclose(got, want, atol=1e-5), (mask is None, pb is None)
    # the interface entry is sdpa itself outside CPU training with dropout (modules pass dropout 0 in eval mode)
    module.train(False)
    out, _ = _attention(module, q, k, v, pad, dropout=0.0, scaling=0.3)
    assert torch.equal(out, sdpa_attention_forward(module, q, k, v, pad, dropout=0.0, scaling=0.3)[0])


def test_attention_drops_probabilities_while_training():
    torch.manual_seed(0)
    q, k = torch.randn(1, 2, 64, 8), torch.randn(1, 2, 64, 8)
    v = torch.eye(64).expand(1, 2, 64, 64)  # the output is the (dropped) probability matrix itself
    module = nn.Module()
    module.is_causal = False
    out, _ = _attention(module.train(), q, k, v, None, dropout=0.5, scaling=1.0)
    zeros = (out == 0).float().mean().item()
    assert 0.45 < zeros < 0.55  # half the probabilities dropped, the rest scaled by 2
    probs = torch.softmax(q @ k.transpose(-1, -2), dim=-1).transpose(1, 2)
    kept = out != 0
    assert torch.allclose(out[kept], 2 * probs[kept], atol=1e-5)


def test_written_out_attention_equals_the_kernel_with_the_same_mask(monkeypatch):
    """A torch without the math kernel gets the written-out form: the same numbers from the same seed."""
    import ptmlab.train.fast_dropout as fd

    q, k, v = (torch.randn(2, 3, 7, 4) for _ in range(3))
    pad = torch.ones(2, 1, 7, 7, dtype=torch.bool)
    pad[0, :, :, 5:] = False
    bias = torch.randn(1, 3, 7, 7)
    torch.manual_seed(5)
    kernel = _math_attention(q, k, v, pad, 0.5, bias, 0.2)
    monkeypatch.setattr(fd, "_math_kernel", lambda: None)
    torch.manual_seed(5)
    written = _math_attention(q, k, v, pad, 0.5, bias, 0.2)
    assert torch.allclose(kernel, written, atol=1e-5)
    assert not torch.allclose(kernel, _math_attention(q, k, v, pad, 0.5, bias, 0.0), atol=1e-3)  # it dropped


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_installed_while_training_and_restored(attn):
    from ptmlab.models.zoo import load_model

    torch.manual_seed(0)
    model = load_model("tiny", num_labels=2, attn_implementation=attn, dropout=0.3)
    before = {n: type(m) for n, m in model.named_modules()}
    impl = model.config._attn_implementation
    handle = fast_dropout(model)
    swapped = [n for n, m in model.named_modules() if type(m) is FastDropout]
    assert swapped and all(before[n] is nn.Dropout for n in swapped)
    if impl == "sdpa":
        assert model.config._attn_implementation == ATTN_NAME
    ids = torch.randint(5, 90, (2, 12))
    model.train()
    torch.manual_seed(3)
    a = model(input_ids=ids).logits
    torch.manual_seed(3)
    b = model(input_ids=ids).logits
    model.eval()
    with torch.no_grad():
        c = model(input_ids=ids).logits
    handle.remove()
    assert torch.equal(a, b) and not torch.allclose(a, c)  # seeded, and dropping something
    assert {n: type(m) for n, m in model.named_modules()} == before
    assert model.config._attn_implementation == impl
    with torch.no_grad():
        assert torch.equal(model(input_ids=ids).logits, c)  # evaluation untouched by the install/remove


def test_the_training_loop_installs_it_and_removes_it(tmp_path, monkeypatch):
    """``ptmlab finetune`` trains with the fast dropout (seeded runs repeat exactly), differs from
    ``--no-fast-dropout`` (another random stream), and saves a model with plain ``nn.Dropout`` modules."""
    import ptmlab.train.fast_dropout as fd
    from ptmlab.cli import main
    from ptmlab.models.zoo import load_model
    from tests.synthetic import write_task

    calls = []
    real = fd.dropout
    monkeypatch.setattr(fd, "dropout", lambda x, p, training=True: calls.append(p) or real(x, p, training))
    files = write_task(tmp_path / "task", n_train=32, n_dev=16)
    base = ["finetune", "--model", "tiny", "--task", "syn", "--train-file", files["train"], "--dev-file",
            files["dev"], "--batch-size", "8", "--max-length", "24", "--epochs", "1", "--lr", "1e-3", "--no-test",
            "--precision", "fp32"]

    def weights(name, *extra):
        assert main([*base, "--output", str(tmp_path / name), *extra]) == 0
        from safetensors.torch import load_file

        return load_file(tmp_path / name / "model.safetensors")

    a, b = weights("a"), weights("b")
    assert calls and all(abs(p - 0.1) < 1e-9 for p in calls)  # tiny's dropout, through the fast path
    n = len(calls)
    c = weights("c", "--no-fast-dropout")
    assert len(calls) == n  # torch's dropout alone
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert any(not torch.equal(a[k], c[k]) for k in a)
    saved = load_model(str(tmp_path / "a"))
    assert not any(type(m) is FastDropout for m in saved.modules())
    assert saved.config._attn_implementation != ATTN_NAME


def test_a_randomly_initialised_mpnet_keeps_its_own_attention_through_fast_dropout():
    """``--random-init`` on MPNet (no sdpa in transformers) used to claim sdpa; restoring it after the fast
    dropout then raised and stopped ``ptmlab study random-init --budget full``. Built from a small MPNet config."""
    from transformers import MPNetConfig, MPNetForSequenceClassification

    cfg = MPNetConfig(vocab_size=100, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                      intermediate_size=64, num_labels=2)
    model = MPNetForSequenceClassification._from_config(cfg)
    before = model.config._attn_implementation
    handle = fast_dropout(model)
    handle.remove()
    assert model.config._attn_implementation == before


def test_a_training_step_prints_no_testing_hook_warning():
    """torch's math kernel warns (straight to the C++ log) when handed a mask; a user's run must not show it."""
    import subprocess
    import sys

    code = ("import torch\n"
            "from ptmlab.train.fast_dropout import _math_attention\n"
            "q = torch.randn(2, 2, 4, 8, requires_grad=True)\n"
            "_math_attention(q, q, q, None, None, None, 0.1).sum().backward()\n"
            "print('ran')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "ran" in done.stdout, done.stderr
    assert "Dropout mask should only be used" not in done.stderr, done.stderr
