"""Parameter groups by depth (for discriminative learning rates and gradual unfreezing), AdamW, schedules."""

from __future__ import annotations

import math

import torch

from ptmlab.core.registry import Registry

SCHEDULES: Registry = Registry("schedule")


def depth_groups(model, feature: str = "grouping parameters by layer") -> list[tuple[str, list[str]]]:
    """Parameter names grouped from the top of the network down: head, layer L-1, ..., layer 0, embeddings.

    ``feature`` (``--llrd``, ``--strategy gradual-unfreeze``, ...) needs the architecture's structure map: without
    one (or with layers sharing their weights) it is a one-line error naming the feature and the architecture,
    never a silent single group."""
    from ptmlab.models.structure import require_layers

    names = [n for n, _ in model.named_parameters()]
    s = require_layers(model, feature)
    n_layers = s.num_layers(model)
    emb_prefix = tuple(f"{s.base}.{e}." for e in (s.embeddings, *s.embedding_extras))
    layer_of: dict[str, int] = {}
    for n in names:
        for i in range(n_layers):
            if n.startswith(s.layer_prefix(i)):
                layer_of[n] = i
                break
    groups: list[tuple[str, list[str]]] = [("head", [n for n in names if n not in layer_of
                                                     and not n.startswith(emb_prefix)])]
    for i in reversed(range(n_layers)):
        groups.append((f"layer.{i}", [n for n in names if layer_of.get(n) == i]))
    groups.append(("embeddings", [n for n in names if n.startswith(emb_prefix)]))
    return [g for g in groups if g[1]]


def _has_map(model) -> bool:
    from ptmlab.models.structure import STRUCTURES

    model_type = getattr(getattr(model, "config", None), "model_type", None)
    return model_type in STRUCTURES and not STRUCTURES.get(model_type).shared_layers


def _no_decay(name: str) -> bool:
    return name.endswith("bias") or "layernorm" in name.lower().replace("_", "")


def build_optimizer(model, lr: float, weight_decay: float, llrd: float = 1.0) -> torch.optim.Optimizer:
    """AdamW with one pair of groups per depth; with ``llrd`` < 1 the rate shrinks by that factor per layer
    below the top one (head and top layer: lr; layer i: lr * llrd**(L-1-i); embeddings: lr * llrd**L). With
    ``llrd`` 1 an architecture without a structure map trains as one group."""
    params = dict(model.named_parameters())
    groups = []
    by_depth = depth_groups(model, "--llrd") if llrd != 1 or _has_map(model) else [("all", list(params))]
    for depth, (gname, names) in enumerate(by_depth):
        scale = llrd ** max(depth - 1, 0)
        for decay in (True, False):
            ps = [params[n] for n in names if _no_decay(n) != decay]
            if ps:
                groups.append({"params": ps, "lr": lr * scale, "weight_decay": weight_decay if decay else 0.0,
                               "group": gname})
    # the fused kernel (CPU and GPU) updates all tensors in one pass; the per-tensor loop is much slower on CPU
    return torch.optim.AdamW(groups, lr=lr, fused=True)


def clipped_step(optimizer: torch.optim.Optimizer, max_norm: float) -> None:
    """``optimizer.step()`` with the gradients' total 2-norm clipped to ``max_norm`` (0: no clipping), the update
    ``clip_grad_norm_`` followed by ``step()`` gives, to float rounding.

    An optimizer that can unscale its gradients inside its own update (the fused AdamW kernels' ``grad_scale``,
    what AMP's GradScaler uses) gets the clipping factor there: one pass over the gradients (their norm) instead of
    two (the norm, then a scaling of every gradient), and, as with torch's clipping, no host-device
    synchronisation. The kernel divides by ``max(1, norm / max_norm)`` where clipping multiplies by its inverse.
    Other optimizers are clipped by torch."""
    params = [p for g in optimizer.param_groups for p in g["params"] if p.grad is not None]
    if not max_norm or not params:
        optimizer.step()
        return
    if not getattr(optimizer, "_step_supports_amp_scaling", False) or hasattr(optimizer, "grad_scale"):
        torch.nn.utils.clip_grad_norm_(params, max_norm)
        optimizer.step()
        return
    grads = [p.grad for p in params]
    # on a CPU the per-tensor norms are faster than the foreach path (which loops over them anyway)
    total = torch.nn.utils.get_total_norm(grads, foreach=False if grads[0].device.type == "cpu" else None)
    optimizer.grad_scale = torch.clamp_min((total.float() + 1e-6) / max_norm, 1.0)  # 1e-6: clip_grad_norm_'s
    try:
        optimizer.step()
    finally:
        del optimizer.grad_scale


@SCHEDULES.register("linear", help="linear warm-up then linear decay to zero")
def _linear(total: int, warmup: int, cfg):
    def f(step: int) -> float:
        if step < warmup:
            return (step + 1) / max(1, warmup)
        return max(0.0, (total - step) / max(1, total - warmup))

    return f


@SCHEDULES.register("cosine", help="linear warm-up then cosine decay to zero")
def _cosine(total: int, warmup: int, cfg):
    def f(step: int) -> float:
        if step < warmup:
            return (step + 1) / max(1, warmup)
        p = (step - warmup) / max(1, total - warmup)
        return 0.5 * (1 + math.cos(math.pi * min(1.0, p)))

    return f


@SCHEDULES.register("stlr", help="slanted triangular (ULMFiT): short linear rise, long linear decay")
def _stlr(total: int, warmup: int, cfg):
    cut_frac, ratio = cfg.stlr_cut_frac, cfg.stlr_ratio
    cut = max(1, math.floor(total * cut_frac))

    def f(step: int) -> float:
        t = step + 1
        p = t / cut if t < cut else 1 - (t - cut) / max(1.0, cut * (1 / cut_frac - 1))
        return (1 + max(0.0, p) * (ratio - 1)) / ratio

    return f


@SCHEDULES.register("constant", help="constant rate after warm-up")
def _constant(total: int, warmup: int, cfg):
    return lambda step: min(1.0, (step + 1) / max(1, warmup)) if warmup else 1.0


def build_scheduler(optimizer, name: str, total_steps: int, cfg) -> torch.optim.lr_scheduler.LambdaLR:
    warmup = int(round(cfg.warmup * total_steps)) if name in ("linear", "cosine", "constant") else 0
    return torch.optim.lr_scheduler.LambdaLR(optimizer, SCHEDULES.get(name)(total_steps, warmup, cfg))
