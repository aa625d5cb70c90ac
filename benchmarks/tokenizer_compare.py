"""Benchmark: tokenizer training and fertility counting.

1. Time to train BPE, WordPiece and Unigram on the 5 MB Gutenberg text (13 books) at vocabulary 8,000.
2. Time to measure fertility and continued words on 1M words (Gutenberg, then tiny-shakespeare) with each
   trained tokenizer and minilm's: ptmlab (one batched call per distinct word) against the baseline, a plain
   Python loop over ``tokenizer.tokenize(word)`` for every word. Both must give the same numbers; the ratio is
   the speed-up.

Run from the project root: ``python benchmarks/tokenizer_compare.py`` (needs ../shared/data). Writes
``benchmarks/results/tokenizer_compare.MACHINE.json`` and prints a table.
"""

from __future__ import annotations

# isort: off
import _env  # noqa: F401  (first: offline defaults before anything imports transformers)
# isort: on

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from ptmlab.core.io import atomic_write_json
from ptmlab.tokenization.corpora import resolve_sources, shared_data_dir
from ptmlab.tokenization.load import load_tokenizer
from ptmlab.tokenization.metrics import count_words, measure
from ptmlab.tokenization.train import save_tokenizer, scan_sources, train_tokenizer


def first_lines(sources, n_words: int) -> list[str]:
    """Lines of text holding exactly ``n_words`` whitespace-separated words (the last line cut short)."""
    lines: list[str] = []
    count = 0
    for src in sources:
        for line in src.lines():
            words = line.split()
            if count + len(words) >= n_words:
                lines.append(" ".join(words[: n_words - count]))
                return lines
            lines.append(line)
            count += len(words)
    return lines


def baseline(hf, lines: list[str]) -> tuple[float, float, float]:
    """The plain loop: split lines, tokenize every word on its own. Returns (seconds, fertility, continued)."""
    start = time.perf_counter()
    words = pieces = continued = 0
    for line in lines:
        for w in line.split():
            n = len(hf.tokenize(w))
            words += 1
            pieces += n
            continued += n >= 2
    return time.perf_counter() - start, pieces / words, continued / words


def ours(tok, lines: list[str]) -> tuple[float, float, float]:
    """ptmlab: count words, tokenize each distinct word once (batched), weight by counts."""
    start = time.perf_counter()
    m = measure(tok, count_words(lines)).metrics()
    return time.perf_counter() - start, m["fertility"], m["continued_words"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default=None, help="shared data folder (default: ../shared/data)")
    p.add_argument("--vocab-size", type=int, default=8000)
    p.add_argument("--words", type=int, default=1_000_000)
    p.add_argument("--types", default="bpe,wordpiece,unigram")
    p.add_argument("--compare", default="minilm", help="pretrained tokenizers to time as well (a,b,...)")
    p.add_argument("--output", default=str(_env.result_path("tokenizer_compare")))
    a = p.parse_args(argv)
    data = Path(a.data) if a.data else shared_data_dir()
    if data is None or not (data / "text" / "gutenberg").is_dir():
        print("skipped: the shared data folder (../shared/data/text/gutenberg) is not here", file=sys.stderr)
        return 0
    import torch

    torch.set_num_threads(len(os.sched_getaffinity(0)))
    train_text = resolve_sources([str(data / "text" / "gutenberg")])
    scan = scan_sources(train_text)
    eval_lines = first_lines(resolve_sources([str(data / "text" / "gutenberg"),
                                              str(data / "text" / "tinyshakespeare.txt")]), a.words)
    n_words = sum(len(line.split()) for line in eval_lines)
    rows = []
    with tempfile.TemporaryDirectory(prefix="ptmlab-bench-tok-") as tmp:
        specs = []
        for kind in a.types.split(","):
            start = time.perf_counter()
            tok = train_tokenizer(kind, train_text, a.vocab_size, scan=scan)
            seconds = time.perf_counter() - start
            save_tokenizer(tok, Path(tmp) / kind, {"type": kind})
            rows.append({"tokenizer": kind, "train_seconds": round(seconds, 3),
                         "vocab_size": tok.get_vocab_size()})
            specs.append((kind, str(Path(tmp) / kind)))
            print(f"trained {kind} in {seconds:.2f} s", flush=True)
        for name in filter(None, a.compare.split(",")):
            rows.append({"tokenizer": name, "train_seconds": None})
            specs.append((name, name))
        for row, (name, spec) in zip(rows, specs, strict=True):
            tok = load_tokenizer(spec, name=name)
            t_ours, f_ours, c_ours = ours(tok, eval_lines)
            t_base, f_base, c_base = baseline(tok.as_hf(), eval_lines)
            if abs(f_ours - f_base) > 1e-12 or abs(c_ours - c_base) > 1e-12:
                raise SystemExit(f"{name}: ptmlab and the baseline disagree (fertility {f_ours} vs {f_base})")
            row.update({"vocab_size": tok.vocab_size, "fertility": f_ours, "continued_words": c_ours,
                        "eval_seconds": round(t_ours, 3), "baseline_seconds": round(t_base, 3),
                        "speedup": round(t_base / t_ours, 1)})
            print(f"measured {name}: {t_ours:.2f} s vs baseline {t_base:.2f} s", flush=True)
    result = {
        "benchmark": "tokenizers",
        "train_text": {"path": "text/gutenberg", "chars": scan.chars, "lines": scan.lines},
        "eval_words": n_words,
        "eval_distinct_words": len(count_words(eval_lines)),
        "vocab_size": a.vocab_size,
        "machine": {**_env.machine_info(), "tokenizers_parallelism": os.environ.get("TOKENIZERS_PARALLELISM")},
        "rows": rows,
    }
    atomic_write_json(a.output, result)
    print(f"\ntrain: {scan.chars / 1e6:.1f} M characters; eval: {n_words:,} words; "
          f"vocab {a.vocab_size}")
    print(f"{'tokenizer':<10} {'train s':>8} {'fertility':>9} {'continued':>9} {'ptmlab s':>9} {'loop s':>8} "
          f"{'ratio':>6}")
    for r in rows:
        train = f"{r['train_seconds']:.2f}" if r["train_seconds"] is not None else "-"
        print(f"{r['tokenizer']:<10} {train:>8} {r['fertility']:>9.4f} {r['continued_words']:>9.4f} "
              f"{r['eval_seconds']:>9.2f} {r['baseline_seconds']:>8.2f} {r['speedup']:>5.1f}x")
    print(f"wrote {a.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
