"""``run_optimize``: check every input, split dev into a search part and a held-out part, search (``search.py``),
time the finalists side by side, score the winner once on the held-out part, export it into OUT with its model
card, parity and report (``report.py``)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import random
import shutil
import sys
import time
from pathlib import Path

from ptmlab.core.config import build_config, config_to_dict
from ptmlab.core.errors import PtmlabError
from ptmlab.optimize.config import RUN_KEYS, OptimizeConfig, parse_batches, parse_budget
from ptmlab.optimize.space import Structure, check_fits, default_structures, parse_structure

STUDY_FILE = "study.db"
TRIALS_LOG = "trials.jsonl"
# options that may change when a search is resumed (the rest define the search and come from OUT/config.yaml)
RESUMABLE = ("budget", "trials", "finalists", "latency_rounds")
BUILD_SAFETY = 1.25  # a training is started only when this much more than its estimated time is left


def resume_config(output: str, given: dict) -> OptimizeConfig:
    """The config a search in ``output`` was started with, ``given`` options on top (``RESUMABLE`` only)."""
    from ptmlab.core.rundir import RunDir

    out = Path(output).expanduser()
    if not (out / STUDY_FILE).is_file() or not (out / "config.yaml").is_file():
        raise PtmlabError(f"--resume: '{out}' holds no optimize search ({STUDY_FILE}): start one without --resume")
    saved = RunDir(out).read_config()
    if saved.pop("command", "optimize") != "optimize":
        raise PtmlabError(f"--resume: '{out}' was not written by ptmlab optimize")
    known = {f.name for f in dataclasses.fields(OptimizeConfig)}
    saved = {k: v for k, v in saved.items() if k in known}
    changed = sorted(k for k, v in given.items() if k not in RESUMABLE and k in known and k not in ("model", "output")
                     and saved.get(k) != v)
    if changed:
        raise PtmlabError(f"--resume continues the search as it was started: --{changed[0].replace('_', '-')} cannot "
                          f"change (only {', '.join('--' + k.replace('_', '-') for k in RESUMABLE)} can)")
    if given.get("model") and Path(str(given["model"])).expanduser().resolve() != \
            Path(str(saved["model"])).expanduser().resolve():
        raise PtmlabError(f"--resume: '{out}' optimizes '{saved['model']}', not '{given['model']}'")
    values = {**saved, **{k: v for k, v in given.items() if k in RESUMABLE}, "output": str(out)}
    return build_config(OptimizeConfig, values, source=f"{out}/config.yaml")


def _run_data_args(run: Path):
    """The data options the run was trained with (its config.yaml), for the same rows."""
    from ptmlab.export.parity import DATA_FIELDS, _rereadable
    from ptmlab.train.args import DataArgs

    cfg_file = run / "config.yaml"
    if not cfg_file.is_file():
        raise PtmlabError(f"'{run}' records no data (no config.yaml): optimize needs a run directory whose dev data "
                          f"it can read again")
    import yaml

    try:
        saved = yaml.safe_load(cfg_file.read_text()) or {}
    except yaml.YAMLError:
        saved = {}
    if not isinstance(saved, dict):
        saved = {}
    if saved.get("tasks"):
        raise PtmlabError(f"'{run}' is a multi-task run: optimize takes single-task runs (sentence classification, "
                          f"regression, token classification, extractive QA)")
    values = {k: v for k, v in saved.items() if k in DATA_FIELDS and v is not None}
    if not values or not _rereadable(values):
        raise PtmlabError(f"'{run}' was trained on data held in memory, which it does not keep: optimize needs a run "
                          f"whose dev data it can read again (a task name or data files)")
    values["max_eval"] = None
    return build_config(DataArgs, values, source=f"{run}/config.yaml"), saved


class Context:
    """What every trial reads: the source model, the data parts, the timing texts, the study, the structures."""

    def __init__(self, cfg: OptimizeConfig, resume: bool):
        import torch

        from ptmlab.core.seed import configure_threads, set_seed
        from ptmlab.data.taskdata import label_names, load_task_data
        from ptmlab.export.run import check_source
        from ptmlab.models.zoo import load_model, load_tokenizer
        from ptmlab.optimize.outputs import QA, kind_of, labelled, point_scale, timing_texts

        self.cfg, self.resume = cfg, resume
        self.out = Path(cfg.output).expanduser()
        self.started = time.time()
        configure_threads()
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        self.threads = torch.get_num_threads()
        set_seed(cfg.seed)
        run = Path(cfg.model).expanduser()
        if not run.is_dir():
            raise PtmlabError(f"'{cfg.model}' is not a run directory: pass a fine-tuned run (ptmlab finetune --output)")
        check_source(str(run))
        args, self.run_config = _run_data_args(run)
        self.max_length = args.max_length
        data = load_task_data(dataclasses.replace(args, max_train=self.run_config.get("max_train")), need_train=True)
        spec = data.spec
        if spec.kind == "multi-label":
            raise PtmlabError(f"task '{spec.name}' is multi-label: optimize takes sentence classification, regression, "
                              f"token classification and extractive QA runs")
        self.kind, self.scale = kind_of(spec), point_scale(spec)
        dev = data.splits.get("dev")
        if dev is None or len(dev) < 4 or not labelled(dev, spec):
            raise PtmlabError(f"run '{run}' has no labelled dev data to choose on: optimize needs the run's dev split "
                              f"with labels")
        if spec.kind == QA:  # QA reads windows of the task's length (384 unless the run chose one)
            self.max_length = dev.window or args.max_length
        self.data, self.spec, self.labels = data, spec, label_names(data)
        self.train = data.splits["train"]
        test = data.splits.get("test")
        test_labelled = labelled(test, spec)
        if cfg.held_out == "test" and not test_labelled:
            raise PtmlabError(f"--held-out test: task '{spec.name}' has no labelled test split here: use --held-out "
                              f"dev (a part of dev set aside)")
        if cfg.held_out == "test" or (cfg.held_out == "auto" and test_labelled):
            self.dev, self.held, self.held_name = dev, test, "test split"
        else:
            idx = list(range(len(dev)))
            random.Random(cfg.seed).shuffle(idx)
            cut = max(1, min(len(idx) - 2, round(len(idx) * cfg.held_out_fraction)))
            self.held = dev.select(sorted(idx[:cut]))
            self.dev = dev.select(sorted(idx[cut:]))
            self.held_name = f"{cfg.held_out_fraction:g} of dev, set aside (seed {cfg.seed})"
        self.tokenizer = load_tokenizer(str(run))
        self.source = load_model(str(run)).eval()
        if getattr(self.source.config, "ptmlab_modifications", None):
            kinds = sorted({m.get("kind") for m in self.source.config.ptmlab_modifications})
            raise PtmlabError(f"'{run}' is already modified ({', '.join(kinds)}): optimize the fine-tuned run it came "
                              f"from")
        self.batches = parse_batches(cfg.batch)
        self.deadline_budget = parse_budget(cfg.budget)
        self.texts = timing_texts(self.dev, spec, cfg.latency_texts)
        self.notes: list[str] = []
        self.left_out: list[dict] = []
        self._structure_logits: dict[str, object] = {}
        self.source_logits = None
        self.source_metrics: dict = {}
        self.study = None
        self.structures = None
        self.source_data = None

    # ------------------------------------------------------------------------------------------------- set-up
    def open(self) -> None:
        """After every check: the output, the study, the source's dev scores."""
        from ptmlab.core.rundir import RunDir
        from ptmlab.optimize.search import open_study
        from ptmlab.optimize.structures import Structures, training_source

        if not self.resume:
            RunDir.create(self.out, self.cfg.overwrite)
            for stale in (STUDY_FILE, TRIALS_LOG):  # --overwrite: an earlier search's study and its models go
                (self.out / stale).unlink(missing_ok=True)
            for stale in ("structures", "trials", "cache"):
                shutil.rmtree(self.out / stale, ignore_errors=True)
            values = config_to_dict(self.cfg)
            values["max_length"] = self.max_length  # the run's: what serve and predict read from OUT/config.yaml
            for key in RUN_KEYS[1:]:  # how a span run reads its inputs
                if self.run_config.get(key) is not None:
                    values[key] = self.run_config[key]
            RunDir(self.out).write_config(values, "optimize")
        self.study = open_study(self.out / STUDY_FILE, self.cfg, self.resume)
        self.structures = Structures(self)
        self.source_data = training_source(self.data, self.train, self.dev, self.labels)
        self.score_source()

    def score_source(self) -> None:
        """The run's own logits and scores on the search part: what every candidate is compared with."""
        self.source_logits = self.logits(self.source, self.tokenizer, self.dev)
        self.source_metrics = self.metrics(self.source_logits, self.dev)
        self.source_score = self.source_metrics[self.spec.main_metric]

    def elapsed(self) -> float:
        """Seconds of search so far, across resumed calls."""
        before = float(self.study.user_attrs.get("elapsed_before_s", 0.0)) if self.study is not None else 0.0
        return before + time.time() - self.started

    def leave_out(self, name: str, reason: str) -> None:
        """A structure of the request that cannot apply to this run: not searched, named in the report."""
        self.left_out.append({"structure": name, "reason": reason})
        self.note(f"{name} left out: {reason}")

    def note(self, text: str) -> None:
        self.notes.append(text)
        print(f"  {text}", flush=True)

    def log(self, row: dict) -> None:
        with open(self.out / TRIALS_LOG, "a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")
        if row.get("status") == "complete":
            print(f"  trial {row['trial']}: {row['structure']} on {row['backend']}: dev {row['dev']:.4f} "
                  f"({row['loss_points']:+.2f} points lost), {self.describe_value(row['objective'])}", flush=True)
        else:
            print(f"  trial {row['trial']}: {row['structure']} on {row['backend']}: {row['status']} ({row['reason']})",
                  flush=True)

    @contextlib.contextmanager
    def quiet_training(self):
        """Training output goes to OUT/structures/training.log."""
        log = self.out / "structures" / "training.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        env = os.environ.get("PTMLAB_PROGRESS")
        os.environ["PTMLAB_PROGRESS"] = "0"
        try:
            with open(log, "a", encoding="utf-8") as f, contextlib.redirect_stdout(f):
                yield
        finally:
            if env is None:
                os.environ.pop("PTMLAB_PROGRESS", None)
            else:
                os.environ["PTMLAB_PROGRESS"] = env

    # ------------------------------------------------------------------------------------------------- scoring
    def logits(self, model, tokenizer, split):
        """The model's outputs on ``split``: logits per example, or per sentence or window with their features."""
        from ptmlab.optimize.outputs import model_outputs

        return model_outputs(model, tokenizer, split, self.spec, self.max_length)

    def metrics(self, outputs, split) -> dict[str, float]:
        from ptmlab.optimize.outputs import scores

        return scores(outputs, split, self.spec)

    def compare(self, reference, outputs, split) -> dict:
        """ptmlab's parity check: agreement of labels, tags per word or answer spans, and the largest logit gap."""
        from ptmlab.optimize.outputs import agreement

        return agreement(reference, outputs, split, self.spec, self.labels)

    def loss_points(self, score: float, reference: float | None = None) -> float:
        """Points of the main metric lost against the run's score (or ``reference``)."""
        ref = self.source_score if reference is None else reference
        return round((ref - score) * self.scale, 2)

    def structure(self, name: str) -> Structure:
        return parse_structure(name)

    def structure_loss(self, s: Structure) -> float:
        """Dev loss in points of the structure in fp32 PyTorch (built first when needed); cached in the study."""
        key = f"structure:{s.name}"
        model, tok, _ = self.structures.get(s)
        if s.name not in self._structure_logits:
            self._structure_logits[s.name] = self.logits(model, tok, self.dev)
        if key not in self.study.user_attrs:
            dev = self.metrics(self._structure_logits[s.name], self.dev)[self.spec.main_metric]
            self.study.set_user_attr(key, {"dev": dev, "loss_points": self.loss_points(dev)})
        return self.study.user_attrs[key]["loss_points"]

    # ------------------------------------------------------------------------------------------------- objective
    def objective(self, row: dict) -> float:
        """What the search minimises: the geometric mean over --batch of latency relative to the run (latency), that
        ratio at the largest batch (throughput), or MB on disk (size)."""
        from ptmlab.optimize.search import geometric_mean

        if self.cfg.objective == "size":
            return row["size_mb"]
        if self.cfg.objective == "throughput":
            return row["ratios"][str(max(self.batches))]
        return round(geometric_mean([row["ratios"][str(b)] for b in self.batches]), 4)

    def describe_value(self, value: float | None) -> str:
        if value is None:
            return "none yet"
        if self.cfg.objective == "size":
            return f"{value:.1f} MB"
        what = "speed-up" if self.cfg.objective == "latency" else f"throughput gain at batch {max(self.batches)}"
        return f"{1 / value:.2f}x {what}"

    def time_rounds(self, models: list[tuple], rounds: int, desc: str = "timing") -> list[dict]:
        """Round-robin timing of ``(model, tokenizer)`` pairs, the first being the reference: per pair the median
        latency per batch size over ``rounds`` rounds and the median over rounds of its ratio to the reference within
        each round (a slow stretch of a shared machine slows every pair of a round alike)."""
        import statistics

        from ptmlab.core.progress import progress
        from ptmlab.models.latency import time_side_by_side

        per_round: list[list[dict]] = []
        for _ in progress(range(rounds), desc=desc):
            rows = [{} for _ in models]
            time_side_by_side([(r, m, t) for r, (m, t) in zip(rows, models, strict=True)], self.texts, 1,
                              self.max_length, b1_repeats=3, batches=self.batches, desc=desc)
            per_round.append(rows)
        out = []
        for i in range(len(models)):
            row: dict = {}
            for b in self.batches:
                key = f"latency_b{b}_ms"
                row[key] = round(statistics.median(r[i][key] for r in per_round), 2)
            row["ratios"] = {str(b): round(statistics.median(r[i][f"latency_b{b}_ms"] /
                                                             max(r[0][f"latency_b{b}_ms"], 1e-6) for r in per_round), 4)
                             for b in self.batches}
            out.append(row)
        return out

    def time_against_source(self, model, tok, rounds: int) -> dict:
        """``model`` timed against the run itself (``time_rounds``): latencies, the run's, and ratios."""
        ref, row = self.time_rounds([(self.source, self.tokenizer), (model, tok)], rounds)
        row.update({f"source_latency_b{b}_ms": ref[f"latency_b{b}_ms"] for b in self.batches})
        return row

    def estimate(self, s: str, b: str) -> float | None:
        """The objective (s, b) could reach: the untrained shape of ``s`` (the pruned vocabulary itself) against the
        run in PyTorch, times what backend ``b`` did to the run itself. None for the run itself or before ``b`` ran on
        the run."""
        from ptmlab.optimize.search import geometric_mean

        structure = self.structure(s)
        if structure.kind == "source":
            return None
        source_row = self.source_row(b)
        if source_row is None:
            return None
        key = f"probe:{s}"
        if key not in self.study.user_attrs:
            check_fits(structure, self.source.config)
            probe, tok = self.structures.probe(structure)
            from ptmlab.models.latency import parameter_count

            timed = self.time_against_source(probe, tok, self.cfg.search_rounds)
            self.study.set_user_attr(key, {"ratios": timed["ratios"], "params": parameter_count(probe)})
        probe = self.study.user_attrs[key]
        if self.cfg.objective == "size":
            from ptmlab.models.latency import parameter_count

            return round(source_row["size_mb"] * probe["params"] / parameter_count(self.source), 3)
        ratios = {k: probe["ratios"][k] * source_row["ratios"][k] for k in probe["ratios"]}
        if self.cfg.objective == "throughput":
            return round(ratios[str(max(self.batches))], 4)
        return round(geometric_mean([ratios[str(x)] for x in self.batches]), 4)

    def source_row(self, backend: str) -> dict | None:
        from ptmlab.optimize.search import tried

        t = tried(self.study).get(("source", backend))
        row = t.user_attrs.get("row") if t is not None else None
        return row if row and row.get("status") == "complete" else None

    def most_promising(self, left: list[tuple[str, str]]) -> tuple[str, str]:
        def key(pair):
            est = self.estimate(*pair)
            return (self.structure(pair[0]).kind != "source", not self.structure(pair[0]).cheap,
                    est if est is not None else float("inf"))

        return min(left, key=key)

    # ------------------------------------------------------------------------------------------------- builds
    def build_seconds(self, s: Structure) -> float | None:
        """Seconds to train ``s``: the trainings so far (or the run's own) per parameter and training example."""
        from ptmlab.models.latency import parameter_count

        builds = self.study.user_attrs.get("builds") or []
        rows = len(self.train) * self.cfg.epochs
        params = self.structures.probe_params(s)
        # a pruned model also scores its units and evaluates before recovery; either may meet a busier machine
        factor = BUILD_SAFETY * (1.3 if s.kind == "prune" else 1.0)
        if builds:
            rate = sum(x["seconds"] for x in builds) / sum(x["params"] * x["examples"] for x in builds)
            return factor * rate * params * rows
        summary = Path(self.cfg.model) / "summary.json"
        try:
            run = json.loads(summary.read_text())
            seconds = float(run["train_seconds"]) + float(run.get("eval_seconds") or 0)
            examples = float(run["train_examples"]) * float(run.get("epochs") or 1)
        except (OSError, ValueError, KeyError, TypeError):
            return None
        # the run's fine-tuning, per parameter and example; a distillation or recovery also runs the teacher once
        return factor * 1.3 * seconds / max(examples, 1) / parameter_count(self.source) * params * rows

    def record_build(self, s: Structure, seconds: float, params: int) -> None:
        builds = list(self.study.user_attrs.get("builds") or [])
        builds.append({"structure": s.name, "seconds": round(seconds, 1), "params": params,
                       "examples": len(self.train) * self.cfg.epochs})
        self.study.set_user_attr("builds", builds)
        self.note(f"{s.name} trained in {seconds:.0f} s")

    # ------------------------------------------------------------------------------------------------- trials
    def trial_dir(self, number: int, s: Structure, backend: str) -> Path:
        return self.out / "trials" / f"{number:03d}-{s.slug}-{backend}"

    def candidate(self, s: Structure, backend: str, number: int, rebuild: bool = True):
        """(Built, tokenizer, weights folder) of a trial: built, or reopened from its folder."""
        from ptmlab.optimize.backends import ONNX_BACKENDS, OPENVINO_BACKENDS, Bf16Model, Built, build

        model, tok, folder = self.structures.get(s)
        work = self.trial_dir(number, s, backend)
        if backend in ONNX_BACKENDS and not rebuild and (work / "model.onnx").is_file():
            from ptmlab.models.onnx import onnx_runtime_model

            runtime = "openvino" if backend in OPENVINO_BACKENDS else "onnxruntime"
            return Built(onnx_runtime_model(work / "model.onnx", model.config, runtime), work / "model.onnx"), \
                tok, folder
        if backend == "torch-bf16" and not rebuild:
            return Built(Bf16Model(model), info={"precision": "bf16"}), tok, folder
        if backend == "torch-fp32" and not rebuild:
            return Built(model, info={"precision": "fp32"}), tok, folder
        calibration = self._calibration()
        cache = self.out / "cache" / s.slug  # the structure's ONNX graphs, shared by its backends
        return build(backend, model, tok, cache, work, calibration), tok, folder

    def _calibration(self):
        from ptmlab.data.loaders import subset
        from ptmlab.optimize.outputs import texts_of

        rows = subset(self.train, self.cfg.calibration_examples, self.cfg.seed)
        return (*texts_of(rows, self.spec), self.max_length)

    def measure(self, s: Structure, backend: str, number: int) -> dict:
        """Build the candidate, score it on the search part (with parity), time it against the run."""
        from ptmlab.models.latency import parameter_count, size_on_disk_mb

        built, tok, folder = self.candidate(s, backend, number)
        logits = self.logits(built.model, tok, self.dev)
        metrics = self.metrics(logits, self.dev)
        dev = metrics[self.spec.main_metric]
        parity = self.compare(self.source_logits, logits, self.dev)
        own = self.compare(self._structure_logits[s.name], logits, self.dev)
        timed = self.time_against_source(built.model, tok, self.cfg.search_rounds)
        size = size_on_disk_mb(built.onnx) if built.onnx is not None else weights_mb(folder)
        row = {"dev": dev, "dev_metrics": metrics, "loss_points": self.loss_points(dev),
               "feasible": self.loss_points(dev) <= self.cfg.max_loss + 1e-9,
               "agreement": parity["label_agreement"],
               "max_abs_logit_diff": None if parity["max_abs_logit_diff"] is None
               else round(parity["max_abs_logit_diff"], 5),
               "agreement_with_structure": own["label_agreement"],
               "params": parameter_count(self.structures.get(s)[0]), "size_mb": round(size, 2), **timed,
               "info": built.info, "timed": "search"}
        row["objective"] = self.objective(row)
        return row

    def after_trial(self, row: dict) -> None:
        """A trial outside the loss budget is never a finalist: its files go."""
        if not row.get("feasible"):
            shutil.rmtree(self.trial_dir(row["trial"], self.structure(row["structure"]), row["backend"]),
                          ignore_errors=True)


