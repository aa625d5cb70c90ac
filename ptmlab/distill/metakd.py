"""Meta-KD (Pan et al., ACL 2021): a meta-teacher learnt across domains, then meta-distilled into a small student.

1. Prototype-based domain-expertise scores. h(x) is the base encoder's mean-pooled sentence vector; the prototype
   of domain k is the mean of h over k's training instances; an instance x of domain m gets
       t(x) = alpha * cos(h(x), p_m) + (1 - alpha) * mean_{k != m} cos(h(x), p_k)
   so instances that also look like the other domains (transferable ones) weigh more.
2. Meta-teacher learning, on all domains pooled, per instance:
       t(x) * [ CE(y | x) + gamma1 * CE(domain classifier(TK(x)), random domain) ]
   TK(x) = tanh(W (E_domain[m] + mean of the last layer's token states without [CLS])) is the transferable-knowledge
   representation; training the domain classifier on corrupted (random) domain labels makes it domain-invariant.
3. Meta-distillation into the student, per instance, with the domain-expertise weight
       lambda(x) = (1 + t(x)) * p_teacher(y | x)
   on the five losses: lambda(x) * [ L_embd + L_hidn + L_attn + L_pred + gamma2 * MSE(TK_student(x), TK_teacher(x)) ]
   where the first four are the package's ``embedding_mse``, ``hidden_mse``, ``attention_mse`` (uniform layer map)
   and ``soft_ce`` (alpha 1: soft targets only), read from the teacher cache.

Where the paper leaves a choice open, this module takes (and the docs say so): h(x) is mean pooling of the base
(not yet fine-tuned) encoder; alpha = 0.5; the corrupted domain label is drawn uniformly at random per instance;
gamma1 = gamma2 = 0.5 (the released code's default domain-loss weight); the student's TK head starts as a copy of
the teacher's (with a learned projection when the widths differ) and both apply tanh; all five losses train in one
stage; the prediction loss uses temperature 1. Everything trains through the one lifecycle's ``fine_tune``.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ptmlab.core.config import at_least, opt
from ptmlab.core.errors import PtmlabError
from ptmlab.distill.domains import check_folds
from ptmlab.train.args import STRATEGY_OPTIONS, TrainArgs


@dataclass(frozen=True)
class MetaKDArgs:
    domains: list[str] = opt([], "domain names under --domain-dir (books,dvd,electronics,imdb,airline)")
    domain_files: list[str] = opt([], "extra domains as NAME=FILE (CLI: --domain NAME=FILE, repeatable)", cli=False)
    domain_dir: str | None = opt(None, "folder of NAME.tsv domain files (default ../shared/data/domains)")
    text_col: str = opt("text", "text column of the domain files")
    label_col: str = opt("label", "label column of the domain files")
    max_per_domain: int | None = opt(None, "cap each domain's training split at N examples")
    folds: int = opt(0, "cross-validation: cut each domain's rows into K folds and test on --fold, dev taken from "
                        "the other rows (0: the fixed 80/10/10 split)")
    fold: int = opt(0, "with --folds K: the fold tested, 0..K-1")
    max_length: int = opt(128, "truncate inputs to this many tokens")
    teacher_model: str = opt("minilm", "base encoder the meta-teacher is trained from (zoo name or model directory)",
                             deprecated=("--teacher",))
    meta_teacher: str | None = opt(None, "reuse a meta-teacher saved by an earlier meta-distill (RUN/meta_teacher) "
                                         "instead of training one")
    student: str = opt("layers:3", "student: layers:K, layers:0,2,4 or shrink:... (heads equal to the teacher's)")
    student_domain: str | None = opt(None, "distil on this domain's data only (the paper's per-domain students); "
                                           "default: all domains")
    layer_map: str = opt("uniform", "student->teacher layers: uniform, skip, last or explicit")
    teacher_epochs: float = opt(2.0, "meta-teacher training epochs")
    teacher_lr: float = opt(5e-5, "meta-teacher learning rate")
    alpha: float = opt(0.5, "prototype score: weight of the own-domain prototype (1 - alpha: the others)")
    gamma1: float = opt(0.5, "meta-teacher: weight of the corrupted-domain (transferable knowledge) loss")
    gamma2: float = opt(0.5, "meta-distillation: weight of the transferable-knowledge MSE")
    temperature: float = opt(1.0, "soft-target temperature of the prediction loss")
    teacher_batch_size: int = opt(64, "batch size for computing teacher outputs")
    teacher_cache: bool = opt(True, "keep teacher outputs on disk (written and read batch by batch) and reuse them; "
                                    "--no-teacher-cache runs the meta-teacher on the fly for every batch")


@dataclass(frozen=True)
class MetaDistillConfig(MetaKDArgs, TrainArgs):
    CLI_EXCLUDE = STRATEGY_OPTIONS  # the student always trains fully

    epochs: float = opt(3.0, "student epochs")
    lr: float = opt(1e-4, "student learning rate")

    def validate(self) -> None:
        self.validate_train()
        if self.strategy != "full":
            raise PtmlabError(f"--strategy {self.strategy} is not supported for meta-distillation: use full")
        if not 0 <= self.alpha <= 1:
            raise PtmlabError(f"--alpha must be in [0, 1], got {self.alpha}")
        at_least(self, 0, "gamma1", "gamma2", "teacher_epochs")
        if self.temperature <= 0 or self.teacher_lr <= 0:
            raise PtmlabError("--temperature and --teacher-lr must be positive")
        if not 8 <= self.max_length <= 8192:
            raise PtmlabError(f"--max-length {self.max_length} is out of range: use 8..512")
        at_least(self, 1, "max_per_domain", "teacher_batch_size")
        check_folds(self.folds)
        if self.fold and not self.folds:
            raise PtmlabError(f"--fold {self.fold} applies with --folds K (K >= 2): pass --folds or drop --fold")
        if self.folds and not 0 <= self.fold < self.folds:
            raise PtmlabError(f"--fold {self.fold} is not one of the {self.folds} folds (0..{self.folds - 1})")


# ------------------------------------------------------------------------------------------- prototype scores
def prototype_scores(vectors: np.ndarray, domain_ids: list[int], n_domains: int, alpha: float) -> np.ndarray:
    """t(x) for every instance (see the module docstring); ``vectors`` need not be normalised."""
    v = vectors / np.clip(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12, None)
    d = np.asarray(domain_ids)
    protos = np.stack([vectors[d == k].mean(0) if (d == k).any() else np.zeros(vectors.shape[1])
                       for k in range(n_domains)])
    protos = protos / np.clip(np.linalg.norm(protos, axis=1, keepdims=True), 1e-12, None)
    cos = v @ protos.T  # [N, K]
    own = cos[np.arange(len(d)), d]
    present = [k for k in range(n_domains) if (d == k).any()]
    if len(present) < 2:
        return own.astype(np.float32)
    others = (cos[:, present].sum(1) - own) / (len(present) - 1)
    return (alpha * own + (1 - alpha) * others).astype(np.float32)


# ------------------------------------------------------------------------------ transferable-knowledge head
class DomainHead(nn.Module):
    """TK(x) = tanh(W (E[domain] + mean token state without [CLS])) and the domain classifier on top of it."""

    def __init__(self, hidden: int, n_domains: int, out_width: int | None = None):
        super().__init__()
        self.domain_embedding = nn.Embedding(n_domains, hidden)
        self.dense = nn.Linear(hidden, hidden)
        self.domain_classifier = nn.Linear(hidden, n_domains)
        self.fit = nn.Linear(hidden, out_width) if out_width and out_width != hidden else None

    def tk(self, states: torch.Tensor, mask: torch.Tensor, domains: torch.Tensor) -> torch.Tensor:
        m = mask.clone().float()
        m[:, 0] = 0  # [CLS] left out, as in the paper's content representation
        content = (states.float() * m.unsqueeze(-1)).sum(1) / m.sum(1, keepdim=True).clamp_min(1)
        rep = torch.tanh(self.dense(self.domain_embedding(domains) + content))
        return self.fit(rep) if self.fit is not None else rep


def meta_teacher_loss(head: DomainHead, tap, scores: torch.Tensor, domains: torch.Tensor, gamma1: float,
                      last_layer: int, n_domains: int):
    """The meta-teacher's per-instance loss (loop contract: loss_fn(model, batch) -> Tensor[n])."""
    from ptmlab.models.loader import model_inputs

    def loss(model, batch):
        out = tap.run(model, model_inputs(tap.model, batch))
        idx = batch["index"]
        dev = batch["input_ids"].device
        ce = F.cross_entropy(out.logits.float(), batch["labels"], reduction="none")
        d = domains[idx.cpu()].to(dev)
        rep = head.tk(tap.feature("hidden", last_layer, batch["attention_mask"]), batch["attention_mask"], d)
        corrupted = torch.randint(0, n_domains, (len(idx),), device=dev)
        dom = F.cross_entropy(head.domain_classifier(rep), corrupted, reduction="none")
        return scores[idx.cpu()].to(dev) * (ce + gamma1 * dom)

    return loss


