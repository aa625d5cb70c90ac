"""Extraction-query detector: how far a query's content words are from natural text.

RANDOM extraction queries draw words uniformly from the 10,000 most frequent English words, so their content words
have a tell-tale frequency profile: almost none rarer than the top-10k, few very common ones, a narrow spread.
Function words and punctuation are ignored, so padding a query with "the", "of", "and" and a final period (the
cheap adaptive attack that fooled the first detector) changes nothing. Texts with fewer than ``MIN_CONTENT`` known
English content words (short or non-English texts) are not scored at all, instead of being scored as suspicious.

The features read the text as the model reads it and then some (``canonical``): compatibility forms folded
(NFKC: full-width letters, ligatures), accents stripped and case folded (what an uncased BERT tokenizer does
before the model sees the text), invisible format characters (zero-width spaces and joiners) dropped, letters
that look Latin in other scripts (Cyrillic "а", Greek "ο") read as Latin, and punctuation inside a word removed
("hou.se"). So rephrasings that leave the model's input unchanged, or readable, cannot make a query unjudged.

A logistic regression over these features gives each query a score; the server keeps a moving average per key
(``Store.settle``) and acts on it by ``--detector-action``. The default detector is fitted once on the built-in
tweets against RANDOM queries and saved as JSON (never pickled) under the state directory.
"""

from __future__ import annotations

import json
import math
import random
import re
from pathlib import Path

import numpy as np

from ptmlab.core.errors import PtmlabError
from ptmlab.core.io import atomic_write_json
from ptmlab.data.wordlists import FUNCTION_WORDS
from ptmlab.serve.confusables import skeleton

WORD = re.compile(r"[^\W\d_]+(?:'[^\W\d_]+)?")
FEATURES = ("mean_zipf", "std_zipf", "frac_common", "frac_rare", "frac_unknown")
MIN_CONTENT = 3
VERSION = 3  # features read canonical text


_INSIDE_WORD = re.compile(r"(?<=[^\W\d_])[^\w\s']+(?=[^\W\d_])")


def canonical(text: str) -> str:
    """The text as the detector judges it (see the module docstring): folded, unaccented, lower-case, without
    invisible characters, homoglyphs read as Latin and punctuation inside words resolved (``_rejoin``)."""
    return re.sub(r"\S+", _rejoin, skeleton(text))


def _rejoin(m: re.Match) -> str:
    """A token with punctuation between its letters: one word when the joined letters are a word ("hou.se"), else
    the parts ("well-known" stays two known words where "wellknown" is none)."""
    from wordfreq import zipf_frequency

    token = m.group(0)
    if not _INSIDE_WORD.search(token):
        return token
    joined = _INSIDE_WORD.sub("", token)
    core = joined.strip(".,;:!?\"()[]{}")
    return joined if zipf_frequency(core, "en") > 0 else _INSIDE_WORD.sub(" ", token)


def features(text: str) -> list[float] | None:
    """Frequency profile of the text's content words; None when there are too few known ones to judge."""
    from wordfreq import zipf_frequency

    words = [w for w in WORD.findall(canonical(text)) if len(w) > 1 and w not in FUNCTION_WORDS]
    z = np.array([zipf_frequency(w, "en") for w in words]) if words else np.zeros(0)
    known = z[z > 0]
    if len(known) < MIN_CONTENT or len(known) < 0.5 * len(z):
        return None
    return [float(known.mean()), float(known.std()), float((known >= 5.0).mean()), float((known < 3.5).mean()),
            float((z == 0).mean())]


class QueryDetector:
    """P(text is a RANDOM-style extraction query), or None when the text cannot be judged."""

    def __init__(self, coef: list[float], intercept: float, mean: list[float], scale: list[float]):
        self.coef = np.array(coef)
        self.intercept = intercept
        self.mean = np.array(mean)
        self.scale = np.array(scale)

    @classmethod
    def fit(cls, real: list[str], random_queries: list[str]) -> QueryDetector:
        from sklearn.linear_model import LogisticRegression

        rows, y = [], []
        for label, texts in ((0, real), (1, random_queries)):
            for t in texts:
                f = features(t)
                if f is not None:
                    rows.append(f)
                    y.append(label)
        x = np.array(rows)
        mean, scale = x.mean(0), x.std(0) + 1e-6
        lr = LogisticRegression(max_iter=1000).fit((x - mean) / scale, np.array(y))
        return cls(lr.coef_[0].tolist(), float(lr.intercept_[0]), mean.tolist(), scale.tolist())

    def score(self, texts: list[str]) -> list[float | None]:
        out: list[float | None] = []
        for t in texts:
            f = features(t)
            if f is None:
                out.append(None)
                continue
            z = float(((np.array(f) - self.mean) / self.scale) @ self.coef + self.intercept)
            out.append(1.0 / (1.0 + math.exp(-max(-50.0, min(50.0, z)))))
        return out

    def save(self, path: str | Path) -> None:
        atomic_write_json(path, {"version": VERSION, "features": list(FEATURES), "coef": self.coef.tolist(),
                                 "intercept": self.intercept, "mean": self.mean.tolist(),
                                 "scale": self.scale.tolist()})

    @classmethod
    def load(cls, path: str | Path) -> QueryDetector:
        try:
            d = json.loads(Path(path).read_text())
            if d.get("version") != VERSION or d["features"] != list(FEATURES):
                raise ValueError("saved by another version")
            return cls(d["coef"], d["intercept"], d["mean"], d["scale"])
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise PtmlabError(f"cannot read detector '{path}' ({e}): delete it to refit the default") from None


def fit_default_detector(seed: int = 0) -> QueryDetector:
    """Fitted on 2,000 built-in tweets against as many RANDOM queries of the same lengths."""
    from ptmlab.data.loaders import load_task
    from ptmlab.data.wordlists import random_words

    rng = random.Random(seed)
    real = [t for t in load_task("tweets").splits["train"].text if t.strip()]
    real = rng.sample(real, min(2000, len(real)))
    return QueryDetector.fit(real, random_words(len(real), [len(t.split()) for t in real], rng))


def default_detector(home: Path) -> QueryDetector:
    """The detector saved under ``home`` (fitted and saved on first use; refitted when saved by an older version)."""
    path = Path(home) / "detector.json"
    if path.is_file():
        try:
            return QueryDetector.load(path)
        except PtmlabError:
            pass
    det = fit_default_detector()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    det.save(path)
    return det
