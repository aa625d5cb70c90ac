"""Query generators of "Thieves on Sesame Street" (Krishna et al. 2020): RANDOM, WIKI and TASK.

Each strategy returns ``n`` queries as (texts, pairs-or-None). Lengths follow the task's training texts, so
random queries look like task inputs in length. For pair tasks the second text is the first with a few words
replaced, as in the paper. ``padded`` is the cheap adaptive attack on query detectors. The word lists live in
``ptmlab.data.wordlists``, shared with the server's detector, so neither capability imports the other.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from pathlib import Path

from ptmlab.core.errors import PtmlabError
from ptmlab.core.registry import Registry
from ptmlab.data.loaders import Split
from ptmlab.data.wordlists import pad_with_function_words, random_words, vocabulary

Queries = tuple[list[str], list[str] | None]
QUERY_STRATEGIES: Registry[Callable[..., Queries]] = Registry("query strategy")
DEFAULT_CORPUS = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "text" / "wikitext-2"


def _perturb(text: str, rng: random.Random, k: int = 3) -> str:
    words = text.split()
    vocab = vocabulary()
    for i in rng.sample(range(len(words)), min(k, len(words))):
        words[i] = rng.choice(vocab)
    return " ".join(words)


def _lengths(split: Split) -> list[int]:
    lengths = [len(t.split()) for t in split.text if t.strip()]
    return lengths or [10]


@QUERY_STRATEGIES.register("random", help="uniformly sampled words from the wordfreq English top-10k list")
def random_queries(n: int, train: Split, rng: random.Random, pair: bool, corpus: str | None = None) -> Queries:
    texts = random_words(n, _lengths(train), rng)
    return texts, [_perturb(t, rng) for t in texts] if pair else None


@QUERY_STRATEGIES.register("padded", help="random queries padded with function words and a final period (an "
                                          "adaptive attack on query detectors)")
def padded_queries(n: int, train: Split, rng: random.Random, pair: bool, corpus: str | None = None) -> Queries:
    texts = [pad_with_function_words(t, rng) for t in random_words(n, _lengths(train), rng)]
    return texts, [_perturb(t, rng) for t in texts] if pair else None


SENT_END = re.compile(r"(?<=[.!?])\s+")


def corpus_sentences(corpus: str | Path) -> list[str]:
    """Sentences of a text file or of every .txt / .tokens file under a folder (WikiText markup cleaned)."""
    p = Path(corpus)
    files = sorted(f for f in p.rglob("*") if f.suffix in (".txt", ".tokens")) if p.is_dir() else [p]
    if not p.exists() or not files:
        raise PtmlabError(f"corpus '{corpus}' has no .txt or .tokens files: pass --corpus FILE_OR_DIR of plain text")
    out = []
    for f in files:
        text = f.read_text(encoding="utf-8", errors="replace")
        text = text.replace(" @-@ ", "-").replace(" @,@ ", ",").replace(" @.@ ", ".")
        for line in text.splitlines():
            line = line.strip()
            if not line or line.startswith("="):
                continue
            out.extend(s.strip() for s in SENT_END.split(line) if len(s.split()) >= 3)
    if not out:
        raise PtmlabError(f"corpus '{corpus}' holds no sentences of 3 or more words: pass another --corpus")
    return out


@QUERY_STRATEGIES.register("wiki", help="sentences from a local text corpus (default: WikiText-2 in shared data)")
def wiki_queries(n: int, train: Split, rng: random.Random, pair: bool, corpus: str | None = None) -> Queries:
    sents = corpus_sentences(corpus or DEFAULT_CORPUS)
    lengths = _lengths(train)
    texts = []
    for s in (rng.choice(sents) for _ in range(n)):
        words = s.split()
        texts.append(" ".join(words[:max(3, rng.choice(lengths))]))
    return texts, [_perturb(t, rng) for t in texts] if pair else None


@QUERY_STRATEGIES.register("task", help="unlabeled in-distribution text: the task's training inputs")
def task_queries(n: int, train: Split, rng: random.Random, pair: bool, corpus: str | None = None) -> Queries:
    idx = list(range(len(train)))
    rng.shuffle(idx)
    if n > len(idx):
        raise PtmlabError(f"--budget {n} exceeds the task's {len(idx)} training texts: lower --budget or use "
                          f"--strategy random or wiki")
    idx = idx[:n]
    texts = [train.text[i] for i in idx]
    if pair:
        pairs = [train.text_pair[i] for i in idx] if train.text_pair is not None else [_perturb(t, rng) for t in texts]
        return texts, pairs
    return texts, None


def make_queries(strategy: str, n: int, train: Split, seed: int, pair: bool, corpus: str | None = None) -> Queries:
    return QUERY_STRATEGIES.get(strategy)(n, train, random.Random(seed), pair, corpus)
