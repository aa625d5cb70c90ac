"""Extraction-query detector: a small classifier telling RANDOM-style word salad from real sentences.

Each text becomes a few word-frequency features (from ``wordfreq``); a logistic regression scores it. The server
stores each query's score in the audit log (not the text), and ``ptmlab keys flagged`` flags keys whose recent
queries look like word salad on average. Coefficients are saved as JSON, never pickled.
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

WORD = re.compile(r"[a-z']+")
FEATURES = ("mean_zipf", "std_zipf", "frac_function_words", "frac_rare", "frac_unknown", "frac_punct")


def features(text: str) -> list[float]:
    from wordfreq import zipf_frequency

    words = WORD.findall(text.lower())
    if not words:
        return [0.0, 0.0, 0.0, 0.0, 1.0, 1.0 if text.strip() else 0.0]
    z = np.array([zipf_frequency(w, "en") for w in words])
    punct = sum(1 for c in text if c in ".,;:!?\"()-")
    return [float(z.mean()), float(z.std()), float((z >= 6.0).mean()), float(((z > 0) & (z < 4.0)).mean()),
            float((z == 0).mean()), punct / max(1, len(words))]


class QueryDetector:
    """P(text is a RANDOM-style extraction query)."""

    def __init__(self, coef: list[float], intercept: float, mean: list[float], scale: list[float]):
        self.coef = np.array(coef)
        self.intercept = intercept
        self.mean = np.array(mean)
        self.scale = np.array(scale)

    @classmethod
    def fit(cls, real: list[str], random_queries: list[str]) -> QueryDetector:
        from sklearn.linear_model import LogisticRegression

        x = np.array([features(t) for t in real + random_queries])
        y = np.array([0] * len(real) + [1] * len(random_queries))
        mean, scale = x.mean(0), x.std(0) + 1e-6
        lr = LogisticRegression(max_iter=1000).fit((x - mean) / scale, y)
        return cls(lr.coef_[0].tolist(), float(lr.intercept_[0]), mean.tolist(), scale.tolist())

    def score(self, texts: list[str]) -> list[float]:
        if not texts:
            return []
        x = (np.array([features(t) for t in texts]) - self.mean) / self.scale
        z = x @ self.coef + self.intercept
        return [1.0 / (1.0 + math.exp(-float(v))) for v in z]

    def save(self, path: str | Path) -> None:
        atomic_write_json(path, {"features": list(FEATURES), "coef": self.coef.tolist(), "intercept": self.intercept,
                                 "mean": self.mean.tolist(), "scale": self.scale.tolist()})

    @classmethod
    def load(cls, path: str | Path) -> QueryDetector:
        try:
            d = json.loads(Path(path).read_text())
            if d["features"] != list(FEATURES):
                raise ValueError("different features")
            return cls(d["coef"], d["intercept"], d["mean"], d["scale"])
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise PtmlabError(f"cannot read detector '{path}' ({e}): delete it to refit the default") from None


def default_detector(home: Path) -> QueryDetector:
    """The detector saved under the state directory, fitted once on built-in tweets vs random word queries."""
    path = home / "detector.json"
    if path.is_file():
        return QueryDetector.load(path)
    from ptmlab.data.loaders import load_task
    from ptmlab.extraction.queries import random_words

    rng = random.Random(0)
    real = [t for t in load_task("tweets").splits["train"].text if t.strip()]
    real = rng.sample(real, min(2000, len(real)))
    lengths = [len(t.split()) for t in real]
    fake = random_words(len(real), lengths, rng)
    det = QueryDetector.fit(real, fake)
    det.save(path)
    return det
