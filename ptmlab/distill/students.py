"""Student builders: ``layers:K`` / ``layers:0,2,4`` (teacher layers kept, DistilBERT-style),
``shrink:layers=4,hidden=312,heads=12,ffn=1200[,init=teacher|random]`` (a smaller config, sliced from the teacher
or random), ``bilstm[:hidden=256,embed=384]`` and ``cnn[:filters=128]``, ``mobile:LAYERS[xBOTTLENECK]`` (a
MobileBERT-style bottleneck student, ``ptmlab.distill.mobile``), ``static[:dim=256,weights=zipf,sif=1e-4,tune=1]`` (a
token table distilled from the teacher, mean-pooled, with a linear head: ``ptmlab.distill.static``), or any zoo
model / model directory."""

from __future__ import annotations

import copy

import torch
from torch import nn

from ptmlab.core.errors import PtmlabError
from ptmlab.models.structure import structure_of

SHRINK_KEYS = {"layers": "num_hidden_layers", "hidden": "hidden_size", "heads": "num_attention_heads",
               "ffn": "intermediate_size"}


def even_layers(k: int, n: int) -> list[int]:
    """k of n layers, evenly spaced from the first (DistilBERT keeps every other layer: 0, 2, 4, ...)."""
    return [i * n // k for i in range(k)]


def _options(text: str, spec: str) -> dict[str, str]:
    out = {}
    for item in filter(None, (p.strip() for p in text.split(","))):
        key, eq, value = item.partition("=")
        if not eq:
            raise PtmlabError(f"student option '{item}' in '{spec}' is not KEY=VALUE (e.g. shrink:layers=4,hidden=312)")
        out[key.strip()] = value.strip()
    return out


def _ints(opts: dict[str, str], spec: str) -> dict[str, int]:
    try:
        return {k: int(v) for k, v in opts.items()}
    except ValueError:
        raise PtmlabError(f"student options in '{spec}' must be integers: {opts}") from None


# the student kinds built from the teacher (anything else is a zoo model or a model directory)
STUDENT_KINDS = {"layers": "teacher layers kept", "shrink": "a smaller config of the teacher's architecture",
                 "mobile": "MobileBERT-style bottleneck blocks", "bilstm": "a BiLSTM on the teacher's embeddings",
                 "cnn": "a CNN on the teacher's embeddings",
                 "static": "a static token table distilled from the teacher, mean-pooled, linear head"}


def build_student(spec: str, teacher: nn.Module, num_labels: int, regression: bool,
                  label_names: list[str] | None, tokenizer=None) -> nn.Module:
    """A student for ``spec`` (see the module docstring), with a task head for the teacher's labels.
    ``tokenizer``: the teacher's (a static student feeds it each vocabulary token; loaded from the teacher's
    directory when not given)."""
    kind, _, rest = spec.partition(":")
    if kind == "layers":
        return keep_layers(teacher, _layer_list(rest, structure_of(teacher).num_layers(teacher), spec))
    if kind == "shrink":
        opts = _options(rest, spec)
        init = opts.pop("init", "teacher")
        if init not in ("teacher", "random"):
            raise PtmlabError(f"shrink init '{init}' is unknown: use init=teacher or init=random")
        return shrink(teacher, _ints(opts, spec), init == "teacher")
    if kind == "mobile":
        from ptmlab.distill.mobile import build_mobile

        return build_mobile(teacher, rest, spec)
    if kind == "static":
        from ptmlab.distill.static import build_static_student

        return build_static_student(teacher, rest, spec, num_labels, regression, label_names, tokenizer)
    if kind in ("bilstm", "cnn"):
        from ptmlab.distill.rnn import build_rnn_student

        return build_rnn_student(kind, _ints(_options(rest, spec), spec), teacher, num_labels, regression,
                                 label_names)
    from ptmlab.models.zoo import load_model

    return load_model(spec, num_labels=num_labels, regression=regression, label_names=label_names)


def _layer_list(rest: str, n: int, spec: str) -> list[int]:
    try:
        items = [int(x) for x in rest.split(",") if x.strip()]
    except ValueError:
        raise PtmlabError(f"student '{spec}': write layers:K or layers:0,2,4 (teacher layer indices)") from None
    if len(items) == 1 and "," not in rest:
        k = items[0]
        if not 1 <= k <= n:
            raise PtmlabError(f"student '{spec}' asks for {k} layers, but the teacher has {n}: use 1..{n}")
        return even_layers(k, n)
    bad = [i for i in items if not 0 <= i < n]
    if not items or bad:
        raise PtmlabError(f"student '{spec}' names teacher layer(s) {bad or 'none'}; the teacher has layers 0..{n - 1}")
    return items


def keep_layers(teacher: nn.Module, layers: list[int]) -> nn.Module:
    """A copy of the teacher keeping only the listed transformer layers (embeddings and head included)."""
    student = copy.deepcopy(teacher)
    student.train()
    for p in student.parameters():
        p.requires_grad_(True)  # the teacher is frozen; its copy learns
    s = structure_of(student)
    parent_path, _, attr = s.layers.rpartition(".")
    encoder = s.encoder(student)
    parent = encoder.get_submodule(parent_path) if parent_path else encoder
    old = s.layer_list(student)
    setattr(parent, attr, nn.ModuleList(old[i] for i in layers))
    for name in ("num_hidden_layers", "n_layers"):
        if hasattr(student.config, name):
            setattr(student.config, name, len(layers))
    return student


def shrink(teacher: nn.Module, sizes: dict[str, int], from_teacher: bool) -> nn.Module:
    """A smaller config of the teacher's architecture; weights sliced from the teacher (head by head) or random."""
    from transformers import AutoModelForSequenceClassification

    from ptmlab.models.loader import SAVED_HEADS

    unknown = set(sizes) - set(SHRINK_KEYS)
    if unknown:
        raise PtmlabError(f"shrink option(s) {sorted(unknown)} unknown: use {', '.join(SHRINK_KEYS)} and init")
    config = copy.deepcopy(teacher.config)
    for key, value in sizes.items():
        setattr(config, SHRINK_KEYS[key], value)
    if config.hidden_size % config.num_attention_heads:
        raise PtmlabError(f"shrink: hidden {config.hidden_size} is not divisible by heads "
                          f"{config.num_attention_heads}: pick sizes where heads divides hidden")
    if type(teacher).__name__.endswith(tuple(SAVED_HEADS)):  # a tagger or span extractor keeps its head
        student = type(teacher)._from_config(config, attn_implementation="sdpa")
    else:
        student = AutoModelForSequenceClassification.from_config(config, attn_implementation="sdpa")
    if from_teacher:
        _slice_from(student, teacher)
    return student


def _slice_from(student: nn.Module, teacher: nn.Module) -> None:
    s = structure_of(teacher)
    n_t, n_s = s.num_layers(teacher), s.num_layers(student)
    t_state = teacher.state_dict()
    hs, ht = student.config.num_attention_heads, teacher.config.num_attention_heads
    ds, dt = student.config.hidden_size // hs, teacher.config.hidden_size // ht
    head_rows = [h * dt + j for h in range(hs) for j in range(ds)] if hs <= ht and ds <= dt else None
    prefix = f"{s.base}.{s.layers}."
    chosen = even_layers(n_s, n_t)
    qkv = tuple(f".{getattr(s, p)}." for p in ("query", "key", "value"))
    out_proj = f".{s.attn_output}."
    new = {}
    for name, p in student.state_dict().items():
        t_name = name
        if name.startswith(prefix):
            i, _, tail = name[len(prefix):].partition(".")
            t_name = f"{prefix}{chosen[int(i)]}.{tail}"
        if t_name not in t_state:
            continue
        src = t_state[t_name]
        if any(q in f".{name}" for q in qkv) or (out_proj in f".{name}" and name.endswith("weight")):
            head_dim = 1 if out_proj in f".{name}" else 0
        else:
            head_dim = None
        new[name] = _slice(src, p.shape, head_dim, head_rows, name)
    student.load_state_dict(new, strict=False)


def _slice(src: torch.Tensor, shape: torch.Size, head_dim: int | None, head_rows: list[int] | None,
           name: str) -> torch.Tensor:
    if src.dim() != len(shape) or any(a > b for a, b in zip(shape, src.shape, strict=True)):
        raise PtmlabError(f"shrink init=teacher cannot slice '{name}' {tuple(src.shape)} -> {tuple(shape)}: every size "
                          f"must be at most the teacher's, or use init=random")
    out = src
    for d, n in enumerate(shape):
        if d == head_dim and head_rows is not None and len(head_rows) == n:
            out = out.index_select(d, torch.tensor(head_rows))
        else:
            out = out.narrow(d, 0, n)
    return out.clone()
