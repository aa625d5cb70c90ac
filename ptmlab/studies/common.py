"""What every study shares: its options (``StudyBase`` / ``StudyArgs``, with ``--budget small`` presets), turning
them into a command's config through the one validating builder, running fine-tuning variants, writing results."""

from __future__ import annotations

import contextvars
import dataclasses
import functools
import json
from dataclasses import dataclass
from pathlib import Path

from ptmlab.core.config import Validated, add_config_args, at_least, build_config, load_yaml, opt
from ptmlab.core.io import atomic_write_json
from ptmlab.report.html import Report
from ptmlab.report.table import print_table
from ptmlab.train.args import DataArgs, ModelArgs, TrainArgs

BUDGETS = ("small", "default", "full", "gpu")
# set by ``prereg.study_options``: parse_study_args hands back the resolved options instead of running the study
PARSE_ONLY: contextvars.ContextVar[bool] = contextvars.ContextVar("ptmlab_study_parse_only", default=False)
# what ``--budget small`` sets for a study that fine-tunes (each study adds its own knobs)
SMALL_FINETUNE = dict(model="tiny", max_train=64, max_eval=32, max_length=32, epochs=1.0, batch_size=16,
                      eval_batch_size=64)
# what ``--budget full`` sets for a study that fine-tunes: three seeds and the whole dev set
FULL_FINETUNE = dict(seeds=["0", "1", "2"], max_eval=0)


@dataclass(frozen=True)
class StudyBase(Validated):
    """Options of every study: where it writes, whether finished parts are redone, and its budget."""

    budget: str = opt("default", "small: minutes on the tiny model and small subsets (tests, CI); default: the "
                                 "study's own sizes; full: the real experiment; gpu: sized to decide the claim on "
                                 "one modern GPU in a few hours (full where full can decide it on 2 CPU cores)",
                      choices=list(BUDGETS))
    output: str = opt("runs/study", "output directory")
    overwrite: bool = opt(False, "rerun variants that already finished")
    executor: str = opt("sequential", "how the study's independent runs are run: sequential (one after another, "
                                      "here) or ray (as tasks on a Ray cluster; pip install 'ptmlab[ray]')",
                        choices=["sequential", "ray"])
    ray_address: str | None = opt(None, "with --executor ray: an existing cluster's address (default: start a "
                                        "local one)")
    ray_workers: int = opt(2, "with --executor ray: runs at once on the local cluster")
    ray_cpus_per_run: int = opt(0, "with --executor ray: cores (and torch threads) per run (0: this machine's "
                                   "cores divided by --ray-workers)")

    def __post_init__(self) -> None:  # every study's options, whatever its own validate() checks
        at_least(self, 1, "ray_workers")
        at_least(self, 0, "ray_cpus_per_run")
        super().__post_init__()


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
        self.validate_model()
        self.validate_data()
        self.validate_train()


def parse_study_args(name: str, cls, argv: list[str], description: str = "", small: dict | None = None,
                     full: dict | None = None, gpu: dict | None = None):
    """A study's options: defaults < ``small`` / ``full`` / ``gpu`` preset (with ``--budget small|full|gpu``; a
    study without a ``gpu`` preset, whose full budget can decide its claim on 2 CPU cores, takes ``full`` for it) <
    ``--config`` YAML < flags.

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
    preset = {"small": small, "full": full, "gpu": full if gpu is None else gpu}.get(given.get("budget")) or {}
    values.update({k: v for k, v in preset.items() if k in known})
    values.update(given)
    if "task" in known and not values.get("task", _default(cls, "task")):  # a study's own default task stands
        values["task"] = default_task()
    cfg = build_config(cls, values, source=f"config '{args.config}'" if args.config else "options")
    from ptmlab.studies import prereg

    if PARSE_ONLY.get():
        raise prereg.ParsedOnly(cfg)
    try:  # the run starts here: what it records about its preregistration (prereg.run_record)
        prereg.note_start(name, cfg)
    except Exception as e:  # noqa: BLE001 -- never stop a study for its bookkeeping; the result says why
        prereg._STARTED[name] = {"study": name, "error": f"{type(e).__name__}: {e}"}
    return cfg


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
    mean correctness), those at odd positions test it against ``baseline``. ``candidates[name][k]`` and
    ``baseline[k]`` are seed k's per-example correctness, in the same dev order; a tie goes to the candidate given
    first. The test is a hierarchical bootstrap (seeds, then the odd-position examples every seed shares), never
    the seeds' copies of an example pooled as independent examples. Returns the chosen name, the choosing-half
    mean of every candidate, and the ``Estimate``."""
    from ptmlab.studies.verdict import hierarchical_bootstrap

    def half(runs: list[list[float]], start: int) -> list[float]:
        return [x for run in runs for x in run[start::2]]

    choose = {k: sum(half(v, 0)) / max(1, len(half(v, 0))) for k, v in candidates.items()}
    best = max(choose, key=choose.get)  # ties: the first candidate given
    est = hierarchical_bootstrap([run[1::2] for run in candidates[best]], [run[1::2] for run in baseline], metric)
    return best, choose, est


