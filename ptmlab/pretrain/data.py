"""The adapter between token blocks and the training loop: one corrupted batch per list of block indices.

Each example gets its own RNG seeded by (seed, epoch, block index), so an example's corruption is the same
whatever batch or process it lands in (exact resume, DDP, gradient accumulation all see the same data);
``static=True`` fixes the epoch at 0, so every epoch sees the same masks (BERT's static masking) rather than
new ones (RoBERTa's dynamic masking).
"""

from __future__ import annotations

import numpy as np
import torch

from ptmlab.pretrain.corpus import Blocks
from ptmlab.pretrain.objectives import Objective


class PretrainData:
    def __init__(self, blocks: Blocks, objective: Objective, seed: int, static: bool | None = None):
        self.blocks = blocks
        self.objective = objective
        self.seed = int(seed)
        self.static = objective.masking == "static" if static is None else bool(static)

    def __len__(self) -> int:
        return len(self.blocks)

    @property
    def lengths(self) -> list[int]:
        return [self.blocks.length] * len(self.blocks)

    def rngs(self, indices: list[int], epoch: int) -> list[np.random.Generator]:
        e = 0 if self.static else int(epoch)
        return [np.random.default_rng([self.seed, e, int(i)]) for i in indices]

    def make_batch(self, indices: list[int], epoch: int) -> dict[str, torch.Tensor]:
        indices = [int(i) for i in indices]
        blocks = [self.blocks[i] for i in indices]
        batch = self.objective.make_batch(blocks, self.rngs(indices, epoch), source=self.blocks, indices=indices)
        batch["index"] = torch.tensor(indices, dtype=torch.long)
        return batch
