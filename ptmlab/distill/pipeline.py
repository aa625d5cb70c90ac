"""``run_distill``: teacher + student + matches -> cached teacher outputs -> a list of ``Stage``s, each trained
by the one lifecycle's ``fine_tune`` -> a normal run directory (model, summary.json with ``metrics`` and
``agreement_with_teacher``, predictions, report.html).

Stages (TinyBERT): optional general distillation on raw text (layer losses), optional task-stage epochs on the
layer losses alone, then the final stage: the prediction-layer losses when an intermediate stage ran, else every
match at once.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from ptmlab.core.errors import PtmlabError
from ptmlab.core.rundir import RunDir
from ptmlab.core.seed import set_seed
from ptmlab.data.labels import MULTI_LABEL, PROBLEM_TYPE, decision_threshold
from ptmlab.data.tasks import SPAN_KINDS
from ptmlab.distill.config import DistillConfig
from ptmlab.distill.matches import Match, ModelInfo, check_matches, default_matches, parse_losses, parse_matches
from ptmlab.train.finetune import static_student_lr

BUILT_FROM_TEACHER = ("layers:", "shrink:", "mobile:", "bilstm", "cnn", "static")


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


@dataclass
class Stage:
    """One distillation stage: matches trained on ``enc`` against cached teacher outputs for ``epochs``.

    The final stage is the run itself (evaluated, kept, resumable); earlier stages (TinyBERT's general and
    intermediate layer-loss stages) log under RUN/stages/NAME and are not repeated on --resume."""

    name: str
    matches: list[Match]
    enc: object
    teacher_out: object
    epochs: float
    final: bool = False


def plan_stages(cfg: DistillConfig, matches: list[Match], train_enc, t_out, general) -> list[Stage]:
    """general (raw text, layer losses) -> intermediate (task data, layer losses) -> final (what remains)."""
    layer_matches = [m for m in matches if m.feature != "logits"]
    pred_matches = [m for m in matches if m.feature == "logits"]
    stages = []
    if general is not None:
        g_enc, g_out = general
        stages.append(Stage("general", layer_matches, g_enc, g_out, cfg.general_epochs))
    if cfg.intermediate_epochs:
        stages.append(Stage("intermediate", layer_matches, train_enc, t_out, cfg.intermediate_epochs))
    stages.append(Stage("final", pred_matches if cfg.intermediate_epochs else matches, train_enc, t_out, cfg.epochs,
                        final=True))
    return stages


def run_distill(cfg: DistillConfig, command: str = "distill", resume: bool = False, source=None) -> dict:
    """Distil ``cfg.teacher`` into ``cfg.student`` on ``cfg.task`` (or ``source``: data in memory, read as
    ``run_finetune`` reads it); returns the summary written to summary.json.

    ``resume``: continue a killed run from its checkpoint. Only the final (prediction-layer) stage checkpoints;
    the general and intermediate stages, which ran before it, are not repeated."""
    from ptmlab.data.encode import encode_split
    from ptmlab.data.metrics import compute_metrics
    from ptmlab.data.taskdata import label_names, load_task_data
    from ptmlab.distill.cache import Shapes, check_fits, teacher_outputs
    from ptmlab.distill.multitask import is_multitask_distill, run_multitask_distill
    from ptmlab.distill.report import write_distill_report
    from ptmlab.distill.students import build_student
    from ptmlab.distill.teacher import fingerprint, load_teacher
    from ptmlab.models.zoo import load_tokenizer
    from ptmlab.train.evaluate import logits_to_predictions
    from ptmlab.train.lifecycle import finish_run, mark_stage, prepare_run

    if not cfg.teacher:
        raise PtmlabError("no teacher: pass --teacher RUN_DIR (a fine-tuned run) or a model with a task head")
    if is_multitask_distill(cfg):  # one student, a head per task (ptmlab.distill.multitask)
        if source is not None:
            raise PtmlabError("multi-task distillation reads each task by name: drop the data object")
        return run_multitask_distill(cfg, command, resume)
    cfg, resume = restart_unless_checkpointed(cfg, resume)
    session = prepare_run(cfg, command, resume=resume)
    data = load_task_data(cfg, source=source)
    if data.spec.kind in SPAN_KINDS:  # soft targets per word or over start and end positions, layer losses
        from ptmlab.distill.spans import run_span_distill

        return run_span_distill(cfg, session, data, command, resume)
    spec, labels, regression = data.spec, label_names(data), data.spec.kind == "regression"
    multi_label = spec.kind == MULTI_LABEL  # sigmoid soft targets (soft_ce's binary KL), label sets
    teacher = load_teacher(cfg.teacher, spec, labels)
    t_tok = load_tokenizer(cfg.teacher)
    set_seed(cfg.seed)
    student = build_student(cfg.student, teacher, spec.num_labels, regression, labels, tokenizer=t_tok)
    cfg = session.cfg = static_student_lr(cfg, student)  # a static student: 3e-3 unless --lr was given
    if multi_label:
        student.config.problem_type = PROBLEM_TYPE
    own_tokenizer = not cfg.student.startswith(BUILT_FROM_TEACHER)
    s_tok = load_tokenizer(cfg.student) if own_tokenizer else t_tok
    s_info, t_info = ModelInfo.of(student), ModelInfo.of(teacher)
    matches, relation_heads = match_plan(cfg, s_info, t_info)
    layer_matches = [m for m in matches if m.feature != "logits"]

    pad_t = t_tok.pad_token_id or 0
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

    needs = {m.key for m in layer_matches}
    check_fits([(t_train, needs), (t_dev, set())], Shapes(teacher, relation_heads), cfg.teacher_cache)
    run = session.open()
    fp = fingerprint(teacher)

    def outputs(e, need, what):
        return teacher_outputs(teacher, fp, e, pad_t, need, relation_heads, cfg.teacher_batch_size,
                               cfg.teacher_cache, f"teacher outputs ({what})")

    mark_stage(run, "teacher outputs", examples=len(t_train), cache=cfg.teacher_cache)
    t_out = outputs(t_train, needs, "train")
    teacher_dev_preds = logits_to_predictions(outputs(t_dev, set(), "dev").logits(len(t_dev)).numpy(), spec,
                                              decision_threshold(teacher.config) if multi_label else None)
    teacher_metrics = compute_metrics(spec.metrics, teacher_dev_preds, enc["dev"].labels)
    general = None
    if cfg.general_text and not resume:
        from ptmlab.distill.text import text_examples

        g_enc = text_examples(cfg.general_text, t_tok, cfg.max_length, cfg.general_examples, cfg.seed)
        general = (g_enc, outputs(g_enc, needs, "general text"))

    kw = dict(temperature=cfg.temperature, alpha=cfg.alpha, regression=regression, relation_heads=relation_heads,
              multi_label=multi_label)
    fit, objective, stage_log = train_stages(
        cfg, session, run, student, s_tok, data, enc, plan_stages(cfg, matches, train_enc, t_out, general),
        s_info, t_info, kw, resume,
        lambda preds: {"agreement_with_teacher": agreement(preds, teacher_dev_preds, regression)})
    student = fit.model
    dev_metrics = dict(fit.dev_metrics)
    agree = dev_metrics.pop("agreement_with_teacher")
    fit.dev_metrics = dev_metrics
    main = spec.main_metric
    t_main, s_main = teacher_metrics.get(main), dev_metrics.get(main)
    train = fit.train_summary()
    summary = {
        "task": spec.name, "model": cfg.student, "strategy": "distill", "teacher": cfg.teacher,
        "losses": cfg.losses if not cfg.matches else "matches", "layer_map": cfg.layer_map,
        "matches": [dataclasses.asdict(m) for m in matches],
        **train, "teacher_metrics": teacher_metrics,
        "agreement_with_teacher": round(float(agree), 4),
        "retained_pct": round(100 * s_main / t_main, 2) if t_main else None,
        "train_examples_per_second": round(fit.state.step * cfg.batch_size / max(fit.state.train_seconds, 1e-9), 2),
        "trainable_params": sum(p.numel() for p in student.parameters() if p.requires_grad),
        "teacher_params": sum(p.numel() for p in teacher.parameters()),
        "layers": s_info.layers, "teacher_layers": t_info.layers,
        "teacher_cache": "hit" if t_out.hit else "computed", "teacher_batches_run": t_out.batches_run,
        "final_losses": objective.last_parts, "stages": stage_log, "labels": labels, "main_metric": main,
    }
    return finish_run(session, fit, s_tok, data, summary, report=write_distill_report)


def match_plan(cfg: DistillConfig, s_info: ModelInfo, t_info: ModelInfo) -> tuple[list[Match], int | None]:
    """The checked matches and the relation heads their cache entry is keyed by (None: no relation loss)."""
    matches = build_matches(cfg, s_info, t_info)
    uses_relations = any(m.feature in ("qk_relation", "vv_relation") for m in matches)
    relation_heads = (cfg.relation_heads or t_info.heads) if uses_relations else None
    layer_matches = [m for m in matches if m.feature != "logits"]
    pred_matches = [m for m in matches if m.feature == "logits"]
    if cfg.intermediate_epochs and not (layer_matches and pred_matches):
        raise PtmlabError("--intermediate-epochs needs layer losses and soft_ce (e.g. --losses "
                          "soft_ce,hidden_mse,attention_kl)")
    if cfg.general_text and not layer_matches:
        raise PtmlabError("--general-text needs layer losses (hidden_mse, attention_kl, ...): general "
                          "distillation has no labels to match logits on")
    return matches, relation_heads


def train_stages(cfg: DistillConfig, session, run, student, s_tok, data, enc: dict, stages: list[Stage],
                 s_info: ModelInfo, t_info: ModelInfo, kw: dict, resume: bool, extra_metrics):
    """Train ``stages`` in order through the one lifecycle; returns the final stage's ``FitResult``, its objective
    and what the earlier stages did. ``kw``: the ``DistillObjective`` options (temperature, alpha, ...)."""
    from ptmlab.distill.objective import DistillObjective
    from ptmlab.train.lifecycle import fine_tune, mark_stage

    stage_cfg = dataclasses.replace(cfg, keep_best=False, max_steps=0, early_stopping=0, save_steps=10**9)
    stage_log = []
    for stage in stages:
        if not stage.final and resume:
            continue  # ran before the kill
        mark_stage(run, stage.name, examples=len(stage.enc), resume=resume)
        objective = DistillObjective(student, stage.matches, stage.teacher_out, s_info, t_info, **kw)
        if stage.final:
            fit = fine_tune(student, s_tok, data, cfg, run, enc={**enc, "train": stage.enc}, loss_fn=objective,
                            loss_module=objective, resume=resume, on_model=lambda _m, o=objective: o.detach(),
                            extra_metrics=extra_metrics)
            break
        stage_run = RunDir(run.path / "stages" / stage.name)
        if session.main:
            stage_run.path.mkdir(parents=True, exist_ok=True)
            stage_run.file("metrics.jsonl").unlink(missing_ok=True)
        st = fine_tune(student, s_tok, data, dataclasses.replace(stage_cfg, epochs=stage.epochs), stage_run,
                       enc={"train": stage.enc, "dev": enc["dev"]}, loss_fn=objective, loss_module=objective,
                       on_model=lambda _m, o=objective: o.detach(), test=False)
        st.trainer.cleanup()
        student = st.model
        stage_log.append({"stage": stage.name, "examples": len(stage.enc), "steps": st.state.step,
                          "losses": objective.last_parts})
    if resume:
        stage_log = [{"stage": d.name, "ran_before_resume": True} for d in sorted((run.path / "stages").glob("*"))]
    return fit, objective, stage_log


def restart_unless_checkpointed(cfg, resume: bool):
    """A run killed before its training saved a checkpoint (while the teacher ran, in an earlier stage) resumes by
    starting again in its directory: teacher outputs already cached are read, not recomputed."""
    from pathlib import Path

    if resume and not any((Path(cfg.output) / d / "trainer_state.json").is_file()
                          for d in ("checkpoint", "checkpoint.old")):
        return dataclasses.replace(cfg, overwrite=True), False
    return cfg, resume


def agreement(student_preds: np.ndarray, teacher_preds: np.ndarray, regression: bool) -> float:
    """Share of examples where student and teacher predict the same label, or the same label set (multi-label);
    Pearson r for regression."""
    s, t = np.asarray(student_preds), np.asarray(teacher_preds)
    if regression:
        return float(np.corrcoef(s, t)[0, 1]) if len(s) > 1 else float("nan")
    same = s == t
    if same.ndim > 1:  # multi-hot rows: the whole set must agree
        same = same.all(-1)
    return float(same.mean()) if len(s) else float("nan")
