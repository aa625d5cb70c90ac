"""Loss, inference and evaluation of the task kinds whose labels are not one per example: token classification
(a tag per word, entity-level F1) and extractive QA (a span per question, SQuAD EM/F1).

Their data (``data/tokens.py``, ``data/qa.py``) are batch sources the one loop trains on; ``span_task_loss`` is the
loop's task loss for their batches (``loop.task_loss`` hands over to it) and ``evaluate_span`` is what
``train.evaluate.evaluate`` does for them.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ptmlab.core.progress import progress
from ptmlab.data.batching import eval_batches
from ptmlab.data.metrics import entity_scores, squad_scores
from ptmlab.data.qa import QAFeatures, best_answers
from ptmlab.data.tokens import IGNORE, TokenFeatures, word_predictions
from ptmlab.models.loader import model_inputs

NEG = -1e4  # padded positions never win a softmax over positions


def is_span_batch(batch: dict) -> bool:
    return "start_positions" in batch or ("labels" in batch and batch["labels"].dim() == 2)


def span_task_loss(model, batch: dict) -> torch.Tensor:
    """Per-example losses: token classification, the mean cross-entropy over the example's labelled sub-tokens;
    extractive QA, the mean of the start and end cross-entropies over the window's positions."""
    out = model(**model_inputs(model, batch))
    if "start_positions" in batch:
        pad = batch["attention_mask"] == 0
        start = out.start_logits.float().masked_fill(pad, NEG)
        end = out.end_logits.float().masked_fill(pad, NEG)
        return (F.cross_entropy(start, batch["start_positions"], reduction="none")
                + F.cross_entropy(end, batch["end_positions"], reduction="none")) / 2
    return token_loss(out.logits, batch["labels"])


