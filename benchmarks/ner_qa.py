"""Benchmark: NER (CoNLL-2003) and extractive QA (SQuAD v1.1) fine-tuned with ptmlab and with transformers' Trainer,
side by side in one process, and a 3-layer student distilled from ptmlab's model.

Per task (``--tasks ner,qa``):
- ``ptmlab``: ``run_finetune`` with ptmlab's defaults (the built-in task ``conll2003`` or ``squad``; lr 5e-5, linear
  schedule with 6% warm-up, length-grouped batches);
- ``trainer``: transformers' Trainer on ``AutoModelForTokenClassification`` / ``AutoModelForQuestionAnswering``
  loaded the same way and seeded alike, with the features a transformers user prepares (``trainer_token_features``:
  words split into sub-tokens, a word's tag on its first sub-token; ``trainer_qa_features``: question and context
  windows of ``--max-length`` tokens overlapping by 128, each labelled with the token span of the first answer, or
  [CLS] when the window does not hold it), ``DataCollatorForTokenClassification`` / ``DataCollatorWithPadding``
  (dynamic padding), its default random sampler, weight decay 0.01, gradient clipping 1.0, and the model's own loss
  (the mean over the batch's labelled tokens for NER, where ptmlab averages per sentence first);
- both train the same rows (``--max-train``, a seed-0 shuffle) at the same precision, batch size, epochs, lr and max
  length (ptmlab's per-task default unless given: 128 for NER, 384-token windows for QA), in the same process,
  ``--repeats`` rounds in rotated order (benchmarks/_finetune_job.py's ``alternate``);
- every final model is scored by the same ptmlab code in fp32 (``train.spans.evaluate_span``: each word's tag read
  at its first sub-token, then seqeval's entity-level micro F1 on CoNLL-2003 testb; the best start/end span over a
  question's windows, then SQuAD's official exact match and F1 on dev), so only the training differs;
- ``distilled``: ``ptmlab distill --teacher RUN --student layers:3`` from ptmlab's model (round 0) with the same
  rows, epochs, batch and length; its score by the same code, the share of the teacher's score it keeps, and the
  batch-32 inference speed-up that the distillation run measured (``speedup_b32`` of its summary.json).

Throughput is training examples (sentences; QA windows, several per long context) x epochs over the training wall
time, evaluation and model loading excluded; the ratio is ptmlab's over the Trainer's. Scores are fractions in
[0, 1]. Runs offline.

The real run (estimated at 45 to 90 minutes on a quiet 2-core CPU at bf16, from the sentence benchmark's rate of
~160 minilm examples/s; most of it SQuAD: 8,000 questions make 8,079 windows of 171 tokens on average, trained on
by two fine-tunings and a student, and four 6-layer scorings of the 10,570 dev questions; CoNLL-2003 is 14,041
sentences, scored on testb's 3,453):

    python benchmarks/ner_qa.py --model minilm --tasks ner,qa --max-train ner=all,qa=8000 --epochs 1 --batch-size 32
"""

from __future__ import annotations

# isort: off
from _env import machine_info, result_path  # first: offline defaults
# isort: on

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

from _finetune_job import Job, alternate, load_average, summarise

TASKS = {"ner": "conll2003", "qa": "squad"}
EVAL_SPLIT = {"ner": "test", "qa": "dev"}  # CoNLL-2003 testb (dev is testa); SQuAD dev
DEFAULT_LENGTH = {"ner": 128, "qa": 384}  # what ptmlab uses for the task when --max-length is left alone
DOC_STRIDE = 128
MAIN = {"ner": "entity_f1", "qa": "f1"}


