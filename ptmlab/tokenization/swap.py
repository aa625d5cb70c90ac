"""Give a model a new tokenizer: keep the embeddings of tokens both vocabularies share, build the rest.

A new token's row is, in order of preference: the old row of the same token (same string, or the same special
role such as ``[CLS]``/``<s>``), bit for bit; the mean of the old rows of the pieces the old tokenizer cuts
the token's text into; the mean of all old rows when the old tokenizer knows none of its pieces. The output
directory holds the model and the new tokenizer in ``save_pretrained`` layout, so it loads, fine-tunes and
evaluates like any model, plus ``swap_report.json`` with the share of rows built each way.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ptmlab.core.errors import PtmlabError
from ptmlab.core.io import atomic_write_json
from ptmlab.tokenization.load import load_tokenizer
from ptmlab.tokenization.savedir import atomic_directory

KINDS = ("shared", "special", "one_piece", "mean_of_pieces", "fallback")
ROLES = ("pad_token", "unk_token", "cls_token", "sep_token", "mask_token", "bos_token", "eos_token")
_ROLE_STANDINS = {"bos_token": "cls_token", "eos_token": "sep_token", "cls_token": "bos_token",
                  "sep_token": "eos_token"}
_HIDDEN_KEYS = ("embedding_size", "hidden_size", "d_model", "dim", "n_embd")
_OUTPUT_FILES = {"config.json", "model.safetensors", "model.safetensors.index.json", "generation_config.json",
                 "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt",
                 "swap_report.json", "chat_template.jinja"}


@dataclass
class SwapPlan:
    """For each new token id: the old ids whose mean gives its row, and how it was chosen (one of KINDS)."""

    sources: list[list[int]]
    kinds: list[str]

    def counts(self) -> dict[str, int]:
        return {k: self.kinds.count(k) for k in KINDS}


def _role_id(tok, role: str) -> int | None:
    name = getattr(tok, role, None)
    return tok.convert_tokens_to_ids(name) if name is not None else None


def plan_swap(old_tok, new_tok) -> SwapPlan:
    """Decide where each row of the new embedding matrix comes from (both are transformers tokenizers)."""
    old_vocab, new_vocab = old_tok.get_vocab(), new_tok.get_vocab()
    n_new = max(new_vocab.values()) + 1
    sources: list[list[int]] = [[] for _ in range(n_new)]
    kinds = ["fallback"] * n_new
    for role in ROLES:
        new_id = _role_id(new_tok, role)
        old_id = _role_id(old_tok, role)
        if old_id is None and role in _ROLE_STANDINS:
            old_id = _role_id(old_tok, _ROLE_STANDINS[role])
        if new_id is not None and old_id is not None and kinds[new_id] == "fallback":
            shared = old_vocab.get(new_tok.convert_ids_to_tokens(new_id)) == old_id
            sources[new_id], kinds[new_id] = [old_id], "shared" if shared else "special"
    todo = []
    for token, new_id in new_vocab.items():
        if kinds[new_id] != "fallback":
            continue
        if token in old_vocab:
            sources[new_id], kinds[new_id] = [old_vocab[token]], "shared"
        else:
            todo.append((token, new_id))
    surfaces = [_surface(new_tok, token) for token, _ in todo]
    pieces = old_tok(surfaces, add_special_tokens=False)["input_ids"] if surfaces else []
    unk = old_tok.unk_token_id
    for (_, new_id), ids in zip(todo, pieces, strict=True):
        ids = [i for i in ids if i != unk]
        if ids:
            sources[new_id], kinds[new_id] = ids, "one_piece" if len(ids) == 1 else "mean_of_pieces"
    return SwapPlan(sources, kinds)


def _surface(tok, token: str) -> str:
    """The text a token stands for (word-start markers and ``##`` continuation prefixes removed)."""
    text = tok.convert_tokens_to_string([token]).strip()
    backend = getattr(tok, "backend_tokenizer", None)
    prefix = getattr(getattr(backend, "model", None), "continuing_subword_prefix", None)
    if prefix and text.startswith(prefix):
        text = text[len(prefix):]
    return text


def build_rows(old, plan: SwapPlan):
    """The new matrix: row i is the mean of ``old[plan.sources[i]]``; single sources are exact copies."""
    import torch
    import torch.nn.functional as F

    matrix = old if old.dim() == 2 else old.unsqueeze(1)
    flat = torch.tensor([j for src in plan.sources for j in src], dtype=torch.long)
    offsets = torch.tensor([0] + [len(s) for s in plan.sources[:-1]], dtype=torch.long).cumsum(0)
    rows = F.embedding_bag(flat, matrix, offsets, mode="mean")
    single = [i for i, s in enumerate(plan.sources) if len(s) == 1]
    if single:
        rows[single] = matrix[[plan.sources[i][0] for i in single]]
    empty = [i for i, s in enumerate(plan.sources) if not s]
    if empty:
        rows[empty] = matrix.mean(0)
    return rows if old.dim() == 2 else rows.squeeze(1)


def load_model(spec: str):
    """A model directory or zoo name, loaded with its head class from config.architectures, else AutoModel."""
    import transformers

    from ptmlab.models.zoo import ZOO, resolve

    if spec in ZOO and ZOO.get(spec).random_config is not None:
        raise PtmlabError(f"model '{spec}' is built at random from a config: save it with save_pretrained "
                          "and pass that directory")
    path = Path(resolve(spec)[0]) if spec in ZOO else Path(spec)
    if not (path / "config.json").is_file():
        raise PtmlabError(f"model '{spec}' is not a model directory (no config.json): pass a directory saved "
                          "by save_pretrained, or minilm")
    from ptmlab.models.loader import refuse_pickle, weights_kwargs

    refuse_pickle(path)
    try:
        config = transformers.AutoConfig.from_pretrained(str(path))
        arch = (getattr(config, "architectures", None) or [None])[0]
        cls = getattr(transformers, arch, None) if arch else None
        model = (cls or transformers.AutoModel).from_pretrained(str(path), **weights_kwargs(path))
    except Exception as e:  # any loading failure is the user's directory
        raise PtmlabError(f"model '{spec}' does not load ({type(e).__name__}): pass a directory saved by "
                          "save_pretrained") from None
    return path, model


def _donor_hidden_size(tokenizer_dir: str) -> int | None:
    """The embedding width of the model a tokenizer directory belongs to, when it is a model directory."""
    cfg = Path(tokenizer_dir) / "config.json"
    if not cfg.is_file():
        return None
    try:
        data = json.loads(cfg.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
    data = {**data, **data.get("text_config", {})} if isinstance(data.get("text_config"), dict) else data
    return next((int(data[k]) for k in _HIDDEN_KEYS if isinstance(data.get(k), int)), None)


def swap_tokenizer(model_spec: str, tokenizer_spec: str, output: str | Path) -> dict:
    """Save ``model_spec`` with the tokenizer ``tokenizer_spec`` to ``output``; return the swap report."""
    import torch

    path, model = load_model(model_spec)
    old_tok = load_tokenizer(str(path)).hf
    if old_tok is None:
        raise PtmlabError(f"model '{model_spec}' has no transformers tokenizer to read its pieces: save one "
                          "beside the model with save_pretrained")
    new = load_tokenizer(tokenizer_spec)
    new_tok = new.as_hf()
    emb = model.get_input_embeddings()
    width = emb.weight.shape[1]
    donor = _donor_hidden_size(new.source)
    if donor is not None and donor != width:
        raise PtmlabError(f"tokenizer '{tokenizer_spec}' comes from a model with hidden size {donor}, but "
                          f"model '{model_spec}' has {width}: swap within one hidden size, or pass a "
                          "tokenizer-only directory (e.g. from 'ptmlab tokenizer train')")
    plan = plan_swap(old_tok, new_tok)
    old_in = emb.weight.detach().clone()
    out_emb = model.get_output_embeddings()
    tied = out_emb is None or out_emb.weight.data_ptr() == emb.weight.data_ptr()
    old_out = None if tied else out_emb.weight.detach().clone()
    old_bias = getattr(out_emb, "bias", None) if out_emb is not None else None
    old_bias = old_bias.detach().clone() if old_bias is not None else None
    n_new = len(plan.sources)
    model.resize_token_embeddings(n_new, mean_resizing=False)
    with torch.no_grad():
        new_emb = model.get_input_embeddings()
        new_emb.weight.copy_(build_rows(old_in, plan))
        if new_emb.padding_idx is not None and new_tok.pad_token_id is not None:
            new_emb.padding_idx = new_tok.pad_token_id
        head = model.get_output_embeddings()
        if old_out is not None:
            head.weight.copy_(build_rows(old_out, plan))
        if old_bias is not None and getattr(head, "bias", None) is not None and head.bias.shape[0] == n_new:
            head.bias.copy_(build_rows(old_bias, plan))
    for attr in ("pad_token_id", "bos_token_id", "eos_token_id", "sep_token_id"):
        if getattr(model.config, attr, None) is not None:
            role = attr.replace("_id", "")
            new_id = _role_id(new_tok, role)
            if new_id is None and role in _ROLE_STANDINS:
                new_id = _role_id(new_tok, _ROLE_STANDINS[role])
            setattr(model.config, attr, new_id)
    counts = plan.counts()
    report = {
        "model": str(path), "tokenizer": tokenizer_spec, "output": str(output), "hidden_size": width,
        "old_vocab_size": int(old_in.shape[0]), "new_vocab_size": n_new, "counts": counts,
        "shares": {k: v / n_new for k, v in counts.items()},
        "examples": _examples(new_tok, old_tok, plan),
    }
    with atomic_directory(output, allowed=_OUTPUT_FILES) as tmp:
        model.save_pretrained(str(tmp))
        new_tok.save_pretrained(str(tmp))
        atomic_write_json(tmp / "swap_report.json", report)
    return report


def _examples(new_tok, old_tok, plan: SwapPlan, n: int = 5) -> list[dict]:
    out = []
    for i, kind in enumerate(plan.kinds):
        if kind == "mean_of_pieces" and len(out) < n:
            out.append({"token": new_tok.convert_ids_to_tokens(i),
                        "old_pieces": old_tok.convert_ids_to_tokens(plan.sources[i])})
    return out


def format_report(report: dict) -> str:
    c, s = report["counts"], report["shares"]
    lines = [f"swapped tokenizer: {report['old_vocab_size']} -> {report['new_vocab_size']} tokens "
             f"(hidden size {report['hidden_size']}), saved to {report['output']}"]
    labels = {"shared": "kept (same token)", "special": "kept (same special role)",
              "one_piece": "copied from one old piece", "mean_of_pieces": "mean of old pieces",
              "fallback": "mean of all old rows"}
    for k in KINDS:
        lines.append(f"  {labels[k]:<28} {c[k]:>8}  {s[k]:7.2%}")
    return "\n".join(lines)
