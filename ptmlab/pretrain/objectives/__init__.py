"""Pre-training objectives, one module per family, each registered in ``OBJECTIVES`` under its CLI name.

``base`` holds the contract (``Objective``, the trained ``PretrainModel`` wrapper, ``build_objective``);
``tokens`` what an objective reads from a tokenizer; ``masking`` and ``heads`` the steps several share. Importing
this package registers every objective.
"""

from ptmlab.pretrain.objectives import bart, clm, electra, mlm, plm, sentence_pair, span, t5  # noqa: F401
from ptmlab.pretrain.objectives.base import (
    ARCH_KINDS,
    OBJECTIVES,
    Objective,
    PretrainModel,
    build_objective,
    unwrap,
)

__all__ = ["ARCH_KINDS", "OBJECTIVES", "Objective", "PretrainModel", "build_objective", "unwrap"]