class MetaDistillObjective(nn.Module):
    """The five weighted losses: the package's DistillObjective (embeddings, hidden, attention, soft targets) plus
    the TK MSE against the frozen meta-teacher's head, all times lambda(x). ``loss_module`` of the loop."""

    def __init__(self, base, teacher_head: DomainHead, student_head: DomainHead, weights: torch.Tensor,
                 domains: torch.Tensor, t_out, s_last: int, t_last: int, gamma2: float):
        super().__init__()
        self.base, self.student_head = base, student_head
        self.teacher_head = [teacher_head]  # frozen, kept out of this module's parameters
        self.weights, self.domains, self.t_out = weights, domains, t_out
        self.s_last, self.t_last, self.gamma2 = s_last, t_last, gamma2
        self.last_parts: dict[str, float] = {}

    def forward(self, model, batch):
        per = self.base(model, batch)
        mask = batch["attention_mask"]
        idx = batch["index"]
        dev = mask.device
        d = self.domains[idx.cpu()].to(dev)
        s_rep = self.student_head.tk(self.base.tap.feature("hidden", self.s_last, mask), mask, d)
        with torch.no_grad():
            t_states = self.t_out.gather(("hidden", self.t_last), idx.tolist(), mask.shape[1]).to(dev)
            t_rep = self.teacher_head[0].tk(t_states, mask, d)
        tk = ((s_rep.float() - t_rep.float()) ** 2).mean(-1)
        self.last_parts = {**self.base.last_parts, "transferable_knowledge": float(tk.detach().mean())}
        return self.weights[idx.cpu()].to(dev) * (per + self.gamma2 * tk)

    def detach(self) -> None:
        self.base.detach()


