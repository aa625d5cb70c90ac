"""Load and save models in ``save_pretrained`` layout, including ptmlab-modified ones.

A modification (adapters, pruned heads, low rank, sharing, ghost modules, RNN students, long attention, ...)
registers in ``MODIFIERS`` a function that changes a freshly built model's architecture. Applying one records it
in ``config.ptmlab_modifications`` together with the ``ptmlab.*`` module that defines it, so ``load_from_dir`` can
import that module, rebuild the same architecture from the saved config and then load the weights strictly. The
foundation never names the capabilities that define modifications; only ``ptmlab.*`` modules are imported this way.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from ptmlab.core.errors import PtmlabError
from ptmlab.core.registry import Registry

MODIFIERS: Registry = Registry("model modification")
PICKLE_WEIGHTS = ("*.bin", "*.pt", "*.pth", "*.ckpt", "*.pkl", "*.pickle")
_TRUSTED_PICKLE: set[Path] = set()  # folders the user marked trusted (``--trust-pickle``) in this process


def trust_pickle(path: str | Path) -> None:
    """Let this process load the pickle checkpoint of the folder ``path`` (the user passed ``--trust-pickle``)."""
    _TRUSTED_PICKLE.add(Path(path).expanduser().resolve())


def is_trusted(path: str | Path) -> bool:
    return Path(path).expanduser().resolve() in _TRUSTED_PICKLE


def has_model_safetensors(path: str | Path) -> bool:
    """The folder holds a model's weights as safetensors: ``model.safetensors`` or its shards, not empty. Other
    safetensors files (an adapter, an optimizer state) are not the model's weights and vouch for nothing."""
    p = Path(path).expanduser()
    files = [p / "model.safetensors", *p.glob("model-*-of-*.safetensors")]
    return any(f.is_file() and f.stat().st_size > 0 for f in files)


def weights_kwargs(path: str | Path) -> dict:
    """What ``from_pretrained`` of a local folder is given so that it reads safetensors or nothing (a pickle
    checkpoint beside them is never the fallback), unless the user trusted the folder (``--trust-pickle``)."""
    return {} if is_trusted(path) else {"use_safetensors": True}


def refuse_pickle(path: str | Path) -> None:
    """A folder without the model's weights in safetensors (``model.safetensors`` or shards, see
    ``has_model_safetensors``) is refused unless trusted when it holds pickles (``pytorch_model.bin``, ``*.pt``,
    ...): unpickling runs whatever code the file holds. Safetensors weights, when present, are what loads."""
    p = Path(path).expanduser()
    if not p.is_dir() or is_trusted(p) or has_model_safetensors(p):
        return
    pickles = sorted(f.name for pattern in PICKLE_WEIGHTS for f in p.glob(pattern) if f.name != "training_args.bin")
    if pickles:
        raise PtmlabError(f"'{path}' holds only pickle weights ({pickles[0]}), which can run code when loaded: "
                          f"convert them to safetensors where you trust them, or pass --trust-pickle if you trust "
                          f"this folder")


def record_modification(model, kind: str, **params) -> None:
    """Note a modification (and the module defining it) in the config so the saved model rebuilds with it."""
    mods = list(getattr(model.config, "ptmlab_modifications", None) or [])
    module = getattr(MODIFIERS.get(kind), "__module__", None)
    mods.append({"kind": kind, **params, **({"module": module} if module else {})})
    model.config.ptmlab_modifications = mods


