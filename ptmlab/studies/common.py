"""What every study shares: its options (``StudyBase`` / ``StudyArgs``, with ``--budget small`` presets), turning
them into a command's config through the one validating builder, running fine-tuning variants, writing results."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

from ptmlab.core.config import add_config_args, build_config, load_yaml, opt
from ptmlab.core.io import atomic_write_json
from ptmlab.report.html import Report
from ptmlab.report.table import print_table
from ptmlab.train.args import DataArgs, ModelArgs, TrainArgs

BUDGETS = ("small", "default", "full")
# what ``--budget small`` sets for a study that fine-tunes (each study adds its own knobs)
SMALL_FINETUNE = dict(model="tiny", max_train=64, max_eval=32, max_length=32, epochs=1.0, batch_size=16,
                      eval_batch_size=64)
# what ``--budget full`` sets for a study that fine-tunes: three seeds and the whole dev set
FULL_FINETUNE = dict(seeds=["0", "1", "2"], max_eval=0)


@dataclass(frozen=True)
class StudyBase:
    """Options of every study: where it writes, whether finished parts are redone, and its budget."""

    budget: str = opt("default", "small: minutes on the tiny model and small subsets (tests, CI); default: the "
                                 "study's own sizes; full: the real experiment", choices=list(BUDGETS))
    output: str = opt("runs/study", "output directory")
    overwrite: bool = opt(False, "rerun variants that already finished")


@dataclass(frozen=True)
class StudyArgs(TrainArgs, DataArgs, ModelArgs, StudyBase):
    """A study that fine-tunes: the training and data options of ``ptmlab finetune`` with study defaults (an
    empty ``task`` means sst2 when the GLUE data is present, else the built-in tweets)."""

    task: str = opt("", "task (default: sst2 when GLUE data is present, else tweets)")
    max_train: int | None = opt(2000, "training examples")
    max_eval: int | None = opt(500, "dev examples (0: all)")
    max_length: int = opt(64, "max tokens")
    epochs: float = opt(1.0, "epochs of every fine-tuning (the same budget for every variant)")
    seed: int = opt(0, "seed")
    seeds: list[str] = opt([], "seeds every variant is repeated with, e.g. 0,1,2 (empty: --seed alone; --budget "
                               "full: 0,1,2)")
    test: bool = opt(False, "also evaluate fine-tuned variants on the test split")

    def validate(self) -> None:
        self.validate_data()
        self.validate_train()


def parse_study_args(name: str, cls, argv: list[str], description: str = "", small: dict | None = None,
                     full: dict | None = None):
    """A study's options: defaults < ``small`` / ``full`` preset (with ``--budget small|full``) < ``--config`` YAML
    < flags.

    Every study config goes through ``build_config`` (validation included); an empty ``task`` is filled in."""
    import argparse

    from ptmlab.core.cli_parser import ArgParser

    p = ArgParser(prog=f"ptmlab study {name}", description=description,
                  formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", help="YAML file with options (flags override it)")
    add_config_args(p, cls)
    args = p.parse_args(argv)
    given = dict(load_yaml(args.config)) if args.config else {}
    known = {f.name for f in dataclasses.fields(cls)}
    given.update({k: v for k, v in vars(args).items() if k in known})
    values = {}
    preset = {"small": small, "full": full}.get(given.get("budget")) or {}
    values.update({k: v for k, v in preset.items() if k in known})
    values.update(given)
    if "task" in known and not values.get("task", _default(cls, "task")):  # a study's own default task stands
        values["task"] = default_task()
    return build_config(cls, values, source=f"config '{args.config}'" if args.config else "options")


def _default(cls, name: str):
    """The dataclass default of field ``name`` (None where it has none)."""
    field = next(f for f in dataclasses.fields(cls) if f.name == name)
    return None if field.default is dataclasses.MISSING else field.default


def command_config(a, cls, **overrides):
    """A command's config (``FinetuneConfig``, ``PruneConfig``, ``DistillConfig``, ...) from a study's options:
    the fields both declare, then ``overrides``; validated by the one builder."""
    values = {f.name: getattr(a, f.name) for f in dataclasses.fields(cls) if hasattr(a, f.name)}
    values["overwrite"] = True
    values.update(overrides)
    return build_config(cls, values, source="study")


def seed_list(a) -> list[int]:
    """The seeds a study repeats each variant with: ``--seeds``, else ``--seed`` alone."""
    from ptmlab.core.errors import PtmlabError

    raw = list(getattr(a, "seeds", None) or []) or [getattr(a, "seed", 0)]
    try:
        seeds = [int(s) for s in raw]
    except (TypeError, ValueError):
        raise PtmlabError(f"--seeds {','.join(map(str, raw))} is not a list of integers: give e.g. 0,1,2") from None
    if len(set(seeds)) != len(seeds):
        raise PtmlabError(f"--seeds {','.join(map(str, raw))} repeats a seed: give distinct seeds, e.g. 0,1,2")
    return seeds


def seed_dir(out: Path, name: str, seed: int, seeds: list[int]) -> Path:
    """Where one variant's run for ``seed`` lives: ``out/name`` for a one-seed study, ``out/name/seed-S`` else."""
    return out / name if len(seeds) == 1 else out / name / f"seed-{seed}"


