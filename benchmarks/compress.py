"""Benchmark: compression of a minilm fine-tuned on SST-2, every measurement in one run.

Rows (dev accuracy on the whole SST-2 dev set, size of the weight files, median batch-1/32 CPU latency):
fp32 base; 40% of heads removed by |dL/d gate| (500 examples) before and after one recovery epoch; torch dynamic
int8; ONNX fp32; onnxruntime int8; vocabulary pruned to the SST-2 corpus; and the combined pipeline (heads 40% +
recovery, vocabulary, onnxruntime int8). The combined row reuses the recovered pruned model: vocabulary pruning
leaves outputs unchanged, so its order relative to head pruning does not matter. Each compression target is checked.
Writes benchmarks/results/compress.MACHINE.json and prints the table.

Scaled for a busy 2-core machine (about 20 minutes with the in-run recovery, 10 with --pruned): recovery
fine-tunes on --recover-train rows (default 1500 of the 67k; the base model saw 4,000), or --pruned reuses a
`ptmlab prune RUN --heads 0.4 --recover-epochs 1` run; max length 64. Latency: --repeats round-robin rounds over
all variants (each round times batch 1 and batch 32 on 64 dev sentences once per variant; medians reported), so
a load change on a shared machine hits every variant alike instead of whichever was being timed.

    python benchmarks/compress.py --model RUN_DIR [--pruned PRUNED_RUN] [--recover-train 1500] [--glue-dir DIR]
"""

from __future__ import annotations

# isort: off
from _env import machine_info, portable, result_path  # first: offline defaults
# isort: on

import argparse
import copy
import json
import os
import tempfile
import time
from pathlib import Path

