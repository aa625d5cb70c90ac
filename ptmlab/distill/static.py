"""Static-embedding students (``--student static[:dim=256,weights=zipf,sif=0.0001,tune=1]``).

An encoder is distilled into one vector per vocabulary token, the way Model2Vec does it:

1. every token of the teacher's vocabulary is fed alone (``[CLS] token [SEP]``) and the teacher's last hidden states
   are mean-pooled into the token's vector (special tokens and ``[unusedN]`` rows are left out);
2. the vectors are reduced to ``dim`` dimensions with PCA (centred, so the direction every token shares goes);
3. each vector is weighted for frequency: SIF, ``sif / (sif + p(token))``, with p from Zipf's law over the token's
   rank in the vocabulary (WordPiece and BPE vocabularies list frequent tokens first), so frequent tokens count less;
4. the table is scaled by one number, so that the median vector has length sqrt(dim) (components of size about 1):
   a linear head and learning rates then behave alike whatever the teacher.

A text is the mean of its tokens' vectors. The student is a sequence-classification shell (BERT with zero layers, the
teacher's tokenizer) whose encoder is that table (``StaticEncoder``) and whose head is one linear layer; ``ptmlab
distill`` trains it on the task with the distillation objective (``--losses soft_ce``; ``tune=0`` keeps the table as
distilled and trains the head only). The change of encoder is the registered modification ``static_student``, so the
student saves with ``save_model`` (safetensors + config.json) and loads with ``load_model``, ``ptmlab evaluate``,
``predict`` and ``serve`` like any run (and exports to ONNX). ``embed`` gives mean-pooled, normalised sentence
vectors from any static student and ``static_logits`` its logits, both in numpy without padding (the fast path for a
Python caller); ``distill_static`` builds a student from a model name without a task. The teacher's token vectors are
cached under ``$PTMLAB_CACHE/static`` (keyed by its weights), so another ``dim`` or weighting of the same teacher only
redoes the PCA.
"""

from __future__ import annotations

import hashlib
import os
import re
import time
from dataclasses import dataclass
from itertools import chain
from pathlib import Path

import numpy as np
import torch
from torch import nn
from transformers.modeling_outputs import BaseModelOutputWithPooling

from ptmlab.core.errors import PtmlabError
from ptmlab.models.loader import MODIFIERS, record_modification

DEFAULT_DIM = 256
WEIGHTS = ("zipf", "none")
SKIP = re.compile(r"\[unused\d+\]|<unused\d+>")  # placeholder rows no text produces


@dataclass(frozen=True)
class StaticOptions:
    """How a table is distilled. ``dim`` 0: 256, or the teacher's width when that is smaller."""

    dim: int = 0
    weights: str = "zipf"
    sif: float = 1e-4
    tune: bool = True

    def check(self) -> None:
        if self.dim < 0:
            raise PtmlabError(f"static student dim={self.dim}: use a positive PCA dimension (or 0 for the default)")
        if self.weights not in WEIGHTS:
            raise PtmlabError(f"static student weights={self.weights}: use weights=zipf or weights=none")
        if not 0 < self.sif < 1:
            raise PtmlabError(f"static student sif={self.sif}: the SIF coefficient must be in (0, 1), e.g. 0.0001")


def parse_options(rest: str, spec: str = "static") -> StaticOptions:
    """``dim=256,weights=zipf,sif=1e-4,tune=1`` -> ``StaticOptions`` (checked)."""
    kinds = {"dim": int, "weights": str, "sif": float, "tune": int}
    out: dict = {}
    for item in filter(None, (p.strip() for p in rest.split(","))):
        key, eq, value = (s.strip() for s in item.partition("="))
        if not eq or key not in kinds:
            raise PtmlabError(f"student option '{item}' in '{spec}' is not one of {', '.join(f'{k}=' for k in kinds)} "
                              f"(e.g. static:dim=256,weights=zipf,tune=1)")
        try:
            out[key] = kinds[key](value)
        except ValueError:
            raise PtmlabError(f"student option '{item}' in '{spec}': {key} must be a {kinds[key].__name__}") from None
    if out.get("tune", 1) not in (0, 1):
        raise PtmlabError(f"student option tune={out['tune']} in '{spec}': use tune=1 (train the table with the "
                          f"head) or tune=0 (the head only)")
    if "tune" in out:
        out["tune"] = bool(out["tune"])
    opts = StaticOptions(**out)
    opts.check()
    return opts


