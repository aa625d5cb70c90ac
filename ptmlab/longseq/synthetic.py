"""A synthetic long-document task for quick runs (the long-attention study's ``--budget small``, tests).

Each document is ``words`` filler words with a few class keywords (``marks``) scattered at random positions;
the label is the class whose keywords appear. The evidence is spread over the whole document, so a model that reads
only the first part of it (truncation) sees it only part of the time, while chunk-and-pool and window attention see
all of it. It needs no shared data, which is why the small budget uses it; it is not evidence about real documents.
"""

from __future__ import annotations

import random
from pathlib import Path

from ptmlab.core.io import atomic_write_text

CLASSES = {"north": ["glacier", "tundra", "reindeer"], "south": ["desert", "cactus", "camel"]}
FILLER = ["the", "road", "went", "on", "and", "a", "small", "house", "stood", "near", "river", "with", "old", "trees",
          "people", "walked", "slowly", "under", "grey", "sky", "while", "birds", "sang", "in", "morning", "light"]


def long_documents(n: int, words: int, marks: int = 2, seed: int = 0) -> list[tuple[str, str]]:
    """``n`` (text, label) pairs of ``words`` filler words with ``marks`` keywords of the label's class."""
    rng = random.Random(seed)
    names = sorted(CLASSES)
    rows = []
    for _ in range(n):
        label = rng.choice(names)
        body = rng.choices(FILLER, k=words)
        for _ in range(marks):
            body[rng.randrange(words)] = rng.choice(CLASSES[label])
        rows.append((" ".join(body), label))
    return rows


def write_long_task(folder: str | Path, n_train: int, n_dev: int, words: int, marks: int = 2,
                    seed: int = 0) -> dict[str, str]:
    """Write train.csv and dev.csv (columns text,label) into ``folder``; returns {split: path}."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = {}
    for split, n, s in (("train", n_train, seed), ("dev", n_dev, seed + 1)):
        lines = ["text,label"] + [f"{text},{label}" for text, label in long_documents(n, words, marks, s)]
        path = folder / f"{split}.csv"
        atomic_write_text(path, "\n".join(lines) + "\n")
        paths[split] = str(path)
    return paths
