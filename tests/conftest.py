"""Test setup: offline hub, quiet progress bars, a private token cache, and paths to the shared data."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"
os.environ["PTMLAB_PROGRESS"] = "0"

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
GLUE = SHARED / "glue"

needs_glue = pytest.mark.skipif(not (GLUE / "SST-2" / "train.tsv").is_file(),
                                reason=f"GLUE data not found at {GLUE} (shared data is absent on this machine)")


@pytest.fixture(autouse=True, scope="session")
def _private_cache(tmp_path_factory):
    os.environ["PTMLAB_CACHE"] = str(tmp_path_factory.mktemp("ptmlab-cache"))
    import torch

    # under pytest-xdist the cores are shared by the workers (and by the CLI subprocesses they start)
    threads = max(1, len(os.sched_getaffinity(0)) // int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
    torch.set_num_threads(threads)
    if "PYTEST_XDIST_WORKER" in os.environ:
        os.environ["OMP_NUM_THREADS"] = str(threads)
    yield


def run_cli(*args: str, timeout: int = 600, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run ``python -m ptmlab ARGS`` as a user would; returns the completed process."""
    full_env = {**os.environ, **(env or {})}
    full_env.pop("PTMLAB_DEBUG", None)
    return subprocess.run([sys.executable, "-m", "ptmlab", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, env=full_env)


def assert_clean_error(proc: subprocess.CompletedProcess, *needles: str) -> None:
    """Exit code 2, one line on stderr starting with 'error:', no traceback, and the line names the problem."""
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    lines = [line for line in proc.stderr.strip().splitlines() if line.strip()]
    assert "Traceback" not in proc.stderr, proc.stderr
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error:"), lines[0]
    for n in needles:
        assert n.lower() in lines[0].lower(), (n, lines[0])


def kill_at_step(args: list[str], run_dir: Path, step: int, timeout: float = 300) -> int:
    """Start ``ptmlab ARGS`` and SIGKILL it once its checkpoint has reached ``step``; returns the step killed at."""
    import json
    import signal
    import time

    env = {**os.environ, "PTMLAB_PROGRESS": "0"}
    proc = subprocess.Popen([sys.executable, "-m", "ptmlab", *args], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    state_file = Path(run_dir) / "checkpoint" / "trainer_state.json"
    deadline = time.time() + timeout
    killed_at = None
    while time.time() < deadline and proc.poll() is None:
        try:
            at = json.loads(state_file.read_text())["loop"]["step"]
        except (OSError, ValueError, KeyError):
            at = 0
        if at >= step:
            proc.send_signal(signal.SIGKILL)
            killed_at = at
            break
        time.sleep(0.02)
    proc.wait()
    assert killed_at is not None and proc.returncode == -signal.SIGKILL, "the run finished before it was killed"
    assert not (Path(run_dir) / "summary.json").exists()
    return killed_at


@pytest.fixture(scope="session")
def victim() -> Path:
    """A tiny classifier fine-tuned on the synthetic task (``tests.test_serve_support.train_victim``)."""
    from tests.test_serve_support import train_victim

    return train_victim()


@pytest.fixture
def store(tmp_path):
    """An open serving state store in a fresh folder, closed after the test."""
    from ptmlab.serve.state import open_store

    s = open_store(str(tmp_path / "home"))
    yield s
    s.close()


def run_without_ptmlab(code: str, cwd) -> dict:
    """Run ``code`` in an isolated Python (``-I -S``) that sees site-packages but not ptmlab, as a user loading an
    export without ptmlab would; exit 3 if ptmlab is importable there. Returns the JSON of its last output line."""
    import json
    import sysconfig

    head = (f"import json, sys\nsys.path.append({sysconfig.get_paths()['purelib']!r})  # without its .pth files\n"
            "try:\n    import ptmlab\n    print(json.dumps({'ptmlab': ptmlab.__file__})); sys.exit(3)\n"
            "except ImportError:\n    pass\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PTMLAB_DEBUG")}
    proc = subprocess.run([sys.executable, "-I", "-S", "-c", head + code], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-500:] + proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])
