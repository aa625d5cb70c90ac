"""Vocabulary pruning: keep the tokens a task corpus uses (plus special tokens), shrink the embedding matrix, and
remap the tokenizer so every corpus text maps to the same embedding rows as before (outputs are unchanged).

Works on WordPiece / BPE / Unigram fast tokenizers by rewriting ``tokenizer.json`` (vocabulary ids, special-token
ids of the post-processor, added tokens) and ``vocab.txt`` when present. The config's ``vocab_size`` shrinks, so
the model loads with plain ``from_pretrained`` (no recorded modification is needed).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import torch
from torch import nn

from ptmlab.core.errors import PtmlabError
from ptmlab.models.structure import structure_of


def used_token_ids(tokenizer, texts: list[str], pairs: list[str] | None = None) -> list[int]:
    """Sorted ids the tokenizer produces on the corpus, plus every special token."""
    ids: set[int] = set(tokenizer.all_special_ids)
    step = 1000
    for s in range(0, len(texts), step):
        chunk = texts[s:s + step]
        enc = tokenizer(chunk, pairs[s:s + step] if pairs else None, add_special_tokens=True)["input_ids"]
        for row in enc:
            ids.update(row)
    return sorted(ids)


def _remap_json(tok_json: dict, old_to_new: dict[int, int], id_to_token: dict[int, str]) -> dict:
    model = tok_json["model"]
    kind = model.get("type")
    if kind in ("WordPiece", "BPE"):
        model["vocab"] = {id_to_token[o]: n for o, n in old_to_new.items()}
        if kind == "BPE":
            keep = set(model["vocab"])
            merges = model.get("merges", [])
            model["merges"] = [m for m in merges if "".join(m if isinstance(m, list) else m.split(" ")) in keep]
    elif kind == "Unigram":
        vocab = model["vocab"]
        model["vocab"] = [vocab[o] for o in sorted(old_to_new)]
        if model.get("unk_id") is not None:
            model["unk_id"] = old_to_new[model["unk_id"]]
    else:
        raise PtmlabError(f"vocabulary pruning does not support tokenizer model '{kind}': use a WordPiece, BPE "
                          f"or Unigram fast tokenizer")
    for t in tok_json.get("added_tokens", []):
        if t["id"] in old_to_new:
            t["id"] = old_to_new[t["id"]]
    tok_json["added_tokens"] = [t for t in tok_json.get("added_tokens", []) if t["id"] in old_to_new.values()]
    post = tok_json.get("post_processor") or {}
    for proc in [post, *post.get("processors", [])]:
        for spec in (proc.get("special_tokens") or {}).values():
            spec["ids"] = [old_to_new[i] for i in spec["ids"]]
        for key in ("cls", "sep"):
            if isinstance(proc.get(key), list) and len(proc[key]) == 2:
                proc[key][1] = old_to_new[proc[key][1]]
    return tok_json


def remap_tokenizer(tokenizer, keep: list[int]):
    """A tokenizer whose ids index the kept tokens in order (new id = position in ``keep``)."""
    from transformers import AutoTokenizer

    if not getattr(tokenizer, "is_fast", False):
        raise PtmlabError("vocabulary pruning needs a fast tokenizer (tokenizer.json): convert the tokenizer first")
    old_to_new = {o: n for n, o in enumerate(keep)}
    id_to_token = {i: t for t, i in tokenizer.get_vocab().items()}
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer.save_pretrained(tmp)
        tj = Path(tmp) / "tokenizer.json"
        data = _remap_json(json.loads(tj.read_text(encoding="utf-8")), old_to_new, id_to_token)
        tj.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
        vocab_txt = Path(tmp) / "vocab.txt"
        if vocab_txt.is_file():
            vocab_txt.write_text("".join(id_to_token[o] + "\n" for o in keep), encoding="utf-8")
        cfg_path = Path(tmp) / "tokenizer_config.json"
        if cfg_path.is_file():
            cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
            decoder = cfg.get("added_tokens_decoder") or {}
            cfg["added_tokens_decoder"] = {str(old_to_new[int(k)]): v for k, v in decoder.items()
                                           if int(k) in old_to_new}
            cfg_path.write_text(json.dumps(cfg), encoding="utf-8")
        return AutoTokenizer.from_pretrained(tmp)


def prune_vocabulary(model: nn.Module, tokenizer, texts: list[str], pairs: list[str] | None = None):
    """Shrink ``model``'s word embeddings to the corpus' tokens in place; returns (new tokenizer, info)."""
    s = structure_of(model)
    emb_parent = s.encoder(model)
    old = emb_parent.get_submodule(s.word_embeddings)
    if old.num_embeddings != len(tokenizer):
        raise PtmlabError(f"the tokenizer has {len(tokenizer)} tokens but the model {old.num_embeddings}: prune "
                          f"the vocabulary of a model with its own tokenizer (once)")
    keep = used_token_ids(tokenizer, texts, pairs)
    new_tok = remap_tokenizer(tokenizer, keep)
    index = torch.tensor(keep, dtype=torch.long)
    pad_old = getattr(model.config, "pad_token_id", None)
    pad_new = keep.index(pad_old) if pad_old in keep else None
    new = nn.Embedding(len(keep), old.embedding_dim, padding_idx=pad_new, device=old.weight.device,
                       dtype=old.weight.dtype)
    with torch.no_grad():
        new.weight.copy_(old.weight[index])
    parent_path, _, attr = s.word_embeddings.rpartition(".")
    setattr(emb_parent.get_submodule(parent_path) if parent_path else emb_parent, attr, new)
    model.config.vocab_size = len(keep)
    if pad_new is not None:
        model.config.pad_token_id = pad_new
    return new_tok, {"vocab_before": old.num_embeddings, "vocab_after": len(keep)}
