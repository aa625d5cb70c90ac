"""Structured pruning by target, one shot or iterative, with recovery fine-tuning in memory (``recover``).

Each iteration scores heads and FFN neurons on a training subset, removes the least important ones (weight
slicing, ``surgery.prune_structure``) and, with ``recover_epochs > 0``, fine-tunes the pruned model; the last
iteration's fine-tuning run is the output run directory (earlier iterations log under
OUT/recovery/step-K). With ``distill_alpha > 0`` recovery minimises
``ptmlab.distill``'s ``soft_ce`` against the unpruned model's logits (the Trainer's ``loss_fn``; per word or per
start/end position for token classification and QA: ``teacher_loss``).
"""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path

from ptmlab.compress.config import PruneConfig, RecoveryArgs  # noqa: F401  (re-exported)
from ptmlab.compress.importance import compute_importance
from ptmlab.compress.surgery import ffn_per_layer, head_dim, heads_per_layer, mask_to_keep, prune_structure
from ptmlab.compress.targets import ffn_mask, fraction_for_params, head_mask
from ptmlab.core.config import build_config
from ptmlab.report.model_card import write_model_card
from ptmlab.train.args import FinetuneConfig


def prune_by_target(model, imp, heads: float = 0.0, ffn: float = 0.0, params: float = 0.0,
                    layers: list[int] | None = None) -> dict:
    """Remove heads / FFN neurons / layers of ``model`` in place by the given fractions; returns what was cut."""
    if params:
        total = sum(p.numel() for p in model.parameters())
        heads = ffn = fraction_for_params(params, total, model.config.hidden_size, head_dim(model),
                                          heads_per_layer(model), ffn_per_layer(model))
    keep_heads = mask_to_keep(head_mask(imp, heads)) if heads else {}
    keep_ffn = mask_to_keep(ffn_mask(imp, ffn)) if ffn else {}
    before = sum(heads_per_layer(model))
    prune_structure(model, heads=keep_heads, ffn=keep_ffn, layers=layers or [])
    return {"heads_before": before, "heads_after": sum(heads_per_layer(model)),
            "heads_per_layer": heads_per_layer(model), "ffn_per_layer": ffn_per_layer(model)}


def _step_fraction(total_fraction: float, step: int, steps: int, removed_before: float) -> float:
    """Fraction of the *current* units to remove so that after ``step`` of ``steps`` the cumulative cut is
    ``total_fraction * step / steps`` of the original."""
    goal = total_fraction * step / steps
    remaining = 1 - removed_before
    return max(0.0, min(0.9999, (goal - removed_before) / remaining)) if remaining > 0 else 0.0


def distill_loss(teacher, alpha: float, temperature: float = 2.0, regression: bool = False,
                 multi_label: bool = False):
    """Per-example recovery loss: ``soft_ce`` (alpha x T^2 KL to ``teacher``'s logits + (1 - alpha) x the label
    loss), for the Trainer's ``loss_fn``. Teacher logits are computed once per training example (by the batch's
    example ids) and reused in later epochs."""
    import torch

    from ptmlab.distill.losses import LossContext, load_losses
    from ptmlab.models.loader import model_inputs

    soft_ce = load_losses().get("soft_ce").fn
    teacher.eval()
    cache: dict[int, torch.Tensor] = {}

    def loss(model, batch):
        logits = model(**model_inputs(model, batch)).logits
        idx = batch["index"].tolist()
        todo = [j for j, i in enumerate(idx) if i not in cache]
        if todo:
            teacher.to(logits.device)
            sub = {k: v[todo] for k, v in batch.items() if isinstance(v, torch.Tensor) and v.dim() >= 1}
            with torch.no_grad():
                t = teacher(**model_inputs(teacher, sub)).logits.float().cpu()
            for j, row in zip(todo, t, strict=True):
                cache[idx[j]] = row
        t_logits = torch.stack([cache[i] for i in idx]).to(logits.device)
        ctx = LossContext(batch["attention_mask"], batch.get("labels"), regression, temperature, alpha,
                          multi_label=multi_label)
        return soft_ce(logits, t_logits, ctx)

    return loss


