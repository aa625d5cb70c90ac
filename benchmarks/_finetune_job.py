"""The fine-tuning job shared by the speed benchmarks, and its sides: ptmlab, transformers' Trainer, a bare loop.

Fairness rules every benchmark built on this follows:
- every side trains the same model on the same rows with the same batch size, max length, learning rate, schedule,
  epochs and precision (fp32 or bf16 autocast on all sides alike);
- every side's final model is scored by the same code (``dev_accuracy``: ptmlab's batched evaluation in fp32, in
  the dev set's own order), so no side's prediction collection can differ from another's;
- sides run alternately, ``repeats`` times in rotated order, and each record carries the machine's load average
  before and after it; medians and spreads are reported. With ``isolate`` (``--isolate`` in the scripts) every run
  starts in a fresh process of its own, so no side inherits another's process state (the C allocator's settings
  and heap, caches, threads);
- what is timed is the training loop only (model loading, tokenisation and evaluation excluded on every side).
"""

from __future__ import annotations

import dataclasses
import os
import statistics
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Job:
    model: str = "minilm"
    task: str = "sst2"
    glue_dir: str | None = None
    max_train: int | None = 4000  # None: the full training set
    batch_size: int = 32
    max_length: int = 64
    lr: float = 5e-5
    epochs: float = 1.0
    warmup: float = 0.06
    precision: str = "fp32"  # the same on every side
    seed: int = 0

    def describe(self) -> str:
        rows = "full" if not self.max_train else f"{self.max_train} rows (seed-{self.seed} shuffle)"
        return (f"{self.model}, {self.task} {rows}, max_length {self.max_length}, batch {self.batch_size}, "
                f"lr {self.lr:g}, {self.epochs:g} epoch, linear {self.warmup:.0%} warm-up, {self.precision}")


def load_average() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def _data(job: Job):
    from ptmlab.data.loaders import load_task, subset

    data = load_task(job.task, job.glue_dir)
    return subset(data.splits["train"], job.max_train, job.seed), data.splits["dev"], data.spec


def dev_accuracy(model, job: Job) -> float:
    """The one evaluation of every side: ptmlab's batched evaluation in fp32 on the full dev set, in order."""
    from ptmlab.data.encode import encode_split
    from ptmlab.models.zoo import load_tokenizer
    from ptmlab.train.evaluate import evaluate

    _, dev, spec = _data(job)
    tok = load_tokenizer(job.model)
    metrics, _ = evaluate(model, encode_split(tok, dev, job.max_length), spec, tok.pad_token_id or 0,
                          precision="fp32")
    return float(metrics["accuracy"])


def run_ptmlab(job: Job, out: Path, compile_mode: str = "off", group_by_length: bool = True,
               first_token_only: bool = True) -> dict:
    from ptmlab.models.zoo import load_model
    from ptmlab.train.args import FinetuneConfig
    from ptmlab.train.finetune import run_finetune

    cfg = FinetuneConfig(model=job.model, task=job.task, glue_dir=job.glue_dir, max_train=job.max_train,
                         epochs=job.epochs, lr=job.lr, batch_size=job.batch_size, max_length=job.max_length,
                         seed=job.seed, warmup=job.warmup, schedule="linear", precision=job.precision,
                         compile=compile_mode, group_by_length=group_by_length, first_token_only=first_token_only,
                         output=str(out), overwrite=True, test=False)
    s = run_finetune(cfg)
    model = load_model(str(out))
    return {"train_seconds": s["train_seconds"], "examples": s["train_examples"], "tokens": s.get("train_tokens"),
            "accuracy": dev_accuracy(model, job)}


