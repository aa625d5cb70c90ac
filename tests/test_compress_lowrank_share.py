"""Low-rank factorisation, cross-layer weight sharing and magnitude pruning: exact numbers, save/load round trips,
the commands with recovery fine-tuning, and clean errors."""

from __future__ import annotations

import copy
import json

import pytest
import torch

from ptmlab.cli import main
from ptmlab.compress.lowrank import LowRankLinear, choose_rank, factorise, low_rank
from ptmlab.compress.magnitude import encoder_linears, magnitude_prune
from ptmlab.compress.sharing import SharedLayer, even_groups, share_layers, shared_groups
from ptmlab.core.errors import PtmlabError
from ptmlab.models.loader import save_model
from ptmlab.models.structure import structure_of
from ptmlab.models.zoo import load_model, load_tokenizer
from tests.synthetic import write_task


@pytest.fixture()
def tiny():
    torch.manual_seed(0)
    return load_model("tiny", num_labels=2).eval()


def _x(seed: int = 0) -> dict:
    g = torch.Generator().manual_seed(seed)
    mask = torch.ones(3, 9, dtype=torch.long)
    mask[0, 6:] = 0
    return {"input_ids": torch.randint(1000, 5000, (3, 9), generator=g), "attention_mask": mask}


def _params(m) -> int:
    return sum(p.numel() for p in m.parameters())


def _reload(model, tmp_path):
    save_model(model, load_tokenizer("tiny"), tmp_path / "m")
    return load_model(str(tmp_path / "m"))


def test_svd_factors_are_the_best_rank_r_approximation():
    torch.manual_seed(1)
    lin = torch.nn.Linear(12, 8)
    s = torch.linalg.svdvals(lin.weight.detach().double())
    for r in (2, 5, 8):
        f = factorise(lin, r)
        approx = (f.up.weight @ f.down.weight).double()
        # Eckart-Young: the error is exactly the discarded singular values
        err = torch.linalg.norm(lin.weight.detach().double() - approx.detach())
        assert float(err) == pytest.approx(float(s[r:].square().sum().sqrt()), abs=1e-5)
    x = torch.randn(4, 12)
    assert torch.allclose(factorise(lin, 8)(x), lin(x), atol=1e-5)  # full rank reproduces the layer
    assert torch.equal(factorise(lin, 3).up.bias, lin.bias)


def test_rank_by_ratio_and_energy_by_hand():
    w = torch.diag(torch.tensor([3.0, 2.0, 1.0, 1.0]))  # s^2 = 9, 4, 1, 1 of 15
    assert choose_rank(w, energy=0.6) == 1  # 9/15 = 0.6
    assert choose_rank(w, energy=0.61) == 2
    assert choose_rank(w, energy=0.9) == 3  # 14/15 = 0.933
    assert choose_rank(w, energy=1.0) == 4
    assert choose_rank(w, ratio=0.25) == 1 and choose_rank(w, ratio=0.5) == 2 and choose_rank(w, ratio=0.3) == 2
    with pytest.raises(PtmlabError, match="exactly one"):
        choose_rank(w)
    with pytest.raises(PtmlabError, match="--rank-ratio 0"):
        choose_rank(w, ratio=0.0)


def test_low_rank_counts_and_round_trip(tiny, tmp_path):
    x = _x()
    before = _params(tiny)
    info = low_rank(tiny, ratio=0.25)  # tiny: hidden 64, FFN 128 -> rank 16 everywhere
    assert set(info["ranks"].values()) == {16}
    # q/k/v/out: 64x64 -> 16x(64+64); FFN in/out: 64x128 -> 16x(64+128); per layer, 2 layers
    saved = 2 * (4 * (64 * 64 - 16 * 128) + 2 * (64 * 128 - 16 * 192))
    assert info["params_before"] == before and info["params_after"] == before - saved == _params(tiny)
    assert isinstance(structure_of(tiny).part(tiny, 1, "ffn_in"), LowRankLinear)
    back = _reload(tiny, tmp_path)
    assert _params(back) == info["params_after"]
    assert torch.allclose(back(**x).logits, tiny(**x).logits, atol=1e-6)
    with pytest.raises(PtmlabError, match="not a Linear"):
        low_rank(back, ratio=0.25)


def test_higher_rank_is_closer_to_the_original(tiny):
    """A higher rank stays closer to the unfactorised model."""
    x = _x(1)
    ref = tiny(**x).logits
    near = copy.deepcopy(tiny)
    low_rank(near, ratio=0.3, parts=["ffn_in"])
    far = copy.deepcopy(tiny)
    low_rank(far, ratio=0.05, parts=["ffn_in"])
    assert (near(**x).logits - ref).abs().max() < (far(**x).logits - ref).abs().max()