# -------------------------------------------------------------------------------------------- the pipeline
def distill_matches(layer_map_spec: str, s_info, t_info) -> list:
    """The four package losses of meta-distillation over the layer map (the last layers must be paired)."""
    from ptmlab.distill.maps import layer_map
    from ptmlab.distill.matches import Match, check_matches

    pairs = layer_map(layer_map_spec, s_info.layers, t_info.layers)
    if pairs[-1] != (s_info.layers - 1, t_info.layers - 1):
        raise PtmlabError(f"layer map '{layer_map_spec}' does not map the student's last layer to the teacher's: "
                          f"the transferable-knowledge loss compares last layers (use uniform or last)")
    matches = ([Match("embedding_mse", "embeddings")]
               + [Match("hidden_mse", "hidden", s, t) for s, t in pairs]
               + [Match("attention_mse", "attention", s, t) for s, t in pairs]
               + [Match("soft_ce", "logits")])
    check_matches(matches, s_info, t_info)
    return matches


def save_meta_teacher(path: Path, model, tokenizer, head: DomainHead, names: list[str]) -> None:
    from ptmlab.core.io import atomic_save_file, atomic_write_json
    from ptmlab.models.loader import save_model

    save_model(model, tokenizer, path)
    atomic_save_file({k: v.detach().cpu().contiguous() for k, v in head.state_dict().items()},
                     path / "domain_head.safetensors")
    atomic_write_json(path / "domains.json", {"domains": names, "hidden": int(head.dense.in_features)})


