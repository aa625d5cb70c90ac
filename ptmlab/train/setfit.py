"""SetFit few-shot fine-tuning (``--strategy setfit``): a contrastive phase on pairs, then the head on frozen features.

With a handful of labelled examples per class, a task head trained with the encoder (standard fine-tuning) has too
few gradient steps and too many parameters to learn from. SetFit (Tunstall et al., 2022) first turns the few examples
into many training pairs: two examples of the same class make a positive pair (target cosine similarity 1), two of
different classes a negative pair (target 0). The encoder, read as a sentence embedder (mean of the last hidden states
over the real tokens), is fine-tuned on them with the cosine-similarity loss ``(cos(u, v) - target)^2``, so that
examples of a class gather together. Then a classifier is trained on the resulting embeddings with the encoder frozen.

In ptmlab both phases run through the one training loop (``train.loop.Trainer``) on the one model:

1. the model gets the ``mean_pooling`` modification (``models.mean_pooling``): its head reads the mean-pooled vector,
   so the head later sees exactly the embedding the contrastive phase shaped (BERT's pooler is removed, so its
   classifier is a linear layer on that vector: logistic regression);
2. the contrastive phase: ``--setfit-pairs`` pairs drawn from the training examples (seeded; half positive, half
   negative), ``--setfit-batch-size`` pairs per step, one pass, the encoder's rate ``--setfit-lr``; a pair batch
   source (``PairSource``) and the pair loss (``cosine_pair_loss``) plug into the loop as any batch source and loss do;
3. the head phase: the ordinary task training with the encoder frozen (as ``--strategy frozen``), evaluation,
   checkpoints and the run directory as for any run. Left at their defaults, ``--lr`` becomes 1e-2 and the head
   trains for 50 steps, evaluated once at the end (``setfit_recipe``): a linear head on fixed features needs a
   large rate, and evaluating after every step of a 16-example epoch would cost more than training.

The saved model is an ordinary sequence classifier with a recorded modification, so ``predict``, ``evaluate``,
``serve``, ``export``, ``distill``, ``prune`` and ``optimize`` load it like any run. ``--max-train-per-class K``
picks the few examples (K per class, seeded). Sentence-pair tasks embed the pair as the tokenizer encodes it.
A resumed run restarts from its head-phase checkpoint, which holds the encoder as the contrastive phase left it.
"""

from __future__ import annotations

import dataclasses
import math
import os
import random
import time

import torch
import torch.nn.functional as F

from ptmlab.core.errors import PtmlabError
from ptmlab.data.batching import collate
from ptmlab.data.encode import Encoded

MAX_DEFAULT_PAIRS = 5000
PAIRS_PER_EXAMPLE = 40  # SetFit's default: 20 iterations, each one positive and one negative pair per example
HEAD_LR = 1e-2
HEAD_STEPS = 50
CONTRASTIVE_WARMUP = 0.1
WORKING_KINDS = "single-label classification (single sentences or sentence pairs)"


def setfit_recipe(cfg):
    """The head phase's defaults: ``--lr`` left at its default becomes 1e-2; ``--epochs`` and ``--max-steps`` left
    alone become 50 steps; ``--eval-steps`` left at 0 evaluates once, at the end."""
    defaults = {f.name: f.default for f in dataclasses.fields(cfg)}
    changes = {}
    if cfg.lr == defaults["lr"]:
        changes["lr"] = HEAD_LR
    if not cfg.max_steps and cfg.epochs == defaults["epochs"]:
        changes["max_steps"] = HEAD_STEPS
    steps = changes.get("max_steps", cfg.max_steps)
    if not cfg.eval_steps and steps:
        changes["eval_steps"] = steps
    return dataclasses.replace(cfg, **changes) if changes else cfg


def check_setfit(data, model) -> None:
    """Everything ``--strategy setfit`` needs, checked before anything is written: a single-label classification
    task, two examples of each class present (a positive pair), two classes (a negative pair), one process and a
    model whose head can read mean-pooled vectors."""
    from ptmlab.data.taskdata import label_names
    from ptmlab.models.mean_pooling import FIRST_POSITION_HEADS

    spec = data.spec
    if spec.kind != "classification":
        raise PtmlabError(f"--strategy setfit learns from same-class and different-class pairs, but task "
                          f"'{spec.name}' is {spec.kind}: it works for {WORKING_KINDS}; use --strategy full here")
    labels = data.splits["train"].label
    names = label_names(data) or []
    counts: dict = {}
    for y in labels:
        counts[y] = counts.get(y, 0) + 1
    for y, n in sorted(counts.items()):
        if n < 2:
            name = names[y] if y < len(names) else y
            raise PtmlabError(f"--strategy setfit needs two examples of each class to form a same-class pair, but "
                              f"class '{name}' has {n}: use --max-train-per-class 2 or more, or add examples")
    if len(counts) < 2:
        raise PtmlabError("--strategy setfit needs examples of at least two classes to form different-class pairs: "
                          "check the training data")
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise PtmlabError("--strategy setfit trains on one process (a few examples): run it without torchrun")
    family = getattr(model.config, "model_type", None)
    if family not in FIRST_POSITION_HEADS or not type(model).__name__.endswith("ForSequenceClassification"):
        raise PtmlabError(f"--strategy setfit needs an encoder whose classification head reads the first position "
                          f"({', '.join(FIRST_POSITION_HEADS)}); '{family}' ({type(model).__name__}) is not one")


