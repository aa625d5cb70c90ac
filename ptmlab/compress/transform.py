"""``ptmlab lowrank`` / ``share`` / ``magnitude`` / ``ghost``: one model change, then recovery fine-tuning
(``run_finetune``).

Each command loads a fine-tuned model, measures its dev metric, applies its change, measures again, optionally
recovers by fine-tuning, and writes a run directory (``summary.json``: dev before / after the change / after
recovery, parameters before and after, and the change's own numbers) that ``ptmlab evaluate`` loads.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ptmlab.core.config import at_least, opt
from ptmlab.core.errors import PtmlabError
from ptmlab.report.model_card import write_model_card
from ptmlab.train.args import DataArgs, ModelArgs, TrainArgs


@dataclass(frozen=True)
class _ChangeArgs(ModelArgs, DataArgs, TrainArgs):
    recover_epochs: float = opt(1.0, "recovery fine-tuning epochs after the change (0: none)")

    def validate(self) -> None:
        self.validate_model()
        self.validate_data()
        at_least(self, 0, "recover_epochs")
        if self.recover_epochs > 0:
            self.validate_train()


@dataclass(frozen=True)
class LowRankConfig(_ChangeArgs):
    rank_ratio: float | None = opt(None, "rank of each factorised layer as a fraction of its full rank, in (0, 1]")
    energy: float | None = opt(None, "or: keep the fewest singular values holding this share of sum(s^2)")
    parts: list[str] = opt(["query", "key", "value", "attn_output", "ffn_in", "ffn_out"],
                           "layer parts to factorise")

    def validate(self) -> None:
        super().validate()
        if (self.rank_ratio is None) == (self.energy is None):
            raise PtmlabError("give exactly one of --rank-ratio and --energy")
        import torch

        from ptmlab.compress.lowrank import choose_rank

        choose_rank(torch.eye(2), self.rank_ratio, self.energy)  # range checks


@dataclass(frozen=True)
class ShareConfig(_ChangeArgs):
    groups: int = opt(3, "number of groups of consecutive layers; each group shares one layer's weights")
    init: str = opt("mean", "shared weights start as the group's mean or its first layer", choices=["mean", "first"])

    def validate(self) -> None:
        super().validate()
        _check_groups(self.model, self.groups)


def _check_groups(model: str, groups: int) -> None:
    """--groups against the model's layer count, read from its config (no weights are loaded)."""
    if groups < 1:
        raise PtmlabError(f"--groups {groups} is out of range: give at least 1 group")
    try:
        from transformers import AutoConfig

        from ptmlab.models.zoo import resolve

        path, entry = resolve(model)
        config = AutoConfig.from_pretrained(path, **((entry and entry.random_config) or {}))
    except Exception:
        return  # an unreadable model is reported where it is loaded
    mods = getattr(config, "ptmlab_modifications", None) or []
    removed = sum(len(m.get("layers") or []) for m in mods if m.get("kind") == "structured_prune")
    n = getattr(config, "num_hidden_layers", getattr(config, "n_layers", None))
    if n is not None:
        from ptmlab.compress.sharing import even_groups

        even_groups(n - removed, groups)


@dataclass(frozen=True)
class MagnitudeConfig(_ChangeArgs):
    sparsity: float = opt(0.5, "fraction of encoder Linear weights set to zero, in [0, 1)")
    scope: str = opt("global", "rank weights over all layers (global) or within each layer (layer)",
                     choices=["global", "layer"])

    def validate(self) -> None:
        super().validate()
        from ptmlab.compress.targets import check_fraction

        check_fraction("sparsity", self.sparsity)


@dataclass(frozen=True)
class GhostConfig(_ChangeArgs):
    ghost_kernel: int = opt(3, "kernel size of the depthwise convolution along the sequence (odd)")
    ghost_parts: list[str] = opt(["attn", "ffn"], "where ghost features are added: attn, ffn")

    def validate(self) -> None:
        super().validate()
        from ptmlab.compress.ghost import PARTS, check_kernel

        check_kernel(self.ghost_kernel)
        bad = [p for p in self.ghost_parts if p not in PARTS]
        if bad or not self.ghost_parts:
            raise PtmlabError(f"--ghost-parts entry '{bad[0] if bad else ''}' is invalid: use attn, ffn or both")


def lowrank_change(model, cfg: LowRankConfig) -> dict:
    from ptmlab.compress.lowrank import low_rank

    return low_rank(model, ratio=cfg.rank_ratio, energy=cfg.energy, parts=cfg.parts)


def share_change(model, cfg: ShareConfig) -> dict:
    from ptmlab.compress.sharing import even_groups, share_layers
    from ptmlab.models.structure import structure_of

    groups = even_groups(structure_of(model).num_layers(model), cfg.groups)
    share_layers(model, groups, init=cfg.init)
    return {"groups": groups, "init": cfg.init}


def magnitude_change(model, cfg: MagnitudeConfig) -> dict:
    from ptmlab.compress.magnitude import magnitude_prune

    return magnitude_prune(model, cfg.sparsity, cfg.scope)


def ghost_change(model, cfg: GhostConfig) -> dict:
    from ptmlab.compress.ghost import add_ghost_modules

    per_part = add_ghost_modules(model, kernel=cfg.ghost_kernel, parts=cfg.ghost_parts)
    return {"kernel": cfg.ghost_kernel, "parts": list(cfg.ghost_parts), "ghost_params_per_part": per_part,
            "ghost_params": sum(per_part.values())}


def run_change(cfg, change: Callable[[object, object], dict], command: str) -> dict:
    """Load ``cfg.model``, apply ``change``, recover, save into ``cfg.output``; returns the summary."""
    from ptmlab.compress.magnitude import apply_masks, zero_masks
    from ptmlab.compress.prune import load_for_change, open_change_run, recover
    from ptmlab.data.encode import encode_split
    from ptmlab.models.latency import parameter_count
    from ptmlab.models.loader import save_model
    from ptmlab.train.evaluate import evaluate

    data, tokenizer, model = load_for_change(cfg, command, allow_ghost=command == "ghost")
    run = open_change_run(cfg, command)
    spec = data.spec
    pad = tokenizer.pad_token_id or 0
    dev_enc = encode_split(tokenizer, data.splits["dev"], cfg.max_length)

    def dev(m) -> dict:
        return evaluate(m, dev_enc, spec, pad, cfg.eval_batch_size)[0]

    summary = {"dev_before": dev(model), "params_before": parameter_count(model)}
    info = change(model, cfg)
    summary.update({"change": info, "dev_changed": dev(model), "params": parameter_count(model)})
    if "ghost_params" in info:
        summary["ghost_params"] = info["ghost_params"]
    if cfg.recover_epochs > 0:
        masks = zero_masks(model) if command == "magnitude" else None
        model, fin = recover(model, tokenizer, data, cfg, run, cfg.recover_epochs)
        if masks is not None:  # fine-tuning moves pruned weights off zero: prune them again, then measure
            apply_masks(model, masks)
            save_model(model, tokenizer, cfg.output)
        summary.update({k: v for k, v in fin.items() if k != "metrics"})
        summary["metrics"] = dev(model)
    else:
        save_model(model, tokenizer, run.path)
        summary["metrics"] = summary["dev_changed"]
    summary.update({"task": spec.name, "model": cfg.model, "main_metric": spec.main_metric})
    run.write_summary(summary)
    write_model_card(run.path)
    return summary


CHANGES = {"lowrank": (LowRankConfig, lowrank_change), "share": (ShareConfig, share_change),
           "magnitude": (MagnitudeConfig, magnitude_change), "ghost": (GhostConfig, ghost_change)}