class StaticEncoder(nn.Module):
    """A token table mean-pooled over the counted tokens of each text into a [B, dim] vector.

    ``counted`` (saved with the weights) is 1 for tokens with a vector and 0 for special tokens, padding and rows
    left out, which the mean skips. Module names follow BERT's (``embeddings.word_embeddings``, an empty
    ``encoder.layer``), so the structure map reads it as a BERT with embeddings and zero transformer layers.
    """

    def __init__(self, vocab: int, dim: int, pad_id: int = 0):
        super().__init__()
        self.embeddings = nn.Module()
        self.embeddings.word_embeddings = nn.Embedding(vocab, dim, padding_idx=pad_id)
        self.encoder = nn.Module()
        self.encoder.layer = nn.ModuleList()
        self.register_buffer("counted", torch.ones(vocab))

    def forward(self, input_ids=None, attention_mask=None, **kwargs) -> BaseModelOutputWithPooling:
        """``pooler_output``: the mean of the counted tokens' vectors, one ``embedding_bag`` (no [B, L, dim] tensor).
        A static student has no per-token states: ``last_hidden_state`` is that vector at one position (mean
        pooling it over any mask gives it back)."""
        w = self.counted[input_ids]
        if attention_mask is not None:
            w = w * attention_mask.to(w.dtype)
        table = self.embeddings.word_embeddings.weight
        sums = nn.functional.embedding_bag(input_ids, table, mode="sum", per_sample_weights=w.to(table.dtype))
        pooled = sums / w.sum(1, keepdim=True).clamp_min(1).to(sums.dtype)
        return BaseModelOutputWithPooling(last_hidden_state=pooled[:, None, :], pooler_output=pooled)

    def pool_ids(self, ids: list[list[int]]) -> np.ndarray:
        """The same means as ``forward`` for unpadded token lists, in numpy: [len(ids), dim] float32 (zeros for a
        text without a counted token). No torch operator runs, so no thread pool is woken for a small batch."""
        table = self.embeddings.word_embeddings.weight.detach().cpu().float().numpy()
        counted = self.counted.detach().cpu().float().numpy()
        lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
        out = np.zeros((len(ids), table.shape[1]), dtype=np.float32)
        if not lengths.sum():
            return out
        flat = np.fromiter(chain.from_iterable(ids), dtype=np.int64, count=int(lengths.sum()))
        w = counted[flat]
        starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
        full = lengths > 0  # segments between the starts of non-empty texts are exactly their tokens
        sums = np.add.reduceat(table[flat] * w[:, None], starts[full], axis=0)
        counts = np.add.reduceat(w, starts[full])
        out[full] = sums / np.maximum(counts, 1)[:, None]
        return out


@MODIFIERS.register("static_student", help="replace the encoder by a static token table, mean-pooled (static student)")
def use_static_encoder(model, dim: int, tune: bool = True, record: bool = True) -> nn.Module:
    """Swap the shell's encoder for a ``StaticEncoder`` of width ``dim`` (config.hidden_size, the head's input);
    ``tune`` False freezes the table (the head alone trains)."""
    c = model.config
    model.bert = StaticEncoder(c.vocab_size, dim, c.pad_token_id or 0)
    model.bert.embeddings.word_embeddings.weight.requires_grad_(bool(tune))
    if record:
        record_modification(model, "static_student", dim=dim, tune=bool(tune))
    return model


@dataclass
class StaticTable:
    """A distilled table: ``vectors`` [vocab, dim] (zero rows where ``counted`` is 0) and what made it."""

    vectors: torch.Tensor
    counted: torch.Tensor
    info: dict


def counted_ids(tokenizer, vocab_size: int, ids=None) -> list[int]:
    """The token ids that get a vector: ``ids`` (default every id of the vocabulary) less special tokens and
    ``[unusedN]`` placeholders. An empty result is a ``PtmlabError``."""
    limit = min(vocab_size, len(tokenizer))
    if ids is None:
        chosen = range(limit)
    else:
        chosen = sorted({int(i) for i in ids})
        bad = [i for i in chosen if not 0 <= i < limit]
        if bad:
            raise PtmlabError(f"static vocabulary names token id {bad[0]}, outside the teacher's vocabulary "
                              f"0..{limit - 1}")
    special = set(tokenizer.all_special_ids)
    tokens = tokenizer.convert_ids_to_tokens(list(chosen))
    out = [i for i, t in zip(chosen, tokens, strict=True) if i not in special and not SKIP.fullmatch(str(t))]
    if not out:
        raise PtmlabError("the static vocabulary is empty (no token id left after special tokens and [unusedN] "
                          "placeholders): pass token ids of real tokens, or none for the whole vocabulary")
    return out