# ---------------------------------------------------------------------------------------------------- options
def per_task(text: str | None, tasks: list[str], option: str, default=None) -> dict:
    """``--option 8000`` (every task), ``--option ner=all,qa=8000`` (per task); ``all`` (or 0) means everything."""
    out = dict.fromkeys(tasks, default)
    if text is None:
        return out
    for part in text.split(","):
        name, eq, value = part.rpartition("=")
        names = [name] if eq else tasks
        if eq and name not in TASKS:
            raise ValueError(f"{option} {text}: unknown task '{name}' (use {', '.join(TASKS)})")
        try:
            n = None if value == "all" else int(value)
        except ValueError:
            raise ValueError(f"{option} {text}: give a number or 'all', e.g. ner=all,qa=8000") from None
        if n is not None and n < 0:
            raise ValueError(f"{option} {text}: counts are positive")
        out.update({t: n or None for t in names if t in out})
    return out


def finetune_config(job: Job, max_eval: int | None, out: Path):
    """ptmlab's fine-tuning of ``job``: its defaults for everything ``job`` does not fix."""
    from ptmlab.train.args import FinetuneConfig

    return FinetuneConfig(model=job.model, task=job.task, max_train=job.max_train, max_eval=max_eval,
                          epochs=job.epochs, lr=job.lr, batch_size=job.batch_size, max_length=job.max_length,
                          warmup=job.warmup, schedule="linear", seed=job.seed, precision=job.precision,
                          doc_stride=DOC_STRIDE, output=str(out), overwrite=True, test=False)


# ---------------------------------------------------------------------------------------------------- scoring
class Scorer:
    """The one scoring of every model of a task: ptmlab's span evaluation in fp32 on the evaluation split."""

    def __init__(self, kind: str, data, tokenizer, max_length: int, max_eval: int | None, seed: int):
        from ptmlab.data.encode import encode_split
        from ptmlab.data.loaders import subset

        self.kind, self.spec = kind, data.spec
        split = subset(data.splits[EVAL_SPLIT[kind]], max_eval, seed)  # dev is already cut by max_eval
        self.examples = len(split)
        self.features = encode_split(tokenizer, split, max_length)

    def __call__(self, model) -> dict:
        from ptmlab.train.spans import evaluate_span

        metrics, _ = evaluate_span(model, self.features, self.spec, precision="fp32")
        if self.kind == "qa":  # ptmlab reports SQuAD's numbers in percent
            return {"f1": metrics["f1"] / 100, "exact_match": metrics["exact_match"] / 100}
        return {k: metrics[k] for k in ("entity_f1", "entity_precision", "entity_recall")}

    def record(self, model, seconds: float, examples: int) -> dict:
        metrics = {k: round(v, 4) for k, v in self(model).items()}
        return {"train_seconds": round(seconds, 3), "examples": examples, "accuracy": metrics[MAIN[self.kind]],
                "metrics": metrics}


# ---------------------------------------------------------------------------------------------------- the sides
def run_ptmlab(job: Job, max_eval: int | None, scorer: Scorer, out: Path) -> dict:
    from ptmlab.models.zoo import load_model
    from ptmlab.train.finetune import run_finetune

    s = run_finetune(finetune_config(job, max_eval, out))
    rec = scorer.record(load_model(str(out)), s["train_seconds"], round(s["train_examples"] * job.epochs))
    rec["run"] = str(out)
    return rec


def trainer_token_features(tokenizer, split, max_length: int) -> dict:
    """What a transformers user feeds the Trainer for NER: the words' sub-tokens (truncated) and per sub-token the
    word's tag on its first sub-token, -100 on the rest and on special tokens."""
    enc = tokenizer(split.tokens, is_split_into_words=True, truncation=True, max_length=max_length)
    labels = []
    for i, tags in enumerate(split.tags):
        previous, row = None, []
        for word in enc.word_ids(i):
            row.append(-100 if word is None or word == previous else tags[word])
            previous = word
        labels.append(row)
    return {**{k: enc[k] for k in enc.keys()}, "labels": labels}


