"""Long-model conversion: extend the position embeddings and switch to window attention (the ``longify`` change).

Longformer's recipe: a model trained on 512 positions gets ``max_length`` positions by copying its learned 512
position vectors over and over (position p takes the vector of p mod 512), so every copy starts from what the model
already knows about nearby positions; attention becomes sliding-window + global (``ptmlab.longseq.window``) so cost
grows linearly. RoBERTa-style embeddings keep their first ``padding_idx + 1`` rows (padding and the unused row)
where they are and extend only the real positions after them.

The change is recorded in ``config.ptmlab_modifications``; replaying it on load re-sizes the position table
(a no-op when the saved config already has the long size), sets the attention implementation and installs a
state-dict hook so the saved encoder loads under a fresh task head, exactly as ``from_pretrained`` gives a stock
encoder a new head (a head whose shape differs from the saved one is re-initialised; encoder weights are strict).

MPNet is refused: its relative position bias is built as a full (n x n) tensor outside transformers' attention
interface, so it cannot run window attention without rewriting MPNet's attention module.
"""

from __future__ import annotations

import torch
from torch import nn

from ptmlab.core.errors import PtmlabError
from ptmlab.longseq.window import ATTN_NAME, DEFAULT_GLOBAL, even_window
from ptmlab.models.loader import MODIFIERS, record_modification
from ptmlab.models.structure import structure_of

LONGIFY = "longify"
SUPPORTED = ("bert", "roberta", "electra", "distilbert")


def position_offset(model) -> int:
    """Rows of the position table before the first real position (RoBERTa: padding_idx + 1; others: 0)."""
    if structure_of(model).family != "roberta":
        return 0
    return int(model.config.pad_token_id) + 1


def max_supported_length(model) -> int:
    """The longest input (in tokens) the model's position table covers."""
    return int(model.config.max_position_embeddings) - position_offset(model)


def check_max_length(model, max_length: int) -> None:
    """PtmlabError when ``max_length`` needs more positions than the model has."""
    most = max_supported_length(model)
    if max_length > most:
        raise PtmlabError(f"--max-length {max_length} is beyond what this model supports ({most} tokens): lower "
                          f"--max-length or convert the model with `ptmlab longify MODEL --max-length {max_length}`")


def _check_family(model) -> str:
    family = structure_of(model).family  # PtmlabError for families without a structure map
    if family == "mpnet":
        raise PtmlabError("MPNet cannot be longified: its relative position bias is a full n x n tensor computed "
                          "outside transformers' attention interface; use a BERT, RoBERTa, ELECTRA or DistilBERT model")
    if family == "distilbert" and getattr(model.config, "sinusoidal_pos_embds", False):
        raise PtmlabError("this DistilBERT uses fixed sinusoidal positions, which longify does not extend: use a "
                          "model with learned position embeddings")
    return family


def _tiled_positions(old: nn.Embedding, rows: int, offset: int) -> nn.Embedding:
    """A table of ``rows`` positions: the first ``offset`` rows kept, the learned rows after them tiled."""
    new = nn.Embedding(rows, old.embedding_dim, padding_idx=old.padding_idx).to(old.weight)
    learned = old.weight.detach()[offset:]
    with torch.no_grad():
        new.weight[:offset] = old.weight[:offset]
        reps = -(-(rows - offset) // learned.shape[0])
        new.weight[offset:] = learned.repeat(reps, 1)[: rows - offset]
    return new


def _resize_positions(model, rows: int, offset: int) -> None:
    emb = structure_of(model).embedding_module(model)
    old = emb.position_embeddings
    if old.num_embeddings != rows:
        emb.position_embeddings = _tiled_positions(old, rows, offset)
    device = emb.position_embeddings.weight.device
    emb.position_ids = torch.arange(rows, device=device).expand((1, -1))
    if hasattr(emb, "token_type_ids"):
        emb.token_type_ids = torch.zeros((1, rows), dtype=torch.long, device=device)
    model.config.max_position_embeddings = rows


def _fit_state_to_model(model, state: dict, prefix: str, *args) -> None:
    """Load hook: map a bare-encoder checkpoint onto a task model (and back) and give it a fresh task head where
    the saved one is absent or of another shape. Only keys outside the encoder are ever filled in."""
    base = getattr(model, "base_model_prefix", "")
    own = model.state_dict()
    has_base = bool(base) and hasattr(model, base)
    for k in list(state):
        if has_base and f"{base}.{k}" in own and k not in own:
            state[f"{base}.{k}"] = state.pop(k)
        elif not has_base and k.startswith(f"{base}.") and k[len(base) + 1:] in own:
            state[k[len(base) + 1:]] = state.pop(k)
    for k in list(state):
        if k not in own and not k.startswith(f"{base}.") and not has_base:
            state.pop(k)  # a task head saved with the model, loaded as a bare encoder
    if has_base:
        for k, v in own.items():
            if k.startswith(f"{base}."):
                continue
            if k not in state or state[k].shape != v.shape:
                state[k] = v.detach().clone()


@MODIFIERS.register(LONGIFY, help="long positions (learned 512 copied) + sliding-window/global attention")
def longify(model, max_length: int, window: int, global_tokens: list[int] | tuple[int, ...] = DEFAULT_GLOBAL,
            record: bool = True) -> None:
    """Make ``model`` read ``max_length`` tokens with window attention (in place)."""
    _check_family(model)
    max_length = int(max_length)
    window = even_window(window)
    if window > max_length:
        raise PtmlabError(f"--window {window} is larger than --max-length {max_length}: use a window no wider than "
                          f"the maximum length (e.g. 256)")
    glob = sorted({int(p) for p in global_tokens})
    bad = [p for p in glob if not 0 <= p < max_length]
    if bad:
        raise PtmlabError(f"global token position(s) {bad} are outside 0..{max_length - 1}: pass positions inside "
                          f"the input, e.g. --global 0")
    offset = position_offset(model)
    if record and max_length < max_supported_length(model):
        raise PtmlabError(f"--max-length {max_length} is shorter than the {max_supported_length(model)} tokens the "
                          f"model already reads: longify only extends; pass a larger --max-length")
    _resize_positions(model, max_length + offset, offset)
    model.config.ptmlab_window = window
    model.config.ptmlab_global_tokens = glob
    model.set_attn_implementation(ATTN_NAME)
    model.register_load_state_dict_pre_hook(_fit_state_to_model)
    if record:
        record_modification(model, LONGIFY, max_length=max_length, window=window, global_tokens=glob)


def window_of(model) -> int | None:
    """The attention window of a longified model, None for a full-attention one."""
    if getattr(model.config, "_attn_implementation", None) != ATTN_NAME:
        return None
    return int(model.config.ptmlab_window)
