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
    logits = span_logits(model, feats, batch_size, precision)
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


def tag_words(model, tokenizer, sentences: list[list[str]], max_length: int = 128, batch_size: int = 64,
              precision: str = "fp32") -> list[dict]:
    """``{"tokens", "tags", "scores"}`` per sentence: a tag per word (read at its first sub-token) and its
    probability; words past ``max_length`` sub-tokens are tagged O with score null."""
    import numpy as np

    from ptmlab.data.tokens import TokenSplit, encode_tokens

    labels = [model.config.id2label[i] for i in range(model.config.num_labels)]
    feats = encode_tokens(tokenizer, TokenSplit(sentences, None, list(range(len(sentences)))), max_length)
    out = []
    for lg, words, toks in zip(span_logits(model, feats, batch_size, precision, desc="predict"), feats.word_ids,
                               sentences, strict=True):
        probs = np.exp(lg - lg.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        tags, scores, seen = ["O"] * len(toks), [None] * len(toks), set()
        for pos, w in enumerate(words):
            if w is not None and w not in seen:
                seen.add(w)
                best = int(probs[pos].argmax())
                tags[w], scores[w] = labels[best], round(float(probs[pos, best]), 4)
        out.append({"tokens": list(toks), "tags": tags, "scores": scores})
    return out


def answer_questions(model, tokenizer, split, max_length: int = 384, doc_stride: int = 128, batch_size: int = 64,
                     precision: str = "fp32", n_best: int = 20, max_answer_length: int = 30) -> list[dict]:
    """``{"id", "answer", "start", "end", "score", "probability"}`` per question: the best span of its context
    (``answer == context[start:end]``)."""
    from ptmlab.data.qa import qa_features

    feats = qa_features(tokenizer, split, max_length, doc_stride, train=False, where="input")
    logits = span_logits(model, feats, batch_size, precision, desc="predict")
    answers = best_answers(split, feats, [x[0] for x in logits], [x[1] for x in logits], n_best, max_answer_length)
    return [{"id": split.ids[i] if split.ids else i, "answer": a.text, "start": a.start, "end": a.end,
             "score": round(a.score, 4), "probability": round(a.probability, 4)} for i, a in enumerate(answers)]


def token_inputs(source) -> list[list[str]]:
    """Sentences to tag: a CoNLL file (first column), or rows with a ``tokens`` list or a ``text`` string (split on
    whitespace) from a jsonl/csv/parquet file or an object (a list of token lists, a list of strings)."""
    from pathlib import Path

    from ptmlab.core.errors import PtmlabError
    from ptmlab.data.tokens import TABLE_SUFFIXES, read_conll, sentences_from_rows

    if isinstance(source, str | Path) and Path(source).suffix.lower() not in TABLE_SUFFIXES:
        return [s.tokens for s in read_conll(Path(source).expanduser(), 0, None)]
    if isinstance(source, list) and all(isinstance(x, str) for x in source):
        return [x.split() for x in source]
    if isinstance(source, list) and all(isinstance(x, list | tuple) for x in source):
        return [[str(t) for t in x] for x in source]
    if isinstance(source, str | Path):
        from ptmlab.data.sources import read_file

        table = read_file(Path(source).expanduser())
    else:
        from ptmlab.data.sources import table_of

        table = table_of(source)
    sents = []
    for n, row in enumerate(table.rows):
        at = f"{table.where}:{n + table.first_line}" if table.first_line else f"{table.where}[{n}]"
        if row.get("tokens") is not None:
            words = sentences_from_rows([row], table.where, "tokens", None, n + table.first_line)[0].tokens
        elif row.get("text") is not None:
            words = str(row["text"]).split()
        else:
            raise PtmlabError(f"{at}: the row needs 'tokens' (a list of words) or 'text' (it has: "
                              f"{', '.join(map(str, row))})")
        if not words:
            raise PtmlabError(f"{at}: no words to tag: give every row some")
        sents.append(words)
    return sents


def predict_spans(run_dir: str, kind: str, cfg, run_cfg: dict, source=None) -> list[dict]:
    """``ptmlab predict`` for a token-classification or QA run: tags per word, or answers with scores and character
    offsets. Inputs are read and checked before the model loads."""
    from ptmlab.core.errors import PtmlabError
    from ptmlab.data.qa import DEFAULT_MAX_LENGTH, read_qa_source
    from ptmlab.models.zoo import load_model, load_tokenizer

    src = cfg.input or source
    if src is None:
        raise PtmlabError("nothing to predict: pass --input FILE")
    recorded = int(run_cfg.get("max_length") or 128)
    if kind == "extractive-qa":
        split = read_qa_source(src, labelled=False)
        length = cfg.max_length or (DEFAULT_MAX_LENGTH if recorded == 128 else recorded)
        model, tok = load_model(run_dir), load_tokenizer(run_dir)
        return answer_questions(model, tok, split, length, int(run_cfg.get("doc_stride") or 128), cfg.batch_size,
                                cfg.precision)
    sentences = token_inputs(src)
    model, tok = load_model(run_dir), load_tokenizer(run_dir)
    return tag_words(model, tok, sentences, cfg.max_length or recorded, cfg.batch_size, cfg.precision)


def write_span_predictions(path, preds: list[dict]) -> None:
    """predictions.jsonl (one object per sentence or question, with its index) or .csv (tokens, tags and scores
    space-separated; answers one column per field)."""
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
    flat = [{k: " ".join("" if x is None else str(x) for x in v) if isinstance(v, list) else v for k, v in r.items()}
            for r in rows]
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(flat[0]) if flat else ["index"])
    writer.writeheader()
    writer.writerows(flat)
    atomic_write_text(path, buf.getvalue())
