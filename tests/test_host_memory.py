"""Host memory while training on a CPU (``train.host_memory``): freed memory stays in the process, so a step
that frees and reallocates a gradient above glibc's mmap ceiling stops faulting fresh pages; the loop uses it by
default and it changes no number."""

from __future__ import annotations

import resource

import pytest
import torch

import ptmlab.train.host_memory as hm


def _faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def _steps(model, opt, ids, n: int) -> list[int]:
    """Page faults of each of ``n`` training steps."""
    out = []
    for _ in range(n):
        before = _faults()
        model(ids).sum().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        out.append(_faults() - before)
    return out


@pytest.mark.skipif(hm._glibc() is None, reason="glibc malloc only (Linux with glibc)")
def test_steps_stop_faulting_fresh_pages_inside_and_settings_come_back():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(100_000, 128), torch.nn.Linear(128, 2))  # 51 MB gradient
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.randint(0, 100_000, (32, 16))
    outside = min(_steps(model, opt, ids, 4)[1:])
    if outside < 5_000:
        pytest.skip(f"this process's allocator does not return large blocks to the kernel ({outside} faults/step)")
    with hm.reuse_host_memory() as applied:
        assert applied and hm._depth == 1
        with hm.reuse_host_memory() as nested:     # nested use: applied once, undone once
            assert nested and hm._depth == 2
        assert hm._depth == 1
        inside = _steps(model, opt, ids, 6)[3:]    # steady state, once the heap holds the step's blocks
    assert hm._depth == 0
    assert max(inside) < outside / 20, (inside, outside)
    after = min(_steps(model, opt, ids, 3)[1:])
    assert after > outside / 2                     # glibc's settings are back: large blocks go to the kernel again


def test_disabled_or_without_glibc_it_does_nothing(monkeypatch):
    with hm.reuse_host_memory(enabled=False) as applied:
        assert applied is False and hm._depth == 0
    monkeypatch.setattr(hm, "_glibc", lambda: None)
    with hm.reuse_host_memory() as applied:
        assert applied is False and hm._depth == 0


def test_the_training_loop_uses_it_and_it_changes_no_number(tmp_path, monkeypatch):
    """``ptmlab finetune`` on a CPU trains inside ``reuse_host_memory`` (off with ``--no-reuse-host-memory``),
    and the two runs give the same weights."""
    from safetensors.torch import load_file

    from ptmlab.cli import main
    from tests.synthetic import write_task

    seen = []
    real = hm.reuse_host_memory

    def spy(enabled=True):
        seen.append(enabled)
        return real(enabled)

    monkeypatch.setattr(hm, "reuse_host_memory", spy)
    files = write_task(tmp_path / "task", n_train=32, n_dev=16)
    base = ["finetune", "--model", "tiny", "--task", "syn", "--train-file", files["train"], "--dev-file",
            files["dev"], "--batch-size", "8", "--max-length", "24", "--epochs", "1", "--lr", "1e-3", "--no-test",
            "--precision", "fp32"]
    assert main([*base, "--output", str(tmp_path / "a")]) == 0
    assert main([*base, "--output", str(tmp_path / "b"), "--no-reuse-host-memory"]) == 0
    assert seen == [True, False]
    a, b = load_file(tmp_path / "a" / "model.safetensors"), load_file(tmp_path / "b" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