def default_pairs(n_examples: int) -> int:
    return min(MAX_DEFAULT_PAIRS, PAIRS_PER_EXAMPLE * n_examples)


def draw_pairs(labels: list[int], n: int, seed: int) -> list[tuple[int, int, float]]:
    """``n`` pairs ``(i, j, target)`` of example indices, alternating positive (same class, target 1) and negative
    (different classes, target 0): an anchor drawn uniformly, its partner uniformly among the others of its class or
    among the examples of other classes. Seeded; every class needs two examples and two classes are needed."""
    rng = random.Random(seed)
    by_class: dict = {}
    for i, y in enumerate(labels):
        by_class.setdefault(y, []).append(i)
    others = {y: [i for i, z in enumerate(labels) if z != y] for y in by_class}
    pairs = []
    for k in range(n):
        a = rng.randrange(len(labels))
        y = labels[a]
        if k % 2 == 0:
            same = by_class[y]
            b = same[rng.randrange(len(same) - 1)]
            b = same[-1] if b == a else b  # uniform over the class without the anchor
            pairs.append((a, b, 1.0))
        else:
            pairs.append((a, rng.choice(others[y]), 0.0))
    return pairs


class PairSource:
    """Pairs of encoded examples as a batch source of the training loop (``len``, ``lengths``, ``make_batch``): each
    batch holds the first texts under ``a_*``, the second under ``b_*`` and the targets as float ``labels``."""

    def __init__(self, enc: Encoded, pairs: list[tuple[int, int, float]], pad_id: int):
        self.enc, self.pairs, self.pad_id = enc, pairs, pad_id

    def __len__(self) -> int:
        return len(self.pairs)

    @property
    def lengths(self) -> list[int]:
        ids = self.enc.input_ids
        return [len(ids[a]) + len(ids[b]) for a, b, _ in self.pairs]

    def make_batch(self, indices: list[int], epoch: int = 0) -> dict:
        batch = {}
        for side, col in (("a", 0), ("b", 1)):
            part = collate(self.enc, [self.pairs[i][col] for i in indices], self.pad_id)
            batch.update({f"{side}_{k}": v for k, v in part.items()
                          if k in ("input_ids", "attention_mask", "token_type_ids")})
        batch["labels"] = torch.tensor([self.pairs[i][2] for i in indices], dtype=torch.float)
        return batch


def cosine_pair_loss(model, batch: dict) -> torch.Tensor:
    """Per pair: (cosine similarity of the two mean-pooled vectors - target)^2 (SetFit's CosineSimilarityLoss)."""
    from ptmlab.models.mean_pooling import sentence_vectors

    u = sentence_vectors(model, {k[2:]: v for k, v in batch.items() if k.startswith("a_")})
    v = sentence_vectors(model, {k[2:]: v for k, v in batch.items() if k.startswith("b_")})
    return (F.cosine_similarity(u.float(), v.float(), dim=-1) - batch["labels"].float()) ** 2


def contrastive_phase(model, train_enc: Encoded, cfg, run, pad_id: int) -> dict:
    """Fine-tune ``model``'s encoder (mean-pooled) on pairs of ``train_enc``'s examples through the training loop;
    returns what the summary records about it."""
    from ptmlab.train.lifecycle import mark_stage
    from ptmlab.train.loop import Trainer
    from ptmlab.train.strategies import Strategy

    n_pairs = cfg.setfit_pairs or default_pairs(len(train_enc))
    pairs = draw_pairs(list(train_enc.labels), n_pairs, cfg.seed)
    source = PairSource(train_enc, pairs, pad_id)
    steps = max(1, math.ceil(n_pairs / cfg.setfit_batch_size))
    phase_cfg = dataclasses.replace(
        cfg, strategy="full", lr=cfg.setfit_lr, batch_size=cfg.setfit_batch_size, grad_accum=1, epochs=1.0,
        max_steps=steps, warmup=CONTRASTIVE_WARMUP, schedule="linear", llrd=1.0, eval_steps=0, save_steps=10**9,
        early_stopping=0, keep_best=False, report_to="none")
    mark_stage(run, "setfit: contrastive pairs", pairs=n_pairs, steps=steps)
    start = time.perf_counter()
    trainer = Trainer(model, source, phase_cfg, run, pad_id, loss_fn=cosine_pair_loss, strategy=Strategy(phase_cfg))
    state = trainer.train()
    positives = sum(1 for *_, t in pairs if t == 1.0)
    mark_stage(run, "setfit: head")
    return {"pairs": n_pairs, "positive_pairs": positives, "negative_pairs": n_pairs - positives,
            "contrastive_steps": state.step, "contrastive_lr": cfg.setfit_lr,
            "contrastive_batch_size": cfg.setfit_batch_size,
            "contrastive_seconds": round(time.perf_counter() - start, 3)}
