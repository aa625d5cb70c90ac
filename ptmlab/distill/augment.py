"""TinyBERT-style data augmentation: copies of each training example in which whole-word tokens are replaced,
with probability ``prob``, by one of their nearest neighbours (cosine) in the teacher's word-embedding space."""

from __future__ import annotations

import random

import torch
import torch.nn.functional as F

from ptmlab.core.progress import progress
from ptmlab.data.encode import Encoded
from ptmlab.models.structure import structure_of


def _word_ids(tokenizer) -> list[int]:
    """Vocabulary entries that are plain words (no sub-word marker, no special or unused tokens)."""
    special = set(tokenizer.all_special_ids)
    out = []
    for tok, i in tokenizer.get_vocab().items():
        if i in special or tok.startswith(("##", "[", "<")):
            continue
        if tok.isalpha():
            out.append(i)
    return sorted(out)


def neighbours(teacher, tokenizer, token_ids: list[int], k: int = 8) -> dict[int, list[int]]:
    """The k nearest plain-word tokens of each token in ``token_ids`` (itself excluded)."""
    s = structure_of(teacher)
    emb = s.encoder(teacher).get_submodule(s.word_embeddings).weight.detach().float()
    cand = torch.tensor(_word_ids(tokenizer))
    cand_emb = F.normalize(emb[cand], dim=-1)
    out: dict[int, list[int]] = {}
    for lo in range(0, len(token_ids), 512):
        chunk = token_ids[lo:lo + 512]
        sims = F.normalize(emb[torch.tensor(chunk)], dim=-1) @ cand_emb.T
        top = sims.topk(k + 1, dim=-1).indices
        for row, t in enumerate(chunk):
            out[t] = [int(c) for c in cand[top[row]] if int(c) != t][:k]
    return out


def augment(enc: Encoded, teacher, tokenizer, copies: int, prob: float, seed: int, k: int = 8) -> Encoded:
    """``enc`` followed by ``copies`` augmented copies of every example (labels copied; the teacher relabels
    them through its soft targets)."""
    if copies <= 0:
        return enc
    words = set(_word_ids(tokenizer))
    pieces = {i for tok, i in tokenizer.get_vocab().items() if tok.startswith("##")}
    used = sorted({t for ids in enc.input_ids for t in ids if t in words})
    near = neighbours(teacher, tokenizer, used, k)
    rng = random.Random(seed)
    ids, tts, labels = list(enc.input_ids), list(enc.token_type_ids or []), list(enc.labels or [])
    for _ in progress(range(copies), desc="augment"):
        for i, seq in enumerate(enc.input_ids):
            new = list(seq)
            for p, t in enumerate(seq):
                whole = t in near and (p + 1 == len(seq) or seq[p + 1] not in pieces)
                if whole and near[t] and rng.random() < prob:
                    new[p] = rng.choice(near[t])
            ids.append(new)
            if enc.token_type_ids is not None:
                tts.append(enc.token_type_ids[i])
            if enc.labels is not None:
                labels.append(enc.labels[i])
    return Encoded(ids, tts if enc.token_type_ids is not None else None, labels if enc.labels is not None else None)
