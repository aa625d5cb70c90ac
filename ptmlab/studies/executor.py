"""Run a study's grid of independent runs: one after another in this process (``sequential``, the default) or as
tasks on a Ray cluster (``ray``: a local one started here, or an existing one at ``--ray-address``).

A study lists its runs as ``{key: Run(fn, run_dir, args, kwargs)}`` -- a picklable function (``finetune_variant``
and the like), its arguments and the run directory it writes -- and ``run_grid(a, grid)`` returns ``{key: result}``
(``executor_for(a).map(runs)`` does the same for a list). Each run seeds itself and reuses its finished run
directory (``finished_variant``), so both executors write the same directories with the same numbers and a stopped
study resumes under either. Runs that depend on one another (a run that starts from another's model) go in
separate grids, one after the other.

On Ray each run is a task with ``--ray-cpus-per-run`` cores and as many torch threads, so that runs sharing a
machine do not oversubscribe it; the task starts in the driver's working directory with the driver's ``PTMLAB_*``
and ``HF_*`` settings, so relative paths and offline mode mean there what they mean here (on a multi-machine
cluster the output directory must be on a filesystem every node mounts at the same path). A run that fails does
not stop the others: they finish and are kept, then the first failure is raised (a ``PtmlabError`` as itself).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ptmlab.core.errors import PtmlabError

EXECUTORS = ("sequential", "ray")
# the driver's settings a run must see wherever it runs (offline mode, caches, the zoo's directories)
_ENV_PREFIXES = ("PTMLAB_", "HF_", "TRANSFORMERS_", "TOKENIZERS_")


@dataclass(frozen=True)
class Run:
    """One run of a study's grid: ``fn(*args, **kwargs)``, which writes ``run_dir`` and returns its result."""

    fn: Callable[..., Any]
    run_dir: Path
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)

    def __call__(self) -> Any:
        return self.fn(*self.args, **self.kwargs)


def _check_distinct(runs: Sequence[Run]) -> None:
    seen: set[Path] = set()
    for r in runs:
        d = Path(r.run_dir).resolve()
        if d in seen:
            raise PtmlabError(f"two runs of one grid write '{r.run_dir}': each run needs its own directory")
        seen.add(d)


class Sequential:
    """Every run in order, in this process: what a study did before it had an executor."""

    name = "sequential"

    def map(self, runs: Sequence[Run]) -> list:
        """Each run in turn; with more than one, a line on stderr as each starts (which of how many, how long the
        grid has taken so far: a reused finished run takes about no time), so that a study of hours shows where it
        is between its runs' own progress bars."""
        import sys
        import time

        from ptmlab.core.progress import clock, quiet

        _check_distinct(runs)
        say = len(runs) > 1 and not quiet()
        start, results = time.monotonic(), []
        for i, r in enumerate(runs):
            if say:
                print(f"grid [{i + 1}/{len(runs)}] {r.run_dir} ({clock(time.monotonic() - start)} so far)",
                      file=sys.stderr, flush=True)
            results.append(r())
        if say:
            print(f"grid: {len(runs)} runs in {clock(time.monotonic() - start)}", file=sys.stderr, flush=True)
        return results


def _in_worker(cwd: str, env: dict[str, str], threads: int, run: Run) -> Any:
    """A run inside a Ray worker: the driver's directory, settings and this task's share of the cores."""
    if not Path(cwd).is_dir():
        raise PtmlabError(f"'{cwd}' (the study's working directory) is not on this Ray node: run the study from a "
                          f"directory every node mounts at the same path")
    os.chdir(cwd)
    os.environ.update(env)
    os.environ["OMP_NUM_THREADS"] = str(threads)  # configure_threads() caps torch at it
    import torch

    torch.set_num_threads(threads)
    return run()