def teacher_loss(model, data, tokenizer, cfg):
    """The recovery loss that distils from ``model`` as it is now (the unpruned model) with ``cfg.distill_alpha``
    and ``cfg.distill_temperature``: ``distill_loss`` on a copy of it for a sentence task; for token
    classification and extractive QA ``ptmlab.distill``'s per-word / start-end soft-target loss
    (``distill.spans.span_kd_loss``), its logits over the training features computed here, once."""
    from ptmlab.data.tasks import SPAN_KINDS

    kind = data.spec.kind
    if kind not in SPAN_KINDS:
        return distill_loss(copy.deepcopy(model).eval(), cfg.distill_alpha, cfg.distill_temperature,
                            kind == "regression", kind == "multi-label")
    from ptmlab.data.encode import encode_split
    from ptmlab.distill.spans import span_kd_loss
    from ptmlab.train.spans import span_logits

    feats = encode_split(tokenizer, data.splits["train"], cfg.max_length)  # as recovery's fine_tune encodes it
    logits = span_logits(model, feats, cfg.eval_batch_size, desc="teacher outputs")
    return span_kd_loss(logits, kind == "extractive-qa", cfg.distill_temperature, cfg.distill_alpha)


def recovery_config(cfg, out: Path, epochs: float, test: bool | None = None) -> FinetuneConfig:
    """The fine-tuning options of a recovery run: the command's own training options, ``epochs`` of them."""
    values = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(FinetuneConfig) if hasattr(cfg, f.name)}
    values.update(output=str(out), epochs=epochs, overwrite=True)
    if test is not None:
        values["test"] = test
    return build_config(FinetuneConfig, values, source="recovery")


def recover(model, tokenizer, data, cfg, run, epochs: float, test: bool | None = None, loss_fn=None,
            final: bool = True):
    """Recovery fine-tuning of a modified model in memory, with the one lifecycle; returns (model, summary).

    ``data`` is the task data the command already loaded (never re-read); ``cfg`` supplies the training options;
    ``run`` is the command's run directory (opened by the caller, so config.yaml records the command's options).
    ``final``: write the whole run there (model, predictions, summary, report); else only the training log and
    summary (an intermediate iteration). The summary has ``recovery_train_examples``."""
    from ptmlab.train.lifecycle import RunSession, fine_tune, finish_run

    rcfg = recovery_config(cfg, run.path, epochs, test)
    fit = fine_tune(model, tokenizer, data, rcfg, run, loss_fn=loss_fn)
    summary = {"task": data.spec.name, "model": cfg.model, "strategy": "recovery", **fit.train_summary(),
               "recovery_train_examples": len(fit.enc["train"]), "recovery_epochs": epochs,
               "main_metric": data.spec.main_metric}
    if final:
        finish_run(RunSession(cfg, "recover", run=run), fit, tokenizer, data, summary)
    else:
        run.write_summary(summary)
        fit.trainer.cleanup()
    return fit.model, summary


def open_change_run(cfg, command: str):
    """The run directory of a model-changing command, created once its inputs are checked."""
    from ptmlab.train.lifecycle import RunSession

    return RunSession(cfg, command).open()


def load_for_change(cfg, command: str, allow_ghost: bool = False, source=None):
    """What every command that changes a model does first: check the input and output, seed, load the task data
    (``source``: data in memory, as ``run_finetune`` reads it), the tokenizer and the model (through
    ``lifecycle.build_task_model``); returns (data, tokenizer, model)."""
    from ptmlab.compress.ghost import check_no_ghost
    from ptmlab.compress.quantize import check_not_quantized
    from ptmlab.core.rundir import check_output_dir
    from ptmlab.core.seed import configure_threads, set_seed
    from ptmlab.data.taskdata import load_task_data
    from ptmlab.models.zoo import load_tokenizer
    from ptmlab.train.lifecycle import build_task_model

    configure_threads()
    check_not_quantized(cfg.model)
    check_output_dir(cfg.output, cfg.overwrite)
    set_seed(cfg.seed)
    data = load_task_data(cfg, source=source)
    tokenizer = load_tokenizer(cfg.model)
    model = build_task_model(cfg, data)
    if not allow_ghost:
        check_no_ghost(model, command)
    return data, tokenizer, model