def weights_mb(folder: Path) -> float:
    """MB of a model directory's own weights (``model.safetensors`` or its shards)."""
    files = [folder / "model.safetensors", *folder.glob("model-*-of-*.safetensors")]
    return sum(f.stat().st_size for f in files if f.is_file()) / 2**20


def check_inputs(cfg: OptimizeConfig, resume: bool) -> None:
    """Every check that needs no model: the output folder and the structures named."""
    from ptmlab.core.rundir import check_output_dir

    if resume and cfg.overwrite:
        raise PtmlabError("--resume continues the search in --output and --overwrite starts it again: pass one")
    if not cfg.output:
        raise PtmlabError("no output directory: pass --output OUT")
    out = Path(cfg.output).expanduser()
    if not resume:
        check_output_dir(out, cfg.overwrite)
        if out.exists() and (out / STUDY_FILE).is_file() and not cfg.overwrite:
            raise PtmlabError(f"'{out}' holds an optimize search: continue it with --resume or pass --overwrite")
    run = Path(cfg.model).expanduser()
    if run.exists() and out.exists() and run.resolve() == out.resolve():
        raise PtmlabError(f"--output '{out}' is the run being optimized: choose another directory")
    if out.parent.exists() and not out.parent.is_dir():
        raise PtmlabError(f"the parent of --output '{out}' is a file, not a directory: choose another --output")


