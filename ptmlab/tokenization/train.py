"""Train BPE, WordPiece and Unigram tokenizers with the ``tokenizers`` library and save them for transformers.

All three share the normalizer (NFKC, optionally lowercase) and BERT-style special tokens and post-processing
(``[CLS] A [SEP] B [SEP]``), so a trained tokenizer drops into a BERT model. BPE and Unigram see the same
SentencePiece-style words (a ``▁`` marks a word start), so they differ only in the algorithm (the Q5
comparison); WordPiece is BERT's own recipe (whitespace and punctuation split, ``##`` marks a continuation).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

from ptmlab.core.errors import PtmlabError
from ptmlab.core.io import atomic_write_json
from ptmlab.core.progress import progress
from ptmlab.core.registry import Registry
from ptmlab.tokenization.corpora import TextSource
from ptmlab.tokenization.savedir import atomic_directory

SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
SAVED_FILES = {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "train_info.json"}
_BATCH_LINES = 1000


@dataclass
class Recipe:
    """An untrained tokenizer and the trainer that fills it; ``extra_alphabet`` counts marker symbols (▁)."""

    tokenizer: Tokenizer
    trainer: object
    extra_alphabet: int


TYPES: Registry[Callable[[int, int, bool], Recipe]] = Registry("tokenizer type")


@TYPES.register("bpe", help="byte-pair encoding over SentencePiece-style words (merges frequent pairs)")
def _bpe(vocab_size: int, min_frequency: int, show: bool) -> Recipe:
    tok = Tokenizer(models.BPE(unk_token="[UNK]", fuse_unk=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency, show_progress=show,
                                  special_tokens=SPECIAL_TOKENS)
    return Recipe(tok, trainer, 1)


@TYPES.register("wordpiece", help="BERT's WordPiece (whitespace and punctuation split, ## continuations)")
def _wordpiece(vocab_size: int, min_frequency: int, show: bool) -> Recipe:
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, min_frequency=min_frequency,
                                        show_progress=show, special_tokens=SPECIAL_TOKENS)
    return Recipe(tok, trainer, 0)


@TYPES.register("unigram", help="Unigram language model over SentencePiece-style words (prunes a large seed)")
def _unigram(vocab_size: int, min_frequency: int, show: bool) -> Recipe:
    tok = Tokenizer(models.Unigram())
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    trainer = trainers.UnigramTrainer(vocab_size=vocab_size, show_progress=show,
                                      special_tokens=SPECIAL_TOKENS, unk_token="[UNK]")
    return Recipe(tok, trainer, 1)


def resolve_types(kind: str) -> list[str]:
    """``all`` -> every type; otherwise the one named (an unknown name is a PtmlabError)."""
    if kind == "all":
        return TYPES.names()
    TYPES.get(kind)
    return [kind]


def make_normalizer(lowercase: bool):
    return normalizers.Sequence([normalizers.NFKC(), normalizers.Lowercase()] if lowercase
                                else [normalizers.NFKC()])


@dataclass
class Scan:
    """What one pass over the training text found: its alphabet (after normalisation) and size."""

    alphabet: set[str]
    lines: int
    chars: int


def scan_sources(sources: list[TextSource], lowercase: bool = False) -> Scan:
    """Read the text once: count lines and characters, collect the alphabet, reject text with no words."""
    raw: set[str] = set()
    lines = chars = 0
    for src in sources:
        for line in src.lines():
            raw.update(line)
            lines += 1
            chars += len(line)
    norm = make_normalizer(lowercase)
    alphabet = {c for ch in raw for c in norm.normalize_str(ch) if not c.isspace()}
    if not alphabet:
        names = ", ".join(s.origin for s in sources)
        raise PtmlabError(f"training text {names} holds no words: pass files with text in them")
    return Scan(alphabet, lines, chars)


def check_vocab_size(kind: str, vocab_size: int, scan: Scan) -> None:
    needed = len(SPECIAL_TOKENS) + len(scan.alphabet) + TYPES.get(kind)(vocab_size, 0, False).extra_alphabet
    if vocab_size < needed:
        raise PtmlabError(f"--vocab-size {vocab_size} is smaller than the alphabet of the text "
                          f"({len(scan.alphabet)} characters + {needed - len(scan.alphabet)} special/marker "
                          f"tokens): use --vocab-size {needed} or more")


def _progress_enabled() -> bool:
    return os.environ.get("PTMLAB_PROGRESS", "1") != "0" and sys.stderr.isatty()


def _batches(sources: list[TextSource], bar) -> Iterator[list[str]]:
    batch: list[str] = []
    for src in sources:
        for line in src.lines():
            batch.append(line)
            if len(batch) >= _BATCH_LINES:
                bar.update(len(batch))
                yield batch
                batch = []
    if batch:
        bar.update(len(batch))
        yield batch


def train_tokenizer(kind: str, sources: list[TextSource], vocab_size: int, lowercase: bool = False,
                    min_frequency: int = 2, scan: Scan | None = None) -> Tokenizer:
    """Train one tokenizer of type ``kind`` (bpe, wordpiece, unigram) on ``sources``."""
    if vocab_size < 1:
        raise PtmlabError(f"--vocab-size {vocab_size} must be positive")
    if min_frequency < 0:
        raise PtmlabError(f"--min-frequency {min_frequency} must be 0 or more")
    scan = scan or scan_sources(sources, lowercase)
    check_vocab_size(kind, vocab_size, scan)
    show = _progress_enabled()
    recipe = TYPES.get(kind)(vocab_size, min_frequency, show)
    tok = recipe.tokenizer
    tok.normalizer = make_normalizer(lowercase)
    with progress(total=scan.lines, desc=f"reading text for {kind}", unit="line", disable=not show) as bar:
        if kind == "wordpiece":
            tok = _train_wordpiece(tok, _batches(sources, bar), scan, vocab_size, min_frequency, show)
        else:
            tok.train_from_iterator(_batches(sources, bar), recipe.trainer, length=scan.lines)
    tok = canonical_order(tok)
    if tok.get_vocab_size() > vocab_size:  # the trainer keeps the whole alphabet (WordPiece: c and ##c)
        raise PtmlabError(f"--vocab-size {vocab_size} is smaller than the alphabet of the text: {kind} needs "
                          f"{tok.get_vocab_size()} tokens for its characters and special tokens alone: use "
                          f"--vocab-size {tok.get_vocab_size()} or more")
    cls_id, sep_id = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)])
    return tok


PRIVATE_USE = 0xF0000  # Supplementary Private Use Area-A (65,534 code points, then Area-B)


def _train_wordpiece(tok: Tokenizer, batches, scan: Scan, vocab_size: int, min_frequency: int,
                     show: bool) -> Tokenizer:
    """WordPiece's training as the ``tokenizers`` WordPiece trainer does it (BPE merges over words whose
    non-initial characters are distinct ``##`` symbols), but with the ``##`` symbols numbered in a fixed order:
    that trainer numbers them as it meets them in hash-map order, and merges of equal count are broken by those
    numbers, so two runs on the same text gave different vocabularies. Each non-initial character is written as
    its own private-use character (the i-th of the sorted alphabet), a plain BPE learns the merges, and its
    vocabulary becomes WordPiece's with the ``##`` put back. ``tok`` brings the normalizer and pre-tokenizer."""
    alphabet = sorted(scan.alphabet)
    to_mark = {c: chr(PRIVATE_USE + i) for i, c in enumerate(alphabet)}
    from_mark = {m: c for c, m in to_mark.items()}

    def mark(word: str) -> str:
        return word[:1] + "".join(to_mark.get(c, c) for c in word[1:])

    def unmark(piece: str) -> str:
        text = "".join(from_mark.get(c, c) for c in piece)
        return "##" + text if piece[:1] in from_mark else text

    def marked():
        for batch in batches:
            yield [" ".join(mark(w) for w, _ in tok.pre_tokenizer.pre_tokenize_str(tok.normalizer.normalize_str(line)))
                   for line in batch]

    bpe = Tokenizer(models.BPE(unk_token="[UNK]"))
    bpe.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    # every character of the text is kept whole as well, word-initial or not (as the WordPiece trainer does)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency, show_progress=show,
                                  special_tokens=SPECIAL_TOKENS, initial_alphabet=alphabet)
    bpe.train_from_iterator(marked(), trainer, length=scan.lines)
    vocab: dict[str, int] = {}
    for piece, _ in sorted(bpe.get_vocab().items(), key=lambda kv: kv[1]):
        vocab.setdefault(piece if piece in SPECIAL_TOKENS else unmark(piece), len(vocab))
    out = Tokenizer(models.WordPiece(vocab=vocab, unk_token="[UNK]"))
    out.normalizer, out.pre_tokenizer, out.decoder = tok.normalizer, tok.pre_tokenizer, tok.decoder
    for t in SPECIAL_TOKENS:
        out.add_special_tokens([t])
    return out


