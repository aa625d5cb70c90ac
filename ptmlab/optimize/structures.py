"""Structures made from the run, each once, in ``OUT/structures/NAME`` (kept, so a resumed search reuses them).

Students and pruned models are trained by the commands that make them (``distill.pipeline.run_distill``,
``compress.prune.run_prune`` with ``--distill-alpha``), which run the one training loop into normal run
directories. They read the search data in memory: the run's training rows and the search part of dev, never the
held-out part. A structure counts as built when its run directory holds its summary and weights.
"""

from __future__ import annotations

import copy
import dataclasses
import time
from pathlib import Path

import torch

from ptmlab.core.errors import PtmlabError
from ptmlab.optimize.outputs import TOKENS
from ptmlab.optimize.space import Structure


def training_source(data, train, dev, labels: list[str] | None):
    """The search data as a ``datasets.DatasetDict`` (train, validation) in the run's label order; for token
    classification and extractive QA, rows of tokens and tags or of questions, contexts and answers per split."""
    from ptmlab.data.tasks import SPAN_KINDS

    if data.spec.kind in SPAN_KINDS:
        from ptmlab.optimize.outputs import training_rows

        return {"train": training_rows(train, data.spec, labels), "dev": training_rows(dev, data.spec, labels)}
    from datasets import ClassLabel, Dataset, DatasetDict, Features, Value

    regression = data.spec.kind == "regression"
    feats = {"text": Value("string")}
    if train.text_pair is not None:
        feats["text_pair"] = Value("string")
    feats["label"] = Value("float32") if regression else ClassLabel(names=list(labels or []))

    def table(split):
        cols = {"text": list(split.text)}
        if split.text_pair is not None:
            cols["text_pair"] = list(split.text_pair)
        cols["label"] = [float(v) for v in split.label] if regression else [int(v) for v in split.label]
        return Dataset.from_dict(cols, features=Features(feats))

    return DatasetDict({"train": table(train), "validation": table(dev)})


