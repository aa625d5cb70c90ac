"""Token classification data (NER, chunking, POS): reading, tag schemes, word-to-subword alignment, batches.

Sources: CoNLL-style column files (whitespace- or tab-separated, a blank line between sentences, ``-DOCSTART-``
lines skipped, ``.gz`` read as is; by default the first column is the token and the last the tag), and tables with a
list of tokens and a list of tags per row (jsonl, csv with JSON lists or space-separated strings, parquet, a
``datasets`` object whose tag column is a ``Sequence(ClassLabel)``). Tags in IOB1, IOB2 or BIOES are converted to
IOB2, the scheme models are trained and scored in; ``O`` is always label 0.

Alignment: a word's label goes to its first sub-token and the others get -100 (ignored by the loss), or every
sub-token gets the word's label with ``label_all_subtokens``; predictions are read back from each word's first
sub-token, so a prediction is always one tag per input word (words cut off by ``--max-length`` are tagged ``O``).
"""

from __future__ import annotations

import gzip
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ptmlab.core.errors import PtmlabError
from ptmlab.data.batching import pad_rows, padded_ids
from ptmlab.data.encode import TokenRows
from ptmlab.data.shared import shared_subdir

IGNORE = -100  # label of sub-tokens the loss skips (PyTorch's cross-entropy ignore_index)
TAG_SCHEMES = ("auto", "iob1", "iob2", "bioes")
TABLE_SUFFIXES = (".jsonl", ".json", ".csv", ".parquet", ".arrow")  # everything else is read as CoNLL columns
_TAG = re.compile(r"^([BIESLU])-(.+)$")


# --------------------------------------------------------------------------------------------------- the split
@dataclass
class TokenSplit:
    """Sentences as word lists, with their tags (IOB2 label ids) when labelled."""

    tokens: list[list[str]]
    tags: list[list[int]] | None = None
    ids: list = field(default_factory=list)
    label_all_subtokens: bool = False  # how encode() aligns labels (--label-all-subtokens)

    def __len__(self) -> int:
        return len(self.tokens)

    def select(self, idx: list[int]) -> TokenSplit:
        return TokenSplit([self.tokens[i] for i in idx], [self.tags[i] for i in idx] if self.tags is not None
                          else None, [self.ids[i] for i in idx] if self.ids else [], self.label_all_subtokens)

    def encode(self, tokenizer, max_length: int) -> TokenFeatures:
        """What ``data.encode.encode_split`` returns for this split: sub-tokens with aligned labels."""
        return encode_tokens(tokenizer, self, max_length, self.label_all_subtokens)


@dataclass
class Sentence:
    tokens: list[str]
    tags: list[str] | None
    where: str  # "file:line" of its first token, for error messages


# ------------------------------------------------------------------------------------------------------ readers
def _open_text(path: Path):
    if not path.is_file():
        raise PtmlabError(f"data file '{path}' does not exist: check the path")
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8")
    return open(path, encoding="utf-8")


def _column(col, default: int) -> int:
    """A column position from an option: None or a name (the table defaults) -> default; "-1" -> -1."""
    if col is None:
        return default
    try:
        return int(col)
    except (TypeError, ValueError):
        return default