UNIGRAM_SCORE_DECIMALS = 4  # far below what changes a segmentation, far above the trainer's float noise (~1e-11)
UNIGRAM_CHAR_PENALTY = 1e-4  # the step between the scores the Unigram trainer gives characters it had pruned


def canonical_order(tok: Tokenizer) -> Tokenizer:
    """A trained Unigram tokenizer with what the trainer leaves to hash-set order made canonical, so that training
    twice on the same text gives the same tokenizer, ids included: the characters it pruned and put back get their
    scores in another order every run (``_unigram_char_penalties``) and its scores differ by ~1e-11 (float sums in
    another order). Scores are rounded to ``UNIGRAM_SCORE_DECIMALS`` decimals and the pieces after the special
    tokens ordered by (score descending, piece). Other models are returned as they are (BPE comes out the same
    every run; WordPiece is trained through it, ``_train_wordpiece``)."""
    import json

    data = json.loads(tok.to_str())
    model = data["model"]
    if model.get("type") == "Unigram":
        unk = model["vocab"][model["unk_id"]][0] if model.get("unk_id") is not None else None
        fixed = [[p, s] for p, s in model["vocab"] if p in SPECIAL_TOKENS]
        scores = _unigram_char_penalties({p: s for p, s in model["vocab"] if p not in SPECIAL_TOKENS})
        rest = sorted(([p, round(s, UNIGRAM_SCORE_DECIMALS)] for p, s in scores.items()),
                      key=lambda ps: (-ps[1], ps[0]))
        model["vocab"] = fixed + rest
        if unk is not None:
            model["unk_id"] = [p for p, _ in model["vocab"]].index(unk)
    else:
        return tok
    ids = {t: i for i, t in enumerate(p for p, _ in model["vocab"])}
    for added in data.get("added_tokens") or []:
        added["id"] = ids.get(added["content"], added["id"])
    return Tokenizer.from_str(json.dumps(data))