def dev_correct(run_dir: Path) -> list[float] | None:
    """Per dev example 1.0 / 0.0 (prediction equals gold) from a run's ``predictions_dev.json``, in the run's dev
    order: the input of ``verdict.paired_bootstrap``. None for regression or a run without labelled predictions."""
    import json

    path = Path(run_dir) / "predictions_dev.json"
    if not path.is_file():
        return None
    p = json.loads(path.read_text())
    if p.get("kind") == "regression" or p.get("gold") is None:
        return None
    return [float(int(x) == int(y)) for x, y in zip(p["pred"], p["gold"], strict=True)]


def choose_then_test(candidates: dict[str, list[list[float]]], baseline: list[list[float]], metric: str):
    """Honest selection over dev examples: each run's dev examples at even positions choose the candidate (highest
    mean correctness), those at odd positions test it against ``baseline`` with a paired bootstrap (examples of
    every seed pooled). ``candidates[name][k]`` and ``baseline[k]`` are seed k's per-example correctness, in the
    same dev order; a tie goes to the candidate given first. Returns the chosen name, the choosing-half mean of every
    candidate, and the ``Estimate``."""
    from ptmlab.studies.verdict import paired_bootstrap

    def half(runs: list[list[float]], start: int) -> list[float]:
        return [x for run in runs for x in run[start::2]]

    choose = {k: sum(half(v, 0)) / max(1, len(half(v, 0))) for k, v in candidates.items()}
    best = max(choose, key=choose.get)  # ties: the first candidate given
    est = paired_bootstrap(half(candidates[best], 1), half(baseline, 1), metric)
    return best, choose, est


# options that may differ between a finished variant and the same variant asked for again
_NOT_SETTINGS = frozenset({"output", "overwrite", "resume", "command", "reuse_host_memory"})  # no effect on results


def finished_variant(out_dir: Path, cfg, overwrite: bool = False) -> dict | None:
    """The summary of the run in ``out_dir`` when it finished with the settings of ``cfg`` (a command config);
    None when it has not finished or ``overwrite`` is set. A finished run made with other settings (a study rerun
    with another ``--budget``, say) is a one-line error rather than silently reused as if it were this one."""
    from ptmlab.core.config import config_to_dict
    from ptmlab.core.errors import PtmlabError
    from ptmlab.core.rundir import RunDir

    if overwrite or not (out_dir / "summary.json").is_file():
        return None
    run = RunDir(out_dir)
    saved = run.read_config() if run.file("config.yaml").is_file() else {}
    want = json.loads(json.dumps(config_to_dict(cfg), default=str))
    differ = [k for k, v in want.items() if k not in _NOT_SETTINGS and k in saved
              and json.loads(json.dumps(saved[k], default=str)) != v]
    if differ:
        shown = ", ".join(f"{k} {saved[k]!r} there, {want[k]!r} now" for k in differ[:3])
        raise PtmlabError(f"'{out_dir}' holds a finished run made with other settings ({shown}"
                          f"{', ...' if len(differ) > 3 else ''}): pass --overwrite to redo it, or another --output")
    return run.summary()


def finetune_variant(base, out_dir: Path, **overrides) -> dict:
    """Fine-tune one variant of a study into ``out_dir``; reuses a finished variant made with the same settings."""
    from ptmlab.train.args import FinetuneConfig
    from ptmlab.train.finetune import run_finetune

    overrides.setdefault("tasks", [])  # a study's own --tasks lists tasks to run one by one, not one multi-task run
    cfg = command_config(base, FinetuneConfig, output=str(out_dir), **overrides)
    done = finished_variant(out_dir, cfg, getattr(base, "overwrite", False))
    return done if done is not None else run_finetune(cfg, command="study")


def write_study(out: Path, title: str, rows: list[dict], verdict, figures=(), extra: dict | None = None,
                columns: list[str] | None = None, *, claim=None, budget: str | None = None,
                seeds=None) -> None:
    """results.json + report.html (claim, verdict, table, plots), and the table and verdict on stdout.

    ``verdict`` is a ``studies.verdict.Verdict`` (outcome, reason, estimate) or, for studies not yet converted, a
    string; ``claim`` the study's ``Claim``. results.json carries them with the run's metadata (command, versions,
    machine, budget, seeds): the schema the dashboard reads."""
    from ptmlab.studies.verdict import Verdict, run_metadata

    out.mkdir(parents=True, exist_ok=True)
    text = verdict.text() if isinstance(verdict, Verdict) else str(verdict)
    record = {"title": title, "rows": rows, "verdict": text}
    if isinstance(verdict, Verdict):
        record.update(verdict.to_dict())
    if claim is not None:
        record["claim"] = claim.to_dict()
    record["run"] = run_metadata(budget, seeds)
    atomic_write_json(out / "results.json", {**record, **(extra or {})})
    rep = Report(title)
    if claim is not None:
        rep.heading("Claim").text(f"{claim.claim} ({claim.source}; paper: {claim.paper or 'no number'})")
        rep.text(f"Rule: {claim.rule}")
    rep.heading("Verdict").text(text).heading("Results").table(rows, columns)
    for fig, name, caption in figures:
        rep.figure(fig, name, caption)
    rep.write(out / "report.html")
    print_table(rows, columns)
    print(f"\nverdict: {text}")
    print(f"report: {out / 'report.html'}")


def default_task() -> str:
    """sst2 where the GLUE data is present, else the built-in tweets."""
    from ptmlab.data.loaders import default_glue_dir

    return "sst2" if default_glue_dir() else "tweets"


