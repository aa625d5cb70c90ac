"""Long strategies inside a ``finetune`` or ``evaluate`` run: the checks, the training loss and the dev evaluator.

``--long-strategy truncate`` is ordinary fine-tuning (inputs cut at ``--max-length``). ``chunk``, ``window`` and
``recurrence`` need the whole document, so the run encodes with the long ``--max-length`` (e.g. 4096) and the
strategy decides what the model reads: overlapping ``--long-chunk`` windows whose logits are pooled, the whole
document through a ``ptmlab longify`` model, or ``--long-chunk`` segments in order with a memory. The loop's plain
loss and evaluation would feed 4,096-token rows to the model as they are, so these runs pass ``long_loss`` and an
evaluator built on ``long_logits`` into the one run lifecycle instead.

Everything a run can get wrong is checked here before the run directory is written: a window run on a model that
was not longified or is too short, a chunk longer than the model's positions, a truncated input longer than the
model reads (a one-line error, not an index error deep in the embeddings), text pairs (the strategies read one text).

Long documents make large batches: a 32-document batch of 4,096 tokens holds ~131k tokens, and the activations kept
for the backward pass would need tens of GB. When the user left ``--grad-accum`` at 1, ``plan_long_finetune``
splits each optimizer batch into micro-batches of at most ``MICRO_TOKENS`` tokens; the loop sums per-example losses
over the whole batch, so the gradient is the same, only the peak memory changes.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ptmlab.core.errors import PtmlabError
from ptmlab.longseq.strategies import LongSettings, check_strategy, long_logits, long_loss

MICRO_TOKENS = 8192  # tokens per training micro-batch chosen automatically for chunk/window runs
EVAL_ROW_TOKENS = 128  # an evaluation pass holds about --eval-batch-size x this many tokens


def long_settings(cfg, pieces_per_pass: int = 8) -> LongSettings:
    """The strategy settings of a config with the ``LongArgs`` fields."""
    stride = cfg.long_chunk - 2 if cfg.long_strategy == "recurrence" else cfg.long_stride  # segments do not overlap
    s = LongSettings(length=cfg.long_chunk, stride=stride, pool=cfg.long_pool, batch_size=pieces_per_pass,
                     memory=cfg.long_memory, segment_pool=cfg.long_segment_pool)
    s.validate()
    return s


def piece_tokens(cfg) -> int:
    """The longest piece the model reads in one row under the config's strategy."""
    return cfg.long_chunk if cfg.long_strategy in ("chunk", "recurrence") else cfg.max_length


def tokens_per_example(cfg) -> int:
    """Upper bound on the tokens the model reads for one example (chunks overlap, so chunking reads more)."""
    if cfg.long_strategy not in ("chunk", "recurrence") or cfg.max_length <= cfg.long_chunk:
        return min(cfg.max_length, piece_tokens(cfg))
    body, size = cfg.max_length - 2, cfg.long_chunk - 2
    if cfg.long_strategy == "recurrence":  # every segment once (kept for the backward pass when pooled over segments)
        return math.ceil(body / size) * cfg.long_chunk
    return (math.ceil((body - size) / cfg.long_stride) + 1) * cfg.long_chunk


