"""The objective contract, the registry, and the module the training loop trains.

An objective turns token blocks into a corrupted batch (``make_batch``, numpy, one RNG per example so the
corruption of an example does not depend on how a batch is split) and that batch into one loss per example.

The loop trains ``objective.wrap(model)``, a ``PretrainModel`` holding the transformers model that is kept and
saved (``.model``) plus the objective's extra trainable parts (ELECTRA's generator, SpanBERT's boundary head).
The whole loss is computed in its ``forward``, so under DDP every parameter (the generator too) is synchronised
by the one wrapper, parameters shared between the parts (ELECTRA's embeddings) are one parameter, and a masked
LM can apply its vocabulary head to the masked positions only (the head is most of a small model's compute).
"""

from __future__ import annotations

import inspect

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ptmlab.core.errors import PtmlabError
from ptmlab.core.registry import Registry
from ptmlab.pretrain.objectives.tokens import TokenInfo, token_info

OBJECTIVES: Registry[type[Objective]] = Registry("objective")

ARCH_KINDS = {"encoder": "an encoder", "decoder": "a decoder", "seq2seq": "an encoder-decoder",
              "permutation": "a permutation language model"}


class PretrainModel(nn.Module):
    """The trained module: ``model`` (kept and saved) plus the objective's extra parts; ``forward`` -> loss [n]."""

    def __init__(self, model: nn.Module, objective: Objective, **extras: nn.Module):
        super().__init__()
        self.model = model
        for name, module in extras.items():
            self.add_module(name, module)
        self.objective = objective  # not a module: a plain attribute

    def forward(self, **batch: torch.Tensor) -> torch.Tensor:
        return self.objective.forward(self, batch)


def unwrap(model: nn.Module) -> nn.Module:
    """The module inside a DDP / accelerate wrapper."""
    while hasattr(model, "module") and isinstance(model.module, nn.Module):
        model = model.module
    return model


class Objective:
    """Base class. Subclasses set the class attributes and implement ``make_batch`` and ``forward``."""

    name: str = ""
    arch_kind: str = "encoder"  # encoder | decoder | seq2seq | permutation
    head: str = "mlm"  # the pre-training head the model needs (see ptmlab.pretrain.models.ARCHS)
    default_arch: str = "bert"
    needs_mask: bool = False  # the tokenizer must have a mask token
    masking: str = "dynamic"  # static: the same corruption every epoch (BERT); dynamic: new each epoch (RoBERTa)

    def __init__(self, tokenizer, masking: str = "dynamic"):
        if masking not in ("static", "dynamic"):
            raise PtmlabError(f"--masking must be static or dynamic, got '{masking}'")
        self.tokenizer = tokenizer
        self.tok: TokenInfo = token_info(tokenizer)
        self.masking = masking

    # ------------------------------------------------------------------ shape of a block
    def content_length(self, block_size: int) -> int:
        """How many corpus tokens one block holds (``block_size`` minus the special tokens added around them)."""
        return block_size - len(self.tok.prefix) - len(self.tok.suffix)

    def separator(self) -> int:
        """The id put between documents when the corpus is packed (``pack_blocks(corpus, n, sep_id)``)."""
        return self.tok.doc_sep_id

    def vocab_size(self) -> int:
        """The model vocabulary this objective needs (T5 adds sentinels when the tokenizer has none)."""
        return self.tok.vocab_size

    # ------------------------------------------------------------------ checks
    def check(self, tokenizer=None, model_config=None) -> None:
        """PtmlabError for a tokenizer or a model this objective cannot use."""
        tok = token_info(tokenizer) if tokenizer is not None else self.tok
        if self.needs_mask and tok.mask_id is None:
            raise PtmlabError(f"objective {self.name} masks tokens, but the tokenizer has no mask token: use a "
                              f"tokenizer with one (e.g. --tokenizer minilm, or one from `ptmlab tokenizer "
                              f"train`)")
        if model_config is not None:
            from ptmlab.pretrain.models import check_pair

            check_pair(model_config, self)
            vocab = getattr(model_config, "vocab_size", None)
            if vocab is not None and vocab < self.vocab_size():
                raise PtmlabError(f"the model's vocabulary has {vocab} entries but objective {self.name} with this "
                                  f"tokenizer needs {self.vocab_size()}: build the model with this tokenizer")

    # ------------------------------------------------------------------ batches and losses
    def make_batch(self, blocks: list[np.ndarray], rngs: list[np.random.Generator], *, source=None,
                   indices: list[int] | None = None) -> dict[str, torch.Tensor]:
        """Collate and corrupt ``blocks`` (each ``content_length`` tokens); ``rngs[i]`` drives example i.

        ``source`` (the whole ``Blocks``) and ``indices`` let sentence-pair objectives draw another block."""
        raise NotImplementedError

    def wrap(self, model: nn.Module) -> PretrainModel:
        """The module the loop trains (and checkpoints): the kept model plus this objective's extra parts."""
        return PretrainModel(model, self)

    def forward(self, pm: PretrainModel, batch: dict) -> torch.Tensor:
        raise NotImplementedError

    def loss(self, model: nn.Module, batch: dict) -> torch.Tensor:
        """Per-example loss [n] of a wrapped model: the loop's ``loss_fn(model, batch)``."""
        if not isinstance(unwrap(model), PretrainModel):
            raise TypeError("objective.loss needs the module from objective.wrap(model)")
        return model(**batch)

    def module(self) -> nn.Module | None:
        """Extra parameters for the loop's ``loss_module``: none, they live in ``wrap(model)``."""
        return None

    def kept_model(self, model: nn.Module) -> nn.Module:
        """What is saved at the end of a run (ELECTRA: the discriminator)."""
        m = unwrap(model)
        return m.model if isinstance(m, PretrainModel) else m

    @classmethod
    def option_names(cls) -> list[str]:
        params = inspect.signature(cls.__init__).parameters
        return [p for p in params if p not in ("self", "tokenizer")]


def build_objective(name: str, tokenizer, **options) -> Objective:
    """The objective ``name`` bound to ``tokenizer``; options set to None are left at their defaults."""
    cls = OBJECTIVES.get(name)
    options = {k: v for k, v in options.items() if v is not None}
    allowed = cls.option_names()
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise PtmlabError(f"objective {name} takes no option {', '.join(unknown)}: its options are "
                          f"{', '.join(allowed) or 'none'}")
    obj = cls(tokenizer, **options)
    obj.check()
    return obj


# ---------------------------------------------------------------------- helpers shared by the objectives
def per_example_mean(values: torch.Tensor, rows: torch.Tensor, n: int) -> torch.Tensor:
    """Mean of ``values`` grouped by example index ``rows`` -> [n] (0 for an example with nothing to predict)."""
    total = torch.zeros(n, dtype=values.dtype, device=values.device).index_add(0, rows, values)
    count = torch.zeros(n, dtype=values.dtype, device=values.device).index_add(0, rows, torch.ones_like(values))
    return total / count.clamp_min(1)


def token_ce(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Cross-entropy per example over the positions whose label is not -100: logits [B, T, V], labels [B, T]."""
    ce = F.cross_entropy(logits.float().flatten(0, 1), labels.flatten(), reduction="none", ignore_index=-100)
    valid = (labels != -100).to(ce.dtype)
    return (ce.view_as(valid) * valid).sum(-1) / valid.sum(-1).clamp_min(1)


def stack(rows: list[np.ndarray]) -> torch.Tensor:
    return torch.from_numpy(np.stack(rows).astype(np.int64))
