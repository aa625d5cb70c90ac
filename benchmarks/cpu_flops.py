"""Benchmark: how much of the matmul rate ptmlab's inference and training steps reach, and where the rest goes.

Three measurements in one process, at one precision (``--precision``, default fp32; bf16 where the CPU is fast in
it):
1. the machine's matmul rate: the median over repeats of square matmuls of size 1024..4096 (GFLOP/s = 2 n^3 / s),
   timed in the same rotation as the inference passes (each round: every matmul size, then every inference path),
   so that a slow stretch of a shared host lowers numerator and denominator alike; every timed call follows an
   untimed one of the same side (onnxruntime's idle workers spin after a call and would slow a torch call timed
   right after it);
2. inference: minilm (or ``--model``) forward passes at batch 32 on SST-2 dev sentences padded to ``--length``,
   FLOPs counted as 2 * N_non_embedding * tokens + the attention products (4 * layers * tokens * length * hidden);
3. one training step (forward, backward, fused AdamW) at batch 32: 6 * N_non_embedding * tokens + 3x the attention
   products, and a torch.profiler breakdown of the step's time into matmuls, attention kernels, optimizer,
   embedding backward, elementwise/normalisation and the rest.
4. (fp32 only) inference through ptmlab's other fp32 path, its ONNX export (``ptmlab export --format onnx``, the
   ``onnx fp32`` row of ``ptmlab compress``) run by onnxruntime, timed alternately with the PyTorch forward on the
   same batch; the matmul rate is then also measured through onnxruntime (one MatMul node) and the machine's rate
   is the larger of the two libraries', so neither path is flattered by the other's slower matmul.
Ratios 2/1, 3/1 and 4/1 say how close a step comes to the hardware; the breakdown says what to attack.
``--reuse-host-memory`` runs everything inside ptmlab's host-memory setting (``train.host_memory``: what the
training loop and ``predict_logits`` use on a CPU); without it glibc's malloc works as it comes. The setting cannot
be undone inside a process, so compare two runs.

    python benchmarks/cpu_flops.py [--model minilm] [--length 64] [--precision fp32|bf16] [--repeats 5]
                                   [--reuse-host-memory]
"""

from __future__ import annotations

# isort: off
from _env import ROOT, machine_info, result_path  # first: offline defaults
# isort: on

import argparse
import os
import tempfile
from pathlib import Path

from _timing import alternate_medians, sig

CATEGORIES = (  # (category, substrings of profiler op names), first match wins
    ("optimizer", ("adam", "optimizer")),
    ("embedding backward", ("embedding_dense_backward", "embedding_backward", "index_add", "index_put")),
    ("attention kernels", ("scaled_dot_product", "_flash_attention", "_efficient_attention", "softmax")),
    ("matmul", ("addmm", "aten::mm", "aten::bmm", "matmul", "linear")),
    ("normalisation/elementwise", ("layer_norm", "gelu", "add", "mul", "div", "dropout", "tanh", "copy_", "fill_",
                                   "zero_", "where", "sum", "mean", "sub", "pow", "sqrt", "clamp", "cross_entropy",
                                   "nll", "log_softmax")),
)


SIZES = (1024, 2048, 4096)


def matmul_side(n: int, dtype):
    """A callable doing one square n x n matmul in torch (2 n^3 FLOPs)."""
    import torch

    a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
    return lambda: torch.mm(a, b)