def trainer_qa_features(tokenizer, split, max_length: int, doc_stride: int = DOC_STRIDE) -> dict:
    """What a transformers user feeds the Trainer for SQuAD: (question, context window) pairs, the context cut into
    windows of ``max_length`` tokens overlapping by ``doc_stride``; each window's start/end labels are the tokens
    holding the first answer's first and last characters, or 0 ([CLS]) when the window does not hold it all."""
    enc = tokenizer(split.questions, split.contexts, truncation="only_second", max_length=max_length,
                    stride=doc_stride, return_overflowing_tokens=True, return_offsets_mapping=True)
    starts, ends = [], []
    for f, offsets in enumerate(enc["offset_mapping"]):
        text, char_start = split.answers[enc["overflow_to_sample_mapping"][f]][0]
        char_end = char_start + len(text)
        context = [t for t, s in enumerate(enc.sequence_ids(f)) if s == 1]
        if offsets[context[0]][0] > char_start or offsets[context[-1]][1] < char_end:
            starts.append(0)
            ends.append(0)
            continue
        start = next(t for t in context if offsets[t][1] > char_start)
        end = next(t for t in reversed(context) if offsets[t][0] < char_end)
        starts.append(start)
        ends.append(max(start, end))
    keep = [k for k in enc.keys() if k not in ("offset_mapping", "overflow_to_sample_mapping")]
    return {**{k: enc[k] for k in keep}, "start_positions": starts, "end_positions": ends}


def run_trainer(job: Job, kind: str, train, spec, labels, scorer: Scorer, out: Path) -> dict:
    """transformers' Trainer on the same rows, model, seed, precision, batch, epochs, lr and schedule."""
    import torch
    from datasets import Dataset
    from transformers import (
        DataCollatorForTokenClassification,
        DataCollatorWithPadding,
        Trainer,
        TrainingArguments,
        set_seed,
    )

    from ptmlab.models.zoo import load_model, load_tokenizer

    tok = load_tokenizer(job.model)
    if kind == "ner":
        features, collator = trainer_token_features(tok, train, job.max_length), DataCollatorForTokenClassification(tok)
    else:
        features, collator = trainer_qa_features(tok, train, job.max_length), DataCollatorWithPadding(tok)
    ds = Dataset.from_dict(features)
    set_seed(job.seed)
    head = "token-classification" if kind == "ner" else "extractive-qa"
    model = load_model(job.model, num_labels=spec.num_labels, label_names=labels, task_head=head)
    targs = TrainingArguments(output_dir=str(out), per_device_train_batch_size=job.batch_size, learning_rate=job.lr,
                              num_train_epochs=job.epochs, warmup_steps=job.warmup, lr_scheduler_type="linear",
                              weight_decay=0.01, max_grad_norm=1.0, seed=job.seed, report_to=[], save_strategy="no",
                              eval_strategy="no", logging_steps=50, disable_tqdm=True,
                              bf16=job.precision == "bf16", use_cpu=not torch.cuda.is_available(),
                              dataloader_num_workers=0)
    trainer = Trainer(model=model, args=targs, train_dataset=ds, data_collator=collator)
    t0 = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - t0
    return scorer.record(trainer.model, seconds, round(len(ds) * job.epochs))


def run_student(job: Job, max_eval: int | None, student: str, teacher: dict, scorer: Scorer, out: Path) -> dict:
    """``ptmlab distill --teacher RUN --student STUDENT`` on the same rows, epochs, batch and length."""
    from ptmlab.distill.config import DistillConfig
    from ptmlab.distill.pipeline import run_distill
    from ptmlab.models.zoo import load_model

    cfg = DistillConfig(teacher=teacher["run"], student=student, task=job.task, max_train=job.max_train,
                        max_eval=max_eval, epochs=job.epochs, batch_size=job.batch_size, max_length=job.max_length,
                        seed=job.seed, precision=job.precision, doc_stride=DOC_STRIDE, output=str(out),
                        overwrite=True, test=False)
    s = run_distill(cfg)
    metrics = {k: round(v, 4) for k, v in scorer(load_model(str(out))).items()}
    main = MAIN[scorer.kind]
    return {"student": student, "metrics": metrics, "score": metrics[main], "teacher_score": teacher["accuracy"],
            "retained_pct": round(100 * metrics[main] / teacher["accuracy"], 2) if teacher["accuracy"] else None,
            "speedup_b32": s["speedup_b32"], "params": s["params"], "teacher_params": s["teacher_params"],
            "train_seconds": s["train_seconds"]}


