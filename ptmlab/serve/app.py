"""The FastAPI app: ``POST /v1/predict``, ``GET /healthz``, ``GET /metrics`` and the OpenAPI spec.

``create_app`` builds the ``ServeContext`` (``context.py``: config, state store, model, batcher, metrics,
defences) and wires the rest to it: the endpoints (``routes.py``, which also gives the order of checks for a
prediction), the error bodies, key check, size limit, refusals and request metrics (``middleware.py``), the parsing
and limits of a request (``parsing.py``), the answers under the output policy and watermark (``answers.py``,
``defences.py``) and the bodies (``schemas.py``).

Every store call runs in a thread and is waited on for ``--state-timeout`` at most: a locked or unreachable store
answers 503 with ``Retry-After`` and never stalls the event loop; ``/healthz`` and ``/metrics`` wait for no writer
(``/healthz`` pings the store on a thread of its own, ``/metrics`` only looks its key up and needs the admin scope,
unless ``--public-metrics``). Connection limits (head size, read and idle deadlines, connection cap) are the
server's (``server.py``).

Nothing a client sends is echoed back whole: an error quotes at most a short, escaped excerpt of it
(``excerpt.py``). Without ``--public-metrics`` no unauthenticated answer names a path or a server setting.

A multi-task run is served whole: a request names its head with ``"task"`` and, without one, gets the first head's
answer, with the task that answered named in every response. One task per request (not every head's answer) because
heads differ in what they read (single sentences or pairs) and what they answer (classes or a score), and one text
charged once should cost one forward pass. An unknown task is a 422 naming the tasks, checked before admission.
"""

from __future__ import annotations

import contextlib

from fastapi import FastAPI

from ptmlab.serve import middleware
from ptmlab.serve.config import ServeConfig
from ptmlab.serve.context import ServeContext
from ptmlab.serve.routes import add_routes
from ptmlab.serve.state import Store


def create_app(model_dir: str, cfg: ServeConfig, store: Store | None = None) -> FastAPI:
    """The app serving ``model_dir`` (any ptmlab run directory) under the limits of ``cfg``."""
    ctx = ServeContext.build(model_dir, cfg, store)
    info = ctx.info

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI):
        yield
        ctx.close()

    served = (f"tasks: {', '.join(t.name for t in info.tasks)}; name one with \"task\"" if info.tasks
              else f"labels: {', '.join(info.labels)}")
    app = FastAPI(title="ptmlab inference API", version="1", lifespan=lifespan,
                  description=f"Predictions of {ctx.name} ({served}); output policy {ctx.defences.policy.name}.")
    app.state.context = ctx
    app.state.store, app.state.batcher, app.state.metrics, app.state.info = ctx.store, ctx.batcher, ctx.metrics, info
    app.state.config = cfg  # the server reads its connection limits here
    app.router.redirect_slashes = False  # /v1/predict/ is 404, not a redirect a client may follow elsewhere
    middleware.install(app, ctx.metrics)
    add_routes(app)
    return app
