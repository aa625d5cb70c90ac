"""The embedding task kind: an encoder trained so that matching texts get close vectors (``--task-kind embedding``).

It plugs into the one lifecycle (``prepare_run`` -> ``fine_tune`` -> ``finish_run``) with three parts:

- the model: ``SentenceEncoder`` (``train/sentence.py``): the encoder, mean or cls pooling, L2 normalisation;
  saved in the sentence-transformers layout, so a run directory loads in ``SentenceTransformer(RUN)``;
- the loss (``embedding_loss``), one value per anchor as the loop expects:
  pairs and triplets: in-batch negatives (MultipleNegativesRanking): cross-entropy over
  ``scale * cos(anchor_i, candidate_j)``, the candidates being every positive of the batch (and every hard
  negative, for triplets), the right one being anchor i's positive; scored pairs: ``(cos(s1, s2) - target)^2``
  (CosineSimilarityLoss);
  with ``--mini-batch-size M`` the gradient cache (GradCache; sentence-transformers' Cached MNRL): the batch is
  embedded M texts at a time without keeping graphs, the loss and its gradient with respect to the vectors are
  computed on the whole batch, and when the loop backpropagates, each mini-batch is embedded again (same dropout
  masks: the random state is replayed) and its vectors' cached gradient backpropagated through it. Same loss and
  gradients as the full batch, with the activation memory of one mini-batch;
- the evaluator (``embedding_evaluator``): Spearman (and Pearson) of cosine vs gold on scored dev pairs, else
  retrieval: recall@1/5/10 and MRR of each anchor (query) against the corpus of every positive (and negative, and
  ``--corpus-file`` document).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ptmlab.core.errors import PtmlabError

COLUMNS = (("a", "anchor"), ("p", "positive"), ("n", "negative"))


class EmbeddingBatches:
    """Training data for the loop: token ids of each side, batched by ``make_batch(indices, epoch)``."""

    def __init__(self, split, tokenizer, max_length: int):
        self.layout = split.layout
        self.pad_id = tokenizer.pad_token_id or 0
        self.ids = {}
        for key, name in COLUMNS:
            texts = getattr(split, name)
            if texts is not None:
                self.ids[key] = tokenizer(list(texts), truncation=True, max_length=max_length)["input_ids"]
        self.score = split.score
        self.lengths = [sum(len(ids[i]) for ids in self.ids.values()) for i in range(len(split))]

    def __len__(self) -> int:
        return len(self.lengths)

    def make_batch(self, indices: list[int], epoch: int = 0) -> dict:
        out = {}
        for key, ids in self.ids.items():
            rows = [ids[i] for i in indices]
            width = max(len(r) for r in rows)
            out[f"{key}_input_ids"] = torch.tensor([r + [self.pad_id] * (width - len(r)) for r in rows])
            out[f"{key}_attention_mask"] = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows])
        if self.score is not None:
            out["score"] = torch.tensor([self.score[i] for i in indices], dtype=torch.float32)
        out["index"] = torch.tensor(indices)
        return out


def _embed(model, batch: dict, key: str, lo: int = 0, hi: int | None = None) -> torch.Tensor:
    ids, mask = batch[f"{key}_input_ids"][lo:hi], batch[f"{key}_attention_mask"][lo:hi]
    width = int(mask.sum(1).max())  # a mini-batch is padded to its own longest text only
    return model(input_ids=ids[:, :width], attention_mask=mask[:, :width]).logits


def loss_from_vectors(vecs: dict[str, torch.Tensor], score: torch.Tensor | None, scale: float) -> torch.Tensor:
    """Per-anchor losses from the sentence vectors of each side (``a``, ``p``, optional ``n``)."""
    a = F.normalize(vecs["a"].float(), dim=-1)
    p = F.normalize(vecs["p"].float(), dim=-1)
    if score is not None:  # scored pairs: MSE between the cosine and the target
        return ((a * p).sum(-1) - score.float()) ** 2
    cand = torch.cat([p, F.normalize(vecs["n"].float(), dim=-1)]) if "n" in vecs else p
    sim = scale * a @ cand.T
    return F.cross_entropy(sim, torch.arange(len(a), device=sim.device), reduction="none")


def embedding_loss(scale: float = 20.0, mini_batch_size: int = 0):
    """The loop's ``loss_fn(model, batch) -> per-anchor losses``; with ``mini_batch_size`` the gradient cache."""

    def loss(model, batch):
        keys = [k for k, _ in COLUMNS if f"{k}_input_ids" in batch]
        score = batch.get("score")
        if mini_batch_size and torch.is_grad_enabled():
            return _cached_loss(model, batch, keys, score, scale, mini_batch_size)
        return loss_from_vectors({k: _embed(model, batch, k) for k in keys}, score, scale)

    return loss


