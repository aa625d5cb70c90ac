"""Benchmark: a static-embedding student of minilm against minilm itself (and against model2vec's distillation of
the same model, when the ``model2vec`` package is installed), side by side in one run.

1. Static student: ``ptmlab.distill.static.distill_static`` (every vocabulary token through the model alone, mean
   of its outputs, PCA to --dim, SIF/Zipf weights), then fine-tuned on the SST-2 training rows (--train-rows, a
   seeded subset, the same rows for every side) with plain labels through ``ptmlab finetune`` (--epochs, --lr, batch
   32). With --teacher RUN (a fine-tuned teacher), also ``ptmlab distill --student static`` on the same rows.
2. SST-2 dev accuracy: minilm's frozen mean-pooled, normalised embeddings + logistic regression (standardised
   features) is the reference; the static student's table (frozen) and model2vec's vectors get the same logistic
   regression; the fine-tuned static student answers with its own head.
3. STS-B dev Spearman: cosine of the mean-pooled normalised vectors (minilm, the static table as distilled,
   model2vec).
4. Speed: sentences/s at batch 32 over the SST-2 dev sentences, tokenization included, every side alternated in
   rotation (--repeats passes each, the median kept): minilm's forward pass + mean pooling; the static student as
   ``ptmlab predict`` and ``serve`` run it (padded batch, the model's forward, logits) and through
   ``static_logits`` (no padding, one embedding_bag); model2vec's ``encode``.

Targets: the static student (as served) at least 50x minilm's sentences/s; the fine-tuned static student at least
85% of the minilm reference's SST-2 accuracy; no worse than model2vec on STS-B and, like for like (frozen vectors +
the same logistic regression), on SST-2.

    python benchmarks/static_student.py [--model minilm] [--train-rows 8000] [--dim 256] [--no-model2vec]

Writes benchmarks/results/static_student.MACHINE.json and prints a table.
"""

from __future__ import annotations

# isort: off
from _env import ROOT, machine_info, portable, result_path  # first: offline defaults
# isort: on

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np


def sst2_data(args):
    """The fine-tuning config and the SST-2 rows it trains on (``load_task_data``'s seeded subset), dev whole."""
    from ptmlab.data.taskdata import load_task_data
    from ptmlab.train.args import FinetuneConfig

    cfg = FinetuneConfig(model=args.model, task="sst2", glue_dir=args.glue_dir, max_train=args.train_rows,
                         max_eval=args.max_dev, epochs=args.epochs, lr=args.lr, batch_size=32, max_length=128,
                         seed=0, precision="fp32", test=False)
    return cfg, load_task_data(cfg)


def stsb_dev(glue_dir: str | None, limit: int | None):
    from ptmlab.data.loaders import load_task

    dev = load_task("stsb", glue_dir=glue_dir).splits["dev"]
    n = len(dev) if limit is None else min(limit, len(dev))
    return dev.text[:n], dev.text_pair[:n], np.asarray(dev.label[:n], dtype=np.float64)


class MeanPooled:
    """A transformer encoder's mean-pooled (attention-masked), normalised last hidden states."""

    def __init__(self, name: str):
        from ptmlab.models.zoo import load_model, load_tokenizer

        self.model = load_model(name, task_head=False).eval()
        self.tokenizer = load_tokenizer(name)

    def batch(self, texts: list[str], max_length: int = 128):
        import torch

        x = self.tokenizer(texts, padding=True, truncation=True, max_length=max_length, return_tensors="pt")
        with torch.inference_mode():
            h = self.model(input_ids=x["input_ids"], attention_mask=x["attention_mask"]).last_hidden_state
            m = x["attention_mask"][..., None].to(h.dtype)
            return torch.nn.functional.normalize((h * m).sum(1) / m.sum(1).clamp_min(1), dim=1)

    def embed(self, texts: list[str], batch_size: int = 64) -> np.ndarray:
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))  # similar lengths together: less padding
        out = np.zeros((len(texts), self.model.config.hidden_size), dtype=np.float32)
        for s in range(0, len(order), batch_size):
            idx = order[s:s + batch_size]
            out[idx] = self.batch([texts[i] for i in idx]).numpy()
        return out