def read_conll(path: str | Path, token_col: int = 0, tag_col: int | None = -1) -> list[Sentence]:
    """Sentences of a CoNLL column file; ``tag_col=None`` reads tokens only (unlabelled data)."""
    path = Path(path)
    sentences: list[Sentence] = []
    tokens: list[str] = []
    tags: list[str] = []
    start = 0
    try:
        with _open_text(path) as f:
            for n, line in enumerate(f, 1):
                cols = line.split()
                if not cols or cols[0] == "-DOCSTART-":
                    if tokens:
                        sentences.append(Sentence(tokens, tags if tag_col is not None else None, f"{path}:{start}"))
                    tokens, tags = [], []
                    continue
                width = len(cols)
                at = [c % width if -width <= c < width else None for c in
                      (token_col, tag_col if tag_col is not None else token_col)]
                if None in at or (tag_col is not None and at[0] == at[1]):
                    raise PtmlabError(f"{path}:{n}: line has {len(cols)} column(s) but the token/tag columns are "
                                      f"{token_col}/{tag_col}: fix the line or set --text-col/--label-col")
                if not tokens:
                    start = n
                tokens.append(cols[token_col])
                if tag_col is not None:
                    tags.append(cols[tag_col])
    except UnicodeDecodeError as e:
        raise PtmlabError(f"cannot read '{path}' as UTF-8 text: {e}") from None
    except (OSError, EOFError) as e:
        raise PtmlabError(f"cannot read '{path}': {e}") from None
    if tokens:
        sentences.append(Sentence(tokens, tags if tag_col is not None else None, f"{path}:{start}"))
    if not sentences:
        raise PtmlabError(f"data file '{path}' holds no sentences (CoNLL columns, a blank line between sentences)")
    return sentences


def _as_list(value, col: str, where: str) -> list:
    """A list cell: a list, a JSON list string, or a whitespace-separated string (csv)."""
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, str):
        s = value.strip()
        if s.startswith("["):
            try:
                value = json.loads(s)
            except json.JSONDecodeError:
                raise PtmlabError(f"{where}: column '{col}' is not a JSON list: {s[:60]!r}") from None
        else:
            value = s.split()
    if not isinstance(value, list | tuple):
        raise PtmlabError(f"{where}: column '{col}' must hold a list (of tokens or tags), got {type(value).__name__}")
    return list(value)


def sentences_from_rows(rows: list[dict], where: str, tokens_col: str, tags_col: str | None,
                        first_line: int = 1, tag_names: list[str] | None = None) -> list[Sentence]:
    """Sentences from table rows with a token list and a tag list each; integer tags become ``tag_names``."""
    out = []
    for n, row in enumerate(rows):
        at = f"{where}:{n + first_line}" if first_line else f"{where}[{n}]"
        if tokens_col not in row:
            raise PtmlabError(f"{at}: row has no column '{tokens_col}': set --text-col to the token-list column "
                              f"(columns: {', '.join(map(str, row))})")
        toks = [str(t) for t in _as_list(row[tokens_col], tokens_col, at)]
        tags = None
        if tags_col is not None:
            if tags_col not in row:
                raise PtmlabError(f"{at}: row has no column '{tags_col}': set --label-col to the tag-list column "
                                  f"(columns: {', '.join(map(str, row))})")
            raw = _as_list(row[tags_col], tags_col, at)
            if tag_names is not None:
                bad = [t for t in raw if not isinstance(t, int) or not 0 <= t < len(tag_names)]
                if bad:
                    raise PtmlabError(f"{at}: tag id {bad[0]!r} is not one of the {len(tag_names)} tag names")
                raw = [tag_names[t] for t in raw]
            tags = [str(t) for t in raw]
        out.append(Sentence(toks, tags, at))
    return out


def _sequence_class_names(ds, col: str) -> list[str] | None:
    """Tag names of a ``datasets`` column typed ``Sequence(ClassLabel)`` (or a list of ClassLabel)."""
    feat = ds.features.get(col)
    inner = getattr(feat, "feature", None)
    if inner is None and isinstance(feat, list) and feat:
        inner = feat[0]
    names = getattr(inner, "names", None)
    return list(names) if names else None


