"""Every registered study in one go (``ptmlab study all``), and the copy of their results that is committed.

A suite directory holds one sub-directory per study (``D/<study>/results.json``, ``report.html``, ``plots/``) and
``D/suite.json`` (the budget asked for and, per study, whether it finished, was resumed or failed, with its
seconds). A study whose results.json exists is finished: it is skipped unless ``overwrite``, so a suite that was
stopped resumes where it was. A study that fails is recorded and the others still run: one broken study must not
cost a night's results.

``collect`` copies what is worth committing (results.json and the PNGs under plots/, not the report.html with its
inlined images) from a suite directory into ``studies/results/<study>/``.

A study longer than one machine's lease (a preemptible instance, a shared box that is handed back) moves between
machines as its finished runs: ``pack_runs`` copies each finished run's records (``RUN_RECORDS``: its summary,
settings, dev predictions and metrics log, never its weights) into a committed folder, and ``restore_runs`` puts
them back under the study's --output on the next machine, where the study reuses them as finished (a run is
finished when its summary.json is there, and reused only with the same settings: ``common.finished_variant``).
"""

from __future__ import annotations

import gc
import json
import shutil
import time
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path

from ptmlab.core.errors import PtmlabError, did_you_mean
from ptmlab.core.io import atomic_write_bytes, atomic_write_json
from ptmlab.core.registry import Registry
from ptmlab.studies.common import BUDGETS

DONE, RESUMED, FAILED = "done", "resumed", "failed"


@dataclass(frozen=True)
class StudyRun:
    """What happened to one study in a suite run."""

    name: str
    status: str                 # done | resumed (results.json was already there) | failed
    seconds: float
    outcome: str = ""           # the verdict's outcome when the study wrote one ("unrated" for a string verdict)
    error: str = ""             # one line, for a failed study


def select(studies: Registry, only: list[str] | None) -> list[str]:
    """The studies to run, in registry order; ``only`` names a subset (each must be registered)."""
    names = studies.names()
    if not only:
        return names
    for n in only:
        if n not in studies:
            raise PtmlabError(f"unknown study '{n}' in --only: {did_you_mean(n, names)}")
    return [n for n in names if n in set(only)]


