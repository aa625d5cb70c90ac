"""Sentence-embedding models: an encoder plus the pooling its sentence-transformers config names.

``SentenceEncoder`` wraps a transformers encoder so that its output's ``logits`` are the sentence vectors: the one
training loop, the teacher cache and batched inference then treat a sentence embedder like any model with a head
(no second inference or caching path). ``load_sentence_model`` reads any zoo name, run directory, model directory
or sentence-transformers directory (pooling from ``modules.json`` / ``1_Pooling/config.json``; mean pooling when a
plain encoder has none). ``save_sentence_model`` writes the sentence-transformers layout (modules.json, pooling
config, sentence_bert_config.json, weights, tokenizer), so the ``sentence-transformers`` package loads the result
and every ptmlab command that takes a model directory does too.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ptmlab.core.errors import PtmlabError
from ptmlab.core.io import atomic_write_json

POOLING_MODES = ("mean", "cls", "max")
_ST_POOLING_KEYS = {"mean": "pooling_mode_mean_tokens", "cls": "pooling_mode_cls_token",
                    "max": "pooling_mode_max_tokens"}


@dataclass
class SentenceOutput:
    logits: torch.Tensor  # [B, H] sentence vectors (named logits so the loop's inference reads them)


def pool(states: torch.Tensor, mask: torch.Tensor, mode: str) -> torch.Tensor:
    """Token states [B, T, H] -> sentence vectors [B, H] over the real tokens."""
    if mode == "cls":
        return states[:, 0]
    m = mask.unsqueeze(-1).to(states.dtype)
    if mode == "max":
        return states.masked_fill(m == 0, torch.finfo(states.dtype).min).max(1).values
    return (states * m).sum(1) / m.sum(1).clamp_min(1e-9)


class SentenceEncoder(nn.Module):
    """Encoder + pooling (+ L2 normalisation when the model's pipeline has a Normalize module)."""

    def __init__(self, encoder: nn.Module, pooling: str = "mean", normalize: bool = False, max_seq_length: int = 256):
        super().__init__()
        if pooling not in POOLING_MODES:
            raise PtmlabError(f"pooling '{pooling}' is unknown: use one of {', '.join(POOLING_MODES)}")
        # the encoder sits under its base-model prefix ("bert", "mpnet", ...), as in a task model, so the structure
        # map, layer-wise optimizer groups and feature hooks find its layers
        self.prefix = getattr(encoder, "base_model_prefix", "") or "encoder"
        self.add_module(self.prefix, encoder)
        self.config = encoder.config
        self.pooling, self.normalize, self.max_seq_length = pooling, normalize, max_seq_length

    @property
    def encoder(self) -> nn.Module:
        return getattr(self, self.prefix)

    def forward(self, input_ids, attention_mask, token_type_ids=None) -> SentenceOutput:
        kw = {"token_type_ids": token_type_ids} if token_type_ids is not None else {}
        states = self.encoder(input_ids=input_ids, attention_mask=attention_mask, **kw).last_hidden_state
        vec = pool(states, attention_mask, self.pooling)
        return SentenceOutput(F.normalize(vec, dim=-1) if self.normalize else vec)

    def describe(self) -> str:
        return f"{self.pooling} pooling{' + normalize' if self.normalize else ''}"

    def save_pretrained(self, path: str | Path, **kwargs) -> None:
        """The encoder's ``save_pretrained`` plus the sentence-transformers module files (``save_model`` calls it)."""
        out = Path(path)
        self.encoder.config.architectures = [type(self.encoder).__name__]
        self.encoder.save_pretrained(out, **kwargs)
        write_st_files(self, out)


def read_pooling(path: Path) -> tuple[str, bool, int]:
    """(pooling mode, normalize, max_seq_length) of a model directory; mean / no / 256 without an ST config."""
    modules_file = path / "modules.json"
    mode, normalize, max_len = "mean", False, 256
    if not modules_file.is_file():
        return mode, normalize, max_len
    try:
        modules = json.loads(modules_file.read_text(encoding="utf-8"))
        for m in modules:
            kind = str(m.get("type", ""))
            if kind.endswith("Pooling"):
                conf = json.loads((path / m.get("path", "") / "config.json").read_text(encoding="utf-8"))
                chosen = [k for k, key in _ST_POOLING_KEYS.items() if conf.get(key)]
                named = conf.get("pooling_mode")  # sentence-transformers 6 names the mode: {"pooling_mode": "mean"}
                if not chosen and isinstance(named, str) and named in POOLING_MODES:
                    chosen = [named]
                if not chosen:
                    raise PtmlabError(f"'{path}' uses a pooling mode ptmlab does not support ({conf}): use mean, "
                                      f"cls or max pooling")
                mode = chosen[0]
            elif kind.endswith("Normalize"):
                normalize = True
        st = path / "sentence_bert_config.json"
        if st.is_file():
            max_len = int(json.loads(st.read_text(encoding="utf-8")).get("max_seq_length", max_len))
    except (OSError, ValueError, AttributeError, TypeError) as e:
        raise PtmlabError(f"the sentence-transformers config in '{path}' is unreadable ({e}): fix or remove "
                          f"modules.json") from None
    return mode, normalize, max_len


def load_sentence_model(name: str, pooling: str | None = None) -> tuple[SentenceEncoder, object]:
    """(SentenceEncoder, tokenizer) for a zoo name, run directory, model or sentence-transformers directory."""
    from ptmlab.models.zoo import load_model, load_tokenizer, resolve

    path, _ = resolve(name)
    mode, normalize, max_len = read_pooling(Path(path))
    encoder = load_model(name, task_head=False)
    return SentenceEncoder(encoder, pooling or mode, normalize, max_len), load_tokenizer(name)


@torch.no_grad()
def encode_texts(model: SentenceEncoder, tokenizer, texts: list[str], max_length: int = 128,
                 batch_size: int = 128, normalize: bool = True) -> np.ndarray:
    """Sentence vectors for ``texts`` in order (L2-normalised by default, for cosine similarity)."""
    from ptmlab.data.encode import encode_split
    from ptmlab.data.loaders import Split
    from ptmlab.train.evaluate import predict_logits

    if not texts:
        return np.zeros((0, model.config.hidden_size), dtype=np.float32)
    enc = encode_split(tokenizer, Split(list(texts)), max_length, use_cache=False)
    vec = predict_logits(model, enc, tokenizer.pad_token_id or 0, batch_size, desc="encode")
    if normalize:
        vec = vec / np.clip(np.linalg.norm(vec, axis=1, keepdims=True), 1e-12, None)
    return vec.astype(np.float32)


def write_st_files(model: SentenceEncoder, out: Path) -> None:
    """modules.json, 1_Pooling/config.json (and 2_Normalize/) and sentence_bert_config.json."""
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]
    if model.normalize:
        modules.append({"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"})
        (out / "2_Normalize").mkdir(parents=True, exist_ok=True)
    pooling = {"word_embedding_dimension": int(model.config.hidden_size),
               **{key: mode == model.pooling for mode, key in _ST_POOLING_KEYS.items()},
               "pooling_mode_mean_sqrt_len_tokens": False}
    atomic_write_json(out / "1_Pooling" / "config.json", pooling)
    atomic_write_json(out / "sentence_bert_config.json", {"max_seq_length": model.max_seq_length,
                                                          "do_lower_case": False})
    atomic_write_json(out / "modules.json", modules)


def save_sentence_model(model: SentenceEncoder, tokenizer, out_dir: str | Path) -> None:
    """Weights, tokenizer and sentence-transformers files into ``out_dir`` (through the one ``save_model``)."""
    import shutil

    from ptmlab.models.loader import save_model

    out = Path(out_dir)
    for sub in ("1_Pooling", "2_Normalize"):  # save_model moves entries into place; old folders would block it
        shutil.rmtree(out / sub, ignore_errors=True)
    save_model(model, tokenizer, out)