def trivial_scores(task: str, max_eval: int | None = 0, seeds=(0,), glue_dir: str | None = None) -> dict | None:
    """``_trivial_scores`` remembered per (task, subset, seeds): re-deriving results asks for the same ones often."""
    out = _trivial_scores(task, max_eval or 0, tuple(int(s) for s in (seeds or (0,))), glue_dir)
    return dict(out) if out is not None else None


@functools.lru_cache(maxsize=64)
def _trivial_scores(task: str, max_eval: int, seeds: tuple, glue_dir: str | None) -> dict | None:
    """What a predictor that ignores its input scores on ``task``'s dev examples (the subset ``--max-eval`` takes
    for each seed, averaged over seeds): ``accuracy`` of the majority class, ``f1`` of predicting the positive class
    everywhere, ``mcc`` 0 (a constant predictor), ``pearson`` / ``spearman`` 0 for regression; ``n`` the dev
    examples. A fine-tuned system must be above these for a comparison of systems to mean anything. None when the
    data is not at hand."""
    from collections import Counter

    from ptmlab.core.errors import PtmlabError
    from ptmlab.data.loaders import load_task, subset

    try:
        data = load_task(task, glue_dir)
    except (PtmlabError, OSError, ValueError):
        return None
    if "dev" not in data.splits:
        return None
    if data.spec.kind == "regression":
        return {"pearson": 0.0, "spearman": 0.0, "combined": 0.0}
    acc, f1, n = [], [], 0
    for seed in seeds or (0,):
        labels = [int(x) for x in subset(data.splits["dev"], max_eval or None, int(seed)).label or []]
        if not labels:
            return None
        counts, n = Counter(labels), len(labels)
        acc.append(counts.most_common(1)[0][1] / len(labels))
        pos = counts.get(1, 0)
        f1.append(2 * pos / (pos + len(labels)) if pos else 0.0)  # all-positive: precision pos/n, recall 1
    out = {"accuracy": sum(acc) / len(acc), "mcc": 0.0, "n": n}
    if data.spec.num_labels == 2:
        out["f1"] = sum(f1) / len(f1)
    return out


def domain_majority(name: str, domain_dir: str | Path | None = None) -> float | None:
    """The majority-class share of a domain file's labels (``<shared data>/domains/<name>.tsv``, every row): the
    trivial accuracy on that domain's test part, up to the sampling of the part. None when the file is absent."""
    import csv
    from collections import Counter

    from ptmlab.data.loaders import default_glue_dir

    if domain_dir is None:
        glue = default_glue_dir()
        domain_dir = Path(glue).parent / "domains" if glue else None
    path = Path(domain_dir) / f"{name}.tsv" if domain_dir else None
    if path is None or not path.is_file():
        return None
    with path.open(encoding="utf-8", newline="") as f:
        labels = [row.get("label") for row in csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE)]
    counts = Counter(x for x in labels if x not in (None, ""))
    return counts.most_common(1)[0][1] / sum(counts.values()) if counts else None


