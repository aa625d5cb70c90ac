"""Text that looks alike: letters of other scripts drawn like Latin ones, and the skeleton two look-alike strings
share. The extraction detector reads queries through it; key names are told apart by it."""

from __future__ import annotations

import unicodedata

# the common homoglyphs of Unicode's confusables list: Cyrillic and Greek letters drawn like Latin ones
LOOKALIKES = str.maketrans({
    "а": "a", "в": "b", "е": "e", "ё": "e", "к": "k", "м": "m", "н": "h", "о": "o", "р": "p", "с": "c", "т": "t",
    "у": "y", "х": "x", "і": "i", "ї": "i", "ј": "j", "ѕ": "s", "ԁ": "d", "ԛ": "q", "ԝ": "w", "һ": "h", "ӏ": "l",
    "α": "a", "β": "b", "ε": "e", "η": "n", "ι": "i", "κ": "k", "ν": "v", "ο": "o", "ρ": "p", "τ": "t", "υ": "u",
    "χ": "x", "ɡ": "g", "ı": "i", "ȷ": "j", "ℓ": "l"})


def skeleton(text: str) -> str:
    """What ``text`` looks like: compatibility forms folded (NFKC), accents and invisible format characters
    dropped, case folded and look-alike letters read as Latin."""
    text = unicodedata.normalize("NFKC", text)
    text = "".join(c for c in unicodedata.normalize("NFD", text)
                   if unicodedata.category(c) not in ("Mn", "Cf", "Cc") or c in "\n\t")
    return text.casefold().translate(LOOKALIKES)
