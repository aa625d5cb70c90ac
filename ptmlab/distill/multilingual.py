"""Multilingual sentence-embedding distillation (Reimers & Gurevych 2020, "Making monolingual sentence embeddings
multilingual using knowledge distillation").

A teacher sentence embedder M (with its own pooling) and a student S learn from parallel pairs (s_i, t_i):

    loss_i = MSE(S(s_i), M(s_i)) + MSE(S(t_i), M(s_i))

so a sentence and its translation land on the teacher's vector for the source sentence. The teacher's vectors come
from the teacher cache (computed once per teacher and data), the student trains through the one lifecycle
(``prepare_run`` / ``fine_tune``) with this per-example loss, and the result is saved in the sentence-transformers
layout inside a normal run directory (config.yaml, metrics.jsonl, summary.json, report.html).

Model selection: a seeded slice of the pairs (``--dev-pairs``) is held out; the kept step is the one with the lowest
dev MSE (``dev_neg_mse``, higher is better); dev retrieval accuracy in both directions is logged beside it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np

from ptmlab.core.config import at_least, opt
from ptmlab.core.errors import PtmlabError
from ptmlab.report.model_card import write_model_card
from ptmlab.train.args import STRATEGY_OPTIONS, TrainArgs


@dataclass(frozen=True)
class EmbedDistillArgs:
    teacher: str = opt("minilm", "teacher sentence-embedding model: zoo name, sentence-transformers or model "
                                 "directory (its pooling is read from its sentence-transformers config)")
    student: str = opt("", "student: empty for a copy of the teacher, or any encoder (zoo name, model directory, "
                           "e.g. the teacher with XLM-R's vocabulary from 'ptmlab tokenizer swap')")
    pairs: list[str] = opt([], "parallel files, flat: SRC1 TGT1 SRC2 TGT2 ... (CLI: --pairs SRC TGT, repeatable)",
                           cli=False)
    max_pairs: int | None = opt(None, "use the first N pairs of each --pairs set (0 or empty: all)")
    dev_pairs: int = opt(500, "pairs held out (seeded) for model selection (at most a tenth of the data)")
    max_length: int = opt(64, "truncate sentences to this many tokens")
    teacher_batch_size: int = opt(128, "batch size for computing teacher vectors")
    teacher_cache: bool = opt(True, "keep the teacher's vectors on disk (read back per batch) and reuse them across "
                                    "runs; --no-teacher-cache computes them on the fly")


@dataclass(frozen=True)
class EmbedDistillConfig(EmbedDistillArgs, TrainArgs):
    CLI_EXCLUDE = (*STRATEGY_OPTIONS, "test")  # the student trains fully; there is no test split

    epochs: float = opt(1.0, "training epochs (fractions allowed)")
    batch_size: int = opt(64, "pairs per optimizer step")
    lr: float = opt(5e-5, "peak learning rate")
    eval_steps: int = opt(0, "evaluate on the dev pairs every N steps (0: at the end of each epoch)")
    test: bool = opt(False, "unused: embedding distillation has no test split")

    def validate(self) -> None:
        self.validate_train()
        if self.strategy != "full":
            raise PtmlabError(f"--strategy {self.strategy} is not supported for embedding distillation: use full")
        if len(self.pairs) % 2:
            raise PtmlabError(f"pairs must list source and target files two by two; got {self.pairs}")
        if not 8 <= self.max_length <= 8192:
            raise PtmlabError(f"--max-length {self.max_length} is out of range: use 8..512")
        at_least(self, 1, "teacher_batch_size")
        at_least(self, 0, "dev_pairs", "max_pairs")


def split_pairs(src: list[str], tgt: list[str], dev_pairs: int, seed: int) -> tuple[list[int], list[int]]:
    """Seeded (train, dev) indices; dev is at most a tenth of the pairs."""
    idx = list(range(len(src)))
    random.Random(seed).shuffle(idx)
    n_dev = min(dev_pairs, len(idx) // 10)
    return sorted(idx[n_dev:]), sorted(idx[:n_dev])


def run_embedding_distill(cfg: EmbedDistillConfig, command: str = "distill-embeddings") -> dict:
    """Distil ``cfg.teacher`` into ``cfg.student`` on ``cfg.pairs``; returns the summary written to summary.json."""
    from ptmlab.core.seed import set_seed
    from ptmlab.data.batching import collate
    from ptmlab.data.encode import encode_split
    from ptmlab.data.loaders import Split, TaskData
    from ptmlab.data.tasks import TaskSpec
    from ptmlab.distill.cache import Shapes, check_fits, teacher_outputs
    from ptmlab.distill.embeddings import pooling_fingerprint
    from ptmlab.distill.losses import load_losses
    from ptmlab.distill.parallel import pair_files, read_pairs
    from ptmlab.distill.retrieval import retrieval_accuracy
    from ptmlab.models.loader import model_inputs
    from ptmlab.report.run_report import write_run_report
    from ptmlab.train.lifecycle import fine_tune, prepare_run
    from ptmlab.train.sentence import encode_texts, load_sentence_model, save_sentence_model

    session = prepare_run(cfg, command)
    sets = [read_pairs(s, t, cfg.max_pairs or None) for s, t in pair_files(cfg.pairs)]
    src = [x for p in sets for x in p.src]
    tgt = [x for p in sets for x in p.tgt]
    train_idx, dev_idx = split_pairs(src, tgt, cfg.dev_pairs, cfg.seed)
    if not dev_idx:
        raise PtmlabError(f"{len(src)} pairs are too few to hold out dev pairs: pass at least 10 pairs")
    teacher, t_tok = load_sentence_model(cfg.teacher)
    teacher.eval().to(device())
    for p in teacher.parameters():
        p.requires_grad_(False)
    set_seed(cfg.seed)
    student, s_tok = load_sentence_model(cfg.student or cfg.teacher)
    if cfg.student:  # an encoder of another width cannot regress onto the teacher's vectors
        if student.config.hidden_size != teacher.config.hidden_size:
            raise PtmlabError(f"student '{cfg.student}' has width {student.config.hidden_size} but the teacher "
                              f"{teacher.config.hidden_size}: use a student of the teacher's width")
        student.pooling, student.normalize = teacher.pooling, teacher.normalize  # the teacher's pipeline
    student.train()
    for p in student.parameters():
        p.requires_grad_(True)

    L = cfg.max_length
    tr_src, tr_tgt = [src[i] for i in train_idx], [tgt[i] for i in train_idx]
    dv_src, dv_tgt = [src[i] for i in dev_idx], [tgt[i] for i in dev_idx]
    spec = TaskSpec("parallel", "regression", metrics=("dev_neg_mse",), text_col="src", label_col="tgt",
                    description="parallel sentences for embedding distillation")
    data = TaskData(spec, {"train": Split(tr_src), "dev": Split(dv_src)})
    enc = {"train": encode_split(s_tok, data.splits["train"], L), "dev": encode_split(s_tok, data.splits["dev"], L)}
    tgt_enc = encode_split(s_tok, Split(tr_tgt), L)
    t_enc = encode_split(t_tok, Split(tr_src), L)

    check_fits([(t_enc, set())], Shapes(teacher), cfg.teacher_cache, "teacher vectors")
    run = session.open()
    t_out = teacher_outputs(teacher, pooling_fingerprint(teacher), t_enc, t_tok.pad_token_id or 0, set(), None,
                            cfg.teacher_batch_size, cfg.teacher_cache, "teacher vectors")
    t_dev = encode_texts(teacher, t_tok, dv_src, L, cfg.teacher_batch_size, normalize=False)
    mse = load_losses().get("sentence_mse").fn
    s_pad = s_tok.pad_token_id or 0

    def loss_fn(model, batch):
        idx = batch["index"].tolist()
        target = t_out.gather(("logits", -1), idx, 0).to(batch["input_ids"].device)
        s_src = model(**model_inputs(student, batch)).logits
        tb = {k: v.to(batch["input_ids"].device) for k, v in collate(tgt_enc, idx, s_pad).items()}
        s_tgt = model(**model_inputs(student, tb)).logits
        return mse(s_src, target) + mse(s_tgt, target)

    def dev_metrics(_preds) -> dict:
        a = encode_texts(student, s_tok, dv_src, L, cfg.eval_batch_size, normalize=False)
        b = encode_texts(student, s_tok, dv_tgt, L, cfg.eval_batch_size, normalize=False)
        err = float((((a - t_dev) ** 2).mean(1) + ((b - t_dev) ** 2).mean(1)).mean())
        fwd, back = retrieval_accuracy(_unit(a), _unit(b))
        return {"dev_neg_mse": -err, "dev_src_to_tgt": round(100 * fwd, 2), "dev_tgt_to_src": round(100 * back, 2)}

    fit = fine_tune(student, s_tok, data, cfg, run, enc=enc, loss_fn=loss_fn, extra_metrics=dev_metrics, test=False)
    summary = {
        "task": "embedding-distillation", "model": cfg.student or f"copy of {cfg.teacher}", "teacher": cfg.teacher,
        "strategy": "distill-embeddings", "pooling": fit.model.describe(),
        "pairs": [{"src": p.src_file, "tgt": p.tgt_file, "pairs": len(p)} for p in sets],
        **fit.train_summary(), "teacher_cache": "hit" if t_out.hit else "computed",
        "teacher_params": sum(p.numel() for p in teacher.parameters()), "main_metric": "dev_neg_mse",
        "loss": "MSE(S(src), T(src)) + MSE(S(tgt), T(src))",
    }
    acc = fit.trainer.accelerator
    if acc.is_main_process:
        save_sentence_model(fit.model, s_tok, run.path)
        run.write_summary(summary)
        write_model_card(run.path)
        write_run_report(run)
        fit.trainer.cleanup()
    acc.wait_for_everyone()
    return summary


def device():
    """Where the teacher runs: the GPU when there is one (the loop moves the student itself)."""
    import torch

    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.clip(np.linalg.norm(x, axis=1, keepdims=True), 1e-12, None)

