"""Exactness of the loop: a SIGKILLed run resumed equals an uninterrupted one; 2 processes equal 1."""

import json
import os
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

from tests.conftest import ROOT, assert_clean_error, kill_at_step, run_cli
from tests.synthetic import write_task


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return write_task(tmp_path_factory.mktemp("task"), n_train=300, n_dev=60)


def _args(files, out, *extra):
    return ["finetune", "--model", "tiny", "--task", "synthetic", "--train-file", files["train"], "--dev-file",
            files["dev"], "--max-length", "32", "--lr", "1e-3", "--seed", "1", "--output", str(out), *extra]


def _weights(run):
    return load_file(run / "model.safetensors")


def test_sigkill_then_resume_equals_uninterrupted(files, tmp_path):
    common = ["--batch-size", "8", "--max-steps", "150", "--save-steps", "5", "--eval-steps", "50",
              "--precision", "fp32"]
    ref = run_cli(*_args(files, tmp_path / "ref", *common))
    assert ref.returncode == 0, ref.stderr[-2000:]

    kill_at_step(_args(files, tmp_path / "killed", *common), tmp_path / "killed", 20)

    resumed = run_cli("finetune", "--resume", str(tmp_path / "killed"))
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    a, b = _weights(tmp_path / "ref"), _weights(tmp_path / "killed")
    assert a.keys() == b.keys()
    for k in a:
        assert torch.allclose(a[k], b[k], atol=1e-6), k
    sa = json.loads((tmp_path / "ref" / "summary.json").read_text())
    sb = json.loads((tmp_path / "killed" / "summary.json").read_text())
    assert sa["metrics"] == sb["metrics"] and sb["steps"] == 150
    steps = [r["step"] for r in map(json.loads, (tmp_path / "killed" / "metrics.jsonl").read_text().splitlines())
             if "loss" in r]
    assert steps == sorted(set(steps))  # no duplicated log rows after the resume


def test_resume_of_corrupt_checkpoint_is_a_clean_error(files, tmp_path):
    run = tmp_path / "c"
    r = run_cli(*_args(files, run, "--batch-size", "8", "--max-steps", "12", "--save-steps", "4"))
    assert r.returncode == 0
    (run / "checkpoint").mkdir()
    (run / "checkpoint" / "trainer_state.json").write_text("{}")
    (run / "checkpoint" / "model.safetensors").write_bytes(b"\x00\x01truncated")
    assert_clean_error(run_cli("finetune", "--resume", str(run)), "corrupt")


def test_two_processes_give_the_same_weights_as_one(files, tmp_path):
    common = ["--batch-size", "8", "--max-steps", "12", "--dropout", "0", "--precision", "fp32",
              "--eval-steps", "6"]
    one = run_cli(*_args(files, tmp_path / "one", *common))
    assert one.returncode == 0, one.stderr[-2000:]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("PTMLAB_DEBUG", None)
    two = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                          "--master_port", "29517", "-m", "ptmlab", *_args(files, tmp_path / "two", *common)],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert two.returncode == 0, two.stderr[-3000:]
    assert json.loads((tmp_path / "two" / "summary.json").read_text())["world_size"] == 2
    a, b = _weights(tmp_path / "one"), _weights(tmp_path / "two")
    for k in a:
        assert torch.allclose(a[k], b[k], atol=2e-5), (k, (a[k] - b[k]).abs().max())