def majority_share(labels) -> float | None:
    """The share of the most common label in ``labels`` (the majority-class predictor's accuracy); None if empty."""
    from collections import Counter

    counts = Counter(labels)
    return max(counts.values()) / sum(counts.values()) if counts else None


def above_domain_majority(rows: list[dict], systems: tuple[str, ...], domain_key: str = "domain") -> list:
    """Per domain of ``rows`` (one row per domain and seed, a score per system), each system above the domain's
    majority-class accuracy by a t interval over seeds. The trivial accuracy is the one each row recorded for the
    rows it was tested on (``test_majority``: folds differ), else the domain file's (``domain_majority``), so a domain
    given as NAME=FILE is judged too."""
    from ptmlab.studies.verdict import seed_interval_above

    conds = []
    for d in dict.fromkeys(r.get(domain_key) for r in rows if r.get(domain_key)):
        mine = [r for r in rows if r.get(domain_key) == d]
        recorded = [r.get("test_majority") for r in mine]
        own = all(isinstance(m, int | float) for m in recorded)
        trivial = sum(recorded) / len(recorded) if own else domain_majority(str(d))
        for s in systems:
            # each seed's score against its own test rows' majority, shifted to the mean majority for the interval
            scores = [float(r[s]) - (float(r["test_majority"]) - trivial if own else 0.0) for r in mine
                      if isinstance(r.get(s), int | float)]
            n = [r.get("test_rows") for r in mine]
            margin = 1 / min(n) if all(isinstance(x, int) and x > 0 for x in n) else 0.0  # one test row's worth
            conds.append(seed_interval_above(scores, trivial, f"{d} test accuracy of {s}", margin=margin))
    return conds or [seed_interval_above([], None, "every domain")]


def portable(value, output: str | Path | None = None):
    """``value`` (a results record, or any part of one) with absolute machine paths made portable: a path in the
    shared data folder becomes ``<data>/...``, one in the project is made relative to it, one under the study's
    ``output`` becomes ``runs/<output's name>/...``; any other absolute path keeps its last two parts. Applied to
    every string, so commands are rewritten too."""
    import os
    import re

    from ptmlab.data.loaders import default_glue_dir

    project = Path.cwd().resolve()
    glue = default_glue_dir()
    data = Path(glue).resolve().parent if glue else None
    out = Path(os.path.abspath(output)) if output else None

    def one(path: str) -> str:
        p = Path(os.path.normpath(path))
        if data is not None and p.is_relative_to(data):
            return f"<data>/{p.relative_to(data).as_posix()}"
        if out is not None and p.is_relative_to(out):
            rel = p.relative_to(out)
            return (Path("runs") / out.name / rel).as_posix() if rel.parts else f"runs/{out.name}"
        if p.is_relative_to(project):
            return p.relative_to(project).as_posix() or "."
        return Path(*p.parts[-2:]).as_posix() if len(p.parts) > 2 else p.name

    pattern = re.compile(r"(?<![\w.<>+/-])/[A-Za-z_][\w.@+-]*(?:/[\w.@+-]+)+/?")

    from ptmlab.studies.evidence import is_packed

    def walk(v):
        if isinstance(v, str):
            return pattern.sub(lambda m: one(m.group(0)), v) if "/" in v and not is_packed(v) else v
        if isinstance(v, dict):
            return {k: walk(x) for k, x in v.items()}
        if isinstance(v, list | tuple):
            return [walk(x) for x in v]
        return v

    return walk(value)


def output_of(record: dict) -> str | None:
    """The ``--output`` a results record's command wrote to (None when it does not say)."""
    import shlex

    words = shlex.split(str((record.get("run") or {}).get("command") or ""))
    for i, w in enumerate(words):
        if w == "--output" and i + 1 < len(words):
            return words[i + 1]
        if w.startswith("--output="):
            return w.split("=", 1)[1]
    return None


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


