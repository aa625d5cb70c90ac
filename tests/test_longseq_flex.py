"""The FlexAttention kernel of window attention (ptmlab/longseq/flex.py): the same attention as the blockwise kernel,
its tile map exact, the kernel choice per device, dropout and gradients, and the fall-backs when compiling fails.
(FlexAttention has no backward on a CPU, so its gradients can only be checked on a GPU.)"""

from __future__ import annotations

import warnings

import pytest
import torch
from transformers import BertConfig, BertModel

from ptmlab.core.errors import PtmlabError
from ptmlab.longseq import flex, window
from ptmlab.longseq.window import ATTN_NAME, kernel_for, set_kernel, window_attention


@pytest.fixture(autouse=True)
def _fresh_state():
    saved, tiles = dict(flex._STATE), dict(flex._TILES)
    yield
    flex._STATE.clear()
    flex._STATE.update(saved)
    flex._TILES.clear()
    flex._TILES.update(tiles)
    set_kernel(None)


def _qkv_mask(b, n, d=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(b, 4, n, d, generator=g) for _ in range(3))
    mask = torch.ones(b, n, dtype=torch.bool)
    mask[1, n - 11:] = False
    if b > 2:
        mask[2, n // 3:] = False  # its tail is far from every real key: rows with nothing to see when no global
    return q, k, v, mask


@pytest.mark.parametrize("n,win,glob", [(37, 8, (0,)), (300, 40, (0, 3)), (700, 256, (0, 400)), (1000, 64, ()),
                                        (256, 1024, (0,)), (129, 2, (0, 128))])
def test_flex_kernel_equals_the_blockwise_kernel_with_padding(n, win, glob):
    q, k, v, mask = _qkv_mask(3, n, seed=n)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # eager FlexAttention warns that it is not compiled
        got = flex.flex_window_attention(q, k, v, mask, win, glob)
    want = window_attention(q, k, v, mask, win, glob)
    assert got.shape == want.shape
    assert torch.allclose(got, want, atol=1e-5), (got - want).abs().max()


@pytest.mark.parametrize("n_pad,half,gpos", [(512, 32, (0,)), (1024, 128, (0, 700)), (2048, 128, ()),
                                             (384, 1, (0, 128)), (256, 512, (0,)), (1024, 300, (0,))])
def test_tile_maps_are_exact(n_pad, half, gpos):
    """Compiled FlexAttention computes only the listed tiles and skips the mask inside "full" ones, so a missing
    tile would silently drop attention and a wrongly full one would let a token see too far."""
    need, full = flex._tiles(n_pad, half, gpos, "cpu")
    nb = n_pad // flex.TILE
    i = torch.arange(n_pad)
    g = torch.zeros(n_pad, dtype=torch.bool)
    g[list(gpos)] = True
    allowed = ((i[:, None] - i[None, :]).abs() <= half) | g[:, None] | g[None, :]
    tiles = allowed.view(nb, flex.TILE, nb, flex.TILE)
    assert torch.equal(need, tiles.any(3).any(1))
    band = ((i[:, None] - i[None, :]).abs() <= half).view(nb, flex.TILE, nb, flex.TILE)
    assert torch.equal(full, band.all(3).all(1))
    if n_pad == 2048 and not gpos:
        assert int(need.sum(1).max()) == 3  # the band touches 3 of 16 tiles per query tile: the work is linear


def test_block_mask_lists_partial_and_full_tiles_per_sequence_and_is_reused_across_layers():
    q, k, v, mask = _qkv_mask(3, 600, seed=2)  # 600 tokens: 5 tiles, the last one partly internal padding
    bm = flex._block_mask(mask, 3, 600, 640, 128, (0,), "cpu")
    assert flex._block_mask(mask, 3, 600, 640, 128, (0,), "cpu") is bm  # the next layer: same mask object
    with torch.inference_mode():  # not reused across modes: inference tensors cannot be saved for a backward
        assert flex._block_mask(mask, 3, 600, 640, 128, (0,), "cpu") is not bm
    none = flex._block_mask(None, 3, 640, 640, 128, (0,), "cpu")
    assert flex._block_mask(None, 3, 640, 640, 128, (0,), "cpu") is none
    mask2 = mask.clone()
    assert flex._block_mask(mask2, 3, 600, 640, 128, (0,), "cpu") is not bm
    need, band_full = flex._tiles(640, 128, (0,), "cpu")
    for b in range(3):
        real = torch.zeros(640, dtype=torch.bool)
        real[:600] = mask[b]
        tile_real = real.view(5, flex.TILE).all(-1)
        full = torch.zeros(5, 5, dtype=torch.bool)
        part = torch.zeros(5, 5, dtype=torch.bool)
        for qb in range(5):
            full[qb, bm.full_kv_indices[b, 0, qb, :bm.full_kv_num_blocks[b, 0, qb]].long()] = True
            part[qb, bm.kv_indices[b, 0, qb, :bm.kv_num_blocks[b, 0, qb]].long()] = True
        assert torch.equal(full, band_full & tile_real[None, :])  # a tile holding padding is never full
        assert torch.equal(full | part, need) and not (full & part).any()
    assert int(bm.full_kv_num_blocks[2, 0].sum()) < int(bm.full_kv_num_blocks[0, 0].sum())  # more padding


@pytest.mark.slow
def test_compiled_flex_kernel_uses_the_tile_map_and_survives_a_failed_dynamic_compile():
    """The path CUDA takes, compiled on the CPU: equal to the blockwise kernel at two lengths. The CPU's dynamic-shape
    compile fails at the second length (a C++ compile error), so this also runs the static-shape fall-back."""
    flex._STATE.update(fns={}, mode="dynamic", compile_cpu=True)
    torch._dynamo.reset()
    for n in (256, 384):
        q, k, v, mask = _qkv_mask(2, n, seed=n)
        got = flex.flex_window_attention(q, k, v, mask, 64, (0,))
        assert torch.allclose(got, window_attention(q, k, v, mask, 64, (0,)), atol=1e-5)
    assert flex._STATE["mode"] in ("dynamic", "static")
    assert flex._STATE["broken"] is None
    # the compiled kernel computes only the listed tiles (eager FlexAttention would ignore the list): with the
    # [CLS] tile dropped from every row's list the result changes, so what ran above was the compiled kernel
    flex._TILES[(384, 32, (0,), "cpu")] = (torch.eye(3, dtype=torch.bool), torch.zeros(3, 3, dtype=torch.bool))
    q, k, v, mask = _qkv_mask(2, 384, seed=384)
    assert not torch.allclose(flex.flex_window_attention(q, k, v, mask, 64, (0,)), got, atol=1e-3)


def test_kernel_choice_by_device_dropout_and_setting(monkeypatch):
    monkeypatch.delenv("PTMLAB_WINDOW_KERNEL", raising=False)
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert kernel_for(cpu, 0.0) == "blocks"
    assert kernel_for(cuda, 0.0) == "flex"
    assert kernel_for(cuda, 0.1) == "blocks"  # FlexAttention has no dropout
    assert kernel_for(cuda, 0.0, grad=True) == "flex"
    monkeypatch.setenv("PTMLAB_WINDOW_KERNEL", "flex")
    assert kernel_for(cpu, 0.0) == "flex"
    assert kernel_for(cpu, 0.0, grad=True) == "blocks"  # no FlexAttention backward on a CPU
    set_kernel("blocks")
    assert kernel_for(cuda, 0.0) == "blocks"
    set_kernel(None)
    monkeypatch.setenv("PTMLAB_WINDOW_KERNEL", "fast")
    with pytest.raises(PtmlabError, match="PTMLAB_WINDOW_KERNEL='fast'"):
        kernel_for(cpu, 0.0)
    with pytest.raises(PtmlabError, match="unknown window-attention kernel"):
        set_kernel("triton")
    flex._STATE["broken"] = "CompileError: x"
    monkeypatch.setenv("PTMLAB_WINDOW_KERNEL", "auto")
    assert kernel_for(cuda, 0.0) == "blocks"


def test_a_failing_flex_call_warns_once_and_the_model_keeps_running():
    calls = []

    def broken():
        calls.append("flex")
        raise RuntimeError("compile failed")

    with pytest.warns(RuntimeWarning, match="blockwise kernel from now on"):
        assert flex.run_or_fall_back(broken, lambda: "blocks") == "blocks"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert flex.run_or_fall_back(broken, lambda: "blocks") == "blocks"
    assert calls == ["flex"] and not flex.available()


def test_a_stock_bert_runs_the_flex_kernel_and_training_with_dropout_keeps_the_blockwise_one(monkeypatch):
    torch.manual_seed(0)
    config = BertConfig(vocab_size=200, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=400)
    config.ptmlab_window, config.ptmlab_global_tokens = 16, [0]
    model = BertModel(config, add_pooling_layer=False).eval()
    model.set_attn_implementation(ATTN_NAME)
    ids = torch.randint(5, 200, (2, 300))
    mask = torch.ones_like(ids)
    mask[1, 250:] = 0
    used = []
    real = flex.flex_window_attention
    monkeypatch.setattr(flex, "flex_window_attention", lambda *a, **kw: used.append(1) or real(*a, **kw))
    with torch.no_grad():
        set_kernel("blocks")
        blocks = model(input_ids=ids, attention_mask=mask).last_hidden_state
        set_kernel("flex")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fast = model(input_ids=ids, attention_mask=mask).last_hidden_state
        with torch.inference_mode():  # how evaluation and serving run: the padding mask is an inference tensor
            served = model(input_ids=ids, attention_mask=mask).last_hidden_state
    assert len(used) == 4  # one call per layer and pass
    assert torch.allclose(blocks, fast, atol=1e-5) and torch.allclose(blocks, served, atol=1e-5)
    assert flex._STATE["broken"] is None  # the flex kernel itself ran, it did not fall back
    model.train()  # attention dropout 0.1, gradients on a CPU: the blockwise kernel runs
    model(input_ids=ids, attention_mask=mask).last_hidden_state.sum().backward()
    assert len(used) == 4
    model.eval()  # no dropout, but gradients (an attribution on a CPU): still the blockwise kernel
    model(input_ids=ids, attention_mask=mask).last_hidden_state.sum().backward()
    assert len(used) == 4
    assert window.kernel_for(torch.device("cuda"), 0.1) == "blocks"
