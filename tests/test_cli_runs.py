"""Commands over a finished run: ``evaluate RUN`` scores the run's own task and dev subset, ``--output`` is a
directory, the model card counts the model's parameters once; training with ``--precision fp16`` (a gradient
scaler) and ``--device``."""

from __future__ import annotations

import json
import re

import pytest
import torch

from ptmlab.cli import main
from tests.synthetic import write_task


def _ft(files, out, *extra):
    return ["finetune", "--model", "tiny", "--task", "syn", "--train-file", files["train"], "--dev-file",
            files["dev"], "--max-length", "32", "--batch-size", "16", "--lr", "3e-3", "--max-steps", "12",
            "--logging-steps", "2", "--precision", "fp32", "--output", str(out), *extra]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return write_task(tmp_path_factory.mktemp("task"), n_train=120, n_dev=80)


@pytest.fixture(scope="module")
def run(files, tmp_path_factory):
    """A tiny run scored on a 30-example dev subset drawn with seed 7 (evaluate's own default seed is 42)."""
    out = tmp_path_factory.mktemp("runs") / "r"
    assert main(_ft(files, out, "--max-eval", "30", "--seed", "7")) == 0
    return out


def test_evaluate_a_run_without_task_scores_its_own_task_and_subset(run, capsys, tmp_path):
    capsys.readouterr()
    assert main(["evaluate", str(run), "--output", str(tmp_path / "ev")]) == 0
    captured = capsys.readouterr()
    printed = json.loads(captured.out)
    summary = json.loads((run / "summary.json").read_text())
    assert printed["task"] == "syn" and printed["examples"] == 30
    assert printed["metrics"]["accuracy"] == pytest.approx(summary["metrics"]["accuracy"])
    assert "the run's own task 'syn'" in captured.err
    assert json.loads((tmp_path / "ev" / "evaluation.json").read_text()) == printed  # --output is a directory


def test_evaluate_options_given_win_over_the_runs(run, files, capsys):
    capsys.readouterr()
    assert main(["evaluate", str(run), "--max-eval", "10"]) == 0
    assert json.loads(capsys.readouterr().out)["examples"] == 10  # the run's task and files, the subset asked


def test_model_card_counts_the_parameters_once(run):
    """The card is written while best.safetensors still sits beside the model: it must not be counted."""
    summary = json.loads((run / "summary.json").read_text())
    card = (run / "README.md").read_text()
    count = re.search(r"- parameters: ([\d,]+)", card).group(1)
    assert int(count.replace(",", "")) == summary["params"] > 0
    assert not (run / "best.safetensors").exists()


def test_fp16_trains_with_a_gradient_scaler_like_fp32(files, tmp_path):
    from safetensors.torch import load_file

    assert main(_ft(files, tmp_path / "fp32", "--save-steps", "6")) == 0
    assert main(_ft(files, tmp_path / "fp16", "--save-steps", "6", "--precision", "fp16", "--device", "cpu")) == 0
    s16 = json.loads((tmp_path / "fp16" / "summary.json").read_text())
    assert s16["precision"] == "fp16"

    def losses(name):
        rows = [json.loads(line) for line in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]
        return [r["loss"] for r in rows if "loss" in r]

    l32, l16 = losses("fp32"), losses("fp16")
    assert len(l16) == len(l32) == 6 and l16 != l32  # half-precision matmuls: close, not identical
    assert max(abs(a - b) for a, b in zip(l16, l32, strict=True)) < 0.02
    w32, w16 = (load_file(str(tmp_path / n / "model.safetensors")) for n in ("fp32", "fp16"))
    assert max((w32[k] - w16[k]).abs().max().item() for k in w32) < 0.01


def test_fp16_loss_scale_is_checkpointed(files, tmp_path, monkeypatch):
    """The loss scale is part of the resumable state (trainer_state.json's loop state; the checkpoint is kept
    here by skipping the clean-up of a finished run)."""
    from ptmlab.train.args import FinetuneConfig
    from ptmlab.train.finetune import run_finetune
    from ptmlab.train.loop import Trainer

    monkeypatch.setattr(Trainer, "cleanup", lambda self: None)

    out = tmp_path / "r"
    cfg = FinetuneConfig(model="tiny", task="syn", train_file=files["train"], dev_file=files["dev"], max_length=32,
                         batch_size=16, lr=3e-3, max_steps=4, save_steps=2, precision="fp16", device="cpu",
                         output=str(out))
    run_finetune(cfg)
    loop = json.loads((out / "checkpoint" / "trainer_state.json").read_text())["loop"]
    state = loop["grad_scaler"]
    assert loop["step"] >= 2 and state["scale"] == 65536.0  # no overflow: the scale is kept
    assert state["_growth_tracker"] == loop["step"]  # one unskipped step counted per optimizer step


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is present")
def test_device_cuda_without_a_gpu_is_a_one_line_error(files, tmp_path, capsys):
    rc = main(_ft(files, tmp_path / "o", "--device", "cuda"))
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "--device cuda" in err[0], err
    assert not (tmp_path / "o").exists()