def test_sharing_ties_layers_and_round_trips(tiny, tmp_path):
    x = _x(2)
    s = structure_of(tiny)
    layer_params = _params(s.layer(tiny, 1))
    expected = copy.deepcopy(tiny)  # both layers set by hand to the mean of the two
    with torch.no_grad():
        p0, p1 = dict(s.layer(expected, 0).named_parameters()), dict(s.layer(expected, 1).named_parameters())
        for k in p0:
            mean = (p0[k] + p1[k]) / 2
            p0[k].copy_(mean)
            p1[k].copy_(mean)
    before = _params(tiny)
    share_layers(tiny, [[0, 1]])
    assert isinstance(s.layer_list(tiny)[1], SharedLayer) and shared_groups(tiny) == [[0, 1]]
    assert _params(tiny) == before - layer_params
    assert torch.allclose(tiny(**x).logits, expected(**x).logits, atol=1e-6)
    back = _reload(tiny, tmp_path)
    assert _params(back) == _params(tiny) and shared_groups(back) == [[0, 1]]
    assert torch.allclose(back(**x).logits, tiny(**x).logits, atol=1e-6)
    # one set of weights: a gradient step reaches both positions
    back.train()
    back(**x).logits.sum().backward()
    assert s.layer(back, 0).get_submodule(s.query).weight.grad is not None


def test_even_groups_and_bad_groups():
    assert even_groups(6, 3) == [[0, 1], [2, 3], [4, 5]]
    assert even_groups(6, 4) == [[0, 1], [2], [3], [4, 5]]
    assert even_groups(12, 1) == [list(range(12))]
    with pytest.raises(PtmlabError, match="--groups 6"):
        even_groups(6, 6)
    m = load_model("tiny", num_labels=2)
    with pytest.raises(PtmlabError, match="one group only"):
        share_layers(m, [[0, 1], [1]])


@pytest.mark.parametrize("scope", ["global", "layer"])
def test_magnitude_pruning_is_exact_and_permanent(tiny, tmp_path, scope):
    x = _x(3)
    info = magnitude_prune(tiny, 0.6, scope)
    lin = encoder_linears(tiny)
    total = sum(m.weight.numel() for m in lin.values())
    zeros = sum(int((m.weight == 0).sum()) for m in lin.values())
    assert info["sparsity_encoder_linear"] == round(zeros / total, 4)
    if scope == "layer":  # each layer rounds its own count
        assert all(int((m.weight == 0).sum()) == round(0.6 * m.weight.numel()) for m in lin.values())
    else:  # one ranking over all layers: the total is exact, layers differ
        assert zeros == round(0.6 * total) and len(set(info["sparsity_per_layer"].values())) > 1
    assert not any("weight_orig" in n for n, _ in tiny.named_parameters())
    assert not any(m._forward_pre_hooks for m in lin.values())
    back = _reload(tiny, tmp_path)
    assert sum(int((m.weight == 0).sum()) for m in encoder_linears(back).values()) == zeros
    assert torch.allclose(back(**x).logits, tiny(**x).logits, atol=1e-6)


def test_global_magnitude_removes_the_smallest_weights(tiny):
    orig = {k: m.weight.detach().clone() for k, m in encoder_linears(tiny).items()}
    magnitude_prune(tiny, 0.3)
    gone = torch.cat([orig[k][m.weight == 0].abs() for k, m in encoder_linears(tiny).items()])
    kept = torch.cat([orig[k][m.weight != 0].abs() for k, m in encoder_linears(tiny).items()])
    assert float(gone.max()) <= float(kept.min())


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return write_task(tmp_path_factory.mktemp("task"), n_train=48, n_dev=24)


def _data(files):
    return ["--task", "syn", "--train-file", files["train"], "--dev-file", files["dev"], "--batch-size", "16",
            "--max-length", "32"]


def test_lowrank_command_recovers_and_reloads(files, tmp_path, capsys):
    out = tmp_path / "lr"
    assert main(["lowrank", "tiny", "--rank-ratio", "0.25", "--recover-epochs", "1", *_data(files),
                 "--output", str(out)]) == 0
    s = json.loads((out / "summary.json").read_text())
    assert s["params"] < s["params_before"] and set(s["change"]["ranks"].values()) == {16}
    assert _params(load_model(str(out))) == s["params"]
    assert "global_step" in s or "metrics" in s
    capsys.readouterr()
    assert main(["evaluate", str(out), *_data(files)[:6]]) == 0
    assert "accuracy" in capsys.readouterr().out


def test_share_and_magnitude_commands(files, tmp_path):
    out = tmp_path / "sh"
    assert main(["share", "tiny", "--groups", "1", "--recover-epochs", "0", *_data(files), "--output", str(out)]) == 0
    s = json.loads((out / "summary.json").read_text())
    back = load_model(str(out))
    assert shared_groups(back) == [[0, 1]] and _params(back) == s["params"] < s["params_before"]
    out = tmp_path / "mag"
    assert main(["magnitude", "tiny", "--sparsity", "0.5", "--scope", "layer", "--recover-epochs", "1",
                 *_data(files), "--output", str(out)]) == 0
    s = json.loads((out / "summary.json").read_text())
    # recovery moved weights, the masks were re-applied: still exactly half zero, same parameter count
    back = load_model(str(out))
    assert s["change"]["sparsity_encoder_linear"] == 0.5 and s["params"] == s["params_before"]
    lin = encoder_linears(back)
    assert sum(int((m.weight == 0).sum()) for m in lin.values()) == sum(m.weight.numel() for m in lin.values()) // 2


