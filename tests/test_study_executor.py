"""A study's grid through the executor: the sequential one runs in order in this process; the Ray one runs the same
runs as tasks on a local two-worker cluster, writing the same run directories with the same numbers (bit for bit,
when each run gets the threads the sequential run had), and either resumes the other's finished runs."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from ptmlab.core.errors import PtmlabError
from ptmlab.studies.executor import RayExecutor, Run, Sequential, executor_for, run_grid
from tests.conftest import assert_clean_error, run_cli

has_ray = importlib.util.find_spec("ray") is not None
needs_ray = pytest.mark.skipif(not has_ray, reason="Ray is not installed (pip install 'ptmlab[ray]'): the Ray "
                                                   "executor is an optional extra")


def _write(run_dir: Path, value: int, log: list | None = None) -> int:
    """A stand-in run: writes its directory, returns a number."""
    if log is not None:
        log.append(value)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "value.txt").write_text(str(value))
    return value * value


def _fail(run_dir: Path) -> None:
    raise PtmlabError(f"--task in {run_dir.name} is not a task")


class _Options:
    executor = "sequential"


def test_sequential_runs_in_the_order_given_and_returns_by_key(tmp_path):
    log: list[int] = []
    grid = {(s, v): Run(_write, tmp_path / f"{v}-{s}", (tmp_path / f"{v}-{s}", 10 * s + v, log))
            for s in (2, 1) for v in (3, 4)}
    done = run_grid(_Options(), grid)
    assert log == [23, 24, 13, 14]  # today's loop order
    assert done == {(2, 3): 529, (2, 4): 576, (1, 3): 169, (1, 4): 196}
    assert (tmp_path / "4-1" / "value.txt").read_text() == "14"



def test_sequential_says_which_run_of_how_many_is_starting(tmp_path, monkeypatch, capsys):
    runs = [Run(_write, tmp_path / name, (tmp_path / name, v)) for name, v in (("a", 1), ("b", 2), ("c", 3))]
    monkeypatch.setenv("PTMLAB_PROGRESS", "1")
    assert Sequential().map(runs) == [1, 4, 9]
    err = capsys.readouterr().err.splitlines()
    assert [line.split(" (")[0] for line in err[:3]] == [f"grid [{i}/3] {tmp_path / n}" for i, n in
                                                         enumerate("abc", 1)]
    assert err[0].endswith("(0s so far)") and err[3].startswith("grid: 3 runs in ")
    monkeypatch.setenv("PTMLAB_PROGRESS", "0")  # quiet, as under tests and on ranks other than 0
    assert Sequential().map(runs) == [1, 4, 9] and capsys.readouterr().err == ""
    monkeypatch.setenv("PTMLAB_PROGRESS", "1")
    assert Sequential().map(runs[:1]) == [1] and capsys.readouterr().err == ""  # one run: its own bar says it all


def test_clock_reads_as_a_person_would():
    from ptmlab.core.progress import clock

    assert [clock(s) for s in (0.4, 7, 65, 725, 3600, 3780.6, 90061)] == \
        ["0s", "7s", "1m 05s", "12m 05s", "1h 00m", "1h 03m", "25h 01m"]

def test_two_runs_into_one_directory_are_refused(tmp_path):
    runs = [Run(_write, tmp_path / "a", (tmp_path / "a", 1)), Run(_write, tmp_path / "b/../a", (tmp_path / "a", 2))]
    with pytest.raises(PtmlabError, match="each run needs its own directory"):
        Sequential().map(runs)
    assert not (tmp_path / "a").exists()  # refused before anything ran


def test_executor_options():
    class Ray(_Options):
        executor, ray_address, ray_workers, ray_cpus_per_run = "ray", None, 3, 0

    ex = executor_for(Ray())
    assert isinstance(ex, RayExecutor) and ex.workers == 3 and ex.cpus_per_run >= 1
    assert RayExecutor(workers=2, cpus_per_run=4).cpus_per_run == 4
    with pytest.raises(PtmlabError, match="--ray-workers 0"):
        RayExecutor(workers=0)
    with pytest.raises(PtmlabError, match="--ray-cpus-per-run -1"):
        RayExecutor(cpus_per_run=-1)


def test_ray_executor_without_ray_is_a_one_line_error(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray raises ImportError
    with pytest.raises(PtmlabError, match=r"pip install 'ptmlab\[ray\]'"):
        RayExecutor().map([Run(_write, tmp_path / "a", (tmp_path / "a", 1))])


def test_unknown_executor_is_a_clean_error(tmp_path):
    assert_clean_error(run_cli("study", "random-init", "--budget", "small", "--executor", "dask", "--output",
                               str(tmp_path)), "--executor", "dask")


def _runs(out: Path) -> dict[str, dict]:
    return {str(p.parent.relative_to(out)): json.loads(p.read_text()) for p in sorted(out.rglob("summary.json"))}


@needs_ray
def test_ray_grid_matches_the_sequential_run(tmp_path):
    """``ptmlab study random-init --budget small --seeds 0,1`` (four fine-tunings of the tiny model; its pretrained
    and random initialisations coincide, the seeds do not) on a local two-worker Ray cluster: the same table,
    verdict and per-run numbers as the sequential executor, and the same weights to the bit (each Ray run has one
    thread, so the sequential run is given one too)."""
    study = ["study", "random-init", "--budget", "small", "--seeds", "0,1"]
    seq, ray = tmp_path / "sequential", tmp_path / "ray"
    p = run_cli(*study, "--output", str(seq), env={"OMP_NUM_THREADS": "1"})
    assert p.returncode == 0, p.stderr[-3000:]
    p = run_cli(*study, "--output", str(ray), "--executor", "ray", "--ray-workers", "2", "--ray-cpus-per-run", "1")
    assert p.returncode == 0, p.stderr[-3000:]
    assert "ray: [4/4]" in p.stdout + p.stderr  # the runs went through the cluster

    a, b = (json.loads((d / "results.json").read_text()) for d in (seq, ray))
    assert a["rows"] == b["rows"] and a["verdict"] == b["verdict"] and a["outcome"] == b["outcome"]
    runs_a, runs_b = _runs(seq), _runs(ray)
    assert sorted(runs_a) == sorted(runs_b) == [f"tweets-{i}/seed-{s}" for i in ("pretrained", "random")
                                                for s in (0, 1)]
    for name, s in runs_a.items():
        assert s["metrics"] == runs_b[name]["metrics"] and s["steps"] == runs_b[name]["steps"] == 4, name
        assert (seq / name / "model.safetensors").read_bytes() == (ray / name / "model.safetensors").read_bytes()
    # the seeds' runs differ: the grid did not run one seed twice
    assert (ray / "tweets-random/seed-0/model.safetensors").read_bytes() != \
        (ray / "tweets-random/seed-1/model.safetensors").read_bytes()

    # the sequential executor resumes the Ray run's directories: nothing is trained again
    stamp = {n: (ray / n / "model.safetensors").stat().st_mtime_ns for n in runs_b}
    p = run_cli(*study, "--output", str(ray))
    assert p.returncode == 0, p.stderr[-3000:]
    assert {n: (ray / n / "model.safetensors").stat().st_mtime_ns for n in runs_b} == stamp
    assert json.loads((ray / "results.json").read_text())["rows"] == a["rows"]


@needs_ray
def test_a_failing_ray_run_is_raised_as_its_own_error_after_the_others_finish(tmp_path):
    """On a two-core local cluster: a PtmlabError inside a run is raised as itself once the other run has finished
    (and kept its directory); a run larger than the cluster is refused instead of waiting for ever."""
    import ray

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the stand-in runs live in this test module
    runs = [Run(_fail, tmp_path / "bad", (tmp_path / "bad",)), Run(_write, tmp_path / "good", (tmp_path / "good", 3))]
    try:
        with pytest.raises(PtmlabError, match="--task in bad is not a task"):
            RayExecutor(workers=2, cpus_per_run=1).map(runs)
        # the cluster now running has 2 cores: a run asking for 4 would wait for ever, so it is refused
        with pytest.raises(PtmlabError, match="--ray-cpus-per-run 4: the Ray cluster has 2 core"):
            RayExecutor(workers=1, cpus_per_run=4).map(runs[1:])
    finally:
        ray.shutdown()
    assert (tmp_path / "good" / "value.txt").read_text() == "3"  # the other run finished and was kept


def test_study_all_hands_the_executor_to_every_study(tmp_path, monkeypatch):
    from ptmlab.commands.study import SUITE_COMMANDS
    from ptmlab.core.registry import Registry
    from ptmlab.studies import suite

    reg: Registry = Registry("study")
    seen: list[list[str]] = []

    @reg.register("stand-in")
    def stand_in(argv):
        seen.append(argv)
        raise PtmlabError("stopped here")

    suite.run_all(tmp_path / "a", "small", studies=reg, options=["--executor", "ray", "--ray-workers", "3"])
    assert seen == [["--budget", "small", "--output", str(tmp_path / "a" / "stand-in"), "--executor", "ray",
                     "--ray-workers", "3"]]

    calls = []
    monkeypatch.setattr(suite, "run_all", lambda *a, **k: calls.append(k.get("options")) or [])
    SUITE_COMMANDS["all"](["--output", str(tmp_path / "b"), "--executor", "ray", "--ray-address", "10.0.0.1:6379"])
    SUITE_COMMANDS["all"](["--output", str(tmp_path / "c")])
    assert calls == [["--executor", "ray", "--ray-workers", "2", "--ray-cpus-per-run", "0", "--ray-address",
                      "10.0.0.1:6379"], []]
