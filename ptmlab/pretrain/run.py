"""``run_pretrain``: text -> token blocks -> an objective -> the one training loop -> a run directory whose model
loads wherever ptmlab takes a model (``ptmlab finetune --model RUN``: the pre-training head is dropped).

The run goes through the one lifecycle (``prepare_run`` / ``RunSession.open`` / ``finish_run``): every input is
checked before anything is written, it resumes exactly (``--resume``), runs under ``torchrun`` / ``accelerate
launch``, in bf16 where the hardware has it, with gradient accumulation. Budgets: ``--max-steps``,
``--max-tokens`` and ``--max-flops`` become one step count, so runs compare at equal compute to within one step.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import torch

from ptmlab.core.errors import PtmlabError
from ptmlab.core.seed import set_seed
from ptmlab.pretrain.config import PretrainConfig


@dataclasses.dataclass
class Prepared:
    """Everything a pre-training run needs, built and checked before its run directory is written."""

    tokenizer: object
    objective: object
    model: object  # the transformers model that is kept
    train: object  # PretrainData
    valid: object  # PretrainData (static masks)
    corpus: dict


def _objective_options(cfg: PretrainConfig) -> dict:
    return dict(masking=cfg.masking, mask_prob=cfg.mask_prob, noise_density=cfg.noise_density,
                mean_span=cfg.mean_span, corruptions=cfg.corruptions, generator_fraction=cfg.generator_fraction,
                sbo=cfg.sbo)


def _load_tokenizer(name: str):
    from ptmlab.models.zoo import load_tokenizer

    return load_tokenizer(name)


def prepare(cfg: PretrainConfig) -> Prepared:
    """Tokenizer, objective, corpus blocks and model; PtmlabError for any bad input (nothing is written)."""
    from ptmlab.pretrain.corpus import pack_blocks, tokenize_corpus
    from ptmlab.pretrain.data import PretrainData
    from ptmlab.pretrain.models import build_scratch, load_continued, max_block_size, size
    from ptmlab.pretrain.objectives import build_objective

    tok = _load_tokenizer(cfg.tokenizer or cfg.model or "minilm")
    obj = build_objective(cfg.objective, tok, **_objective_options(cfg))
    if cfg.model:
        _check_positions(cfg.model, cfg.block_size)
    corpus = tokenize_corpus(cfg.files, tok, doc_sep=cfg.doc_sep)
    if cfg.valid_files:
        train_c, valid_c = corpus, tokenize_corpus(cfg.valid_files, tok, doc_sep=cfg.doc_sep)
    else:
        train_c, valid_c = corpus.split(cfg.valid_fraction, cfg.seed)
    n, sep = obj.content_length(cfg.block_size), obj.separator()
    if n < 2:
        raise PtmlabError(f"--block-size {cfg.block_size} leaves no room for text after the special tokens")
    train_b, valid_b = pack_blocks(train_c, n, sep), pack_blocks(valid_c, n, sep)
    if len(train_b) == 0:
        raise PtmlabError(f"the training text has {train_c.n_tokens} tokens, less than one --block-size "
                          f"{cfg.block_size} block: give more text or a smaller block")
    if len(valid_b) == 0:
        raise PtmlabError(f"the held-out text has {valid_c.n_tokens} tokens, less than one block: raise "
                          f"--valid-fraction, pass --valid-files, or lower --block-size")
    set_seed(cfg.seed)
    if cfg.model:
        model = load_continued(cfg.model, obj, tokenizer=tok)
    else:
        from ptmlab.pretrain.models import ARCHS, archs_for

        arch = cfg.arch or obj.default_arch
        if arch not in ARCHS:
            raise PtmlabError(f"unknown --arch '{arch}': objective {obj.name} trains {', '.join(archs_for(obj))}")
        dims = size(cfg.size)
        dims.update({k: getattr(cfg, k) for k in ("layers", "hidden", "heads", "ffn") if getattr(cfg, k)})
        model = build_scratch(arch, **dims, tokenizer=tok, max_positions=max(cfg.block_size, 512), objective=obj)
    limit = max_block_size(model.config)
    if limit is not None and cfg.block_size > limit:
        raise PtmlabError(f"--block-size {cfg.block_size} is above the model's {limit} positions: use "
                          f"--block-size {limit} or less")
    obj.check(tok, model.config)
    valid_idx_limit = cfg.eval_blocks or len(valid_b)
    n_valid = min(len(valid_b), valid_idx_limit)
    info = {"train_documents": train_c.n_docs, "train_tokens": int(train_c.n_tokens),
            "valid_documents": valid_c.n_docs, "valid_tokens": int(valid_c.n_tokens),
            "train_blocks": len(train_b), "valid_blocks": n_valid, "tokens_per_block": n,
            "unigram_entropy": _unigram_entropy(tok, train_c, valid_b, n_valid, sep)}
    return Prepared(tok, obj, model, PretrainData(train_b, obj, cfg.seed),
                    PretrainData(valid_b, obj, cfg.seed, static=True), info)


def _unigram_entropy(tok, train_c, valid_b, n_valid: int, sep: int) -> float:
    """The held-out blocks' unigram cross-entropy under the training text's token frequencies (nats per token,
    special tokens and the document separator left out): the loss a model that learnt only which tokens are common
    gets on the blocks ``eval_loss`` reads. Studies check that pre-training went clearly below it."""
    from ptmlab.pretrain.corpus import token_counts, unigram_cross_entropy

    skip = {*(getattr(tok, "all_special_ids", None) or ()), sep}
    held = valid_b.batch(list(range(n_valid)))
    return round(unigram_cross_entropy(token_counts(train_c, len(tok)), held, skip), 6)


def _check_positions(model: str, block_size: int) -> None:
    """--block-size against a model's position embeddings, from its config alone (before any text is read)."""
    from transformers import AutoConfig

    from ptmlab.models.zoo import resolve
    from ptmlab.pretrain.models import max_block_size

    path, entry = resolve(model)
    try:
        config = AutoConfig.from_pretrained(path, **((entry and entry.random_config) or {}))
    except Exception:
        return  # an unreadable model is reported where it is loaded
    limit = max_block_size(config)
    if limit is not None and block_size > limit:
        raise PtmlabError(f"--block-size {block_size} is above the model's {limit} positions: use --block-size "
                          f"{limit} or less")


