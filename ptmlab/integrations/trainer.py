"""ptmlab's fine-tuning strategies and distillation losses for a ``transformers.Trainer`` script.

Three pieces, each the code ptmlab's own loop runs (nothing re-implemented here):

- ``optimizer_and_scheduler(model, args, num_training_steps, llrd=..., schedule=...)``: AdamW with layer-wise
  learning rates (``--llrd``; ``ptmlab.train.optim.build_optimizer``) and ptmlab's schedules, the slanted
  triangular one included (``build_scheduler``), for ``Trainer(optimizers=...)``;
- ``GradualUnfreezing``: a ``TrainerCallback`` that unfreezes the layer groups from the top, one group every
  ``every`` steps (default: the training steps spread evenly over the groups), with
  ``ptmlab.train.strategies.GradualUnfreeze``;
- ``DistillationTrainer``: a ``Trainer`` whose training loss reads a teacher through ptmlab's distillation losses
  by name (``losses=["soft_ce", "hidden_mse"]``), layer maps, learned projections and on-the-fly teacher features
  (``ptmlab.distill``); evaluation keeps the Trainer's own task loss.

    trainer = Trainer(model, args, train_dataset=ds, optimizers=optimizer_and_scheduler(model, args, steps,
                      llrd=1 / 2.6, schedule="stlr"), callbacks=[GradualUnfreezing()])
    trainer = DistillationTrainer(model=student, args=args, train_dataset=ds, teacher=teacher,
                                  losses=["soft_ce", "hidden_mse"])
"""

from __future__ import annotations

from types import SimpleNamespace

import torch
from transformers import Trainer, TrainerCallback


def optimizer_and_scheduler(model, args, num_training_steps: int, *, llrd: float = 1.0, schedule: str = "linear",
                            stlr_cut_frac: float = 0.1, stlr_ratio: float = 32.0):
    """``(optimizer, scheduler)`` for ``Trainer(optimizers=...)``: ptmlab's AdamW with layer-wise rates (the head
    and top layer at ``args.learning_rate``, each layer below ``llrd`` times the one above, the embeddings last)
    and its schedule ``linear``, ``cosine``, ``stlr`` (slanted triangular, ULMFiT) or ``constant``, with
    ``args.warmup_ratio`` as the warm-up of the linear, cosine and constant schedules."""
    from ptmlab.core.errors import PtmlabError
    from ptmlab.train.optim import SCHEDULES, build_optimizer, build_scheduler

    if not 0 < llrd <= 1:
        raise PtmlabError(f"llrd must be in (0, 1], got {llrd}")
    if num_training_steps < 1:
        raise PtmlabError(f"num_training_steps must be >= 1, got {num_training_steps}")
    SCHEDULES.get(schedule)
    optimizer = build_optimizer(model, args.learning_rate, args.weight_decay, llrd)
    cfg = SimpleNamespace(warmup=getattr(args, "warmup_ratio", 0.0) or 0.0, stlr_cut_frac=stlr_cut_frac,
                          stlr_ratio=stlr_ratio)
    return optimizer, build_scheduler(optimizer, schedule, num_training_steps, cfg)


class GradualUnfreezing(TrainerCallback):
    """Gradual unfreezing (ULMFiT) in a ``Trainer``: at first only the head trains; every ``every`` optimizer
    steps the next layer group down is unfrozen, until the embeddings train too. ``every`` 0 spreads the
    training steps evenly over the groups, as ``ptmlab finetune --strategy gradual-unfreeze`` does.
    ``schedule`` lists ``{"group", "from_step"}`` once training starts."""

    def __init__(self, every: int = 0):
        self.every = every
        self.strategy = None
        self.schedule: list[dict] = []

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        from ptmlab.train.strategies import GradualUnfreeze, unfreeze_every, unfreeze_schedule

        cfg = SimpleNamespace(unfreeze_every=self.every, max_steps=state.max_steps, epochs=args.num_train_epochs)
        self.strategy = GradualUnfreeze(cfg)
        self.strategy.prepare(model)
        names = [name for name, _ in self.strategy.groups]
        self.schedule = unfreeze_schedule(names, unfreeze_every(cfg, 1, len(names)))

    def on_step_begin(self, args, state, control, model=None, **kwargs):
        self.strategy.update(model, state.global_step, int(state.epoch or 0), 1)

    def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
        self.strategy.apply_frozen(model)  # several processes keep requires_grad: drop the frozen gradients

    def on_train_end(self, args, state, control, model=None, **kwargs):
        for p in model.parameters():  # the trained model leaves with every parameter trainable
            p.requires_grad = True


class DistillationTrainer(Trainer):
    """A ``Trainer`` that distils ``teacher`` into the model it trains with ptmlab's losses: ``losses`` are
    ``ptmlab distill --losses`` names, optionally weighted (``soft_ce``, ``hidden_mse:0.5``, ``attention_kl``,
    ``minilm``, ``pkd``, ...), expanded over ``layer_map`` (uniform, skip, last or explicit pairs); ``soft_ce``
    mixes the teacher's temperature-``temperature`` soft targets with the labels by ``alpha``. The teacher runs
    on each training batch; learned projections (a narrower student) train with the model. Evaluation uses the
    Trainer's own loss."""

    def __init__(self, *args, teacher, losses=("soft_ce",), layer_map: str = "uniform", temperature: float = 2.0,
                 alpha: float = 0.5, relation_heads: int = 0, **kwargs):
        super().__init__(*args, **kwargs)
        from ptmlab.distill.cache import LiveTeacher, Shapes
        from ptmlab.distill.matches import ModelInfo
        from ptmlab.distill.objective import DistillObjective
        from ptmlab.distill.pipeline import build_matches

        self.teacher = teacher.eval().to(self.args.device)
        for p in self.teacher.parameters():
            p.requires_grad = False
        s_info, t_info = ModelInfo.of(self.model), ModelInfo.of(teacher)
        spec = SimpleNamespace(matches=None, losses=list(losses), layer_map=layer_map)
        matches = build_matches(spec, s_info, t_info)
        needs = {m.key for m in matches if m.feature != "logits"}  # the teacher features the losses read
        rel = relation_heads or None
        self.teacher_out = LiveTeacher(self.teacher, None, 0, needs, Shapes(self.teacher, rel),
                                       self.args.per_device_train_batch_size)
        regression = getattr(self.model.config, "num_labels", 2) == 1
        self.objective = DistillObjective(self.model, matches, self.teacher_out, s_info, t_info,
                                          temperature=temperature, alpha=alpha, regression=regression,
                                          relation_heads=rel).to(self.args.device)

    def create_optimizer(self, *args, **kwargs):
        """The Trainer's optimizer, plus the distillation projections (when the widths differ) at its rate."""
        optimizer = super().create_optimizer(*args, **kwargs)
        extra = [p for p in self.objective.parameters() if p.requires_grad]
        present = {id(p) for g in optimizer.param_groups for p in g["params"]}
        if extra and id(extra[0]) not in present:
            optimizer.add_param_group({"params": extra, "lr": self.args.learning_rate,
                                       "weight_decay": self.args.weight_decay})
        return optimizer

    def compute_loss(self, model, inputs, return_outputs: bool = False, num_items_in_batch=None):
        if not model.training:  # evaluation: the task loss and logits of the Trainer
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        idx = list(range(inputs["input_ids"].shape[0]))
        self.teacher_out.run_batch(inputs, idx)
        per_example = self.objective(model, {**inputs, "index": torch.tensor(idx)})
        loss = per_example.mean()
        return (loss, None) if return_outputs else loss
