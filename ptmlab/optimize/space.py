"""The search space: structures (what the model is) crossed with backends (what runs it).

A structure is written ``KIND[:key=value/key=value]`` (no commas, so that lists of them are flags):

- ``source``: the run itself; ``vocab``: the run with its vocabulary pruned to the task's texts (no training);
- ``layers:K``: a student keeping K of the run's layers, distilled from it (``ptmlab distill --student layers:K``);
- ``shrink:layers=L/hidden=H/heads=A/ffn=F``: a TinyBERT-style smaller configuration sliced from the run, distilled
  from it (``--student shrink:...``);
- ``prune:heads=F/ffn=F``: that fraction of heads and FFN neurons removed, recovered by distillation from the run
  (``ptmlab prune --distill-alpha``);
- ``static`` / ``static:dim=D``: a static-embedding student (one vector per vocabulary token, mean-pooled, a linear
  head; ``ptmlab distill --student static``), for sentence tasks only: it reads a text as one bag of tokens, so it
  cannot tag words or point at answer spans.

``source`` and ``vocab`` are cheap (seconds); the others train and are expensive.
"""

from __future__ import annotations

from dataclasses import dataclass

from ptmlab.core.errors import PtmlabError

CHEAP = ("source", "vocab")
KINDS = ("source", "vocab", "layers", "shrink", "prune", "static")
SENTENCE_ONLY = {"static": "a static-embedding student reads a text as one bag of tokens: it cannot tag words or "
                           "point at answer spans"}
STATIC_LR = 3e-3  # a token table and a fresh head: 5e-5 (for transformers) barely moves them (docs/distillation.md)
SHRINK_KEYS = ("layers", "hidden", "heads", "ffn")


@dataclass(frozen=True)
class Structure:
    name: str  # canonical text
    kind: str
    params: tuple[tuple[str, float], ...] = ()

    @property
    def cheap(self) -> bool:
        return self.kind in CHEAP

    def get(self, key: str, default=None):
        return dict(self.params).get(key, default)

    @property
    def slug(self) -> str:
        """A directory name."""
        return self.name.replace(":", "-").replace("/", "_").replace("=", "")

    def student_spec(self) -> str:
        """The ``ptmlab distill --student`` text of a layers/shrink/static structure."""
        if self.kind == "layers":
            return f"layers:{int(self.get('k'))}"
        if self.kind == "static":
            return "static" + (f":dim={int(self.get('dim'))}" if self.get("dim") else "")
        return "shrink:" + ",".join(f"{k}={int(v)}" for k, v in self.params)


def _number(text: str, spec: str, integer: bool) -> float:
    try:
        value = int(text) if integer else float(text)
    except ValueError:
        raise PtmlabError(f"structure '{spec}': '{text}' is not a {'whole number' if integer else 'number'}") from None
    return value


