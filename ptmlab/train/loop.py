"""The one training loop. Fine-tuning, distillation, pretraining and recovery training all run through it.

What varies is the loss: ``loss_fn(model, batch) -> per-example losses`` (a tensor of shape [n]); its own
trainable parameters (projections of a distillation loss, say) come as ``loss_module``. The loop owns
batching (a source with ``plan_batches(batch_size, seed, epoch)`` composes its own: multi-task), gradient
accumulation, data parallelism (Accelerate; ``torchrun`` on CPUs), mixed precision, evaluation,
best-model keeping, early stopping, atomic checkpoints and exact resume.

Exactness: the order of examples is a pure function of (seed, epoch); each optimizer step's loss is the sum of
per-example losses divided by the number of examples in the global batch, so one process and N processes with
the same global batch compute the same gradient (to float tolerance).
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from ptmlab.core.progress import progress
from ptmlab.core.rundir import RunDir
from ptmlab.data.batching import collate, shard, train_batches
from ptmlab.data.encode import Encoded
from ptmlab.models.loader import model_inputs
from ptmlab.train.checkpoint import find_checkpoint, load_checkpoint, save_checkpoint
from ptmlab.train.device import grad_scaler, resolve_device
from ptmlab.train.evaluate import autocast_ctx, resolve_precision
from ptmlab.train.optim import build_optimizer, build_scheduler, clipped_step
from ptmlab.train.spans import is_span_batch, span_task_loss
from ptmlab.train.strategies import Strategy

LossFn = Callable[[nn.Module, dict], torch.Tensor]


def task_loss(regression: bool = False) -> LossFn:
    """Cross-entropy (or MSE for regression) per example: the fine-tuning loss. Multi-label batches (float
    multi-hot labels [n, classes]) get binary cross-entropy on each class's sigmoid, averaged over the classes."""

    def loss(model, batch):
        if is_multi_hot(batch.get("labels")):
            logits = model(**model_inputs(model, batch)).logits.float()
            return F.binary_cross_entropy_with_logits(logits, batch["labels"].float(), reduction="none").mean(-1)
        if is_span_batch(batch):  # tags per token, or a span's start and end (train/spans.py)
            return span_task_loss(model, batch)
        logits = model(**model_inputs(model, batch)).logits.float()
        if regression:
            return F.mse_loss(logits.squeeze(-1), batch["labels"].float(), reduction="none")
        return F.cross_entropy(logits, batch["labels"], reduction="none")

    return loss


def is_multi_hot(labels) -> bool:
    """Multi-label targets: one float row of 0/1 per example (token tags are [n, tokens] of integer ids)."""
    return labels is not None and labels.dim() == 2 and labels.is_floating_point()


@dataclass
class LoopState:
    step: int = 0
    examples: int = 0  # training examples seen (all processes)
    tokens: int = 0  # tokens in those examples (padding excluded)
    train_seconds: float = 0.0
    best_metric: float | None = None
    best_step: int | None = None
    bad_evals: int = 0
    stopped_early: bool = False
    last_eval: dict = field(default_factory=dict)
    grad_scaler: dict = field(default_factory=dict)  # --precision fp16: the loss scale, resumed with the run