TARGETS = {"heads_drop_points_max": 0.3, "int8_speedup_b32_min": 1.8, "int8_drop_points_max": 1.0,
           "vocab_size_reduction_min": 0.40, "combined_size_ratio_min": 4.0, "combined_speedup_b32_min": 2.0,
           "combined_drop_points_max": 1.5}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="a minilm run directory fine-tuned on SST-2")
    ap.add_argument("--glue-dir", default=None)
    ap.add_argument("--recover-train", type=int, default=1500, help="training rows for the recovery epoch")
    ap.add_argument("--pruned", default=None, help="reuse this `ptmlab prune --heads 0.4` run (recovered) instead "
                                                  "of pruning and recovering in this run")
    ap.add_argument("--repeats", type=int, default=7, help="round-robin latency rounds (median reported)")
    ap.add_argument("--out", default=str(result_path("compress")))
    args = ap.parse_args()

    from ptmlab.compress.importance import compute_importance
    from ptmlab.compress.measure import Measurer, add_ratios
    from ptmlab.compress.prune import prune_by_target, recover
    from ptmlab.compress.quantize import OrtModel, export_onnx, int8_state, onnx_int8, torch_int8
    from ptmlab.compress.surgery import heads_per_layer
    from ptmlab.compress.vocab import prune_vocabulary
    from ptmlab.core.config import build_config
    from ptmlab.core.io import atomic_save_file, atomic_write_json
    from ptmlab.core.rundir import RunDir
    from ptmlab.core.seed import configure_threads, set_seed
    from ptmlab.data.encode import encode_split
    from ptmlab.data.loaders import subset
    from ptmlab.data.taskdata import load_task_data
    from ptmlab.models.latency import parameter_count, time_side_by_side
    from ptmlab.models.zoo import load_model, load_tokenizer
    from ptmlab.report.table import print_table
    from ptmlab.train.args import FinetuneConfig

    configure_threads()
    set_seed(0)
    start = time.time()
    cfg = build_config(FinetuneConfig, {"task": "sst2", "glue_dir": args.glue_dir, "max_train": args.recover_train,
                                        "max_length": 64, "epochs": 1.0, "lr": 5e-5, "batch_size": 32, "seed": 0,
                                        "max_eval": 200, "test": False}, source="benchmark")
    data = load_task_data(cfg)
    tok = load_tokenizer(args.model)
    base = load_model(args.model)
    meas_cfg = build_config(FinetuneConfig, {"task": "sst2", "glue_dir": args.glue_dir, "max_length": 64},
                            source="benchmark")  # the whole dev set
    meas = Measurer(meas_cfg, tok)
    variants: list[tuple[dict, object, object]] = []  # (row, model, tokenizer): latency is measured at the end

    def row(name: str, model, size_mb: float, tokenizer=None) -> dict:
        r = {"variant": name, "dev": meas.dev(model, tokenizer), "params": parameter_count(model) or None,
             "size_mb": size_mb}
        print(f"  {name}: dev {r['dev']:.4f}, {size_mb} MB", flush=True)
        variants.append((r, model, tokenizer or tok))
        return r

    rows = [row("fp32 base", base, meas.saved_size(base))]
    with tempfile.TemporaryDirectory(prefix="bench-compress-") as tmp:
        tmp = Path(tmp)
        # 40% of heads
        recover_s = None
        if args.pruned:  # an existing `ptmlab prune --heads 0.4 --recover-epochs 1` run
            pruned = load_model(args.pruned)
            psum = json.loads((Path(args.pruned) / "summary.json").read_text())
            cut = {"heads_before": psum["heads_before"], "dev_right_after_pruning": psum["prune_steps"][-1].get(
                "dev_pruned_accuracy"), "recovery": "from " + args.pruned}
        else:
            pruned = load_model(args.model)
            imp_enc = encode_split(tok, subset(data.splits["train"], 500, 0), 64)
            imp = compute_importance("gate", pruned, imp_enc, tok.pad_token_id or 0)
            cut = prune_by_target(pruned, imp, heads=0.4)
            row("heads -40%", copy.deepcopy(pruned), meas.saved_size(pruned))
            rows.append(variants[-1][0])
            t0 = time.time()
            rec = RunDir(tmp / "recovered")
            rec.path.mkdir(parents=True)
            pruned, _ = recover(pruned, tok, data, cfg, rec, 1.0, test=False, final=False)
            recover_s = round(time.time() - t0, 1)
        rows.append(row("heads -40% + recovery", pruned, meas.saved_size(pruned)))
        # int8
        q = torch_int8(base)
        atomic_save_file(int8_state(q), tmp / "int8.safetensors")
        rows.append(row("torch int8", q, round((tmp / "int8.safetensors").stat().st_size / 2**20, 2)))
        fp = export_onnx(base, tmp / "fp32.onnx")
        rows.append(row("onnx fp32", OrtModel(fp, base.config), round(fp.stat().st_size / 2**20, 2)))
        q8 = onnx_int8(fp, tmp / "int8.onnx")
        rows.append(row("onnx int8", OrtModel(q8, base.config), round(q8.stat().st_size / 2**20, 2)))
        # vocabulary
        full = load_task_data(build_config(FinetuneConfig, {"task": "sst2", "glue_dir": args.glue_dir},
                                           source="benchmark"))
        corpus = [t for s in full.splits.values() for t in s.text]
        vmodel = load_model(args.model)
        vtok, vinfo = prune_vocabulary(vmodel, tok, corpus)
        rows.append(row("vocab pruned", vmodel, meas.saved_size(vmodel), tokenizer=vtok))
        # combined: recovered pruned model + vocabulary + onnxruntime int8
        combined = copy.deepcopy(pruned)
        ctok, _ = prune_vocabulary(combined, tok, corpus)
        cfp = export_onnx(combined, tmp / "combined_fp32.onnx")
        c8 = onnx_int8(cfp, tmp / "combined.onnx")
        rows.append(row("heads -40% + recovery + vocab + onnx int8", OrtModel(c8, combined.config),
                             round(c8.stat().st_size / 2**20, 2), tokenizer=ctok))
        # latency: round-robin over the variants, so load changes on a shared machine hit every variant alike
        time_side_by_side(variants, meas.texts, args.repeats)
    add_ratios(rows, rows[0])
    by = {r["variant"]: r for r in rows}
    b = rows[0]

    def drop(name: str) -> float:
        return round(100 * (b["dev"] - by[name]["dev"]), 2)

    checks = {
        "heads_drop_points": drop("heads -40% + recovery"),
        "heads_latency_gain_b32": by["heads -40% + recovery"]["speedup_b32"],
        "heads_latency_gain_b1": round(b["latency_b1_ms"] / by["heads -40% + recovery"]["latency_b1_ms"], 2),
        "int8_speedup_b32": by["onnx int8"]["speedup_b32"], "int8_drop_points": drop("onnx int8"),
        "torch_int8_speedup_b32": by["torch int8"]["speedup_b32"], "torch_int8_drop_points": drop("torch int8"),
        "vocab_size_reduction": round(1 - by["vocab pruned"]["size_mb"] / b["size_mb"], 3),
        "vocab_drop_points": drop("vocab pruned"),
        "combined_size_ratio": by["heads -40% + recovery + vocab + onnx int8"]["size_ratio"],
        "combined_speedup_b32": by["heads -40% + recovery + vocab + onnx int8"]["speedup_b32"],
        "combined_drop_points": drop("heads -40% + recovery + vocab + onnx int8"),
    }
    met = {
        "heads": checks["heads_drop_points"] <= TARGETS["heads_drop_points_max"],
        "int8": checks["int8_speedup_b32"] >= TARGETS["int8_speedup_b32_min"]
        and checks["int8_drop_points"] <= TARGETS["int8_drop_points_max"],
        "vocab": checks["vocab_size_reduction"] >= TARGETS["vocab_size_reduction_min"]
        and checks["vocab_drop_points"] == 0,
        "combined": checks["combined_size_ratio"] >= TARGETS["combined_size_ratio_min"]
        and checks["combined_speedup_b32"] >= TARGETS["combined_speedup_b32_min"]
        and checks["combined_drop_points"] <= TARGETS["combined_drop_points_max"],
    }
    result = {"machine": machine_info(), "model": portable(args.model), "task": "sst2",
              "dev_examples": len(meas.data.splits["dev"].text),
              "max_length": 64, "recover_train": None if args.pruned else args.recover_train,
              "recover_seconds": recover_s,
              "latency": f"median of {args.repeats} round-robin rounds over all variants, 64 dev sentences",
              "heads": {**cut, "after": sum(heads_per_layer(pruned)),
                        "per_layer": heads_per_layer(pruned)},
              "vocab": vinfo, "rows": rows, "checks": checks, "targets": TARGETS, "targets_met": met,
              "threads": __import__("torch").get_num_threads(), "load_average": os.getloadavg(),
              "seconds": round(time.time() - start, 1)}
    atomic_write_json(args.out, result)
    print_table(rows, ["variant", "dev", "params", "size_mb", "latency_b1_ms", "latency_b32_ms", "speedup_b32",
                       "size_ratio"])
    for k, v in checks.items():
        print(f"{k}: {v}")
    print(f"targets met: {met}; {result['seconds']:.0f}s; wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
