"""Investigation: does batching by length cost a token tagger accuracy, and at what training budget?

ptmlab groups training batches by length (``--group-by-length``, on by default: mega-chunks of 50 batches sorted by
length, the batches shuffled), which spares most of the padding; transformers' Trainer samples at random by default.
On CoNLL-2003 with 4,000 sentences and one epoch (125 steps) ptmlab's tagger ended below the Trainer's, so this
fine-tunes minilm with and without grouping, at two training sizes and over seeds, everything else at ptmlab's
defaults (lr 5e-5, linear schedule, 6% warm-up, batch 32, bf16 where the CPU has it), and reads the entity F1 on the
development split (testa; testb, which the NER/QA benchmark reports, is not looked at). The training time is the
loop's wall time, so the two sides' ratio is what grouping saves.

    python benchmarks/investigations/ner_grouping.py [--sizes 4000,all] [--seeds 1,2] [--runs DIR]

``--runs DIR`` keeps the run directories; a run whose directory already holds a finished run of the same settings
(its config.yaml) is read, not trained again.
"""

from __future__ import annotations

# isort: off
import _shared  # noqa: F401  (first: the benchmarks' helpers and offline defaults)
# isort: on

import argparse
import os
import statistics
import tempfile
from pathlib import Path

from _env import machine_info, result_path


def one_run(model: str, size: int | None, seed: int, grouped: bool, run: Path) -> dict:
    from ptmlab.core.errors import PtmlabError
    from ptmlab.studies.common import finished_variant
    from ptmlab.train.args import FinetuneConfig
    from ptmlab.train.finetune import run_finetune

    cfg = FinetuneConfig(model=model, task="conll2003", max_train=size, epochs=1.0, seed=seed,
                         group_by_length=grouped, test=False, output=str(run), overwrite=True)
    try:
        summary = finished_variant(run, cfg)
    except PtmlabError:  # a finished run of other settings: trained again over it
        summary = None
    reused = summary is not None
    if not reused:
        summary = run_finetune(cfg)
    return {"seed": seed, "entity_f1": round(summary["metrics"]["entity_f1"], 4),
            "train_seconds": summary["train_seconds"], "steps": summary["steps"], "reused_run": reused}


def main() -> None:
    from ptmlab.core.io import atomic_write_json

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="minilm")
    p.add_argument("--sizes", default="4000,all", help="training sentences per run (all: the 14,041 of train)")
    p.add_argument("--seeds", default="1,2")
    p.add_argument("--runs", help="keep the run directories here (default: a temporary folder, removed)")
    p.add_argument("--output", default=str(result_path("ner_grouping", investigation=True)))
    a = p.parse_args()
    sizes = [None if s == "all" else int(s) for s in a.sizes.split(",")]
    seeds = [int(s) for s in a.seeds.split(",")]
    tmp = None if a.runs else tempfile.TemporaryDirectory()
    root = Path(a.runs or tmp.name)
    rows = []
    for size in sizes:
        row, seconds = {"train_sentences": size or "all", "sides": {}}, {}
        for grouped in (True, False):
            side = "grouped" if grouped else "random"
            runs = [one_run(a.model, size, seed, grouped, root / f"{size or 'all'}-{side}-{seed}") for seed in seeds]
            f1 = [r["entity_f1"] for r in runs]
            seconds[side] = statistics.mean(r["train_seconds"] for r in runs)
            row["sides"][side] = {"runs": runs, "entity_f1_mean": round(statistics.mean(f1), 4),
                                  "train_seconds_mean": round(seconds[side], 1)}
        g, r = row["sides"]["grouped"], row["sides"]["random"]
        row["f1_grouped_minus_random_per_seed"] = [round(x["entity_f1"] - y["entity_f1"], 4)
                                                   for x, y in zip(g["runs"], r["runs"], strict=True)]
        row["time_random_over_grouped"] = round(seconds["random"] / max(seconds["grouped"], 1e-9), 2)
        rows.append(row)
        print(f"{size or 'all':>5} sentences: dev F1 grouped {g['entity_f1_mean']:.4f} random "
              f"{r['entity_f1_mean']:.4f} (per seed grouped - random {row['f1_grouped_minus_random_per_seed']}); "
              f"training time random / grouped {row['time_random_over_grouped']}x", flush=True)
        atomic_write_json(Path(a.output), {
            "machine": machine_info(), "model": a.model, "task": "conll2003", "scored_on": "dev (testa)",
            "epochs": 1, "seeds": seeds, "rows": rows, "load_average_end": os.getloadavg(),
            "settings": "ptmlab finetune defaults (lr 5e-5, linear, 6% warm-up, batch 32, max length 128); only "
                        "--group-by-length differs"})
    print(f"written: {a.output}")
    if tmp is not None:
        tmp.cleanup()


if __name__ == "__main__":
    main()
