"""Benchmark: MLM pre-training throughput of ptmlab against transformers' Trainer with
``DataCollatorForLanguageModeling``, side by side in one run; and ELECTRA's cost per step relative to MLM.

Both sides train the same BERT (built from scratch by ``ptmlab.pretrain.models.build_scratch`` with the same seed,
size and tokenizer), on the same packed blocks of the same text (``[CLS] block [SEP]``, ``--block-size`` positions),
at the same batch, learning rate and precision, for ``--steps`` optimizer steps. Runs alternate (ptmlab, Trainer,
ptmlab, ...) ``--repeats`` times per precision; the table gives the median and the min-max of tokens/s, where tokens
are sequence positions processed (steps x batch x block size) and the time is each loop's own training time from the
first step's start to the last step's end (ptmlab: the loop's ``train_seconds``; Trainer: a callback), so loading,
tokenizing, set-up, evaluation and saving are outside both. What the ratio is made of: ptmlab's MLM applies the
vocabulary head to the masked positions only (15%), the Trainer's ``BertForMaskedLM`` to every position; the rest is
the same model and optimizer. Machine load (``os.getloadavg``) is recorded before and after.

    python benchmarks/pretrain.py [--files ../shared/data/text/wikitext-2] [--precision fp32,bf16] [--device cuda]

Writes benchmarks/results/pretrain.MACHINE.json and prints a table.
"""

from __future__ import annotations

# isort: off
from _env import ROOT, machine_info, portable, result_path  # first: offline defaults
# isort: on

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path


def ptmlab_run(args, objective: str, precision: str, out: Path) -> dict:
    from ptmlab.core.config import build_config
    from ptmlab.pretrain.config import PretrainConfig
    from ptmlab.pretrain.run import run_pretrain

    cfg = build_config(PretrainConfig, dict(
        files=args.files, tokenizer="minilm", objective=objective, size=args.size, block_size=args.block_size,
        batch_size=args.batch_size, lr=5e-4, max_steps=args.steps, eval_blocks=args.batch_size, seed=0,
        precision=precision, output=str(out), overwrite=True, logging_steps=args.steps, eval_steps=0,
        warmup=0.0), source="benchmark")
    s = run_pretrain(cfg, command="benchmark")
    positions = s["steps"] * args.batch_size * args.block_size
    return {"seconds": s["train_seconds"], "steps": s["steps"], "tokens_per_second": positions / s["train_seconds"],
            "seconds_per_step": s["train_seconds"] / s["steps"], "precision": s["precision"],
            "flops_per_token": s["flops_per_token"]}


def blocks(args) -> list[list[int]]:
    """The training blocks ptmlab's MLM trains on, as ``[CLS] block [SEP]`` id lists."""
    from ptmlab.models.zoo import load_tokenizer
    from ptmlab.pretrain.corpus import pack_blocks, tokenize_corpus
    from ptmlab.pretrain.objectives import build_objective

    tok = load_tokenizer("minilm")
    obj = build_objective("mlm", tok)
    train, _ = tokenize_corpus(args.files, tok).split(0.05, 0)
    packed = pack_blocks(train, obj.content_length(args.block_size), obj.separator())
    n = min(len(packed), args.steps * args.batch_size)
    return [[tok.cls_token_id, *map(int, packed[i]), tok.sep_token_id] for i in range(n)]


def StepClock():
    """A Trainer callback timing the steps alone (first step's start to last step's end), like ptmlab's
    ``train_seconds``; the Trainer's own ``train_runtime`` also counts its set-up."""
    from transformers import TrainerCallback

    class _Clock(TrainerCallback):
        seconds = 0.0
        _start: float | None = None

        def on_step_begin(self, args, state, control, **kw):
            if self._start is None:
                self._start = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            self.seconds = time.perf_counter() - self._start

    return _Clock()


def trainer_run(args, precision: str, data: list[list[int]], out: Path) -> dict:
    import torch
    from datasets import Dataset
    from transformers import DataCollatorForLanguageModeling, Trainer, TrainingArguments, set_seed

    from ptmlab.models.zoo import load_tokenizer
    from ptmlab.pretrain.models import build_scratch, size

    tok = load_tokenizer("minilm")
    set_seed(0)
    model = build_scratch("bert", **size(args.size), tokenizer=tok, max_positions=max(args.block_size, 512),
                          objective="mlm")
    ds = Dataset.from_dict({"input_ids": data})
    targs = TrainingArguments(
        output_dir=str(out), per_device_train_batch_size=args.batch_size, max_steps=args.steps, learning_rate=5e-4,
        warmup_steps=0, lr_scheduler_type="linear", weight_decay=0.01, max_grad_norm=1.0,
        bf16=precision == "bf16", logging_steps=args.steps, save_strategy="no", report_to=[],
        dataloader_num_workers=0, seed=0, disable_tqdm=True, use_cpu=args.device == "cpu")
    collator = DataCollatorForLanguageModeling(tok, mlm_probability=0.15)
    clock = StepClock()
    trainer = Trainer(model=model, args=targs, train_dataset=ds, data_collator=collator, callbacks=[clock])
    trainer.train()
    if args.device == "cuda":
        torch.cuda.synchronize()
    seconds = clock.seconds
    steps = trainer.state.global_step
    positions = steps * args.batch_size * args.block_size
    return {"seconds": seconds, "steps": steps, "tokens_per_second": positions / seconds,
            "seconds_per_step": seconds / steps, "precision": precision}