def finetune_run(base, out_dir: Path, **overrides):
    """``finetune_variant(base, out_dir, **overrides)`` as one run of a study's grid (``executor.run_grid``)."""
    from ptmlab.studies.executor import Run

    return Run(finetune_variant, Path(out_dir), (base, out_dir), overrides)


def write_study(out: Path, title: str, rows: list[dict], verdict, figures=(), extra: dict | None = None,
                columns: list[str] | None = None, *, claim=None, budget: str | None = None,
                seeds=None, validity=None) -> None:
    """results.json + report.html (claim, verdict, table, plots), and the table and verdict on stdout.

    ``verdict`` is the rule's ``studies.verdict.Verdict`` (outcome, reason, estimate); ``claim`` the study's
    ``Claim``; ``validity`` the study's function from the record (rows and ``extra``, as results.json holds them)
    to its list of ``Condition`` -- the same function ``ptmlab.studies.rederive`` applies to a committed record.
    ``judge`` turns them into the outcome: ``cannot test`` when a condition is unmet. results.json carries the
    outcome, the validity block, the detectable effect and the run's metadata (command, versions, machine, budget,
    seeds), with machine paths made portable: the schema the dashboard reads."""
    from ptmlab.studies.verdict import Verdict, run_metadata

    out.mkdir(parents=True, exist_ok=True)
    record = {"title": title, "rows": rows, **(extra or {})}
    if claim is not None:
        record["claim"] = claim.to_dict()
    record["run"] = run_metadata(budget, seeds)
    if claim is not None:
        from ptmlab.studies import prereg

        record["preregistration"] = prereg.run_record(prereg.started(claim.study))
    if isinstance(verdict, Verdict):  # a string (no rule) stays an unrated sentence
        verdict = judge(verdict, record, validity, claim)
        record.update(verdict.to_dict())
        if claim is not None:  # whether the records it keeps give its verdict again (rederive's recompute block)
            from ptmlab.studies.rederive import module_of, restated

            try:
                record["recompute"] = restated(module_of(claim.study), claim.study, record)[1]
            except Exception as e:  # noqa: BLE001 -- the run's own verdict stands; the record says why
                record["recompute"] = {"status": "as recorded", "from": f"its records could not be read again "
                                                                        f"({type(e).__name__}: {e})"}
    text = verdict.text() if isinstance(verdict, Verdict) else str(verdict)
    record["verdict"] = text
    record = portable(record, out)
    atomic_write_json(out / "results.json", record)
    rep = Report(title)
    if claim is not None:
        rep.heading("Claim").text(f"{claim.claim} ({claim.source}; paper: {claim.paper or 'no number'})")
        if claim.conditions:
            rep.text("Validity conditions: " + "; ".join(claim.conditions))
        rep.text(f"Rule: {claim.rule}")
    rep.heading("Verdict").text(text)
    if isinstance(verdict, Verdict) and verdict.validity:
        rep.table([c.to_dict() for c in verdict.validity])
    rep.heading("Results").table(rows, columns)
    for fig, name, caption in figures:
        rep.figure(fig, name, caption)
    rep.write(out / "report.html")
    print_table(rows, columns)
    print(f"\nverdict: {text}")
    print(f"report: {out / 'report.html'}")


def judge(verdict, record: dict, validity=None, claim=None):
    """The rule's verdict checked against the study's validity conditions on ``record`` (see ``verdict.assess``)."""
    from ptmlab.studies.verdict import assess

    conditions = list(validity(record)) if validity is not None else []
    return assess(verdict, conditions, getattr(claim, "paper_effect", None), getattr(claim, "paper_part", None))


def default_task() -> str:
    """sst2 where the GLUE data is present, else the built-in tweets."""
    from ptmlab.data.loaders import default_glue_dir

    return "sst2" if default_glue_dir() else "tweets"




