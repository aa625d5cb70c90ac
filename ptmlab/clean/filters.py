"""Document rules: line boilerplate, hard-wrap repair, C4 line and document filters, Gopher quality and repetition,
language identification. Each runs on one document at a time, so they all run in worker processes.

C4 and Gopher come from datatrove (the reference implementations of FineWeb), fed with ``SimpleTokenizer`` so no
spaCy or NLTK data is needed. C4's bad-words list is downloaded by datatrove at run time, so here it is a local file
the user passes (``c4_documents.bad_words_file``). Language identification is py3langid, whose model ships inside
the PyPI package. ``boilerplate_lines`` and ``unwrap`` are this project's additions (see docs/cleaning.md).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from datatrove.data import Document
from datatrove.pipeline.filters import C4QualityFilter, GopherQualityFilter, GopherRepetitionFilter

from ptmlab.clean.rules import Outcome, Rule, register
from ptmlab.clean.text import tokenizer, unwrap
from ptmlab.core.errors import PtmlabError

BOILERPLATE_PHRASES = [
    "all rights reserved", "copyright", "click here", "subscribe to", "sign up", "log in", "sign in", "follow us",
    "share this", "share on", "read more", "skip to", "back to top", "powered by", "add to cart", "newsletter",
    "you may also like", "related posts", "related articles", "leave a comment", "posted by", "cookie",
    "privacy policy", "terms of use", "terms of service", "terms and conditions", "javascript", "accept all",
    "contact us", "about us", "site map", "sitemap", "previous post", "next post", "advertisement",
]


def _doc(text: str) -> Document:
    return Document(text=text, id="")


@register
class BoilerplateLines(Rule):
    """drop short lines with web boilerplate phrases (copyright, click here, share, subscribe, cookie, ...)"""

    name = "boilerplate_lines"

    @dataclass(frozen=True)
    class Params:
        phrases: list[str] = field(default_factory=lambda: list(BOILERPLATE_PHRASES))
        max_words: int = 30  # longer lines are prose that happens to use a phrase, not boilerplate

    def __init__(self, params):
        super().__init__(params)
        words = sorted({p.strip().lower() for p in params.phrases if p.strip()})
        self._pattern = re.compile(r"\b(?:" + "|".join(re.escape(w) for w in words) + r")\b") if words else None

    def apply(self, text: str) -> Outcome:
        if self._pattern is None:
            return Outcome(text)
        kept = [line for line in text.split("\n")
                if not (line.strip() and len(line.split()) <= self.params.max_words
                        and self._pattern.search(line.lower()))]
        return Outcome("\n".join(kept))


@register
class Unwrap(Rule):
    """join hard-wrapped lines of a paragraph into one line, so line filters see whole paragraphs"""

    name = "unwrap"

    @dataclass(frozen=True)
    class Params:
        max_width: int = 100
        min_width: int = 40
        fill: float = 0.6

    def apply(self, text: str) -> Outcome:
        new, merged = unwrap(text, self.params.max_width, self.params.min_width, self.params.fill)
        return Outcome(new, merged=merged)


@register
class C4Lines(Rule):
    """C4 line filters: terminal punctuation, minimum words, no 'javascript', no cookie/policy/terms lines"""

    name = "c4_lines"

    @dataclass(frozen=True)
    class Params:
        terminal_punct: bool = True
        min_words: int = 3
        max_word_length: int = 1000
        javascript: bool = True
        policy: bool = True
        remove_citations: bool = True

    def __init__(self, params):
        super().__init__(params)
        self._filter = C4QualityFilter(
            split_paragraph=True, remove_citations=params.remove_citations,
            filter_no_terminal_punct=params.terminal_punct, min_num_sentences=-1, min_words_per_line=params.min_words,
            max_word_length=params.max_word_length, filter_lorem_ipsum=False, filter_javascript=params.javascript,
            filter_curly_bracket=False, filter_policy=params.policy, language=tokenizer())

    def apply(self, text: str) -> Outcome:
        doc = _doc(text)
        self._filter.filter(doc)
        if not doc.text.strip():
            return Outcome("", removed=True, reason="no line left")
        return Outcome(doc.text)


@register
class C4Documents(Rule):
    """C4 document filters: minimum sentences, 'lorem ipsum', curly braces, optional bad-words list file"""

    name = "c4_documents"

    @dataclass(frozen=True)
    class Params:
        min_sentences: int = 5
        lorem_ipsum: bool = True
        curly_bracket: bool = True
        bad_words_file: str = ""

    def __init__(self, params):
        super().__init__(params)
        self._filter = C4QualityFilter(
            split_paragraph=True, remove_citations=False, filter_no_terminal_punct=False,
            min_num_sentences=params.min_sentences, min_words_per_line=-1, max_word_length=-1,
            filter_lorem_ipsum=params.lorem_ipsum, filter_javascript=False, filter_curly_bracket=params.curly_bracket,
            filter_policy=False, language=tokenizer())
        self._bad = _bad_words(params.bad_words_file) if params.bad_words_file else None

    def apply(self, text: str) -> Outcome:
        verdict = self._filter.filter(_doc(text))
        if verdict is not True:
            return Outcome(text, removed=True, reason=verdict[1] if isinstance(verdict, tuple) else "c4")
        if self._bad is not None and self._bad.search(text.lower()):
            return Outcome(text, removed=True, reason="bad_words")
        return Outcome(text)


@lru_cache(4)
def _bad_words(path: str) -> re.Pattern:
    """C4's bad-words match: any listed word flanked by non-word characters (one word or phrase per line)."""
    p = Path(path)
    if not p.is_file():
        raise PtmlabError(f"bad-words file '{path}' does not exist: pass a text file with one word per line to "
                          f"--set c4_documents.bad_words_file=FILE")
    words = sorted({w.strip().lower() for w in p.read_text(encoding="utf-8", errors="replace").splitlines()
                    if w.strip()})
    if not words:
        raise PtmlabError(f"bad-words file '{path}' lists no words: put one word per line")
    return re.compile(r"(?:\W|^)(" + "|".join(re.escape(w) for w in words) + r")(?:\W|$)")


