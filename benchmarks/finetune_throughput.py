"""Benchmark: the same fine-tuning job with ptmlab and with transformers' Trainer, side by side in one run.

Job: minilm on SST-2, the first 4,000 training rows after a seed-0 shuffle, max length 64, batch 32, lr 5e-5,
1 epoch, linear schedule with 6% warm-up; dev accuracy on the full SST-2 dev set (872).
Rows: ptmlab (defaults: length-grouped batches, bf16 autocast where the CPU supports it), Trainer with its
default random sampler, Trainer with ``train_sampling_strategy="group_by_length"``, and, for reference, Trainer
grouped with ``bf16=True``. Writes benchmarks/results/finetune_throughput.json and prints a table.

    python benchmarks/finetune_throughput.py [--glue-dir ../shared/data/glue] [--max-train 4000]
"""

from __future__ import annotations

# isort: off
from _env import ROOT  # first: offline defaults before anything imports transformers
# isort: on

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path


def ptmlab_run(args, out: Path) -> dict:
    from ptmlab.train.args import FinetuneConfig
    from ptmlab.train.finetune import run_finetune

    cfg = FinetuneConfig(model="minilm", task="sst2", glue_dir=args.glue_dir, max_train=args.max_train,
                         epochs=1, lr=5e-5, batch_size=32, max_length=64, seed=0, warmup=0.06, schedule="linear",
                         output=str(out), test=False)
    s = run_finetune(cfg)
    return {"train_seconds": s["train_seconds"], "examples": s["train_examples"],
            "accuracy": s["metrics"]["accuracy"], "precision": s["precision"]}


def trainer_run(args, sampling: str, bf16: bool, out: Path) -> dict:
    import numpy as np
    import torch
    from datasets import Dataset
    from transformers import (
        AutoModelForSequenceClassification,
        AutoTokenizer,
        DataCollatorWithPadding,
        Trainer,
        TrainingArguments,
        set_seed,
    )

    from ptmlab.data.loaders import load_task, subset
    from ptmlab.models.zoo import resolve

    data = load_task("sst2", args.glue_dir)
    train = subset(data.splits["train"], args.max_train, 0)
    dev = data.splits["dev"]
    path, _ = resolve("minilm")
    tok = AutoTokenizer.from_pretrained(path)

    def to_ds(split):
        enc = tok(split.text, truncation=True, max_length=64)
        return Dataset.from_dict({"input_ids": enc["input_ids"], "token_type_ids": enc["token_type_ids"],
                                  "attention_mask": enc["attention_mask"], "labels": split.label})

    set_seed(0)
    model = AutoModelForSequenceClassification.from_pretrained(path, num_labels=2)
    targs = TrainingArguments(output_dir=str(out), per_device_train_batch_size=32, per_device_eval_batch_size=128,
                              learning_rate=5e-5, num_train_epochs=1, warmup_steps=0.06, lr_scheduler_type="linear",
                              weight_decay=0.01, seed=0, report_to=[], save_strategy="no", logging_steps=50,
                              disable_tqdm=True, bf16=bf16, use_cpu=not torch.cuda.is_available(),
                              train_sampling_strategy=sampling, dataloader_num_workers=0)
    trainer = Trainer(model=model, args=targs, train_dataset=to_ds(train), eval_dataset=to_ds(dev),
                      data_collator=DataCollatorWithPadding(tok))
    t0 = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - t0
    pred = trainer.predict(to_ds(dev))
    acc = float((np.argmax(pred.predictions, -1) == np.array(dev.label)).mean())
    return {"train_seconds": round(seconds, 3), "examples": len(train), "accuracy": acc,
            "precision": "bf16" if bf16 else "fp32"}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--glue-dir", default=str(ROOT.parent / "shared/data/glue"))
    p.add_argument("--max-train", type=int, default=4000)
    p.add_argument("--skip-bf16-trainer", action="store_true")
    args = p.parse_args()
    if not Path(args.glue_dir, "SST-2", "train.tsv").is_file():
        sys.exit(f"SST-2 not found under {args.glue_dir}: pass --glue-dir")
    import torch

    torch.set_num_threads(len(os.sched_getaffinity(0)))
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        # ptmlab runs first and last, and the two are averaged, so load drifting on a shared machine
        # affects both sides alike
        first = ptmlab_run(args, tmp / "ptmlab1")
        rows["trainer_random"] = trainer_run(args, "random", False, tmp / "tr")
        rows["trainer_grouped"] = trainer_run(args, "group_by_length", False, tmp / "tg")
        if not args.skip_bf16_trainer:
            rows["trainer_grouped_bf16"] = trainer_run(args, "group_by_length", True, tmp / "tb")
        last = ptmlab_run(args, tmp / "ptmlab2")
        rows["ptmlab"] = {**last, "train_seconds": round((first["train_seconds"] + last["train_seconds"]) / 2, 3),
                          "train_seconds_runs": [first["train_seconds"], last["train_seconds"]],
                          "accuracy_runs": [first["accuracy"], last["accuracy"]]}
    for r in rows.values():
        r["examples_per_second"] = round(r["examples"] / r["train_seconds"], 2)
    ours = rows["ptmlab"]["examples_per_second"]
    faster = max(rows["trainer_random"]["examples_per_second"], rows["trainer_grouped"]["examples_per_second"])
    best_key = max(("trainer_random", "trainer_grouped"), key=lambda k: rows[k]["examples_per_second"])
    result = {
        "job": "minilm, SST-2 4000 rows (seed-0 shuffle), max_length 64, batch 32, lr 5e-5, 1 epoch, linear 6% warmup",
        "rows": rows,
        "speedup_vs_faster_trainer": round(ours / faster, 3),
        "faster_trainer": best_key,
        "accuracy_delta_points": round(100 * (rows["ptmlab"]["accuracy"] - rows[best_key]["accuracy"]), 2),
        "targets": {"speedup": 1.2, "accuracy_delta_points": -0.5},
        "threads": torch.get_num_threads(),
    }
    if "trainer_grouped_bf16" in rows:
        result["speedup_vs_trainer_grouped_bf16"] = round(ours / rows["trainer_grouped_bf16"]["examples_per_second"], 3)
    out = ROOT / "benchmarks" / "results" / "finetune_throughput.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"{'run':22} {'precision':9} {'ex/s':>8} {'train s':>8} {'dev acc':>8}")
    for k, r in rows.items():
        print(f"{k:22} {r['precision']:9} {r['examples_per_second']:>8.1f} {r['train_seconds']:>8.1f} "
              f"{r['accuracy']:>8.4f}")
    print(f"ptmlab / {best_key}: {result['speedup_vs_faster_trainer']:.2f}x (target >= 1.2x); accuracy delta "
          f"{result['accuracy_delta_points']:+.2f} points (target >= -0.5)")
    print(f"written: {out}")


if __name__ == "__main__":
    main()
