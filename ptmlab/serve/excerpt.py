"""Client-supplied values quoted in error messages: a short excerpt, escaped, so a message can neither grow with
the request (a 900 KB field name) nor carry what cannot be encoded or printed (lone surrogates, control codes)."""

from __future__ import annotations


def excerpt(value: object, limit: int = 40) -> str:
    """``value`` as a printable, UTF-8-encodable string of at most about ``limit`` characters (``...`` marks a cut)."""
    text = str(value)
    cut = len(text) > limit
    out = []
    for c in text[:limit]:
        if c.isprintable() and not 0xD800 <= ord(c) <= 0xDFFF:
            out.append(c)
        else:
            out.append(c.encode("unicode_escape").decode("ascii"))
    return "".join(out) + ("..." if cut else "")


def safe_message(message: str, limit: int = 1000) -> str:
    """A whole message made safe to send: lone surrogates and control codes escaped, at most ``limit`` characters."""
    return excerpt(message, limit)
