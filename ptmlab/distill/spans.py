"""Distillation of the span task kinds: a token tagger learns its teacher's tag distribution at every word (the first
sub-token of each word, where predictions are read), a span extractor its teacher's start and end distributions over
the window's positions (``soft_ce``, per ``ctx.span``), and both any layer loss of sentence tasks (hidden_mse,
attention_kl, ..., over the real tokens, through the layer map). The teacher's outputs go through the one teacher
cache on disk (or run on the fly with ``--no-teacher-cache``); a tagged sentence or a QA window is one cached
example. The student trains through the distillation stages of ``pipeline`` and the one lifecycle.
"""

from __future__ import annotations

import numpy as np
import torch

from ptmlab.core.errors import PtmlabError
from ptmlab.distill.features import output_logits
from ptmlab.distill.losses import LossContext
from ptmlab.distill.losses.soft_ce import NEG, soft_ce
from ptmlab.distill.objective import batch_labels
from ptmlab.models.loader import model_inputs


def _padded(rows: list[np.ndarray], idx: list[int], length: int, fill: float) -> torch.Tensor:
    first = rows[idx[0]]
    out = np.full((len(idx), length, *first.shape[1:]), fill, dtype=np.float32)
    for r, i in enumerate(idx):
        out[r, :len(rows[i])] = rows[i]
    return torch.from_numpy(out)


def span_kd_loss(teacher_logits: list, qa: bool, temperature: float, alpha: float):
    """A loop ``loss_fn`` on teacher logits held in memory: per-example alpha * soft + (1 - alpha) * hard, as
    ``soft_ce`` computes it for the span kinds. ``teacher_logits``: the teacher's logits per training feature
    ([len, tags], or (start [len], end [len]) for QA), looked up by the batch's index."""
    rows = [np.stack([x[0], x[1]], -1) for x in teacher_logits] if qa else teacher_logits

    def loss(model, batch):
        s = output_logits(model(**model_inputs(model, batch)))
        t = _padded(rows, batch["index"].tolist(), s.shape[1], NEG if qa else 0.0).to(s.device)
        ctx = LossContext(batch["attention_mask"], batch_labels(batch), temperature=temperature, alpha=alpha,
                          span="positions" if qa else "tokens")
        return soft_ce(s, t, ctx)

    return loss


def agreement(student_preds: list, teacher_preds: list, qa: bool) -> float:
    """Share of words tagged alike (token classification) or of questions answered with the same span (QA)."""
    if qa:
        same = [(a.start, a.end) == (b.start, b.end) for a, b in zip(student_preds, teacher_preds, strict=True)]
    else:
        same = [x == y for s, t in zip(student_preds, teacher_preds, strict=True) for x, y in zip(s, t, strict=True)]
    return float(np.mean(same)) if same else float("nan")