def read_results(path: Path) -> dict | None:
    """A study's results.json, or None when it is absent or unreadable (an unreadable one is not finished)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def budget_of(results: dict) -> str | None:
    """The budget a results.json records (None when its study did not record one)."""
    run = results.get("run")
    return run.get("budget") if isinstance(run, dict) else None


def outcome_of(results: dict | None) -> str:
    """The outcome of a results.json (supported, not supported, inconclusive or cannot test); "unrated" for a study
    that wrote only a verdict sentence."""
    if results is None:
        return ""
    return str(results.get("outcome") or "unrated")


def run_all(out: Path, budget: str = "default", only: list[str] | None = None, overwrite: bool = False,
            studies: Registry | None = None, options: list[str] | None = None) -> list[StudyRun]:
    """Run every selected study into ``out/<study>/`` with ``--budget`` (and ``options``, flags every study
    takes, such as ``--executor ray``); returns one ``StudyRun`` per study and writes ``out/suite.json`` after each
    (so an interrupted suite still says what it did)."""
    if budget not in BUDGETS:
        raise PtmlabError(f"--budget '{budget}' is not a budget: choose from {', '.join(BUDGETS)}")
    if studies is None:
        from ptmlab.studies import load_all

        studies = load_all()
    names = select(studies, only)
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise PtmlabError(f"--output '{out}' is a file: give a directory for the studies' results")
    out.mkdir(parents=True, exist_ok=True)
    runs: list[StudyRun] = []
    for i, name in enumerate(names, 1):
        print(f"\n=== study {i}/{len(names)}: {name} (budget {budget}) ===", flush=True)
        runs.append(_run_one(studies, name, out / name, budget, overwrite, options or []))
        if runs[-1].status == FAILED:
            print(f"study {name} failed: {runs[-1].error}", flush=True)
        _write_suite(out, budget, runs)
    return runs


def _run_one(studies: Registry, name: str, study_dir: Path, budget: str, overwrite: bool,
             options: list[str]) -> StudyRun:
    results_file = study_dir / "results.json"
    prior = None if overwrite else read_results(results_file)
    prior_budget = budget_of(prior) if prior is not None else None
    if prior is not None and prior_budget in (None, budget):
        print(f"finished earlier: {results_file} (--overwrite reruns it)")
        return StudyRun(name, RESUMED, 0.0, outcome_of(prior))
    if prior is not None:
        print(f"{results_file} was written with budget {prior_budget}: rerunning with budget {budget}")
    argv = ["--budget", budget, "--output", str(study_dir), *options]
    if overwrite or prior is not None:
        argv.append("--overwrite")  # finished variants of another budget must not be reused
    start = time.perf_counter()
    error = ""
    try:
        rc = studies.get(name)(argv)
        if rc:
            error = f"exit code {rc}"
    except PtmlabError as e:
        error = str(e)
    except SystemExit as e:  # a study's own usage error
        error = f"exit code {e.code}" if e.code else ""
    except Exception as e:  # noqa: BLE001 -- one broken study is reported, the others still run
        where = traceback.extract_tb(e.__traceback__)[-1]
        error = f"{type(e).__name__}: {e} ({Path(where.filename).name}:{where.lineno})"
    seconds = time.perf_counter() - start
    gc.collect()  # the next study should not share memory with this one's models
    results = read_results(results_file)
    if not error and results is None:
        error = f"finished without writing {results_file}"
    if error:
        return StudyRun(name, FAILED, seconds, error=" ".join(error.split())[:500])
    _note_budget(results_file, results, budget)
    return StudyRun(name, DONE, seconds, outcome_of(results))


def _note_budget(path: Path, results: dict, budget: str) -> None:
    """Record the budget in a results.json whose study did not (a study not yet on the verdict contract)."""
    run = results.get("run")
    if isinstance(run, dict) and run.get("budget"):
        return
    results["run"] = {**(run if isinstance(run, dict) else {}), "budget": budget}
    atomic_write_json(path, results)


def _write_suite(out: Path, budget: str, runs: list[StudyRun]) -> None:
    prior = read_results(out / "suite.json") or {}
    studies = dict(prior.get("studies") or {})
    studies.update({r.name: {k: v for k, v in asdict(r).items() if k != "name"} for r in runs})
    atomic_write_json(out / "suite.json", {"budget": budget, "studies": studies,
                                           "updated": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})


def summary_rows(runs: list[StudyRun]) -> list[dict]:
    """The table ``ptmlab study all`` prints at the end."""
    return [{"study": r.name, "status": r.status, "outcome": r.outcome or "-", "seconds": f"{r.seconds:.1f}",
             "error": r.error[:80]} for r in runs]


MAX_COMMITTED_BYTES = 1_000_000  # per file: committed results stay small (a PNG of a plot is ~50 kB)


def _check_size(files: list[Path], sizes: dict[Path, int] | None = None) -> None:
    big = [f for f in files if (sizes or {}).get(f, f.stat().st_size) > MAX_COMMITTED_BYTES]
    if big:
        size = (sizes or {}).get(big[0], big[0].stat().st_size)
        raise PtmlabError(f"'{big[0]}' is {size:,} bytes, over the {MAX_COMMITTED_BYTES:,} "
                          "bytes a committed result may take: make it smaller")


PER_EXAMPLE_KEYS = ("examples", "evidence")  # where a record keeps the per-example values its interval reads


def _committed_bytes(path: Path) -> bytes:
    """What ``collect`` commits of a results.json: the file as it is, or, when it is over ``MAX_COMMITTED_BYTES``,
    with its per-example real values (``PER_EXAMPLE_KEYS``) rounded to ``evidence.DIGITS`` decimals, as ``evidence``
    keeps them (``rederive`` then recomputes the interval from the rounded values: the same to the last digits)."""
    data = path.read_bytes()
    if len(data) <= MAX_COMMITTED_BYTES:
        return data
    import json

    from ptmlab.studies.evidence import DIGITS

    def rounded(v):
        if isinstance(v, float):
            return round(v, DIGITS)
        if isinstance(v, dict):
            return {k: rounded(x) for k, x in v.items()}
        if isinstance(v, list):
            return [rounded(x) for x in v]
        return v

    record = json.loads(data)
    for key in PER_EXAMPLE_KEYS:
        if key in record:
            record[key] = rounded(record[key])
    record["compacted"] = f"per-example values rounded to {DIGITS} decimals when collected"
    return (json.dumps(record) + "\n").encode()


def collect(src: Path, dst: Path, only: list[str] | None = None) -> list[str]:
    """Copy each study's results.json and plots/*.png from a suite directory ``src`` into ``dst/<study>/``
    (replacing what was there for that study); returns the studies copied. Nothing else is copied."""
    src, dst = Path(src), Path(dst)
    if not src.is_dir():
        raise PtmlabError(f"--from '{src}' is not a directory: give the --output of `ptmlab study all`")
    if src.resolve() == dst.resolve():
        raise PtmlabError(f"--from and --to are both '{src}': collect copies results into another directory")
    found = sorted(p.parent.name for p in src.glob("*/results.json"))
    wanted = found if not only else [n for n in only if n in found]
    if only and (missing := sorted(set(only) - set(found))):
        raise PtmlabError(f"no results.json under '{src}' for {', '.join(missing)}: run them first "
                          f"(ptmlab study all --only {','.join(missing)} --output {src})")
    if not wanted:
        raise PtmlabError(f"no study results under '{src}' (expected {src}/<study>/results.json)")
    for name in wanted:
        files = [src / name / "results.json"] + sorted((src / name / "plots").glob("*.png"))
        content = {f: _committed_bytes(f) if f.name == "results.json" else f.read_bytes() for f in files}
        _check_size(files, {f: len(b) for f, b in content.items()})
        target = dst / name
        if target.exists():
            shutil.rmtree(target)
        for f in files:
            atomic_write_bytes(target / f.relative_to(src / name), content[f])
    return wanted


RUN_RECORDS = ("config.yaml", "predictions_dev.json", "metrics.jsonl", "summary.json")  # summary last (_copy_run)


def _finished_runs(study_dir: Path) -> list[Path]:
    return sorted(p.parent for p in study_dir.rglob("summary.json"))


def _copy_run(run: Path, target: Path) -> None:
    """A run's records into ``target``, the summary last (a run counts as finished only once all its records are
    in, so a copy cut short is never taken for a finished run); a record the run lacks is removed from ``target``."""
    for f in RUN_RECORDS:
        if (run / f).is_file():
            atomic_write_bytes(target / f, (run / f).read_bytes())
        elif (target / f).is_file():
            (target / f).unlink()


def pack_runs(src: Path, dst: Path, only: list[str]) -> dict[str, int]:
    """Copy the records of every finished run of each study in ``only`` from a suite directory ``src``
    (``src/<study>/**/summary.json``) into ``dst/<study>/`` at the same relative paths. A run already in ``dst`` is
    replaced by this machine's copy, runs only in ``dst`` are kept. Returns, per study, the runs packed."""
    src, dst = Path(src), Path(dst)
    if not only:
        raise PtmlabError("--runs needs --only: name the studies whose finished runs to pack")
    packed = {}
    for name in only:
        study = src / name
        runs = _finished_runs(study) if study.is_dir() else []
        if not runs:
            raise PtmlabError(f"no finished run under '{study}' (a run is finished when its summary.json is "
                              f"written): nothing to pack for {name}")
        _check_size([r / f for r in runs for f in RUN_RECORDS if (r / f).is_file()])
        for run in runs:
            _copy_run(run, dst / name / run.relative_to(study))
        packed[name] = len(runs)
    return packed