def token_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy per example over its labelled positions (0 for an example with none)."""
    per_tok = F.cross_entropy(logits.float().transpose(1, 2), labels, ignore_index=IGNORE, reduction="none")
    count = (labels != IGNORE).sum(1)
    return per_tok.sum(1) / count.clamp(min=1)


@torch.no_grad()
def span_logits(model, feats, batch_size: int = 64, precision: str = "fp32", desc: str = "evaluate") -> list:
    """Per window or sentence, in order: token logits [len, labels] (token classification) or a pair (start [len],
    end [len]) (extractive QA), without padding."""
    from ptmlab.train.evaluate import autocast_ctx

    model.eval()
    device = next(model.parameters()).device
    qa = isinstance(feats, QAFeatures)
    out: list = [None] * len(feats)
    for idx in progress(eval_batches(feats.lengths, batch_size), desc=desc,
                        disable=None if len(feats) > 2000 else True):
        batch = feats.make_batch(idx)
        inputs = {k: v.to(device) for k, v in model_inputs(model, batch).items()}
        with autocast_ctx(precision, device):
            res = model(**inputs)
        if qa:
            s, e = res.start_logits.float().cpu().numpy(), res.end_logits.float().cpu().numpy()
        else:
            logits = res.logits.float().cpu().numpy()
        for row, i in enumerate(idx):
            n = len(feats.input_ids[i])
            out[i] = (s[row, :n], e[row, :n]) if qa else logits[row, :n]
    return out


def token_predictions(feats: TokenFeatures, logits: list, labels) -> list[list[str]]:
    """Tag names per word of every sentence."""
    return [[labels[t] for t in word_predictions(lg, w, n)]
            for lg, w, n in zip(logits, feats.word_ids, feats.n_words, strict=True)]


def evaluate_span(model, feats, spec, batch_size: int = 64, precision: str = "fp32") -> tuple[dict, list]:
    """The task's official scores and the predictions: tags per word (entity P/R/F1, each type's F1, token
    accuracy) or answers (SQuAD exact match and F1, in percent)."""
    return span_scores(feats, span_logits(model, feats, batch_size, precision), spec)


def span_scores(feats, logits: list, spec) -> tuple[dict, list]:
    """``evaluate_span`` on logits already computed (``span_logits``): the scores and the predictions."""
    if isinstance(feats, QAFeatures):
        split = feats.split
        answers = best_answers(split, feats, [x[0] for x in logits], [x[1] for x in logits])
        if split.answers is None:
            return {}, answers
        return squad_scores([a.text for a in answers], [[t for t, _ in gold] for gold in split.answers]), answers
    labels = spec.labels
    preds = token_predictions(feats, logits, labels)
    if feats.word_labels is None:
        return {}, preds
    refs = [[labels[t] for t in sent] for sent in feats.word_labels]
    s = entity_scores(refs, preds)
    metrics = {k: s[k] for k in ("entity_f1", "entity_precision", "entity_recall", "token_accuracy")}
    metrics.update({f"f1_{t}": v["f1"] for t, v in sorted(s["per_type"].items())})
    return metrics, preds



# ------------------------------------------------------------------------------------------------- predictions
def span_kind(model_dir) -> str | None:
    """token-classification or extractive-qa when the saved model in ``model_dir`` has that head, else None."""
    import json
    from pathlib import Path

    from ptmlab.models.loader import SAVED_HEADS

    f = Path(model_dir).expanduser() / "config.json"
    if not f.is_file():
        return None
    try:
        arch = (json.loads(f.read_text()).get("architectures") or [""])[0]
    except (json.JSONDecodeError, OSError, AttributeError):
        return None
    return next((kind for suffix, kind in SAVED_HEADS.items() if arch.endswith(suffix)), None)


def text_words(tokenizer, text: str) -> list[tuple[int, int]]:
    """Character spans of the words of ``text`` as the tokenizer's pre-tokenizer splits it (BERT's: whitespace and
    every punctuation mark, so "Paris," is "Paris" and ","); spaces a pre-tokenizer keeps on a word (byte-level,
    SentencePiece) are trimmed. A tokenizer without one splits into runs of word characters and single marks."""
    import re

    pre = getattr(getattr(tokenizer, "backend_tokenizer", None), "pre_tokenizer", None)
    if pre is not None:
        spans = [tuple(o) for _, o in pre.pre_tokenize_str(text)]
    else:
        spans = [m.span() for m in re.finditer(r"\w+|[^\w\s]", text)]
    out = []
    for s, e in spans:
        while s < e and text[s].isspace():
            s += 1
        while e > s and text[e - 1].isspace():
            e -= 1
        if s < e:
            out.append((s, e))
    return out


def _tag_parts(tag: str) -> tuple[str, str | None]:
    """(B/I/E/S, entity type) of a tag; ``O`` has no type; a tag without a prefix continues (as transformers reads
    it)."""
    if tag == "O":
        return "O", None
    if len(tag) > 2 and tag[1] == "-" and tag[0] in "BIES":
        return tag[0], tag[2:]
    return "I", tag


def entity_groups(text: str, spans: list[tuple[int, int]], tags: list[str], scores: list) -> list[dict]:
    """Entities of one tagged sentence, as the transformers token-classification pipeline groups words
    (``aggregation_strategy="first"``): a B- (or S-) tag, another type, or an I- after O opens a group, I- (E-) of
    the same type extends it; ``{"entity_group", "score", "word", "start", "end"}`` with ``word ==
    text[start:end]`` and ``score`` the mean of its words' tag probabilities."""
    groups: list[dict] = []
    open_group = None
    for (start, end), tag, score in zip(spans, tags, scores, strict=True):
        bi, kind = _tag_parts(tag)
        if kind is None:
            open_group = None
            continue
        if open_group is not None and open_group["entity_group"] == kind and bi in ("I", "E"):
            open_group["end"] = end
            open_group["scores"].append(score)
        else:
            open_group = {"entity_group": kind, "start": start, "end": end, "scores": [score]}
            groups.append(open_group)
        if bi in ("E", "S"):
            open_group = None
    out = []
    for g in groups:
        known = [x for x in g["scores"] if x is not None]
        out.append({"entity_group": g["entity_group"], "score": round(sum(known) / len(known), 4) if known else None,
                    "word": text[g["start"]:g["end"]], "start": g["start"], "end": g["end"]})
    return out


