"""``run_distill``: teacher + student + matches -> cached teacher outputs -> the one Trainer -> a normal run
directory (model, summary.json with ``metrics`` and ``agreement_with_teacher``, predictions, report.html).

Stages (TinyBERT): optional general distillation on raw text (layer losses), optional task-stage epochs on the
layer losses alone, then the final stage: the prediction-layer losses when an intermediate stage ran, else every
match at once.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import numpy as np

from ptmlab.core.config import config_to_dict
from ptmlab.core.errors import PtmlabError
from ptmlab.core.rundir import RunDir, check_output_dir
from ptmlab.core.seed import configure_threads, set_seed
from ptmlab.distill.config import DistillConfig
from ptmlab.distill.matches import Match, ModelInfo, check_matches, default_matches, parse_losses, parse_matches

BUILT_FROM_TEACHER = ("layers:", "shrink:", "bilstm", "cnn")


def build_matches(cfg: DistillConfig, student: ModelInfo, teacher: ModelInfo) -> list[Match]:
    """Matches from the config file when declared, else --losses expanded over --layer-map; all checked."""
    from ptmlab.distill.maps import layer_map

    if cfg.matches:
        matches = parse_matches(cfg.matches)
    else:
        losses = parse_losses(cfg.losses)
        other = [n for n, _ in losses if n != "soft_ce"]
        if student.rnn and other:
            raise PtmlabError(f"loss '{other[0]}' needs layers from the student, but a {student.rnn} student has "
                              f"none: use --losses soft_ce")
        layered_loss = any(n not in ("soft_ce", "embedding_mse") for n, _ in losses)
        pairs = layer_map(cfg.layer_map, student.layers, teacher.layers) if layered_loss and student.layers else []
        matches = default_matches(losses, pairs, student, teacher)
    if not matches:
        raise PtmlabError("no match to train on: declare matches or pass --losses, e.g. soft_ce")
    check_matches(matches, student, teacher)
    return matches


def _stage_trainer(student, objective, enc, cfg, run, pad_id, **kw):
    from ptmlab.train.loop import Trainer

    return Trainer(student, enc, cfg, run, pad_id, loss_fn=objective, loss_module=objective, **kw)


def run_distill(cfg: DistillConfig, command: str = "distill", resume: bool = False) -> dict:
    """Distil ``cfg.teacher`` into ``cfg.student`` on ``cfg.task``; returns the summary written to summary.json.

    ``resume``: continue a killed run from its checkpoint. Only the final (prediction-layer) stage checkpoints;
    the general and intermediate stages, which ran before it, are not repeated."""
    from ptmlab.data.encode import encode_split
    from ptmlab.distill.cache import teacher_outputs
    from ptmlab.distill.objective import DistillObjective
    from ptmlab.distill.students import build_student
    from ptmlab.distill.teacher import fingerprint, load_teacher
    from ptmlab.models.loader import save_model
    from ptmlab.models.zoo import load_tokenizer
    from ptmlab.train.evaluate import evaluate, logits_to_predictions, resolve_precision
    from ptmlab.train.finetune import label_names, load_task_data, write_predictions

    configure_threads()
    main_process = int(os.environ.get("RANK", "0")) == 0
    if not cfg.teacher:
        raise PtmlabError("no teacher: pass --teacher RUN_DIR (a fine-tuned run) or a model with a task head")
    if not cfg.output:
        raise PtmlabError("no output directory: pass --output RUN_DIR")
    if resume:
        from ptmlab.train.checkpoint import find_checkpoint

        find_checkpoint(Path(cfg.output))  # no checkpoint: a clean error before any work
    elif main_process:
        check_output_dir(Path(cfg.output), cfg.overwrite)
    set_seed(cfg.seed)
    data = load_task_data(cfg)
    spec, labels, regression = data.spec, label_names(data), data.spec.kind == "regression"
    teacher = load_teacher(cfg.teacher, spec, labels)
    t_tok = load_tokenizer(cfg.teacher)
    set_seed(cfg.seed)
    student = build_student(cfg.student, teacher, spec.num_labels, regression, labels)
    own_tokenizer = not cfg.student.startswith(BUILT_FROM_TEACHER)
    s_tok = load_tokenizer(cfg.student) if own_tokenizer else t_tok
    s_info, t_info = ModelInfo.of(student), ModelInfo.of(teacher)
    matches = build_matches(cfg, s_info, t_info)
    uses_relations = any(m.feature in ("qk_relation", "vv_relation") for m in matches)
    relation_heads = (cfg.relation_heads or t_info.heads) if uses_relations else None  # part of the cache key
    layer_matches = [m for m in matches if m.feature != "logits"]
    pred_matches = [m for m in matches if m.feature == "logits"]
    if cfg.intermediate_epochs and not (layer_matches and pred_matches):
        raise PtmlabError("--intermediate-epochs needs layer losses and soft_ce (e.g. --losses "
                          "soft_ce,hidden_mse,attention_kl)")
    if cfg.general_text and not layer_matches:
        raise PtmlabError("--general-text needs layer losses (hidden_mse, attention_kl, ...): general "
                          "distillation has no labels to match logits on")

    pad_s, pad_t = s_tok.pad_token_id or 0, t_tok.pad_token_id or 0
    enc = {name: encode_split(s_tok, split, cfg.max_length) for name, split in data.splits.items()}
    train_enc = enc["train"]
    if cfg.augment:
        if own_tokenizer:
            raise PtmlabError("--augment works on students sharing the teacher's tokenizer (layers:, shrink:, "
                              "bilstm, cnn)")
        from ptmlab.distill.augment import augment

        train_enc = augment(train_enc, teacher, t_tok, cfg.augment, cfg.augment_prob, cfg.seed)
    t_train = train_enc if not own_tokenizer else encode_split(t_tok, data.splits["train"], cfg.max_length)
    t_dev = enc["dev"] if not own_tokenizer else encode_split(t_tok, data.splits["dev"], cfg.max_length)
    if layer_matches and t_train.lengths != train_enc.lengths:
        raise PtmlabError(f"layer losses compare token by token, but student '{cfg.student}' tokenizes differently "
                          f"from the teacher: use --losses soft_ce or a student on the teacher's tokenizer")

    if resume or not main_process:
        run = RunDir.open(cfg.output) if main_process else RunDir(cfg.output)
    else:
        run = RunDir.create(cfg.output, cfg.overwrite)
        run.write_config(config_to_dict(cfg), command)
    fp = fingerprint(teacher)
    needs = {m.key for m in layer_matches}
    t_out = teacher_outputs(teacher, fp, t_train, pad_t, needs, relation_heads, cfg.teacher_batch_size,
                            cfg.teacher_cache, "teacher outputs (train)")
    t_dev_out = teacher_outputs(teacher, fp, t_dev, pad_t, set(), None, cfg.teacher_batch_size, cfg.teacher_cache,
                                "teacher outputs (dev)")
    teacher_dev_preds = logits_to_predictions(t_dev_out.logits(len(t_dev)).numpy(), spec)
    from ptmlab.data.metrics import compute_metrics

    teacher_metrics = compute_metrics(spec.metrics, teacher_dev_preds, enc["dev"].labels)

    kw = dict(temperature=cfg.temperature, alpha=cfg.alpha, regression=regression, relation_heads=relation_heads)
    stage_log = []
    sub_cfg = dataclasses.replace(cfg, keep_best=False, max_steps=0, early_stopping=0, save_steps=10**9)
    if cfg.general_text and not resume:
        from ptmlab.distill.text import text_examples

        g_enc = text_examples(cfg.general_text, t_tok, cfg.max_length, cfg.general_examples, cfg.seed)
        g_out = teacher_outputs(teacher, fp, g_enc, pad_t, needs, relation_heads, cfg.teacher_batch_size,
                                cfg.teacher_cache, "teacher outputs (general text)")
        obj = DistillObjective(student, layer_matches, g_out, s_info, t_info, **kw)
        st = _run_stage(student, obj, g_enc, dataclasses.replace(sub_cfg, epochs=cfg.general_epochs),
                        run, "general", pad_s, main_process)
        stage_log.append({"stage": "general", "examples": len(g_enc), "steps": st.step, "losses": obj.last_parts})
    final_matches = matches
    if cfg.intermediate_epochs:
        final_matches = pred_matches
    if cfg.intermediate_epochs and not resume:
        obj = DistillObjective(student, layer_matches, t_out, s_info, t_info, **kw)
        st = _run_stage(student, obj, train_enc, dataclasses.replace(sub_cfg, epochs=cfg.intermediate_epochs),
                        run, "intermediate", pad_s, main_process)
        stage_log.append({"stage": "intermediate", "examples": len(train_enc), "steps": st.step,
                          "losses": obj.last_parts})

    precision = resolve_precision(cfg.precision)
    evals: dict[int, tuple] = {}

    def evaluate_fn(m):
        metrics, preds = evaluate(m, enc["dev"], spec, pad_s, cfg.eval_batch_size, precision)
        metrics["agreement_with_teacher"] = agreement(preds, teacher_dev_preds, regression)
        evals[trainer.state.step] = (metrics, preds)
        return metrics

    objective = DistillObjective(student, final_matches, t_out, s_info, t_info, **kw)
    trainer = _stage_trainer(student, objective, train_enc, cfg, run, pad_s, evaluate_fn=evaluate_fn,
                             main_metric=spec.main_metric, regression=regression)
    if resume:
        trainer.resume()
        stage_log = [{"stage": d.name, "ran_before_resume": True} for d in sorted((run.path / "stages").glob("*"))]
    state = trainer.train()
    objective.detach()
    student = trainer.final_model()
    final_step = state.best_step if cfg.keep_best and state.best_step is not None else state.step
    dev_metrics, dev_preds = evals[final_step] if final_step in evals else evaluate_fn(student)
    dev_metrics = dict(dev_metrics)
    agree = dev_metrics.pop("agreement_with_teacher")
    test_metrics, test_preds = {}, None
    if cfg.test and "test" in enc and enc["test"].labels is not None:
        test_metrics, test_preds = evaluate(student, enc["test"], spec, pad_s, cfg.eval_batch_size, precision)
    main = spec.main_metric
    t_main, s_main = teacher_metrics.get(main), dev_metrics.get(main)
    summary = {
        "task": spec.name, "model": cfg.student, "strategy": "distill", "teacher": cfg.teacher,
        "losses": cfg.losses if not cfg.matches else "matches", "layer_map": cfg.layer_map,
        "matches": [dataclasses.asdict(m) for m in matches],
        "metrics": dev_metrics, "test_metrics": test_metrics, "teacher_metrics": teacher_metrics,
        "agreement_with_teacher": round(float(agree), 4),
        "retained_pct": round(100 * s_main / t_main, 2) if t_main else None,
        "train_seconds": round(state.train_seconds, 3), "train_examples": len(train_enc),
        "eval_examples": len(enc["dev"]), "steps": state.step,
        "epochs": round(state.step / trainer.steps_per_epoch, 4),
        "train_examples_per_second": round(state.step * cfg.batch_size / max(state.train_seconds, 1e-9), 2),
        "best_step": state.best_step, "stopped_early": state.stopped_early,
        "trainable_params": sum(p.numel() for p in student.parameters() if p.requires_grad),
        "params": sum(p.numel() for p in student.parameters()),
        "teacher_params": sum(p.numel() for p in teacher.parameters()),
        "layers": s_info.layers, "teacher_layers": t_info.layers,
        "teacher_cache": "hit" if t_out.hit else "computed", "teacher_batches_run": t_out.batches_run,
        "final_losses": objective.last_parts, "stages": stage_log,
        "precision": precision, "world_size": trainer.world, "labels": labels, "main_metric": main,
    }
    if trainer.accelerator.is_main_process:
        save_model(student, s_tok, run.path)
        write_predictions(run, "dev", data.splits["dev"], dev_preds, spec, labels)
        if test_preds is not None:
            write_predictions(run, "test", data.splits["test"], test_preds, spec, labels)
        run.write_summary(summary)
        from ptmlab.distill.report import write_distill_report

        write_distill_report(run)
        trainer.cleanup()
    trainer.accelerator.wait_for_everyone()
    return summary


def _run_stage(student, objective, enc, cfg, run: RunDir, name: str, pad_id: int, main_process: bool):
    """A layer-loss stage (no evaluation) logged in RUN/stages/NAME/metrics.jsonl."""
    stage_dir = run.path / "stages" / name
    if main_process:
        stage_dir.mkdir(parents=True, exist_ok=True)
        (stage_dir / "metrics.jsonl").unlink(missing_ok=True)
    trainer = _stage_trainer(student, objective, enc, cfg, RunDir(stage_dir), pad_id)
    state = trainer.train()
    objective.detach()
    trainer.cleanup()
    return state


def agreement(student_preds: np.ndarray, teacher_preds: np.ndarray, regression: bool) -> float:
    """Share of examples where student and teacher predict the same label (Pearson r for regression)."""
    s, t = np.asarray(student_preds), np.asarray(teacher_preds)
    if regression:
        return float(np.corrcoef(s, t)[0, 1]) if len(s) > 1 else float("nan")
    return float((s == t).mean()) if len(s) else float("nan")