def _unigram_char_penalties(scores: dict[str, float]) -> dict[str, float]:
    """The Unigram trainer puts back every character it pruned with the score ``min + k x 1e-4``, k counting in
    hash-set order, so which character gets which k changes from run to run. Those characters (single characters
    whose score is on that ladder) get the ladder's scores in character order instead."""
    if not scores:
        return scores
    low = min(scores.values())
    singles = [p for p in scores if len(p) == 1]

    def on_ladder(x: float) -> bool:
        k = (x - low) / UNIGRAM_CHAR_PENALTY
        return abs(k - round(k)) < 1e-6 and round(k) < len(singles)

    ladder = sorted(p for p in singles if on_ladder(scores[p]))
    out = dict(scores)
    for p, x in zip(ladder, sorted((scores[p] for p in ladder), reverse=True), strict=True):
        out[p] = x
    return out


def save_tokenizer(tok: Tokenizer, out_dir: str | Path, info: dict, model_max_length: int = 512) -> Path:
    """Save as a transformers tokenizer directory (``AutoTokenizer.from_pretrained`` loads it), atomically."""
    from transformers import PreTrainedTokenizerFast

    hf = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]",
                                 cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]",
                                 model_max_length=model_max_length,
                                 model_input_names=["input_ids", "token_type_ids", "attention_mask"])
    with atomic_directory(out_dir, allowed=SAVED_FILES) as tmp:
        hf.save_pretrained(str(tmp))
        atomic_write_json(tmp / "train_info.json", info)
    return Path(out_dir)


def train_and_save(kinds: list[str], sources: list[TextSource], vocab_size: int, output: str | Path,
                   lowercase: bool = False, min_frequency: int = 2) -> dict[str, dict]:
    """Train each type in ``kinds``; one type saves to ``output``, several to ``output/<type>``."""
    scan = scan_sources(sources, lowercase)
    for kind in kinds:
        check_vocab_size(kind, vocab_size, scan)
    trained = {}
    for kind in kinds:  # train every type before saving any, so a failure leaves no partial set
        start = time.perf_counter()
        tok = train_tokenizer(kind, sources, vocab_size, lowercase, min_frequency, scan)
        trained[kind] = (tok, time.perf_counter() - start)
    results = {}
    for kind, (tok, seconds) in trained.items():
        info = {"type": kind, "vocab_size": tok.get_vocab_size(), "requested_vocab_size": vocab_size,
                "lowercase": lowercase, "min_frequency": min_frequency, "alphabet": len(scan.alphabet),
                "lines": scan.lines, "chars": scan.chars, "seconds": round(seconds, 3),
                "files": [s.origin for s in sources]}
        target = Path(output) / kind if len(kinds) > 1 else Path(output)
        save_tokenizer(tok, target, info)
        results[kind] = {**info, "path": str(target)}
    return results