class Structures:
    """Builds and caches the structures of one search."""

    def __init__(self, ctx):
        self.ctx = ctx
        self.root = Path(ctx.out) / "structures"
        self.loaded: dict[str, tuple] = {}

    def folder(self, s: Structure) -> Path:
        return self.root / s.slug

    def built(self, s: Structure) -> bool:
        if s.cheap:
            return True
        d = self.folder(s)
        return (d / "summary.json").is_file() and (d / "model.safetensors").is_file()

    def get(self, s: Structure) -> tuple:
        """(model, tokenizer, weights folder) of ``s``, built first when needed."""
        if s.name in self.loaded:
            return self.loaded[s.name]
        from ptmlab.models.zoo import load_model, load_tokenizer

        ctx = self.ctx
        if s.kind == "source":
            out = (ctx.source, ctx.tokenizer, Path(ctx.cfg.model))
        elif s.kind == "vocab":
            out = self._vocab()
        else:
            if not self.built(s):
                self._train(s)
            d = self.folder(s)
            out = (load_model(str(d)).eval(), load_tokenizer(str(d)), d)
        self.loaded[s.name] = out
        return out

    def _vocab(self) -> tuple:
        from ptmlab.compress.vocab import prune_vocabulary
        from ptmlab.models.loader import save_model
        from ptmlab.models.zoo import load_model, load_tokenizer

        ctx, d = self.ctx, self.folder(Structure("vocab", "vocab"))
        if not (d / "model.safetensors").is_file():
            model = copy.deepcopy(ctx.source)
            from ptmlab.optimize.outputs import texts_of

            texts, pairs = [], []
            for split in (ctx.train, ctx.dev):  # the held-out texts are never read
                t, p = texts_of(split, ctx.spec)
                texts += t
                pairs += p or []
            tok, info = prune_vocabulary(model, ctx.tokenizer, texts, pairs or None)
            save_model(model, tok, d)
            ctx.note(f"vocabulary {info['vocab_before']:,} -> {info['vocab_after']:,} tokens")
        return load_model(str(d)).eval(), load_tokenizer(str(d)), d

    def _train(self, s: Structure) -> None:
        """Distil a student, or prune and recover by distillation, into the structure's folder."""
        from ptmlab.core.config import build_config

        ctx = self.ctx
        cfg = ctx.cfg
        d = self.folder(s)
        common = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)
                  if f.name in ("epochs", "lr", "batch_size", "eval_batch_size", "weight_decay", "warmup", "schedule",
                                "max_grad_norm", "logging_steps", "seed", "device", "precision", "group_by_length",
                                "first_token_only", "fast_dropout", "reuse_host_memory", "grad_accum", "keep_best")}
        data = {"task": ctx.data.spec.name, "max_length": ctx.max_length, "output": str(d), "overwrite": True,
                "test": False}
        if ctx.kind == "sentence":
            data.update(text_col="text", label_col="label",
                        text_pair_col="text_pair" if ctx.train.text_pair is not None else None,
                        label_kind="regression" if ctx.data.spec.kind == "regression" else "classification")
        else:  # the rows of ``training_source``, read as the run read its data
            data.update(task_kind=ctx.data.spec.kind, **{k: ctx.run_config[k] for k in ("doc_stride",
                                                                                        "label_all_subtokens")
                                                          if ctx.run_config.get(k) is not None})
            if ctx.kind == TOKENS:
                data.update(text_col="tokens", label_col="tags")
        start = time.time()
        ctx.note(f"training {s.name}")
        with ctx.quiet_training():
            if s.kind == "prune":
                from ptmlab.compress.prune import PruneConfig, run_prune

                pcfg = build_config(PruneConfig, {**common, **data, "model": cfg.model, "heads": s.get("heads", 0.0),
                                                  "ffn": s.get("ffn", 0.0), "recover_epochs": cfg.epochs,
                                                  "distill_alpha": cfg.distill_alpha,
                                                  "distill_temperature": cfg.distill_temperature},
                                    source="optimize")
                run_prune(pcfg, source=ctx.source_data)
            else:
                from ptmlab.distill.config import DistillConfig
                from ptmlab.distill.pipeline import run_distill

                if s.kind == "static":  # a token table and a fresh head learn at a table's rate
                    from ptmlab.optimize.space import STATIC_LR

                    common["lr"] = max(cfg.lr, STATIC_LR)
                dcfg = build_config(DistillConfig, {**common, **data, "teacher": cfg.model,
                                                    "student": s.student_spec(), "losses": ["soft_ce"],
                                                    "alpha": cfg.distill_alpha,
                                                    "temperature": cfg.distill_temperature}, source="optimize")
                run_distill(dcfg, source=ctx.source_data)
        torch.set_num_threads(ctx.threads)  # training may have changed it: every timing uses the same count
        seconds = time.time() - start
        ctx.record_build(s, seconds, self.probe_params(s))
        if not self.built(s):
            raise PtmlabError(f"structure '{s.name}' did not save a model in {d}")

    def probe(self, s: Structure) -> tuple:
        """(model, tokenizer): an untrained model of ``s``'s shape (for its latency estimate): students and shrunk
        models as ``ptmlab distill`` builds them, pruned models with random unit scores at the same fractions; the
        pruned vocabulary is made (seconds) and is its own probe, with its own tokenizer."""
        ctx = self.ctx
        if s.kind == "source":
            return ctx.source, ctx.tokenizer
        if s.kind == "vocab":
            model, tok, _ = self.get(s)
            return model, tok
        if s.kind in ("layers", "shrink", "static"):
            from ptmlab.distill.students import build_student

            if ctx.kind != "sentence":  # as the span distillation builds it
                return build_student(s.student_spec(), ctx.source, ctx.data.spec.num_labels, False,
                                     ctx.labels).eval(), ctx.tokenizer
            return build_student(s.student_spec(), ctx.source, ctx.data.spec.num_labels,
                                 ctx.data.spec.kind == "regression", ctx.labels,
                                 tokenizer=ctx.tokenizer).eval(), ctx.tokenizer
        from ptmlab.compress.importance import Importance
        from ptmlab.compress.prune import prune_by_target
        from ptmlab.compress.surgery import ffn_per_layer, heads_per_layer

        model = copy.deepcopy(ctx.source)
        g = torch.Generator().manual_seed(0)
        imp = Importance([torch.rand(h, generator=g) for h in heads_per_layer(model)],
                         [torch.rand(f, generator=g) for f in ffn_per_layer(model)], "random")
        prune_by_target(model, imp, heads=s.get("heads", 0.0), ffn=s.get("ffn", 0.0))
        return model.eval(), ctx.tokenizer

    def probe_params(self, s: Structure) -> int:
        from ptmlab.models.latency import parameter_count

        return parameter_count(self.probe(s)[0])
