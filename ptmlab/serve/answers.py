"""The model's output as a response's predictions, shaped by the output policy and, for classes, the watermark: a
label (and probabilities), a label set, a score, an embedding, tags per word or an answer span."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ptmlab.serve.defences import ServingDefences
from ptmlab.serve.policy import OutputPolicy
from ptmlab.serve.schemas import Answer, Embedding, Entity, LabelSet, Prediction, Score, Tags

if TYPE_CHECKING:
    from ptmlab.serve.predictor import Predictor, TaskInfo


def answers(predictor: Predictor, defences: ServingDefences, head: TaskInfo | None, encs, texts: list[str],
            pairs: list, probs: list) -> tuple[list, list, list[str]]:
    """The predictions, the watermark's marks to record and the label names the response shows."""
    policy, watermarker = defences.policy, defences.watermarker
    answer, marks = [], []
    labels = head.labels if head else predictor.info.labels
    if predictor.span:  # tags per word or an answer; no class probabilities to watermark
        answer = [span_answer(predictor.span, policy, text, p, labels) for text, p in zip(texts, probs, strict=True)]
        labels = labels if predictor.span == "token-classification" else []
    for enc, text, pair, p in zip(encs, texts, pairs, probs, strict=True) if not predictor.span else ():
        if predictor.embedding:  # a vector per text: no labels to hide or to watermark
            answer.append(Embedding(embedding=p))
            continue
        if head is not None and head.regression:  # a score: no labels to hide or to watermark
            answer.append(Score(score=policy.score(p[0])))
            continue
        threshold = predictor.info.threshold
        if threshold is not None:  # multi-label: independent probabilities, no distribution to watermark
            ids = [i for i, x in enumerate(p) if x >= threshold]
            answer.append(LabelSet(labels=[labels[i] for i in ids], label_ids=ids, probs=policy.render(p)))
            continue
        if watermarker is not None:
            p, mark = watermarker.apply(predictor.tokens(enc), text, pair, p, head.name if head else None)
            if mark is not None:
                marks.append(mark)
        label_id = max(range(len(p)), key=p.__getitem__)
        answer.append(Prediction(label=labels[label_id], label_id=label_id, probs=policy.render(p)))
    return answer, marks, labels


def span_answer(span: str, policy: OutputPolicy, text: str, p: dict, labels: list[str]) -> Tags | Answer:
    """A tagger's tags and entity groups, or an extractive-QA answer."""
    if span == "extractive-qa":
        shown = policy.render([p["probability"]])
        return Answer(answer=p["answer"], start=p["start"], end=p["end"], score=policy.score(p["score"]),
                      probability=shown[0] if shown else None)
    from ptmlab.train.spans import entity_groups

    best = [max(range(len(w)), key=w.__getitem__) if w else None for w in p["words"]]
    tags = [labels[b] if b is not None else "O" for b in best]
    shown = [policy.render(w) if w else None for w in p["words"]]
    sentence, spans = p["sentence"], p["spans"]
    groups = entity_groups(sentence, spans, tags, [w[b] if b is not None else None
                                                   for w, b in zip(p["words"], best, strict=True)])
    entities = [Entity(**{**g, "score": policy.score(g["score"]) if policy.show_probs else None}) for g in groups]
    return Tags(tokens=[sentence[s:e] for s, e in spans], tags=tags, probs=shown if policy.show_probs else None,
                entities=entities)