class Trainer:
    def __init__(self, model: nn.Module, train_enc: Encoded, cfg, run: RunDir, pad_id: int, *,
                 loss_fn: LossFn | None = None, loss_module: nn.Module | None = None,
                 strategy: Strategy | None = None, evaluate_fn: Callable[[nn.Module], dict] | None = None,
                 main_metric: str | None = None, greater_is_better: bool = True, regression: bool = False,
                 flops_per_token: float | None = None):
        from accelerate import Accelerator

        self.cfg = cfg
        self.run = run
        self.pad_id = pad_id
        self.enc = train_enc
        self.regression = regression
        self.flops_per_token = flops_per_token  # training FLOPs per token (pre-training's compute accounting)
        # the batch source: Encoded task data (collated here) or anything with make_batch(indices, epoch)
        self._make_batch = getattr(train_enc, "make_batch", None)
        self.loss_fn = loss_fn or task_loss(regression)
        self.loss_module = loss_module
        self.strategy = strategy or Strategy(cfg)
        self.evaluate_fn = evaluate_fn
        self.main_metric = main_metric
        self.sign = 1.0 if greater_is_better else -1.0
        # cpu=True where there is no GPU: Accelerate then joins a torchrun group over gloo (MULTI_CPU). Mixed
        # precision is our own autocast around the loss, so several Trainers with different precisions can live
        # in one process (Accelerate's state is a process-wide singleton).
        from ptmlab.train import tracking

        device = resolve_device(getattr(cfg, "device", "auto"))  # mps: Accelerate's choice when cpu=False
        self.accelerator = Accelerator(cpu=device == "cpu", **tracking.accelerator_kwargs(cfg, run))
        self.precision = resolve_precision(cfg.precision, self.accelerator.device)
        self.scaler = grad_scaler(self.precision, self.accelerator.device)  # fp16: loss scaling
        self.tracking = tracking.start(self.accelerator, cfg, run)  # --report-to: the log rows go there too
        self.world = self.accelerator.num_processes
        self.rank = self.accelerator.process_index

        model = self.strategy.prepare(model)
        self.raw_model = model
        self.optimizer = build_optimizer(model, cfg.lr, cfg.weight_decay, cfg.llrd)
        if loss_module is not None and any(p.requires_grad for p in loss_module.parameters()):
            self.optimizer.add_param_group({"params": [p for p in loss_module.parameters() if p.requires_grad],
                                            "lr": cfg.lr, "weight_decay": cfg.weight_decay, "group": "loss"})
        self.steps_per_epoch = max(1, math.ceil(len(train_enc) / cfg.batch_size))
        self.total_steps = cfg.max_steps or max(1, math.ceil(cfg.epochs * self.steps_per_epoch))
        self.scheduler = build_scheduler(self.optimizer, cfg.schedule, self.total_steps, cfg)
        self.model = self.accelerator.prepare(model)
        # batches padded to a multiple of pad_to: 1 on CPUs (any extra position is wasted work), 8 on GPUs
        # (tensor-core friendly), and length buckets of 32 when compiled, so shapes repeat and graphs are reused
        compile_mode = getattr(cfg, "compile", "off")
        self.pad_to = 32 if compile_mode != "off" else 8 if self.accelerator.device.type == "cuda" else 1
        if compile_mode != "off":
            self.model.compile(mode=None if compile_mode == "default" else compile_mode)
        if loss_module is not None:
            loss_module.to(self.accelerator.device)
        self.state = LoopState()

    # ---------------------------------------------------------------------------------- state
    def _model_state(self) -> dict:
        state = dict(self.raw_model.state_dict())
        if self.loss_module is not None:
            state.update({f"__loss__.{k}": v for k, v in self.loss_module.state_dict().items()})
        return state

    def _load_model_state(self, state: dict) -> None:
        from ptmlab.core.errors import PtmlabError

        model_part = {k: v for k, v in state.items() if not k.startswith("__loss__.")}
        loss_part = {k[len("__loss__."):]: v for k, v in state.items() if k.startswith("__loss__.")}
        missing, unexpected = self.raw_model.load_state_dict(model_part, strict=False)
        missing = [k for k in missing if not k.endswith("position_ids")]
        if missing or unexpected:
            raise PtmlabError(f"checkpoint does not match the model (missing {missing[:2]}, "
                              f"unexpected {list(unexpected)[:2]}): start a new run")
        if self.loss_module is not None and loss_part:
            self.loss_module.load_state_dict(loss_part)

    def resume(self) -> None:
        ckpt = find_checkpoint(self.run.path)
        loop = load_checkpoint(ckpt, self._load_model_state, self.optimizer, self.scheduler)
        self.state = LoopState(**loop)
        if self.scaler and self.state.grad_scaler:
            self.scaler.load_state_dict(self.state.grad_scaler)
        if self.accelerator.is_main_process:
            self.run.truncate_metrics(self.state.step)
        self.accelerator.wait_for_everyone()

    def _checkpoint(self) -> None:
        if self.scaler:
            self.state.grad_scaler = self.scaler.state_dict()
        if self.accelerator.is_main_process:
            save_checkpoint(self.run.path, self._model_state(), self.optimizer, self.scheduler,
                            self.state.__dict__)
        self.accelerator.wait_for_everyone()

    def _save_best(self) -> None:
        if self.accelerator.is_main_process:
            from ptmlab.core.io import atomic_save_file

            atomic_save_file({k: v.detach().cpu().clone() for k, v in self.raw_model.state_dict().items()},
                             self.run.file("best.safetensors"))
        self.accelerator.wait_for_everyone()

    # ---------------------------------------------------------------------------------- steps
    def _micro_batches(self, global_batch: list[int]) -> list[list[int]]:
        k = self.cfg.grad_accum
        n = len(global_batch)
        return [global_batch[(n * j) // k:(n * (j + 1)) // k] for j in range(k)]

    def _batch(self, indices: list[int], epoch: int) -> dict:
        if self._make_batch is not None:
            return self._make_batch(indices, epoch)
        return collate(self.enc, indices, self.pad_id, self.regression, pad_to=self.pad_to)

    def _to_device(self, batch: dict) -> dict:
        """Host tensors to the device; on a GPU through pinned memory without waiting, so the host collates the
        next batch while the device computes this one."""
        device = self.accelerator.device
        if device.type != "cuda":
            return {k: v.to(device) for k, v in batch.items()}
        return {k: v.pin_memory().to(device, non_blocking=True) for k, v in batch.items()}

    def _train_step(self, global_batch: list[int], epoch: int = 0) -> tuple[torch.Tensor, int]:
        """One optimizer step. Returns the summed loss of this process's examples as a device tensor (read on
        the host only when it is logged: no per-step synchronisation) and their number."""
        device = self.accelerator.device
        micro = [m for m in self._micro_batches(global_batch) if m]
        n_total = len(global_batch)
        loss_sum, n_local = torch.zeros((), device=device), 0
        for j, mb in enumerate(micro):
            local = shard(mb, self.rank, self.world)
            weight = 1.0
            if not local:  # this process has nothing in a tiny last batch: a zero-weight pass keeps DDP in step
                local, weight = mb[:1], 0.0
            batch = self._to_device(self._batch(local, epoch))
            sync = j == len(micro) - 1 or self.world == 1
            ctx = contextlib.nullcontext() if sync else self.accelerator.no_sync(self.model)
            with ctx:
                with autocast_ctx(self.precision, device):
                    per_ex = self.loss_fn(self.model, batch)
                loss = per_ex.sum() * (weight * self.world / n_total)
                self.accelerator.backward(self.scaler.scale(loss) if self.scaler else loss)
            if weight:
                loss_sum += per_ex.detach().float().sum()
                n_local += len(local)
        self.strategy.apply_frozen(self.model)
        if self.scaler is None:
            clipped_step(self.optimizer, self.cfg.max_grad_norm)
            self.scheduler.step()
        elif self._scaled_step():  # a step skipped for inf/nan gradients leaves the schedule where it was
            self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return loss_sum, n_local

    def _scaled_step(self) -> bool:
        """fp16: unscale the gradients, clip them, step unless they overflowed, adapt the loss scale. Returns
        whether the optimizer stepped."""
        self.scaler.unscale_(self.optimizer)
        if self.cfg.max_grad_norm:
            params = [p for g in self.optimizer.param_groups for p in g["params"] if p.grad is not None]
            torch.nn.utils.clip_grad_norm_(params, self.cfg.max_grad_norm)
        scale = self.scaler.get_scale()
        self.scaler.step(self.optimizer)
        self.scaler.update()
        return self.scaler.get_scale() >= scale

    def _evaluate(self) -> bool:
        """Evaluate, log, keep the best weights; returns True when early stopping says stop."""
        if self.evaluate_fn is None:
            return False
        metrics = self.evaluate_fn(self.raw_model)
        self.raw_model.train()
        st = self.state
        st.last_eval = metrics
        epoch = st.step / self.steps_per_epoch
        if self.accelerator.is_main_process:
            self._log({"step": st.step, "epoch": round(epoch, 4), "eval": metrics})
        value = metrics.get(self.main_metric) if self.main_metric else None
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return False
        if st.best_metric is None or self.sign * value > self.sign * st.best_metric:
            st.best_metric, st.best_step, st.bad_evals = value, st.step, 0
            if self.cfg.keep_best:
                self._save_best()
        else:
            st.bad_evals += 1
        return bool(self.cfg.early_stopping and st.bad_evals >= self.cfg.early_stopping)

    def train(self) -> LoopState:
        """Train to ``total_steps`` (or early stopping); with ``--fast-dropout`` (the default, eager mode) the
        model's dropout draws its masks with ``train.fast_dropout`` while it trains, restored afterwards; on a CPU,
        with ``--reuse-host-memory`` (the default), freed memory stays in the process while it trains
        (``train.host_memory``)."""
        from ptmlab.core.host_memory import reuse_host_memory

        handle = None
        if getattr(self.cfg, "fast_dropout", False) and getattr(self.cfg, "compile", "off") == "off":
            from ptmlab.train.fast_dropout import fast_dropout

            handle = fast_dropout(self.raw_model)
        on_cpu = self.accelerator.device.type == "cpu"
        try:
            with reuse_host_memory(on_cpu and getattr(self.cfg, "reuse_host_memory", False)):
                return self._train()
        finally:
            if handle is not None:
                handle.remove()

    def _train(self) -> LoopState:
        cfg, st = self.cfg, self.state
        self.model.train()
        epoch_cache: dict[int, list[list[int]]] = {}
        lengths = self.enc.lengths
        plan = getattr(self.enc, "plan_batches", None)  # a source that composes its own batches (multi-task)
        bar = progress(total=self.total_steps, initial=st.step, desc="train", unit="step")
        window_loss, window_n = torch.zeros((), device=self.accelerator.device), 0
        t0 = time.perf_counter()
        while st.step < self.total_steps:
            epoch, b = divmod(st.step, self.steps_per_epoch)
            if epoch not in epoch_cache:
                epoch_cache = {epoch: plan(cfg.batch_size, cfg.seed, epoch) if plan else
                               train_batches(lengths, cfg.batch_size, cfg.seed, epoch, cfg.group_by_length)}
            self.strategy.update(self.model, st.step, epoch, self.steps_per_epoch)
            global_batch = epoch_cache[epoch][b]
            loss_sum, n = self._train_step(global_batch, epoch)
            st.examples += len(global_batch)
            st.tokens += sum(lengths[i] for i in global_batch)
            window_loss += loss_sum
            window_n += n
            st.step += 1
            bar.update(1)
            now = time.perf_counter()
            st.train_seconds += now - t0
            t0 = now
            if st.step % cfg.logging_steps == 0 or st.step == self.total_steps:
                avg = float(window_loss) / max(1, window_n)  # the one host sync per logging window
                bar.set_postfix(loss=f"{avg:.4f}")
                if self.accelerator.is_main_process:
                    row = {"step": st.step, "epoch": round(st.step / self.steps_per_epoch, 4), "loss": avg,
                           "lr": self.scheduler.get_last_lr()[0], "tokens": st.tokens,
                           "tokens_per_second": round(st.tokens / max(st.train_seconds, 1e-9), 1)}
                    if self.flops_per_token:
                        row["flops"] = st.tokens * self.flops_per_token
                    self._log(row)
                window_loss, window_n = torch.zeros((), device=self.accelerator.device), 0
            end_of_epoch = st.step % self.steps_per_epoch == 0
            due_eval = (st.step % cfg.eval_steps == 0) if cfg.eval_steps else end_of_epoch
            stop = False
            if due_eval or st.step == self.total_steps:
                stop = self._evaluate()
                t0 = time.perf_counter()  # evaluation time is not training time
            due_save = (st.step % cfg.save_steps == 0) if cfg.save_steps else due_eval
            if (due_save or stop) and st.step < self.total_steps:
                self._checkpoint()
                t0 = time.perf_counter()
            if stop:
                st.stopped_early = True
                break
        bar.close()
        self._finish()
        return st

    def _log(self, row: dict) -> None:
        """A metrics.jsonl row, also sent to the ``--report-to`` trackers."""
        self.run.log(row)
        if self.tracking:
            from ptmlab.train.tracking import log_row

            log_row(self.accelerator, row)

    def _finish(self) -> None:
        if self.tracking:
            self.accelerator.end_training()
            self.tracking = False
        best = self.run.file("best.safetensors")
        if self.cfg.keep_best and best.is_file() and self.state.best_step != self.state.step:
            from safetensors.torch import load_file

            self.raw_model.load_state_dict(load_file(best))
        self.accelerator.wait_for_everyone()

    def final_model(self) -> nn.Module:
        """The strategy's final model (LoRA: merged into the weights). A LoRA model's adapter is kept first as
        ``lora_adapter`` (``models.adapters.LoraAdapter``): merging consumes it."""
        from ptmlab.models.adapters import LoraAdapter

        self.lora_adapter = LoraAdapter.of(self.raw_model)
        return self.strategy.finalize(self.raw_model)

    def cleanup(self) -> None:
        """Remove resumable state once the final model is saved."""
        import shutil

        if self.accelerator.is_main_process:
            for name in ("checkpoint", "checkpoint.old", "checkpoint.tmp"):
                shutil.rmtree(self.run.file(name), ignore_errors=True)
            self.run.file("best.safetensors").unlink(missing_ok=True)
