"""MLM pre-training on one GPU through ``ptmlab pretrain``'s engine: tokens/s and the share of the chip's bf16 peak.

    python benchmarks/gpu_pretrain.py --files ../shared/data/text/wikitext-2 --tokenizer minilm \
        --size base --block-size 128 --batch-size 256 --max-steps 200

The achieved rate counts 6·N per token plus attention (``ptmlab.pretrain.flops``; N = non-embedding parameters) over
the training time the loop measures (evaluation excluded). The peak is the chip's dense bf16 number (``--peak``,
default 989e12 for an H100/H200 SXM; plain bf16 matrix products on an H200 reach about 790e12). Runs on a CPU
too (tiny sizes), where the share is not meaningful.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from _env import machine_info, result_path  # first: offline defaults, repository root on sys.path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", default="../shared/data/text/wikitext-2")
    ap.add_argument("--tokenizer", default="minilm")
    ap.add_argument("--objective", default="mlm")
    ap.add_argument("--size", default="base")
    ap.add_argument("--block-size", type=int, default=128)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--max-steps", type=int, default=200)
    ap.add_argument("--precision", default="auto")
    ap.add_argument("--peak", type=float, default=989e12, help="the chip's dense bf16 FLOP/s")
    ap.add_argument("--output", default="runs/gpu-pretrain", help="the pre-training run directory (replaced)")
    ap.add_argument("--json", default=None, help="result JSON (default: gpu_pretrain.MACHINE.json)")
    args = ap.parse_args()

    import torch

    from ptmlab.core.config import build_config
    from ptmlab.pretrain.config import PretrainConfig
    from ptmlab.pretrain.run import run_pretrain

    cfg = build_config(PretrainConfig, dict(
        files=[args.files], tokenizer=args.tokenizer, objective=args.objective, size=args.size,
        block_size=args.block_size, batch_size=args.batch_size, max_steps=args.max_steps,
        eval_steps=args.max_steps, eval_blocks=256, eval_batch_size=256, precision=args.precision,
        output=args.output, overwrite=True, logging_steps=50, seed=0), source="gpu_pretrain")
    t0 = time.time()
    s = run_pretrain(cfg)
    m = s["metrics"]
    achieved = m["tokens_per_second"] * s["flops_per_token"]
    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    result = {
        "device": device, "objective": args.objective, "size": args.size, "params": s["params"],
        "nonembedding_params": s["nonembedding_params"], "block_size": args.block_size,
        "batch_size": args.batch_size, "steps": s["steps"], "precision": s["precision"],
        "tokens_per_second": m["tokens_per_second"], "flops_per_token": s["flops_per_token"],
        "achieved_tflops": round(achieved / 1e12, 2), "peak_tflops": args.peak / 1e12,
        "share_of_peak": round(achieved / args.peak, 4), "initial_eval_loss": m["initial_eval_loss"],
        "eval_loss": m["eval_loss"], "train_seconds": s["train_seconds"], "wall_seconds": round(time.time() - t0, 1),
        "machine": machine_info("cuda" if torch.cuda.is_available() else "cpu"),
    }
    out = Path(args.json or result_path("gpu_pretrain", "cuda" if torch.cuda.is_available() else "cpu"))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    for k, v in result.items():
        print(f"{k:20} {v}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