def parse_structure(spec: str) -> Structure:
    """``source``, ``vocab``, ``layers:K``, ``shrink:layers=L/hidden=H/heads=A/ffn=F``, ``prune:heads=F/ffn=F``,
    ``static[:dim=D]``."""
    kind, _, rest = str(spec).strip().partition(":")
    if kind not in KINDS:
        raise PtmlabError(f"unknown structure '{spec}': use source, vocab, layers:K, "
                          f"shrink:layers=L/hidden=H/heads=A/ffn=F, prune:heads=F/ffn=F or static[:dim=D]")
    if kind in CHEAP:
        if rest:
            raise PtmlabError(f"structure '{spec}' takes no options: write {kind}")
        return Structure(kind, kind)
    if kind == "static":
        if not rest:
            return Structure("static", kind)
        key, eq, value = rest.partition("=")
        if key.strip() != "dim" or not eq:
            raise PtmlabError(f"structure '{spec}': static takes dim=D (e.g. static:dim=128)")
        dim = _number(value.strip(), spec, True)
        if dim < 1:
            raise PtmlabError(f"structure '{spec}': dim must be >= 1")
        return Structure(f"static:dim={dim}", kind, (("dim", dim),))
    if kind == "layers":
        k = _number(rest, spec, True)
        if k < 1:
            raise PtmlabError(f"structure '{spec}': a student needs at least 1 layer")
        return Structure(f"layers:{k}", kind, (("k", k),))
    opts = {}
    for item in filter(None, rest.split("/")):
        key, eq, value = item.partition("=")
        if not eq:
            raise PtmlabError(f"structure '{spec}': '{item}' is not KEY=VALUE (e.g. {kind}:"
                              f"{'layers=4/hidden=192' if kind == 'shrink' else 'heads=0.5/ffn=0.5'})")
        opts[key.strip()] = value.strip()
    if kind == "shrink":
        bad = sorted(set(opts) - set(SHRINK_KEYS))
        if bad or not opts:
            raise PtmlabError(f"structure '{spec}': shrink takes {', '.join(SHRINK_KEYS)} (e.g. "
                              f"shrink:layers=4/hidden=192/heads=6/ffn=768)")
        vals = {k: _number(v, spec, True) for k, v in opts.items()}
        if min(vals.values()) < 1:
            raise PtmlabError(f"structure '{spec}': every size must be >= 1")
        params = tuple((k, vals[k]) for k in SHRINK_KEYS if k in vals)
    else:
        bad = sorted(set(opts) - {"heads", "ffn"})
        if bad or not opts:
            raise PtmlabError(f"structure '{spec}': prune takes heads and ffn fractions (e.g. prune:heads=0.5/ffn=0.5)")
        vals = {k: _number(v, spec, False) for k, v in opts.items()}
        for k, v in vals.items():
            if not 0 <= v < 1:
                raise PtmlabError(f"structure '{spec}': {k}={v:g} must be a fraction in [0, 1)")
        if not any(vals.values()):
            raise PtmlabError(f"structure '{spec}' removes nothing: give heads or ffn above 0")
        params = tuple((k, vals[k]) for k in ("heads", "ffn") if k in vals)
    name = f"{kind}:" + "/".join(f"{k}={v:g}" for k, v in params)
    return Structure(name, kind, params)


def default_structures(config) -> list[Structure]:
    """The ``auto`` set for a model of this shape: the run and its pruned vocabulary, students of about 2/3, 1/2 and
    1/3 of its layers, a TinyBERT-style model (2/3 of the layers, half the width), three pruning levels and a
    static-embedding student (left out again for the span kinds, ``SENTENCE_ONLY``)."""
    n = int(config.num_hidden_layers)
    hidden, heads, ffn = int(config.hidden_size), int(config.num_attention_heads), int(config.intermediate_size)
    specs = ["source", "vocab", "prune:ffn=0.5", "prune:heads=0.25/ffn=0.25", "prune:heads=0.5/ffn=0.5"]
    specs += [f"layers:{k}" for k in sorted({max(1, round(n * f)) for f in (2 / 3, 1 / 2, 1 / 3)}, reverse=True)
              if k < n]
    if heads >= 2 and hidden % 2 == 0 and (hidden // 2) % (heads // 2) == 0:
        specs.append(f"shrink:layers={max(1, round(n * 2 / 3))}/hidden={hidden // 2}/heads={heads // 2}/"
                     f"ffn={ffn // 2}")
    specs.append("static")
    return [parse_structure(s) for s in specs]


def check_fits(structure: Structure, config) -> None:
    """PtmlabError when ``structure`` cannot be made from a model of this shape."""
    n = int(config.num_hidden_layers)
    if structure.kind == "static" and structure.get("dim", 0) > int(config.hidden_size):
        raise PtmlabError(f"structure '{structure.name}': dim={int(structure.get('dim'))} is larger than the run's "
                          f"hidden size {config.hidden_size}")
    if structure.kind == "layers" and not 1 <= structure.get("k") <= n:
        raise PtmlabError(f"structure '{structure.name}' asks for {int(structure.get('k'))} layers, but the run has "
                          f"{n}: use layers:1..{n}")
    if structure.kind == "shrink":
        sizes = {"layers": n, "hidden": config.hidden_size, "heads": config.num_attention_heads,
                 "ffn": config.intermediate_size}
        for k, v in structure.params:
            if v > sizes[k]:
                raise PtmlabError(f"structure '{structure.name}': {k}={int(v)} is larger than the run's {sizes[k]}")
        hidden = int(structure.get("hidden", config.hidden_size))
        heads = int(structure.get("heads", config.num_attention_heads))
        if hidden % heads:
            raise PtmlabError(f"structure '{structure.name}': hidden {hidden} is not divisible by heads {heads}")