def read_token_source(source, tokens_col: str | None, tags_col: str | None) -> list[Sentence]:
    """One split's sentences from a file path (CoNLL columns or a table by suffix) or an in-memory object
    (``datasets.Dataset``, pandas ``DataFrame``, list of dicts)."""
    if isinstance(source, str | Path):
        path = Path(source).expanduser()
        suffixes = [s.lower() for s in path.suffixes]
        if not suffixes or suffixes[-1] not in TABLE_SUFFIXES:
            return read_conll(path, _column(tokens_col, 0), None if tags_col == "" else _column(tags_col, -1))
        from ptmlab.data.sources import read_file

        table = read_file(path)
        return sentences_from_rows(table.rows, str(path), _table_col(tokens_col, "tokens", table.columns),
                                   _table_col(tags_col, "tags", table.columns, optional=True), table.first_line,
                                   table.class_names.get(str(tags_col)))
    mod = type(source).__module__.split(".")[0]
    if mod == "datasets":
        cols = list(source.features)
        tcol = _table_col(tokens_col, "tokens", cols)
        gcol = _table_col(tags_col, "tags", cols, optional=True)
        return sentences_from_rows(source.to_list(), "Dataset", tcol, gcol, 0,
                                   _sequence_class_names(source, gcol) if gcol else None)
    from ptmlab.data.sources import table_of

    table = table_of(source)
    return sentences_from_rows(table.rows, table.where, _table_col(tokens_col, "tokens", table.columns),
                               _table_col(tags_col, "tags", table.columns, optional=True), table.first_line)


def _table_col(col, default: str, columns: list[str], optional: bool = False) -> str | None:
    """The named column, or the usual name (tokens; tags / ner_tags) when the option is left at its default."""
    if col not in (None, "text", "label") and not str(col).lstrip("-").isdigit():
        return str(col)
    candidates = [default] + (["ner_tags", "labels", "tag", "label"] if default == "tags" else ["words"])
    for c in candidates:
        if c in columns:
            return c
    if optional:
        return None
    raise PtmlabError(f"no token-list column: the data has {', '.join(columns)}; name it with --text-col")


# ------------------------------------------------------------------------------------------------- tag schemes
def _parse(tag: str, where: str) -> tuple[str, str | None]:
    if tag == "O":
        return "O", None
    m = _TAG.match(tag)
    if not m:
        raise PtmlabError(f"{where}: unknown tag {tag!r}: tags are O or PREFIX-TYPE with PREFIX one of B I E S "
                          f"(IOB1, IOB2, BIOES)")
    return m.group(1), m.group(2)


def detect_scheme(sentences: list[Sentence]) -> str:
    """bioes when any E-/S-/L-/U- tag occurs, else iob1 (its conversion leaves valid IOB2 unchanged)."""
    for s in sentences:
        for t in s.tags or ():
            if t[:2] in ("E-", "S-", "L-", "U-"):
                return "bioes"
    return "iob1"


def to_iob2(tags: list[str], scheme: str, where: str) -> list[str]:
    """One sentence's tags in IOB2. Unknown tags (and prefixes the scheme does not have) raise ``PtmlabError``."""
    allowed = {"iob1": "BI", "iob2": "BI", "bioes": "BIESLU"}[scheme]
    out = []
    prev_type = None  # the entity type of the previous token (None after O)
    for t in tags:
        prefix, typ = _parse(t, where)
        if prefix == "O":
            out.append("O")
            prev_type = None
            continue
        if prefix not in allowed:
            raise PtmlabError(f"{where}: tag {t!r} is not valid {scheme.upper()}: use --tag-scheme to name the scheme")
        if prefix in ("B", "S", "U"):
            out.append(f"B-{typ}")
        elif prefix == "I" and scheme != "iob2" and prev_type != typ:
            out.append(f"B-{typ}")  # IOB1: an I- that does not continue an entity of its type starts one
        elif prefix in ("E", "L") and prev_type != typ:
            out.append(f"B-{typ}")
        else:
            out.append(f"I-{typ}")
        prev_type = None if prefix in ("E", "L", "S", "U") else typ
    return out


def normalise_tags(sentences: list[Sentence], scheme: str = "auto") -> list[Sentence]:
    """Every sentence's tags in IOB2 (checked); sentences with as many tags as tokens."""
    if scheme not in TAG_SCHEMES:
        raise PtmlabError(f"--tag-scheme '{scheme}' is unknown: choose {', '.join(TAG_SCHEMES)}")
    used = detect_scheme(sentences) if scheme == "auto" else scheme
    out = []
    for s in sentences:
        if s.tags is None:
            out.append(s)
            continue
        if len(s.tags) != len(s.tokens):
            raise PtmlabError(f"{s.where}: {len(s.tokens)} tokens but {len(s.tags)} tags: give one tag per token")
        out.append(Sentence(s.tokens, to_iob2(s.tags, used, s.where), s.where))
    return out