def _find_modifier(kind: str, module: str | None):
    """The registered function of ``kind``, importing its recorded ``ptmlab.*`` module first when needed."""
    import importlib

    if kind not in MODIFIERS and module:
        if not (module == "ptmlab" or module.startswith("ptmlab.")):
            raise PtmlabError(f"the model records modification '{kind}' from module '{module}', which is not part of "
                              f"ptmlab: only ptmlab modules are imported to rebuild a model")
        try:
            importlib.import_module(module)
        except ImportError as e:
            raise PtmlabError(f"cannot import '{module}' to rebuild modification '{kind}' ({e}): is this ptmlab "
                              f"version older than the one that saved the model?") from None
    if kind not in MODIFIERS:  # saved before modules were recorded: look through ptmlab's packages once
        import pkgutil

        import ptmlab

        for info in pkgutil.walk_packages(ptmlab.__path__, "ptmlab."):
            if kind in MODIFIERS:
                break
            if info.name.startswith(("ptmlab.commands", "ptmlab.studies", "ptmlab.cli")):
                continue
            try:
                importlib.import_module(info.name)
            except ImportError:
                continue
    return MODIFIERS.get(kind)


def apply_modifications(model, mods: list[dict]) -> None:
    for mod in mods:
        params = {k: v for k, v in mod.items() if k not in ("kind", "module")}
        _find_modifier(mod["kind"], mod.get("module"))(model, record=False, **params)


HEADS = {"token-classification": "AutoModelForTokenClassification",  # task_head naming a task kind's head
         "extractive-qa": "AutoModelForQuestionAnswering"}
SAVED_HEADS = {"ForTokenClassification": "token-classification", "ForQuestionAnswering": "extractive-qa"}


def _model_class(task_head: bool | str, config=None):
    """The transformers class: the bare encoder (False), a task kind's head (its name), or (True) the head the saved
    config's architecture has (token classification, QA), sequence classification otherwise."""
    import transformers

    if task_head is True and config is not None:
        arch = (getattr(config, "architectures", None) or [""])[0]
        task_head = next((kind for suffix, kind in SAVED_HEADS.items() if arch.endswith(suffix)), True)
    if isinstance(task_head, str):
        return getattr(transformers, HEADS[task_head])
    return transformers.AutoModelForSequenceClassification if task_head else transformers.AutoModel


def load_from_dir(path: str, overrides: dict, task_head: bool = True, attn_implementation: str | None = None):
    from transformers import AutoConfig

    from ptmlab.models.onnx import is_onnx_dir, load_onnx_dir

    if is_onnx_dir(path):  # an ONNX export: runs through onnxruntime (evaluate, predict, serve)
        return load_onnx_dir(path, overrides, task_head)

    try:
        config = _exported_config(path, overrides) or AutoConfig.from_pretrained(path, **overrides)
    except Exception as e:
        raise PtmlabError(f"cannot read the model config in '{path}': {e}") from None
    refuse_pickle(path)
    mods = getattr(config, "ptmlab_modifications", None)
    cls = _model_class(task_head, config)
    attn = attn_implementation
    if not mods:
        try:
            return cls.from_pretrained(path, config=config, attn_implementation=attn, **weights_kwargs(path))
        except Exception as e:
            _head_mismatch(path, overrides, e)
            raise PtmlabError(f"cannot load model weights from '{path}' ({type(e).__name__}: {e}): "
                              f"the checkpoint may be corrupt or truncated") from None
    model = cls.from_config(config, attn_implementation=attn)  # None: the class default (MPNet has no sdpa)
    apply_modifications(model, mods)
    state, fresh = _fit_head(model, read_safetensors_dir(path), path, config, overrides)
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [k for k in missing if not k.endswith("position_ids") and k not in fresh]
    if missing or unexpected:
        raise PtmlabError(f"weights in '{path}' do not fit the recorded architecture (missing {missing[:3]}, "
                          f"unexpected {unexpected[:3]}): the model directory is inconsistent")
    model.eval()
    return model