def load_meta_teacher(path: str, names: list[str]):
    from safetensors.torch import load_file

    from ptmlab.models.zoo import load_model, load_tokenizer

    p = Path(path)
    info_file = p / "domains.json"
    if not info_file.is_file() or not (p / "domain_head.safetensors").is_file():
        raise PtmlabError(f"'{path}' is not a saved meta-teacher (no domains.json / domain_head.safetensors): "
                          f"pass RUN/meta_teacher of an earlier meta-distill")
    info = json.loads(info_file.read_text(encoding="utf-8"))
    if info["domains"] != names:
        raise PtmlabError(f"meta-teacher '{path}' was trained on domains {info['domains']}, not {names}: pass the "
                          f"same --domains in the same order")
    head = DomainHead(info["hidden"], len(names))
    head.load_state_dict(load_file(p / "domain_head.safetensors"))
    return load_model(path), load_tokenizer(path), head


def run_meta_distill(cfg: MetaDistillConfig, command: str = "meta-distill", resume: bool = False) -> dict:
    """Meta-teacher learning (or a saved meta-teacher) then meta-distillation; a normal run directory.

    ``resume``: continue a killed run. A meta-teacher it saved (RUN/meta_teacher) is reused rather than trained
    again; the student continues from its checkpoint, or starts again when it had none yet."""
    from ptmlab.core.rundir import RunDir
    from ptmlab.core.seed import set_seed
    from ptmlab.data.encode import encode_split
    from ptmlab.distill.cache import Shapes, check_fits, teacher_outputs
    from ptmlab.distill.domains import load_domains, resolve_domains
    from ptmlab.distill.features import FeatureTap
    from ptmlab.distill.matches import ModelInfo
    from ptmlab.distill.multilingual import device
    from ptmlab.distill.objective import DistillObjective
    from ptmlab.distill.pipeline import restart_unless_checkpointed
    from ptmlab.distill.report import write_distill_report
    from ptmlab.distill.students import build_student
    from ptmlab.distill.teacher import fingerprint
    from ptmlab.models.zoo import load_model, load_tokenizer
    from ptmlab.train.evaluate import evaluate, predict_logits
    from ptmlab.train.lifecycle import encode_task, fine_tune, finish_run, mark_stage, prepare_run
    from ptmlab.train.sentence import SentenceEncoder, encode_texts

    if not cfg.student.startswith(("layers:", "shrink:")):
        raise PtmlabError(f"student '{cfg.student}' is not built from the meta-teacher: use layers:K or shrink:...")
    saved_teacher = Path(cfg.output) / "meta_teacher"
    reused = resume and not cfg.meta_teacher and (saved_teacher / "domain_head.safetensors").is_file()
    if reused:
        cfg = dataclasses.replace(cfg, meta_teacher=str(saved_teacher))
    cfg, resume = restart_unless_checkpointed(cfg, resume)
    session = prepare_run(cfg, command, resume=resume)
    dd = load_domains(resolve_domains(cfg.domains, cfg.domain_files, cfg.domain_dir), cfg.text_col, cfg.label_col,
                      cfg.max_per_domain, fold=cfg.fold if cfg.folds else None, folds=cfg.folds)
    names, K = dd.names, len(dd.names)
    if cfg.student_domain and cfg.student_domain not in names:
        raise PtmlabError(f"--student-domain '{cfg.student_domain}' is not among --domains ({', '.join(names)})")
    pooled, dom_ids = dd.pooled(task="domains")
    if cfg.meta_teacher:
        teacher, tok, t_head = load_meta_teacher(cfg.meta_teacher, names)
    else:
        teacher = load_model(cfg.teacher_model, num_labels=len(dd.labels), label_names=dd.labels)
        tok = load_tokenizer(cfg.teacher_model)
        t_head = DomainHead(teacher.config.hidden_size, K)
    t_info = ModelInfo.of(teacher)
    enc = encode_task(tok, pooled, cfg.max_length)
    domains = {s: torch.tensor(v) for s, v in dom_ids.items()}
    keep = names if not cfg.student_domain else [cfg.student_domain]
    data, d_ids = dd.pooled(keep, task="domains" if not cfg.student_domain else cfg.student_domain)
    s_enc = encode_task(tok, data, cfg.max_length)
    with torch.random.fork_rng():  # the student's shape, so the cache size is known before any work
        s_info = ModelInfo.of(build_student(cfg.student, teacher, len(dd.labels), False, dd.labels))
    matches = distill_matches(cfg.layer_map, s_info, t_info)
    needs = {m.key for m in matches if m.feature != "logits"}
    check_fits([(s_enc["train"], needs)], Shapes(teacher), cfg.teacher_cache, "meta-teacher outputs")
    run = session.open()

    # 1. prototype scores from the base encoder's mean-pooled vectors
    mark_stage(run, "prototype scores", examples=len(enc["train"]))
    base = SentenceEncoder(load_model(cfg.teacher_model, task_head=False), "mean").to(device())
    vecs = encode_texts(base, tok, pooled.splits["train"].text, cfg.max_length, cfg.teacher_batch_size, False)
    scores = torch.from_numpy(prototype_scores(vecs, dom_ids["train"], K, cfg.alpha))
    del base

    # 2. meta-teacher learning (all domains pooled)
    stage_log = [{"stage": "meta_teacher", "ran_before_resume": True}] if reused else []
    if not cfg.meta_teacher:
        mark_stage(run, "meta_teacher", examples=len(enc["train"]))
        t_cfg = dataclasses.replace(cfg, epochs=cfg.teacher_epochs, lr=cfg.teacher_lr, max_steps=0, test=False,
                                    save_steps=10**9, keep_best=False)  # the head stays in step with the model
        tap = FeatureTap(teacher, {("hidden", t_info.layers - 1)}, who="teacher")
        t_run = RunDir(run.path / "stages" / "meta_teacher")
        if session.main:
            t_run.path.mkdir(parents=True, exist_ok=True)
        fit_t = fine_tune(teacher, tok, pooled, t_cfg, t_run, enc=enc, loss_module=t_head,
                          loss_fn=meta_teacher_loss(t_head, tap, scores, domains["train"], cfg.gamma1,
                                                    t_info.layers - 1, K),
                          on_model=lambda _m: tap.remove(), test=False)
        fit_t.trainer.cleanup()
        teacher = fit_t.model
        stage_log.append({"stage": "meta_teacher", "steps": fit_t.state.step, "dev": fit_t.dev_metrics})
        if session.main:
            save_meta_teacher(run.path / "meta_teacher", teacher, tok, t_head, names)
    teacher.eval().to(device())
    t_head.to(device())
    for p in list(teacher.parameters()) + list(t_head.parameters()):
        p.requires_grad_(False)

    # 3. meta-distillation (all domains, or one)
    sel = [i for i, k in enumerate(dom_ids["train"]) if names[k] in keep]
    s_scores = scores[sel]
    set_seed(cfg.seed)
    student = build_student(cfg.student, teacher, len(dd.labels), False, dd.labels)
    s_info = ModelInfo.of(student)
    mark_stage(run, "teacher outputs", examples=len(s_enc["train"]), cache=cfg.teacher_cache)
    t_out = teacher_outputs(teacher, fingerprint(teacher), s_enc["train"], tok.pad_token_id or 0, needs, None,
                            cfg.teacher_batch_size, cfg.teacher_cache, "meta-teacher outputs")
    t_logits = t_out.logits(len(s_enc["train"]))
    p_true = F.softmax(t_logits, -1)[torch.arange(len(t_logits)), torch.tensor(s_enc["train"].labels)]
    weights = (1 + s_scores) * p_true
    s_head = DomainHead(s_info.hidden, K, t_info.hidden)
    if s_info.hidden == t_info.hidden:
        s_head.load_state_dict(t_head.state_dict(), strict=False)
    base_obj = DistillObjective(student, matches, t_out, s_info, t_info, temperature=cfg.temperature, alpha=1.0)
    objective = MetaDistillObjective(base_obj, t_head, s_head, weights, torch.tensor(d_ids["train"]), t_out,
                                     s_info.layers - 1, t_info.layers - 1, cfg.gamma2)
    mark_stage(run, "meta-distillation", examples=len(s_enc["train"]))
    fit = fine_tune(student, tok, data, cfg, run, enc=s_enc, loss_fn=objective, loss_module=objective,
                    resume=resume, on_model=lambda _m: objective.detach())
    per_domain = {}
    for name in names:
        d_data, _ = dd.pooled([name], task=name)
        e = encode_split(tok, d_data.splits["test"], cfg.max_length)
        per_domain[name] = {"student": evaluate(fit.model, e, data.spec, tok.pad_token_id or 0,
                                                cfg.eval_batch_size)[0]["accuracy"],
                            "teacher": evaluate(teacher, e, data.spec, tok.pad_token_id or 0,
                                                cfg.eval_batch_size)[0]["accuracy"],
                            "seen": name in keep, "examples": len(e)}
    t_dev = predict_logits(teacher, s_enc["dev"], tok.pad_token_id or 0, cfg.eval_batch_size).argmax(-1)
    teacher_dev = float((t_dev == np.asarray(s_enc["dev"].labels)).mean())
    summary = {
        "task": data.spec.name, "model": cfg.student, "strategy": "meta-distill", "teacher": cfg.meta_teacher or
        f"meta-teacher from {cfg.teacher_model}", "domains": names, "student_domains": keep, "labels": dd.labels,
        **fit.train_summary(), "teacher_metrics": {"accuracy": teacher_dev},
        "retained_pct": round(100 * fit.dev_metrics["accuracy"] / teacher_dev, 2) if teacher_dev else None,
        "agreement_with_teacher": float((np.asarray(fit.dev_preds) == t_dev).mean()),
        "teacher_params": sum(p.numel() for p in teacher.parameters()), "layers": s_info.layers,
        "teacher_layers": t_info.layers, "losses": ["embedding_mse", "hidden_mse", "attention_mse", "soft_ce",
                                                    "transferable_knowledge"],
        "layer_map": cfg.layer_map, "final_losses": objective.last_parts, "teacher_cache":
        "hit" if t_out.hit else "computed", "per_domain_test_accuracy": per_domain, "stages": stage_log,
        "prototype_scores": {n: round(float(scores[[i for i, k in enumerate(dom_ids["train"]) if k == j]].mean()), 4)
                             for j, n in enumerate(names)},
        "main_metric": "accuracy", "choices": {"alpha": cfg.alpha, "gamma1": cfg.gamma1, "gamma2": cfg.gamma2,
                                               "temperature": cfg.temperature},
    }
    return finish_run(session, fit, tok, data, summary, report=write_distill_report)