def tag_set(sentences: list[Sentence]) -> tuple[str, ...]:
    """The IOB2 label names in id order: O first, then B-/I- of each entity type (sorted), both always present."""
    types = sorted({t[2:] for s in sentences for t in (s.tags or ()) if t != "O"})
    return ("O", *[f"{p}-{t}" for t in types for p in ("B", "I")])


def to_split(sentences: list[Sentence], labels: tuple[str, ...] | None, source: str) -> TokenSplit:
    """Sentences as a ``TokenSplit``; a tag outside ``labels`` (one the training data never had) raises."""
    tokens = [s.tokens for s in sentences]
    if labels is None or any(s.tags is None for s in sentences):
        return TokenSplit(tokens, None, list(range(len(sentences))))
    ids = {name: i for i, name in enumerate(labels)}
    tags = []
    for s in sentences:
        for t in s.tags:
            if t not in ids:
                raise PtmlabError(f"{s.where}: tag {t!r} is not in the {source} tag set ({', '.join(labels)}): "
                                  f"fix the tag or train on data that has it")
        tags.append([ids[t] for t in s.tags])
    for s in sentences:
        if not s.tokens:
            raise PtmlabError(f"{s.where}: a sentence with no tokens")
    return TokenSplit(tokens, tags, list(range(len(sentences))))


# ----------------------------------------------------------------------------------------------- alignment
@dataclass
class TokenFeatures(TokenRows):
    """Sub-token ids of each sentence, with per-sub-token labels (-100 where ignored) and each sub-token's word.

    A batch source for the training loop: ``lengths`` and ``make_batch(indices, epoch)``."""

    input_ids: list[list[int]]
    word_ids: list[list[int | None]]
    labels: list[list[int]] | None
    n_words: list[int]
    pad_id: int = 0
    word_labels: list[list[int]] | None = None  # the gold tag id of every word (scoring reads these)

    def make_batch(self, indices: list[int], epoch: int = 0) -> dict:
        ids, mask = padded_ids([self.input_ids[i] for i in indices], self.pad_id)
        labels = pad_rows([self.labels[i] for i in indices], IGNORE, ids.shape[1]) if self.labels is not None else None
        batch = {"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids),
                 "index": torch.tensor(indices)}
        if labels is not None:
            batch["labels"] = labels
        return batch


def align_labels(word_ids: list[int | None], word_labels: list[int], label_all_subtokens: bool = False) -> list[int]:
    """Per-sub-token labels: the word's label on its first sub-token (every sub-token with
    ``label_all_subtokens``), -100 on the rest and on special tokens."""
    out, prev = [], None
    for w in word_ids:
        if w is None:
            out.append(IGNORE)
        elif w != prev or label_all_subtokens:
            out.append(word_labels[w])
        else:
            out.append(IGNORE)
        prev = w
    return out


def encode_tokens(tokenizer, split: TokenSplit, max_length: int, label_all_subtokens: bool = False) -> TokenFeatures:
    """Tokenize pre-split words (``is_split_into_words``), truncated to ``max_length`` sub-tokens."""
    if not getattr(tokenizer, "is_fast", False):
        raise PtmlabError("token classification needs a fast (Rust) tokenizer, which maps sub-tokens to words: "
                          "use a model that has tokenizer.json")
    if not len(split):
        return TokenFeatures([], [], [] if split.tags is not None else None, [], tokenizer.pad_token_id or 0)
    enc = tokenizer(split.tokens, is_split_into_words=True, truncation=True, max_length=max_length,
                    return_attention_mask=False, return_token_type_ids=False)
    word_ids = [enc.word_ids(i) for i in range(len(split))]
    labels = None
    if split.tags is not None:
        labels = [align_labels(w, t, label_all_subtokens) for w, t in zip(word_ids, split.tags, strict=True)]
    return TokenFeatures(list(enc["input_ids"]), word_ids, labels, [len(t) for t in split.tokens],
                         tokenizer.pad_token_id or 0, split.tags)


