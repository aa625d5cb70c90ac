"""Fine-tuning strategies: which parameters train, when, and what the saved model looks like.

Each strategy is a small class registered under the name ``--strategy`` uses. The loop calls ``prepare`` before
building the optimizer, ``update`` before every optimizer step (gradual unfreezing changes what trains), and
``finalize`` before saving (LoRA merges into the base weights).
"""

from __future__ import annotations

from ptmlab.core.registry import Registry
from ptmlab.models.structure import structure_of
from ptmlab.train.optim import depth_groups

STRATEGIES: Registry = Registry("strategy")


class Strategy:
    name = "full"

    def __init__(self, cfg):
        self.cfg = cfg
        self.frozen: set[str] = set()  # parameter names whose gradients are dropped before each step

    def prepare(self, model):
        return model

    def update(self, model, step: int, epoch: int, steps_per_epoch: int) -> None:
        """Called before every step; may change ``self.frozen``."""

    def apply_frozen(self, model) -> None:
        """Drop gradients of frozen parameters (AdamW then leaves them, and their moments, untouched)."""
        if not self.frozen:
            return
        for n, p in _unwrap(model).named_parameters():
            if n in self.frozen:
                p.grad = None

    def finalize(self, model):
        return model

    def extra_save(self, model, out_dir) -> None:
        """Write strategy-specific files next to the saved model (adapters, LoRA weights)."""

    def check(self, data, model) -> None:
        """Refuse task data or a model the strategy cannot train (before anything is written)."""

    def before_fit(self, model, enc, cfg, run, pad_id: int, resume: bool = False) -> None:
        """A phase before the task training, through the same loop (SetFit's contrastive pairs)."""


def _unwrap(model):
    return getattr(model, "module", model)


def trainable_parameters(model) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def _head_names(model) -> set[str]:
    groups = depth_groups(model, "--strategy frozen")
    return set(groups[0][1]) if groups[0][0] == "head" else set()


@STRATEGIES.register("full", help="train every parameter")
class Full(Strategy):
    name = "full"


@STRATEGIES.register("frozen", help="feature extraction: encoder frozen, task head (and pooler) trained")
class Frozen(Strategy):
    name = "frozen"

    def prepare(self, model):
        head = _head_names(model)
        for n, p in model.named_parameters():
            p.requires_grad = n in head
        return model


