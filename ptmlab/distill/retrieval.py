"""Bitext retrieval (the Tatoeba protocol): for each source sentence, the nearest target sentence by cosine over the
whole target side; accuracy is the share of sources whose nearest neighbour is their own translation, and the same
from the target side back. Also STS Spearman (cosine vs gold score), to check a student kept its teacher's English.
"""

from __future__ import annotations

import numpy as np

from ptmlab.data.metrics import cosine_correlations, ranking_metrics  # noqa: F401 (retrieval's own metrics)
from ptmlab.distill.parallel import Pairs
from ptmlab.train.sentence import SentenceEncoder, encode_texts


def retrieval_hits(src_vec: np.ndarray, tgt_vec: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per sentence, 1.0 where nearest-neighbour search on normalised vectors finds its translation: (each source
    sentence among the targets, each target sentence among the sources)."""
    sim = src_vec @ tgt_vec.T
    gold = np.arange(len(src_vec))
    return (sim.argmax(1) == gold).astype(float), (sim.argmax(0) == gold).astype(float)


def retrieval_accuracy(src_vec: np.ndarray, tgt_vec: np.ndarray) -> tuple[float, float]:
    """(source->target, target->source) accuracy of nearest-neighbour search on normalised vectors."""
    fwd, back = retrieval_hits(src_vec, tgt_vec)
    return float(fwd.mean()), float(back.mean())


def evaluate_pairs(model: SentenceEncoder, tokenizer, pairs: Pairs, max_length: int = 128,
                   batch_size: int = 128) -> dict:
    """Retrieval accuracy of one parallel set, in both directions (in %), and each sentence's hit (``hits``: 1.0 /
    0.0 per pair, in order, per direction)."""
    a = encode_texts(model, tokenizer, pairs.src, max_length, batch_size)
    b = encode_texts(model, tokenizer, pairs.tgt, max_length, batch_size)
    fwd, back = retrieval_hits(a, b)
    return {"src": pairs.src_file, "tgt": pairs.tgt_file, "pairs": len(pairs),
            "src_to_tgt": round(100 * float(fwd.mean()), 2), "tgt_to_src": round(100 * float(back.mean()), 2),
            "hits": {"src_to_tgt": fwd, "tgt_to_src": back}}


def sts_spearman(model: SentenceEncoder, tokenizer, first: list[str], second: list[str], gold: list[float],
                 max_length: int = 128, batch_size: int = 128) -> float:
    """Spearman correlation between cosine(first_i, second_i) and the gold similarity (no fine-tuning)."""
    from scipy.stats import spearmanr

    a = encode_texts(model, tokenizer, first, max_length, batch_size)
    b = encode_texts(model, tokenizer, second, max_length, batch_size)
    return float(spearmanr((a * b).sum(1), gold).statistic)
