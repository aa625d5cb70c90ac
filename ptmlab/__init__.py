"""ptmlab: a workbench for transfer learning with pre-trained language models.

The Python API (docs/api.md) loads on first use, so ``import ptmlab`` and ``ptmlab --help`` stay fast::

    import ptmlab
    run = ptmlab.finetune("tiny", dataset, epochs=1, output="runs/x")
    ptmlab.load("runs/x").predict(["a text"])
"""

__version__ = "0.1.0"

_API = ("Run", "load", "finetune", "evaluate", "predict", "distill", "prune", "compress", "export", "pretrain", "study",
        "PtmlabError")
__all__ = ["__version__", *_API]


def __getattr__(name: str):
    if name in _API:
        import ptmlab.api

        return getattr(ptmlab.api, name)
    raise AttributeError(f"module 'ptmlab' has no attribute '{name}'")


def __dir__() -> list[str]:
    return sorted(__all__)
