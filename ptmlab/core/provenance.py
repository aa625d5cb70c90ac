"""Where a run's numbers came from: versions, ptmlab's git commit, the command line, start and end times, device.

``RunDir.write_summary`` adds this as ``provenance`` to every summary.json. The command line is the ``ptmlab ...``
invocation, or for the Python API the call (``api_call``) beside the Python command that made it.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import shlex
import subprocess
import sys
import time
from pathlib import Path

_API_CALL: contextvars.ContextVar[str | None] = contextvars.ContextVar("ptmlab_api_call", default=None)


@contextlib.contextmanager
def api_call(text: str):
    """Record ``text`` (``ptmlab.finetune(model='tiny', ...)``) as the command of runs written inside the block."""
    token = _API_CALL.set(text)
    try:
        yield
    finally:
        _API_CALL.reset(token)


def command_line() -> str:
    argv = list(sys.argv)
    call = _API_CALL.get()
    python = shlex.join(["python", *argv]) if argv and argv[0] else "python"
    if call:
        return f"{call} (in {python})"
    if argv and (Path(argv[0]).name == "ptmlab" or Path(argv[0]).parts[-2:] == ("ptmlab", "__main__.py")):
        return shlex.join(["ptmlab", *argv[1:]])
    return python


@functools.cache
def git_commit() -> str | None:
    """ptmlab's commit when it runs from a git checkout (None for an installed release)."""
    root = Path(__file__).resolve().parents[2]
    if not (root / ".git").exists():
        return None
    try:
        out = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def _version(module: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(module)
    except metadata.PackageNotFoundError:
        return None


def device() -> str:
    torch = sys.modules.get("torch")  # never imported just for this
    if torch is not None and torch.cuda.is_available():
        return f"cuda ({torch.cuda.get_device_name(0)}, {torch.cuda.device_count()} device(s))"
    import os
    import platform

    return f"cpu ({platform.machine()}, {os.cpu_count()} cores)"


def iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def provenance(started: float | None = None) -> dict:
    """The provenance record of a run that started at ``started`` (epoch seconds) and ends now."""
    from ptmlab import __version__

    now = time.time()
    return {"ptmlab": __version__, "git_commit": git_commit(), "torch": _version("torch"),
            "transformers": _version("transformers"), "python": sys.version.split()[0],
            "command_line": command_line(), "started": iso(started if started is not None else now),
            "ended": iso(now), "device": device()}