def teacher_encoder(teacher: nn.Module) -> nn.Module:
    """The teacher's transformer without its head; a one-line error for a teacher that has no transformer."""
    c = teacher.config
    if getattr(c, "ptmlab_rnn", None):
        raise PtmlabError(f"a static student needs a transformer teacher, but the teacher is a {c.ptmlab_rnn} "
                          f"student: distil its own teacher instead")
    name = type(teacher).__name__
    if name.endswith(("TokenClassification", "QuestionAnswering")):
        raise PtmlabError(f"a static student classifies whole texts, but the teacher is a {name}: use a layers: or "
                          f"shrink: student for taggers and span extraction")
    return getattr(teacher, "base_model", teacher)


def token_vectors(encoder: nn.Module, tokenizer, ids: list[int], batch_size: int = 1024,
                  cache: bool = True) -> torch.Tensor:
    """[len(ids), hidden]: the encoder's last hidden states for ``[CLS] token [SEP]`` (each id alone), mean-pooled.
    Kept under ``$PTMLAB_CACHE/static`` keyed by the encoder's weights and the ids (a later run reads them)."""
    from ptmlab.core.progress import progress
    from ptmlab.distill.teacher import fingerprint

    prefix, suffix = special_wrap(tokenizer)
    seqs = [[*prefix, i, *suffix] for i in ids]
    path = None
    if cache:
        h = hashlib.sha256(fingerprint(encoder).encode())
        h.update(np.asarray([t for s in seqs for t in (*s, -1)], dtype=np.int64).tobytes())
        path = _cache_dir() / f"{h.hexdigest()[:24]}.safetensors"
        if path.is_file():
            from safetensors.torch import load_file

            try:
                return load_file(path)["vectors"]
            except Exception:  # a damaged entry is computed again
                pass
    out = torch.empty(len(ids), encoder.config.hidden_size)
    order = sorted(range(len(seqs)), key=lambda i: len(seqs[i]))
    pad = tokenizer.pad_token_id or 0
    was_training = encoder.training
    encoder.eval()
    try:
        with torch.inference_mode():
            for start in progress(range(0, len(order), batch_size), desc="static: token vectors"):
                idx = order[start:start + batch_size]
                n = max(len(seqs[i]) for i in idx)
                input_ids = torch.full((len(idx), n), pad, dtype=torch.long)
                mask = torch.zeros((len(idx), n), dtype=torch.long)
                for row, i in enumerate(idx):
                    input_ids[row, :len(seqs[i])] = torch.tensor(seqs[i])
                    mask[row, :len(seqs[i])] = 1
                hidden = encoder(input_ids=input_ids, attention_mask=mask).last_hidden_state.float()
                m = mask[..., None].float()
                out[idx] = (hidden * m).sum(1) / m.sum(1)
    finally:
        encoder.train(was_training)
    if path is not None:
        from ptmlab.core.io import atomic_save_file

        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_save_file({"vectors": out.contiguous()}, path)
    return out


def special_wrap(tokenizer) -> tuple[list[int], list[int]]:
    """The special tokens the tokenizer puts before and after a single text (``[CLS]`` / ``[SEP]``, ``<s>`` /
    ``</s>``, ...), read from how it encodes one word with and without them."""
    text = "the"
    bare = tokenizer(text, add_special_tokens=False)["input_ids"]
    full = tokenizer(text)["input_ids"]
    for k in range(len(full) - len(bare) + 1):
        if full[k:k + len(bare)] == bare:
            return list(full[:k]), list(full[k + len(bare):])
    return [], []


def _cache_dir() -> Path:
    return Path(os.environ.get("PTMLAB_CACHE", Path.home() / ".cache" / "ptmlab")) / "static"