def logistic_accuracy(train_x, train_y, dev_x, dev_y) -> float:
    """The same head for every frozen embedding: standardised features + logistic regression."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    clf = make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000))
    clf.fit(train_x, train_y)
    return float((clf.predict(dev_x) == np.asarray(dev_y)).mean())


def sts_spearman(a: np.ndarray, b: np.ndarray, gold: np.ndarray) -> float:
    from scipy.stats import spearmanr

    na = a / np.clip(np.linalg.norm(a, axis=1, keepdims=True), 1e-12, None)
    nb = b / np.clip(np.linalg.norm(b, axis=1, keepdims=True), 1e-12, None)
    return float(spearmanr((na * nb).sum(1), gold).statistic)


def model2vec_side(name: str, dim: int):
    """model2vec's distillation of the same local model, or (None, why) when the package cannot do it here."""
    try:
        from model2vec.distill import distill_from_model
    except ImportError as e:
        return None, f"model2vec is not installed with its distillation extras ({e}): pip install model2vec"
    from ptmlab.models.zoo import load_model, load_tokenizer

    try:  # the very model ptmlab distils (a zoo entry built from a config included), with its tokenizer
        start = time.perf_counter()
        m2v = distill_from_model(load_model(name, task_head=False), load_tokenizer(name), pca_dims=dim,
                                 device="cpu")
        return (m2v, time.perf_counter() - start), None
    except Exception as e:  # another model2vec release, a tokenizer it cannot read: reported, not fatal
        return None, f"model2vec could not distil '{name}' here ({type(e).__name__}: {e})"


def speed(sides: dict, texts: list[str], batch: int, repeats: int) -> dict[str, float]:
    """Seconds per pass over ``texts`` in batches of ``batch``: each side warmed once, then ``repeats`` passes per
    side in rotation (the side that leads rotates), the median kept."""
    batches = [texts[i:i + batch] for i in range(0, len(texts), batch)]

    def one_pass(fn):
        start = time.perf_counter()
        for b in batches:
            fn(b)
        return time.perf_counter() - start

    for fn in sides.values():
        one_pass(fn)
    names = list(sides)
    times: dict[str, list[float]] = {k: [] for k in names}
    for r in range(repeats):
        for k in names[r % len(names):] + names[:r % len(names)]:
            times[k].append(one_pass(sides[k]))
        print(f"speed round {r}: " + "  ".join(f"{k} {times[k][-1]:.3f}s" for k in names), flush=True)
    return {k: statistics.median(v) for k, v in times.items()}


