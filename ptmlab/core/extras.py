"""Optional extras: a command that needs one checks for it before doing any work and names the install command.

    pip install 'ptmlab[serve]'      FastAPI, uvicorn, httpx, psycopg: ``serve``, ``keys`` on PostgreSQL, ``extract``
    pip install 'ptmlab[tokenizers]' the XLM-R tokenizer package used by ``tokenizer`` comparisons
    pip install 'ptmlab[tensorboard]' (or trackio, mlflow, wandb)  an experiment tracker for ``--report-to``
    pip install 'ptmlab[optimize]'   Optuna: the search of ``optimize``
"""

from __future__ import annotations

import importlib.util

from ptmlab.core.errors import PtmlabError

EXTRAS = {
    "serve": ("fastapi", "uvicorn", "httpx", "pydantic"),
    "postgres": ("psycopg",),
    "optimize": ("optuna",),
    # experiment trackers (--report-to)
    "tensorboard": ("tensorboard",), "trackio": ("trackio",), "mlflow": ("mlflow",), "wandb": ("wandb",),
}
INSTALL = {"serve": "serve", "postgres": "serve", "optimize": "optimize", "tensorboard": "tensorboard",
           "trackio": "trackio", "mlflow": "mlflow", "wandb": "wandb"}


def missing_modules(extra: str) -> list[str]:
    return [m for m in EXTRAS[extra] if importlib.util.find_spec(m) is None]


def require_extra(extra: str, command: str) -> None:
    """PtmlabError naming the extra to install when one of its modules is absent."""
    missing = missing_modules(extra)
    if missing:
        raise PtmlabError(f"ptmlab {command} needs {', '.join(missing)} (the '{INSTALL[extra]}' extra): install it "
                          f"with `pip install 'ptmlab[{INSTALL[extra]}]'` (or `bash scripts/setup.sh --test`)")
