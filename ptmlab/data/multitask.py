"""Several tasks' data as one training source for the one loop: task-homogeneous batches, tasks sampled by size.

MT-DNN trains one encoder on many tasks by drawing, at each step, a batch of one task. ``MultiTaskSource`` gives the
loop (``ptmlab.train.loop``) what it asks of any data source -- ``lengths``, ``make_batch(indices, epoch)`` -- plus
``plan_batches(batch_size, seed, epoch)``, the epoch's batches, so every batch holds examples of one task. An index
is global (task offset + index within the task); ``make_batch`` collates the task's examples with task-local
``index`` values and adds ``task_id``, which the multi-task loss and distillation read to pick the head.

How often each task is drawn (``--task-sampling``): ``proportional`` to its training examples (MT-DNN's default:
every example is seen about once per epoch), ``uniform`` (every task as often), or ``sqrt`` (proportional to the
square root of the size: a middle ground that lifts small tasks without repeating them too often). The plan is a
pure function of (seed, epoch), so a resumed run sees the same batches.
"""

from __future__ import annotations

import dataclasses
import math
import random

import torch

from ptmlab.core.errors import PtmlabError
from ptmlab.data.batching import collate
from ptmlab.data.encode import Encoded
from ptmlab.data.loaders import TaskData
from ptmlab.data.tasks import TASKS

SAMPLINGS = ("proportional", "uniform", "sqrt")


def parse_tasks(text: str | list[str]) -> list[str]:
    """``sst2,mrpc,rte`` -> registered task names, in order; unknown, repeated or too few names are one-line errors."""
    names = [t.strip() for t in (text.split(",") if isinstance(text, str) else text) if t and t.strip()]
    if len(names) < 2:
        raise PtmlabError(f"--tasks '{text}' names {len(names)} task(s): give two or more, e.g. sst2,mrpc,rte "
                          f"(use --task for one)")
    dup = sorted({t for t in names if names.count(t) > 1})
    if dup:
        raise PtmlabError(f"--tasks repeats {', '.join(dup)}: name each task once, e.g. sst2,mrpc,rte")
    unknown = [t for t in names if t not in TASKS]
    if unknown:
        raise PtmlabError(f"--tasks names unknown task '{unknown[0]}': choose from {', '.join(TASKS.names())}")
    return names


def load_multitask_data(cfg, tasks: list[str], *, need_train: bool = True) -> dict[str, TaskData]:
    """Each task's data with ``cfg``'s data options (--max-train, --max-eval, --glue-dir) applied to every task."""
    from ptmlab.data.taskdata import load_task_data

    if any(getattr(cfg, f, None) for f in ("train_file", "dev_file", "test_file")):
        raise PtmlabError("--tasks reads registered tasks: drop --train-file/--dev-file/--test-file (they name one "
                          "task's files)")
    return {t: load_task_data(dataclasses.replace(cfg, task=t), need_train=need_train) for t in tasks}


def task_probabilities(sizes: list[int], sampling: str) -> list[float]:
    """The share of batches each task gets under ``sampling``."""
    if sampling not in SAMPLINGS:
        raise PtmlabError(f"--task-sampling '{sampling}' is unknown: choose {', '.join(SAMPLINGS)}")
    weights = {"proportional": [float(n) for n in sizes], "uniform": [1.0] * len(sizes),
               "sqrt": [math.sqrt(n) for n in sizes]}[sampling]
    total = sum(weights)
    return [w / total for w in weights]


def allocate(n_batches: int, probs: list[float]) -> list[int]:
    """Batches per task: largest remainder of ``n_batches * p``, every task at least one when there is room."""
    raw = [n_batches * p for p in probs]
    counts = [int(r) for r in raw]
    for i in sorted(range(len(raw)), key=lambda i: -(raw[i] - counts[i]))[:n_batches - sum(counts)]:
        counts[i] += 1
    if n_batches >= len(probs):
        for i, c in enumerate(counts):
            if c == 0:
                counts[i] = 1
                counts[max(range(len(counts)), key=lambda j: counts[j])] -= 1
    return counts


class MultiTaskSource:
    """Encoded splits of several tasks as one source of task-homogeneous batches (see the module docstring)."""

    def __init__(self, encs: dict[str, Encoded], pad_id: int, sampling: str = "proportional",
                 regression: dict[str, bool] | None = None):
        self.tasks = list(encs)
        self.encs = encs
        self.pad_id = pad_id
        self.sampling = sampling
        self.regression = regression or {}
        self.offsets = [0]
        for t in self.tasks:
            self.offsets.append(self.offsets[-1] + len(encs[t]))
        self.probs = task_probabilities([len(encs[t]) for t in self.tasks], sampling)

    def __len__(self) -> int:
        return self.offsets[-1]

    @property
    def lengths(self) -> list[int]:
        return [n for t in self.tasks for n in self.encs[t].lengths]

    def locate(self, i: int) -> tuple[int, int]:
        """Global index -> (task number, index within the task)."""
        for k in range(len(self.tasks)):
            if i < self.offsets[k + 1]:
                return k, i - self.offsets[k]
        raise IndexError(i)

    def plan_batches(self, batch_size: int, seed: int, epoch: int) -> list[list[int]]:
        """The epoch's batches (global indices), each of one task, in a seeded order."""
        rng = random.Random(seed * 1000003 + epoch)
        counts = allocate(max(1, math.ceil(len(self) / batch_size)), self.probs)
        batches = []
        for k, t in enumerate(self.tasks):
            n = len(self.encs[t])
            size = min(batch_size, n)
            stream: list[int] = []
            while len(stream) < counts[k] * size:  # reshuffled passes over the task when it is drawn often
                order = list(range(n))
                rng.shuffle(order)
                stream.extend(order)
            off = self.offsets[k]
            batches.extend([off + i for i in stream[b * size:(b + 1) * size]] for b in range(counts[k]))
        rng.shuffle(batches)
        return batches

    def make_batch(self, indices: list[int], epoch: int) -> dict:
        located = [self.locate(i) for i in indices]
        k = located[0][0]
        if any(j != k for j, _ in located):
            raise ValueError("a multi-task batch mixes tasks")  # never: plan_batches keeps tasks apart
        t = self.tasks[k]
        batch = collate(self.encs[t], [i for _, i in located], self.pad_id, self.regression.get(t, False))
        batch["task_id"] = torch.full((len(indices),), k, dtype=torch.long)
        return batch
