"""Host memory while training on a CPU (``train.host_memory``): freed memory stays in the process, so a step
that frees and reallocates a gradient above glibc's mmap ceiling stops faulting fresh pages; the loop uses it by
default and it changes no number."""

from __future__ import annotations

import contextlib

import pytest
import torch

import ptmlab.core.host_memory as hm

# The page-fault measurement runs in a fresh interpreter: glibc's allocator state (its arenas, free chunks and
# thresholds) is shaped by whatever ran before in the same process, and under pytest-xdist that is other tests.
_MEASURE = r"""
import json, resource, torch
import ptmlab.core.host_memory as hm

def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt

def steps(model, opt, ids, n):
    out = []
    for _ in range(n):
        before = faults()
        model(ids).sum().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        out.append(faults() - before)
    return out

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Embedding(100_000, 128), torch.nn.Linear(128, 2))  # 51 MB gradient
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
ids = torch.randint(0, 100_000, (32, 16))
res = {"outside": min(steps(model, opt, ids, 4)[1:])}
with hm.reuse_host_memory() as applied:
    res["applied"], res["blocks"] = applied, list(hm._blocks)
    with hm.reuse_host_memory() as nested:
        res["nested"], res["nested_blocks"] = nested, list(hm._blocks)
    res["back_to_one"] = list(hm._blocks)
    res["inside"] = steps(model, opt, ids, 8)[3:]  # steady state, once the heap holds the step's blocks
res["blocks_after"] = list(hm._blocks)
res["after"] = min(steps(model, opt, ids, 3)[1:])
print(json.dumps(res))
"""


@pytest.mark.skipif(hm._glibc() is None, reason="glibc malloc only (Linux with glibc)")
def test_steps_stop_faulting_fresh_pages_inside_and_settings_come_back():
    import json
    import os
    import subprocess
    import sys

    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", _MEASURE], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    r = json.loads(done.stdout.strip().splitlines()[-1])
    outside, inside = r["outside"], r["inside"]
    grad_pages = 100_000 * 128 * 4 // 4096         # 12,500 pages: above glibc's largest mmap threshold (32 MB),
    assert outside > 0.9 * grad_pages, outside     # so a fresh interpreter faults them anew every step outside
    assert r["applied"] and r["blocks"] == [True]
    assert r["nested"] and r["nested_blocks"] == [True, True]  # nested use: applied once, undone once
    assert r["back_to_one"] == [True] and r["blocks_after"] == []
    # steps fault no fresh page, or only one block's worth now and then (a thread's arena still grows once), against
    # every block of every step outside
    assert min(inside) < outside / 20, (inside, outside)
    assert sum(inside) / len(inside) < outside / 2, (inside, outside)
    # glibc's settings are back: the gradient goes to the kernel again (its pages faulted anew each step)
    assert r["after"] > 0.9 * grad_pages, (r["after"], outside)


def test_disabled_or_without_glibc_it_does_nothing_and_nested_blocks_follow_the_outermost(monkeypatch):
    calls = []

    class Libc:
        def mallopt(self, *a):
            calls.append(("mallopt", *a))

        def malloc_trim(self, *a):
            calls.append(("trim", *a))

    monkeypatch.setattr(hm, "_glibc", lambda: Libc())
    with hm.reuse_host_memory(enabled=False) as applied:
        assert applied is False
        with hm.reuse_host_memory() as inner:      # an evaluation inside a run that turned it off stays off
            assert inner is False
    assert calls == [] and hm._blocks == []
    with hm.reuse_host_memory() as applied, hm.reuse_host_memory(enabled=False) as inner:
        assert applied is True and inner is True and len(calls) == 2
    assert [c[0] for c in calls] == ["mallopt", "mallopt", "mallopt", "mallopt", "trim"] and hm._blocks == []
    monkeypatch.setattr(hm, "_glibc", lambda: None)
    with hm.reuse_host_memory() as applied:
        assert applied is False
    assert hm._blocks == []


def test_predict_logits_runs_inside_it_on_a_cpu(monkeypatch):
    """Evaluation, prediction and serving's model passes keep their freed activations' pages too."""
    from ptmlab.data.encode import Encoded
    from ptmlab.models.zoo import load_model
    from ptmlab.train.evaluate import predict_logits

    model = load_model("tiny", num_labels=2)
    states = []
    model.register_forward_hook(lambda *_: states.append(list(hm._blocks)))
    enc = Encoded(input_ids=[[1, 5, 6, 2], [1, 7, 2]], token_type_ids=None, labels=None)
    plain = predict_logits(model, enc, pad_id=0, batch_size=1)
    assert states and all(s == [hm._glibc() is not None] for s in states)
    with hm.reuse_host_memory(enabled=False):
        assert (predict_logits(model, enc, pad_id=0, batch_size=1) == plain).all()
    assert states[-1] == [False, False] and hm._blocks == []


def test_the_training_loop_uses_it_and_it_changes_no_number(tmp_path, monkeypatch):
    """``ptmlab finetune`` on a CPU trains inside ``reuse_host_memory`` (off with ``--no-reuse-host-memory``),
    and the two runs give the same weights."""
    from safetensors.torch import load_file

    from ptmlab.cli import main
    from tests.synthetic import write_task

    seen = []
    real = hm.reuse_host_memory

    @contextlib.contextmanager
    def spy(enabled=True):
        outermost = not hm._blocks
        with real(enabled) as applied:
            if outermost:
                seen.append(applied)
            yield applied

    monkeypatch.setattr(hm, "reuse_host_memory", spy)
    files = write_task(tmp_path / "task", n_train=32, n_dev=16)
    base = ["finetune", "--model", "tiny", "--task", "syn", "--train-file", files["train"], "--dev-file",
            files["dev"], "--batch-size", "8", "--max-length", "24", "--epochs", "1", "--lr", "1e-3", "--no-test",
            "--precision", "fp32"]
    assert main([*base, "--output", str(tmp_path / "a")]) == 0
    assert main([*base, "--output", str(tmp_path / "b"), "--no-reuse-host-memory"]) == 0
    assert seen[0] is True and seen[seen.index(False):] == [False]  # training (with its evaluations) on, then off
    a, b = load_file(tmp_path / "a" / "model.safetensors"), load_file(tmp_path / "b" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
