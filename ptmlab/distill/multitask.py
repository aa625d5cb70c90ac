"""Multi-task distillation (MT-DNN's ensemble-to-one-model step): one student with a head per task learns every
task's soft targets.

Teachers: a multi-task run (``ptmlab finetune --tasks ...``: each task's targets come from its own head) or several
single-task runs, ``--teacher sst2=RUN1,mrpc=RUN2`` (each task from its teacher). The student is built as in
``ptmlab distill`` (``layers:K``, ``shrink:...``, a zoo model; from the first task's teacher) and gets one head per
task (``train.multitask``; a ``layers:K`` copy of a multi-task teacher keeps the teacher's heads as its start).

Nothing here is a second distillation loop: each task's teacher logits are computed once and cached
(``distill.cache``), each task has a ``DistillObjective`` (the same soft-target loss, temperature and alpha as a
single-task run, MSE to the teacher for a regression task), and the one ``fine_tune`` trains the student on the
task-sampled batches of ``data.multitask``, switching objective and head by the batch's task. Only the
prediction-layer stage runs: layer losses and the TinyBERT stages belong to single-task runs.
"""

from __future__ import annotations

from pathlib import Path

from torch import nn

from ptmlab.core.errors import PtmlabError
from ptmlab.distill.config import DistillConfig


def is_multitask_distill(cfg: DistillConfig) -> bool:
    """Several tasks (--tasks), several teachers (TASK=RUN,...) or a multi-task teacher."""
    from ptmlab.train.multitask import recorded_tasks

    teacher = cfg.teacher or ""
    return bool(cfg.tasks) or "=" in teacher or bool(Path(teacher).expanduser().is_dir() and recorded_tasks(teacher))


def parse_teachers(cfg: DistillConfig) -> dict[str, str]:
    """task -> teacher: ``sst2=RUN1,mrpc=RUN2``, or one multi-task teacher for --tasks (default: all its heads)."""
    from ptmlab.data.multitask import parse_tasks
    from ptmlab.train.multitask import recorded_tasks

    if not cfg.teacher:
        raise PtmlabError("no teacher: pass --teacher RUN (a multi-task run) or --teacher sst2=RUN1,mrpc=RUN2")
    if "=" in cfg.teacher:
        pairs = {}
        for item in filter(None, (p.strip() for p in cfg.teacher.split(","))):
            task, eq, run = item.partition("=")
            if not eq or not task.strip() or not run.strip():
                raise PtmlabError(f"--teacher item '{item}' is not TASK=RUN: write e.g. sst2=runs/sst2,mrpc=runs/mrpc")
            if task.strip() in pairs:
                raise PtmlabError(f"--teacher names task '{task.strip()}' twice: give one teacher per task")
            pairs[task.strip()] = run.strip()
        names = parse_tasks(list(pairs))
        if cfg.tasks and sorted(parse_tasks(cfg.tasks)) != sorted(names):
            raise PtmlabError(f"--tasks {','.join(cfg.tasks)} differs from the teachers' tasks {','.join(names)}: "
                              f"drop --tasks or give a teacher for each task")
        return pairs
    heads = [t["name"] for t in recorded_tasks(cfg.teacher)]
    if not heads:
        raise PtmlabError(f"teacher '{cfg.teacher}' has one task head: for --tasks give a multi-task run "
                          f"(ptmlab finetune --tasks ...) or one teacher per task, sst2=RUN1,mrpc=RUN2")
    names = parse_tasks(cfg.tasks) if cfg.tasks else parse_tasks(heads)
    missing = [t for t in names if t not in heads]
    if missing:
        raise PtmlabError(f"teacher '{cfg.teacher}' has no head for task '{missing[0]}': its heads are "
                          f"{', '.join(heads)}")
    return {t: cfg.teacher for t in names}


def _check_options(cfg: DistillConfig) -> None:
    for name, flag in (("intermediate_epochs", "--intermediate-epochs"), ("general_text", "--general-text"),
                       ("augment", "--augment"), ("matches", "matches")):
        if getattr(cfg, name):
            raise PtmlabError(f"{flag} is a single-task distillation option: multi-task distillation trains the "
                              f"prediction layer (drop {flag})")