def word_predictions(logits, word_ids: list[int | None], n_words: int) -> list[int]:
    """One label id per word from a sentence's sub-token logits ([len, labels]): each word's first sub-token;
    words truncated away get label 0 (O)."""
    out = [0] * n_words
    seen = set()
    best = logits.argmax(-1)
    for pos, w in enumerate(word_ids):
        if w is not None and w not in seen:
            seen.add(w)
            out[w] = int(best[pos])
    return out


def word_scores(logits, word_ids: list[int | None], n_words: int):
    """Each word's first-sub-token logits ([n_words, labels]; zeros for truncated words): what a distilled student
    matches per word."""
    import numpy as np

    out = np.zeros((n_words, logits.shape[-1]), dtype=np.float32)
    seen = set()
    for pos, w in enumerate(word_ids):
        if w is not None and w not in seen:
            seen.add(w)
            out[w] = logits[pos]
    return out


# ------------------------------------------------------------------------------------------------------ the task
KIND = "token-classification"
METRICS = ("entity_f1", "entity_precision", "entity_recall")
CONLL2003_TAGS = ("O", "B-LOC", "I-LOC", "B-MISC", "I-MISC", "B-ORG", "I-ORG", "B-PER", "I-PER")
CONLL2003_FILES = {"train": "eng.train.gz", "dev": "eng.testa.gz", "test": "eng.testb.gz"}


def conll2003_dir() -> Path | None:
    """The shared CoNLL-2003 copy (PTMLAB_CONLL2003_DIR, else ../shared/data/ner/conll2003), or None."""
    return shared_subdir("ner/conll2003", CONLL2003_FILES["train"], env="PTMLAB_CONLL2003_DIR")


def load_token_task(name: str, sources: dict, text_col=None, label_col=None, labels: tuple[str, ...] | None = None,
                    tag_scheme: str = "auto"):
    """``TaskData`` of a token classification task: one source (file path or object) per split. The tag set comes
    from ``labels`` or the training split (the dev split when only it is given); every other split must keep to
    it. ``text_col``/``label_col``: a column position (CoNLL files) or name (tables); left at the defaults, the
    first and last columns of a CoNLL file, or tokens and tags / ner_tags of a table."""
    from ptmlab.data.loaders import TaskData
    from ptmlab.data.tasks import TaskSpec

    sentences = {s: normalise_tags(read_token_source(src, text_col, label_col), tag_scheme)
                 for s, src in sources.items() if src is not None}
    if not sentences:
        raise PtmlabError("a token classification task needs --train-file (or --dev-file to evaluate): CoNLL "
                          "columns, or jsonl/csv/parquet with token and tag lists")
    ref = "train" if "train" in sentences else "dev" if "dev" in sentences else next(iter(sentences))
    if labels is None:
        if any(s.tags is None for s in sentences[ref]):
            raise PtmlabError(f"the {ref} data has no tags: a token classification task needs them")
        labels = tag_set(sentences[ref])
        if len(labels) < 2:
            raise PtmlabError(f"the {ref} data has no entity tags (only O): nothing to learn")
    spec = TaskSpec(name, KIND, tuple(labels), METRICS, text_col="tokens", label_col="tags", id_col=None,
                    description="token classification")
    return TaskData(spec, {s: to_split(sents, spec.labels, ref) for s, sents in sentences.items()})


def load_conll2003(spec):
    folder = conll2003_dir()
    if folder is None:
        raise PtmlabError("task 'conll2003' reads ../shared/data/ner/conll2003 (eng.train.gz, eng.testa.gz, "
                          "eng.testb.gz), which is not here: set PTMLAB_CONLL2003_DIR or pass --task-kind "
                          "token-classification --train-file ... --dev-file ...")
    data = load_token_task(spec.name, {s: folder / f for s, f in CONLL2003_FILES.items()}, labels=spec.labels)
    data.spec = spec
    return data