# ------------------------------------------------------------------------------ validity conditions, shared
def eval_size(record: dict, default: int | None = 500) -> int | None:
    """The ``--max-eval`` a record's run used: the flag in its command, else 0 (the whole dev set) for ``--budget
    full`` and ``gpu``, else the study's ``default``."""
    import shlex

    run = record.get("run") or {}
    words = shlex.split(str(run.get("command") or ""))
    for i, w in enumerate(words):
        if w == "--max-eval" and i + 1 < len(words):
            return int(words[i + 1])
        if w.startswith("--max-eval="):
            return int(w.split("=", 1)[1])
    return 0 if run.get("budget") in ("full", "gpu") else default


def above_trivial(record: dict, task: str, metric: str, systems: dict, max_eval: int | None = None) -> list:
    """One condition per fine-tuned system of ``systems`` ({name: per-seed scores of ``metric`` on ``task``}): its
    seed-level interval lies above what the trivial predictor scores (``trivial_scores``) on the same dev examples.
    A missing trivial score (no data at hand, a metric without one) is an unmet condition with value null."""
    from ptmlab.studies.verdict import seed_interval_above

    seeds = (record.get("run") or {}).get("seeds") or [0]
    size = eval_size(record) if max_eval is None else max_eval
    t = trivial_scores(task, size, seeds) or {}
    one = 1.0 / t["n"] if t.get("n") and metric in ("accuracy", "f1") else 0.0  # one dev example's worth
    return [seed_interval_above([float(x) for x in scores], t.get(metric), f"{task} {metric} of {name}", one)
            for name, scores in systems.items()]


def reference_budget(record: dict, what: str = "reference") -> list:
    """The condition that the reference (unpruned, undistilled, not adapted) was trained at least as long as what
    is compared with it: ``record["train_epochs"]`` = {"reference": epochs, "compared": epochs of the longest
    trained compared system} (the whole training a model had, fine-tuning before pruning included). Unrecorded:
    unmet, value null."""
    from ptmlab.studies.verdict import Condition

    te = record.get("train_epochs") if isinstance(record.get("train_epochs"), dict) else {}
    ref, comp = te.get("reference"), te.get("compared")
    ratio = float(ref) / float(comp) if isinstance(ref, int | float) and isinstance(comp, int | float) and comp \
        else None
    return [Condition.check(f"training epochs of the {what} / of the longest-trained system compared with it",
                            ratio, ">=", 1.0)]


def rows_per_seed(rows: list[dict], key: str, per_seed: str = "per_seed") -> dict[str, list[float]]:
    """{row[key]: row[per_seed]} for the rows that carry per-seed scores."""
    return {str(r[key]): [float(x) for x in r[per_seed]] for r in rows
            if isinstance(r.get(per_seed), list) and r.get(key) is not None}


def task_of(record: dict, default: str = "sst2") -> str:
    """The ``--task`` of a record's run (its command), else ``default``."""
    import shlex

    words = shlex.split(str((record.get("run") or {}).get("command") or ""))
    for i, w in enumerate(words):
        if w == "--task" and i + 1 < len(words):
            return words[i + 1]
        if w.startswith("--task="):
            return w.split("=", 1)[1]
    return default


def one_model_above(record: dict, task: str, metric: str, value, what: str) -> list:
    """For a study of one model (no seeds to repeat): its ``metric`` on ``task`` minus the trivial predictor's, above
    two standard errors of a proportion over the dev examples (``2 √(p(1-p)/n)``, p the trivial score)."""
    import math

    from ptmlab.studies.verdict import Condition

    t = trivial_scores(task, eval_size(record), (record.get("run") or {}).get("seeds") or [0]) or {}
    trivial, n = t.get(metric), t.get("n")
    gap = float(value) - float(trivial) if isinstance(value, int | float) and trivial is not None else None
    need = 2 * math.sqrt(max(trivial, 0.01) * (1 - min(trivial, 0.99)) / n) if trivial is not None and n else None
    return [Condition.check(f"{task} {metric} of {what} minus the trivial predictor"
                            + (f" {trivial:.4f}" if trivial is not None else ""), gap, ">", need)]
