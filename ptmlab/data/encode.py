"""Tokenize a split once and cache the token ids on disk, keyed by tokenizer, max length and texts."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from ptmlab.core.io import atomic_save_file
from ptmlab.data.loaders import Split


def cache_dir() -> Path:
    home = Path(os.environ.get("PTMLAB_CACHE", Path.home() / ".cache" / "ptmlab"))
    return home / "tokens"


class TokenRows:
    """``len`` and ``lengths`` of a batch source holding one row of token ids per example in ``input_ids``."""

    def __len__(self) -> int:
        return len(self.input_ids)

    @property
    def lengths(self) -> list[int]:
        return [len(x) for x in self.input_ids]


@dataclass
class Encoded(TokenRows):
    """Variable-length token ids of one split, plus labels; ``lengths[i]`` is example i's length."""

    input_ids: list[list[int]]
    token_type_ids: list[list[int]] | None
    labels: list | None


def _tokenizer_fingerprint(tokenizer) -> str:
    """What the tokenizer does to text, not the call state: the backend's truncation and padding settings change
    with every call (``truncation=True`` sets them, a later call clears them), so they are left out; otherwise the
    same tokenizer would give a different cache key after its first use."""
    import json

    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        body = repr(sorted(tokenizer.get_vocab().items())[:2000])
    else:
        spec = json.loads(backend.to_str())
        spec.pop("truncation", None)
        spec.pop("padding", None)
        body = json.dumps(spec, sort_keys=True)
    return hashlib.sha256(body.encode()).hexdigest()[:16]


def _key(tokenizer, split: Split, max_length: int) -> str:
    h = hashlib.sha256()
    h.update(_tokenizer_fingerprint(tokenizer).encode())
    h.update(str(max_length).encode())
    for i, t in enumerate(split.text):
        h.update(t.encode("utf-8", "surrogatepass"))
        h.update(b"\x00")
        if split.text_pair is not None:
            h.update(split.text_pair[i].encode("utf-8", "surrogatepass"))
        h.update(b"\x01")
    return h.hexdigest()[:32]


def encode_split(tokenizer, split: Split, max_length: int, use_cache: bool = True) -> Encoded:
    """Token ids for every example (truncated to max_length), read from the cache when present. A split that
    encodes itself (tagged sentences, questions with contexts: ``data/tokens.py``, ``data/qa.py``) does so."""
    if hasattr(split, "encode"):
        return split.encode(tokenizer, max_length)
    key = _key(tokenizer, split, max_length)
    path = cache_dir() / f"{key}.safetensors"
    ids = tt = None
    if use_cache and path.is_file():
        try:
            ids, tt = _load(path)
        except Exception:  # a corrupt cache file is rebuilt, never trusted
            ids = tt = None
    if ids is None:
        enc = tokenizer(split.text, split.text_pair, truncation=True, max_length=max_length,
                        return_token_type_ids=True, return_attention_mask=False)
        ids = enc["input_ids"]
        tt = enc.get("token_type_ids")
        if tt is not None and all(not any(x) for x in tt):
            tt = None  # single sentences: all zeros, not worth storing
        if use_cache:
            _save(path, ids, tt)
    return Encoded(ids, tt, list(split.label) if split.label is not None else None)


def _save(path: Path, ids, tt) -> None:
    lengths = torch.tensor([len(x) for x in ids], dtype=torch.int32)
    flat = torch.tensor([t for x in ids for t in x], dtype=torch.int32)
    tensors = {"lengths": lengths, "ids": flat}
    if tt is not None:
        tensors["tt"] = torch.tensor([t for x in tt for t in x], dtype=torch.int8)
    try:
        atomic_save_file(tensors, path)
    except OSError:
        pass  # a read-only cache only costs speed


def _load(path: Path):
    from safetensors.torch import load_file

    t = load_file(path)
    lengths = t["lengths"].tolist()
    flat = t["ids"].tolist()
    out, pos = [], 0
    for n in lengths:
        out.append(flat[pos:pos + n])
        pos += n
    tt = None
    if "tt" in t:
        tflat = t["tt"].tolist()
        tt, pos = [], 0
        for n in lengths:
            tt.append(tflat[pos:pos + n])
            pos += n
    return out, tt
