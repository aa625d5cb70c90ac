"""Segment-level recurrence (Transformer-XL's idea) for a pretrained encoder: read a long document segment by segment,
each segment's attention also seeing the previous segment's states.

The document is cut into consecutive, non-overlapping segments of ``length`` tokens (``length - 2`` body tokens, each
wrapped in the tokenizer's opening/closing special tokens, as chunk-and-pool does) and the segments run in order. In
every layer, a segment's keys and values are preceded by keys and values projected (with that layer's own key/value
projections) from the memory: the hidden states that entered the same layer for the previous segment, detached from
the graph (Transformer-XL's stop-gradient), so training backpropagates through the current segment only while
information from earlier segments reaches the last one through the chain of memories. Memory keys are masked
where the previous segment was padding. The memory holds ``memory`` tokens (default: one segment; 0 turns the
recurrence off, more than one segment keeps the latest tokens of several, as Transformer-XL's ``mem_len`` does).
Reach, as in Transformer-XL: layer l of segment t depends on layer l-1 of the segments its memory holds, so the
output of a model with L layers and a memory of k segments sees k x L segments back (MiniLM-L6, 512-token segments,
one segment of memory: 6 segments, about 3,000 tokens, before the last one; a longer document needs more memory).

What differs from Transformer-XL: positions stay the model's own learned absolute positions, 0..len-1 in every
segment, so memory tokens and current tokens share position numbers. Transformer-XL's relative position encoding
is not used because an encoder pre-trained with absolute positions cannot use it without retraining; the memory's
hidden states carry the positions of their own segment. The model's head reads the LAST segment's output (its
[CLS] has seen the most of the document through the memory chain): ``pool="last"`` is the default for that reason;
``mean`` and ``max`` pool the logits of every segment instead (each segment also sees its predecessors), at the
cost of keeping every segment's graph for the backward pass.

How it runs on a stock model: an attention function registered with transformers' ``AttentionInterface`` as
``ptmlab_memory`` (plus an ``AttentionMaskInterface`` entry that keeps the 2D padding mask) reads the memory that
``memory_attention`` puts on each self-attention module, and forward pre-hooks on those modules capture their inputs
for the next segment. The model's attention implementation is switched only while segments run and restored after.
BERT, RoBERTa, ELECTRA and DistilBERT work (their self-attention takes the layer input and has key/value
projections in the structure map); MPNet (relative position bias outside the attention interface) and MobileBERT
(bottleneck attention inputs) are refused. Documents are batched: step t runs the t-th segment of every document
that has one, so each document's memory is its own.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import NamedTuple

import torch
import torch.nn.functional as F

from ptmlab.core.errors import PtmlabError
from ptmlab.longseq.window import register_attention
from ptmlab.models.structure import structure_of
from ptmlab.train.args import SEGMENT_POOLS

ATTN_NAME = "ptmlab_memory"
SUPPORTED = ("bert", "roberta", "electra", "distilbert")


class LayerMemory(NamedTuple):
    """What one layer's attention sees of the previous segment(s): hidden states (B, M, hidden), detached, and
    which of them are real tokens (B, M) bool."""

    hidden: torch.Tensor
    mask: torch.Tensor


def segments_of(ids: list[int], length: int) -> list[list[int]]:
    """Consecutive, non-overlapping segments of the body (``length - 2`` tokens each, the last one shorter), each
    wrapped in the example's first and last (special) tokens; a document that fits is one segment, unchanged."""
    if length < 3:
        raise PtmlabError(f"segment length {length} is too short: use at least 3 tokens (e.g. 512)")
    if len(ids) <= length:
        return [list(ids)]
    first, body, last = ids[0], ids[1:-1], ids[-1]
    size = length - 2
    return [[first, *body[s: s + size], last] for s in range(0, len(body), size)]


