"""Teacher outputs computed once per (teacher, data, features) and kept on disk, so every epoch and every later
run with the same teacher and data reads them instead of running the teacher; or, with ``use_cache=False``
(``--no-teacher-cache``), computed on the fly for each training batch and never stored.

On disk (``~/.cache/ptmlab/teacher``): ``KEY.bin`` holds raw bytes, ``KEY.index.safetensors`` for each feature the
byte offset of every example and its shape. The teacher's outputs are appended batch by batch as it runs, so memory
holds one batch whatever the data size; training reads back the examples of its batch with positioned reads
(``os.pread``), which leave the pages in the kernel's page cache rather than in the process's resident memory (a
memory map would count every page an epoch touched). The index is written last and names the data size, so a
killed computation leaves no entry that could be trusted.

The cached unit is whatever the training data's batch source indexes: a sentence (pair), a tagged sentence, or
one window of a question's context (extractive QA with a document stride). Stored per example, at its real length
n, only what a loss reads:
    logits [C] fp32 (token classification [n, C], extractive QA [n, 2]: start and end)
    hidden / embeddings [n, H];  cls [H]
    attention, qk_relation: whichever is smaller, the map [heads, n, n] or the projections q, k [2, n, H] from
    which the map is recomputed on reading, as the teacher's attention computes it (softmax(q k^T / sqrt(d)));
    vv_relation: the map or v [1, n, H].
Features in the teacher's compute precision when it runs in fp16 or bf16, otherwise fp16 (half the size).
``estimate_bytes`` gives the exact size before any work; a cache that would not fit on the free disk is a
one-line error offering the on-the-fly mode.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from ptmlab.core.errors import PtmlabError
from ptmlab.core.progress import progress
from ptmlab.data.batching import collate, eval_batches
from ptmlab.data.encode import Encoded, cache_dir
from ptmlab.distill.features import FeatureTap, output_logits, relation
from ptmlab.models.loader import model_inputs

PLAIN, MAP, PROJ = 0, 1, 2  # how one example's feature is stored (column 0 of its shape row)
MAPS = ("attention", "qk_relation", "vv_relation")
TOKENS = ("hidden", "embeddings")
GiB = 1024**3


def _name(key: tuple[str, int]) -> str:
    return f"{key[0]}@{key[1]}"


def _key(name: str) -> tuple[str, int]:
    f, _, layer = name.partition("@")
    return f, int(layer)


# ------------------------------------------------------------------------------------------------- sizes
class Shapes:
    """What the teacher's outputs look like: width, heads, relation heads, output width, stored precision."""

    def __init__(self, teacher, relation_heads: int | None = None):
        c = teacher.config
        self.hidden = getattr(c, "hidden_size", getattr(c, "dim", 0))
        self.heads = getattr(c, "num_attention_heads", getattr(c, "n_heads", 1)) or 1
        self.rel_heads = relation_heads or self.heads
        sentence = getattr(teacher, "pooling", None) is not None  # a SentenceEncoder's outputs are its vectors
        head = type(teacher).__name__
        self.qa = head.endswith("ForQuestionAnswering")
        self.per_token = self.qa or head.endswith("ForTokenClassification")  # logits at every position
        self.out = self.hidden if sentence else 2 if self.qa else getattr(c, "num_labels", 2)
        p = next(teacher.parameters(), None)
        self.dtype = p.dtype if p is not None and p.dtype in (torch.float16, torch.bfloat16) else torch.float16

    def heads_of(self, feature: str) -> int:
        return self.heads if feature == "attention" else self.rel_heads

    def form(self, feature: str, n: int) -> int:
        """MAP or PROJ for a map feature of an n-token example: the smaller of the two."""
        h = self.heads_of(feature)
        proj = (1 if feature == "vv_relation" else 2) * self.hidden
        return MAP if h * n <= proj else PROJ

    def elements(self, feature: str, n: np.ndarray) -> np.ndarray:
        """Stored elements per example for n tokens (vectorised over examples)."""
        n = np.asarray(n, dtype=np.int64)
        if feature == "logits":
            return n * self.out if self.per_token else np.full_like(n, self.out)
        if feature == "cls":
            return np.full_like(n, self.hidden)
        if feature in TOKENS:
            return n * self.hidden
        h, m = self.heads_of(feature), (1 if feature == "vv_relation" else 2)
        return np.minimum(h * n * n, m * n * self.hidden)

    def itemsize(self, feature: str) -> int:
        return 4 if feature == "logits" else torch.finfo(self.dtype).bits // 8