def _rng_state(device: torch.device) -> tuple:
    cuda = torch.cuda.get_rng_state(device) if device.type == "cuda" else None
    return torch.get_rng_state(), cuda


def _set_rng_state(state: tuple, device: torch.device) -> None:
    torch.set_rng_state(state[0])
    if state[1] is not None:
        torch.cuda.set_rng_state(state[1], device)


def _cached_loss(model, batch: dict, keys: list[str], score, scale: float, m: int) -> torch.Tensor:
    """The gradient cache: vectors without graphs, the loss on all of them, the backward pass by mini-batch (in a
    hook on the returned losses, so the loop's own ``backward`` drives it)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        raise PtmlabError("--mini-batch-size (the gradient cache) runs on one process: drop it or train on one device")
    device = batch[f"{keys[0]}_input_ids"].device
    autocast = (torch.is_autocast_enabled(device.type), torch.get_autocast_dtype(device.type))
    state = _rng_state(device)  # replayed in the backward pass: the same dropout masks
    n = {k: len(batch[f"{k}_input_ids"]) for k in keys}
    with torch.no_grad():
        vecs = {k: torch.cat([_embed(model, batch, k, s, s + m) for s in range(0, n[k], m)]) for k in keys}
    leaves = {k: v.detach().float().requires_grad_() for k, v in vecs.items()}
    with torch.enable_grad():
        per_ex = loss_from_vectors(leaves, score, scale)
    out = per_ex.detach().requires_grad_()

    def backward(grad: torch.Tensor):
        cached = torch.autograd.grad(per_ex, [leaves[k] for k in keys], grad_outputs=grad)
        after = _rng_state(device)
        _set_rng_state(state, device)
        for k, g in zip(keys, cached, strict=True):
            for s in range(0, n[k], m):
                with torch.enable_grad(), torch.autocast(device.type, dtype=autocast[1], enabled=autocast[0]):
                    v = _embed(model, batch, k, s, s + m)
                torch.autograd.backward(v, g[s:s + m].to(v.dtype))
        _set_rng_state(after, device)
        return None

    out.register_hook(backward)
    return out


def build_embedding_model(cfg):
    """``cfg.model``'s encoder with ``cfg.pooling`` and normalised vectors."""
    from ptmlab.models.zoo import load_model, with_revision
    from ptmlab.train.sentence import SentenceEncoder

    encoder = load_model(with_revision(cfg.model, getattr(cfg, "revision", None)), task_head=False,
                         dropout=getattr(cfg, "dropout", None), random_init=getattr(cfg, "random_init", False))
    return SentenceEncoder(encoder, cfg.pooling, normalize=True, max_seq_length=cfg.max_length)


def embedding_metrics(model, tokenizer, split, max_length: int = 128, batch_size: int = 128) -> tuple[dict, list]:
    """(metrics, per-example predictions) of a sentence model on an ``EmbeddingSplit``: Spearman / Pearson of
    cosines on scored pairs (predictions: the cosines), else recall@1/5/10 and MRR (predictions: each query's rank
    of its relevant document)."""
    import numpy as np

    from ptmlab.data.metrics import cosine_correlations, ranking_metrics
    from ptmlab.train.sentence import encode_texts

    was_training = model.training
    try:
        a = encode_texts(model, tokenizer, split.anchor, max_length, batch_size)
        if split.scored:
            b = encode_texts(model, tokenizer, split.positive, max_length, batch_size)
            return cosine_correlations(a, b, split.score), [float(x) for x in (a * b).sum(1)]
        docs = list(dict.fromkeys([*split.positive, *(split.negative or []), *split.corpus]))
        where = {d: i for i, d in enumerate(docs)}
        d = encode_texts(model, tokenizer, docs, max_length, batch_size)
        relevant = [where[p] for p in split.positive]
        metrics = ranking_metrics(a, d, relevant)
        sim = a @ d.T
        ranks = ((sim > sim[np.arange(len(a)), relevant][:, None]).sum(1) + 1).tolist()
        return metrics, ranks
    finally:
        model.train(was_training)


def embedding_evaluator(tokenizer, split, max_length: int, batch_size: int):
    return lambda model: embedding_metrics(model, tokenizer, split, max_length, batch_size)