def _load_teachers(teachers: dict[str, str], datas) -> dict[str, nn.Module]:
    """Each distinct teacher loaded once, frozen; single-task teachers checked against their task's labels."""
    from ptmlab.data.taskdata import label_names
    from ptmlab.distill.teacher import load_teacher
    from ptmlab.models.zoo import load_model
    from ptmlab.train.multitask import recorded_tasks, set_task

    loaded: dict[str, nn.Module] = {}
    for t, name in teachers.items():
        if name in loaded:
            continue
        if recorded_tasks(name):
            model = load_model(name)
            model.eval()
            for p in model.parameters():
                p.requires_grad_(False)
            set_task(model, t)  # a clear error when the head is missing
        else:
            model = load_teacher(name, datas[t].spec, label_names(datas[t]))
        loaded[name] = model
    return loaded


def _with_heads(student: nn.Module, entries: list[dict]) -> nn.Module:
    """The student with exactly ``entries``' heads (a copy of a multi-task teacher keeps matching heads)."""
    from ptmlab.models.structure import structure_of
    from ptmlab.train.multitask import MultiTaskHead, add_task_heads, model_tasks

    if [t["name"] for t in model_tasks(student)] == [t["name"] for t in entries]:
        return student
    path = structure_of(student).head[-1]
    head = student.get_submodule(path)
    if isinstance(head, MultiTaskHead):  # other tasks than the teacher's heads: start from one head's shape
        parent, _, attr = path.rpartition(".")
        setattr(student.get_submodule(parent) if parent else student, attr, head.heads[head.active])
    add_task_heads(student, entries)
    return student


