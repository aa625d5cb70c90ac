"""ptmlab's fine-tuning strategies and distillation losses for a ``transformers.Trainer`` script.

Three pieces, each the code ptmlab's own loop runs (nothing re-implemented here):

- ``optimizer_and_scheduler(model, args, llrd=..., schedule=...)``: AdamW with layer-wise learning rates
  (``--llrd``; ``ptmlab.train.optim.build_optimizer``) and ptmlab's schedules, the slanted triangular one included
  (``build_scheduler``), for ``Trainer(optimizers=...)``; the schedule's length is the Trainer's step count
  (``args.max_steps``, or the Trainer's state when training begins, the scheduler being in ``callbacks``);
- ``GradualUnfreezing``: a ``TrainerCallback`` that unfreezes the layer groups from the top, one group every
  ``every`` steps (default: the training steps spread evenly over the groups), with
  ``ptmlab.train.strategies.GradualUnfreeze``;
- ``DistillationTrainer``: a ``Trainer`` whose training loss reads a teacher through ptmlab's distillation losses
  by name (``losses=["soft_ce", "hidden_mse"]``), layer maps, learned projections and on-the-fly teacher features
  (``ptmlab.distill``); evaluation keeps the Trainer's own task loss.

    optimizer, scheduler = optimizer_and_scheduler(model, args, llrd=1 / 2.6, schedule="stlr")
    trainer = Trainer(model, args, train_dataset=ds, optimizers=(optimizer, scheduler),
                      callbacks=[scheduler, GradualUnfreezing()])
    trainer = DistillationTrainer(model=student, args=args, train_dataset=ds, teacher=teacher,
                                  losses=["soft_ce", "hidden_mse"])
"""

from __future__ import annotations

from types import SimpleNamespace

import torch
from transformers import Trainer, TrainerCallback


def optimizer_and_scheduler(model, args, num_training_steps: int | None = None, *, llrd: float = 1.0,
                            schedule: str = "linear", stlr_cut_frac: float = 0.1, stlr_ratio: float = 32.0):
    """``(optimizer, scheduler)`` for ``Trainer(optimizers=...)``: ptmlab's AdamW with layer-wise rates (the head
    and top layer at ``args.learning_rate``, each layer below ``llrd`` times the one above, the embeddings last)
    and its schedule ``linear``, ``cosine``, ``stlr`` (slanted triangular, ULMFiT) or ``constant``, with the
    Trainer's warm-up (``args.warmup_steps``: a fraction of the steps below 1, else steps) for the linear, cosine
    and constant schedules.

    The schedule spans the Trainer's optimizer steps: ``args.max_steps`` when set; otherwise (training by epochs)
    the count the Trainer computes, read when training begins from its state by the scheduler, which is a
    ``TrainerCallback`` for that: pass it in ``callbacks`` too (``Trainer(..., optimizers=(optimizer, scheduler),
    callbacks=[scheduler])``). Until the count is known no optimizer step runs. ``num_training_steps`` fixes the
    count instead (one that differs from ``args.max_steps``, or from the Trainer's when the scheduler is a
    callback, is an error)."""
    from ptmlab.core.errors import PtmlabError
    from ptmlab.train.optim import SCHEDULES, build_optimizer

    if not 0 < llrd <= 1:
        raise PtmlabError(f"llrd must be in (0, 1], got {llrd}")
    if num_training_steps is not None and num_training_steps < 1:
        raise PtmlabError(f"num_training_steps must be >= 1, got {num_training_steps}")
    max_steps = getattr(args, "max_steps", -1) or -1
    if num_training_steps is not None and max_steps > 0 and num_training_steps != max_steps:
        raise PtmlabError(f"num_training_steps={num_training_steps} but the Trainer takes args.max_steps="
                          f"{max_steps} steps: leave num_training_steps out to follow the Trainer")
    SCHEDULES.get(schedule)
    optimizer = build_optimizer(model, args.learning_rate, args.weight_decay, llrd)
    total = num_training_steps or (max_steps if max_steps > 0 else None)
    return optimizer, TrainerSchedule(optimizer, schedule, args, total, stlr_cut_frac, stlr_ratio)