def pca(x: torch.Tensor, dim: int) -> tuple[torch.Tensor, float]:
    """``x`` centred and projected on its ``dim`` principal components (signs fixed: each component's largest
    score positive), and the share of variance they keep."""
    a = x.double().numpy()
    a = a - a.mean(0)
    eigvals, eigvecs = np.linalg.eigh(a.T @ a / max(len(a) - 1, 1))
    eigvals, eigvecs = np.clip(eigvals[::-1], 0, None), eigvecs[:, ::-1][:, :dim]
    scores = a @ eigvecs
    signs = np.sign(scores[np.abs(scores).argmax(0), np.arange(dim)])
    signs[signs == 0] = 1
    kept = float(eigvals[:dim].sum() / max(eigvals.sum(), 1e-12))
    return torch.from_numpy(scores * signs).float(), kept


def sif_weights(n: int, sif: float) -> torch.Tensor:
    """SIF weights of ``n`` tokens in rank order: sif / (sif + p), p(rank r) proportional to 1 / (r + 2) (Zipf)."""
    inv = 1.0 / np.arange(2, n + 2, dtype=np.float64)
    p = inv / inv.sum()
    return torch.from_numpy(sif / (sif + p)).float()


def static_table(teacher: nn.Module, tokenizer, options: StaticOptions = StaticOptions(), ids=None,
                 batch_size: int = 1024, cache: bool = True) -> StaticTable:
    """Distil ``teacher`` (a model with or without a task head) into a token table (see the module docstring).
    ``ids``: the token ids to keep (default: the whole vocabulary); the others get no vector and are skipped."""
    options.check()
    encoder = teacher_encoder(teacher)
    hidden = int(encoder.config.hidden_size)
    dim = options.dim or min(DEFAULT_DIM, hidden)
    if dim > hidden:
        raise PtmlabError(f"static student dim={dim} is larger than the teacher's hidden size {hidden}: PCA cannot "
                          f"add dimensions; use dim={hidden} or less")
    vocab = int(teacher.config.vocab_size)
    keep = counted_ids(tokenizer, vocab, ids)
    if dim > len(keep):
        raise PtmlabError(f"static student dim={dim} is larger than its vocabulary of {len(keep)} tokens: use "
                          f"dim={len(keep)} or less, or a larger vocabulary")
    start = time.perf_counter()
    raw = token_vectors(encoder, tokenizer, keep, batch_size, cache)
    reduced, kept = pca(raw, dim)
    if options.weights == "zipf":
        reduced = reduced * sif_weights(len(keep), options.sif)[:, None]
    reduced = reduced * (dim ** 0.5 / reduced.norm(dim=1).median().clamp_min(1e-12))
    vectors = torch.zeros(vocab, dim)
    counted = torch.zeros(vocab)
    index = torch.tensor(keep)
    vectors[index] = reduced
    counted[index] = 1.0
    info = {"teacher": str(getattr(teacher, "name_or_path", "") or ""), "hidden": hidden, "dim": dim,
            "tokens": len(keep), "vocab": vocab, "weights": options.weights,
            "sif": options.sif if options.weights == "zipf" else None, "pca_variance_kept": round(kept, 4),
            "seconds": round(time.perf_counter() - start, 2)}
    return StaticTable(vectors, counted, info)


def static_model(table: StaticTable, teacher_config, num_labels: int = 2, regression: bool = False,
                 label_names: list[str] | None = None, tune: bool = True):
    """The student: a BERT sequence-classification shell (zero layers) whose encoder is ``table``, with a fresh
    linear head for ``num_labels`` classes (1 and ``regression``: a score)."""
    from transformers import BertConfig, BertForSequenceClassification

    vocab, dim = table.vectors.shape
    extra = {"id2label": dict(enumerate(label_names)), "label2id": {n: i for i, n in enumerate(label_names)}} \
        if label_names else {}
    positions = getattr(teacher_config, "max_position_embeddings", 512) or 512
    config = BertConfig(vocab_size=vocab, hidden_size=dim, num_hidden_layers=0, num_attention_heads=1,
                        intermediate_size=4, type_vocab_size=1, max_position_embeddings=positions,
                        pad_token_id=getattr(teacher_config, "pad_token_id", 0) or 0, num_labels=num_labels,
                        problem_type="regression" if regression else "single_label_classification",
                        classifier_dropout=0.1, **extra)
    config.ptmlab_rnn = "static"  # no layers, attention or hidden states: layer losses are refused
    config.ptmlab_static = table.info
    model = BertForSequenceClassification(config)
    use_static_encoder(model, dim, tune)
    with torch.no_grad():
        model.bert.embeddings.word_embeddings.weight.copy_(table.vectors)
        model.bert.counted.copy_(table.counted)
    return model