def check_recurrence(model) -> None:
    """PtmlabError when the model's family cannot take a memory in its self-attention."""
    family = structure_of(model).family  # PtmlabError for families without a structure map
    if family == "mpnet":
        raise PtmlabError("--long-strategy recurrence does not support MPNet: its relative position bias is computed "
                          "outside transformers' attention interface; use a BERT, RoBERTa, ELECTRA or DistilBERT model")
    if family not in SUPPORTED:
        raise PtmlabError(f"--long-strategy recurrence does not support '{family}' models (its self-attention does not "
                          f"read the layer input): use a {', '.join(SUPPORTED)} model or --long-strategy chunk")


def _memory_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """transformers ``AttentionInterface`` entry: full attention over [memory; segment] keys (query/key/value:
    (B, H, N, D); attention_mask: (B, N) bool or None). Returns (output (B, N, H, D), no attention weights)."""
    if attention_mask is not None and attention_mask.dim() != 2:
        raise PtmlabError(f"memory attention takes a 2D padding mask (batch, length), got shape "
                          f"{tuple(attention_mask.shape)}: pass attention_mask as 0/1 per token")
    b, h, n, d = query.shape
    key_mask = None if attention_mask is None else attention_mask.to(torch.bool)
    memory: LayerMemory | None = getattr(module, "_ptmlab_memory", None)
    if memory is not None and memory.hidden.shape[1] > 0:
        key_proj, value_proj = module._ptmlab_kv
        m = memory.hidden.shape[1]
        mem_k = key_proj(memory.hidden).view(b, m, h, d).transpose(1, 2).to(key.dtype)
        mem_v = value_proj(memory.hidden).view(b, m, h, d).transpose(1, 2).to(value.dtype)
        key, value = torch.cat([mem_k, key], dim=2), torch.cat([mem_v, value], dim=2)
        own = key_mask if key_mask is not None else torch.ones(b, n, dtype=torch.bool, device=query.device)
        key_mask = torch.cat([memory.mask.to(torch.bool), own], dim=1)
    attn_mask = None if key_mask is None or bool(key_mask.all()) else key_mask[:, None, None, :]
    out = F.scaled_dot_product_attention(query, key, value, attn_mask=attn_mask,
                                         dropout_p=dropout if module.training else 0.0, scale=scaling)
    return out.transpose(1, 2), None


register_attention(ATTN_NAME, _memory_attention)


class Recurrence:
    """A model switched to memory attention: ``step`` runs one segment batch with a memory and returns the logits
    and the next memory (one ``LayerMemory`` per layer, detached)."""

    def __init__(self, model, attentions: list, memory_tokens: int):
        self.model = model
        self.attentions = attentions
        self.memory_tokens = memory_tokens
        self.captured: list[torch.Tensor | None] = [None] * len(attentions)

    def capture(self, i: int):
        def hook(module, args, kwargs):
            self.captured[i] = args[0] if args else kwargs["hidden_states"]
        return hook

    def step(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
             memory: list[LayerMemory] | None = None) -> tuple[torch.Tensor, list[LayerMemory] | None]:
        """Logits (B, k) of one segment batch whose rows continue ``memory``'s rows (the first B of them)."""
        b = input_ids.shape[0]
        for i, att in enumerate(self.attentions):
            att._ptmlab_memory = None if memory is None else LayerMemory(memory[i].hidden[:b], memory[i].mask[:b])
        logits = self.model(input_ids=input_ids, attention_mask=attention_mask).logits
        if self.memory_tokens == 0:
            return logits, None
        seg_mask = attention_mask.to(torch.bool)
        new = []
        for i, h in enumerate(self.captured):
            h, mask = h.detach(), seg_mask  # stop-gradient: the next segment never backpropagates into this one
            if memory is not None:
                h = torch.cat([memory[i].hidden[:b].to(h.dtype), h], dim=1)
                mask = torch.cat([memory[i].mask[:b], mask], dim=1)
            new.append(LayerMemory(h[:, -self.memory_tokens:], mask[:, -self.memory_tokens:]))
        return logits, new


