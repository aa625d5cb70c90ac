"""Window attention: exact against full attention when the window covers everything, and against a direct (slow)
masked computation at 4k tokens with padding, through a stock BertModel."""

from __future__ import annotations

import pytest
import torch
from transformers import BertConfig, BertModel

from ptmlab.core.errors import PtmlabError
from ptmlab.longseq.window import ATTN_NAME, even_window, window_attention


def _direct(q, k, v, key_mask, window, glob):
    """softmax(QK^T + mask) V with the n x n window/global/padding mask written out; fully masked rows give 0."""
    n = q.shape[2]
    half = even_window(window) // 2
    i = torch.arange(n)
    g = torch.zeros(n, dtype=torch.bool)
    g[[p for p in glob if p < n]] = True
    allowed = ((i[:, None] - i[None, :]).abs() <= half) | g[:, None] | g[None, :]
    allowed = allowed[None, None] & key_mask[:, None, None, :]
    scores = (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5
    probs = scores.masked_fill(~allowed, float("-inf")).softmax(-1).nan_to_num(0.0)
    return probs @ v


@pytest.mark.parametrize("n,window,glob", [(37, 8, (0,)), (50, 7, (0, 5, 49)), (64, 16, ()), (300, 40, (0, 3))])
def test_function_matches_direct_masked_computation(n, window, glob):
    torch.manual_seed(n)
    q, k, v = (torch.randn(2, 3, n, 8, dtype=torch.float64) for _ in range(3))
    mask = torch.ones(2, n, dtype=torch.bool)
    mask[1, n - 11:] = False
    got = window_attention(q, k, v, mask, window, glob)
    assert torch.allclose(got, _direct(q, k, v, mask, window, glob), atol=1e-10)
    # a narrow window really is narrower than full attention
    assert not torch.allclose(got, _direct(q, k, v, mask, 10 * n, glob), atol=1e-3)


def _tiny_bert(max_positions: int, window: int) -> tuple[BertModel, BertConfig]:
    torch.manual_seed(0)
    config = BertConfig(vocab_size=200, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=max_positions)
    config.ptmlab_window = window
    config.ptmlab_global_tokens = [0]
    return BertModel(config, add_pooling_layer=False).eval(), config


@pytest.mark.parametrize("impl", ["sdpa", "eager"])
def test_model_equals_full_attention_when_window_covers_sequence(impl):
    model, _ = _tiny_bert(128, window=256)
    ids = torch.randint(5, 200, (3, 100))
    mask = torch.ones_like(ids)
    mask[1, 60:] = 0
    mask[2, 7:] = 0
    with torch.no_grad():
        model.set_attn_implementation(impl)
        full = model(input_ids=ids, attention_mask=mask).last_hidden_state
        model.set_attn_implementation(ATTN_NAME)
        win = model(input_ids=ids, attention_mask=mask).last_hidden_state
    real = mask.bool()
    assert (full[real] - win[real]).abs().max() < 1e-5


def test_model_at_4k_with_padding_matches_direct_computation():
    """Every layer's attention replaced by the direct masked computation gives the same hidden states."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    n, window = 4096, 64
    model, _ = _tiny_bert(n, window)
    ids = torch.randint(5, 200, (2, n))
    mask = torch.ones_like(ids)
    mask[1, 3000:] = 0
    ids[1, 3000:] = 0

    def direct(module, q, k, v, attention_mask, scaling=None, dropout=0.0, **kw):
        key_mask = attention_mask if attention_mask is not None else torch.ones(q.shape[0], q.shape[2], dtype=bool)
        return _direct(q, k, v, key_mask, window, (0,)).transpose(1, 2).contiguous(), None

    AttentionInterface.register("test_direct_window", direct)
    AttentionMaskInterface.register("test_direct_window", lambda attention_mask=None, **kw: attention_mask)
    with torch.no_grad():
        model.set_attn_implementation(ATTN_NAME)
        fast = model(input_ids=ids, attention_mask=mask).last_hidden_state
        model.set_attn_implementation("test_direct_window")
        slow = model(input_ids=ids, attention_mask=mask).last_hidden_state
    real = mask.bool()
    assert (fast[real] - slow[real]).abs().max() < 1e-5
    # padding changes nothing for the real tokens of row 1 that cannot see it (window 64, far from position 3000)
    with torch.no_grad():
        model.set_attn_implementation(ATTN_NAME)
        short = model(input_ids=ids[1:, :3000], attention_mask=mask[1:, :3000]).last_hidden_state
    assert (short[0] - fast[1, :3000]).abs().max() < 1e-5


def test_gradients_flow_and_padding_rows_stay_finite():
    model, _ = _tiny_bert(512, window=16)
    model.train()
    ids = torch.randint(5, 200, (2, 300))
    mask = torch.ones_like(ids)
    mask[0, 100:] = 0
    model.set_attn_implementation(ATTN_NAME)
    out = model(input_ids=ids, attention_mask=mask).last_hidden_state
    assert torch.isfinite(out).all()
    out[mask.bool()].pow(2).mean().backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)
    assert model.embeddings.word_embeddings.weight.grad.abs().sum() > 0


def test_bad_windows_and_masks():
    assert even_window(255) == 256 and even_window(256) == 256
    with pytest.raises(PtmlabError, match="window 1"):
        even_window(1)
    model, _ = _tiny_bert(64, window=8)
    model.set_attn_implementation(ATTN_NAME)
    ids = torch.randint(5, 200, (1, 20))
    with pytest.raises(PtmlabError, match="2D padding mask"):
        model(input_ids=ids, attention_mask=torch.ones(1, 1, 20, 20, dtype=torch.bool))