def run_trainer(job: Job, out: Path, sampling: str = "random") -> dict:
    """transformers' Trainer with its defaults for this job (DataCollatorWithPadding, fused AdamW where the
    Trainer picks it, no evaluation or saving during training)."""
    import torch
    from datasets import Dataset
    from transformers import DataCollatorWithPadding, Trainer, TrainingArguments, set_seed

    from ptmlab.models.zoo import load_model, load_tokenizer

    train, _, spec = _data(job)
    tok = load_tokenizer(job.model)
    enc = tok(train.text, truncation=True, max_length=job.max_length)
    ds = Dataset.from_dict({**{k: enc[k] for k in enc.keys()}, "labels": list(train.label)})
    set_seed(job.seed)
    model = load_model(job.model, num_labels=spec.num_labels)  # the same stock transformers class on every side
    # transformers >= 5 names the sampler; older releases (a GPU machine's own install) had only group_by_length
    names = {f.name for f in dataclasses.fields(TrainingArguments)}
    sampler = ({"train_sampling_strategy": sampling} if "train_sampling_strategy" in names
               else {"group_by_length": sampling == "group_by_length"})
    targs = TrainingArguments(output_dir=str(out), per_device_train_batch_size=job.batch_size,
                              learning_rate=job.lr, num_train_epochs=job.epochs, warmup_steps=job.warmup,
                              lr_scheduler_type="linear", weight_decay=0.01, seed=job.seed, report_to=[],
                              save_strategy="no", eval_strategy="no", logging_steps=50, disable_tqdm=True,
                              bf16=job.precision == "bf16", use_cpu=not torch.cuda.is_available(),
                              dataloader_num_workers=0, **sampler)
    trainer = Trainer(model=model, args=targs, train_dataset=ds, data_collator=DataCollatorWithPadding(tok))
    t0 = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - t0
    return {"train_seconds": round(seconds, 3), "examples": len(train), "accuracy": dev_accuracy(trainer.model, job)}