def budget_steps(cfg: PretrainConfig, tokens_per_step: int, flops_per_token: float, steps_per_epoch: int) -> int:
    """The step count every budget given allows (the smallest); at least one step."""
    limits = [cfg.max_steps] if cfg.max_steps else []
    if cfg.max_tokens:
        limits.append(math.ceil(cfg.max_tokens / tokens_per_step))
    if cfg.max_flops:
        limits.append(math.floor(cfg.max_flops / (flops_per_token * tokens_per_step)))
    if not limits:
        limits.append(math.ceil(cfg.epochs * steps_per_epoch))
    return max(1, min(limits))


def eval_loss(pm, data, objective, batch_size: int, precision: str, limit: int = 0) -> dict:
    """Mean per-example loss over the held-out blocks (static corruption, so every evaluation sees the same)."""
    from ptmlab.train.evaluate import autocast_ctx

    device = next(pm.parameters()).device
    n = len(data) if not limit else min(limit, len(data))
    losses = []
    was_training = pm.training
    pm.eval()
    with torch.no_grad(), autocast_ctx(precision, device):
        for s in range(0, n, batch_size):
            batch = {k: v.to(device) for k, v in data.make_batch(list(range(s, min(n, s + batch_size))), 0).items()}
            losses.append(objective.loss(pm, batch).float().cpu().numpy())
    pm.train(was_training)
    mean = float(np.concatenate(losses).mean())
    return {"eval_loss": round(mean, 6), "perplexity": round(math.exp(min(mean, 50.0)), 4)}


def run_pretrain(cfg: PretrainConfig, resume: bool = False, command: str = "pretrain") -> dict:
    """Pre-train (or resume); returns the summary written to summary.json."""
    from ptmlab.pretrain.flops import flops_per_token, nonembedding_params
    from ptmlab.pretrain.report import write_pretrain_report
    from ptmlab.train.evaluate import resolve_precision
    from ptmlab.train.lifecycle import FitResult, finish_run, prepare_run
    from ptmlab.train.loop import Trainer

    session = prepare_run(cfg, command, resume=resume)
    p = prepare(cfg)
    obj = p.objective
    pm = obj.wrap(p.model)
    fpt = flops_per_token(pm, cfg.block_size)
    tokens_per_step = cfg.batch_size * p.train.blocks.length
    steps_per_epoch = max(1, math.ceil(len(p.train) / cfg.batch_size))
    steps = budget_steps(cfg, tokens_per_step, fpt, steps_per_epoch)
    run_cfg = dataclasses.replace(cfg, max_steps=steps)
    run = session.open()
    precision = resolve_precision(cfg.precision)
    evals: dict[int, dict] = {}

    def evaluate(m):
        metrics = eval_loss(m, p.valid, obj, cfg.eval_batch_size, precision, cfg.eval_blocks)
        evals[trainer.state.step] = metrics
        return metrics

    trainer = Trainer(pm, p.train, run_cfg, run, p.tokenizer.pad_token_id or 0, loss_fn=obj.loss,
                      evaluate_fn=evaluate, main_metric="eval_loss", greater_is_better=False, flops_per_token=fpt)
    if resume:
        trainer.resume()
        first = [r for r in run.metrics() if r.get("step") == 0 and "eval" in r]
        initial = first[0]["eval"] if first else {}
    else:
        initial = evaluate(trainer.raw_model)
        if session.main:
            run.log({"step": 0, "tokens": 0, "eval": initial})
    state = trainer.train()
    final = trainer.final_model()
    final_step = state.best_step if cfg.keep_best and state.best_step is not None else state.step
    last = evals.get(final_step) or evaluate(final)
    kept = obj.kept_model(final)
    metrics = {"initial_eval_loss": initial.get("eval_loss"), **last, "tokens": state.tokens,
               "flops": float(state.tokens * fpt),
               "tokens_per_second": round(state.tokens / max(state.train_seconds, 1e-9), 1)}
    summary = {
        "task": f"pretrain:{cfg.objective}", "model": cfg.model or (cfg.arch or obj.default_arch),
        "strategy": "pretrain", "objective": cfg.objective, "metrics": metrics, "main_metric": "eval_loss",
        "steps": state.step, "epochs": round(state.step / steps_per_epoch, 4), "train_seconds":
            round(state.train_seconds, 3), "train_examples": state.examples, "block_size": cfg.block_size,
        "batch_size": cfg.batch_size, "flops_per_token": fpt, "params": sum(q.numel() for q in kept.parameters()),
        "trained_params": sum(q.numel() for q in pm.parameters()), "nonembedding_params": nonembedding_params(pm),
        "architecture": kept.config.model_type, "precision": precision, "world_size": trainer.world,
        "corpus": p.corpus,
    }
    fit = FitResult(kept, trainer, state, {}, precision, summary["trained_params"])
    return finish_run(session, fit, p.tokenizer, None, summary, report=write_pretrain_report)