def served_forward(model, tokenizer, max_length: int = 128):
    """The static student as predict and serve run it: a padded batch through the model's forward, logits."""
    import torch

    from ptmlab.models.loader import model_inputs

    def fn(texts):
        x = tokenizer(texts, padding=True, truncation=True, max_length=max_length, return_tensors="pt")
        with torch.inference_mode():
            return model(**model_inputs(model, dict(x))).logits

    return fn


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="minilm", help="the encoder to distil (zoo name or directory)")
    p.add_argument("--glue-dir", default=None, help="GLUE folder (default ../shared/data/glue)")
    p.add_argument("--train-rows", type=int, default=8000, help="SST-2 training rows (seeded subset, every side)")
    p.add_argument("--max-dev", type=int, default=None, help="SST-2 / STS-B dev rows (default: all)")
    p.add_argument("--dim", type=int, default=256, help="PCA dimension of the static table (and of model2vec's)")
    p.add_argument("--epochs", type=float, default=3.0)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--batch-size", type=int, default=32, help="batch size of the speed comparison")
    p.add_argument("--repeats", type=int, default=3, help="timed passes per side over the dev sentences")
    p.add_argument("--teacher", default=None, help="a fine-tuned SST-2 teacher run: also ptmlab distill --student "
                                                   "static from it, on the same rows")
    p.add_argument("--no-model2vec", action="store_true", help="leave model2vec out")
    p.add_argument("--work", default=None, help="keep the runs here (default: a temporary folder)")
    p.add_argument("--output", default=None, help="result JSON (default benchmarks/results/static_student."
                                                  "MACHINE.json)")
    args = p.parse_args()

    import torch

    torch.set_num_threads(len(os.sched_getaffinity(0)))
    from ptmlab.distill.static import distill_static, embed, static_logits
    from ptmlab.models.zoo import load_model, load_tokenizer
    from ptmlab.train.finetune import run_finetune

    work = Path(args.work or tempfile.mkdtemp(prefix="static-bench-"))
    began, load_start = time.perf_counter(), os.getloadavg()[0]
    cfg, data = sst2_data(args)
    train, dev = data.splits["train"], data.splits["dev"]
    s1, s2, gold = stsb_dev(args.glue_dir, args.max_dev)
    print(f"SST-2: {len(train)} training rows, {len(dev)} dev; STS-B dev: {len(gold)} pairs", flush=True)

    # the static table, distilled from the model (no task), saved as a model directory
    table_dir = work / "static"
    start = time.perf_counter()
    student, tok = distill_static(args.model, output=str(table_dir), dim=args.dim)
    table_seconds = time.perf_counter() - start
    info = dict(student.config.ptmlab_static)
    print(f"static table: {info['tokens']} tokens x {info['dim']} in {table_seconds:.1f}s", flush=True)

    # minilm reference
    ref = MeanPooled(args.model)
    start = time.perf_counter()
    ref_train, ref_dev = ref.embed(train.text), ref.embed(dev.text)
    ref_sts = sts_spearman(ref.embed(s1), ref.embed(s2), gold)
    ref_embed_seconds = time.perf_counter() - start
    ref_acc = logistic_accuracy(ref_train, train.label, ref_dev, dev.label)
    print(f"{args.model}: SST-2 (frozen + LR) {ref_acc:.4f}, STS-B {ref_sts:.4f}", flush=True)

    # the static table frozen, same head and STS-B
    st_acc_frozen = logistic_accuracy(embed(student, tok, train.text), train.label, embed(student, tok, dev.text),
                                      dev.label)
    st_sts = sts_spearman(embed(student, tok, s1), embed(student, tok, s2), gold)
    print(f"static: SST-2 (frozen + LR) {st_acc_frozen:.4f}, STS-B {st_sts:.4f}", flush=True)

    # the static student fine-tuned on the same rows (ptmlab finetune of the saved table, plain labels)
    import dataclasses

    ft = run_finetune(dataclasses.replace(cfg, model=str(table_dir), output=str(work / "static-sst2"),
                                          overwrite=True))
    st_acc_ft = float(ft["metrics"]["accuracy"])
    print(f"static fine-tuned: SST-2 {st_acc_ft:.4f} ({ft['train_seconds']:.1f}s training)", flush=True)

    distilled = None
    if args.teacher:
        from ptmlab.distill.config import DistillConfig
        from ptmlab.distill.pipeline import run_distill

        d = run_distill(DistillConfig(teacher=args.teacher, student=f"static:dim={args.dim}", losses=["soft_ce"],
                                      task="sst2", glue_dir=args.glue_dir, max_train=args.train_rows,
                                      max_eval=args.max_dev, epochs=args.epochs, lr=args.lr, batch_size=32,
                                      max_length=128, seed=0, precision="fp32", output=str(work / "static-kd"),
                                      overwrite=True, test=False))
        distilled = {"teacher": portable(args.teacher), "accuracy": d["metrics"]["accuracy"],
                     "teacher_accuracy": d["teacher_metrics"]["accuracy"], "retained_pct": d["retained_pct"],
                     "agreement_with_teacher": d["agreement_with_teacher"]}
        print(f"static distilled from {args.teacher}: SST-2 {distilled['accuracy']:.4f}", flush=True)

    m2v = None
    m2v_why = "left out (--no-model2vec)" if args.no_model2vec else None
    if not args.no_model2vec:
        got, m2v_why = model2vec_side(args.model, args.dim)
        if got is not None:
            m2v_model, m2v_seconds = got
            enc = m2v_model.encode
            m2v = {"distill_seconds": round(m2v_seconds, 2), "tokens": int(m2v_model.embedding.shape[0]),
                   "dim": int(m2v_model.embedding.shape[1]),
                   "sst2_accuracy_frozen_lr": logistic_accuracy(enc(train.text), train.label, enc(dev.text),
                                                                dev.label),
                   "stsb_spearman": sts_spearman(enc(s1), enc(s2), gold)}
            print(f"model2vec: SST-2 (frozen + LR) {m2v['sst2_accuracy_frozen_lr']:.4f}, STS-B "
                  f"{m2v['stsb_spearman']:.4f}", flush=True)
        else:
            print(m2v_why, flush=True)

    # speed at batch 32, alternated
    served = load_model(str(work / "static-sst2")).eval()
    served_tok = load_tokenizer(str(work / "static-sst2"))
    sides = {args.model: ref.batch, "static (forward, as served)": served_forward(served, served_tok),
             "static (static_logits)": lambda b: static_logits(served, served_tok, b)}
    if m2v is not None:
        sides["model2vec (encode)"] = lambda b: m2v_model.encode(b, batch_size=args.batch_size)
    secs = speed(sides, dev.text, args.batch_size, args.repeats)
    rates = {k: len(dev.text) / v for k, v in secs.items()}
    served_key = "static (forward, as served)"
    ratio = rates[served_key] / rates[args.model]
    ratio_bag = rates["static (static_logits)"] / rates[args.model]

    targets = {
        "speed_50x": {"value": round(ratio, 1), "target": ">= 50", "met": ratio >= 50},
        "sst2_85pct": {"value": round(100 * st_acc_ft / ref_acc, 2), "target": ">= 85 (% of the reference)",
                       "met": st_acc_ft >= 0.85 * ref_acc},
    }
    if m2v is not None:
        targets["stsb_vs_model2vec"] = {"value": round(st_sts - m2v["stsb_spearman"], 4), "target": ">= 0",
                                        "met": st_sts >= m2v["stsb_spearman"]}
        targets["sst2_vs_model2vec"] = {"value": round(st_acc_frozen - m2v["sst2_accuracy_frozen_lr"], 4),
                                        "target": ">= 0 (frozen vectors + the same logistic regression)",
                                        "met": st_acc_frozen >= m2v["sst2_accuracy_frozen_lr"]}
    result = {
        "benchmark": "static_student", "machine": machine_info(), "model": args.model,
        "settings": {"train_rows": len(train), "sst2_dev": len(dev), "stsb_dev_pairs": len(gold), "dim": args.dim,
                     "epochs": args.epochs, "lr": args.lr, "finetune_batch_size": 32, "speed_batch_size":
                     args.batch_size, "repeats": args.repeats, "threads": torch.get_num_threads(),
                     "glue_dir": portable(args.glue_dir) if args.glue_dir else "glue (shared data)"},
        "static_table": {**info, "distill_seconds": round(table_seconds, 2)},
        "reference": {"sst2_accuracy_frozen_lr": ref_acc, "stsb_spearman": ref_sts,
                      "embed_seconds": round(ref_embed_seconds, 2)},
        "static": {"sst2_accuracy_frozen_lr": st_acc_frozen, "sst2_accuracy_finetuned": st_acc_ft,
                   "finetune_train_seconds": ft["train_seconds"], "stsb_spearman": st_sts,
                   "params": sum(p.numel() for p in served.parameters())},
        "static_distilled": distilled,
        "model2vec": m2v if m2v is not None else {"skipped": m2v_why},
        "speed": {"seconds_per_pass": {k: round(v, 4) for k, v in secs.items()},
                  "sentences_per_second": {k: round(v, 1) for k, v in rates.items()},
                  "speedup_served": round(ratio, 1), "speedup_static_logits": round(ratio_bag, 1)},
        "targets": targets, "seconds": round(time.perf_counter() - began, 1),
        "load_average_1min": {"start": round(load_start, 2), "end": round(os.getloadavg()[0], 2)},
    }
    out = Path(args.output) if args.output else result_path("static_student")
    out.parent.mkdir(parents=True, exist_ok=True)
    from ptmlab.core.io import atomic_write_json

    atomic_write_json(out, result)

    rows = [(args.model + " (frozen + LR)", ref_acc, ref_sts, rates[args.model]),
            ("static (frozen + LR)", st_acc_frozen, st_sts, None),
            ("static fine-tuned (as served)", st_acc_ft, None, rates[served_key]),
            ("static fine-tuned (static_logits)", None, None, rates["static (static_logits)"])]
    if m2v is not None:
        rows.append(("model2vec (frozen + LR)", m2v["sst2_accuracy_frozen_lr"], m2v["stsb_spearman"],
                     rates["model2vec (encode)"]))
    if distilled:
        rows.append(("static distilled from teacher", distilled["accuracy"], None, None))

    def f(v, fmt):
        return "-" if v is None else format(v, fmt)

    print(f"\n{'side':36} {'SST-2 acc':>9} {'STS-B rho':>9} {'sent/s b32':>11}")
    for name, acc, sts, rate in rows:
        print(f"{name:36} {f(acc, '.4f'):>9} {f(sts, '.4f'):>9} {f(rate, ',.0f'):>11}")
    for k, t in targets.items():
        print(f"target {k}: {t['value']} ({t['target']}) {'met' if t['met'] else 'MISSED'}")
    print(f"wrote {out.relative_to(ROOT) if out.resolve().is_relative_to(ROOT) else out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
