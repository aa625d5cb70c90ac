"""A small learnable text-classification task written to CSV files (no shared data needed)."""

from __future__ import annotations

import random
from pathlib import Path

POS = ["excellent", "great", "wonderful", "superb", "delightful"]
NEG = ["terrible", "awful", "boring", "dreadful", "poor"]
FILL = ["the", "film", "was", "plot", "actors", "a", "really", "story", "and", "music", "scene", "quite"]


def write_task(folder: Path, n_train: int = 400, n_dev: int = 100, seed: int = 0) -> dict[str, str]:
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    paths = {}
    for split, n in (("train", n_train), ("dev", n_dev)):
        lines = ["text,label"]
        for _ in range(n):
            label = rng.random() < 0.5
            words = rng.choices(FILL, k=rng.randint(3, 12))
            words.insert(rng.randint(0, len(words)), rng.choice(POS if label else NEG))
            lines.append(f"{' '.join(words)},{'pos' if label else 'neg'}")
        p = folder / f"{split}.csv"
        p.write_text("\n".join(lines) + "\n")
        paths[split] = str(p)
    return paths


def tiny_teacher(files: dict, out) -> str:
    """A `tiny` classifier fine-tuned for 24 steps on a ``write_task`` task: the teacher of the distillation tests."""
    from ptmlab.train.args import FinetuneConfig
    from ptmlab.train.finetune import run_finetune

    run_finetune(FinetuneConfig(model="tiny", task="synthetic", train_file=files["train"], dev_file=files["dev"],
                                max_length=32, lr=3e-3, batch_size=16, max_steps=24, seed=0, output=str(out),
                                precision="fp32"))
    return str(out)
