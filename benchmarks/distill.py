"""Benchmark: distil a minilm teacher fine-tuned on SST-2 into a 3-layer student (DistilBERT-style, every other
layer), in one run, and measure what the student keeps and how much faster it is.

Teacher: minilm fine-tuned on the 4,000-row SST-2 subset of the foundation benchmark (1 epoch, lr 5e-5, batch 32,
max length 64, seed 0), or an existing run passed with --teacher. Student: layers:3 with --losses (default
soft_ce,hidden_mse), --epochs 3, lr 1e-4 on the same rows; optionally a second, shrunk student (--shrink SPEC).
Latency: batch-1 and batch-32 CPU forward passes on SST-2 dev sentences (max length 64), teacher and student
measured alternately in the same process. Writes benchmarks/results/distill.MACHINE.json and prints a table.

    python benchmarks/distill.py [--teacher RUN] [--epochs 3] [--shrink shrink:layers=4,hidden=192,heads=12,ffn=768]
"""

from __future__ import annotations

# isort: off
from _env import machine_info, portable, result_path  # first: offline defaults
# isort: on

import argparse
import tempfile
from pathlib import Path


def teacher_run(args, work: Path) -> str:
    if args.teacher:
        return args.teacher
    from ptmlab.train.args import FinetuneConfig
    from ptmlab.train.finetune import run_finetune

    out = work / "teacher"
    run_finetune(FinetuneConfig(model="minilm", task="sst2", glue_dir=args.glue_dir, max_train=args.max_train,
                                epochs=1, lr=5e-5, batch_size=32, max_length=64, seed=0, output=str(out), test=False))
    return str(out)


def student_run(args, teacher: str, student: str, out: Path) -> dict:
    from ptmlab.distill.config import DistillConfig
    from ptmlab.distill.pipeline import run_distill

    return run_distill(DistillConfig(teacher=teacher, student=student, losses=args.losses.split(","), task="sst2",
                                     glue_dir=args.glue_dir, max_train=args.max_train, epochs=args.epochs, lr=args.lr,
                                     batch_size=32, max_length=64, seed=0, output=str(out), test=False))


def latencies(runs: dict[str, str], texts: list[str], rounds: int = 3) -> dict[str, dict[str, float]]:
    """Median batch-1 and batch-32 latency (ms) per model, alternating models so load shifts hit all alike."""
    import statistics

    from ptmlab.models.latency import measure_latency
    from ptmlab.models.zoo import load_model, load_tokenizer

    models = {k: (load_model(v), load_tokenizer(v)) for k, v in runs.items()}
    samples: dict[str, dict[str, list[float]]] = {k: {"b1": [], "b32": []} for k in runs}
    for _ in range(rounds):
        for k, (m, tok) in models.items():
            samples[k]["b1"].append(measure_latency(m, tok, texts, 1, repeats=10))
            samples[k]["b32"].append(measure_latency(m, tok, texts, 32, repeats=3))
    return {k: {b: statistics.median(v) for b, v in s.items()} for k, s in samples.items()}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--glue-dir", default=None)
    p.add_argument("--teacher", default=None, help="reuse a fine-tuned teacher run instead of training one")
    p.add_argument("--max-train", type=int, default=4000)
    p.add_argument("--epochs", type=float, default=3.0)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--losses", default="soft_ce,hidden_mse")
    p.add_argument("--student", default="layers:3")
    p.add_argument("--shrink", default=None, help="also distil this shrunk student, e.g. shrink:layers=4,hidden=192")
    p.add_argument("--work", default=None, help="keep the runs here (default: a temporary folder)")
    p.add_argument("--tinybert", default=None, metavar="SPEC",
                   help="instead: TinyBERT's claim with this small student (e.g. shrink:layers=4,hidden=128,heads=4,"
                        "ffn=512), distilled on --tinybert-train rows, then vocabulary-pruned; writes "
                        "distill_tinybert.json")
    p.add_argument("--tinybert-train", type=int, default=0, help="transfer-set rows for --tinybert (0: all)")
    p.add_argument("--tinybert-lr", type=float, default=1e-3)
    p.add_argument("--tinybert-losses", default="soft_ce")
    p.add_argument("--tinybert-out", default=None, help="result JSON (default: distill_tinybert.MACHINE.json)")
    args = p.parse_args()
    from ptmlab.core.io import atomic_write_json
    from ptmlab.core.seed import configure_threads
    from ptmlab.data.loaders import load_task

    configure_threads()
    work = Path(args.work or tempfile.mkdtemp(prefix="ptmlab-bench-distill-"))
    teacher = teacher_run(args, work)
    if args.tinybert:
        return tinybert(args, teacher, work)
    students = {args.student: student_run(args, teacher, args.student, work / "student")}
    if args.shrink:
        students[args.shrink] = student_run(args, teacher, args.shrink, work / "shrunk")
    texts = load_task("sst2", args.glue_dir).splits["dev"].text[:64]
    runs = {"teacher": teacher, args.student: str(work / "student")}
    if args.shrink:
        runs[args.shrink] = str(work / "shrunk")
    lat = latencies(runs, texts)
    rows = []
    for name, s in students.items():
        rows.append({"student": name, "losses": args.losses, "teacher_acc": s["teacher_metrics"]["accuracy"],
                     "student_acc": s["metrics"]["accuracy"], "retained_pct": s["retained_pct"],
                     "agreement": s["agreement_with_teacher"], "teacher_params": s["teacher_params"],
                     "student_params": s["params"], "param_ratio": round(s["teacher_params"] / s["params"], 2),
                     "speedup_b1": round(lat["teacher"]["b1"] / lat[name]["b1"], 2),
                     "speedup_b32": round(lat["teacher"]["b32"] / lat[name]["b32"], 2),
                     "latency_ms": {"teacher": lat["teacher"], "student": lat[name]},
                     "train_seconds": s["train_seconds"]})
    result = {"benchmark": "distill", "max_train": args.max_train, "epochs": args.epochs, "lr": args.lr,
              "teacher": portable(teacher), "machine": machine_info(), "targets": {"retained_pct": 99.0,
                                                                                   "speedup_b32_layers3": 1.95,
                                              "tinybert": "7.5x fewer params, >=96.8% kept, >=9x faster"},
              "rows": rows}
    atomic_write_json(result_path("distill"), result)
    cols = ["student", "teacher_acc", "student_acc", "retained_pct", "agreement", "param_ratio", "speedup_b1",
            "speedup_b32"]
    print("  ".join(f"{c:>14}" for c in cols))
    for r in rows:
        print("  ".join(f"{r[c]:>14.4f}" if isinstance(r[c], float) else f"{r[c]!s:>14}" for c in cols))
    return 0