def restore_runs(src: Path, dst: Path, only: list[str] | None = None) -> dict[str, tuple[int, int]]:
    """Put packed runs (``pack_runs``'s ``dst``) back into a suite directory: ``src/<study>/<run>/`` into
    ``dst/<study>/<run>/`` for each study (those in ``only``, default every one packed). A run that already has a
    summary.json in ``dst`` is left as it is, never overwritten. Returns, per study, (runs restored, runs kept)."""
    src, dst = Path(src), Path(dst)
    if not src.is_dir():
        raise PtmlabError(f"--from '{src}' is not a directory: give the --to of `ptmlab study collect --runs`")
    found = sorted(p.name for p in src.iterdir() if p.is_dir() and _finished_runs(p))
    if only and (missing := sorted(set(only) - set(found))):
        raise PtmlabError(f"no packed runs under '{src}' for {', '.join(missing)} (packed: "
                          f"{', '.join(found) or 'none'})")
    if not found:
        raise PtmlabError(f"no packed runs under '{src}' (expected {src}/<study>/<run>/summary.json)")
    done = {}
    for name in only or found:
        restored = kept = 0
        for run in _finished_runs(src / name):
            target = dst / name / run.relative_to(src / name)
            if (target / "summary.json").is_file():
                kept += 1
                continue
            _copy_run(run, target)
            restored += 1
        done[name] = (restored, kept)
    return done