@contextmanager
def memory_attention(model, memory_tokens: int) -> Iterator[Recurrence]:
    """Switch ``model`` (a task model, or one wrapped in ``.module``) to memory attention while the block runs."""
    base = getattr(model, "module", model)
    check_recurrence(base)
    if memory_tokens < 0:
        raise PtmlabError(f"memory of {memory_tokens} tokens is negative: use 0 (no recurrence) or more, e.g. 512")
    st = structure_of(base)
    key_name = st.key.removeprefix(st.self_attention + ".")
    value_name = st.value.removeprefix(st.self_attention + ".")
    attentions = [st.layer(base, i).get_submodule(st.self_attention) for i in range(st.num_layers(base))]
    rec = Recurrence(model, attentions, memory_tokens)
    before = base.config._attn_implementation
    hooks = [att.register_forward_pre_hook(rec.capture(i), with_kwargs=True) for i, att in enumerate(attentions)]
    for att in attentions:
        att._ptmlab_kv = (att.get_submodule(key_name), att.get_submodule(value_name))
    base.set_attn_implementation(ATTN_NAME)
    try:
        yield rec
    finally:
        base.set_attn_implementation(before)
        for hook in hooks:
            hook.remove()
        for att in attentions:
            del att._ptmlab_kv
            att._ptmlab_memory = None


def pad_rows(rows: list[list[int]], pad_id: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Token id lists -> (ids, attention mask), right-padded to the longest."""
    longest = max(len(r) for r in rows)
    ids = torch.full((len(rows), longest), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), longest), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.tensor(r)
        mask[i, : len(r)] = 1
    return ids.to(device), mask.to(device)


def recurrent_logits(model, examples: list[list[int]], length: int = 512, memory: int | None = None,
                     pool: str = "last") -> torch.Tensor:
    """Logits (n, k) of full-length token id lists read segment by segment with a memory of ``memory`` tokens
    (None: one segment, ``length``). ``pool``: the last segment's logits, or the mean/max over every segment's.

    Under autograd only the steps whose logits are used keep a graph (with ``last``: the steps where some document
    ends), and no graph reaches back into an earlier segment."""
    if pool not in SEGMENT_POOLS:
        raise PtmlabError(f"segment pooling '{pool}' is unknown: choose {', '.join(SEGMENT_POOLS)}")
    memory_tokens = length if memory is None else int(memory)
    segs = [segments_of(e, length) for e in examples]
    order = sorted(range(len(examples)), key=lambda i: -len(segs[i]))  # the documents still running form a prefix
    base = getattr(model, "module", model)
    device = next(base.parameters()).device
    pad_id = int(getattr(base.config, "pad_token_id", 0) or 0)
    per_doc: list[list[torch.Tensor]] = [[] for _ in examples]
    grad = torch.is_grad_enabled()
    with memory_attention(model, memory_tokens) as rec:
        mem = None
        steps = len(segs[order[0]]) if order else 0
        for t in range(steps):
            active = [i for i in order if len(segs[i]) > t]
            ending = any(len(segs[i]) == t + 1 for i in active)
            ids, mask = pad_rows([segs[i][t] for i in active], pad_id, device)
            with torch.set_grad_enabled(grad and (pool != "last" or ending)):
                logits, mem = rec.step(ids, mask, mem)
            for row, i in enumerate(active):
                if pool != "last" or len(segs[i]) == t + 1:
                    per_doc[i].append(logits[row].float())
    if not examples:
        return torch.zeros((0, base.config.num_labels), device=device)
    stacked = [torch.stack(rows) for rows in per_doc]
    if pool == "max":
        return torch.stack([s.max(0).values for s in stacked])
    if pool == "mean":
        return torch.stack([s.mean(0) for s in stacked])
    return torch.stack([s[-1] for s in stacked])