def estimate_bytes(lengths: list[int], needs: set[tuple[str, int]], shapes: Shapes) -> int:
    """The exact size on disk of the outputs ``needs`` (plus the logits) asks for, for examples of these lengths."""
    n = np.asarray(lengths, dtype=np.int64)
    keys = set(needs) | {("logits", -1)}
    return int(sum(int(shapes.elements(f, n).sum()) * shapes.itemsize(f) for f, _ in keys))


def _gib(b: int) -> str:
    return f"{b / GiB:.1f} GiB" if b >= GiB / 10 else f"{b / 1024**2:.1f} MiB"


def teacher_dir() -> Path:
    return cache_dir().parent / "teacher"


def check_fits(parts: list[tuple[Encoded, set[tuple[str, int]]]], shapes: Shapes, use_cache: bool,
               what: str = "teacher outputs") -> int:
    """Before any work: the cache for every (data, needs) part must fit on the free disk (else a one-line error
    offering --no-teacher-cache); what stays in memory (the index) is warned about when it is large. Returns the
    bytes the cache needs on disk (0 when computing on the fly or already cached)."""
    if not use_cache:
        return 0
    need = sum(estimate_bytes(e.lengths, nd, shapes) for e, nd in parts)
    folder = teacher_dir()
    probe = folder if folder.is_dir() else next((p for p in folder.parents if p.is_dir()), Path("/"))
    free = shutil.disk_usage(probe).free
    if need > free:
        n = sum(len(e) for e, _ in parts)
        raise PtmlabError(f"{what} for {n} examples need {_gib(need)} on disk but {probe} has {_gib(free)} free: "
                          f"pass --no-teacher-cache to compute the teacher on the fly (it then runs every step) "
                          f"or free disk space")
    resident = sum(len(e) * (len(nd) + 1) * 48 for e, nd in parts)  # index rows, as read back per example
    budget = _memory_budget()
    if resident > budget:
        print(f"warning: the {what} index holds {_gib(resident)} in memory, more than the {_gib(budget)} budget "
              f"(PTMLAB_MEMORY_BUDGET_GB): --no-teacher-cache keeps nothing", file=sys.stderr)
    return need