def run_bare(job: Job, compile_mode: str = "off") -> dict:
    """The floor: a plain PyTorch loop (every batch padded to max_length, fused AdamW, linear schedule), the
    reference for what the hardware gives without any framework."""
    import torch
    import torch.nn.functional as F
    from transformers import get_linear_schedule_with_warmup, set_seed

    from ptmlab.models.zoo import load_model, load_tokenizer

    train, _, spec = _data(job)
    tok = load_tokenizer(job.model)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    enc = tok(train.text, truncation=True, max_length=job.max_length, padding="max_length", return_tensors="pt")
    labels = torch.tensor(list(train.label))
    set_seed(job.seed)
    model = load_model(job.model, num_labels=spec.num_labels).to(device)
    if compile_mode != "off":
        model.compile(mode=None if compile_mode == "default" else compile_mode)
    opt = torch.optim.AdamW(model.parameters(), lr=job.lr, weight_decay=0.01, fused=True)
    n = len(train)
    steps = int(job.epochs * -(-n // job.batch_size))
    sched = get_linear_schedule_with_warmup(opt, int(job.warmup * steps), steps)
    order = torch.randperm(n, generator=torch.Generator().manual_seed(job.seed))
    model.train()
    seen = 0
    t0 = time.perf_counter()
    for step in range(steps):
        idx = order[(step * job.batch_size) % n:][:job.batch_size]
        seen += len(idx)
        batch = {k: v[idx].to(device, non_blocking=True) for k, v in enc.items()}
        y = labels[idx].to(device, non_blocking=True)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=job.precision == "bf16"):
            loss = F.cross_entropy(model(**batch).logits.float(), y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
    if device.type == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    return {"train_seconds": round(seconds, 3), "examples": seen,
            "accuracy": dev_accuracy(model, job)}


def run_trainer_host_memory(job: Job, out: Path, sampling: str = "group_by_length") -> dict:
    """The Trainer inside ptmlab's ``reuse_host_memory`` (what ptmlab's loop does on a CPU): splits the ratio into
    what the allocator setting brings and what the loop brings."""
    from ptmlab.core.host_memory import reuse_host_memory

    with reuse_host_memory():
        return run_trainer(job, out, sampling)


def in_fresh_process(name: str, out: Path) -> dict:
    """Run side ``name`` of the calling script in a new Python process (the script's own command line plus
    ``--run-side NAME --side-dir OUT``, which must write the side's record to ``OUT.json``)."""
    import json
    import subprocess
    import sys

    subprocess.run([sys.executable, sys.argv[0], *sys.argv[1:], "--run-side", name, "--side-dir", str(out)],
                   check=True)
    return json.loads(out.with_suffix(".json").read_text())


def run_one_side(sides: dict, name: str, out: str) -> None:
    """The child's half of ``in_fresh_process``: run one side, write its record next to its directory."""
    import json

    out_dir = Path(out)
    rec = sides[name](out_dir)
    out_dir.with_suffix(".json").write_text(json.dumps(rec))


def alternate(sides: dict, repeats: int, tmp: Path, isolate: bool = False,
              progress=None, keep_going: bool = False) -> dict[str, list[dict]]:
    """Run every side ``repeats`` times, rotating the order each round; each record carries the load average.
    ``isolate``: each run in a fresh process (``in_fresh_process``); ``progress(records)`` after every run (a script
    with a time limit writes what it has); ``keep_going``: a side that raises is recorded as ``{"error": ...}`` and
    the others still run (a one-shot run on a machine held for a limited time)."""
    names = list(sides)
    records: dict[str, list[dict]] = {n: [] for n in names}
    for r in range(repeats):
        for name in names[r % len(names):] + names[:r % len(names)]:
            before = load_average()
            out = tmp / f"{name}-{r}"
            try:
                rec = in_fresh_process(name, out) if isolate else sides[name](out)
            except Exception as e:
                if not keep_going:
                    raise
                rec = {"error": f"{type(e).__name__}: {str(e)[:500]}", "round": r}
                print(f"  {name:28} round {r}: failed: {rec['error']}", flush=True)
            else:
                rec["examples_per_second"] = round(rec["examples"] / rec["train_seconds"], 2)
                rec.update(load_before=before, load_after=load_average(), round=r)
                print(f"  {name:28} round {r}: {rec['examples_per_second']:8.1f} ex/s, dev acc "
                      f"{rec['accuracy']:.4f} (load {before} -> {rec['load_after']})", flush=True)
            records[name].append(rec)
            if progress is not None:
                progress(records)
    return records


def summarise(records: dict[str, list[dict]]) -> dict[str, dict]:
    """Median, spread and accuracy per side over its successful runs (sides with no run yet are left out; a side
    whose every run failed has only its ``errors``)."""
    out = {}
    for name, all_recs in records.items():
        recs = [r for r in all_recs if "error" not in r]
        entry = {"errors": [r["error"] for r in all_recs if "error" in r]} if len(recs) < len(all_recs) else {}
        if recs:
            eps = [r["examples_per_second"] for r in recs]
            acc = [r["accuracy"] for r in recs]
            entry.update(examples_per_second_median=round(statistics.median(eps), 2), examples_per_second_min=min(eps),
                         examples_per_second_max=max(eps), accuracy_median=round(statistics.median(acc), 4),
                         accuracy_runs=acc, runs=recs)
        if entry:
            out[name] = entry
    return out


def print_summary(summary: dict[str, dict]) -> None:
    w = max(20, *(len(n) + 1 for n in summary))
    print(f"{'side':{w}} {'ex/s median':>12} {'[min, max]':>20} {'dev acc':>8}")
    for name, s in summary.items():
        if "examples_per_second_median" not in s:
            print(f"{name:{w}} failed: {s['errors'][0]}")
            continue
        spread = f"[{s['examples_per_second_min']:.1f}, {s['examples_per_second_max']:.1f}]"
        print(f"{name:{w}} {s['examples_per_second_median']:>12.1f} {spread:>20} {s['accuracy_median']:>8.4f}")
