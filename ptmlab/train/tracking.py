"""Experiment tracking (``--report-to``) through accelerate's trackers: the loop's log rows (training loss, rate,
throughput) and evaluations go to TensorBoard, Trackio, MLflow or Weights & Biases as well as to metrics.jsonl.

Each tracker writes under ``RUN/tracking`` (TensorBoard event files, MLflow's file store unless
MLFLOW_TRACKING_URI says otherwise, W&B's run directory); the packages are optional extras
(``pip install 'ptmlab[tensorboard]'``), checked before any work.
"""

from __future__ import annotations

import os

from ptmlab.core.extras import require_extra

TRACKERS = ("none", "tensorboard", "trackio", "mlflow", "wandb")


def check_tracker(name: str) -> None:
    """A one-line error naming the extra to install when the tracker's package is absent."""
    if name not in (None, "none"):
        require_extra(name, f"--report-to {name}")


def accelerator_kwargs(cfg, run) -> dict:
    """``Accelerator(...)`` arguments for ``cfg.report_to`` (none: no tracker)."""
    name = getattr(cfg, "report_to", "none") or "none"
    if name == "none":
        return {}
    check_tracker(name)
    folder = run.path / "tracking"
    folder.mkdir(parents=True, exist_ok=True)
    if name == "mlflow":
        os.environ.setdefault("MLFLOW_TRACKING_URI", (folder / "mlruns").resolve().as_uri())
    if name == "wandb":
        os.environ.setdefault("WANDB_DIR", str(folder))
    return {"log_with": name, "project_dir": str(folder)}


def start(accelerator, cfg, run) -> bool:
    """Open the trackers with the run's options as hyperparameters; False when none is configured."""
    if not getattr(accelerator, "log_with", None):
        return False
    import dataclasses

    values = dataclasses.asdict(cfg) if dataclasses.is_dataclass(cfg) else dict(vars(cfg))
    hparams = {k: v if isinstance(v, bool | int | float | str) else str(v) for k, v in values.items()}
    accelerator.init_trackers(run.path.name or "ptmlab", config=hparams)
    return True


def log_row(accelerator, row: dict) -> None:
    """A metrics.jsonl row as tracker scalars: ``train/loss``, ``train/lr``, ... and ``eval/<metric>``."""
    step = int(row.get("step", 0))
    values = {f"train/{k}": v for k, v in row.items() if k not in ("step", "eval") and isinstance(v, int | float)}
    for k, v in (row.get("eval") or {}).items():
        if isinstance(v, int | float):
            values[f"eval/{k}"] = v
    if values:
        accelerator.log(values, step=step)
