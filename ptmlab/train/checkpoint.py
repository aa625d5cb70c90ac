"""Atomic, resumable checkpoints: model, optimizer, scheduler, RNG and loop state, all without pickle.

Tensors go to safetensors, everything else to JSON. A checkpoint is written into ``checkpoint.tmp`` and swapped
in by rename, so a kill at any moment leaves either the old or the new checkpoint whole.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path

import numpy as np
import torch

from ptmlab.core.errors import PtmlabError
from ptmlab.core.io import atomic_save_file, atomic_write_json


def _optimizer_tensors(opt: torch.optim.Optimizer) -> tuple[dict, dict]:
    sd = opt.state_dict()
    tensors, scalars = {}, {}
    for pid, st in sd["state"].items():
        for k, v in st.items():
            if torch.is_tensor(v):
                tensors[f"{pid}.{k}"] = v.detach().cpu()
            else:
                scalars[f"{pid}.{k}"] = v
    groups = [{k: v for k, v in g.items()} for g in sd["param_groups"]]
    return tensors, {"param_groups": groups, "scalars": scalars}


def _load_optimizer(opt: torch.optim.Optimizer, tensors: dict, meta: dict) -> None:
    state: dict = {}
    for key, v in tensors.items():
        pid, k = key.split(".", 1)
        state.setdefault(int(pid), {})[k] = v
    for key, v in meta["scalars"].items():
        pid, k = key.split(".", 1)
        state.setdefault(int(pid), {})[k] = v
    opt.load_state_dict({"state": state, "param_groups": meta["param_groups"]})


def save_checkpoint(run_path: Path, model_state: dict, optimizer, scheduler, loop_state: dict) -> None:
    final = run_path / "checkpoint"
    tmp = run_path / "checkpoint.tmp"
    old = run_path / "checkpoint.old"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    atomic_save_file({k: v.detach().cpu().clone() for k, v in model_state.items()}, tmp / "model.safetensors")
    opt_tensors, opt_meta = _optimizer_tensors(optimizer)
    atomic_save_file(opt_tensors, tmp / "optimizer.safetensors")
    atomic_save_file({"torch": torch.get_rng_state()}, tmp / "rng.safetensors")
    sched = {k: v for k, v in scheduler.state_dict().items() if k != "lr_lambdas"}
    atomic_write_json(tmp / "trainer_state.json", {
        "loop": loop_state, "optimizer": opt_meta, "scheduler": sched,
        "python_rng": _py_state(), "numpy_rng": _np_state()})
    if final.exists():
        shutil.rmtree(old, ignore_errors=True)
        os.replace(final, old)
    os.replace(tmp, final)
    shutil.rmtree(old, ignore_errors=True)


def find_checkpoint(run_path: Path) -> Path:
    for name in ("checkpoint", "checkpoint.old"):
        p = run_path / name
        if (p / "trainer_state.json").is_file():
            return p
    raise PtmlabError(f"'{run_path}' has no checkpoint to resume from (no checkpoint/trainer_state.json): "
                      f"start a new run instead")


def load_checkpoint(ckpt: Path, load_model_state, optimizer, scheduler) -> dict:
    """Restore everything saved by ``save_checkpoint``; returns the loop state. Corrupt files raise."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        meta = json.loads((ckpt / "trainer_state.json").read_text())
        model_state = load_file(ckpt / "model.safetensors")
        opt_tensors = load_file(ckpt / "optimizer.safetensors")
        rng = load_file(ckpt / "rng.safetensors")
    except (OSError, json.JSONDecodeError, SafetensorError, ValueError) as e:
        raise PtmlabError(f"checkpoint '{ckpt}' is corrupt or truncated ({type(e).__name__}): "
                          f"delete it and start the run again") from None
    missing = [k for k in ("loop", "optimizer", "scheduler", "python_rng", "numpy_rng") if k not in meta]
    if not isinstance(meta, dict) or missing:
        raise PtmlabError(f"checkpoint '{ckpt}' trainer state lacks {', '.join(missing) or 'its fields'}: it was "
                          f"not written by this ptmlab; delete it and start the run again")
    load_model_state(model_state)
    try:
        _load_optimizer(optimizer, opt_tensors, meta["optimizer"])
        scheduler.load_state_dict({**meta["scheduler"], "lr_lambdas": [None] * len(optimizer.param_groups)})
    except (KeyError, ValueError, RuntimeError) as e:
        raise PtmlabError(f"checkpoint '{ckpt}' optimizer state does not match ({e}): start a new run") from None
    torch.set_rng_state(rng["torch"])
    _set_py_state(meta["python_rng"])
    _set_np_state(meta["numpy_rng"])
    from ptmlab.train.loop import LoopState

    loop = meta["loop"]
    unknown = [k for k in (loop if isinstance(loop, dict) else {}) if k not in LoopState.__dataclass_fields__]
    if not isinstance(loop, dict) or unknown:
        raise PtmlabError(f"checkpoint '{ckpt}' loop state is not ptmlab's ({unknown[:2]}): start a new run")
    return loop


def _py_state():
    v, internal, gauss = random.getstate()
    return [v, list(internal), gauss]


def _set_py_state(s) -> None:
    random.setstate((s[0], tuple(s[1]), s[2]))


def _np_state():
    name, keys, pos, has_gauss, cached = np.random.get_state()
    return [name, keys.tolist(), int(pos), int(has_gauss), float(cached)]


def _set_np_state(s) -> None:
    np.random.set_state((s[0], np.array(s[1], dtype=np.uint32), s[2], s[3], s[4]))