def tinybert(args, teacher: str, work: Path) -> int:
    """TinyBERT's claim: >= 7.5x fewer parameters, >= 96.8% of the teacher kept, >= 9x faster. The student is a
    shrunk config distilled on the SST-2 training sentences the teacher labels (the transfer set), then its
    vocabulary is cut to the tokens SST-2 uses (embeddings are most of a small model's parameters)."""
    from ptmlab.compress.pipeline import CompressConfig, run_compress
    from ptmlab.core.io import atomic_write_json
    from ptmlab.data.loaders import load_task
    from ptmlab.distill.config import DistillConfig
    from ptmlab.distill.pipeline import run_distill

    s = run_distill(DistillConfig(teacher=teacher, student=args.tinybert, losses=args.tinybert_losses.split(","),
                                  task="sst2", glue_dir=args.glue_dir, max_train=args.tinybert_train or None,
                                  epochs=args.epochs, lr=args.tinybert_lr, batch_size=32, max_length=64, seed=0,
                                  output=str(work / "tinybert"), overwrite=True, test=False))
    rows = run_compress(CompressConfig(model=str(work / "tinybert"), task="sst2", glue_dir=args.glue_dir,
                                       steps=["vocab"], max_length=64, output=str(work / "tinybert-vocab"),
                                       overwrite=True, test=False))
    final = rows[-1]
    texts = load_task("sst2", args.glue_dir).splits["dev"].text[:64]
    lat = latencies({"teacher": teacher, "student": str(work / "tinybert-vocab")}, texts)
    t_acc = s["teacher_metrics"]["accuracy"]
    row = {"student": args.tinybert, "losses": args.tinybert_losses, "transfer_rows": s["train_examples"],
           "epochs": args.epochs, "lr": args.tinybert_lr, "teacher_acc": t_acc,
           "student_acc_before_vocab": s["metrics"]["accuracy"], "student_acc": final["dev"],
           "retained_pct": round(100 * final["dev"] / t_acc, 2), "agreement": s["agreement_with_teacher"],
           "teacher_params": s["teacher_params"], "student_params_before_vocab": s["params"],
           "student_params": final["params"], "param_ratio": round(s["teacher_params"] / final["params"], 2),
           "speedup_b1": round(lat["teacher"]["b1"] / lat["student"]["b1"], 2),
           "speedup_b32": round(lat["teacher"]["b32"] / lat["student"]["b32"], 2), "latency_ms": lat,
           "train_seconds": s["train_seconds"]}
    targets = {"param_ratio": 7.5, "retained_pct": 96.8, "speedup_b32": 9.0}
    row["meets"] = {k: row[k] >= v for k, v in targets.items()}
    atomic_write_json(args.tinybert_out or result_path("distill_tinybert"),
                      {"benchmark": "distill-tinybert", "teacher": portable(teacher), "machine": machine_info(),
                       "targets": targets, "row": row})
    for k in ("student", "teacher_acc", "student_acc_before_vocab", "student_acc", "retained_pct", "agreement",
              "teacher_params", "student_params", "param_ratio", "speedup_b1", "speedup_b32", "meets"):
        print(f"{k:>26}: {row[k]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
