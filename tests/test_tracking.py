"""Tracking and provenance: --report-to tensorboard writes the loss curve; summary.json records where numbers came
from; eval_seconds is measured."""

from __future__ import annotations

import json

from conftest import assert_clean_error, run_cli


def _data(tmp_path):
    f = tmp_path / "t.csv"
    f.write_text("text,label\n" + "".join(f"{['awful', 'great'][i % 2]} film {i},{i % 2}\n" for i in range(40)))
    return f


def test_report_to_tensorboard_writes_the_loss_curve_and_summary_records_provenance(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out = tmp_path / "run"
    proc = run_cli("finetune", "--model", "tiny", "--task", "t", "--train-file", str(_data(tmp_path)), "--output",
                   str(out), "--max-steps", "6", "--logging-steps", "2", "--batch-size", "8", "--max-length", "32",
                   "--precision", "fp32", "--report-to", "tensorboard")
    assert proc.returncode == 0, proc.stderr[-3000:]
    events = list((out / "tracking").rglob("events.out.tfevents.*"))
    assert events
    losses = []
    for e in events:
        acc = EventAccumulator(str(e.parent))
        acc.Reload()
        if "train/loss" in acc.Tags()["scalars"]:
            losses = [(s.step, s.value) for s in acc.Scalars("train/loss")]
    logged = [(r["step"], r["loss"]) for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines())
              if "loss" in r]
    assert [s for s, _ in losses] == [2, 4, 6] == [s for s, _ in logged]
    assert all(abs(a - b) < 1e-5 for (_, a), (_, b) in zip(losses, logged, strict=True))
    summary = json.loads((out / "summary.json").read_text())
    prov = summary["provenance"]
    assert prov["command_line"].startswith("ptmlab finetune --model tiny") and "--report-to tensorboard" in \
        prov["command_line"]
    assert prov["torch"] and prov["transformers"] and prov["ptmlab"] and prov["device"].startswith(("cpu", "cuda"))
    assert len(prov["git_commit"] or "x" * 40) == 40 and prov["started"] <= prov["ended"]
    assert summary["eval_seconds"] > 0


def test_a_tracker_that_is_not_installed_is_a_one_line_error(tmp_path):
    import importlib.util

    if importlib.util.find_spec("wandb") is not None:
        import pytest

        pytest.skip("wandb is installed here")
    proc = run_cli("finetune", "--model", "tiny", "--task", "t", "--train-file", str(_data(tmp_path)), "--output",
                   str(tmp_path / "o"), "--max-steps", "1", "--report-to", "wandb")
    assert_clean_error(proc, "--report-to wandb needs wandb", "pip install 'ptmlab[wandb]'")
    assert not (tmp_path / "o").exists()