@register
class GopherQuality(Rule):
    """Gopher quality: word count, mean word length, symbol ratio, bullet and ellipsis lines, alphabetic words,
    stop words"""

    name = "gopher_quality"

    @dataclass(frozen=True)
    class Params:
        min_doc_words: int = 50
        max_doc_words: int = 100000
        min_avg_word_length: float = 3.0
        max_avg_word_length: float = 10.0
        max_symbol_word_ratio: float = 0.1
        max_bullet_lines_ratio: float = 0.9
        max_ellipsis_lines_ratio: float = 0.3
        min_alpha_words_ratio: float = 0.8
        min_stop_words: int = 2

    def __init__(self, params):
        super().__init__(params)
        p = params
        self._filter = GopherQualityFilter(
            min_doc_words=p.min_doc_words, max_doc_words=p.max_doc_words, min_avg_word_length=p.min_avg_word_length,
            max_avg_word_length=p.max_avg_word_length, max_symbol_word_ratio=p.max_symbol_word_ratio,
            max_bullet_lines_ratio=p.max_bullet_lines_ratio, max_ellipsis_lines_ratio=p.max_ellipsis_lines_ratio,
            max_non_alpha_words_ratio=p.min_alpha_words_ratio, min_stop_words=p.min_stop_words,
            language=tokenizer())

    def apply(self, text: str) -> Outcome:
        verdict = self._filter.filter(_doc(text))
        if verdict is not True:
            return Outcome(text, removed=True, reason=verdict[1] if isinstance(verdict, tuple) else "gopher")
        return Outcome(text)


def _pairs(spec: str, what: str) -> tuple[tuple[int, float], ...]:
    """``"2=0.2,3=0.18"`` -> ((2, 0.2), (3, 0.18))."""
    out = []
    for part in filter(None, (s.strip() for s in spec.split(","))):
        n, sep, frac = part.partition("=")
        try:
            out.append((int(n), float(frac)))
        except ValueError:
            raise PtmlabError(f"gopher_repetition.{what} '{spec}' is not N=FRACTION,...: write it like "
                              f"2=0.2,3=0.18") from None
        if not sep:
            raise PtmlabError(f"gopher_repetition.{what} '{spec}' is not N=FRACTION,...: write it like 2=0.2,3=0.18")
    return tuple(out)


@register
class GopherRepetition(Rule):
    """Gopher repetition: duplicate line and paragraph fractions, top n-gram and duplicate n-gram character shares"""

    name = "gopher_repetition"

    @dataclass(frozen=True)
    class Params:
        dup_line_frac: float = 0.3
        dup_para_frac: float = 0.3
        dup_line_char_frac: float = 0.2
        dup_para_char_frac: float = 0.2
        top_ngrams: str = "2=0.20,3=0.18,4=0.16"
        dup_ngrams: str = "5=0.15,6=0.14,7=0.13,8=0.12,9=0.11,10=0.10"

    def __init__(self, params):
        super().__init__(params)
        p = params
        self._filter = GopherRepetitionFilter(
            dup_line_frac=p.dup_line_frac, dup_para_frac=p.dup_para_frac, dup_line_char_frac=p.dup_line_char_frac,
            dup_para_char_frac=p.dup_para_char_frac, top_n_grams=_pairs(p.top_ngrams, "top_ngrams"),
            dup_n_grams=_pairs(p.dup_ngrams, "dup_ngrams"), language=tokenizer())

    def apply(self, text: str) -> Outcome:
        verdict = self._filter.filter(_doc(text))
        if verdict is not True:
            return Outcome(text, removed=True, reason=verdict[1] if isinstance(verdict, tuple) else "repetition")
        return Outcome(text)


@lru_cache(1)
def _identifier():
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    return LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)


@register
class Language(Rule):
    """language identification (py3langid, model inside the package): keep documents in LANGUAGES above THRESHOLD"""

    name = "language"

    @dataclass(frozen=True)
    class Params:
        languages: list[str] = field(default_factory=lambda: ["en"])
        threshold: float = 0.65
        max_chars: int = 2000  # classify the first characters only: enough for a confident decision

    def __init__(self, params):
        super().__init__(params)
        known = set(_identifier().nb_classes)
        for lang in params.languages:
            if lang not in known:
                raise PtmlabError(f"language.languages: '{lang}' is not a py3langid language code: use ISO 639-1 "
                                  f"codes such as en, de, fr")

    def apply(self, text: str) -> Outcome:
        sample = text[: self.params.max_chars] if self.params.max_chars > 0 else text
        lang, prob = _identifier().classify(sample)
        if lang not in self.params.languages or prob < self.params.threshold:
            reason = "below threshold" if lang in self.params.languages else f"lang={lang}"
            return Outcome(text, removed=True, reason=reason)
        return Outcome(text)


def lines_dropped(before: str, after: str, limit: int = 3) -> list[str]:
    """A few lines present before a line rule and gone after it (examples for the report)."""
    kept = set(line.strip() for line in after.split("\n"))
    out = [line.strip() for line in before.split("\n") if line.strip() and line.strip() not in kept]
    return out[:limit]

