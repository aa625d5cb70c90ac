"""Benchmark: minilm fine-tuned as a sentence embedder on STS-B (``--task-kind embedding``, scored pairs, cosine
loss) against the untuned minilm and against sentence-transformers' own trainer on the same data and settings.

1. Data: STS-B training pairs (a seeded subset of --train-pairs, the same rows and order for both trainers; scores
   0..5 mapped to cosine targets score/5), STS-B dev pairs (--dev-pairs, seeded subset; all by default).
2. Untuned minilm: ``ptmlab evaluate minilm --task stsb --task-kind embedding`` (mean pooling, normalised).
3. ptmlab: ``ptmlab finetune --task stsb --task-kind embedding`` for --steps steps at --batch-size, --lr, linear
   schedule with 6% warm-up, weight decay 0.01, gradient clipping at 1, --seed.
4. sentence-transformers: ``SentenceTransformerTrainer`` with ``CosineSimilarityLoss`` on the same rows, steps,
   batch, learning rate, schedule, warm-up, weight decay, clipping and seed; its saved model scored by the same
   ``ptmlab evaluate``.
5. Export: ``ptmlab export`` of the ptmlab run, loaded by ``SentenceTransformer(DIR)``: the lowest cosine between its
   vectors and ptmlab's over every dev sentence (target: > 0.9999).

Targets: ptmlab's fine-tuned Spearman within 0.01 of sentence-transformers' (same data and settings) and not below
the untuned model by more than 0.01; the export's vectors identical (min cosine > 0.9999).

    python benchmarks/embeddings.py [--train-pairs 1000] [--dev-pairs 0] [--steps 60] [--batch-size 16]

Writes benchmarks/results/embeddings.MACHINE.json and prints a table.
"""

from __future__ import annotations

# isort: off
from _env import ROOT, machine_info, result_path  # first: offline defaults
# isort: on

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np


