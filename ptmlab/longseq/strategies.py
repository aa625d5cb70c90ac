"""Ways to classify a document longer than the model's 512 positions: truncate, chunk-and-pool, or window.

- ``truncate``: keep the first ``length`` tokens (the closing special token is kept), the usual practice.
- ``chunk``: cut the document into overlapping windows of ``length`` tokens, ``stride`` tokens apart, each wrapped in
  the tokenizer's own opening/closing special tokens; run the model on every window and pool the logits (mean or
  max). Cost is linear in length; no window sees the others.
- ``window``: the whole document in one pass through a longified model (``ptmlab longify``), whose sliding-window +
  global attention lets information flow across the document through stacked layers and the global [CLS].
- ``recurrence``: consecutive non-overlapping segments of ``length`` tokens read in order, each layer's attention
  also seeing the previous segment's states (Transformer-XL's memory, ``ptmlab.longseq.recurrence``); the last
  segment's logits by default (``segment_pool``). Cost is linear in length, segments run one after another.

Every strategy turns one example into "pieces" (token id lists) and pools the pieces' logits, so the same code
gives evaluation logits (``long_logits``) and the per-example training loss (``long_loss``, the training loop's
``loss_fn(model, batch) -> Tensor[n]`` contract). Examples are token ids as the tokenizer produced them, special
tokens included (encode with the long ``--max-length`` so nothing is cut before the strategy sees it).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ptmlab.core.errors import PtmlabError
from ptmlab.core.progress import progress
from ptmlab.longseq.recurrence import SEGMENT_POOLS, check_recurrence, pad_rows, recurrent_logits, segments_of

LONG_STRATEGIES = ("truncate", "chunk", "window", "recurrence")
POOLS = ("mean", "max")


@dataclass(frozen=True)
class LongSettings:
    length: int = 512  # tokens per piece for truncate / chunk, special tokens included
    stride: int = 256  # tokens between the starts of consecutive chunks (overlap = length - 2 - stride)
    pool: str = "mean"  # how chunk logits combine: mean or max
    batch_size: int = 8  # pieces per forward pass in long_logits (recurrence: documents per pass)
    memory: int | None = None  # recurrence: memory tokens (None: one segment, 0: no memory)
    segment_pool: str = "last"  # recurrence: the last segment's logits, or mean / max over the segments' logits

    def validate(self) -> None:
        if self.length < 3:
            raise PtmlabError(f"chunk length {self.length} is too short: use at least 3 tokens (e.g. 512)")
        if not 1 <= self.stride <= self.length - 2:
            raise PtmlabError(f"chunk stride {self.stride} must be between 1 and length - 2 = {self.length - 2}: "
                              f"pick e.g. {max(1, (self.length - 2) // 2)}")
        if self.pool not in POOLS:
            raise PtmlabError(f"chunk pooling '{self.pool}' is unknown: choose mean or max")
        if self.memory is not None and self.memory < 0:
            raise PtmlabError(f"memory of {self.memory} tokens is negative: use 0 (no recurrence) or more, e.g. 512")
        if self.segment_pool not in SEGMENT_POOLS:
            raise PtmlabError(f"segment pooling '{self.segment_pool}' is unknown: choose {', '.join(SEGMENT_POOLS)}")


def truncate_ids(ids: list[int], length: int) -> list[int]:
    """The first ``length`` tokens, closing special token kept."""
    return list(ids) if len(ids) <= length else list(ids[: length - 1]) + [ids[-1]]


def chunk_ids(ids: list[int], length: int, stride: int) -> list[list[int]]:
    """Overlapping windows of the body, each wrapped in the example's first and last (special) tokens."""
    if len(ids) <= length:
        return [list(ids)]
    first, body, last = ids[0], ids[1:-1], ids[-1]
    size = length - 2
    starts = list(range(0, len(body) - size, stride)) + [len(body) - size]
    return [[first, *body[s: s + size], last] for s in starts]


def pieces_of(strategy: str, ids: list[int], settings: LongSettings) -> list[list[int]]:
    if strategy == "truncate":
        return [truncate_ids(ids, settings.length)]
    if strategy == "chunk":
        return chunk_ids(ids, settings.length, settings.stride)
    if strategy == "window":
        return [list(ids)]
    if strategy == "recurrence":
        return segments_of(ids, settings.length)
    raise PtmlabError(f"unknown long strategy '{strategy}': choose {', '.join(LONG_STRATEGIES)}")


