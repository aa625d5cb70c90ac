"""What a candidate is scored and compared on, per task kind: sentence classification and regression (logits per
example, ``export.parity.logits`` / ``compare``), token classification (tags per word, entity F1) and extractive QA
(the answer span per question, SQuAD F1 and exact match), the last two through ptmlab's span inference
(``train.spans.span_logits`` and ``span_scores``, ``export.parity.span_agreement``).

A span model's outputs keep their own features, because a candidate may tokenize differently from the run (a pruned
vocabulary splits unseen words into more pieces): agreement is read on the decoded tags and answer spans, which are
per word and per character, and the logit difference only where both tokenized alike.
"""

from __future__ import annotations

from dataclasses import dataclass

from ptmlab.data.tasks import SPAN_KINDS

TOKENS, QA = SPAN_KINDS


@dataclass
class SpanOutputs:
    feats: object  # TokenFeatures or QAFeatures of the model's own tokenizer
    logits: list


def kind_of(spec) -> str:
    return spec.kind if spec.kind in SPAN_KINDS else "sentence"


def model_outputs(model, tokenizer, split, spec, max_length: int):
    """Logits per example (sentence tasks) or ``SpanOutputs`` (token classification, extractive QA)."""
    if kind_of(spec) == "sentence":
        from ptmlab.export.parity import logits

        return logits(model, tokenizer, split, max_length)
    from ptmlab.train.spans import span_logits

    feats = split.encode(tokenizer, max_length)
    return SpanOutputs(feats, span_logits(model, feats, desc="optimize"))


def scores(outputs, split, spec) -> dict[str, float]:
    """The task's dev scores of ``outputs`` (entity F1 between 0 and 1, SQuAD F1 and EM in percent, as
    ``ptmlab evaluate`` reports them)."""
    if kind_of(spec) == "sentence":
        import numpy as np

        from ptmlab.data.metrics import compute_metrics
        from ptmlab.train.evaluate import logits_to_predictions

        preds = logits_to_predictions(outputs.numpy(), spec)
        values = compute_metrics(spec.metrics, preds, np.asarray(split.label))
    else:
        from ptmlab.train.spans import span_scores

        values, _ = span_scores(outputs.feats, outputs.logits, spec)
    return {k: round(float(v), 4) for k, v in values.items()}


def agreement(reference, outputs, split, spec, labels: list | None) -> dict:
    """``label_agreement`` (the share of examples with the same label, of words with the same tag, or of questions
    with the same answer span) and ``max_abs_logit_diff`` of ``outputs`` against ``reference``."""
    if kind_of(spec) == "sentence":
        from ptmlab.export.parity import compare

        return compare(reference, outputs, spec.name)
    from ptmlab.export.parity import span_agreement

    return {"task": spec.name, **span_agreement(split, reference.feats, reference.logits, outputs.feats,
                                                outputs.logits, spec.kind, labels)}


def point_scale(spec) -> float:
    """Points per unit of the main metric: SQuAD's F1 is in percent already, the other metrics are fractions."""
    return 1.0 if spec.kind == QA else 100.0


def labelled(split, spec) -> bool:
    """Whether every example of ``split`` has its label (tags, answers)."""
    if split is None or len(split) == 0:
        return False
    gold = split.tags if spec.kind == TOKENS else split.answers if spec.kind == QA else split.label
    return gold is not None and all(v is not None for v in gold)


def texts_of(split, spec) -> tuple[list[str], list[str] | None]:
    """(texts, pairs) of a split as a tokenizer reads them: sentences, a tagged sentence's words joined by spaces,
    (question, context) for QA."""
    if spec.kind == TOKENS:
        return [" ".join(words) for words in split.tokens], None
    if spec.kind == QA:
        return list(split.questions), list(split.contexts)
    return list(split.text), (list(split.text_pair) if split.text_pair is not None else None)


def timing_texts(split, spec, n: int) -> list[str]:
    """``n`` texts of ``split`` for latency: a pair is timed as one sequence of question and context, cut like the
    rest to the run's length."""
    texts, pairs = texts_of(split.select(list(range(min(n, len(split))))), spec)
    return [f"{t} {p}" for t, p in zip(texts, pairs, strict=True)] if pairs else texts


def training_rows(split, spec, labels: list | None) -> list[dict]:
    """A span split as rows that ``load_task_data(source=...)`` reads back: tokens and tag names, or question,
    context and answers."""
    if spec.kind == TOKENS:
        return [{"tokens": list(w), "tags": [labels[t] for t in tags]} for w, tags in zip(split.tokens, split.tags,
                                                                                         strict=True)]
    ids = split.ids or [str(i) for i in range(len(split))]
    return [{"id": str(i), "question": q, "context": c,
             "answers": {"text": [t for t, _ in gold], "answer_start": [s for _, s in gold]}}
            for i, q, c, gold in zip(ids, split.questions, split.contexts, split.answers, strict=True)]