def st_trainer(model_path: str, s1: list[str], s2: list[str], target: list[float], args, out: Path) -> float:
    """sentence-transformers' own trainer with CosineSimilarityLoss; returns its training seconds."""
    from datasets import Dataset
    from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer
    from sentence_transformers.losses import CosineSimilarityLoss
    from sentence_transformers.training_args import BatchSamplers, SentenceTransformerTrainingArguments

    model = SentenceTransformer(model_path, device="cpu")
    model.max_seq_length = args.max_length
    data = Dataset.from_dict({"sentence1": s1, "sentence2": s2, "score": target})
    targs = SentenceTransformerTrainingArguments(
        output_dir=str(out / "st-work"), max_steps=args.steps, per_device_train_batch_size=args.batch_size,
        learning_rate=args.lr, warmup_ratio=0.06, weight_decay=0.01, max_grad_norm=1.0, lr_scheduler_type="linear",
        seed=args.seed, data_seed=args.seed, save_strategy="no", report_to=[], logging_steps=10, use_cpu=True,
        batch_sampler=BatchSamplers.BATCH_SAMPLER, dataloader_drop_last=False, disable_tqdm=True)
    trainer = SentenceTransformerTrainer(model=model, args=targs, train_dataset=data,
                                         loss=CosineSimilarityLoss(model))
    t = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - t
    model.save(str(out / "st-model"))
    return seconds


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="minilm", help="the encoder to fine-tune (zoo name or directory)")
    p.add_argument("--train-pairs", type=int, default=1000, help="STS-B training pairs (seeded subset, both sides)")
    p.add_argument("--dev-pairs", type=int, default=0, help="STS-B dev pairs (seeded subset; 0: all 1500)")
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--lr", type=float, default=2e-5)
    p.add_argument("--max-length", type=int, default=64)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--no-st", action="store_true", help="leave sentence-transformers' trainer out")
    p.add_argument("--work", default=None, help="keep the runs here (default: a temporary folder)")
    p.add_argument("--output", default=None, help="result JSON (default benchmarks/results/embeddings.MACHINE.json)")
    args = p.parse_args()

    import torch

    torch.set_num_threads(len(os.sched_getaffinity(0)))
    import ptmlab
    from ptmlab.data.taskdata import load_task_data
    from ptmlab.models.zoo import resolve
    from ptmlab.train.args import FinetuneConfig

    work = Path(args.work or tempfile.mkdtemp(prefix="embeddings-bench-"))
    began, load_start = time.perf_counter(), os.getloadavg()[0]
    data_opts = dict(task="stsb", task_kind="embedding", max_length=args.max_length, seed=args.seed,
                     max_eval=args.dev_pairs or None)
    cfg = FinetuneConfig(model=args.model, max_train=args.train_pairs, **data_opts)
    data = load_task_data(cfg)  # the rows both trainers see, in ptmlab's order
    train, dev = data.splits["train"], data.splits["dev"]
    print(f"STS-B: {len(train)} training pairs, {len(dev)} dev pairs; {args.steps} steps at batch {args.batch_size}",
          flush=True)

    base = ptmlab.evaluate(args.model, **data_opts)["metrics"]
    print(f"untuned {args.model}: Spearman {base['spearman']:.4f}", flush=True)

    run = ptmlab.finetune(args.model, **data_opts, max_train=args.train_pairs, max_steps=args.steps,
                          batch_size=args.batch_size, lr=args.lr, eval_steps=args.steps, keep_best=False,
                          output=str(work / "ptmlab"), overwrite=True)
    ours = run.summary
    print(f"ptmlab: Spearman {ours['metrics']['spearman']:.4f} ({ours['train_seconds']:.1f}s training)", flush=True)

    st = None
    if not args.no_st:
        torch.manual_seed(args.seed)
        st_seconds = st_trainer(resolve(args.model)[0], train.anchor, train.positive, train.score, args, work)
        st_metrics = ptmlab.evaluate(str(work / "st-model"), **data_opts)["metrics"]
        st = {"metrics": st_metrics, "train_seconds": round(st_seconds, 2)}
        print(f"sentence-transformers: Spearman {st_metrics['spearman']:.4f} ({st_seconds:.1f}s training)", flush=True)

    from sentence_transformers import SentenceTransformer

    from ptmlab.export.embedding import export_embedding
    from ptmlab.export.run import ExportConfig

    export_embedding(ExportConfig(model=str(run.path), output=str(work / "export")), str(run.path),
                     work / "export")
    sentences = list(dict.fromkeys([*dev.anchor, *dev.positive]))
    ref = run.embed(sentences, max_length=args.max_length)
    st_model = SentenceTransformer(str(work / "export"), device="cpu")
    theirs = st_model.encode(sentences, batch_size=64, convert_to_numpy=True)
    cos = (ref * theirs).sum(1) / (np.linalg.norm(ref, axis=1) * np.linalg.norm(theirs, axis=1))
    parity = {"sentences": len(sentences), "min_cosine": float(cos.min()),
              "max_abs_diff": float(np.abs(ref - theirs).max())}
    print(f"export in sentence-transformers: min cosine {parity['min_cosine']:.6f} over {len(sentences)} sentences",
          flush=True)

    tuned = ours["metrics"]["spearman"]
    targets = {
        "not_below_untuned": {"value": round(tuned - base["spearman"], 4), "target": ">= -0.01",
                              "met": tuned >= base["spearman"] - 0.01},
        "export_identical": {"value": round(parity["min_cosine"], 6), "target": "> 0.9999",
                             "met": parity["min_cosine"] > 0.9999},
    }
    if st is not None:
        gap = tuned - st["metrics"]["spearman"]
        targets["matches_sentence_transformers"] = {"value": round(gap, 4), "target": "|gap| <= 0.01",
                                                    "met": abs(gap) <= 0.01}
    result = {
        "benchmark": "embeddings", "machine": machine_info(), "model": args.model,
        "settings": {"train_pairs": len(train), "dev_pairs": len(dev), "steps": args.steps,
                     "batch_size": args.batch_size, "lr": args.lr, "max_length": args.max_length, "seed": args.seed,
                     "loss": "cosine MSE (CosineSimilarityLoss), targets score/5", "pooling": "mean, normalised"},
        "untuned": base, "ptmlab": {"metrics": ours["metrics"], "train_seconds": ours["train_seconds"]},
        "sentence_transformers": st if st is not None else {"skipped": "--no-st"},
        "export_parity": parity, "targets": targets, "seconds": round(time.perf_counter() - began, 1),
        "load_average_1min": {"start": round(load_start, 2), "end": round(os.getloadavg()[0], 2)},
    }
    out = Path(args.output) if args.output else result_path("embeddings")
    out.parent.mkdir(parents=True, exist_ok=True)
    from ptmlab.core.io import atomic_write_json

    atomic_write_json(out, result)

    rows = [(f"{args.model} untuned", base, None), ("ptmlab finetune --task-kind embedding", ours["metrics"],
                                                   ours["train_seconds"])]
    if st is not None:
        rows.append(("sentence-transformers trainer", st["metrics"], st["train_seconds"]))
    print("\n| side | STS-B dev Spearman | Pearson | training s |\n|---|---|---|---|")
    for name, m, secs in rows:
        print(f"| {name} | {m['spearman']:.4f} | {m['pearson']:.4f} | {'-' if secs is None else f'{secs:.1f}'} |")
    print(f"\nexport in sentence-transformers: min cosine {parity['min_cosine']:.6f} over {parity['sentences']} "
          f"dev sentences")
    for k, t in targets.items():
        print(f"target {k}: {t['value']} ({t['target']}) {'met' if t['met'] else 'MISSED'}")
    print(f"wrote {out.relative_to(ROOT) if out.resolve().is_relative_to(ROOT) else out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
