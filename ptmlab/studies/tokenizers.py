"""Study ``tokenizers`` (ACL 2021 "How Good is Your Tokenizer?", and the tokenizer half of Q5).

Claim (Rust et al., ACL 2021): a language-specific tokenizer has lower fertility (pieces per word) and fewer
continued words (words split into two or more pieces) than a multilingual one. On each language's text this trains
BPE, WordPiece and Unigram at one vocabulary size (monolingual), the same three on all languages together at the
same size (a multilingual tokenizer of equal capacity), and measures them with minilm's (English) and XLM-R's
(multilingual, 250,002 pieces) tokenizers on held-out text of each language.

Validity conditions (checked on the run's numbers before the rule; any unmet: cannot test): every language-specific
tokenizer is compared with multilingual rivals of comparable size: its vocabulary at least a quarter of the largest
rival's (the paper's monolingual tokenizers, about 30k pieces, against mBERT's 120k); an 8k-piece stand-in against a
250k-piece pretrained tokenizer measures vocabulary size, not language specificity.

Verdict rule (written before the runs): for every language, tokenizer type and multilingual rival (the joint
tokenizer of the same type and size, and each pretrained tokenizer named in --multilingual), the differences rival
minus language-specific in fertility (pieces per word) and in the share of continued words are measured on that
language's held-out sentences, each with a 95% paired bootstrap interval over the sentences (per-sentence
differences of pieces and of continued words, divided by the mean words per sentence, so that their mean is the
corpus-level difference). Supported when every interval lies above 0; not supported when any interval lies below 0
(a multilingual tokenizer segments that language more economically); inconclusive otherwise. The Q5 note (Unigram
against BPE fertility) is reported beside it.

Budgets: ``--budget small`` trains on 300 lines at vocabulary 400 with the joint tokenizers as the only rivals;
``--budget full`` trains on all of the text (Multi30k) at vocabulary 8,000 against the joint tokenizers and XLM-R.
Tokenization is deterministic: the noise is the choice of held-out sentences, hence the bootstrap, not seeds.

It trains and scores tokenizers in this process under either ``--executor`` (no grid of training runs).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path

from ptmlab.core.config import opt
from ptmlab.core.errors import PtmlabError
from ptmlab.studies import STUDIES
from ptmlab.studies.common import StudyBase, parse_study_args, write_study
from ptmlab.studies.verdict import INCONCLUSIVE, Claim, Verdict, combine, decide_above, paired_bootstrap

CLAIM = Claim(
    study="tokenizers",
    claim="A language-specific tokenizer has lower fertility and fewer continued words than a multilingual one.",
    source="ACL 2021; Rust et al., How Good is Your Tokenizer? On the Monolingual Performance of Multilingual "
           "Language Models",
    paper="monolingual tokenizers below mBERT's fertility and continued-word share in most of the nine languages "
          "studied; no number is copied here",
    rule="for every language, tokenizer type and multilingual rival (the joint tokenizer of the same type and size, "
         "and each pretrained tokenizer named in --multilingual), the differences rival minus language-specific in "
         "fertility (pieces per word) and in the share of continued words are measured on that language's held-out "
         "sentences, each with a 95% paired bootstrap interval over the sentences (per-sentence differences of "
         "pieces and of continued words, divided by the mean words per sentence, so that their mean is the "
         "corpus-level difference). Supported when every interval lies above 0; not supported when any interval lies "
         "below 0 (a multilingual tokenizer segments that language more economically); inconclusive otherwise. The "
         "Q5 note (Unigram against BPE fertility) is reported beside it.",
    conditions=(
        "every language-specific tokenizer's vocabulary at least 0.25 of the largest multilingual rival's",
    ),
)


@dataclass(frozen=True)
class TokenizersArgs(StudyBase):
    files: list[str] = opt(["en=multi30k:en", "de=multi30k:de"], "training text per language, LANG=SOURCE")
    eval: list[str] = opt(["en=tatoeba:en", "de=tatoeba:de"], "held-out text per language, LANG=SOURCE")
    types: list[str] = opt(["bpe", "wordpiece", "unigram"], "tokenizer types to train")
    vocab_size: int = opt(8000, "vocabulary size of every trained tokenizer")
    compare: list[str] = opt(["minilm", "xlmr"], "pretrained tokenizers to measure as well")
    multilingual: list[str] = opt(["xlmr"], "which of --compare are multilingual (the claim's rivals)")
    joint: bool = opt(True, "also train each type on all languages together (multilingual, same size)")
    max_lines: int = opt(0, "training lines per source (0: all)")
    split_punct: bool = opt(False, "split punctuation off words when counting")
    output: str = opt("runs/study-tokenizers", "output directory")


def _by_lang(pairs: list[str], flag: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for pair in pairs:
        lang, sep, spec = pair.partition("=")
        if not sep or not lang or not spec:
            raise PtmlabError(f"{flag} value '{pair}' is not LANG=SOURCE: write e.g. de=multi30k:de")
        out.setdefault(lang, []).append(spec)
    return out


def _head(sources, n: int):
    from ptmlab.tokenization.corpora import TextSource

    if n <= 0:
        return sources
    return [TextSource(s.name, s.lang, s.origin, lambda s=s: itertools.islice(s.lines(), n)) for s in sources]


# what --budget small runs (tests, CI)
SMALL = {
    "max_lines": 300,
    "vocab_size": 400,
    "compare": ["minilm"],
    "multilingual": [],
}
FULL = {"max_lines": 0, "vocab_size": 8000, "compare": ["minilm", "xlmr"], "multilingual": ["xlmr"]}


@STUDIES.register("tokenizers", help="ACL 2021: language-specific tokenizers have lower fertility than "
                                     "multilingual ones (BPE / WordPiece / Unigram vs minilm vs XLM-R)")
def run(argv: list[str]) -> int:
    from ptmlab.tokenization.compare import evaluate, load_all, write_outputs
    from ptmlab.tokenization.corpora import resolve_sources
    from ptmlab.tokenization.load import from_backend
    from ptmlab.tokenization.plots import metric_figure
    from ptmlab.tokenization.train import resolve_types, save_tokenizer, scan_sources, train_tokenizer

    a = parse_study_args("tokenizers", TokenizersArgs, argv, __doc__, small=SMALL, full=FULL)
    out = Path(a.output)
    train_specs, eval_specs = _by_lang(a.files, "--files"), _by_lang(a.eval, "--eval")
    missing = sorted(set(train_specs) - set(eval_specs))
    if missing:
        raise PtmlabError(f"no --eval text for language(s) {', '.join(missing)}: add LANG=SOURCE to --eval")
    types = [t for kind in a.types for t in resolve_types(kind)]
    corpora = {lang: _head(resolve_sources(specs, lang), a.max_lines) for lang, specs in train_specs.items()}
    if a.joint and len(corpora) > 1:
        corpora["joint"] = [s for lang in train_specs for s in corpora[lang]]
    trained = []
    for group, sources in corpora.items():
        scan = scan_sources(sources)
        for kind in types:
            print(f"training {kind} on {group} text ({scan.lines:,} lines, vocab {a.vocab_size})", flush=True)
            tok = train_tokenizer(kind, sources, a.vocab_size, scan=scan)
            path = out / "tokenizers" / f"{kind}-{group}"
            save_tokenizer(tok, path, {"type": kind, "group": group, "vocab_size": tok.get_vocab_size(),
                                       "files": [s.origin for s in sources]})
            trained.append(from_backend(tok, f"{kind}-{group}", str(path)))
    held_by_lang = {lang: resolve_sources(specs, lang) for lang, specs in eval_specs.items()}
    held_out = [s for sources in held_by_lang.values() for s in sources]
    pretrained = load_all(a.compare)
    report = evaluate(trained + pretrained, held_out, a.split_punct)
    write_outputs(report, out / "eval")
    rows = study_rows(report, types, list(train_specs), a.compare)
    rivals = [m for m in a.multilingual if m in a.compare]
    tokenizers = {t.name: t for t in trained + pretrained}
    cases = {}
    for lang in train_specs:
        lines = [line for src in held_by_lang[lang] for line in src.lines()]
        counts = {name: sentence_counts(tok, lines, a.split_punct) for name, tok in tokenizers.items()}
        for t in types:
            mine = counts.get(f"{t}-{lang}")
            for rival in [f"{t}-joint", *rivals]:
                if mine is not None and rival in counts:
                    cases[f"{lang}: {rival} vs {t}-{lang}"] = (mine, counts[rival])
    verdict = decide(cases)
    verdict = Verdict(verdict.outcome, verdict.reason + "." + _q5_note({(r["lang"], r["tokenizer"]): r for r in rows},
                                                               list(train_specs)), verdict.estimate)
    figures = []
    for metric in ("fertility", "continued_words"):
        table: dict[str, dict] = {}
        for r in rows:
            table.setdefault(r["tokenizer"], {})[r["lang"]] = r
        figures.append((metric_figure(table, metric), metric, f"{metric} per language on held-out text"))
    write_study(out, "Study: tokenizers (language-specific vs multilingual)", rows, verdict, figures,
                extra={"vocab_size": a.vocab_size, "metrics_file": str(out / "eval" / "metrics.json"),
                       "summary": summary_text(rows, types, list(train_specs), rivals, a.vocab_size)},
                claim=CLAIM, budget=a.budget, seeds=None,
                columns=["lang", "tokenizer", "kind", "vocab_size", "fertility", "continued_words",
                         "whole_words", "unk_rate", "chars_per_token"], validity=validity)
    return 0


def study_rows(report: dict, types: list[str], langs: list[str], compare: list[str]) -> list[dict]:
    """One row per language and tokenizer: its own-language tokenizers, the joint ones, and the pretrained."""
    by_lang, sizes = report["by_language"], report["tokenizers"]
    rows = []
    for lang in langs:
        entries = [(f"{t} (language-specific)", f"{t}-{lang}", "language-specific") for t in types]
        entries += [(f"{t} (joint)", f"{t}-joint", "multilingual (trained)") for t in types]
        entries += [(name, name, "pretrained") for name in compare]
        for label, name, kind in entries:
            if name in by_lang and lang in by_lang[name]:
                m = by_lang[name][lang]
                rows.append({"lang": lang, "tokenizer": label, "kind": kind,
                             "vocab_size": sizes[name]["vocab_size"],
                             **{k: m[k] for k in ("fertility", "continued_words", "whole_words", "unk_rate",
                                                  "chars_per_token")}})
    return rows


def _beats(row: dict, other: dict) -> bool:
    return row["fertility"] < other["fertility"] and row["continued_words"] < other["continued_words"]


def sentence_counts(tok, lines: list[str], split_punct: bool = False) -> dict:
    """Per held-out sentence (lines with at least one word): words, pieces and continued words under ``tok``."""
    import numpy as np

    from ptmlab.tokenization.metrics import split_words

    sents = [w for w in (split_words(line, split_punct) for line in lines) if w]
    types = sorted({w for s in sents for w in s})
    pieces = {w: len(ids) for w, ids in zip(types, tok.encode_words(types), strict=True)} if types else {}
    return {"words": np.array([len(s) for s in sents], dtype=float),
            "pieces": np.array([sum(pieces[w] for w in s) for s in sents], dtype=float),
            "continued": np.array([sum(pieces[w] >= 2 for w in s) for s in sents], dtype=float)}


def decide(cases: dict[str, tuple[dict, dict]]) -> Verdict:
    """The rule of ``CLAIM``: ``cases`` maps a comparison's name to (language-specific, rival) sentence counts of
    the same held-out sentences (``sentence_counts``); the estimate shown is the least certain comparison."""
    if not cases:
        return Verdict(INCONCLUSIVE, "no language-specific and multilingual tokenizer measured on one language: "
                                     "nothing to compare")
    parts = []
    for name, (mine, rival) in cases.items():
        scale = float(mine["words"].mean())
        for key, what in (("pieces", "fertility"), ("continued", "continued-word share")):
            est = paired_bootstrap(rival[key] / scale, mine[key] / scale, f"{what} difference ({name})")
            parts.append(decide_above(est))
    joined = combine(parts)
    failing = [p for p in parts if p.outcome == joined.outcome] or parts
    pick = min(failing, key=lambda p: p.estimate.high if joined.outcome == "not supported" else p.estimate.low)
    won = sum(p.outcome == "supported" for p in parts)
    return Verdict(joined.outcome, f"{won} of {len(parts)} comparisons (fertility and continued words, per language, "
                                   f"type and rival) favour the language-specific tokenizer beyond noise; "
                                   f"{'deciding' if joined.outcome == 'not supported' else 'least certain'}: "
                                   f"{pick.reason}", pick.estimate)


def summary_text(rows: list[dict], types: list[str], langs: list[str], multilingual: list[str], vocab: int) -> str:
    """Per multilingual rival: in how many (language, type) cases the language-specific tokenizer has both the lower
    fertility and fewer continued words (a description beside the verdict, not the rule)."""
    at = {(r["lang"], r["tokenizer"]): r for r in rows}
    rivals = [("joint", "the joint tokenizer of the same type and size")] + [(m, m) for m in multilingual]
    parts, wins, total = [], 0, 0
    for rival, label in rivals:
        cases = []
        for lang, t in itertools.product(langs, types):
            other = at.get((lang, f"{t} (joint)" if rival == "joint" else rival))
            mine = at.get((lang, f"{t} (language-specific)"))
            if mine and other:
                cases.append((mine, other))
        if not cases:
            continue
        won = sum(_beats(m, o) for m, o in cases)
        wins, total = wins + won, total + len(cases)
        mean = [sum(x[i]["fertility"] for x in cases) / len(cases) for i in (0, 1)]
        size = cases[0][1]["vocab_size"]
        size_note = f", its vocabulary {size:,} vs {vocab:,}" if rival != "joint" else ""
        parts.append(f"than {label} in {won}/{len(cases)} (language, type) cases (mean fertility "
                     f"{mean[0]:.3f} vs {mean[1]:.3f}{size_note})")
    if not total:
        return "no language-specific and multilingual tokenizer measured on one language: nothing to compare."
    return f"language-specific tokenizers have both lower fertility and fewer continued words {'; and '.join(parts)}."


def _q5_note(at: dict, langs: list[str]) -> str:
    notes = []
    for lang in langs:
        bpe, uni = at.get((lang, "bpe (language-specific)")), at.get((lang, "unigram (language-specific)"))
        if bpe and uni:
            lower = "unigram" if uni["fertility"] < bpe["fertility"] else "bpe"
            notes.append(f"{lang}: {lower} segments into fewer pieces (unigram {uni['fertility']:.3f}, "
                         f"bpe {bpe['fertility']:.3f})")
    if not notes:
        return ""
    return (" Q5 (tokenization only; the downstream half comes with pretraining): " + "; ".join(notes) + ".")


MIN_VOCAB_RATIO = 0.25   # the paper's monolingual (~30k) against mBERT's (~120k) pieces


def validity(record: dict) -> list:
    """The conditions of ``CLAIM`` on a results record (rows: ``kind`` and ``vocab_size`` per tokenizer)."""
    from ptmlab.studies.verdict import Condition

    rows = [r for r in record.get("rows") or [] if isinstance(r.get("vocab_size"), int | float)]
    mine = [r["vocab_size"] for r in rows if r.get("kind") == "language-specific"]
    rivals = [r["vocab_size"] for r in rows if r.get("kind") and r.get("kind") != "language-specific"]
    ratio = min(mine) / max(rivals) if mine and rivals else None
    return [Condition.check("smallest language-specific vocabulary / largest multilingual rival's", ratio, ">=",
                            MIN_VOCAB_RATIO)]
