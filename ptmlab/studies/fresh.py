"""Labelled rows no run has read: the sentences a confirmatory rerun scores when the earlier runs of a study read
every dev sentence (and chose their design on them).

A task's training split is larger than any study's training subset; the rows that no fine-tuning of seeds 0 to the
largest seed reads at ``--max-train`` (the seeds of earlier runs among them), that the dev split does not hold, and
that contain no row those fine-tunings read (SST-2's training rows are phrases of its sentences: a sentence whose
labelled phrases were trained on is not fresh) are fresh for every run of that study with those seeds.
"""

from __future__ import annotations

from ptmlab.core.errors import PtmlabError

FRESH_SEED = 2026  # the draw of the fresh rows, fixed before any run read them
SHORTEST_SHARED = 3  # a fresh row contains no fine-tuned row of this many words or more


def fresh_rows(task: str, glue_dir: str | None, max_train: int | None, last_seed: int, n: int | None,
               min_words: int):
    """``n`` (None or 0: all) rows of ``task``'s training split outside every fine-tuning subset of seeds
    0..``last_seed`` at ``max_train`` and outside dev, of at least ``min_words`` words, holding no fine-tuned row of
    ``SHORTEST_SHARED`` words or more; drawn with ``FRESH_SEED`` (the same rows every run)."""
    from ptmlab.data.loaders import load_task, subset

    data = load_task(task, glue_dir)
    train, dev = data.splits["train"], data.splits.get("dev")
    read: set[str] = set()
    for s in range(max(last_seed, 0) + 1):
        read.update(t.strip() for t in subset(train, max_train, s).text)
    seen = read | {t.strip() for t in (dev.text if dev is not None else [])}
    phrases = {t for t in read if len(t.split()) >= SHORTEST_SHARED}

    def fresh(text: str) -> bool:
        words = text.split()
        if len(words) < min_words or text.strip() in seen:
            return False
        return not any(" ".join(words[i:j]) in phrases
                       for i in range(len(words)) for j in range(i + SHORTEST_SHARED, len(words) + 1))

    keep = [i for i, t in enumerate(train.text) if fresh(t)]
    if not keep:
        raise PtmlabError(f"task '{task}': no training row is outside every fine-tuning subset of seeds 0-"
                          f"{last_seed} with at least {min_words} words: lower --max-train or --min-words")
    return subset(train.select(keep), n, FRESH_SEED)


def rows_hash(rows) -> dict:
    """What a preregistration records of fresh rows: how many and a SHA-256 of their ids (else texts)."""
    import hashlib

    ids = "\n".join(str(i) for i in rows.ids) if rows.ids else "\n".join(rows.text)
    return {"rows": "fresh", "examples": len(rows), "sha256": hashlib.sha256(ids.encode()).hexdigest()}