def build_static_student(teacher: nn.Module, rest: str, spec: str, num_labels: int, regression: bool,
                         label_names: list[str] | None, tokenizer=None):
    """``--student static[:...]``: the table distilled from ``teacher`` with a head for the task."""
    opts = parse_options(rest, spec)
    encoder = teacher_encoder(teacher)
    if tokenizer is None:
        tokenizer = _tokenizer_of(teacher)
    table = static_table(teacher, tokenizer, opts)
    return static_model(table, encoder.config, num_labels, regression, label_names, opts.tune)


def _tokenizer_of(model):
    from ptmlab.models.zoo import load_tokenizer

    path = str(getattr(model, "name_or_path", "") or "")
    if not path or not Path(path).is_dir():
        raise PtmlabError("a static student needs the teacher's tokenizer: pass a teacher saved in a directory")
    return load_tokenizer(path)


def distill_static(model: str = "minilm", output: str | None = None, dim: int = 0, weights: str = "zipf",
                   sif: float = 1e-4, tune: bool = True, ids=None, num_labels: int = 2,
                   label_names: list[str] | None = None, batch_size: int = 1024):
    """A static model distilled from ``model`` (a zoo name, model or run directory) without a task: returns
    ``(student, tokenizer)`` and, given ``output``, saves both there (safetensors + config.json + tokenizer). Its head
    (``num_labels`` classes, untrained) is what ``ptmlab finetune --model OUTPUT`` trains; ``embed`` reads the table."""
    from ptmlab.models.loader import save_model
    from ptmlab.models.zoo import load_model, load_tokenizer

    opts = StaticOptions(dim, weights, sif, tune)
    opts.check()
    teacher = load_model(model, task_head=False)
    tokenizer = load_tokenizer(model)
    table = static_table(teacher, tokenizer, opts, ids=ids, batch_size=batch_size)
    table.info["teacher"] = model
    student = static_model(table, teacher.config, num_labels, False, label_names, tune)
    student.eval()
    if output is not None:
        save_model(student, tokenizer, output)
    return student, tokenizer


def static_encoder(model) -> StaticEncoder:
    enc = getattr(model, "bert", None)
    if not isinstance(enc, StaticEncoder):
        raise PtmlabError(f"{type(model).__name__} is not a static student: build one with --student static or "
                          f"distill_static")
    return enc


def _token_lists(tokenizer, texts: list[str], max_length: int) -> list[list[int]]:
    if isinstance(texts, str):
        raise PtmlabError("pass a list of texts, not one string")
    return tokenizer(list(texts), add_special_tokens=False, truncation=True, max_length=max_length)["input_ids"]


def embed(model, tokenizer, texts: list[str], batch_size: int = 1024, max_length: int = 512,
          normalize: bool = True) -> np.ndarray:
    """[len(texts), dim] sentence vectors of a static student: the mean of the tokens' vectors, L2-normalised
    (``normalize``); a text without a known token gets zeros."""
    enc = static_encoder(model)
    out = [enc.pool_ids(_token_lists(tokenizer, texts[i:i + batch_size], max_length))
           for i in range(0, len(texts), batch_size)]
    v = np.concatenate(out) if out else np.zeros((0, enc.embeddings.word_embeddings.embedding_dim), np.float32)
    if normalize:
        v = v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)
    return v


def static_logits(model, tokenizer, texts: list[str], batch_size: int = 1024, max_length: int = 512) -> np.ndarray:
    """The student's logits for ``texts`` (the numbers its forward pass gives) without padding and without torch:
    the fast path for a Python caller."""
    enc = static_encoder(model)
    weight = model.classifier.weight.detach().cpu().float().numpy()
    bias = model.classifier.bias.detach().cpu().float().numpy()
    out = [enc.pool_ids(_token_lists(tokenizer, texts[i:i + batch_size], max_length)) @ weight.T + bias
           for i in range(0, len(texts), batch_size)]
    return np.concatenate(out) if out else np.zeros((0, model.config.num_labels), dtype=np.float32)


def describe(model) -> dict:
    """What a static student records about its table (teacher, dim, tokens, weights, PCA variance kept)."""
    static_encoder(model)
    return dict(getattr(model.config, "ptmlab_static", None) or {})
