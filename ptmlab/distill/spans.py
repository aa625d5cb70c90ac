"""Distillation of the span task kinds: a token tagger learns its teacher's tag distribution at every word (the first
sub-token of each word, where predictions are read), a span extractor its teacher's start and end distributions over
the window's positions. ``soft_ce`` as for sentence tasks: the T^2-scaled KL to the teacher's softened
distribution, mixed by ``--alpha`` with the hard labels. The teacher's logits are computed once, in memory (one row
per word or position: small), and the student trains through the one lifecycle (``fine_tune``).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from ptmlab.core.errors import PtmlabError
from ptmlab.data.qa import QAFeatures
from ptmlab.data.tokens import IGNORE
from ptmlab.models.loader import model_inputs

NEG = -1e4


def _padded(rows: list[np.ndarray], idx: list[int], length: int, fill: float) -> torch.Tensor:
    first = rows[idx[0]]
    out = np.full((len(idx), length, *first.shape[1:]), fill, dtype=np.float32)
    for r, i in enumerate(idx):
        out[r, :len(rows[i])] = rows[i]
    return torch.from_numpy(out)


def _kl(s: torch.Tensor, t: torch.Tensor, temp: float) -> torch.Tensor:
    """T^2-scaled KL(teacher_T || student_T) over the last dimension."""
    log_ps = F.log_softmax(s / temp, -1)
    log_pt = F.log_softmax(t / temp, -1)
    return (log_pt.exp() * (log_pt - log_ps)).sum(-1) * temp**2


def span_kd_loss(teacher_logits: list, qa: bool, temperature: float, alpha: float):
    """The loop's ``loss_fn``: per-example alpha * soft + (1 - alpha) * hard. ``teacher_logits``: the teacher's
    logits per training feature ([len, tags], or (start [len], end [len]) for QA), looked up by the batch's index."""
    if qa:
        t_start = [x[0] for x in teacher_logits]
        t_end = [x[1] for x in teacher_logits]

    def loss(model, batch):
        out = model(**model_inputs(model, batch))
        idx = batch["index"].tolist()
        if qa:
            pad = batch["attention_mask"] == 0
            length = pad.shape[1]
            soft = hard = 0
            for s_log, t_rows, gold in ((out.start_logits, t_start, batch["start_positions"]),
                                        (out.end_logits, t_end, batch["end_positions"])):
                s = s_log.float().masked_fill(pad, NEG)
                t = _padded(t_rows, idx, length, NEG).to(s.device).masked_fill(pad, NEG)
                soft = soft + _kl(s, t, temperature) / 2
                hard = hard + F.cross_entropy(s, gold, reduction="none") / 2
            return alpha * soft + (1 - alpha) * hard
        s = out.logits.float()
        labels = batch["labels"]
        t = _padded(teacher_logits, idx, s.shape[1], 0.0).to(s.device)
        keep = (labels != IGNORE).float()  # the words' first sub-tokens: where tags are read
        count = keep.sum(1).clamp(min=1)
        soft = (_kl(s, t, temperature) * keep).sum(1) / count
        hard = F.cross_entropy(s.transpose(1, 2), labels, ignore_index=IGNORE, reduction="none").sum(1) / count
        return alpha * soft + (1 - alpha) * hard

    return loss


def agreement(student_preds: list, teacher_preds: list, qa: bool) -> float:
    """Share of words tagged alike (token classification) or of questions answered with the same span (QA)."""
    if qa:
        same = [(a.start, a.end) == (b.start, b.end) for a, b in zip(student_preds, teacher_preds, strict=True)]
    else:
        same = [x == y for s, t in zip(student_preds, teacher_preds, strict=True) for x, y in zip(s, t, strict=True)]
    return float(np.mean(same)) if same else float("nan")


def run_span_distill(cfg, session, data, command: str = "distill", resume: bool = False) -> dict:
    """``run_distill`` for token classification and extractive QA (soft targets only); returns the summary."""
    from ptmlab.data.encode import encode_split
    from ptmlab.data.taskdata import label_names
    from ptmlab.distill.matches import parse_losses
    from ptmlab.distill.students import build_student
    from ptmlab.distill.teacher import load_teacher
    from ptmlab.models.latency import time_side_by_side
    from ptmlab.models.zoo import load_tokenizer
    from ptmlab.train.evaluate import resolve_precision
    from ptmlab.train.lifecycle import fine_tune, finish_run
    from ptmlab.train.spans import evaluate_span, span_logits

    spec, labels = data.spec, label_names(data)
    other = [n for n, _ in parse_losses(cfg.losses) if n != "soft_ce"]
    if cfg.matches or other or cfg.intermediate_epochs or cfg.general_text or cfg.augment:
        raise PtmlabError(f"distilling a {spec.kind} task matches the teacher's soft targets (--losses soft_ce, per "
                          f"word or per start/end position); layer losses, matches, intermediate and general "
                          f"stages and augmentation are for sentence tasks")
    teacher = load_teacher(cfg.teacher, spec, labels)
    tok = load_tokenizer(cfg.teacher)
    student = build_student(cfg.student, teacher, spec.num_labels, False, labels)
    if type(student).__name__ != type(teacher).__name__:
        raise PtmlabError(f"student '{cfg.student}' is a {type(student).__name__}, the teacher a "
                          f"{type(teacher).__name__}: use a student built from the teacher (layers:K, shrink:...)")
    enc = {name: encode_split(tok, split, cfg.max_length) for name, split in data.splits.items()}
    if not cfg.student.startswith(("layers:", "shrink:")):
        s_tok = load_tokenizer(cfg.student)
        if s_tok.get_vocab() != tok.get_vocab():
            raise PtmlabError(f"student '{cfg.student}' tokenizes differently from the teacher: per-token soft "
                              f"targets need the teacher's tokenizer (use layers:K or shrink:...)")
    precision = resolve_precision(cfg.precision)
    qa = isinstance(enc["train"], QAFeatures)
    run = session.open()
    teacher_train = span_logits(teacher, enc["train"], cfg.teacher_batch_size, precision, desc="teacher outputs")
    teacher_metrics, teacher_dev = evaluate_span(teacher, enc["dev"], spec, cfg.eval_batch_size, precision)
    fit = fine_tune(student, tok, data, cfg, run, enc=enc, resume=resume,
                    loss_fn=span_kd_loss(teacher_train, qa, cfg.temperature, cfg.alpha),
                    extra_metrics=lambda preds: {"agreement_with_teacher": agreement(preds, teacher_dev, qa)})
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
        "task": spec.name, "model": cfg.student, "strategy": "distill", "teacher": cfg.teacher, "losses": "soft_ce",
        **train, "teacher_metrics": teacher_metrics, "agreement_with_teacher": round(float(agree), 4),
        "retained_pct": round(100 * s_main / t_main, 2) if t_main else None,
        "trainable_params": sum(p.numel() for p in student.parameters() if p.requires_grad),
        "teacher_params": sum(p.numel() for p in teacher.parameters()),
        "teacher_latency_b32_ms": rows[0]["latency_b32_ms"], "student_latency_b32_ms": rows[1]["latency_b32_ms"],
        "speedup_b32": round(rows[0]["latency_b32_ms"] / max(rows[1]["latency_b32_ms"], 1e-9), 2),
        "teacher_cache": "in memory", "labels": labels, "main_metric": main,
    }
    return finish_run(session, fit, tok, data, summary)