def search_space(ctx: Context) -> list[tuple[str, str]]:
    from ptmlab.optimize.backends import bf16_fast
    from ptmlab.optimize.space import SENTENCE_ONLY

    cfg = ctx.cfg
    structures = default_structures(ctx.source.config) if "auto" in cfg.structures else []
    structures += [parse_structure(s) for s in cfg.structures if s != "auto"]
    seen, unique = set(), []
    for s in structures:
        if s.name in seen:
            continue
        seen.add(s.name)
        if ctx.kind != "sentence" and s.kind in SENTENCE_ONLY:
            ctx.leave_out(s.name, f"{SENTENCE_ONLY[s.kind]} ({ctx.spec.kind} run)")
            continue
        check_fits(s, ctx.source.config)
        unique.append(s)
    if not unique:
        raise PtmlabError(f"no structure of --structures {','.join(cfg.structures)} applies to a {ctx.spec.kind} run: "
                          f"add source, vocab, layers:K, shrink:... or prune:...")
    backends = list(dict.fromkeys(cfg.backends))
    if "torch-bf16" in backends and not bf16_fast():
        backends.remove("torch-bf16")
        ctx.note("torch-bf16 left out: this CPU has neither AVX512-BF16 nor AMX")
        if not backends:
            raise PtmlabError("--backends torch-bf16 needs a CPU with AVX512-BF16 or AMX, which this one lacks: add "
                              "other backends, e.g. torch-fp32,onnx-int8")
    return [(s.name, b) for s in unique for b in backends]