def _exported_config(path: str, overrides: dict):
    """The config of a ptmlab export that carries modelling code (``model_type: ptmlab-FAMILY``, see
    ``ptmlab.export.hf``) as the family's own config class: ptmlab rebuilds such a model from its recorded
    modifications, so it never needs to run the exported code. None for any other folder."""
    try:
        saved = json.loads((Path(path) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    family = saved.get("ptmlab_base_model_type") if isinstance(saved, dict) else None
    if not (isinstance(family, str) and str(saved.get("model_type", "")).startswith("ptmlab-")):
        return None
    from transformers import AutoConfig

    kept = {k: v for k, v in saved.items() if k not in ("model_type", "auto_map", "architectures")}
    arch = [a.removeprefix("Ptmlab") for a in saved.get("architectures") or []]
    return AutoConfig.for_model(family, **{**kept, "architectures": arch, **overrides})


def _fit_head(model, state: dict, path: str, config, overrides: dict) -> tuple[dict, set[str]]:
    """A modified model's saved head sized for other classes than ``overrides['num_labels']``: a static-embedding
    student (its head is a linear layer over the table, untrained when ``distill_static`` made it) gets a fresh head
    for the new classes (the saved head's tensors are left out; their names are returned); any other model a one-line
    error naming the fix."""
    own = model.state_dict()
    wrong = [k for k, v in state.items() if k in own and own[k].shape != v.shape]
    if not wrong:
        return state, set()
    if overrides.get("num_labels") is not None and all(k.startswith("classifier.") for k in wrong):
        if getattr(config, "ptmlab_static", None) is not None:
            return {k: v for k, v in state.items() if k not in wrong}, set(wrong)
        _head_mismatch(path, overrides, RuntimeError("size mismatch"))
    raise PtmlabError(f"weights in '{path}' do not fit the recorded architecture ({wrong[0]} has shape "
                      f"{tuple(state[wrong[0]].shape)}, the model {tuple(own[wrong[0]].shape)}): the model directory "
                      f"is inconsistent")


def _head_mismatch(path: str, overrides: dict, error: Exception) -> None:
    """A saved classification head of another size than the data's classes is not a corrupt checkpoint: say so."""
    wanted = overrides.get("num_labels")
    if wanted is None or "mismatch" not in str(error).lower():
        return
    try:
        saved = json.loads((Path(path) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    has = len(saved.get("id2label") or {}) or saved.get("num_labels")
    if has and has != wanted:
        names = ", ".join(map(str, (saved.get("id2label") or {}).values()))
        raise PtmlabError(f"model '{path}' has a classification head for {has} classes ({names}) but the data has "
                          f"{wanted}: train on data with the head's classes, or pass the encoder without its head "
                          f"(model.base_model in Python, or the model it was fine-tuned from) to train a new head")


def read_safetensors_dir(path: str | Path) -> dict:
    """All tensors of a model directory (single or sharded safetensors). Never unpickles."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    files = sorted(Path(path).glob("*.safetensors"))
    files = [f for f in files if f.name not in ("optimizer.safetensors", "rng.safetensors")]
    if not files:
        raise PtmlabError(f"no .safetensors weights in '{path}': the directory holds no saved model")
    state = {}
    for f in files:
        try:
            state.update(load_file(f))
        except (SafetensorError, OSError, ValueError) as e:
            raise PtmlabError(f"weights file '{f}' is corrupt or truncated ({e}): re-create it") from None
    return state


def save_model(model, tokenizer, out_dir: str | Path) -> None:
    """``save_pretrained`` (safetensors) + tokenizer into a temp dir, then move each file into place."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".save-", dir=out))
    try:
        unwrapped = getattr(model, "module", model)
        unwrapped.save_pretrained(tmp, safe_serialization=True)
        if tokenizer is not None:
            tokenizer.save_pretrained(tmp)
        for f in tmp.iterdir():
            os.replace(f, out / f.name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def model_inputs(model, batch: dict) -> dict:
    """The batch keys this model's forward accepts (MPNet and DistilBERT take no token_type_ids)."""
    keys = ["input_ids", "attention_mask"]
    if "token_type_ids" in batch and getattr(getattr(model, "config", None), "type_vocab_size", 0) > 1:
        keys.append("token_type_ids")
    return {k: batch[k] for k in keys if k in batch}