class RayExecutor:
    """Each run a Ray task with ``cpus_per_run`` cores. Without ``address`` a local cluster of ``workers`` x
    ``cpus_per_run`` cores is started (once per process: later studies of ``ptmlab study all`` reuse it)."""

    name = "ray"

    def __init__(self, address: str | None = None, workers: int = 2, cpus_per_run: int = 0):
        if workers < 1:
            raise PtmlabError(f"--ray-workers {workers}: give 1 or more runs at once")
        if cpus_per_run < 0:
            raise PtmlabError(f"--ray-cpus-per-run {cpus_per_run}: give 1 or more cores, or 0 for this machine's "
                              f"cores divided by --ray-workers")
        self.address = address or None
        self.workers = workers
        self.cpus_per_run = cpus_per_run or max(1, len(os.sched_getaffinity(0)) // workers)

    def _ray(self):
        try:
            import ray
        except ImportError:
            raise PtmlabError("--executor ray needs Ray: pip install 'ptmlab[ray]' (or run with --executor "
                              "sequential)") from None
        if not ray.is_initialized():
            if self.address:
                try:
                    ray.init(address=self.address, log_to_driver=True)
                except (ConnectionError, ValueError, RuntimeError) as e:
                    raise PtmlabError(f"--ray-address {self.address}: no Ray cluster there ({str(e).splitlines()[0]})"
                                      f"; start one with `ray start --head` or leave --ray-address out for a local "
                                      f"one") from None
            else:
                ray.init(num_cpus=self.workers * self.cpus_per_run, include_dashboard=False, log_to_driver=True)
        return ray

    def map(self, runs: Sequence[Run]) -> list:
        _check_distinct(runs)
        if not runs:
            return []
        ray = self._ray()
        env = {k: v for k, v in os.environ.items() if k.startswith(_ENV_PREFIXES)}
        total = ray.cluster_resources().get("CPU", 0)
        if total < self.cpus_per_run:  # Ray would wait for ever for a node that large
            raise PtmlabError(f"--ray-cpus-per-run {self.cpus_per_run}: the Ray cluster has {total:g} core(s); ask "
                              f"for fewer per run")
        task = ray.remote(num_cpus=self.cpus_per_run, max_retries=0)(_in_worker)
        refs = [task.options(name=str(r.run_dir)).remote(os.getcwd(), env, self.cpus_per_run, r) for r in runs]
        print(f"ray: {len(runs)} run(s), {self.cpus_per_run} core(s) each, {int(total // self.cpus_per_run)} at "
              f"once", flush=True)
        index = {ref: i for i, ref in enumerate(refs)}
        results: list = [None] * len(runs)
        failed: list[tuple[int, BaseException]] = []
        pending = list(refs)
        while pending:  # gather every run before raising: the finished ones are kept for a rerun to resume
            done, pending = ray.wait(pending, num_returns=1)
            i = index[done[0]]
            try:
                results[i] = ray.get(done[0])
                state = "done"
            except ray.exceptions.RayTaskError as e:
                failed.append((i, e))
                state = "failed"
            print(f"ray: [{len(runs) - len(pending)}/{len(runs)}] {runs[i].run_dir} {state}", flush=True)
        if failed:
            i, e = min(failed, key=lambda x: x[0])
            cause = getattr(e, "cause", None)
            if isinstance(cause, PtmlabError):
                raise cause from None
            raise e
        return results


def executor_for(a) -> Sequential | RayExecutor:
    """The executor a study's options (``StudyBase``) ask for."""
    kind = getattr(a, "executor", "sequential")
    if kind == "sequential":
        return Sequential()
    if kind == "ray":
        return RayExecutor(getattr(a, "ray_address", None), getattr(a, "ray_workers", 2),
                           getattr(a, "ray_cpus_per_run", 0))
    raise PtmlabError(f"--executor '{kind}' is not an executor: choose from {', '.join(EXECUTORS)}")


def run_grid(a, grid: dict[Any, Run]) -> dict[Any, Any]:
    """A study's grid, ``{key: Run}`` (keys such as ``(task, variant, seed)``), on the executor the study's options
    ``a`` ask for: ``{key: result}``, run in the order given by the sequential executor."""
    return dict(zip(grid, executor_for(a).map(list(grid.values())), strict=True))
