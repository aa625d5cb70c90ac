"""Word lists shared by serving (the query detector, watermark normalisation) and extraction (query generators).

They live here, below both capabilities, so that neither imports the other: the detector is fitted on the same
random-word queries the attack sends, and the watermark ignores the same function words an attacker pads with.
"""

from __future__ import annotations

import random
from functools import lru_cache

# English function words: closed-class words (articles, pronouns, prepositions, conjunctions, auxiliaries) that
# carry little content, so an attacker can add them freely without changing what a query asks.
FUNCTION_WORDS: frozenset[str] = frozenset("""
a an the this that these those some any each every no all both either neither such what which who whom whose
i me my mine we us our ours you your yours he him his she her hers it its they them their theirs myself yourself
himself herself itself ourselves themselves one ones
of in on at by for with about against between into through during before after above below to from up down out
off over under again further then once here there when where why how than so too very just also only not nor
and but or if because as until while though although whether since unless
am is are was were be been being have has had having do does did doing will would shall should can could may
might must ought
's 't 're 've 'll 'd 'm s t re ve ll d m don doesn didn isn aren wasn weren hasn haven hadn won wouldn shouldn
can't cannot couldn mustn
""".split())


@lru_cache(maxsize=1)
def vocabulary() -> tuple[str, ...]:
    """The 10,000 most frequent English words (wordfreq)."""
    from wordfreq import top_n_list

    return tuple(w for w in top_n_list("en", 10_000) if w.strip())


def random_words(n: int, lengths: list[int], rng: random.Random) -> list[str]:
    """``n`` sequences of uniformly drawn top-10k words, lengths drawn from ``lengths`` (RANDOM queries)."""
    vocab = vocabulary()
    return [" ".join(rng.choices(vocab, k=max(1, rng.choice(lengths)))) for _ in range(n)]


def pad_with_function_words(text: str, rng: random.Random, share: float = 0.5) -> str:
    """``text`` with function words mixed in (about ``share`` of the result) and a final period: the cheap
    adaptive attack against detectors that score how natural a query's word frequencies look."""
    words = text.split()
    fillers = sorted(w for w in FUNCTION_WORDS if w.isalpha() and len(w) > 1)
    out: list[str] = []
    for w in words:
        while rng.random() < share:
            out.append(rng.choice(fillers))
        out.append(w)
    return " ".join(out) + "."
