"""ptmlab as a library: ``finetune``, ``evaluate``, ``predict``, ``distill``, ``prune``, ``compress``, ``export``,
``optimize``, ``pretrain``, ``study`` and ``load``, each over the same frozen configs (and the same functions) the CLI
uses.

A model is a zoo name, a directory, a hub id or a transformers model with its tokenizer; data is a
``datasets.Dataset``/``DatasetDict``, a pandas frame, a list of dicts, a data file or ``hf:NAME``; options are the
command's flags as keyword arguments (``epochs=1``, ``output="runs/x"``), checked as the CLI checks them. Functions
that write a run return a ``Run`` (``ptmlab.load(dir)`` opens one). See docs/api.md.
"""

from ptmlab.api.run import Run, load
from ptmlab.api.verbs import compress, distill, evaluate, export, finetune, optimize, predict, pretrain, prune, study
from ptmlab.core.errors import PtmlabError

__all__ = ["Run", "load", "finetune", "evaluate", "predict", "distill", "prune", "compress", "export", "optimize",
           "pretrain", "study", "PtmlabError"]