def check_strategy(model, strategy: str, settings: LongSettings, longest: int | None = None) -> None:
    """PtmlabError when the model cannot run ``strategy`` (window needs a longified model long enough)."""
    from ptmlab.longseq.convert import check_max_length, window_of

    settings.validate()
    if strategy not in LONG_STRATEGIES:
        raise PtmlabError(f"unknown long strategy '{strategy}': choose {', '.join(LONG_STRATEGIES)}")
    if strategy == "window":
        if window_of(model) is None:
            raise PtmlabError("--long-strategy window needs a long model: convert it first with "
                              "`ptmlab longify MODEL --max-length 4096`")
        if longest is not None:
            check_max_length(model, longest)
    else:
        if strategy == "recurrence":
            check_recurrence(model)
        check_max_length(model, settings.length)


def pool_logits(logits: torch.Tensor, owner: torch.Tensor, n: int, how: str) -> torch.Tensor:
    """Combine piece logits (m, k) into example logits (n, k); ``owner[i]`` is piece i's example."""
    k = logits.shape[-1]
    index = owner[:, None].expand(-1, k)
    if how == "max":
        out = torch.full((n, k), float("-inf"), dtype=logits.dtype, device=logits.device)
        return out.scatter_reduce(0, index, logits, reduce="amax")
    total = torch.zeros((n, k), dtype=logits.dtype, device=logits.device).scatter_add(0, index, logits)
    counts = torch.bincount(owner, minlength=n).clamp(min=1).to(logits.dtype)
    return total / counts[:, None]


def _forward_pieces(model, examples: list[list[int]], strategy: str, settings: LongSettings) -> torch.Tensor:
    """Logits (n, k) of a list of examples, all pieces in one forward pass (recurrence: one pass per segment)."""
    if strategy == "recurrence":
        return recurrent_logits(model, examples, settings.length, settings.memory, settings.segment_pool)
    pieces, owners = [], []
    for i, ids in enumerate(examples):
        for p in pieces_of(strategy, ids, settings):
            pieces.append(p)
            owners.append(i)
    device = next(model.parameters()).device
    config = getattr(model, "module", model).config
    ids, mask = pad_rows(pieces, int(getattr(config, "pad_token_id", 0) or 0), device)
    logits = model(input_ids=ids, attention_mask=mask).logits.float()
    return pool_logits(logits, torch.tensor(owners, device=device), len(examples), settings.pool)


def long_logits(model, examples: list[list[int]], strategy: str = "chunk",
                settings: LongSettings = LongSettings()) -> torch.Tensor:
    """Logits per example (n, num_labels) under ``strategy``; examples are full-length token id lists."""
    check_strategy(model, strategy, settings, max((len(e) for e in examples), default=0))
    model.eval()
    out = []
    # pieces per batch stay near batch_size; examples of similar length go together
    order = sorted(range(len(examples)), key=lambda i: len(examples[i]))
    per_example = [1 if strategy == "recurrence" else len(pieces_of(strategy, examples[i], settings)) for i in order]
    quiet = True if sum(len(e) for e in examples) < 100_000 else None  # a bar only for long evaluations
    with torch.inference_mode(), progress(total=len(order), desc=f"evaluate ({strategy})", disable=quiet) as bar:
        start = 0
        while start < len(order):
            end, used = start, 0
            while end < len(order) and (end == start or used + per_example[end] <= settings.batch_size):
                used += per_example[end]
                end += 1
            out.append(_forward_pieces(model, [examples[i] for i in order[start:end]], strategy, settings))
            bar.update(end - start)
            start = end
    if not out:
        return torch.zeros((0, model.config.num_labels))
    logits = torch.cat(out)
    back = torch.empty_like(logits)
    back[torch.tensor(order)] = logits
    return back


def long_loss(strategy: str = "chunk", settings: LongSettings = LongSettings(), regression: bool = False):
    """Per-example loss ``loss(model, batch) -> Tensor[n]`` for the training loop: the batch's padded ids are cut
    back to each example's tokens, turned into pieces, run in one pass, pooled, and scored (cross-entropy, or MSE
    for regression)."""
    settings.validate()
    if strategy not in LONG_STRATEGIES:
        raise PtmlabError(f"unknown long strategy '{strategy}': choose {', '.join(LONG_STRATEGIES)}")
    checked: set[int] = set()

    def loss(model, batch: dict) -> torch.Tensor:
        lengths = batch["attention_mask"].sum(1).tolist()
        rows = batch["input_ids"].tolist()
        examples = [row[: int(n)] for row, n in zip(rows, lengths, strict=True)]
        if id(model) not in checked:
            check_strategy(getattr(model, "module", model), strategy, settings)
            checked.add(id(model))
        logits = _forward_pieces(model, examples, strategy, settings)
        labels = batch["labels"].to(logits.device)
        if regression:
            return F.mse_loss(logits.squeeze(-1), labels.float(), reduction="none")
        return F.cross_entropy(logits, labels, reduction="none")

    loss.logits_only = True  # reads the model's logits alone (ptmlab.models.first_token may cut the last layer)
    return loss
