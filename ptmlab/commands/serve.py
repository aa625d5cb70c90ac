"""``ptmlab serve RUN_DIR``: the inference API (FastAPI on uvicorn) over a run directory."""

from __future__ import annotations

import argparse
import sys

from ptmlab.core.cli_parser import config_command
from ptmlab.core.config import resolve_config


def register(sub) -> None:
    from ptmlab.serve.config import ServeConfig

    config_command(sub, "serve", ServeConfig, run, help="serve a model over HTTP with keys, quotas and output policies",
                   thing=("run_dir", "RUN_DIR", "a ptmlab run directory (fine-tuned, distilled, pruned, ...)"),
                   description="Serve RUN_DIR at POST /v1/predict (keys from `ptmlab keys create`); "
                                   "GET /healthz, /metrics (Prometheus), /docs and /openapi.json. Several replicas "
                                   "share keys, budgets and rate limits with --state postgresql://...")


def run(args: argparse.Namespace) -> int:
    from ptmlab.core.extras import require_extra

    require_extra("serve", "serve")  # before anything is imported or loaded
    from ptmlab.core.host_memory import reuse_host_memory
    from ptmlab.core.seed import configure_threads
    from ptmlab.serve.app import create_app
    from ptmlab.serve.config import ServeConfig, is_loopback
    from ptmlab.serve.server import serve_forever
    from ptmlab.serve.state import open_store

    cfg = resolve_config(ServeConfig, args, args.config)
    cfg.validate()
    if not is_loopback(cfg.host):
        print(f"warning: --host {cfg.host} is not loopback: the API is reachable from other machines (keys, quotas "
              f"and the output policy are the only guard); pass --host 127.0.0.1 to keep it local", file=sys.stderr,
              flush=True)
    configure_threads()
    store = open_store(cfg.state or None, cfg.state_timeout)
    app = create_app(args.run_dir, cfg, store)
    info = app.state.info
    heads = f"tasks {', '.join(t.name for t in info.tasks)}" if info.tasks else f"labels {', '.join(info.labels)}"
    print(f"serving {info.path} ({info.model_type}, {heads}) on http://{cfg.host}:{cfg.port} "
          f"(policy {cfg.output_policy}; state {store.where})", flush=True)
    with reuse_host_memory():  # the served model runs on the CPU: freed activations reuse their pages
        serve_forever(app, cfg.host, cfg.port)
    return 0
