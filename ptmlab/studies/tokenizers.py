"""Study ``tokenizers`` (ACL 2021 "How Good is Your Tokenizer?", and the tokenizer half of Q5).

Claim (Rust et al., ACL 2021): a language-specific tokenizer has lower fertility (pieces per word) and fewer
continued words (words split into two or more pieces) than a multilingual one, in most languages.

Design. Per language, the **language-specific tokenizers** are the real pretrained monolingual ones where one exists
offline (``--monolingual LANG=NAME``: English has minilm's and mpnet's WordPiece vocabularies, 30,522 and 30,527
pieces, lowercased), and **stand-ins** where none does (German and French here): BPE, WordPiece and Unigram trained
on that language's general-domain text (``--files``: the news test sets' training part and Multi30k) at the real
ones' vocabulary (30,522 pieces) and normalization (lowercased), labelled ``stand-in`` in the table. English gets
stand-ins too, trained the same way on as much English text: they calibrate the stand-ins against the real
tokenizers of that language. The **rival** is each pretrained multilingual tokenizer in ``--multilingual`` (XLM-R,
250,002 pieces for about 100 languages). Everything is measured on held-out general-domain text of each language
(``--eval``: the 2008 news test set, about 2,000 sentences per language, kept out of every training part).
Secondary, reported and not deciding: the other stand-in types, mpnet, and with ``--joint`` the joint tokenizers (each
type trained on all languages together at the same size: a multilingual tokenizer of equal capacity; off by default,
it triples the training time).

Validity conditions (checked on the run's numbers before the rule; any unmet: cannot test): (1) each stand-in that
decides a language has the vocabulary of the real monolingual tokenizer it stands in for (at least 0.95 of it);
(2) stand-ins segment like real monolingual tokenizers: on a language that has both, the stand-in of the deciding
type is within 10% of the real tokenizer's fertility (a stand-in much worse than a real tokenizer would count against
the claim what belongs to the small training corpus, one much better would count for it what belongs to the domain).

Verdict rule (written before the runs): per language, the deciding language-specific tokenizer is fixed in advance:
the first real monolingual tokenizer named for it (English: minilm), else the stand-in of the first of --types
(WordPiece, the real ones' type), trained at the real ones' vocabulary. For each multilingual rival (XLM-R), the
differences rival minus deciding tokenizer in fertility and in the share of continued words are measured on that
language's held-out general-domain sentences, each with a 95% paired bootstrap interval over the sentences. A
language favours the claim when every interval lies above 0, goes against it when any lies below 0, and is undecided
otherwise. Supported when more than half of the languages favour the claim; not supported when so many go against it
that the undecided ones could not make a majority; inconclusive otherwise. The Q5 note (Unigram against BPE
fertility) is reported beside it.

Budgets (tokenization is deterministic: the noise is the choice of held-out sentences, hence the bootstrap, not
seeds): ``--budget small`` trains on 300 lines per source at vocabulary 400 and measures 300 held-out sentences per
language (a mechanics check: its stand-ins are not of the real vocabulary, so it is ``cannot test`` by design; under a
minute); the default and ``--budget full`` (the same) train on all of the text (about 75k German, 52k French and 75k
English sentences) at 30,522 pieces and measure every held-out sentence, about 10 minutes on 2 CPU cores (tokenizer
training is CPU work: a GPU does not change it).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path

from ptmlab.core.config import at_least, opt
from ptmlab.core.errors import PtmlabError
from ptmlab.studies import STUDIES
from ptmlab.studies.common import StudyBase, parse_study_args, write_study
from ptmlab.studies.verdict import (
    INCONCLUSIVE,
    NOT_SUPPORTED,
    SUPPORTED,
    Claim,
    Verdict,
    combine,
    decide_above,
    paired_bootstrap,
)

RULE = ("per language, the deciding language-specific tokenizer is fixed in advance: the first real monolingual "
        "tokenizer named for it (English: minilm), else the stand-in of the first of --types (WordPiece, the real "
        "ones' type), trained at the real ones' vocabulary. For each multilingual rival (XLM-R), the differences "
        "rival minus deciding tokenizer in fertility and in the share of continued words are measured on that "
        "language's held-out general-domain sentences, each with a 95% paired bootstrap interval over the sentences. "
        "A language favours the claim when every interval lies above 0, goes against it when any lies below 0, and "
        "is undecided otherwise. Supported when more than half of the languages favour the claim; not supported when "
        "so many go against it that the undecided ones could not make a majority; inconclusive otherwise. The Q5 "
        "note (Unigram against BPE fertility) is reported beside it.")
CLAIM = Claim(
    study="tokenizers",
    claim="A language-specific tokenizer has lower fertility and fewer continued words than a multilingual one.",
    source="ACL 2021; Rust et al., How Good is Your Tokenizer? On the Monolingual Performance of Multilingual "
           "Language Models",
    paper="monolingual tokenizers below mBERT's fertility and continued-word share in most of the nine languages "
          "studied; no number is copied here",
    rule=RULE,
    conditions=(
        "each deciding stand-in's vocabulary at least 0.95 of the real monolingual tokenizer's it stands in for",
        "on a language with a real monolingual tokenizer, the stand-in of the deciding type within 10% of its "
        "fertility",
    ),
)
MIN_VOCAB_RATIO = 0.95
MAX_FERTILITY_GAP = 0.10
STAND_IN, REAL = "monolingual (stand-in)", "monolingual (pretrained)"
JOINT, RIVAL = "multilingual (trained, equal size)", "multilingual (pretrained)"
NEWS_TRAIN = [f"{lang}={src}" for lang in ("en", "de", "fr") for src in (f"newstest:{lang}:train", f"multi30k:{lang}")]
NEWS_TEST = [f"{lang}=newstest:{lang}:test" for lang in ("en", "de", "fr")]


@dataclass(frozen=True)
class TokenizersArgs(StudyBase):
    files: list[str] = opt(NEWS_TRAIN, "training text per language for the stand-ins, LANG=SOURCE")
    eval: list[str] = opt(NEWS_TEST, "held-out text per language, LANG=SOURCE")
    types: list[str] = opt(["wordpiece", "bpe", "unigram"], "stand-in types to train (the first decides)")
    vocab_size: int = opt(30522, "vocabulary size of every stand-in (the real monolingual tokenizers')")
    lowercase: bool = opt(True, "lowercase the stand-ins' text (as the real monolingual tokenizers do)")
    monolingual: list[str] = opt(["en=minilm", "en=mpnet"], "real pretrained monolingual tokenizers, LANG=NAME "
                                                              "(the first per language decides it)")
    multilingual: list[str] = opt(["xlmr"], "pretrained multilingual tokenizers: the claim's rivals")
    joint: bool = opt(False, "also train each type on all languages together (multilingual, same size; secondary)")
    max_lines: int = opt(0, "training lines per source (0: all)")
    max_eval: int = opt(0, "held-out sentences per language (0: all)")
    split_punct: bool = opt(False, "split punctuation off words when counting")
    output: str = opt("runs/study-tokenizers", "output directory")

    def validate(self) -> None:
        at_least(self, 1, "vocab_size")
        at_least(self, 0, "max_lines", "max_eval")


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


# what --budget small runs (tests, CI): the design at toy size
SMALL = {"max_lines": 300, "max_eval": 300, "vocab_size": 400, "monolingual": ["en=minilm"]}
FULL: dict = {}   # the default is the honest budget: all of the text at the real vocabulary


def deciders(langs: list[str], real: dict[str, list[str]], types: list[str]) -> dict[str, str]:
    """The tokenizer that decides each language, fixed before any number: its first real monolingual tokenizer,
    else the stand-in of the first type."""
    return {lang: real[lang][0] if real.get(lang) else f"{types[0]}-{lang}" for lang in langs}


RERUN = ("the study does not yet keep each sentence's fertility and continued-word share per tokenizer (evidence); "
         "a run that keeps them would be recomputable")


@STUDIES.register("tokenizers", help="ACL 2021: language-specific tokenizers have lower fertility than "
                                     "multilingual ones (real monolingual tokenizers and stand-ins vs XLM-R)")
def run(argv: list[str]) -> int:
    from ptmlab.tokenization.compare import evaluate, load_all, write_outputs
    from ptmlab.tokenization.corpora import resolve_sources
    from ptmlab.tokenization.load import from_backend
    from ptmlab.tokenization.plots import metric_figure
    from ptmlab.tokenization.train import resolve_types, save_tokenizer, scan_sources, train_tokenizer

    a = parse_study_args("tokenizers", TokenizersArgs, argv, __doc__, small=SMALL, full=FULL)
    out = Path(a.output)
    train_specs, eval_specs = _by_lang(a.files, "--files"), _by_lang(a.eval, "--eval")
    real = _by_lang(a.monolingual, "--monolingual")
    langs = list(dict.fromkeys([*eval_specs]))
    missing = sorted(set(train_specs) - set(eval_specs))
    if missing:
        raise PtmlabError(f"no --eval text for language(s) {', '.join(missing)}: add LANG=SOURCE to --eval")
    types = [t for kind in a.types for t in resolve_types(kind)]
    if not types:
        raise PtmlabError("--types is empty: name at least one of bpe, wordpiece, unigram")
    uncovered = [lang for lang in langs if not real.get(lang) and lang not in train_specs]
    if uncovered:
        raise PtmlabError(f"language(s) {', '.join(uncovered)} have neither a real monolingual tokenizer "
                          "(--monolingual) nor training text for stand-ins (--files)")
    corpora = {lang: _head(resolve_sources(specs, lang), a.max_lines) for lang, specs in train_specs.items()}
    if a.joint and len(corpora) > 1:
        corpora["joint"] = [s for lang in train_specs for s in corpora[lang]]
    trained = []
    for group, sources in corpora.items():
        scan = scan_sources(sources, a.lowercase)
        for kind in types:
            print(f"training {kind} on {group} text ({scan.lines:,} lines, vocab {a.vocab_size})", flush=True)
            tok = train_tokenizer(kind, sources, a.vocab_size, a.lowercase, scan=scan)
            path = out / "tokenizers" / f"{kind}-{group}"
            save_tokenizer(tok, path, {"type": kind, "group": group, "vocab_size": tok.get_vocab_size(),
                                       "lowercase": a.lowercase, "files": [s.origin for s in sources]})
            trained.append(from_backend(tok, f"{kind}-{group}", str(path)))
    held_by_lang = {lang: _head(resolve_sources(specs, lang), a.max_eval) for lang, specs in eval_specs.items()}
    held_out = [s for sources in held_by_lang.values() for s in sources]
    real_names = list(dict.fromkeys(n for names in real.values() for n in names))
    pretrained = load_all(list(dict.fromkeys(real_names + a.multilingual)))
    report = evaluate(trained + pretrained, held_out, a.split_punct)
    write_outputs(report, out / "eval")
    decide_by = deciders(langs, real, types)
    rows = study_rows(report, types, langs, real, a.multilingual, decide_by)
    tokenizers = {t.name: t for t in trained + pretrained}
    per_lang = {}
    for lang in langs:
        lines = [line for src in held_by_lang[lang] for line in src.lines()]
        mine = decide_by[lang]
        if mine not in tokenizers:
            continue
        counts = {name: sentence_counts(tokenizers[name], lines, a.split_punct) for name in [mine, *a.multilingual]}
        per_lang[lang] = {f"{lang}: {rival} vs {mine}": (counts[mine], counts[rival]) for rival in a.multilingual}
    verdict = decide_majority(per_lang)
    at = {(r["lang"], r["tokenizer"]): r for r in rows}
    verdict = Verdict(verdict.outcome, verdict.reason + "." + _q5_note(at, langs), verdict.estimate,
                      detectable_effect=verdict.detectable_effect, parts=verdict.parts)
    figures = []
    for metric in ("fertility", "continued_words"):
        table: dict[str, dict] = {}
        for r in rows:
            table.setdefault(r["tokenizer"], {})[r["lang"]] = r
        figures.append((metric_figure(table, metric), metric, f"{metric} per language on held-out text"))
    write_study(out, "Study: tokenizers (language-specific vs multilingual)", rows, verdict, figures,
                extra={"vocab_size": a.vocab_size, "deciding": decide_by, "rivals": list(a.multilingual),
                       "metrics_file": str(out / "eval" / "metrics.json"),
                       "summary": summary_text(rows, langs, a.multilingual)},
                claim=CLAIM, budget=a.budget, seeds=None,
                columns=["lang", "tokenizer", "kind", "decides", "vocab_size", "fertility", "continued_words",
                         "whole_words", "unk_rate", "chars_per_token"], validity=validity)
    return 0


def study_rows(report: dict, types: list[str], langs: list[str], real: dict[str, list[str]],
               multilingual: list[str], decide_by: dict[str, str]) -> list[dict]:
    """One row per language and tokenizer: its real monolingual ones, its stand-ins, the joint ones, the rivals."""
    by_lang, sizes = report["by_language"], report["tokenizers"]
    rows = []
    for lang in langs:
        entries = [(name, name, REAL) for name in real.get(lang, [])]
        entries += [(f"{t} (stand-in)", f"{t}-{lang}", STAND_IN) for t in types]
        entries += [(f"{t} (joint)", f"{t}-joint", JOINT) for t in types]
        entries += [(name, name, RIVAL) for name in multilingual]
        for label, name, kind in entries:
            if name in by_lang and lang in by_lang[name]:
                m = by_lang[name][lang]
                rows.append({"lang": lang, "tokenizer": label, "name": name, "kind": kind,
                             "decides": name == decide_by.get(lang), "vocab_size": sizes[name]["vocab_size"],
                             **{k: m[k] for k in ("fertility", "continued_words", "whole_words", "unk_rate",
                                                  "chars_per_token")}})
    return rows


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


def decide_majority(per_language: dict[str, dict[str, tuple[dict, dict]]]) -> Verdict:
    """The rule of ``CLAIM``: ``per_language`` maps a language to its comparisons (``decide``'s input: the deciding
    tokenizer's and a rival's sentence counts on that language's held-out sentences). A language favours the claim
    when ``decide`` supports it there, goes against it when ``decide`` does not; the claim needs more than half of
    the languages in favour. The estimate shown is the least certain among the languages that carry the outcome."""
    if not per_language or not any(per_language.values()):
        return Verdict(INCONCLUSIVE, "no language-specific and multilingual tokenizer measured on one language: "
                                     "nothing to compare")
    by_lang = {lang: decide(cases) for lang, cases in per_language.items() if cases}
    n = len(by_lang)
    favour = [lang for lang, v in by_lang.items() if v.outcome == SUPPORTED]
    against = [lang for lang, v in by_lang.items() if v.outcome == NOT_SUPPORTED]
    undecided = [lang for lang in by_lang if lang not in favour and lang not in against]
    if len(favour) > n / 2:
        outcome, carry = SUPPORTED, favour
    elif len(favour) + len(undecided) <= n / 2:
        outcome, carry = NOT_SUPPORTED, against
    else:
        outcome, carry = INCONCLUSIVE, undecided
    pick = by_lang[carry[0]] if len(carry) == 1 else min(
        (by_lang[lang] for lang in carry),
        key=lambda v: v.estimate.low if outcome == SUPPORTED else -v.estimate.high if outcome == NOT_SUPPORTED
        else -(v.estimate.high - v.estimate.low))
    counts = f"{len(favour)} of {n} languages favour the language-specific tokenizer beyond noise " \
             f"({', '.join(favour) or 'none'}), {len(against)} go against it ({', '.join(against) or 'none'}), " \
             f"{len(undecided)} undecided"
    detail = "; ".join(f"{lang}: {v.text()}" for lang, v in by_lang.items())
    return Verdict(outcome, f"{counts}; {detail}", pick.estimate, detectable_effect=pick.detectable_effect,
                   parts=tuple(by_lang.values()))


def summary_text(rows: list[dict], langs: list[str], multilingual: list[str]) -> str:
    """Per language: the deciding tokenizer's fertility against each rival's, and the stand-ins' calibration where a
    real monolingual tokenizer exists (a description beside the verdict, not the rule)."""
    parts = []
    for lang in langs:
        mine = [r for r in rows if r["lang"] == lang and r.get("decides")]
        rivals = [r for r in rows if r["lang"] == lang and r["kind"] == RIVAL and r["name"] in multilingual]
        if not mine or not rivals:
            continue
        m = mine[0]
        label = f"{m['tokenizer']}{' (real)' if m['kind'] == REAL else ''}"
        vs = ", ".join(f"{r['tokenizer']} {r['fertility']:.3f} / {r['continued_words']:.3f}" for r in rivals)
        parts.append(f"{lang}: {label} fertility / continued words {m['fertility']:.3f} / "
                     f"{m['continued_words']:.3f} vs {vs}")
    for lang, real, stand in _calibration(rows):
        parts.append(f"calibration on {lang}: stand-in {stand['tokenizer']} fertility {stand['fertility']:.3f} vs "
                     f"the real {real['tokenizer']} {real['fertility']:.3f}")
    if not parts:
        return "no language-specific and multilingual tokenizer measured on one language: nothing to compare."
    return "; ".join(parts) + "."


def _q5_note(at: dict, langs: list[str]) -> str:
    notes = []
    for lang in langs:
        bpe, uni = at.get((lang, "bpe (stand-in)")), at.get((lang, "unigram (stand-in)"))
        if bpe and uni:
            lower = "unigram" if uni["fertility"] < bpe["fertility"] else "bpe"
            notes.append(f"{lang}: {lower} segments into fewer pieces (unigram {uni['fertility']:.3f}, "
                         f"bpe {bpe['fertility']:.3f})")
    if not notes:
        return ""
    return (" Q5 (tokenization only; the downstream half comes with pretraining): " + "; ".join(notes) + ".")


def _calibration(rows: list[dict]) -> list[tuple[str, dict, dict]]:
    """(language, its deciding real tokenizer, the stand-in of the deciding type) where a language has both: the
    deciding type is the one deciding the languages without a real tokenizer."""
    deciding_types = {r["tokenizer"] for r in rows if r.get("decides") and r.get("kind") == STAND_IN}
    out = []
    for lang in dict.fromkeys(r["lang"] for r in rows):
        real = [r for r in rows if r["lang"] == lang and r.get("decides") and r.get("kind") == REAL]
        stand = [r for r in rows
                 if r["lang"] == lang and r.get("kind") == STAND_IN and r["tokenizer"] in deciding_types]
        if real and stand:
            out.append((lang, real[0], stand[0]))
    return out


def validity(record: dict) -> list:
    """The conditions of ``CLAIM`` on a results record (rows: ``kind``, ``decides``, ``vocab_size``, ``fertility``
    per language and tokenizer). Without deciding stand-ins both hold trivially (value 1 and 0); a record whose rows
    name no deciding tokenizer (``decides``) leaves both unmet, value null."""
    from ptmlab.studies.verdict import Condition

    rows = [r for r in record.get("rows") or [] if isinstance(r.get("vocab_size"), int | float)]
    stand_ins = [r for r in rows if r.get("decides") and r.get("kind") == STAND_IN]
    real_sizes = [r["vocab_size"] for r in rows if r.get("kind") == REAL]
    if not any("decides" in r for r in rows):  # a record that names no deciding tokenizer cannot show either
        ratio, gap = None, None
    elif not stand_ins:
        ratio, gap = 1.0, 0.0
    else:
        ratio = min(r["vocab_size"] for r in stand_ins) / min(real_sizes) if real_sizes else None
        gaps = [abs(stand["fertility"] / real["fertility"] - 1) for _, real, stand in _calibration(rows)]
        gap = max(gaps) if gaps else None
    return [Condition.check("smallest deciding stand-in vocabulary / the real monolingual tokenizer's", ratio, ">=",
                            MIN_VOCAB_RATIO),
            Condition.check("stand-in of the deciding type against the real monolingual tokenizer: |fertility ratio "
                            "- 1|", gap, "<=", MAX_FERTILITY_GAP)]