# ---------------------------------------------------------------------------------------------------- one task
def bench_task(kind: str, job: Job, max_eval: int | None, args, tmp: Path) -> dict:
    from ptmlab.data.taskdata import label_names, load_task_data
    from ptmlab.models.zoo import load_tokenizer

    data = load_task_data(finetune_config(job, max_eval, tmp / "unused"))  # the rows every side trains on
    train, labels = data.splits["train"], label_names(data)
    scorer = Scorer(kind, data, load_tokenizer(job.model), job.max_length, max_eval, job.seed)
    sides = {"ptmlab": partial(run_ptmlab, job, max_eval, scorer)}
    if not args.skip_trainer:
        sides["trainer"] = partial(run_trainer, job, kind, train, data.spec, labels, scorer)
        if kind == "qa":  # ptmlab leads on NER, the Trainer on QA: neither side always runs first
            sides = {"trainer": sides["trainer"], "ptmlab": sides["ptmlab"]}
    print(f"{kind}: {job.describe()}; {len(train)} training rows, {scorer.examples} scored "
          f"({'testb' if kind == 'ner' else 'dev'}, {MAIN[kind]}: what each run's 'dev acc' shows); "
          f"{args.repeats} round(s) of {', '.join(sides)}", flush=True)
    records = alternate(sides, args.repeats, tmp / kind)
    teacher = dict(records["ptmlab"][0])  # round 0's run directory is the student's teacher
    summary = summarise(records)
    for side in summary.values():  # alternate's "accuracy" is the task's main score here
        side["score_median"], side["score_runs"] = side.pop("accuracy_median"), side.pop("accuracy_runs")
        for run in side["runs"]:
            run["score"] = run.pop("accuracy")
            run.pop("run", None)
    result = {"task": job.task, "job": job.describe(), "train_rows": len(train),
              "eval_split": "testb" if kind == "ner" else "dev", "eval_examples": scorer.examples,
              "main_metric": MAIN[kind], "sides": summary}
    if "trainer" in summary:
        ours, theirs = summary["ptmlab"], summary["trainer"]
        result["speedup_vs_trainer"] = round(ours["examples_per_second_median"] / theirs["examples_per_second_median"],
                                             3)
        result["score_delta_points"] = round(100 * (ours["score_median"] - theirs["score_median"]), 2)
    if not args.skip_distill:
        print(f"{kind}: distilling a {args.student} student from ptmlab's model", flush=True)
        result["distilled"] = run_student(job, max_eval, args.student, teacher, scorer, tmp / kind / "student")
    return result


def print_table(tasks: dict) -> None:
    print(f"{'task':5} {'side':9} {'ex/s':>9} {'score':>7}  notes")
    for kind, r in tasks.items():
        for name, s in r["sides"].items():
            note = f"{r['speedup_vs_trainer']:.2f}x the Trainer" if name == "ptmlab" and "speedup_vs_trainer" in r \
                else ""
            print(f"{kind:5} {name:9} {s['examples_per_second_median']:>9.1f} {s['score_median']:>7.4f}  {note}")
        if "distilled" in r:
            d = r["distilled"]
            print(f"{kind:5} {d['student']:9} {'':>9} {d['score']:>7.4f}  {d['retained_pct']}% of the teacher, "
                  f"{d['speedup_b32']}x faster at batch 32")