def eval_pieces_per_pass(cfg) -> int:
    """Pieces per forward pass in evaluation: about as many tokens as a 128-token evaluation batch."""
    return max(1, cfg.eval_batch_size * EVAL_ROW_TOKENS // piece_tokens(cfg))


def check_long_model(model, cfg, data=None) -> None:
    """PtmlabError when ``model`` cannot run the config's strategy at its ``--max-length``."""
    from ptmlab.longseq.convert import check_max_length

    if cfg.long_strategy == "truncate":
        check_max_length(model, cfg.max_length)
        return
    if data is not None:
        from ptmlab.data.labels import refuse_multi_label

        refuse_multi_label(data.spec.kind, f"--long-strategy {cfg.long_strategy}", "use --long-strategy truncate")
    if data is not None and any(s.text_pair is not None for s in data.splits.values()):
        raise PtmlabError(f"--long-strategy {cfg.long_strategy} reads one text per example, but task "
                          f"'{data.spec.name}' has text pairs: use --long-strategy truncate")
    check_strategy(model, cfg.long_strategy, long_settings(cfg), longest=cfg.max_length)


def micro_batch_accum(cfg, world: int = 1) -> int:
    """The smallest ``--grad-accum`` (a divisor of the per-process batch) whose micro-batches hold at most
    ``MICRO_TOKENS`` tokens (at least one example per micro-batch)."""
    per_process = max(1, cfg.batch_size // max(1, world))
    per_example = tokens_per_example(cfg)
    for k in range(1, cfg.batch_size + 1):
        if cfg.batch_size % k == 0 and math.ceil(per_process / k) * per_example <= MICRO_TOKENS:
            return k
    return cfg.batch_size


def long_evaluator(enc, spec, cfg, precision: str = "fp32") -> Callable:
    """``evaluator(model) -> (metrics, predictions)`` on the encoded split ``enc`` under the config's strategy."""
    settings = long_settings(cfg, eval_pieces_per_pass(cfg))

    def evaluator(model):
        return evaluate_long(model, enc, spec, cfg.long_strategy, settings, precision)

    evaluator.logits_only = True  # pooled logits alone (see ptmlab.models.first_token)
    return evaluator


def evaluate_long(model, enc, spec, strategy: str, settings: LongSettings,
                  precision: str = "fp32") -> tuple[dict[str, float], np.ndarray]:
    """Task metrics (and predictions) of ``model`` on ``enc`` when each document is read by ``strategy``."""
    from ptmlab.data.metrics import compute_metrics
    from ptmlab.train.evaluate import autocast_ctx, logits_to_predictions

    device = next(model.parameters()).device
    with autocast_ctx(precision, device):
        logits = long_logits(model, enc.input_ids, strategy, settings).float().cpu().numpy()
    preds = logits_to_predictions(logits, spec)
    if enc.labels is None:
        return {}, preds
    return compute_metrics(spec.metrics, preds, enc.labels), preds


@dataclass
class LongPlan:
    """What a chunk/window fine-tuning run passes to ``run_finetune``."""

    cfg: object  # the config to run (micro-batching and the test split adjusted, see notes)
    loss_fn: Callable | None = None
    evaluator: Callable | None = None
    notes: list[str] = dataclasses.field(default_factory=list)


def plan_long_finetune(cfg, resume: bool = False) -> LongPlan:
    """Check the model against the strategy before anything is written and build the loss and dev evaluator.

    ``truncate`` keeps ordinary fine-tuning (only the length is checked, when ``--max-length`` exceeds 512)."""
    import os

    from ptmlab.data.encode import encode_split
    from ptmlab.data.taskdata import load_task_data
    from ptmlab.models.zoo import load_tokenizer
    from ptmlab.train.evaluate import resolve_precision
    from ptmlab.train.lifecycle import build_task_model

    if cfg.long_strategy == "truncate" and cfg.max_length <= 512:
        return LongPlan(cfg)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if cfg.long_strategy == "recurrence" and world > 1:
        raise PtmlabError(f"--long-strategy recurrence runs one forward pass per segment, which distributed training "
                          f"does not support ({world} processes): run it in one process")
    data = load_task_data(cfg)
    model = build_task_model(cfg, data)
    check_long_model(model, cfg, data)
    del model
    if cfg.long_strategy == "truncate":
        return LongPlan(cfg)
    notes = []
    if not resume and cfg.grad_accum == 1:
        k = micro_batch_accum(cfg, world)
        if k > 1:
            cfg = dataclasses.replace(cfg, grad_accum=k)
            notes.append(f"--long-strategy {cfg.long_strategy}: each batch of {cfg.batch_size} runs as {k} "
                         f"micro-batches (--grad-accum {k}, same gradient) to bound memory; pass --grad-accum to "
                         f"choose")
    if not resume and cfg.test and "test" in data.splits:
        cfg = dataclasses.replace(cfg, test=False)
        notes.append(f"the test split is not scored during a {cfg.long_strategy} run: score it with `ptmlab evaluate "
                     f"{cfg.output} --split test --long-strategy {cfg.long_strategy}`")
    tokenizer = load_tokenizer(cfg.model)
    enc = encode_split(tokenizer, data.splits["dev"], cfg.max_length)
    regression = data.spec.kind == "regression"
    loss_fn = long_loss(cfg.long_strategy, long_settings(cfg), regression=regression)
    evaluator = long_evaluator(enc, data.spec, cfg, resolve_precision(cfg.precision))
    return LongPlan(cfg, loss_fn, evaluator, notes)


def print_notes(notes: list[str]) -> None:
    for n in notes:
        print(f"note: {n}", file=sys.stderr)