def test_compress_pipeline_with_new_steps(files, tmp_path):
    out = tmp_path / "c"
    assert main(["compress", "tiny", "--steps", "magnitude=0.5,lowrank=0.25,share=1", "--recover-epochs", "0",
                 "--latency-repeats", "1", *_data(files), "--output", str(out)]) == 0
    rows = json.loads((out / "summary.json").read_text())["rows"]
    assert [r["variant"] for r in rows] == ["original", "magnitude=0.5", "magnitude=0.5+lowrank=0.25",
                                            "magnitude=0.5+lowrank=0.25+share=1"]
    assert rows[1]["params"] == rows[0]["params"] > rows[2]["params"] > rows[3]["params"]
    assert rows[3]["size_mb"] < rows[2]["size_mb"] < rows[0]["size_mb"]
    back = load_model(str(out))
    assert _params(back) == rows[3]["params"]


def _err(capsys, *args):
    rc = main(list(args))
    lines = [ln for ln in capsys.readouterr().err.strip().splitlines() if ln.strip()]
    return rc, lines


@pytest.mark.parametrize("args,needle", [
    (["share", "tiny", "--groups", "2"], "--groups 2"),
    (["lowrank", "tiny"], "exactly one of --rank-ratio"),
    (["lowrank", "tiny", "--rank-ratio", "1.5"], "--rank-ratio 1.5"),
    (["magnitude", "tiny", "--sparsity", "1.0"], "[0, 1)"),
    (["compress", "tiny", "--steps", "lowrank=0.3,heads=0.2"], "cannot follow"),
    (["compress", "tiny", "--steps", "share=two"], "share=two"),
])
def test_bad_inputs_exit_2(files, tmp_path, capsys, args, needle):
    rc, lines = _err(capsys, *args, *_data(files), "--recover-epochs", "0", "--output", str(tmp_path / "o"))
    assert rc == 2 and len(lines) == 1 and lines[0].startswith("error:") and needle in lines[0], lines


def test_demo_stages_prune_and_quantize_on_tiny(tmp_path, monkeypatch):
    from ptmlab.commands.demo import DemoConfig
    from ptmlab.compress import demo_stages
    from ptmlab.compress.demo_stages import pruned_stage, quantized_stage
    from ptmlab.data.loaders import subset
    from ptmlab.models.latency import size_on_disk_mb
    from ptmlab.train.demo import DEMO_STAGES, DemoContext

    split, spec = DemoContext.test_split(None)
    small = subset(split, 300, 0)  # the demo scores the whole test split; 300 tweets keep this test short
    monkeypatch.setattr(DemoContext, "test_split", lambda self: (small, spec))
    monkeypatch.setattr(demo_stages, "RECOVERY_DEV", 100)
    assert {"pruned", "quantized"} <= set(DEMO_STAGES.names())
    torch.manual_seed(0)
    run = tmp_path / "demo"
    base, tok = load_model("tiny", num_labels=3).eval(), load_tokenizer("tiny")
    save_model(base, tok, run)
    base_mb = size_on_disk_mb(run / "model.safetensors")
    ctx = DemoContext(DemoConfig(model="tiny", max_train=64, max_length=32), run, {})
    fine_tuned = ctx.variant("fine-tuned", base, tok, ctx.test_metrics(base, tok), run)
    assert fine_tuned["size_mb"] == round(base_mb, 2)  # its own weights, not the variants the stages nest in run/
    (pruned,) = pruned_stage(ctx)
    # 8 heads, 40% -> ceil(3.2) = 4 removed, each 4 x 64 x 16 weights + 3 x 16 biases
    assert pruned["params"] == _params(base) - 4 * (4 * 64 * 16 + 3 * 16)
    assert sum(structure_of(load_model(str(run / "pruned"))).part(load_model(str(run / "pruned")), i,
                                                                  "attn_output").in_features // 16
               for i in range(2)) == 4
    (q,) = quantized_stage(ctx)
    fp32 = ctx.test_metrics(base, tok)
    assert abs(q["accuracy"] - fp32["accuracy"]) <= 0.02 and q["size_mb"] < base_mb
    assert set(pruned) >= {"variant", "accuracy", "macro_f1", "params", "size_mb"}
    # latency: every variant timed side by side at the end, speed-ups against the fine-tuned model
    ctx.time_variants(list(small.text[:8]), rounds=2)
    assert [r["variant"] for r, _m, _t in ctx.timed] == ["fine-tuned", pruned["variant"], q["variant"]]
    assert fine_tuned["speedup_b32"] == 1.0 and all(r["latency_b1_ms"] > 0 for r in (fine_tuned, pruned, q))
    assert pruned["speedup_b32"] == round(fine_tuned["latency_b32_ms"] / pruned["latency_b32_ms"], 2)
