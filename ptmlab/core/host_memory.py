"""Host memory on a CPU: keep freed memory in the process instead of handing it back to the kernel (training,
evaluation, serving).

glibc's malloc serves every block above its mmap threshold (at most 32 MB) with a fresh ``mmap`` and returns it on
``free``; it also trims the top of its heap back to the kernel. A CPU training step allocates and frees the same
large buffers every step (the dense gradient of the word-embedding matrix alone is 47 MB for minilm, 94 MB for
mpnet; activations and autocast's weight copies besides), so each step touches tens of thousands of fresh pages:
a page fault and a kernel zeroing per 4 KB page, measured at 30,000-40,000 faults per minilm step. While
``reuse_host_memory()`` is active malloc takes every block from its heap (``M_MMAP_MAX`` 0) and keeps up to 1 GiB
of free heap (``M_TRIM_THRESHOLD``), so the next step reuses the same pages. On exit both settings go back to
glibc's defaults and the free heap is trimmed (glibc's dynamic mmap threshold stays off for the rest of the
process: setting any of these turns it off, and glibc offers no way back). The process's resident memory stays at
its peak while training (what the pages were needed for anyway).

Used by the training loop (``--no-reuse-host-memory`` turns it off), ``predict_logits`` (evaluation, prediction)
and ``ptmlab serve`` on a CPU (inference measured by ``benchmarks/host_memory.py --what inference``). Nothing
happens outside glibc (macOS, Windows, musl) or with ``enabled=False``; nested blocks follow the outermost one and
apply once.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import platform
import threading
from contextlib import contextmanager
from functools import lru_cache

M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4          # mallopt parameters (malloc.h)
DEFAULT_TRIM_THRESHOLD, DEFAULT_MMAP_MAX = 128 * 1024, 65536
KEEP_FREE = 1 << 30                             # free heap kept while active

_lock = threading.Lock()
_blocks: list[bool] = []  # one entry per active block: whether the setting applies in it


@lru_cache(maxsize=1)
def _glibc():
    """The C library when it is glibc (with ``mallopt``), else None (looked up once)."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return libc if hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") else None
    except OSError:
        return None


@contextmanager
def reuse_host_memory(enabled: bool = True):
    """Within the block, freed host memory stays in the process (glibc only). Yields whether it applies. A nested
    block follows the outermost one: evaluation inside a training run with ``--no-reuse-host-memory`` stays off."""
    with _lock:
        applied = _blocks[0] if _blocks else bool(enabled and _glibc() is not None)
        if applied and not _blocks:
            _glibc().mallopt(M_MMAP_MAX, 0)
            _glibc().mallopt(M_TRIM_THRESHOLD, KEEP_FREE)
        _blocks.append(applied)
    try:
        yield applied
    finally:
        with _lock:
            _blocks.pop()
            if applied and not _blocks:
                libc = _glibc()
                libc.mallopt(M_MMAP_MAX, DEFAULT_MMAP_MAX)
                libc.mallopt(M_TRIM_THRESHOLD, DEFAULT_TRIM_THRESHOLD)
                libc.malloc_trim(0)
