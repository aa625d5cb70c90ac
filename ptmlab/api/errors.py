"""Errors of the Python API in the caller's words: a message written for the command line names flags
(``--label-col``, ``--overwrite``); a caller of ``ptmlab.finetune(...)`` passed keywords (``label_col=``,
``overwrite=True``), so the message raised from an API verb names those instead."""

from __future__ import annotations

import contextlib
import dataclasses
import re
import typing

from ptmlab.core.errors import PtmlabError

# a flag, optionally followed by its value or placeholder (``--task NAME``, ``--max-length 3``)
_FLAG = re.compile(r"(?<![\w-])--(no-)?([a-z][a-z0-9]*(?:-[a-z0-9]+)*)(=| (?=[A-Z][A-Z0-9_.,]*\b)| (?=-?\d))?")
# a flag that is the subject of the sentence is named bare (``lr must be positive``), not as ``lr=``
_SUBJECT = re.compile(r" (must|is|are|expects|takes|needs|has|was|cannot|can|does|goes|applies|only)\b")
_CLI_ONLY = {"help", "config", "version"}


def bool_options(*classes) -> set[str]:
    """The boolean fields of config dataclasses (``overwrite``): named ``name=True`` in a message."""
    names: set[str] = set()
    for cls in classes:
        if dataclasses.is_dataclass(cls):
            hints = typing.get_type_hints(cls)
            names |= {f.name for f in dataclasses.fields(cls) if hints.get(f.name) is bool}
    return names


def as_keywords(message: str, booleans: set[str] = frozenset()) -> str:
    """``message`` with each command-line flag written as the keyword a Python caller passes. A message that
    already speaks of both ("data=... in Python, --dev-file on the command line") is left as it is."""
    if "in Python" in message:
        return message

    def keyword(m: re.Match) -> str:
        negated, name, joined = m.group(1), m.group(2).replace("-", "_"), m.group(3)
        if name in _CLI_ONLY:
            return m.group(0)
        if negated:
            return f"{name}=False"
        if name in booleans:
            return f"{name}=True"
        if joined:
            return f"{name}="
        if _SUBJECT.match(message, m.end()):
            return name
        return f"{name}=..."

    return _FLAG.sub(keyword, message)


@contextlib.contextmanager
def keyword_errors(*config_classes):
    """Re-raise a ``PtmlabError`` from inside the block with its flags written as keywords (``as_keywords``)."""
    try:
        yield
    except PtmlabError as e:
        text = str(e)
        spoken = as_keywords(text, bool_options(*config_classes) | {"overwrite", "trust_pickle", "resume"})
        if spoken == text:
            raise
        raise PtmlabError(spoken) from e
