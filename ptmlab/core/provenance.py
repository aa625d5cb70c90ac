"""Where a run's numbers came from: versions, ptmlab's git commit (and whether the checkout was modified), the
command line, the seed, the training data's fingerprint, the hub commit of a hub model, start and end times, device.

``RunDir.write_summary`` adds this as ``provenance`` to every summary.json. The command line is the ``ptmlab ...``
invocation, or for the Python API the call (``api_call``) beside the Python command that made it. The training
data's record (``data``: where it was read from, its fingerprint, its number of examples) comes from the task data
(``TaskData.provenance()``); the model's hub commit from the directory the model was loaded from, when that is a
snapshot of the Hugging Face hub cache (``.../models--OWNER--NAME/snapshots/COMMIT``).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import re
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


# options whose values are secrets: written as *** wherever a command line or call is recorded
SECRET_OPTIONS = ("key", "api_key", "token", "hf_token", "password", "secret", "victim_key")
_SECRET_FLAGS = {"--" + name.replace("_", "-") for name in SECRET_OPTIONS}
_URL_CREDENTIALS = re.compile(r"(\b[a-zA-Z][a-zA-Z0-9+.-]*://)[^/@\s'\"]+@")
_SECRET_KEYWORD = re.compile(r"\b(" + "|".join(SECRET_OPTIONS) + r")=('[^']*'|\"[^\"]*\"|\S+?)(?=[,)\s]|$)")


def redact_url(text: str) -> str:
    """``text`` with the credentials of every URL in it (``https://user:password@host``) written as ``***``."""
    return _URL_CREDENTIALS.sub(r"\1***@", text)


def redact_argv(argv: list[str]) -> list[str]:
    """A command line with the values of secret flags (``--key K``, ``--key=K``) and URL credentials as ``***``."""
    out, hide = [], False
    for arg in argv:
        flag = arg.split("=", 1)[0]
        if hide:
            out.append("***")
        elif flag in _SECRET_FLAGS and "=" in arg:
            out.append(f"{flag}=***")
        else:
            out.append(redact_url(arg))
        hide = not hide and arg in _SECRET_FLAGS
    return out


def redact_call(text: str) -> str:
    """An API call (``ptmlab.x(..., key='K')``) with secret keywords and URL credentials as ``***``."""
    return redact_url(_SECRET_KEYWORD.sub(r"\1='***'", text))


def command_line() -> str:
    """The command that made the run, secrets written as ``***``."""
    argv = redact_argv(list(sys.argv))
    call = _API_CALL.get()
    python = shlex.join(["python", *argv]) if argv and argv[0] else "python"
    if call:
        return f"{redact_call(call)} (in {python})"
    if argv and (Path(argv[0]).name == "ptmlab" or Path(argv[0]).parts[-2:] == ("ptmlab", "__main__.py")):
        return shlex.join(["ptmlab", *argv[1:]])
    return python


def git_state(root: str | Path) -> tuple[str | None, bool | None]:
    """(commit, dirty) of the git checkout at ``root``: dirty when a tracked file differs from the commit (staged or
    not; untracked files do not count). (None, None) outside a checkout or without git."""
    if not (Path(root) / ".git").exists():
        return None, None
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=5)
        if head.returncode != 0 or not head.stdout.strip():
            return None, None
        status = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                                capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None, None
    dirty = bool(status.stdout.strip()) if status.returncode == 0 else None
    return head.stdout.strip(), dirty


@functools.cache
def _ptmlab_git_state() -> tuple[str | None, bool | None]:
    return git_state(Path(__file__).resolve().parents[2])


def git_commit() -> str | None:
    """ptmlab's commit when it runs from a git checkout (None for an installed release)."""
    return _ptmlab_git_state()[0]


def git_dirty() -> bool | None:
    """Whether ptmlab's checkout has changes to tracked files (None for an installed release)."""
    return _ptmlab_git_state()[1]


_SNAPSHOT = re.compile(r"^[0-9a-f]{40}$")


def hub_commit(model) -> str | None:
    """The hub commit a model was loaded from: ``model`` (a model object, whose config records the directory it was
    read from, or that directory) lies in the hub cache as ``models--OWNER--NAME/snapshots/COMMIT``. None for zoo
    models, local directories and models built from a config alone."""
    if model is None:
        return None
    if isinstance(model, str | Path):
        path = str(model)
    else:
        config = getattr(model, "config", None)
        path = getattr(config, "_name_or_path", None) or getattr(model, "name_or_path", None)
    if not path or not isinstance(path, str):
        return None
    p = Path(path)
    if p.parent.name == "snapshots" and p.parent.parent.name.startswith("models--") and _SNAPSHOT.match(p.name):
        return p.name
    return None


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


def data_record(data) -> dict | None:
    """The training data's record: a dict as given, or what a task data object reports (``provenance()``)."""
    if data is None or isinstance(data, dict):
        return data
    report = getattr(data, "provenance", None)
    return report() if callable(report) else None


def provenance(started: float | None = None, *, seed: int | None = None, data=None, model=None) -> dict:
    """The provenance record of a run that started at ``started`` (epoch seconds) and ends now: ``seed`` (the
    run's seed), ``data`` (its training data: a ``TaskData`` or its record) and ``model`` (the trained model, or
    the directory it was loaded from) as the caller knows them."""
    from ptmlab import __version__

    now = time.time()
    return {"ptmlab": __version__, "git_commit": git_commit(), "git_dirty": git_dirty(),
            "torch": _version("torch"), "transformers": _version("transformers"), "datasets": _version("datasets"),
            "peft": _version("peft"), "accelerate": _version("accelerate"), "python": sys.version.split()[0],
            "command_line": command_line(), "seed": seed, "data": data_record(data),
            "model_commit": hub_commit(model), "started": iso(started if started is not None else now),
            "ended": iso(now), "device": device()}
