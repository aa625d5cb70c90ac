"""Options of the embedding task kind (``--task-kind embedding``): how its data is read (every command that reads
it: finetune, evaluate) and how it trains (finetune)."""

from __future__ import annotations

from dataclasses import dataclass

from ptmlab.core.config import Validated, opt
from ptmlab.core.errors import PtmlabError
from ptmlab.data.embedding import parse_score_range

EMBEDDING_POOLING = ("mean", "cls")


@dataclass(frozen=True)
class EmbeddingDataArgs(Validated):
    OPTION_GROUP = "embedding"

    score_range: str = opt("0,1", "embedding kind: LOW,HIGH: the scores scored pairs may hold (a score outside is an "
                                  "error; a range may be negative, e.g. -1,1); scores map linearly to cosine targets "
                                  "in [0, 1] (the built-in stsb uses 0,5)")
    corpus_file: str | None = opt(None, "embedding kind: extra retrieval documents for query/positive dev data (a "
                                        "'text' column), added to the corpus of every positive")

    def validate_embedding_data(self) -> None:
        parse_score_range(self.score_range)

    def validate(self) -> None:  # a command's own validate calls the checks of the groups it is made of
        self.validate_embedding_data()


@dataclass(frozen=True)
class EmbeddingTrainArgs(EmbeddingDataArgs):
    pooling: str = opt("mean", "embedding kind: token states to a sentence vector by mean (default) or cls; "
                               "vectors are L2-normalised", choices=list(EMBEDDING_POOLING))
    similarity_scale: float = opt(20.0, "embedding kind: the scale of cosine similarities in the in-batch "
                                        "negatives loss (MultipleNegativesRanking; 20 as sentence-transformers)")
    mini_batch_size: int = opt(0, "embedding kind: gradient cache: embed each batch in mini-batches of this many "
                                  "texts (no graph kept), compute the loss on all of them, then backpropagate "
                                  "mini-batch by mini-batch: the whole batch's negatives in a mini-batch's memory "
                                  "(0: off)")

    def validate_embedding(self) -> None:
        self.validate_embedding_data()
        if self.pooling not in EMBEDDING_POOLING:
            raise PtmlabError(f"--pooling '{self.pooling}' is unknown: choose mean or cls")
        if not self.similarity_scale > 0:
            raise PtmlabError(f"--similarity-scale must be positive, got {self.similarity_scale}")
        if self.mini_batch_size < 0:
            raise PtmlabError(f"--mini-batch-size must be >= 0 (0: off), got {self.mini_batch_size}")

    def validate(self) -> None:
        self.validate_embedding()
