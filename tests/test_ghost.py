"""GhostBERT ghost modules (zero init, no padding leak, round trip, parameter count, the command), distillation from
the unpruned model during pruning recovery, and early validation of ``share --groups``."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

from ptmlab.cli import main
from ptmlab.compress import ghost
from ptmlab.compress.ghost import GhostModule, add_ghost_modules, ghost_modules, ghost_parameter_count, ghost_params_for
from ptmlab.compress.prune import distill_loss
from ptmlab.compress.surgery import prune_structure
from ptmlab.core.errors import PtmlabError
from ptmlab.models.loader import save_model
from ptmlab.models.zoo import load_model, load_tokenizer
from tests.conftest import assert_clean_error, run_cli
from tests.synthetic import write_task

KEEP = dict(heads={0: [0, 2], 1: [1, 2, 3]}, ffn={0: list(range(0, 128, 2)), 1: list(range(96))})


@pytest.fixture()
def pruned():
    torch.manual_seed(0)
    model = load_model("tiny", num_labels=2).eval()
    prune_structure(model, **KEEP)
    return model


def _x(seed: int = 0) -> dict:
    g = torch.Generator().manual_seed(seed)
    mask = torch.ones(3, 9, dtype=torch.long)
    mask[0, 5:] = 0
    return {"input_ids": torch.randint(1000, 5000, (3, 9), generator=g), "attention_mask": mask}


def _params(m) -> int:
    return sum(p.numel() for p in m.parameters())


def _randomise(model) -> None:
    torch.manual_seed(1)
    for g in ghost_modules(model):
        torch.nn.init.normal_(g.proj.weight, std=0.5)
        torch.nn.init.normal_(g.conv.weight, std=1.0)


def test_ghost_insertion_keeps_outputs_and_counts_parameters(pruned):
    x = _x()
    before, ref = _params(pruned), pruned(**x).logits
    expected = ghost_params_for(pruned, kernel=3)
    per_part = add_ghost_modules(pruned, kernel=3)
    # per layer: c x 3 conv taps + c conv biases + c x 64 output weights, for attn (32, 48) and ffn (64, 96) channels
    assert per_part == {"attn": (32 + 48) * (3 + 1 + 64), "ffn": (64 + 96) * (3 + 1 + 64)}
    assert ghost_parameter_count(pruned) == sum(per_part.values()) == expected == _params(pruned) - before
    assert len(ghost_modules(pruned)) == 4
    assert torch.equal(pruned(**x).logits, ref)  # zero-initialised output weights: nothing changes
    _randomise(pruned)
    assert not torch.allclose(pruned(**x).logits, ref, atol=1e-4)  # ...and the ghosts are wired in


def test_padding_does_not_leak_through_the_convolution(pruned):
    add_ghost_modules(pruned, kernel=5)
    _randomise(pruned)
    x = _x(1)
    short = {k: v[:1, :5] for k, v in x.items()}  # the first row without its padding
    assert torch.allclose(pruned(**short).logits, pruned(**x).logits[:1], atol=1e-5)
    # the module itself: whatever sits at padded positions, real positions see the same ghost features
    holder = ghost._MaskHolder()
    g = GhostModule(6, 4, 3, holder)
    torch.nn.init.normal_(g.proj.weight)
    holder.mask = torch.tensor([[1, 1, 1, 0, 0]])
    a, b = torch.randn(1, 5, 6), torch.randn(1, 5, 6)
    b[:, :3] = a[:, :3]
    assert torch.allclose(g(a)[:, :3], g(b)[:, :3], atol=1e-6)
    holder.mask = None
    assert not torch.allclose(g(a)[:, :3], g(b)[:, :3], atol=1e-6)  # unmasked, the padding would leak


def test_ghost_model_round_trips(pruned, tmp_path):
    add_ghost_modules(pruned)
    _randomise(pruned)
    save_model(pruned, load_tokenizer("tiny"), tmp_path / "g")
    back = load_model(str(tmp_path / "g"))
    x = _x(2)
    assert _params(back) == _params(pruned) and ghost_parameter_count(back) == ghost_parameter_count(pruned)
    assert torch.allclose(back(**x).logits, pruned(**x).logits, atol=1e-6)
    kinds = [m["kind"] for m in back.config.ptmlab_modifications]
    assert kinds == ["structured_prune", "ghost"]


def test_ghost_bad_input(pruned):
    for k in (2, 0, -1):
        with pytest.raises(PtmlabError, match=f"--ghost-kernel {k}"):
            add_ghost_modules(pruned, kernel=k)
    add_ghost_modules(pruned)
    with pytest.raises(PtmlabError, match="already has ghost"):
        add_ghost_modules(pruned)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return write_task(tmp_path_factory.mktemp("task"), n_train=48, n_dev=24)


def _data(files):
    return ["--task", "syn", "--train-file", files["train"], "--dev-file", files["dev"], "--batch-size", "16",
            "--max-length", "32"]


def test_ghost_command_and_evaluate(files, pruned, tmp_path, capsys):
    save_model(pruned, load_tokenizer("tiny"), tmp_path / "p")
    out = tmp_path / "g"
    assert main(["ghost", str(tmp_path / "p"), "--ghost-kernel", "3", "--recover-epochs", "1", *_data(files),
                 "--output", str(out)]) == 0
    s = json.loads((out / "summary.json").read_text())
    assert s["ghost_params"] == ghost_params_for(pruned) and s["params"] == s["params_before"] + s["ghost_params"]
    assert s["dev_changed"] == s["dev_before"]  # zero init
    assert _params(load_model(str(out))) == s["params"]
    capsys.readouterr()
    assert main(["evaluate", str(out), *_data(files)[:6]]) == 0
    assert "accuracy" in capsys.readouterr().out
    # ghosts hook the output projections, so they must come last
    assert main(["prune", str(out), "--heads", "0.3", "--recover-epochs", "0", *_data(files),
                 "--output", str(tmp_path / "pp")]) == 2
    assert "ghost modules" in capsys.readouterr().err
    assert main(["ghost", str(tmp_path / "p"), "--ghost-kernel", "4", *_data(files), "--output",
                 str(tmp_path / "bad")]) == 2
    assert "--ghost-kernel 4" in capsys.readouterr().err


def test_distill_loss_is_the_soft_ce_mix():
    torch.manual_seed(3)
    student, teacher = load_model("tiny", num_labels=2).eval(), load_model("tiny", num_labels=2).eval()
    batch = {**_x(4), "labels": torch.tensor([0, 1, 1]), "index": torch.tensor([5, 7, 9])}
    alpha, temp = 0.3, 2.5
    loss = distill_loss(teacher, alpha, temp)
    got = loss(student, batch)
    s, t = student(**_x(4)).logits, teacher(**_x(4)).logits
    kl = (F.softmax(t / temp, -1) * (F.log_softmax(t / temp, -1) - F.log_softmax(s / temp, -1))).sum(-1)
    want = alpha * temp**2 * kl + (1 - alpha) * F.cross_entropy(s, batch["labels"], reduction="none")
    assert got.shape == (3,) and torch.allclose(got, want, atol=1e-5)
    # the teacher's logits are computed once per example id (later epochs reuse them)
    with torch.no_grad():
        teacher.classifier.bias.copy_(torch.tensor([5.0, -5.0]))
    assert torch.allclose(loss(student, batch), want, atol=1e-5)
    assert not torch.allclose(distill_loss(teacher, alpha, temp)(student, batch), want, atol=1e-5)


def test_prune_recovers_with_distillation(files, tmp_path, capsys):
    out = tmp_path / "p"
    assert main(["prune", "tiny", "--heads", "0.5", "--ffn", "0.5", "--recover-epochs", "1", "--distill-alpha", "0.5",
                 "--distill-temperature", "3", "--importance-examples", "16", *_data(files), "--output", str(out)]) == 0
    s = json.loads((out / "summary.json").read_text())
    assert s["recovery_loss"].startswith("soft_ce (alpha 0.5, T 3)") and s["heads"] == 4
    capsys.readouterr()
    assert main(["prune", "tiny", "--heads", "0.5", "--recover-epochs", "0", "--distill-alpha", "0.5",
                 *_data(files), "--output", str(tmp_path / "x")]) == 2
    assert "--distill-alpha" in capsys.readouterr().err


def test_share_bad_groups_fails_before_loading(files, tmp_path, monkeypatch, capsys):
    import ptmlab.train.lifecycle as lifecycle

    def boom(*a, **k):
        raise AssertionError("the model was loaded before --groups was checked")

    monkeypatch.setattr(lifecycle, "build_task_model", boom)
    assert main(["share", "tiny", "--groups", "2", *_data(files), "--output", str(tmp_path / "s")]) == 2
    assert "--groups 2" in capsys.readouterr().err  # tiny has 2 layers: 1 group at most
    assert not (tmp_path / "s").exists()
    proc = run_cli("share", "tiny", "--groups", "0", *_data(files), "--output", str(tmp_path / "s"))
    assert_clean_error(proc, "--groups 0")