def _memory_budget() -> int:
    env = os.environ.get("PTMLAB_MEMORY_BUDGET_GB")
    if env:
        return int(float(env) * GiB)
    try:
        avail = next(int(line.split()[1]) * 1024 for line in open("/proc/meminfo", encoding="ascii")
                     if line.startswith("MemAvailable:"))
    except (OSError, StopIteration, ValueError):
        avail = 16 * GiB
    return min(8 * GiB, avail // 2)


# ---------------------------------------------------------------------------------------- reading back
class _Reader:
    """Per-example reads of features from the cache, turned back into what a loss compares."""

    heads: dict[str, int]

    def _to_feature(self, key: tuple[str, int], form: int, x: torch.Tensor) -> torch.Tensor:
        if form != PROJ:
            return x.float()
        a = x[0].float()[None]
        b = (x[1] if x.shape[0] > 1 else x[0]).float()[None]
        heads = self.heads[key[0]]
        return relation(a, b, heads, torch.ones(1, a.shape[1], dtype=torch.long))[0]

    def gather(self, key: tuple[str, int], idx: list[int], length: int) -> torch.Tensor:
        """Features of examples ``idx``, zero-padded on token axes to ``length``: [B, ...] in fp32."""
        rows = []
        for i in idx:
            x = self.example(key, i)
            if key[0] in TOKENS or x.dim() == 2:  # logits per token too
                x = F.pad(x, (0, 0, 0, length - x.shape[0]))
            elif key[0] in MAPS:
                pad = length - x.shape[-1]
                x = F.pad(x, (0, pad, 0, pad))
            rows.append(x)
        return torch.stack(rows)

    def logits(self, n: int) -> torch.Tensor:
        """Every example's logits [n, C] (sentence tasks: one small row per example)."""
        return torch.cat([self.gather(("logits", -1), list(range(s, min(s + 4096, n))), 0)
                          for s in range(0, n, 4096)]) if n else torch.zeros(0)


class TeacherOutputs(_Reader):
    """A cache entry on disk, read per example with positioned reads."""

    def __init__(self, path: Path, hit: bool, batches_run: int):
        from safetensors import safe_open

        self.path, self.hit, self.batches_run = path, hit, batches_run  # teacher passes this call made (0: hit)
        with safe_open(str(_index_path(path)), "pt") as f:
            meta = f.metadata()
            self.offsets = {k[len("offsets:"):]: f.get_tensor(k).numpy() for k in f.keys() if k.startswith("off")}
            self.shape_rows = {k[len("shapes:"):]: f.get_tensor(k).numpy() for k in f.keys() if k.startswith("sh")}
        self.dtypes = {k[len("dtype:"):]: getattr(torch, v) for k, v in meta.items() if k.startswith("dtype:")}
        self.heads = {"attention": int(meta["heads"]), "qk_relation": int(meta["rel_heads"]),
                      "vv_relation": int(meta["rel_heads"])}
        self._fd = os.open(path, os.O_RDONLY)

    def example(self, key: tuple[str, int], i: int) -> torch.Tensor:
        name = _name(key)
        lo, hi = int(self.offsets[name][2 * i]), int(self.offsets[name][2 * i + 1])
        row = self.shape_rows[name][i]
        buf = bytearray(hi - lo)
        if hi > lo and os.preadv(self._fd, [buf], lo) != hi - lo:
            raise PtmlabError(f"teacher cache '{self.path}' is truncated: delete it and run again")
        x = torch.frombuffer(buf, dtype=self.dtypes[name]) if buf else torch.zeros(0, dtype=self.dtypes[name])
        dims = [int(d) for d in row[1:] if d > 0]
        return self._to_feature(key, int(row[0]), x.view(*dims))

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown
            pass

    def __getstate__(self):  # a pickled copy (data-loader workers) reopens the file
        d = dict(self.__dict__)
        d["_fd"] = None
        return d

    def __setstate__(self, d):
        self.__dict__.update(d)
        self._fd = os.open(self.path, os.O_RDONLY)


class LiveTeacher(_Reader):
    """The on-the-fly mode: the teacher runs on each training batch when a loss first asks for it; nothing kept
    but that batch's features."""

    hit = False

    def __init__(self, teacher, enc: Encoded, pad_id: int, needs: set[tuple[str, int]], shapes: Shapes,
                 batch_size: int):
        self.teacher, self.enc, self.pad_id, self.batch_size = teacher, enc, pad_id, batch_size
        self.needs = set(needs) | {("logits", -1)}
        self.relation_heads = shapes.rel_heads
        self.heads = {"attention": shapes.heads, "qk_relation": shapes.rel_heads, "vv_relation": shapes.rel_heads}
        self.tap = FeatureTap(teacher, {k for k in self.needs if k[0] != "logits"}, who="teacher")
        self.batches_run = 0
        self._idx: list[int] | None = None
        self._feats: dict = {}
        self._all_logits: torch.Tensor | None = None

    def _run(self, idx: list[int]) -> None:
        self.run_batch(batch_of(self.enc, idx, self.pad_id), idx)

    @torch.no_grad()
    def run_batch(self, batch: dict, idx: list[int]) -> None:
        """The teacher's features for one batch of input tensors, kept for ``gather(key, idx, ...)`` (the
        transformers Trainer bridge hands its batches in here)."""
        self.teacher.eval()
        device = next(self.teacher.parameters()).device
        inputs = {k: v.to(device) for k, v in model_inputs(self.teacher, batch).items()}
        out = self.tap.run(self.teacher, inputs)
        mask = inputs["attention_mask"]
        m = mask.float()
        self._feats = {}
        for k in self.needs:  # padding zeroed, as in the cache
            x = (output_logits(out) if k[0] == "logits"
                 else self.tap.feature(k[0], k[1], mask, self.relation_heads)).float()
            if k[0] in TOKENS or x.dim() == 3:  # logits per token too
                x = x * m[:, :, None]
            elif k[0] in MAPS:
                x = x * m[:, None, :, None] * m[:, None, None, :]
            self._feats[k] = x
        self.tap.records = {}
        self._idx = list(idx)
        self.batches_run += 1

    def gather(self, key: tuple[str, int], idx: list[int], length: int) -> torch.Tensor:
        if self._idx != list(idx):
            self._run(list(idx))
        x = self._feats[key]
        if key[0] in TOKENS or (key[0] == "logits" and x.dim() == 3):
            x = F.pad(x, (0, 0, 0, length - x.shape[1])) if length >= x.shape[1] else x[:, :length]
        elif key[0] in MAPS:
            pad = length - x.shape[-1]
            x = F.pad(x, (0, pad, 0, pad)) if pad >= 0 else x[..., :length, :length]
        return x

    def logits(self, n: int) -> torch.Tensor:
        if self._all_logits is None:
            parts = {}
            with torch.no_grad():
                self.teacher.eval()
                device = next(self.teacher.parameters()).device
                for idx in eval_batches(self.enc.lengths, self.batch_size):
                    batch = batch_of(self.enc, idx, self.pad_id)
                    inputs = {k: v.to(device) for k, v in model_inputs(self.teacher, batch).items()}
                    out = output_logits(self.teacher(**inputs)).float().cpu()
                    parts.update(zip(idx, out, strict=True))
                    self.batches_run += 1
            self._all_logits = torch.stack([parts[i] for i in range(len(self.enc))]) if parts else torch.zeros(0)
        return self._all_logits[:n]


# ------------------------------------------------------------------------------------------- computing
def batch_of(enc, idx: list[int], pad_id: int) -> dict:
    """The input tensors of examples ``idx``, as the training loop builds them: the data's own ``make_batch``
    (tagged sentences, QA windows) or the sentence collation."""
    make = getattr(enc, "make_batch", None)
    return make(idx) if make is not None else collate(enc, idx, pad_id)


def _data_hash(enc: Encoded) -> str:
    h = hashlib.sha256()
    types = getattr(enc, "token_type_ids", None)
    for i, ids in enumerate(enc.input_ids):
        h.update(np.asarray(ids, dtype=np.int32).tobytes())
        if types is not None:
            h.update(bytes(types[i]))
        h.update(b"|")
    return h.hexdigest()


def _index_path(path: Path) -> Path:
    return path.with_suffix(".index.safetensors")


def teacher_outputs(teacher, teacher_fp: str, enc: Encoded, pad_id: int, needs: set[tuple[str, int]],
                    relation_heads: int | None = None, batch_size: int = 64, use_cache: bool = True,
                    desc: str = "teacher"):
    """Teacher features for every example of ``enc`` (``needs`` always gets the logits): a ``TeacherOutputs`` on
    disk (computed now or found), or a ``LiveTeacher`` when ``use_cache`` is off.

    Under torchrun only rank 0 runs the teacher and writes the file; the other ranks wait for it and read it."""
    shapes = Shapes(teacher, relation_heads)
    if not use_cache:
        return LiveTeacher(teacher, enc, pad_id, needs, shapes, batch_size)
    needs = set(needs) | {("logits", -1)}
    key = hashlib.sha256(f"v2|{teacher_fp}|{_data_hash(enc)}|{sorted(needs)}|{relation_heads}|{shapes.dtype}"
                         .encode()).hexdigest()
    path = teacher_dir() / f"{key[:32]}.bin"
    batches = len(eval_batches(enc.lengths, batch_size))
    found = _open(path, hit=True)
    if _world_size() > 1:
        from accelerate import PartialState

        state = PartialState(cpu=not torch.cuda.is_available())
        computed = found is None and state.is_main_process
        if computed:
            check_fits([(enc, needs)], shapes, True, desc)
            computed = compute(teacher, enc, pad_id, needs, shapes, batch_size, desc, path)
        state.wait_for_everyone()
        found = found or _open(path, hit=not computed, batches_run=batches if computed else 0)
        if found is None:  # the cache is not shared or not writable: this rank runs the teacher as it trains
            return LiveTeacher(teacher, enc, pad_id, needs, shapes, batch_size)
        return found
    if found is not None:
        return found
    check_fits([(enc, needs)], shapes, True, desc)
    if not compute(teacher, enc, pad_id, needs, shapes, batch_size, desc, path):
        print(f"note: the teacher cache folder {path.parent} is not writable: the teacher runs on the fly",
              file=sys.stderr)
        return LiveTeacher(teacher, enc, pad_id, needs, shapes, batch_size)
    return _open(path, hit=False, batches_run=batches)


def _world_size() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


def _open(path: Path, hit: bool, batches_run: int = 0) -> TeacherOutputs | None:
    """The entry at ``path`` when its index is complete and its data has the size the index names."""
    index = _index_path(path)
    if not (index.is_file() and path.is_file()):
        return None
    try:
        from safetensors import safe_open

        with safe_open(str(index), "pt") as f:
            size = int(f.metadata()["bytes"])
        if path.stat().st_size != size:
            return None
        return TeacherOutputs(path, hit, batches_run)
    except Exception:  # a corrupt cache entry is recomputed, never trusted
        return None


class _Writer:
    """Appends examples' features to ``path``.partial and builds the index; ``finish`` publishes both."""

    def __init__(self, path: Path, names: list[str], n: int, shapes: Shapes):
        self.path, self.n, self.shapes = path, n, shapes
        for stale in path.parent.glob(path.name + ".partial*"):  # left by a computation that was killed
            if not _alive(stale.suffix.removeprefix(".partial")):
                stale.unlink(missing_ok=True)
        self.tmp = path.with_name(path.name + f".partial{os.getpid()}")
        self.f = open(self.tmp, "wb")
        self.pos = 0
        self.starts = {k: np.full(n, -1, dtype=np.int64) for k in names}
        self.sizes = {k: np.zeros(n, dtype=np.int64) for k in names}
        self.rows = {k: np.zeros((n, 4), dtype=np.int64) for k in names}
        self.dtypes: dict[str, torch.dtype] = {}

    def put(self, name: str, i: int, form: int, x: torch.Tensor) -> None:
        data = x.detach().to("cpu").contiguous()
        self.dtypes[name] = data.dtype
        raw = data.reshape(-1).view(torch.uint8).numpy()
        self.f.write(memoryview(raw))
        self.starts[name][i], self.sizes[name][i] = self.pos, raw.nbytes
        self.rows[name][i, 0] = form
        self.rows[name][i, 1:1 + data.dim()] = list(data.shape)
        self.pos += raw.nbytes

    def finish(self, relation_heads: int) -> None:
        from ptmlab.core.io import atomic_save_file

        self.f.flush()
        os.fsync(self.f.fileno())
        self.f.close()
        tensors, meta = {}, {"bytes": str(self.pos), "heads": str(self.shapes.heads), "rel_heads": str(relation_heads)}
        for name, starts in self.starts.items():
            if (starts < 0).any():
                raise RuntimeError(f"teacher cache: {name} missing for some examples")
            tensors[f"offsets:{name}"] = torch.from_numpy(_offsets(starts, self.sizes[name]))
            tensors[f"shapes:{name}"] = torch.from_numpy(self.rows[name])
            meta[f"dtype:{name}"] = str(self.dtypes.get(name, torch.float16)).removeprefix("torch.")
        os.replace(self.tmp, self.path)
        atomic_save_file(tensors, _index_path(self.path), metadata=meta)

    def abort(self) -> None:
        try:
            self.f.close()
        finally:
            self.tmp.unlink(missing_ok=True)


def _alive(pid: str) -> bool:
    try:
        os.kill(int(pid), 0)
    except (ValueError, ProcessLookupError):
        return False
    except PermissionError:
        return True
    return True


def _offsets(starts: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Example i's bytes are [out[2i], out[2i + 1]): examples are written in batch order, not index order."""
    out = np.empty(2 * len(starts), dtype=np.int64)
    out[0::2], out[1::2] = starts, starts + sizes
    return out


@torch.no_grad()
def compute(teacher, enc: Encoded, pad_id: int, needs: set[tuple[str, int]], shapes: Shapes, batch_size: int,
            desc: str, path: Path) -> bool:
    """Run the teacher over ``enc`` batch by batch, appending each batch's outputs to the cache entry at ``path``;
    False when the cache folder cannot be written."""
    teacher.eval()
    device = next(teacher.parameters()).device
    names = {k: _name(k) for k in needs}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        writer = _Writer(path, list(names.values()), len(enc), shapes)
    except OSError:
        return False
    tap = FeatureTap(teacher, {k for k in needs if k[0] != "logits"}, who="teacher")
    try:
        for idx in progress(eval_batches(enc.lengths, batch_size), desc=desc, unit="batch"):
            batch = batch_of(enc, idx, pad_id)
            inputs = {k: v.to(device) for k, v in model_inputs(teacher, batch).items()}
            out = tap.run(teacher, inputs)
            mask = inputs["attention_mask"]
            for key, name in names.items():
                _store_batch(writer, tap, out, key, name, idx, enc, mask, shapes)
            tap.records = {}
        writer.finish(shapes.rel_heads)
    except OSError:
        writer.abort()
        return False
    except BaseException:
        writer.abort()
        raise
    finally:
        tap.remove()
    return True


def _store_batch(writer: _Writer, tap: FeatureTap, out, key, name, idx, enc: Encoded, mask, shapes: Shapes) -> None:
    feature, layer = key
    lengths = [len(enc.input_ids[i]) for i in idx]
    if feature == "logits":
        logits = output_logits(out)
        for row, (i, n) in enumerate(zip(idx, lengths, strict=True)):
            writer.put(name, i, PLAIN, (logits[row, :n] if shapes.per_token else logits[row]).float())
        return
    dtype = shapes.dtype
    if feature not in MAPS:
        feats = tap.feature(feature, layer, mask)
        for row, (i, n) in enumerate(zip(idx, lengths, strict=True)):
            x = feats[row] if feature == "cls" else feats[row, :n]
            writer.put(name, i, PLAIN, x.to(dtype))
        return
    forms = [shapes.form(feature, n) for n in lengths]
    maps = tap.feature(feature, layer, mask, shapes.rel_heads) if MAP in forms else None
    raw = ("v",) if feature == "vv_relation" else ("q", "k")
    for row, (i, n, form) in enumerate(zip(idx, lengths, forms, strict=True)):
        if form == MAP:
            writer.put(name, i, MAP, maps[row, :, :n, :n].to(dtype))
        else:
            writer.put(name, i, PROJ, torch.stack([tap.records[(r, layer)][row, :n] for r in raw]).to(dtype))