def unfreeze_every(cfg, steps_per_epoch: int, groups: int) -> int:
    """Steps between unfreezing two layer groups: ``--unfreeze-every``, else the whole training budget spread evenly
    over the groups (ULMFiT unfreezes one group per epoch over as many epochs as groups; with fewer epochs than
    groups, one per epoch would leave the lower layers frozen for good)."""
    if cfg.unfreeze_every:
        return cfg.unfreeze_every
    import math

    total = cfg.max_steps or max(1, math.ceil(cfg.epochs * steps_per_epoch))
    return max(1, total // max(1, groups))


def unfreeze_schedule(names: list[str], every: int) -> list[dict]:
    """The step at which each layer group (top first, as ``depth_groups`` names them) starts training."""
    return [{"group": name, "from_step": i * every} for i, name in enumerate(names)]


@STRATEGIES.register("gradual-unfreeze", help="ULMFiT: start with the head, unfreeze one layer group at a time from "
                                              "the top, spread evenly over the training steps (or every "
                                              "--unfreeze-every steps)")
class GradualUnfreeze(Strategy):
    name = "gradual-unfreeze"

    def prepare(self, model):
        self.groups = depth_groups(model, f"--strategy {self.name}")
        self.stage = -1
        return model

    def update(self, model, step, epoch, steps_per_epoch):
        every = unfreeze_every(self.cfg, steps_per_epoch, len(self.groups))
        stage = min(step // every, len(self.groups) - 1)
        if stage == self.stage:
            return
        self.stage = stage
        self.frozen = {n for _, names in self.groups[stage + 1:] for n in names}
        import torch.distributed as dist

        distributed = dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1
        if not distributed:  # one process: skip the backward pass through frozen layers entirely
            for n, p in _unwrap(model).named_parameters():
                p.requires_grad = n not in self.frozen


@STRATEGIES.register("ulmfit", help="ULMFiT recipe: gradual unfreezing + slanted triangular schedule + "
                                    "discriminative rates (llrd 1/2.6 unless set)")
class Ulmfit(GradualUnfreeze):
    name = "ulmfit"


@STRATEGIES.register("adapter", help="Houlsby bottleneck adapters; only adapters, LayerNorms and head train")
class AdapterStrategy(Strategy):
    name = "adapter"

    def prepare(self, model):
        from ptmlab.models.adapters import adapter_trainable_names, add_adapters

        add_adapters(model, size=self.cfg.adapter_size)
        keep = set(adapter_trainable_names(model))
        for n, p in model.named_parameters():
            p.requires_grad = n in keep
        return model

    def extra_save(self, model, out_dir) -> None:
        from ptmlab.models.adapters import save_adapters

        save_adapters(_unwrap(model), out_dir / "adapter")


@STRATEGIES.register("lora", help="LoRA on attention query/value (peft); merged into the weights when saved")
class Lora(Strategy):
    name = "lora"

    def prepare(self, model):
        from peft import LoraConfig, TaskType, get_peft_model

        s = structure_of(model, "--strategy lora")
        # peft matches a module whose name ends with a target: the attention query/value by default
        targets = list(self.cfg.lora_target_modules) if getattr(self.cfg, "lora_target_modules", None) else \
            sorted({s.query.split(".")[-1], s.value.split(".")[-1]})
        names = {n for n, _ in model.named_modules()}
        missing = [t for t in targets if not any(n == t or n.endswith("." + t) for n in names)]
        if missing:
            from ptmlab.core.errors import PtmlabError

            linear = sorted({n.split(".")[-1] for n, m in model.named_modules() if type(m).__name__ == "Linear"})
            raise PtmlabError(f"--lora-target-modules {','.join(missing)} names no module of this "
                              f"'{s.family}' model: choose from {', '.join(linear)}")
        extra = [h.split(".")[-1] for h in s.head] + ([s.pooler] if s.pooler else [])
        conf = LoraConfig(task_type=TaskType.SEQ_CLS, r=self.cfg.lora_r, lora_alpha=self.cfg.lora_alpha,
                          lora_dropout=self.cfg.lora_dropout, target_modules=targets, modules_to_save=extra)
        return get_peft_model(model, conf)

    def extra_save(self, model, out_dir) -> None:
        import shutil
        import tempfile

        tmp = tempfile.mkdtemp(prefix=".lora-", dir=out_dir)
        _unwrap(model).save_pretrained(tmp, safe_serialization=True)
        shutil.rmtree(out_dir / "lora", ignore_errors=True)
        import os

        os.replace(tmp, out_dir / "lora")

    def finalize(self, model):
        return _unwrap(model).merge_and_unload()


@STRATEGIES.register("setfit", help="few-shot SetFit: the encoder, mean-pooled, first learns from same-class and "
                                    "different-class pairs (cosine loss; --setfit-pairs, --setfit-lr), then the head "
                                    "trains on it frozen; with --max-train-per-class K")
class SetFit(Frozen):
    name = "setfit"
    summary: dict | None = None  # the contrastive phase's numbers, for summary.json

    def check(self, data, model) -> None:
        from ptmlab.train.setfit import check_setfit

        check_setfit(data, model)

    def before_fit(self, model, enc, cfg, run, pad_id: int, resume: bool = False) -> None:
        from ptmlab.models.mean_pooling import use_mean_pooling
        from ptmlab.train.setfit import contrastive_phase

        use_mean_pooling(model)
        if not resume:  # a checkpoint of the head phase holds the encoder as the contrastive phase left it
            self.summary = contrastive_phase(model, enc["train"], cfg, run, pad_id)


def make_strategy(cfg) -> Strategy:
    return STRATEGIES.get(cfg.strategy)(cfg)