def _warmup_fraction(args, total: int) -> float:
    """The Trainer's warm-up as the fraction of ``total`` steps ptmlab's schedules take: ``warmup_ratio`` where
    the arguments have one, else ``warmup_steps`` (a fraction below 1, a step count from 1)."""
    ratio = getattr(args, "warmup_ratio", None)
    if ratio:
        return float(ratio)
    steps = float(getattr(args, "warmup_steps", 0) or 0)
    return steps if steps < 1 else min(1.0, steps / total)


class TrainerSchedule(torch.optim.lr_scheduler.LambdaLR, TrainerCallback):
    """ptmlab's schedule ``name`` (``ptmlab.train.optim.build_scheduler``) over the Trainer's optimizer steps.
    With ``total`` None the count is read from the Trainer's state when training begins (this object is a
    ``TrainerCallback``: pass it in ``callbacks``); until then no optimizer step runs."""

    def __init__(self, optimizer, name: str, args, total: int | None, stlr_cut_frac: float = 0.1,
                 stlr_ratio: float = 32.0):
        self.schedule, self.total = name, None
        self.stlr_cut_frac, self.stlr_ratio = float(stlr_cut_frac), float(stlr_ratio)
        self._args, self._factor, self._guard = args, None, None
        super().__init__(optimizer, lambda step: self._factor(step) if self._factor else 1.0)
        if total is not None:
            self.set_total(total)
        else:  # no step at the placeholder rate before the count is known
            self._guard = optimizer.register_step_pre_hook(self._unknown_total)

    def _unknown_total(self, optimizer, args, kwargs):
        from ptmlab.core.errors import PtmlabError

        raise PtmlabError("optimizer_and_scheduler: the Trainer's step count is not known (args.max_steps is not "
                          "set): pass the scheduler in Trainer(callbacks=[scheduler, ...]) too, or pass "
                          "num_training_steps")

    def set_total(self, total: int) -> None:
        """Span ``total`` optimizer steps; the current rate follows at once."""
        from ptmlab.train.optim import build_scheduler

        if self._guard is not None:
            self._guard.remove()
            self._guard = None
        self.total = int(total)
        cfg = SimpleNamespace(warmup=_warmup_fraction(self._args, self.total), stlr_cut_frac=self.stlr_cut_frac,
                              stlr_ratio=self.stlr_ratio)
        probe = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0)  # ptmlab's own rule, for the factor
        self._factor = build_scheduler(probe, self.schedule, self.total, cfg).lr_lambdas[0]
        for group, base in zip(self.optimizer.param_groups, self.base_lrs, strict=True):
            group["lr"] = base * self._factor(self.last_epoch)
        self._last_lr = [group["lr"] for group in self.optimizer.param_groups]

    def on_train_begin(self, args, state, control, **kwargs):
        from ptmlab.core.errors import PtmlabError

        if self.total is None:
            self.set_total(state.max_steps)
        elif self.total != state.max_steps:
            raise PtmlabError(f"num_training_steps={self.total} but the Trainer takes {state.max_steps} optimizer "
                              f"steps: leave num_training_steps out to follow the Trainer")

    def state_dict(self) -> dict:
        """The scheduler's state for the Trainer's checkpoints (numbers only: the arguments and the step guard
        stay out)."""
        return {k: v for k, v in super().state_dict().items() if k not in ("_args", "_factor", "_guard")}

    def load_state_dict(self, state_dict: dict) -> None:
        total = state_dict.get("total")
        super().load_state_dict({k: v for k, v in state_dict.items() if k != "total"})
        if total is not None:
            self.set_total(total)


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
        from ptmlab.core.errors import PtmlabError

        multi_label = [getattr(m.config, "problem_type", None) == "multi_label_classification"
                       for m in (self.model, teacher)]
        if multi_label[0] != multi_label[1]:
            raise PtmlabError("the student and the teacher answer differently (one multi-label, one single-label): "
                              "give both the same problem_type")
        self.objective = DistillObjective(self.model, matches, self.teacher_out, s_info, t_info,
                                          temperature=temperature, alpha=alpha, regression=regression,
                                          relation_heads=rel, multi_label=multi_label[0]).to(self.args.device)

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