def sentence_spans(tokenizer, item) -> tuple[str, list[tuple[int, int]]]:
    """(text, word spans) of a sentence given as a text (pre-tokenized) or as words (joined by single spaces)."""
    if isinstance(item, str):
        return item, text_words(tokenizer, item)
    spans, at = [], 0
    for w in item:
        spans.append((at, at + len(w)))
        at += len(w) + 1
    return " ".join(item), spans


def tag_words(model, tokenizer, sentences: list, max_length: int = 128, batch_size: int = 64,
              precision: str = "fp32") -> list[dict]:
    """``{"text", "tokens", "tags", "scores", "entities"}`` per sentence (a text, split into words by the
    tokenizer's pre-tokenizer, or a list of words): a tag per word (read at its first sub-token) and its
    probability, and the entity groups of ``entity_groups`` with character offsets into ``text`` (a list of words:
    the words joined by single spaces). Words past ``max_length`` sub-tokens are tagged O with score null."""
    import numpy as np

    from ptmlab.core.errors import PtmlabError
    from ptmlab.data.tokens import TokenSplit, encode_tokens

    labels = [model.config.id2label[i] for i in range(model.config.num_labels)]
    prepared = [sentence_spans(tokenizer, s) for s in sentences]
    for i, (_, spans) in enumerate(prepared):
        if not spans:
            raise PtmlabError(f"item {i} of the input has no words to tag: give every sentence some")
    words = [[text[s:e] for s, e in spans] for text, spans in prepared]
    feats = encode_tokens(tokenizer, TokenSplit(words, None, list(range(len(words)))), max_length)
    out = []
    for lg, ids, toks, (text, spans) in zip(span_logits(model, feats, batch_size, precision, desc="predict"),
                                            feats.word_ids, words, prepared, strict=True):
        probs = np.exp(lg - lg.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        tags, scores, seen = ["O"] * len(toks), [None] * len(toks), set()
        for pos, w in enumerate(ids):
            if w is not None and w not in seen:
                seen.add(w)
                best = int(probs[pos].argmax())
                tags[w], scores[w] = labels[best], float(probs[pos, best])
        out.append({"text": text, "tokens": list(toks), "tags": tags,
                    "scores": [None if x is None else round(x, 4) for x in scores],
                    "entities": entity_groups(text, spans, tags, scores)})
    return out


def answer_questions(model, tokenizer, split, max_length: int = 384, doc_stride: int = 128, batch_size: int = 64,
                     precision: str = "fp32", n_best: int = 20, max_answer_length: int = 30) -> list[dict]:
    """``{"id", "answer", "start", "end", "score", "logit_score", "probability"}`` per question: the best span of its
    context (``answer == context[start:end]``); ``score`` is its probability as the transformers
    question-answering pipeline gives it (p_start * p_end), ``logit_score`` its start + end logits."""
    from ptmlab.data.qa import qa_features

    feats = qa_features(tokenizer, split, max_length, doc_stride, train=False, where="input")
    logits = span_logits(model, feats, batch_size, precision, desc="predict")
    answers = best_answers(split, feats, [x[0] for x in logits], [x[1] for x in logits], n_best, max_answer_length)
    return [{"id": split.ids[i] if split.ids else i, "answer": a.text, "start": a.start, "end": a.end,
             "score": round(a.score, 4), "logit_score": round(a.logit_score, 4), "probability": round(a.probability, 4)}
            for i, a in enumerate(answers)]


def _bad_item(i: int, item, what: str):
    from ptmlab.core.errors import PtmlabError
    from ptmlab.train.predict import describe_item

    return PtmlabError(f"item {i} of the input is {describe_item(item)}: {what}")


TAGGER_INPUTS = ("pass a text, a list of texts, of word lists or of rows with 'tokens' or 'text', a DataFrame, a "
                 "Dataset or a data file")
QA_INPUTS = ("pass rows with 'question' and 'context' (dicts, a DataFrame, a Dataset or a data file) or "
             "(question, context) tuples")


def token_inputs(source) -> list:
    """Sentences to tag, each a text (split into words later by the tokenizer's pre-tokenizer) or a list of words:
    a CoNLL file (first column), rows with a ``tokens`` list or a ``text`` string from a jsonl/csv/parquet file or an
    object (a DataFrame, Dataset, list of dicts), or a list of texts and word lists."""
    from pathlib import Path

    from ptmlab.core.errors import PtmlabError
    from ptmlab.data.tokens import TABLE_SUFFIXES, read_conll, sentences_from_rows

    if source is None:
        raise PtmlabError(f"nothing to predict: {TAGGER_INPUTS}")
    if isinstance(source, str | Path) and Path(source).suffix.lower() not in TABLE_SUFFIXES:
        return [s.tokens for s in read_conll(Path(source).expanduser(), 0, None)]
    if isinstance(source, str | Path):
        from ptmlab.data.sources import read_file

        table = read_file(Path(source).expanduser())
        rows, where, first = table.rows, table.where, table.first_line
    elif isinstance(source, list | tuple):
        rows, where, first = list(source), None, 0
    else:
        from ptmlab.data.sources import _kind, table_of

        if _kind(source) not in ("Dataset", "DataFrame"):
            raise PtmlabError(f"cannot predict from a {type(source).__name__}: {TAGGER_INPUTS}")
        table = table_of(source)
        rows, where, first = table.rows, table.where, table.first_line
    if not rows:
        raise PtmlabError(f"the input holds no sentences: {TAGGER_INPUTS}")
    sents = []
    for n, row in enumerate(rows):
        at = (f"{where}:{n + first}" if first else f"{where}[{n}]") if where else f"item {n} of the input"
        if isinstance(row, str):
            if not row.strip():
                raise PtmlabError(f"{at} has no words to tag: give every sentence some")
            sents.append(row)
            continue
        if isinstance(row, list | tuple):
            if not row or not all(isinstance(w, str) and w.strip() for w in row):
                raise PtmlabError(f"{at} is a word list with an empty or non-text word: give words as "
                                  f"non-empty strings")
            sents.append([str(w) for w in row])
            continue
        if not isinstance(row, dict):
            raise _bad_item(n, row, TAGGER_INPUTS)
        if row.get("tokens") is not None:
            words = sentences_from_rows([row], where or "input", "tokens", None, n + first)[0].tokens
            if not words:
                raise PtmlabError(f"{at}: no words to tag: give every row some")
            sents.append(words)
        elif isinstance(row.get("text"), str):
            if not row["text"].strip():
                raise PtmlabError(f"{at}: no words to tag: give every row some")
            sents.append(row["text"])
        else:
            raise PtmlabError(f"{at}: the row needs 'tokens' (a list of words) or 'text' (a string) (it has: "
                              f"{', '.join(f'{k}={v!r}'[:40] for k, v in row.items())})")
    return sents


def question_pairs(questions, contexts, kind: str | None) -> list[tuple[str, str]]:
    """(question, context) tuples from ``Run.predict(questions, pairs=contexts)`` of a QA run."""
    from ptmlab.core.errors import PtmlabError

    if kind != "extractive-qa":
        raise PtmlabError("pairs= is for sentence-pair classifiers and QA runs (contexts): give a tagger texts")
    questions = [questions] if isinstance(questions, str) else questions
    contexts = [contexts] if isinstance(contexts, str) else contexts
    if not isinstance(questions, list | tuple) or not isinstance(contexts, list | tuple):
        raise PtmlabError("with pairs=, give questions and contexts as strings or lists of strings")
    if len(questions) != len(contexts):
        raise PtmlabError(f"{len(questions)} questions but {len(contexts)} contexts: give one context per question")
    return list(zip(questions, contexts, strict=True))


def qa_inputs(source):
    """The questions of a QA prediction: a SQuAD JSON or table file, rows with ``question`` and ``context``
    (dicts, a DataFrame, a Dataset) or (question, context) tuples."""
    from pathlib import Path

    from ptmlab.core.errors import PtmlabError
    from ptmlab.data.qa import read_qa_source

    if source is None:
        raise PtmlabError(f"nothing to predict: {QA_INPUTS}")
    if isinstance(source, Path):
        return read_qa_source(source, labelled=False)
    if isinstance(source, str):
        raise _bad_item(0, source, QA_INPUTS)
    if isinstance(source, list | tuple):
        if not source:
            raise PtmlabError(f"the input holds no questions: {QA_INPUTS}")
        rows = []
        for i, item in enumerate(source):
            if isinstance(item, tuple | list) and len(item) == 2:
                rows.append({"question": item[0], "context": item[1]})
            elif isinstance(item, dict):
                rows.append(item)
            else:
                raise _bad_item(i, item, QA_INPUTS)
        from ptmlab.data.qa import split_from_rows

        return split_from_rows(rows, "input", 0, labelled=False)
    return read_qa_source(source, labelled=False)


def predict_spans(run_dir: str, kind: str, cfg, run_cfg: dict, source=None) -> list[dict]:
    """``ptmlab predict`` for a token-classification or QA run (``cfg.input``, a file, or ``source``, an object: a
    string there is a text, never a path): tags per word with entity groups, or answers with scores and character
    offsets. Inputs are read and checked before the model loads."""
    from pathlib import Path

    from ptmlab.data.qa import DEFAULT_MAX_LENGTH
    from ptmlab.models.zoo import load_model, load_tokenizer
    from ptmlab.train.evaluate import resolve_precision

    src = Path(cfg.input) if cfg.input else source
    recorded = int(run_cfg.get("max_length") or 128)
    if kind == "extractive-qa":
        split = qa_inputs(src)
        length = cfg.max_length or (DEFAULT_MAX_LENGTH if recorded == 128 else recorded)
        model, tok = load_model(run_dir), load_tokenizer(run_dir)
        return answer_questions(model, tok, split, length, int(run_cfg.get("doc_stride") or 128),
                                cfg.eval_batch_size, resolve_precision(cfg.precision))
    sentences = token_inputs([src] if isinstance(src, str) else src)
    model, tok = load_model(run_dir), load_tokenizer(run_dir)
    return tag_words(model, tok, sentences, cfg.max_length or recorded, cfg.eval_batch_size,
                     resolve_precision(cfg.precision))


def _csv_cell(value):
    """A list of words, tags or scores space-separated; a list of objects (entity groups) as JSON."""
    import json

    if not isinstance(value, list):
        return value
    if any(isinstance(x, dict) for x in value):
        return json.dumps(value, ensure_ascii=False)
    return " ".join("" if x is None else str(x) for x in value)


def write_span_predictions(path, preds: list[dict]) -> None:
    """predictions.jsonl (one object per sentence or question, with its index) or .csv (tokens, tags and scores
    space-separated, entity groups as JSON; answers one column per field)."""
    import csv
    import io
    import json
    from pathlib import Path

    from ptmlab.core.io import atomic_write_text

    path = Path(path)
    rows = [{"index": i, **p} for i, p in enumerate(preds)]
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".jsonl":
        atomic_write_text(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
        return
    flat = [{k: _csv_cell(v) for k, v in r.items()} for r in rows]
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(flat[0]) if flat else ["index"])
    writer.writeheader()
    writer.writerows(flat)
    atomic_write_text(path, buf.getvalue())