def run_optimize(cfg: OptimizeConfig, resume: bool = False) -> dict:
    """Search, choose, check on the held-out part and export into ``cfg.output``; returns the summary."""
    from ptmlab.core.extras import require_extra

    require_extra("optimize", "optimize")
    check_inputs(cfg, resume)
    ctx = Context(cfg, resume)
    pairs = search_space(ctx)
    ctx.open()
    from ptmlab.optimize.report import finish
    from ptmlab.optimize.search import run_search

    left = ctx.deadline_budget - float(ctx.study.user_attrs.get("elapsed_s", 0.0))
    ctx.study.set_user_attr("elapsed_before_s", float(ctx.study.user_attrs.get("elapsed_s", 0.0)))
    print(f"ptmlab optimize: {len(pairs)} candidates ({len({s for s, _ in pairs})} structures x "
          f"{len({b for _, b in pairs})} backends); the run scores {ctx.source_score:.4f} "
          f"{ctx.spec.main_metric} on the search part ({len(ctx.dev)} dev examples; held out: {ctx.held_name}, "
          f"{len(ctx.held)}); {max(0.0, left):.0f} s of budget; {ctx.threads} thread(s)", flush=True)
    run_search(ctx, ctx.study, pairs, time.time() + max(0.0, left), cfg.trials)
    ctx.study.set_user_attr("elapsed_s", ctx.elapsed())
    summary = finish(ctx, pairs)
    sys.stdout.flush()
    return summary
