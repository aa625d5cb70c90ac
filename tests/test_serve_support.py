"""Helpers (no tests) for the serving and extraction tests: a tiny model fine-tuned on the synthetic task."""

from __future__ import annotations

import atexit
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from tests.synthetic import write_task

_VICTIM: list[Path] = []


def train_victim() -> Path:
    """A tiny classifier fine-tuned on the synthetic task (dev accuracy ~1.0), trained once per test session."""
    from ptmlab.train.args import FinetuneConfig
    from ptmlab.train.finetune import run_finetune

    if _VICTIM:
        return _VICTIM[0]
    folder = Path(tempfile.mkdtemp(prefix="ptmlab-victim-"))
    atexit.register(shutil.rmtree, folder, True)
    files = write_task(folder / "data", n_train=400, n_dev=100)
    out = folder / "victim"
    run_finetune(FinetuneConfig(model="tiny", task="synthetic", train_file=files["train"], dev_file=files["dev"],
                                epochs=3, batch_size=16, lr=1e-3, max_length=32, output=str(out), seed=0,
                                logging_steps=50, test=False))
    _VICTIM.append(out)
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server_process(run_dir: Path, home: Path, port: int, *extra: str, log: Path | None = None):
    """``python -m ptmlab serve`` in a subprocess; returns the process once /healthz answers."""
    env = {**os.environ, "PTMLAB_HOME": str(home), "PTMLAB_PROGRESS": "0"}
    out = open(log, "ab") if log else subprocess.DEVNULL
    proc = subprocess.Popen([sys.executable, "-m", "ptmlab", "serve", str(run_dir), "--port", str(port), *extra],
                            env=env, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("server did not start")
