"""Teacher outputs computed once per (teacher, data, features) and kept on disk, so every epoch and every later
run with the same teacher and data reads them instead of running the teacher.

Each feature is stored per example at its real length (hidden [L, H], attention [heads, L, L], logits [C]),
flattened and concatenated, with per-example shapes; logits in fp32, other features in fp16 to halve the size.
``gather`` pads a batch's features back to the student batch's length.
"""

from __future__ import annotations

import hashlib

import torch
import torch.nn.functional as F

from ptmlab.core.io import atomic_save_file
from ptmlab.core.progress import progress
from ptmlab.data.batching import collate, eval_batches
from ptmlab.data.encode import Encoded, cache_dir
from ptmlab.distill.features import FeatureTap
from ptmlab.models.loader import model_inputs


def _name(key: tuple[str, int]) -> str:
    return f"{key[0]}@{key[1]}"


class TeacherOutputs:
    def __init__(self, tensors: dict[str, torch.Tensor], hit: bool, batches_run: int):
        self.t = tensors
        self.hit = hit
        self.batches_run = batches_run  # teacher forward passes this call made (0 on a cache hit)
        self._offsets = {k[len("shape:"):]: _offsets(v) for k, v in tensors.items() if k.startswith("shape:")}

    def example(self, key: tuple[str, int], i: int) -> torch.Tensor:
        name = _name(key)
        shapes = self.t[f"shape:{name}"]
        lo, hi = self._offsets[name][i], self._offsets[name][i + 1]
        return self.t[name][lo:hi].view(*shapes[i].tolist())

    def gather(self, key: tuple[str, int], idx: list[int], length: int) -> torch.Tensor:
        """Features of examples ``idx``, zero-padded on token axes to ``length``: [B, ...] in fp32."""
        rows = []
        for i in idx:
            x = self.example(key, i).float()
            if key[0] in ("hidden", "embeddings"):
                x = F.pad(x, (0, 0, 0, length - x.shape[0]))
            elif key[0] in ("attention", "qk_relation", "vv_relation"):
                pad = length - x.shape[-1]
                x = F.pad(x, (0, pad, 0, pad))
            rows.append(x)
        return torch.stack(rows)

    def logits(self, n: int) -> torch.Tensor:
        return torch.stack([self.example(("logits", -1), i) for i in range(n)])


def _offsets(shapes: torch.Tensor) -> list[int]:
    sizes = shapes.prod(-1).tolist() if shapes.numel() else []
    out = [0]
    for s in sizes:
        out.append(out[-1] + int(s))
    return out


def _data_hash(enc: Encoded) -> str:
    h = hashlib.sha256()
    for i, ids in enumerate(enc.input_ids):
        h.update(torch.tensor(ids, dtype=torch.int32).numpy().tobytes())
        if enc.token_type_ids is not None:
            h.update(bytes(enc.token_type_ids[i]))
        h.update(b"|")
    return h.hexdigest()


def teacher_outputs(teacher, teacher_fp: str, enc: Encoded, pad_id: int, needs: set[tuple[str, int]],
                    relation_heads: int | None = None, batch_size: int = 64, use_cache: bool = True,
                    desc: str = "teacher") -> TeacherOutputs:
    """Teacher features for every example of ``enc`` (``needs`` always gets the logits), from disk when cached.

    Under torchrun only rank 0 runs the teacher and writes the file; the other ranks wait for it and read it."""
    needs = set(needs) | {("logits", -1)}
    key = hashlib.sha256(f"{teacher_fp}|{_data_hash(enc)}|{sorted(needs)}|{relation_heads}".encode()).hexdigest()
    path = cache_dir().parent / "teacher" / f"{key[:32]}.safetensors"
    batches = len(eval_batches(enc.lengths, batch_size))
    cached = _load(path) if use_cache else None
    if use_cache and _world_size() > 1:
        from accelerate import PartialState

        state = PartialState(cpu=not torch.cuda.is_available())
        computed = cached is None and state.is_main_process
        if computed:
            cached = compute(teacher, enc, pad_id, needs, relation_heads, batch_size, desc)
            _save(cached, path)
        state.wait_for_everyone()
        if cached is None:
            cached = _load(path)
        if cached is None:  # the cache is not shared or not writable: this rank runs the teacher itself
            computed, cached = True, compute(teacher, enc, pad_id, needs, relation_heads, batch_size, desc)
        return TeacherOutputs(cached, hit=not computed, batches_run=batches if computed else 0)
    if cached is not None:
        return TeacherOutputs(cached, hit=True, batches_run=0)
    tensors = compute(teacher, enc, pad_id, needs, relation_heads, batch_size, desc)
    if use_cache:
        _save(tensors, path)
    return TeacherOutputs(tensors, hit=False, batches_run=batches)


def _world_size() -> int:
    import os

    return int(os.environ.get("WORLD_SIZE", "1"))


def _load(path) -> dict[str, torch.Tensor] | None:
    if not path.is_file():
        return None
    from safetensors.torch import load_file

    try:
        return load_file(path)
    except Exception:  # a corrupt cache file is recomputed, never trusted
        return None


def _save(tensors: dict[str, torch.Tensor], path) -> None:
    try:
        atomic_save_file(tensors, path)
    except OSError:
        pass  # a read-only cache only costs time


@torch.no_grad()
def compute(teacher, enc: Encoded, pad_id: int, needs: set[tuple[str, int]], relation_heads: int | None,
            batch_size: int, desc: str = "teacher") -> dict[str, torch.Tensor]:
    teacher.eval()
    device = next(teacher.parameters()).device
    layer_needs = {k for k in needs if k[0] != "logits"}
    tap = FeatureTap(teacher, layer_needs, who="teacher")
    per: dict[tuple[str, int], list] = {k: [None] * len(enc) for k in needs}
    try:
        for idx in progress(eval_batches(enc.lengths, batch_size), desc=desc, unit="batch"):
            batch = collate(enc, idx, pad_id)
            inputs = {k: v.to(device) for k, v in model_inputs(teacher, batch).items()}
            out = tap.run(teacher, inputs)
            mask = inputs["attention_mask"]
            for key in needs:
                feats = out.logits.float() if key[0] == "logits" else tap.feature(key[0], key[1], mask, relation_heads)
                for row, i in enumerate(idx):
                    n = len(enc.input_ids[i])
                    x = feats[row]
                    if key[0] in ("hidden", "embeddings"):
                        x = x[:n]
                    elif key[0] in ("attention", "qk_relation", "vv_relation"):
                        x = x[:, :n, :n]
                    per[key][i] = x.detach().cpu()
    finally:
        tap.remove()
    tensors = {}
    for key, rows in per.items():
        dtype = torch.float32 if key[0] == "logits" else torch.float16
        tensors[_name(key)] = torch.cat([r.reshape(-1) for r in rows]).to(dtype) if rows else torch.zeros(0)
        tensors[f"shape:{_name(key)}"] = torch.tensor([list(r.shape) for r in rows], dtype=torch.int64)
    return tensors
