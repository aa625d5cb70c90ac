"""Measure several tokenizers on several texts: metrics per file and per language, table, JSON, charts."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from ptmlab.core.errors import PtmlabError
from ptmlab.core.io import atomic_write_json
from ptmlab.core.progress import progress
from ptmlab.tokenization.corpora import TextSource
from ptmlab.tokenization.load import LoadedTokenizer, load_tokenizer
from ptmlab.tokenization.metrics import Counts, count_words, measure


def load_all(specs: list[str]) -> list[LoadedTokenizer]:
    """Load each tokenizer; names that clash (two folders called ``bpe``) get ``-2``, ``-3`` added."""
    if not specs:
        raise PtmlabError("no tokenizer given: pass tokenizer directories, tokenizer.json files, minilm "
                          "or xlmr")
    out, seen = [], {}
    for spec in specs:
        tok = load_tokenizer(spec)
        n = seen[tok.name] = seen.get(tok.name, 0) + 1
        if n > 1:
            tok.name = f"{tok.name}-{n}"
        out.append(tok)
    return out


def evaluate(tokenizers: list[LoadedTokenizer], sources: list[TextSource], split_punct: bool = False) -> dict:
    """Metrics of every tokenizer on every source, and merged per language where languages are known."""
    words = {}
    for src in sources:
        table = count_words(src.lines(), split_punct)
        if not table:
            raise PtmlabError(f"text '{src.origin}' holds no words: pass a file with text in it")
        words[src.name] = table
    counts: dict[str, dict[str, Counts]] = {}
    with progress(total=len(tokenizers) * len(sources), desc="measuring tokenizers") as bar:
        for tok in tokenizers:
            counts[tok.name] = {}
            for src in sources:
                counts[tok.name][src.name] = measure(tok, words[src.name])
                bar.update(1)
    by_language: dict[str, dict[str, dict]] = {}
    for tok in tokenizers:
        merged: dict[str, Counts] = {}
        for src in sources:
            if src.lang:
                c = counts[tok.name][src.name]
                merged[src.lang] = merged[src.lang].merge(c) if src.lang in merged else c
        if merged:
            by_language[tok.name] = {lang: c.metrics() for lang, c in merged.items()}
    return {
        "split_punct": split_punct,
        "tokenizers": {t.name: {"source": t.source, "vocab_size": t.vocab_size} for t in tokenizers},
        "files": {s.name: {"path": s.origin, "lang": s.lang, "words": sum(words[s.name].values()),
                           "distinct_words": len(words[s.name])} for s in sources},
        "metrics": {t: {f: c.metrics() for f, c in per_file.items()} for t, per_file in counts.items()},
        "by_language": by_language,
    }


_COLUMNS = [("fertility", "fertility", 9), ("continued_words", "continued", 9), ("whole_words", "whole", 7),
            ("unk_rate", "unk", 7), ("chars_per_token", "chars/tok", 9), ("vocab_use", "vocab use", 9)]


def format_table(report: dict) -> str:
    """The metrics as aligned text: one row per tokenizer and file, then per tokenizer and language."""
    rows = [(tok, f, m) for tok, per_file in report["metrics"].items() for f, m in per_file.items()]
    langs = Counter(f["lang"] for f in report["files"].values() if f["lang"])
    if any(n > 1 for n in langs.values()):  # a language row adds nothing when one file makes the language
        rows += [(tok, f"[{lang}]", m) for tok, per_lang in report["by_language"].items()
                 for lang, m in per_lang.items()]
    wt = max([len("tokenizer")] + [len(r[0]) for r in rows])
    wf = max([len("text")] + [len(r[1]) for r in rows])
    head = (f"{'tokenizer':<{wt}}  {'text':<{wf}}  {'words':>8}  "
            + "  ".join(f"{h:>{w}}" for _, h, w in _COLUMNS))
    lines = [head, "-" * len(head)]
    for tok, name, m in rows:
        cells = "  ".join(f"{m[k]:>{w}.3f}" for k, _, w in _COLUMNS)
        lines.append(f"{tok:<{wt}}  {name:<{wf}}  {m['words']:>8}  {cells}")
    return "\n".join(lines)


def write_outputs(report: dict, out_dir: str | Path) -> list[Path]:
    """``metrics.json`` and one bar chart PNG per metric (per file, and per language when known)."""
    from ptmlab.tokenization.plots import bar_charts

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out / "metrics.json", report)
    written = [out / "metrics.json"]
    written += bar_charts(report["metrics"], out, suffix="")
    if report["by_language"]:
        written += bar_charts(report["by_language"], out, suffix="_by_language")
    return written
