"""Batches: length-grouped index batches (seeded, resumable) and dynamic padding."""

from __future__ import annotations

import random

import torch

from ptmlab.data.encode import Encoded


def train_batches(lengths: list[int], batch_size: int, seed: int, epoch: int, group_by_length: bool = True,
                  mega: int = 50) -> list[list[int]]:
    """Index batches for one epoch, a pure function of (seed, epoch) so a resumed run sees the same order.

    With grouping, a seeded shuffle is cut into mega-chunks of ``mega`` batches, each sorted by length and cut
    into batches, and the batches are shuffled: similar lengths share a batch, so little padding is computed.
    """
    rng = random.Random(seed * 1000003 + epoch)
    idx = list(range(len(lengths)))
    rng.shuffle(idx)
    if group_by_length:
        chunk = batch_size * mega
        grouped = []
        for s in range(0, len(idx), chunk):
            part = sorted(idx[s:s + chunk], key=lambda i: -lengths[i])
            grouped.extend(part)
        idx = grouped
    batches = [idx[s:s + batch_size] for s in range(0, len(idx), batch_size)]
    if group_by_length:
        rng.shuffle(batches)
    return batches


def eval_batches(lengths: list[int], batch_size: int) -> list[list[int]]:
    """Batches sorted by length (longest first) for evaluation; callers put predictions back in order."""
    idx = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    return [idx[s:s + batch_size] for s in range(0, len(idx), batch_size)]


def shard(batch: list[int], rank: int, world: int) -> list[int]:
    """This process's contiguous part of a global batch."""
    n = len(batch)
    lo = (n * rank) // world
    hi = (n * (rank + 1)) // world
    return batch[lo:hi]


def pad_rows(rows: list[list[int]], pad_value: int, width: int | None = None) -> torch.Tensor:
    """Rows of ids as one [n, width] long tensor, right-padded with ``pad_value`` (width: the longest row)."""
    width = width or max(len(r) for r in rows)
    out = torch.full((len(rows), width), pad_value, dtype=torch.long)
    for i, r in enumerate(rows):
        out[i, : len(r)] = torch.tensor(r, dtype=torch.long)
    return out


def padded_ids(rows: list[list[int]], pad_id: int, width: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``input_ids`` and ``attention_mask`` of a batch of token id rows, right-padded to ``width``."""
    ids = pad_rows(rows, pad_id, width)
    mask = pad_rows([[1] * len(r) for r in rows], 0, ids.shape[1])
    return ids, mask


def collate(enc: Encoded, idx: list[int], pad_id: int, regression: bool = False, pad_to: int = 1) -> dict:
    """Pad a batch to its longest example (rounded up to a multiple of ``pad_to``; 1 on CPUs, where any extra
    position is wasted work)."""
    longest = max(len(enc.input_ids[i]) for i in idx)
    if pad_to > 1:
        longest = ((longest + pad_to - 1) // pad_to) * pad_to
    ids, mask = padded_ids([enc.input_ids[i] for i in idx], pad_id, longest)
    tt = pad_rows([enc.token_type_ids[i] for i in idx], 0, longest) if enc.token_type_ids is not None else None
    batch = {"input_ids": ids, "attention_mask": mask, "index": torch.tensor(idx)}
    if tt is not None:
        batch["token_type_ids"] = tt
    if enc.labels is not None:
        labels = [enc.labels[i] for i in idx]
        multi_hot = isinstance(labels[0], list | tuple)  # multi-label: a float row of 0/1 per example
        batch["labels"] = torch.tensor(labels, dtype=torch.float if regression or multi_hot else torch.long)
    return batch
