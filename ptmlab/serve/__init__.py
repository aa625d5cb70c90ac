"""Serving: an HTTP inference API over any ptmlab run directory, with keys, quotas, audit and output policies.

The public functions other capabilities (extraction) and studies may use, imported lazily so that importing this
package loads neither FastAPI nor torch:

* ``open_store(spec=None, busy_timeout=2.0) -> Store``: the state (SQLite directory or ``postgresql://`` URL);
* ``load_predictor(model_dir, max_length=None) -> Predictor``: a served model answering ``predict(texts, pairs,
  task=None)`` (``task``: a multi-task run's head; ``info.tasks`` lists them);
* ``flag_keys(store, ...)`` and ``verify_watermark(model_dir, store, queries, ...)``: the owner's defences;
* ``create_app(model_dir, cfg, store)``, ``ServeConfig`` and ``serve_in_thread(app)``: a server in-process.
"""

from __future__ import annotations

import importlib

_PUBLIC = {
    "open_store": "ptmlab.serve.state", "Store": "ptmlab.serve.state", "text_hash": "ptmlab.serve.state",
    "load_predictor": "ptmlab.serve.predictor", "flag_keys": "ptmlab.serve.defences",
    "verify_watermark": "ptmlab.serve.defences", "create_app": "ptmlab.serve.app", "ServeConfig": "ptmlab.serve.config",
    "serve_in_thread": "ptmlab.serve.server",
}
__all__ = sorted(_PUBLIC)


def __getattr__(name: str):
    if name in _PUBLIC:
        return getattr(importlib.import_module(_PUBLIC[name]), name)
    raise AttributeError(f"module 'ptmlab.serve' has no attribute '{name}'")
