"""Shared masking steps: wrap a block in its special tokens, find words, apply BERT's 80/10/10 replacement.

BERT (Devlin et al., 2019, §3.1 and appendix A.1) picks 15% of the positions of a sequence as prediction
targets and replaces a picked token by [MASK] 80% of the time, a random token 10% and leaves it unchanged 10%;
the loss is on the picked positions only. The count is ``round(0.15 * n)`` per sequence, as in BERT's
``create_pretraining_data``.
"""

from __future__ import annotations

import numpy as np

from ptmlab.pretrain.objectives.tokens import TokenInfo


def with_specials(block: np.ndarray, tok: TokenInfo) -> tuple[np.ndarray, np.ndarray]:
    """(ids, candidates): the block between the tokenizer's prefix and suffix, and the positions that may be
    corrupted (the block's own tokens, minus special ids such as the document separator)."""
    ids = np.concatenate([np.asarray(tok.prefix, np.int64), block, np.asarray(tok.suffix, np.int64)])
    cand = np.zeros(len(ids), dtype=bool)
    cand[len(tok.prefix):len(tok.prefix) + len(block)] = True
    cand &= ~tok.special[ids]
    return ids, cand


def budget(n: int, rate: float) -> int:
    """How many of ``n`` candidate positions a rate selects: round(rate * n), at least 1 when n > 0."""
    return 0 if n == 0 else max(1, int(round(rate * n)))


def choose_positions(rng: np.random.Generator, candidates: np.ndarray, rate: float) -> np.ndarray:
    """Sorted positions: ``budget(#candidates, rate)`` of the candidate positions, uniformly without replacement."""
    pos = np.flatnonzero(candidates)
    k = budget(len(pos), rate)
    return np.sort(rng.choice(pos, size=k, replace=False)) if k else pos[:0]


def word_ids(ids: np.ndarray, tok: TokenInfo) -> np.ndarray:
    """Word index of every position: a new word starts at every piece that does not continue the previous one
    (special tokens are words of their own, so a piece after one starts a word too)."""
    special = tok.special[ids]
    starts = ~tok.continuation[ids] | special
    starts[1:] |= special[:-1]
    starts[0] = True
    return np.cumsum(starts) - 1


def replace_80_10_10(rng: np.random.Generator, ids: np.ndarray, positions: np.ndarray, tok: TokenInfo,
                     units: np.ndarray | None = None, mask_rate: float = 0.8,
                     random_rate: float = 0.1) -> tuple[np.ndarray, np.ndarray]:
    """(inputs, labels): ``positions`` get [MASK] / a random token / themselves with rates 0.8 / 0.1 / 0.1.

    With ``units`` (one unit index per position, e.g. its span) the choice is made once per unit (SpanBERT);
    labels are the original ids at ``positions`` and -100 elsewhere."""
    inputs = ids.copy()
    labels = np.full(len(ids), -100, dtype=np.int64)
    labels[positions] = ids[positions]
    if len(positions) == 0:
        return inputs, labels
    if units is None:
        u = rng.random(len(positions))
    else:
        u = rng.random(int(units.max()) + 1)[units]
    masked = positions[u < mask_rate]
    rand = positions[(u >= mask_rate) & (u < mask_rate + random_rate)]
    inputs[masked] = tok.mask_id
    if len(rand):
        inputs[rand] = tok.random_pool[rng.integers(0, len(tok.random_pool), size=len(rand))]
    return inputs, labels
