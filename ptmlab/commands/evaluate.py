"""``ptmlab evaluate``: score a run directory or any model on a task's dev (and test) split."""

from __future__ import annotations

import argparse

from ptmlab.api.evaluation import EvaluateConfig
from ptmlab.core.cli_parser import config_command
from ptmlab.core.config import resolve_config


def register(sub) -> None:
    config_command(sub, "evaluate", EvaluateConfig, run, help="evaluate a run directory or model on a task",
                   thing=("model", "RUN_DIR_OR_MODEL", "a run directory or model"))


def run(args: argparse.Namespace) -> int:
    import json

    from ptmlab.api.evaluation import evaluate_config, run_data_defaults
    from ptmlab.core.seed import configure_threads
    from ptmlab.train.multitask import recorded_tasks

    configure_threads()
    if not recorded_tasks(args.model):  # the run's own task and dev subset unless a data option is given
        vars(args).update(run_data_defaults(args.model, vars(args)))
    cfg = resolve_config(EvaluateConfig, args, args.config)
    result = evaluate_config(args.model, cfg, task_given="task" in vars(args))  # what ptmlab.evaluate runs too
    print(json.dumps(result, indent=2))
    return 0
