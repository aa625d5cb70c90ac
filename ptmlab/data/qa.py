"""Extractive question answering data: SQuAD-layout reading, windowed features, answers from logits.

Sources: SQuAD-layout JSON (``{"data": [{"paragraphs": [{"context", "qas": [...]}]}]}``, ``.json`` or ``.json.gz``)
and tables with ``question``, ``context`` and ``answers`` columns (jsonl, csv, parquet, a ``datasets`` object; the
answers as the hub's ``{"text": [...], "answer_start": [...]}`` or a list of ``{"text", "answer_start"}``). Every
answer must sit in its context at its offset.

Features: the question and a window of the context (``truncation="only_second"``); a context longer than one
window is read in several, consecutive windows overlapping by ``doc_stride`` tokens, as BERT's SQuAD recipe does. A
training window whose context part does not hold the whole first answer is labelled with position 0 ([CLS]).
Answers: the best-scoring span (start logit + end logit) over every window of an example, with the start no later
than the end and at most ``max_answer_length`` tokens, mapped back to characters of the original context; the
answer text is always ``context[start:end]``. Its ``score`` is the span's probability in its window (p_start *
p_end, as the transformers question-answering pipeline), its ``logit_score`` the logit sum.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from ptmlab.core.errors import PtmlabError
from ptmlab.data.batching import pad_rows, padded_ids
from ptmlab.data.encode import TokenRows
from ptmlab.data.shared import shared_subdir


@dataclass
class QASplit:
    """Questions with their contexts and (when labelled) gold answers as (text, character start) pairs."""

    questions: list[str]
    contexts: list[str]
    answers: list[list[tuple[str, int]]] | None = None
    ids: list = field(default_factory=list)
    doc_stride: int = 128  # how encode() windows long contexts (--doc-stride)
    window: int | None = None  # tokens per window when set (else the max_length encode() is given)

    def __len__(self) -> int:
        return len(self.questions)

    def select(self, idx: list[int]) -> QASplit:
        return QASplit([self.questions[i] for i in idx], [self.contexts[i] for i in idx],
                       [self.answers[i] for i in idx] if self.answers is not None else None,
                       [self.ids[i] for i in idx] if self.ids else [], self.doc_stride, self.window)

    def encode(self, tokenizer, max_length: int) -> QAFeatures:
        """What ``data.encode.encode_split`` returns for this split: windows, labelled where answers are known."""
        return qa_features(tokenizer, self, self.window or max_length, self.doc_stride,
                           train=self.answers is not None)


# ------------------------------------------------------------------------------------------------------ readers
def _check_answer(context: str, text: str, start, where: str) -> tuple[str, int]:
    try:
        start = int(start)
    except (TypeError, ValueError):
        raise PtmlabError(f"{where}: answer_start {start!r} is not a character offset") from None
    text = str(text)
    if not text:
        raise PtmlabError(f"{where}: an empty answer text: SQuAD v1.1 answers are non-empty spans of the context")
    if start < 0 or start + len(text) > len(context) or context[start:start + len(text)] != text:
        raise PtmlabError(f"{where}: answer {text[:40]!r} is not in its context at offset {start}: fix answer_start "
                          f"(the context there reads {context[max(0, start):start + len(text)][:40]!r})")
    return text, start


def _answer_list(raw, where: str) -> list[tuple[object, object]]:
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError:
            raise PtmlabError(f"{where}: answers {raw[:60]!r} are not JSON") from None
    if isinstance(raw, dict):  # the hub layout: {"text": [...], "answer_start": [...]}
        texts, starts = raw.get("text"), raw.get("answer_start")
        if texts is None or starts is None:
            raise PtmlabError(f"{where}: answers need 'text' and 'answer_start'")
        texts, starts = list(texts), list(starts)
        if len(texts) != len(starts):
            raise PtmlabError(f"{where}: {len(texts)} answer texts but {len(starts)} answer_start values")
        return list(zip(texts, starts, strict=True))
    if isinstance(raw, list | tuple):
        out = []
        for a in raw:
            if not isinstance(a, dict) or "text" not in a or "answer_start" not in a:
                raise PtmlabError(f"{where}: each answer needs 'text' and 'answer_start'")
            out.append((a["text"], a["answer_start"]))
        return out
    raise PtmlabError(f"{where}: answers must be a list of {{'text', 'answer_start'}} or the hub's "
                      f"{{'text': [...], 'answer_start': [...]}}")


def read_squad_json(path: str | Path, labelled: bool = True) -> QASplit:
    """A SQuAD-layout JSON file (optionally gzip-compressed)."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise PtmlabError(f"data file '{path}' does not exist: check the path")
    try:
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt", encoding="utf-8") as f:
            doc = json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError, OSError, EOFError) as e:
        raise PtmlabError(f"cannot read '{path}' as SQuAD JSON: {str(e)[:200]}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("data"), list):
        raise PtmlabError(f"'{path}' is not in the SQuAD layout (a JSON object with a 'data' list of articles)")
    out = QASplit([], [], [] if labelled else None, [])
    for a, article in enumerate(doc["data"]):
        for p, para in enumerate(article.get("paragraphs", [])):
            context = para.get("context")
            if not isinstance(context, str) or not context.strip():
                raise PtmlabError(f"{path}: article {a} paragraph {p} has no context")
            for q, qa in enumerate(para.get("qas", [])):
                where = f"{path}: question {qa.get('id', f'{a}/{p}/{q}')}"
                question = qa.get("question")
                if not isinstance(question, str) or not question.strip():
                    raise PtmlabError(f"{where}: empty question")
                out.questions.append(question)
                out.contexts.append(context)
                out.ids.append(str(qa.get("id", f"{a}-{p}-{q}")))
                if labelled:
                    answers = [_check_answer(context, t, s, where) for t, s in _answer_list(qa.get("answers", []),
                                                                                            where)]
                    if not answers:
                        raise PtmlabError(f"{where}: no answers (SQuAD v1.1 questions all have one)")
                    out.answers.append(answers)
    if not len(out):
        raise PtmlabError(f"'{path}' holds no questions")
    return out


def split_from_rows(rows: list[dict], where: str, first_line: int = 1, labelled: bool | None = None) -> QASplit:
    """Table rows with question, context and (optionally) answers; ``id`` kept when present."""
    if labelled is None:
        labelled = bool(rows) and "answers" in rows[0]
    out = QASplit([], [], [] if labelled else None, [])
    for n, row in enumerate(rows):
        at = f"{where}:{n + first_line}" if first_line else f"{where}[{n}]"
        for col in ("question", "context"):
            v = row.get(col)
            if not isinstance(v, str) or not v.strip():
                raise PtmlabError(f"{at}: no '{col}' (each row needs a question and a context)")
        out.questions.append(row["question"])
        out.contexts.append(row["context"])
        out.ids.append(str(row.get("id", n)))
        if labelled:
            if "answers" not in row:
                raise PtmlabError(f"{at}: no 'answers' (a labelled split needs them on every row)")
            answers = [_check_answer(row["context"], t, s, at) for t, s in _answer_list(row["answers"], at)]
            if not answers:
                raise PtmlabError(f"{at}: no answers: an extractive QA example needs at least one")
            out.answers.append(answers)
    if not len(out):
        raise PtmlabError(f"{where} holds no questions")
    return out


def read_qa_source(source, labelled: bool | None = None) -> QASplit:
    """One split from a SQuAD JSON file, a table file (jsonl/csv/parquet) or a ``datasets``/pandas/list object."""
    if isinstance(source, str | Path):
        path = Path(source).expanduser()
        suffixes = [s.lower() for s in path.suffixes]
        if suffixes[-2:] == [".json", ".gz"] or (suffixes[-1:] == [".json"] and _is_squad_doc(path)):
            return read_squad_json(path, labelled is not False)
        from ptmlab.data.sources import read_file

        table = read_file(path)
        return split_from_rows(table.rows, str(path), table.first_line, labelled)
    from ptmlab.data.sources import table_of

    table = table_of(source)
    return split_from_rows(table.rows, table.where, table.first_line, labelled)


def _is_squad_doc(path: Path) -> bool:
    """A ``.json`` file holding one object with a ``data`` list (SQuAD), not one JSON object per line."""
    if not path.is_file():
        raise PtmlabError(f"data file '{path}' does not exist: check the path")
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return False
    return isinstance(doc, dict) and isinstance(doc.get("data"), list)


# ----------------------------------------------------------------------------------------------------- features
@dataclass
class QAFeatures(TokenRows):
    """Windows of (question, context) for the model, with the map back to examples and characters.

    ``offsets[f][t]`` is the (start, end) characters of token t in its example's context, None outside the
    context; ``example[f]`` is the example a window came from. A batch source for the training loop."""

    input_ids: list[list[int]]
    token_type_ids: list[list[int]] | None
    offsets: list[list[tuple[int, int] | None]]
    example: list[int]
    start_positions: list[int] | None = None
    end_positions: list[int] | None = None
    pad_id: int = 0
    split: QASplit | None = None  # the examples (contexts, gold answers) the windows came from

    def make_batch(self, indices: list[int], epoch: int = 0) -> dict:
        ids, mask = padded_ids([self.input_ids[i] for i in indices], self.pad_id)
        tt = (pad_rows([self.token_type_ids[i] for i in indices], 0, ids.shape[1]) if self.token_type_ids is not None
              else torch.zeros_like(ids))
        batch = {"input_ids": ids, "attention_mask": mask, "token_type_ids": tt, "index": torch.tensor(indices)}
        if self.start_positions is not None:
            batch["start_positions"] = torch.tensor([self.start_positions[i] for i in indices])
            batch["end_positions"] = torch.tensor([self.end_positions[i] for i in indices])
        return batch


def check_window(question_tokens: int, max_length: int, doc_stride: int, where: str) -> int:
    """Context tokens per window left by a question (three special tokens): at least one more than the stride."""
    room = max_length - question_tokens - 3
    if room <= doc_stride:
        raise PtmlabError(f"{where}: a question of {question_tokens} tokens leaves {max(room, 0)} context tokens per "
                          f"window at --max-length {max_length}, not more than --doc-stride {doc_stride}: no window "
                          f"can advance through the context; raise --max-length or lower --doc-stride")
    return room


def qa_features(tokenizer, split: QASplit, max_length: int = 384, doc_stride: int = 128, train: bool = False,
                where: str = "data") -> QAFeatures:
    """Windowed features of ``split``; with ``train`` each window gets start/end token labels of the first answer
    (0, 0 where the window does not hold it). An answer longer than a window's context part can never be labelled,
    and raises."""
    if not getattr(tokenizer, "is_fast", False):
        raise PtmlabError("extractive QA needs a fast (Rust) tokenizer, which maps tokens to characters: use a model "
                          "that has tokenizer.json")
    pad = tokenizer.pad_token_id or 0
    if not len(split):
        return QAFeatures([], None, [], [], [] if train else None, [] if train else None, pad, split)
    q_lens = [len(x) for x in tokenizer(split.questions, add_special_tokens=False)["input_ids"]]
    for i, n in enumerate(q_lens):
        check_window(n, max_length, doc_stride, f"{where}: question {split.ids[i] if split.ids else i}")
    enc = tokenizer(split.questions, split.contexts, truncation="only_second", max_length=max_length,
                    stride=doc_stride, return_overflowing_tokens=True, return_offsets_mapping=True,
                    return_token_type_ids=True, return_attention_mask=False)
    example = list(enc["overflow_to_sample_mapping"])
    offsets = []
    for f in range(len(enc["input_ids"])):
        seq = enc.sequence_ids(f)
        offsets.append([tuple(o) if s == 1 else None for o, s in zip(enc["offset_mapping"][f], seq, strict=True)])
    tt = [list(x) for x in enc["token_type_ids"]] if "token_type_ids" in enc else None
    feats = QAFeatures([list(x) for x in enc["input_ids"]], tt, offsets, example, pad_id=pad, split=split)
    if train:
        if split.answers is None:
            raise PtmlabError(f"{where} has no answers: training needs them")
        starts, ends = [], []
        for f, offs in enumerate(offsets):
            text, a_start = split.answers[example[f]][0]
            s, e = _token_span(offs, a_start, a_start + len(text))
            starts.append(s)
            ends.append(e)
        covered = set()
        for f, s in enumerate(starts):
            if s:
                covered.add(example[f])
        for i in range(len(split)):
            if i not in covered:
                text, a_start = split.answers[i][0]
                if _longer_than_window(offsets, example, i, a_start, a_start + len(text)):
                    raise PtmlabError(f"{where}: the answer of question {split.ids[i] if split.ids else i} is longer "
                                      f"than the context part of any window at --max-length {max_length}: raise "
                                      f"--max-length or drop the example")
        feats.start_positions, feats.end_positions = starts, ends
    return feats


def _token_span(offs: list, c_start: int, c_end: int) -> tuple[int, int]:
    """Token positions of the characters [c_start, c_end) in one window; (0, 0) when the window does not hold
    them all."""
    ctx = [t for t, o in enumerate(offs) if o is not None]
    if not ctx or offs[ctx[0]][0] > c_start or offs[ctx[-1]][1] < c_end:
        return 0, 0
    s = next(t for t in ctx if offs[t][1] > c_start)
    e = next(t for t in reversed(ctx) if offs[t][0] < c_end)
    return s, max(s, e)


def _longer_than_window(offsets, example, i: int, c_start: int, c_end: int) -> bool:
    """True when no window of example i holds [c_start, c_end) because each window holds less context than that."""
    for f, ex in enumerate(example):
        if ex != i:
            continue
        ctx = [o for o in offsets[f] if o is not None]
        if ctx and ctx[-1][1] - ctx[0][0] >= c_end - c_start:
            return False
    return True


# ------------------------------------------------------------------------------------------------------ answers
@dataclass
class Answer:
    text: str
    start: int  # character offsets into the context: text == context[start:end]
    end: int
    score: float  # p_start * p_end: the span's probability in its window, as the transformers QA pipeline gives it
    probability: float  # softmax of the logit scores over the example's n-best candidates
    logit_score: float = float("-inf")  # start logit + end logit: what picks the answer


def _window_probs(logits: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """Softmax of one window's start (or end) logits over the positions in ``keep``; 0 elsewhere."""
    x = np.where(keep, logits, -np.inf)
    e = np.exp(x - x.max())
    return e / e.sum()


def best_answers(split: QASplit, feats: QAFeatures, start_logits, end_logits, n_best: int = 20,
                 max_answer_length: int = 30) -> list[Answer]:
    """The best span of every example over all its windows: the highest start + end logits. Its ``score`` is
    p_start * p_end, each a softmax over the window's context tokens and its first ([CLS]) token, as the
    transformers question-answering pipeline scores a span (question tokens and padding take no share). Logits: one
    array per window (any padding beyond the window's tokens is ignored)."""
    by_example: dict[int, list[int]] = {}
    for f, ex in enumerate(feats.example):
        by_example.setdefault(ex, []).append(f)
    out = []
    for i in range(len(split)):
        cands = []
        for f in by_example.get(i, []):
            offs = feats.offsets[f]
            n = len(offs)
            s_log = np.asarray(start_logits[f][:n], dtype=np.float64)
            e_log = np.asarray(end_logits[f][:n], dtype=np.float64)
            ctx = np.array([o is not None for o in offs])
            if not ctx.any():
                continue
            keep = ctx.copy()
            keep[0] = True  # [CLS]: the "no answer in this window" position stays in the normalisation
            p_start, p_end = _window_probs(s_log, keep), _window_probs(e_log, keep)
            s_masked = np.where(ctx, s_log, -np.inf)
            e_masked = np.where(ctx, e_log, -np.inf)
            top_s = [t for t in np.argsort(-s_masked)[:n_best] if ctx[t]]
            top_e = [t for t in np.argsort(-e_masked)[:n_best] if ctx[t]]
            for s in top_s:
                for e in top_e:
                    if e < s or e - s + 1 > max_answer_length:
                        continue
                    cands.append((float(s_log[s] + e_log[e]), offs[s][0], offs[e][1], float(p_start[s] * p_end[e])))
        context = split.contexts[i]
        if not cands:
            out.append(Answer("", 0, 0, 0.0, 0.0))
            continue
        cands.sort(key=lambda c: -c[0])
        cands = cands[:n_best]
        scores = np.array([c[0] for c in cands])
        probs = np.exp(scores - scores.max())
        probs /= probs.sum()
        logit, cs, ce, span_prob = cands[0]
        out.append(Answer(context[cs:ce], cs, ce, span_prob, float(probs[0]), logit))
    return out


# ------------------------------------------------------------------------------------------------------ the task
KIND = "extractive-qa"
METRICS = ("f1", "exact_match")  # SQuAD's official pair, F1 first (the number that picks the best step)
DEFAULT_MAX_LENGTH = 384  # question + context window, as BERT's SQuAD recipe (used when --max-length is left alone)
SQUAD_FILES = {"train": "train-v1.1.reconstructed.json.gz", "dev": "dev-v1.1.reconstructed.json.gz"}


def squad_dir() -> Path | None:
    """The shared SQuAD v1.1 copy (PTMLAB_SQUAD_DIR, else ../shared/data/qa/squad-v1.1), or None."""
    return shared_subdir("qa/squad-v1.1", SQUAD_FILES["dev"], env="PTMLAB_SQUAD_DIR")


def load_qa_task(name: str, sources: dict):
    """``TaskData`` of an extractive QA task: one source per split (SQuAD JSON, a table file or an object); the
    test split may come without answers."""
    from ptmlab.data.loaders import TaskData
    from ptmlab.data.tasks import TaskSpec

    splits = {s: read_qa_source(src, labelled=None if s == "test" else True) for s, src in sources.items()
              if src is not None}
    if not splits:
        raise PtmlabError("an extractive QA task needs --train-file (or --dev-file to evaluate): SQuAD JSON, or "
                          "jsonl/csv/parquet with question, context and answers")
    spec = TaskSpec(name, KIND, (), METRICS, text_col="question", pair_col="context", label_col="answers",
                    id_col="id", description="extractive question answering",
                    extra={"max_length": DEFAULT_MAX_LENGTH})
    return TaskData(spec, splits)


def load_squad(spec):
    folder = squad_dir()
    if folder is None:
        raise PtmlabError("task 'squad' reads ../shared/data/qa/squad-v1.1 (train- and dev-v1.1.reconstructed"
                          ".json.gz), which is not here: set PTMLAB_SQUAD_DIR or pass --task-kind extractive-qa "
                          "--train-file ... --dev-file ...")
    data = load_qa_task(spec.name, {s: folder / f for s, f in SQUAD_FILES.items()})
    data.spec = spec
    return data
