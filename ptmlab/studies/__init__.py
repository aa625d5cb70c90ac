"""Studies: each source claim as a runnable experiment that prints a verdict with numbers and plots.

A study registers ``run(argv: list[str]) -> int`` under its name in ``STUDIES``; ``ptmlab study NAME ...``
imports the study modules listed in ``STUDY_MODULES`` and calls it.
"""

from ptmlab.core.registry import Registry

STUDIES: Registry = Registry("study")

STUDY_MODULES = [
    "ptmlab.studies.unfreezing",
    "ptmlab.studies.distillation",
    "ptmlab.studies.tokenizers",
    "ptmlab.studies.extraction",
    "ptmlab.studies.ablation", "ptmlab.studies.attention_explanation", "ptmlab.studies.random_init",
    "ptmlab.studies.anomaly",
    "ptmlab.studies.ghost", "ptmlab.studies.super_tickets", "ptmlab.studies.compression",
    "ptmlab.studies.long_attention",
    "ptmlab.studies.objectives", "ptmlab.studies.span_corruption", "ptmlab.studies.domain_adaptation",
    "ptmlab.studies.tokenizers_downstream",
    "ptmlab.studies.multilingual", "ptmlab.studies.meta_kd",
    "ptmlab.studies.scaling", "ptmlab.studies.data_quality",
    "ptmlab.studies.multitask", "ptmlab.studies.ticket_sharing",
    "ptmlab.studies.static_contextual",
]


def load_all() -> Registry:
    import importlib

    for name in STUDY_MODULES:
        importlib.import_module(name)
    # listed in STUDY_MODULES' order, whichever study module an earlier import happened to load first
    rank = {name: i for i, name in enumerate(STUDY_MODULES)}
    STUDIES.reorder(lambda name, run: rank.get(getattr(run, "__module__", ""), len(rank)))
    return STUDIES
