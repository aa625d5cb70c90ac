"""Run a sweep: ordinary pre-training runs under one sweep directory, restartable and shared by parallel workers.

    SWEEP/sweep.json          the plan: shared options and every run (size, budget, seed, planned steps, skips)
    SWEEP/runs/NAME/          one ordinary ``ptmlab pretrain`` run directory per run
    SWEEP/runs/NAME.lock      held while a worker trains NAME (pid and host inside)
    SWEEP/results.json, report.html, plots/   written by ``ptmlab.scaling.report`` once runs are read back

A worker walks the plan and takes each unfinished run whose lock it can create (``O_CREAT | O_EXCL``, atomic on
one file system), so workers started by ``--workers N`` or as separate ``ptmlab scale`` processes never train the
same run twice. A lock whose process is gone (same host) is stale and taken over. A finished run (summary.json) is
skipped; a killed run with a checkpoint resumes exactly; a run directory without one starts again.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import time
from pathlib import Path

from ptmlab.core.errors import PtmlabError
from ptmlab.core.io import atomic_write_json
from ptmlab.core.progress import progress
from ptmlab.scaling.config import ScaleConfig
from ptmlab.scaling.plan import RunSpec, plan_sweep, pretrain_config, shared_options, spec_from_dict

PLAN = "sweep.json"
STALE_UNREADABLE_S = 60.0


def run_dir(out: Path, spec: RunSpec) -> Path:
    return out / "runs" / spec.name


def is_finished(out: Path, spec: RunSpec) -> bool:
    return (run_dir(out, spec) / "summary.json").is_file()


# ------------------------------------------------------------------------------------------------ locks
def _lock_path(out: Path, spec: RunSpec) -> Path:
    return out / "runs" / f"{spec.name}.lock"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _stale(lock: Path) -> bool:
    try:
        info = json.loads(lock.read_text())
        return info.get("host") == socket.gethostname() and not _alive(int(info["pid"]))
    except FileNotFoundError:
        return False
    except (OSError, ValueError, KeyError, TypeError):  # half-written: stale only once it is old
        try:
            return time.time() - lock.stat().st_mtime > STALE_UNREADABLE_S
        except OSError:
            return False


def try_lock(lock: Path, retry: bool = True) -> bool:
    """Create ``lock`` for this process; False when another live process holds it."""
    try:
        fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        if retry and _stale(lock):
            moved = lock.with_name(f"{lock.name}.stale.{os.getpid()}")
            try:
                os.rename(lock, moved)  # only one taker wins the rename
            except FileNotFoundError:
                return False
            moved.unlink(missing_ok=True)
            return try_lock(lock, retry=False)
        return False
    with os.fdopen(fd, "w") as f:
        json.dump({"pid": os.getpid(), "host": socket.gethostname(), "started": time.time()}, f)
    return True


def is_locked(out: Path, spec: RunSpec) -> bool:
    lock = _lock_path(out, spec)
    return lock.exists() and not _stale(lock)


# ------------------------------------------------------------------------------------------------ the plan
def check_output(out: Path, overwrite: bool) -> None:
    """A new folder, an empty one, or an earlier sweep (``--overwrite`` deletes it)."""
    if out.exists() and not out.is_dir():
        raise PtmlabError(f"output '{out}' exists and is a file: choose another --output")
    if out.is_dir() and any(out.iterdir()) and not (out / PLAN).is_file():
        raise PtmlabError(f"output directory '{out}' is not empty and holds no sweep ({PLAN}): choose a new --output")


def load_plan(out: Path) -> dict:
    try:
        return json.loads((out / PLAN).read_text())
    except FileNotFoundError:
        raise PtmlabError(f"'{out}' holds no sweep ({PLAN}): run `ptmlab scale --output {out} ...` first") from None
    except (OSError, ValueError) as e:
        raise PtmlabError(f"cannot read '{out / PLAN}' ({e}): the sweep directory is damaged") from None


def prepare_sweep(cfg: ScaleConfig) -> dict:
    """Plan (every input checked before anything is written), then write or extend SWEEP/sweep.json."""
    out = Path(cfg.output)
    check_output(out, cfg.overwrite)
    options = shared_options(cfg)
    old = load_plan(out) if (out / PLAN).is_file() and not cfg.overwrite else None
    if old is not None and old.get("options") != json.loads(json.dumps(options)):
        diff = sorted(k for k in options if old.get("options", {}).get(k) != json.loads(json.dumps(options[k])))
        raise PtmlabError(f"sweep '{out}' was planned with other {', '.join(diff)}: use the same options to "
                          f"continue it, --overwrite to start again, or a new --output")
    runs = plan_sweep(cfg)
    if old is not None:  # keep runs planned earlier (other sizes or budgets) so their results stay in the sweep
        names = {r.name for r in runs}
        runs = [spec_from_dict(d) for d in old.get("runs", []) if d["name"] not in names] + runs
    if cfg.overwrite and out.is_dir():
        shutil.rmtree(out)
    (out / "runs").mkdir(parents=True, exist_ok=True)
    plan = {"options": options, "runs": [r.__dict__ for r in runs]}
    atomic_write_json(out / PLAN, plan)
    return plan


def plan_specs(plan: dict) -> list[RunSpec]:
    return [spec_from_dict(d) for d in plan["runs"]]


# ------------------------------------------------------------------------------------------------ working
def train_one(out: Path, options: dict, spec: RunSpec) -> dict:
    """Train (or resume, or skip when finished) one run; returns its summary."""
    from ptmlab.core.rundir import RunDir
    from ptmlab.pretrain.config import PretrainConfig
    from ptmlab.pretrain.run import run_pretrain

    d = run_dir(out, spec)
    if (d / "summary.json").is_file():
        return RunDir(d).summary()
    if (d / "checkpoint").is_dir():
        return run_pretrain(RunDir.resume_config(d, PretrainConfig, "scale"), resume=True, command="scale")
    cfg = pretrain_config(options, spec, d)
    if d.exists():  # killed before its first checkpoint: start it again
        shutil.rmtree(d)
    return run_pretrain(cfg, command="scale")


def work(out: str | Path, threads: int | None = None) -> list[str]:
    """One worker: train every unfinished, unlocked run of the sweep in ``out``; returns the names it trained."""
    out = Path(out)
    if threads:
        os.environ["OMP_NUM_THREADS"] = str(threads)
    plan = load_plan(out)
    todo = [s for s in plan_specs(plan) if not s.skip]
    done = []
    with progress(total=len(todo), desc=f"sweep (pid {os.getpid()})", unit="run") as bar:
        for spec in todo:
            if not is_finished(out, spec) and try_lock(_lock_path(out, spec)):
                try:
                    if not is_finished(out, spec):
                        s = train_one(out, plan["options"], spec)
                        done.append(spec.name)
                        bar.set_postfix(run=spec.name, eval_loss=f"{s['metrics']['eval_loss']:.3f}")
                finally:
                    _lock_path(out, spec).unlink(missing_ok=True)
            bar.update(1)
    return done


def run_workers(out: Path, workers: int) -> list[str]:
    """``workers`` processes (spawned) share the sweep; the CPUs are split between them."""
    if workers == 1:
        return work(out)
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover
        cores = os.cpu_count() or 1
    threads = max(1, cores // workers)
    with ProcessPoolExecutor(max_workers=workers, mp_context=get_context("spawn")) as pool:
        futures = [pool.submit(work, str(out), threads) for _ in range(workers)]
        return [name for f in futures for name in f.result()]


def run_sweep(cfg: ScaleConfig) -> dict:
    """Plan, train every run (skipping finished ones), read the runs back and write the sweep's report."""
    from ptmlab.scaling.report import write_sweep_report

    plan = prepare_sweep(cfg)
    out = Path(cfg.output)
    run_workers(out, cfg.workers)
    return write_sweep_report(out, plan, loss_tolerance=cfg.loss_tolerance, margin=cfg.margin,
                              workers=cfg.workers)