def run_embedding_finetune(cfg, resume: bool = False, command: str = "finetune", source=None) -> dict:
    """Fine-tune a sentence embedder (``--task-kind embedding``); returns the summary written to summary.json."""
    import dataclasses

    from ptmlab.core.seed import set_seed
    from ptmlab.data.taskdata import load_task_data
    from ptmlab.models.zoo import load_tokenizer, with_revision
    from ptmlab.train.lifecycle import fine_tune, finish_run, prepare_run

    if cfg.strategy != "full":
        raise PtmlabError(f"--strategy {cfg.strategy} is not supported for --task-kind embedding: use full")
    if cfg.long_strategy != "truncate":
        raise PtmlabError(f"--long-strategy {cfg.long_strategy} is not supported for --task-kind embedding: texts are "
                          f"truncated to --max-length")
    session = prepare_run(cfg, command, resume=resume)
    data = load_task_data(cfg, source=source)  # every input check before anything is written
    train = data.splits["train"]
    tokenizer = load_tokenizer(with_revision(cfg.model, getattr(cfg, "revision", None)))
    set_seed(cfg.seed)
    model = build_embedding_model(cfg)
    batches = EmbeddingBatches(train, tokenizer, cfg.max_length)
    run = session.open()
    # in-batch negatives want batches drawn at random, not texts of one length together
    loop_cfg = dataclasses.replace(cfg, group_by_length=False)
    evaluator = embedding_evaluator(tokenizer, data.splits["dev"], cfg.max_length, cfg.eval_batch_size)
    fit = fine_tune(model, tokenizer, data, loop_cfg, run, enc={"train": batches, "dev": data.splits["dev"]},
                    loss_fn=embedding_loss(cfg.similarity_scale, cfg.mini_batch_size), evaluator=evaluator,
                    main_metric=data.spec.main_metric, resume=resume, test=False)
    if cfg.test and "test" in data.splits:
        fit.test_metrics, _ = embedding_metrics(fit.model, tokenizer, data.splits["test"], cfg.max_length,
                                                cfg.eval_batch_size)
    fit.dev_preds = fit.test_preds = None  # vectors are not labels: no predictions file
    loss = "cosine MSE (CosineSimilarityLoss)" if train.scored else \
        f"in-batch negatives (MultipleNegativesRanking, scale {cfg.similarity_scale:g})" + \
        (" + hard negatives" if train.negative is not None else "")
    summary = {"task": data.spec.name, "model": cfg.model, "strategy": cfg.strategy, **fit.train_summary(),
               "labels": None, "main_metric": data.spec.main_metric,
               "embedding": {"layout": train.layout, "loss": loss, "pooling": cfg.pooling, "normalize": True,
                             "dimension": int(model.config.hidden_size),
                             "gradient_cache": cfg.mini_batch_size or None}}
    return finish_run(session, fit, tokenizer, data, summary)


def is_embedding_dir(path) -> bool:
    """A directory holding a sentence embedder: the sentence-transformers layout (``modules.json`` with a pooling
    module) over a bare encoder (an embedding run, a ``distill-embeddings`` run, a sentence-transformers folder)."""
    import json
    from pathlib import Path

    p = Path(str(path)).expanduser()
    try:
        modules = json.loads((p / "modules.json").read_text(encoding="utf-8"))
        arch = (json.loads((p / "config.json").read_text(encoding="utf-8")).get("architectures") or [""])[0]
    except (OSError, ValueError, AttributeError):
        return False
    pooled = isinstance(modules, list) and any(str(m.get("type", "")).endswith("Pooling") for m in modules
                                               if isinstance(m, dict))
    return pooled and not any(arch.endswith(h) for h in ("ForSequenceClassification", "ForTokenClassification",
                                                          "ForQuestionAnswering"))


def embed_texts(model, tokenizer, texts: list[str], max_length: int = 128, batch_size: int = 128,
                precision: str = "fp32", bar: bool = False):
    """Sentence vectors (float32 [n, dim]) as the model's pipeline makes them (normalised when it normalises)."""
    import numpy as np

    from ptmlab.data.encode import encode_split
    from ptmlab.data.loaders import Split
    from ptmlab.train.evaluate import predict_logits

    if not texts:
        return np.zeros((0, int(model.config.hidden_size)), dtype=np.float32)
    enc = encode_split(tokenizer, Split(list(texts)), max_length, use_cache=False)
    return predict_logits(model, enc, tokenizer.pad_token_id or 0, batch_size, precision, desc="embed",
                          bar=bar).astype(np.float32)


def embedding_predictions(vectors) -> list[dict]:
    """``{"embedding": [...]}`` per text: what ``ptmlab predict``, ``Run.predict`` and ``ptmlab serve`` answer."""
    return [{"embedding": [float(x) for x in row]} for row in vectors]