def run_prune(cfg: PruneConfig, source=None) -> dict:
    """Prune ``cfg.model`` (a fine-tuned run or model directory) into the run directory ``cfg.output``; ``source``:
    data in memory instead of what ``cfg`` names."""
    from ptmlab.core.rundir import RunDir
    from ptmlab.data.encode import encode_split
    from ptmlab.data.loaders import subset
    from ptmlab.models.latency import parameter_count
    from ptmlab.models.loader import save_model
    from ptmlab.train.evaluate import evaluate

    data, tokenizer, model = load_for_change(cfg, "prune", source=source)
    spec = data.spec
    run = open_change_run(cfg, "prune")
    # one loss for every iteration: the unpruned teacher's logits are computed once per example and kept
    loss_fn = teacher_loss(model, data, tokenizer, cfg) if cfg.distill_alpha > 0 else None
    layers = sorted({int(x) for x in cfg.layers})
    pad_id = tokenizer.pad_token_id or 0
    imp_enc = encode_split(tokenizer, subset(data.splits["train"], cfg.importance_examples, cfg.seed), cfg.max_length)
    dev_enc = encode_split(tokenizer, data.splits["dev"], cfg.max_length)
    params_before = parameter_count(model)
    heads_orig, ffn_orig = sum(heads_per_layer(model)), sum(ffn_per_layer(model))
    dev_before, _ = evaluate(model, dev_enc, spec, pad_id, cfg.eval_batch_size)
    steps: list[dict] = []
    summary: dict = {}
    if True:
        for step in range(1, cfg.iterations + 1):
            imp = compute_importance(cfg.importance, model, imp_enc, pad_id, use_labels=cfg.use_labels)
            heads_gone = 1 - sum(heads_per_layer(model)) / heads_orig
            ffn_gone = 1 - sum(ffn_per_layer(model)) / ffn_orig
            if cfg.params:
                frac = _step_fraction(cfg.params, step, cfg.iterations, 1 - parameter_count(model) / params_before)
                cut = prune_by_target(model, imp, params=frac, layers=layers if step == 1 else None)
            else:
                cut = prune_by_target(model, imp, heads=_step_fraction(cfg.heads, step, cfg.iterations, heads_gone),
                                      ffn=_step_fraction(cfg.ffn, step, cfg.iterations, ffn_gone),
                                      layers=layers if step == 1 else None)
            pruned_metrics, _ = evaluate(model, dev_enc, spec, pad_id, cfg.eval_batch_size)
            row = {"step": step, **cut, "params": parameter_count(model),
                   **{f"dev_pruned_{k}": v for k, v in pruned_metrics.items()}}
            if cfg.recover_epochs > 0:
                last = step == cfg.iterations
                if last:
                    rec_run = run
                else:
                    rec_run = RunDir(run.path / "recovery" / f"step-{step}")
                    rec_run.path.mkdir(parents=True, exist_ok=True)
                model, summary = recover(model, tokenizer, data, cfg, rec_run, cfg.recover_epochs,
                                         test=None if last else False, loss_fn=loss_fn, final=last)
                row.update({f"dev_recovered_{k}": v for k, v in summary["metrics"].items()})
            steps.append(row)
        if cfg.recover_epochs == 0:
            save_model(model, tokenizer, run.path)
            summary = {"task": spec.name, "model": cfg.model, "metrics": pruned_metrics}
    summary.update({
        "pruned_from": cfg.model, "importance": cfg.importance, "dev_unpruned": dev_before,
        "params_before": params_before, "params": parameter_count(model), "heads_before": heads_orig,
        "heads": sum(heads_per_layer(model)), "heads_per_layer": heads_per_layer(model),
        "ffn_per_layer": ffn_per_layer(model), "prune_steps": steps, "main_metric": spec.main_metric,
        "recovery_loss": (f"soft_ce (alpha {cfg.distill_alpha:g}, T {cfg.distill_temperature:g}) to the unpruned "
                          f"model" if loss_fn is not None and cfg.recover_epochs > 0 else "task loss"),
    })
    run.write_summary(summary)
    write_model_card(run.path)  # after the final summary, so the card carries the pruned sizes
    return summary