def run_span_distill(cfg, session, data, command: str = "distill", resume: bool = False) -> dict:
    """``run_distill`` for token classification and extractive QA; returns the summary."""
    import dataclasses

    from ptmlab.data.encode import encode_split
    from ptmlab.data.qa import QAFeatures
    from ptmlab.data.taskdata import label_names
    from ptmlab.distill.cache import Shapes, check_fits, teacher_outputs
    from ptmlab.distill.matches import ModelInfo
    from ptmlab.distill.pipeline import match_plan, plan_stages, train_stages
    from ptmlab.distill.report import write_distill_report
    from ptmlab.distill.students import build_student
    from ptmlab.distill.teacher import fingerprint, load_teacher
    from ptmlab.models.latency import time_side_by_side
    from ptmlab.models.zoo import load_tokenizer
    from ptmlab.train.evaluate import resolve_precision
    from ptmlab.train.lifecycle import finish_run, mark_stage
    from ptmlab.train.spans import evaluate_span

    spec, labels = data.spec, label_names(data)
    if cfg.augment:
        raise PtmlabError(f"--augment is for sentence tasks: it replaces words of a {spec.kind} example without "
                          f"carrying its tags or answer span to the copy; drop --augment")
    teacher = load_teacher(cfg.teacher, spec, labels)
    tok = load_tokenizer(cfg.teacher)
    student = build_student(cfg.student, teacher, spec.num_labels, False, labels)
    if type(student).__name__ != type(teacher).__name__:
        raise PtmlabError(f"student '{cfg.student}' is a {type(student).__name__}, the teacher a "
                          f"{type(teacher).__name__}: use a student built from the teacher (layers:K, shrink:...)")
    if not cfg.student.startswith(("layers:", "shrink:")):
        s_tok = load_tokenizer(cfg.student)
        if s_tok.get_vocab() != tok.get_vocab():
            raise PtmlabError(f"student '{cfg.student}' tokenizes differently from the teacher: per-token soft "
                              f"targets need the teacher's tokenizer (use layers:K or shrink:...)")
    s_info, t_info = ModelInfo.of(student), ModelInfo.of(teacher)
    matches, relation_heads = match_plan(cfg, s_info, t_info)
    wrong = next((m.loss for m in matches if m.feature == "logits" and m.loss != "soft_ce"), None)
    if wrong:
        raise PtmlabError(f"loss '{wrong}' compares one output vector per example; a {spec.kind} student matches "
                          f"its teacher's logits with soft_ce (per word or per start/end position)")
    enc = {name: encode_split(tok, split, cfg.max_length) for name, split in data.splits.items()}
    qa = isinstance(enc["train"], QAFeatures)
    needs = {m.key for m in matches if m.feature != "logits"}
    check_fits([(enc["train"], needs)], Shapes(teacher, relation_heads), cfg.teacher_cache)
    precision = resolve_precision(cfg.precision)
    run = session.open()
    pad = tok.pad_token_id or 0
    fp = fingerprint(teacher)

    def outputs(e, need, what):
        return teacher_outputs(teacher, fp, e, pad, need, relation_heads, cfg.teacher_batch_size,
                               cfg.teacher_cache, f"teacher outputs ({what})")

    mark_stage(run, "teacher outputs", examples=len(enc["train"]), cache=cfg.teacher_cache)
    t_out = outputs(enc["train"], needs, "train")
    teacher_metrics, teacher_dev = evaluate_span(teacher, enc["dev"], spec, cfg.eval_batch_size, precision)
    general = None
    if cfg.general_text and not resume:
        from ptmlab.distill.text import text_examples

        g_enc = text_examples(cfg.general_text, tok, cfg.max_length, cfg.general_examples, cfg.seed)
        general = (g_enc, outputs(g_enc, needs, "general text"))
    kw = dict(temperature=cfg.temperature, alpha=cfg.alpha, relation_heads=relation_heads,
              span="positions" if qa else "tokens")
    fit, objective, stage_log = train_stages(
        cfg, session, run, student, tok, data, enc, plan_stages(cfg, matches, enc["train"], t_out, general),
        s_info, t_info, kw, resume, lambda preds: {"agreement_with_teacher": agreement(preds, teacher_dev, qa)})
    dev_metrics = dict(fit.dev_metrics)
    agree = dev_metrics.pop("agreement_with_teacher")
    fit.dev_metrics = dev_metrics
    main = spec.main_metric
    t_main, s_main = teacher_metrics.get(main), dev_metrics.get(main)
    # inference speed of both on dev inputs, timed in alternation (a slow stretch of a shared machine hits both)
    dev = data.splits["dev"]
    texts = [" ".join(t) for t in dev.tokens[:64]] if not qa else \
        [f"{q} {c}" for q, c in zip(dev.questions[:64], dev.contexts[:64], strict=True)]
    rows = [{"model": "teacher"}, {"model": "student"}]
    time_side_by_side([(rows[0], teacher, tok), (rows[1], fit.model, tok)], texts, rounds=3,
                      max_length=min(cfg.max_length if not qa else 384, 512))
    fit.model.train(False)
    train = fit.train_summary()
    summary = {
        "task": spec.name, "model": cfg.student, "strategy": "distill", "teacher": cfg.teacher,
        "losses": cfg.losses if not cfg.matches else "matches", "layer_map": cfg.layer_map,
        "matches": [dataclasses.asdict(m) for m in matches],
        **train, "teacher_metrics": teacher_metrics, "agreement_with_teacher": round(float(agree), 4),
        "retained_pct": round(100 * s_main / t_main, 2) if t_main else None,
        "trainable_params": sum(p.numel() for p in fit.model.parameters() if p.requires_grad),
        "teacher_params": sum(p.numel() for p in teacher.parameters()),
        "layers": s_info.layers, "teacher_layers": t_info.layers,
        "teacher_latency_b32_ms": rows[0]["latency_b32_ms"], "student_latency_b32_ms": rows[1]["latency_b32_ms"],
        "speedup_b32": round(rows[0]["latency_b32_ms"] / max(rows[1]["latency_b32_ms"], 1e-9), 2),
        "teacher_cache": "hit" if t_out.hit else "computed", "teacher_batches_run": t_out.batches_run,
        "final_losses": objective.last_parts, "stages": stage_log, "labels": labels, "main_metric": main,
    }
    return finish_run(session, fit, tok, data, summary, report=write_distill_report)