def ort_matmul_side(n: int, threads: int):
    """A callable doing one square n x n fp32 matmul through onnxruntime's CPU provider (a graph of one MatMul)."""
    import numpy as np
    import onnxruntime as ort
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("MatMul", ["a", "b"], ["c"])], "mm",
                              [helper.make_tensor_value_info(k, TensorProto.FLOAT, [n, n]) for k in "ab"],
                              [helper.make_tensor_value_info("c", TensorProto.FLOAT, [n, n])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = threads, 1
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    feed = {k: np.random.default_rng(0).standard_normal((n, n), dtype=np.float32) for k in "ab"}
    return lambda: sess.run(None, feed)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="minilm")
    p.add_argument("--glue-dir", default=str(ROOT.parent / "shared/data/glue"))
    p.add_argument("--length", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--output", default=str(result_path("cpu_flops")))
    p.add_argument("--reuse-host-memory", action="store_true", help="run inside ptmlab's host-memory setting")
    args = p.parse_args()
    if args.reuse_host_memory:
        from ptmlab.core.host_memory import reuse_host_memory

        with reuse_host_memory() as applied:
            return measure(args, applied)
    return measure(args, False)


def measure(args, host_memory: bool) -> None:
    import torch
    import torch.nn.functional as F

    from ptmlab.core.io import atomic_write_json
    from ptmlab.data.loaders import load_task
    from ptmlab.models.structure import structure_of
    from ptmlab.models.zoo import load_model, load_tokenizer

    torch.set_num_threads(len(os.sched_getaffinity(0)))
    dtype = torch.bfloat16 if args.precision == "bf16" else torch.float32
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.precision == "bf16")

    threads = torch.get_num_threads()
    onnx_side = args.precision == "fp32"

    model = load_model(args.model, num_labels=2)
    tok = load_tokenizer(args.model)
    cfg = model.config
    emb = {id(q) for q in structure_of(model).embedding_module(model).parameters()}
    n_params = sum(q.numel() for q in model.parameters() if id(q) not in emb)
    data = load_task("sst2", args.glue_dir) if Path(args.glue_dir, "SST-2").is_dir() else load_task("tweets")
    texts = list(data.splits["dev"].text[:args.batch_size])
    batch = tok(texts, padding="max_length", truncation=True, max_length=args.length, return_tensors="pt")
    tokens = args.batch_size * args.length
    attn = 4 * cfg.num_hidden_layers * tokens * args.length * cfg.hidden_size  # QK^T and AV, multiply-adds x2
    infer_flops = 2 * n_params * tokens + attn

    model.eval()
    sides = {f"mm{n}": matmul_side(n, dtype) for n in SIZES}
    if onnx_side:
        sides |= {f"ort_mm{n}": ort_matmul_side(n, threads) for n in SIZES}
    sides["pytorch"] = lambda: model(**batch)  # under torch.no_grad, as predict_logits

    def inference_mode_pass():
        with torch.inference_mode():
            return model(**batch)

    sides["pytorch_inference_mode"] = inference_mode_pass
    with tempfile.TemporaryDirectory() as tmp, torch.no_grad(), autocast:
        if onnx_side:
            from ptmlab.compress.quantize import OrtModel, export_onnx

            ort_model = OrtModel(export_onnx(model, Path(tmp) / "model.onnx"), cfg, threads=threads)
            sides["onnxruntime"] = lambda: ort_model(**batch)
        infer = alternate_medians(sides, args.repeats, warm_each=True)  # onnxruntime's spinning: _timing.py
    peak = {n: round(2 * n ** 3 / infer[f"mm{n}"] / 1e9, 1) for n in SIZES}
    ort_peak = {n: round(2 * n ** 3 / infer[f"ort_mm{n}"] / 1e9, 1) for n in SIZES} if onnx_side else {}
    machine = max([*peak.values(), *ort_peak.values()])
    infer_s = infer["pytorch"]
    im_rate = infer_flops / infer["pytorch_inference_mode"] / 1e9
    infer_rate = infer_flops / infer_s / 1e9
    ort_rate = infer_flops / infer["onnxruntime"] / 1e9 if onnx_side else None

    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, fused=True)
    labels = torch.zeros(args.batch_size, dtype=torch.long)

    def step():
        with autocast:
            loss = F.cross_entropy(model(**batch).logits.float(), labels)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    train_s = alternate_medians({"step": step}, args.repeats)["step"]
    train_rate = (6 * n_params * tokens + 3 * attn) / train_s / 1e9

    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
    spent = {c: 0.0 for c, _ in CATEGORIES}
    spent["other"] = 0.0
    for ev in prof.key_averages():
        name = ev.key.lower()
        if not name.startswith("aten::") and "adam" not in name:
            continue  # wrappers (autograd nodes, profiler ranges) would double count their aten children
        for cat, keys in CATEGORIES:
            if any(k in name for k in keys):
                spent[cat] += ev.self_cpu_time_total
                break
        else:
            spent["other"] += ev.self_cpu_time_total
    total = sum(spent.values()) or 1.0
    breakdown = {k: round(v / total, 3) for k, v in spent.items()}

    result = {"machine": machine_info(), "model": args.model, "precision": args.precision,
              "threads": torch.get_num_threads(),
              "load_average": list(os.getloadavg()),
              "reuse_host_memory": host_memory, "batch": args.batch_size, "length": args.length,
              "non_embedding_params": n_params, "matmul_timed_in_the_inference_rotation": True,
              "matmul_gflops": peak, "matmul_gflops_onnxruntime": ort_peak,
              "machine_gflops": machine,
              "inference": {"seconds": sig(infer_s), "gflops": sig(infer_rate),
                            "fraction_of_matmul_rate": sig(infer_rate / machine)},
              "inference_pytorch_inference_mode": {
                  "seconds": sig(infer["pytorch_inference_mode"]), "gflops": sig(im_rate),
                  "fraction_of_matmul_rate": sig(im_rate / machine)},
              "inference_onnx": None if ort_rate is None else {
                  "seconds": sig(infer["onnxruntime"]), "gflops": sig(ort_rate),
                  "fraction_of_matmul_rate": sig(ort_rate / machine),
                  "speedup_vs_pytorch": sig(infer_s / infer["onnxruntime"]),
                  "path": "ptmlab's ONNX fp32 export (export_onnx, as `ptmlab export --format onnx`) in onnxruntime"},
              "training_step": {"seconds": sig(train_s), "gflops": sig(train_rate),
                                "fraction_of_matmul_rate": sig(train_rate / machine),
                                "time_breakdown_aten_self_cpu": breakdown},
              "targets": {"inference_fraction": 0.8}}
    out = Path(args.output)
    atomic_write_json(out, result)
    print(f"matmul rate ({args.precision}): torch {peak}, onnxruntime {ort_peak} GFLOP/s -> machine {machine:.1f}")
    print(f"inference b{args.batch_size} x {args.length}: PyTorch {infer_rate:.1f} GFLOP/s = "
          f"{infer_rate / machine:.0%} of the matmul rate (target 80%); under inference_mode {im_rate:.1f} = "
          f"{im_rate / machine:.0%}")
    if ort_rate is not None:
        print(f"inference through the ONNX export (onnxruntime): {ort_rate:.1f} GFLOP/s = {ort_rate / machine:.0%} "
              f"({infer_s / infer['onnxruntime']:.2f}x PyTorch)")
    print(f"training step: {train_rate:.1f} GFLOP/s = {train_rate / machine:.0%}; time by kind: "
          + ", ".join(f"{k} {v:.0%}" for k, v in breakdown.items()))
    print(f"written: {out}")


if __name__ == "__main__":
    main()
