"""ptmlab: a workbench for transfer learning with pre-trained language models.

The Python API (docs/api.md) loads on first use, so ``import ptmlab`` and ``ptmlab --help`` stay fast::

    import ptmlab
    run = ptmlab.finetune("tiny", dataset, epochs=1, output="runs/x")
    ptmlab.load("runs/x").predict(["a text"])
"""

import sys
import types

__version__ = "0.1.0"

_API = ("Run", "load", "finetune", "evaluate", "predict", "distill", "prune", "compress", "export", "optimize",
        "pretrain", "study", "PtmlabError")
__all__ = ["__version__", *_API]


def __getattr__(name: str):
    if name in _API:
        import ptmlab.api

        return getattr(ptmlab.api, name)
    raise AttributeError(f"module 'ptmlab' has no attribute '{name}'")


def __dir__() -> list[str]:
    return sorted(__all__)


class _Verb(types.ModuleType):
    """A subpackage that is also a verb of the API (``ptmlab.distill``, ``compress``, ``export``, ``optimize``,
    ``pretrain``):
    calling the module calls the verb, and its submodules stay reachable (``ptmlab.distill.pipeline``)."""

    def __call__(self, *args, **kwargs):
        import ptmlab.api

        return getattr(ptmlab.api, self.__name__.rpartition(".")[2])(*args, **kwargs)


class _Package(types.ModuleType):
    """Importing ``ptmlab.distill`` binds the subpackage to the name ``distill``, where the verb was found before;
    the bound module becomes callable as the verb, so ``ptmlab.distill(...)`` works before and after."""

    def __setattr__(self, name: str, value) -> None:
        if name in _API and type(value) is types.ModuleType:
            value.__class__ = _Verb
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