def run_multitask_distill(cfg: DistillConfig, command: str = "distill", resume: bool = False) -> dict:
    """Distil the teacher(s) of every task into one multi-task student; returns the summary (summary.json)."""
    import statistics

    from ptmlab.core.seed import set_seed
    from ptmlab.data.encode import encode_split
    from ptmlab.data.loaders import TaskData
    from ptmlab.data.metrics import compute_metrics
    from ptmlab.data.multitask import MultiTaskSource, load_multitask_data
    from ptmlab.distill.cache import teacher_outputs
    from ptmlab.distill.matches import ModelInfo
    from ptmlab.distill.objective import DistillObjective
    from ptmlab.distill.pipeline import BUILT_FROM_TEACHER, agreement, build_matches
    from ptmlab.distill.students import build_student
    from ptmlab.distill.teacher import fingerprint
    from ptmlab.models.zoo import load_tokenizer
    from ptmlab.train.evaluate import logits_to_predictions, resolve_precision
    from ptmlab.train.lifecycle import fine_tune, finish_run, prepare_run
    from ptmlab.train.multitask import (
        MEAN,
        MULTITASK_SPEC,
        model_tasks,
        multitask_evaluator,
        set_task,
        split_metrics,
        task_entry,
        write_task_predictions,
    )

    _check_options(cfg)
    teachers = parse_teachers(cfg)
    names = list(teachers)
    session = prepare_run(cfg, command, resume=resume)
    datas = load_multitask_data(cfg, names)
    specs = {t: d.spec for t, d in datas.items()}
    models = _load_teachers(teachers, datas)
    t_tok = load_tokenizer(teachers[names[0]])
    for name in set(teachers.values()):
        if load_tokenizer(name).get_vocab() != t_tok.get_vocab():
            raise PtmlabError(f"teacher '{name}' has another vocabulary than '{teachers[names[0]]}': the teachers "
                              f"of one multi-task student must share a tokenizer")
    base = models[teachers[names[0]]]
    set_seed(cfg.seed)
    first = specs[names[0]]
    student = build_student(cfg.student, base, first.num_labels, first.kind == "regression",
                            task_entry(datas[names[0]])["labels"])
    student = _with_heads(student, [task_entry(datas[t]) for t in names])
    own_tokenizer = not cfg.student.startswith(BUILT_FROM_TEACHER)
    s_tok = load_tokenizer(cfg.student) if own_tokenizer else t_tok
    s_info, t_info = ModelInfo.of(student), ModelInfo.of(base)
    matches = build_matches(cfg, s_info, t_info)
    layered = [m.loss for m in matches if m.feature != "logits"]
    if layered:
        raise PtmlabError(f"loss '{layered[0]}' compares layers: multi-task distillation matches each task's "
                          f"soft targets (use --losses soft_ce)")

    run = session.open()
    pad_t, pad_s = t_tok.pad_token_id or 0, s_tok.pad_token_id or 0
    train_s = {t: encode_split(s_tok, d.splits["train"], cfg.max_length) for t, d in datas.items()}
    dev_s = {t: encode_split(s_tok, d.splits["dev"], cfg.max_length) for t, d in datas.items()}
    t_out, t_dev_preds, t_metrics, hits = {}, {}, {}, []
    for t, d in datas.items():
        teacher = models[teachers[t]]
        if model_tasks(teacher):
            set_task(teacher, t)
        fp = f"{fingerprint(teacher)}/{t}"  # one multi-task teacher gives each task its own head's outputs
        t_train = train_s[t] if not own_tokenizer else encode_split(t_tok, d.splits["train"], cfg.max_length)
        t_dev = dev_s[t] if not own_tokenizer else encode_split(t_tok, d.splits["dev"], cfg.max_length)
        t_out[t] = teacher_outputs(teacher, fp, t_train, pad_t, set(), None, cfg.teacher_batch_size,
                                   cfg.teacher_cache, f"teacher outputs ({t} train)")
        dev_out = teacher_outputs(teacher, fp, t_dev, pad_t, set(), None, cfg.teacher_batch_size, cfg.teacher_cache,
                                  f"teacher outputs ({t} dev)")
        t_dev_preds[t] = logits_to_predictions(dev_out.logits(len(t_dev)).numpy(), specs[t])
        t_metrics[t] = compute_metrics(specs[t].metrics, t_dev_preds[t], dev_s[t].labels)
        hits.append(t_out[t].hit)

    objectives = nn.ModuleDict({t: DistillObjective(student, matches, t_out[t], s_info, t_info,
                                                    temperature=cfg.temperature, alpha=cfg.alpha,
                                                    regression=specs[t].kind == "regression") for t in names})

    def loss_fn(model, batch):
        t = names[int(batch["task_id"][0])]
        set_task(model, t)
        return objectives[t](model, batch)

    score = multitask_evaluator(dev_s, specs, pad_s, cfg.eval_batch_size, resolve_precision(cfg.precision))

    def evaluator(model):
        metrics, preds = score(model)
        agree = {t: agreement(preds[t], t_dev_preds[t], specs[t].kind == "regression") for t in names}
        metrics.update({f"{t}/agreement_with_teacher": a for t, a in agree.items()})
        metrics["agreement_with_teacher"] = statistics.fmean(agree.values())
        return metrics, preds

    reg = {t: specs[t].kind == "regression" for t in names}
    enc = {"train": MultiTaskSource(train_s, pad_s, cfg.task_sampling, reg), "dev": MultiTaskSource(dev_s, pad_s)}
    fit = fine_tune(student, s_tok, TaskData(MULTITASK_SPEC, {}), cfg, run, enc=enc, loss_fn=loss_fn,
                    loss_module=objectives, resume=resume, evaluator=evaluator, main_metric=MEAN, test=False,
                    on_model=lambda _m: [o.detach() for o in objectives.values()])
    metrics = dict(fit.dev_metrics)
    agree = metrics.pop("agreement_with_teacher")
    fit.dev_metrics = metrics
    teacher_metrics = {f"{t}/{k}": v for t, m in t_metrics.items() for k, v in m.items()}
    teacher_metrics[MEAN] = statistics.fmean(t_metrics[t][specs[t].main_metric] for t in names)
    s_main, t_main = metrics[MEAN], teacher_metrics[MEAN]
    summary = {
        "task": "+".join(names), "tasks": names, "model": cfg.student, "strategy": "distill",
        "teacher": cfg.teacher, "teachers": teachers, "losses": cfg.losses, **fit.train_summary(),
        "task_metrics": split_metrics(metrics), "teacher_metrics": teacher_metrics,
        "agreement_with_teacher": round(float(agree), 4),
        "retained_pct": round(100 * s_main / t_main, 2) if t_main else None,
        "teacher_params": sum(sum(p.numel() for p in m.parameters()) for m in models.values()),
        "layers": s_info.layers, "teacher_layers": t_info.layers,
        "teacher_cache": "hit" if all(hits) else "computed" if not any(hits) else "partly cached",
        "task_sampling": cfg.task_sampling, "heads": model_tasks(fit.model), "main_metric": MEAN,
    }
    return finish_run(session, fit, s_tok, None, summary,
                      extra_save=lambda _path: write_task_predictions(run, datas, fit.dev_preds))