def summarise(runs: list[dict]) -> dict:
    tps = [r["tokens_per_second"] for r in runs]
    sps = [r["seconds_per_step"] for r in runs]
    return {"tokens_per_second_median": round(statistics.median(tps), 1), "tokens_per_second_min": round(min(tps), 1),
            "tokens_per_second_max": round(max(tps), 1), "seconds_per_step_median": round(statistics.median(sps), 4),
            "runs": runs}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--files", default=str(ROOT.parent / "shared" / "data" / "text" / "wikitext-2"))
    p.add_argument("--size", default="tiny", help="named size of the BERT (ptmlab.pretrain.models.SIZES)")
    p.add_argument("--block-size", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--precision", default="fp32,bf16", help="comma-separated: fp32, bf16")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--out", default=None, help="result JSON (default: pretrain.MACHINE.json)")
    args = p.parse_args()
    args.files = [args.files]
    if not Path(args.files[0]).exists():
        print(f"error: no text at {args.files[0]}: pass --files", file=sys.stderr)
        return 2
    if args.device == "cpu":
        os.environ["CUDA_VISIBLE_DEVICES"] = ""  # both sides on the CPU even where a GPU is present
    import torch

    load_before = os.getloadavg()
    data = blocks(args)
    results: dict = {"machine": {**machine_info(args.device), "torch_threads": torch.get_num_threads(),
                                 "device": args.device, "loadavg_before": [round(x, 2) for x in load_before]},
                     "job": {"model": f"bert {args.size} from scratch", "tokenizer": "minilm",
                             "block_size": args.block_size, "batch_size": args.batch_size, "steps": args.steps,
                             "repeats": args.repeats, "files": [portable(f) for f in args.files]}, "precisions": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for precision in args.precision.split(","):
            ours, theirs, electra = [], [], []
            for r in range(args.repeats):
                ours.append(ptmlab_run(args, "mlm", precision, Path(tmp) / f"p{r}"))
                theirs.append(trainer_run(args, precision, data, Path(tmp) / f"t{r}"))
                electra.append(ptmlab_run(args, "electra", precision, Path(tmp) / f"e{r}"))
                print(f"{precision} repeat {r}: ptmlab {ours[-1]['tokens_per_second']:.0f} tok/s, Trainer "
                      f"{theirs[-1]['tokens_per_second']:.0f} tok/s, electra {electra[-1]['seconds_per_step']:.3f} "
                      f"s/step", flush=True)
            o, t, e = summarise(ours), summarise(theirs), summarise(electra)
            results["precisions"][precision] = {
                "ptmlab_mlm": o, "trainer_mlm": t, "ptmlab_electra": e,
                "speedup": round(o["tokens_per_second_median"] / t["tokens_per_second_median"], 2),
                "electra_step_cost_vs_mlm": round(e["seconds_per_step_median"] / o["seconds_per_step_median"], 2),
                "electra_flops_per_token_vs_mlm": round(electra[0]["flops_per_token"] / ours[0]["flops_per_token"],
                                                        2)}
    results["machine"]["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
    out = Path(args.out or result_path("pretrain", args.device))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    print("\n| precision | ptmlab MLM tok/s (min-max) | Trainer MLM tok/s (min-max) | speedup | ELECTRA s/step "
          "vs MLM | ELECTRA FLOPs/token vs MLM |\n|---|---|---|---|---|---|")
    for precision, r in results["precisions"].items():
        o, t = r["ptmlab_mlm"], r["trainer_mlm"]
        print(f"| {precision} | {o['tokens_per_second_median']:.0f} ({o['tokens_per_second_min']:.0f}-"
              f"{o['tokens_per_second_max']:.0f}) | {t['tokens_per_second_median']:.0f} "
              f"({t['tokens_per_second_min']:.0f}-{t['tokens_per_second_max']:.0f}) | {r['speedup']:.2f}x | "
              f"{r['electra_step_cost_vs_mlm']:.2f}x | {r['electra_flops_per_token_vs_mlm']:.2f}x |")
    print(f"load average before {results['machine']['loadavg_before']}, after {results['machine']['loadavg_after']}")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