def write_result(args, device, precision: str, results: dict) -> dict:
    """Write the result file (atomically) with the tasks measured so far; with ``--append`` the tasks of an earlier
    run of the file that this run does not measure are kept. Returns every task's record written."""
    import torch

    out = Path(args.output)
    tasks = dict(results)
    if args.append and out.is_file():
        tasks = {**json.loads(out.read_text())["tasks"], **results}
    result = {
        "machine": machine_info(), "device": str(device), "threads": torch.get_num_threads(),
        "precision_all_sides": precision, "repeats": args.repeats, "load_average_end": load_average(),
        "scores_are": "fractions in [0, 1], every model scored by ptmlab's span evaluation in fp32: NER entity-level "
                      "micro F1 (seqeval) on CoNLL-2003 testb, QA SQuAD v1.1 official F1 and exact match on dev",
        "ratio_is": "median training examples/s (examples x epochs / training wall time; QA examples are windows) "
                    "of ptmlab over transformers' Trainer, same rows, model, precision, batch, epochs, lr and max "
                    "length, in one process; model loading, tokenisation and evaluation excluded",
        "tasks": tasks,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_text(json.dumps(result, indent=2) + "\n")
    tmp.replace(out)
    return tasks


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="minilm")
    p.add_argument("--tasks", default="ner,qa", help="comma-separated: ner (CoNLL-2003), qa (SQuAD v1.1)")
    p.add_argument("--max-train", default="ner=all,qa=8000",
                   help="training rows after a seed shuffle: N or all for every task, or ner=N,qa=M")
    p.add_argument("--max-eval", default="all", help="scored rows (NER testb, SQuAD dev): N, all, or ner=N,qa=M")
    p.add_argument("--epochs", type=float, default=1.0)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--max-length", default=None,
                   help="tokens per input (QA: per window): N or ner=N,qa=M (default: ptmlab's, 128 NER, 384 QA)")
    p.add_argument("--lr", type=float, default=5e-5)
    p.add_argument("--precision", default="auto", choices=["auto", "fp32", "bf16"])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--repeats", type=int, default=1, help="rounds of the two fine-tunings, in rotated order")
    p.add_argument("--skip-trainer", action="store_true", help="ptmlab's side (and the student) only")
    p.add_argument("--student", default="layers:3", help="the distilled student (ptmlab distill --student)")
    p.add_argument("--skip-distill", action="store_true", help="no distilled student")
    p.add_argument("--output", default=str(result_path("ner_qa")))
    p.add_argument("--append", action="store_true",
                   help="keep the other tasks of an existing --output file (a QA-only rerun beside an NER run)")
    p.add_argument("--runs", help="keep the run directories in this folder (default: a temporary one, removed)")
    args = p.parse_args()
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    if not tasks or set(tasks) - set(TASKS) or len(set(tasks)) != len(tasks):
        p.error(f"--tasks {args.tasks}: choose from {', '.join(TASKS)}")
    try:
        max_train = per_task(args.max_train, tasks, "--max-train")
        max_eval = per_task(args.max_eval, tasks, "--max-eval")
        lengths = {t: v or DEFAULT_LENGTH[t] for t, v in per_task(args.max_length, tasks, "--max-length").items()}
    except ValueError as e:
        p.error(str(e))
    if args.epochs <= 0 or args.batch_size < 1 or args.repeats < 1:
        p.error("--epochs, --batch-size and --repeats must be positive")
    import torch

    from ptmlab.core.errors import PtmlabError
    from ptmlab.train.evaluate import resolve_precision

    torch.set_num_threads(len(os.sched_getaffinity(0)))
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    precision = resolve_precision(args.precision, device)
    results = {}
    try:
        with contextlib.ExitStack() as stack:
            tmp = args.runs or stack.enter_context(tempfile.TemporaryDirectory())
            for kind in tasks:
                job = Job(model=args.model, task=TASKS[kind], max_train=max_train[kind], batch_size=args.batch_size,
                          max_length=lengths[kind], lr=args.lr, epochs=args.epochs, precision=precision,
                          seed=args.seed)
                results[kind] = bench_task(kind, job, max_eval[kind], args, Path(tmp))
                write_result(args, device, precision, results)  # after each task: a cut run keeps what it measured
    except PtmlabError as e:  # the shared data is missing, a window too short for a question...
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    results = write_result(args, device, precision, results)
    print_table(results)
    print(f"written: {args.output}")


if __name__ == "__main__":
    main()
