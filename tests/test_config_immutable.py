"""Configs cannot be changed by the functions they are given, and commands record what the user asked for.

The bug this guards against: ``ptmlab compress RUN --steps heads=0.4 --recover-epochs 1`` without ``--max-train``
measured the dev split with a config whose ``max_train`` it had set to 1, then handed that same config to recovery
fine-tuning, which re-read the task and recovered on one example, and wrote ``max_train: 1`` into config.yaml.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
import yaml

from ptmlab.core.config import build_config
from ptmlab.train.args import FinetuneConfig
from tests.synthetic import write_task


@pytest.fixture(scope="module")
def fine_tuned(tmp_path_factory):
    from ptmlab.train.finetune import run_finetune

    d = tmp_path_factory.mktemp("ft")
    files = write_task(d / "task", 120, 40)
    run_finetune(build_config(FinetuneConfig, dict(model="tiny", task="synthetic", train_file=files["train"],
                                                   dev_file=files["dev"], epochs=1, max_length=32,
                                                   output=str(d / "R")), source="test"))
    return d / "R", files


def test_compress_recovers_on_all_training_examples_and_records_the_users_options(fine_tuned, tmp_path):
    from ptmlab.cli import main

    run, files = fine_tuned
    out = tmp_path / "C"
    rc = main(["compress", str(run), "--steps", "heads=0.4", "--recover-epochs", "1", "--task", "synthetic",
               "--train-file", files["train"], "--dev-file", files["dev"], "--max-length", "32",
               "--latency-repeats", "1", "--output", str(out)])
    assert rc == 0
    config = yaml.safe_load((out / "config.yaml").read_text())
    assert config["max_train"] is None and config["command"] == "compress"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["recovery_train_examples"] == 120


def test_prune_recovery_runs_in_memory_and_logs_every_iteration_under_its_run(fine_tuned, tmp_path):
    from ptmlab.compress.prune import PruneConfig, run_prune

    run, files = fine_tuned
    out = tmp_path / "P"
    s = run_prune(build_config(PruneConfig, dict(model=str(run), task="synthetic", train_file=files["train"],
                                                 dev_file=files["dev"], heads=0.5, iterations=2, recover_epochs=1,
                                                 max_length=32, importance_examples=32, output=str(out)),
                               source="test"))
    config = yaml.safe_load((out / "config.yaml").read_text())
    assert config["model"] == str(run) and config["command"] == "prune"  # not a deleted temporary folder
    assert (out / "recovery" / "step-1" / "metrics.jsonl").is_file()
    assert s["recovery_train_examples"] == 120 and len(s["prune_steps"]) == 2
    assert (out / "model.safetensors").is_file() and not (out / "checkpoint").exists()


def test_configs_are_frozen_and_change_only_through_replace():
    cfg = build_config(FinetuneConfig, {"task": "tweets", "output": "x"})
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.max_train = 1
    assert dataclasses.replace(cfg, max_train=5).max_train == 5 and cfg.max_train is None


def test_every_option_dataclass_is_frozen():
    """Every config class reachable from a command or study registry is frozen (a new one cannot slip in)."""
    import importlib

    from ptmlab.cli import COMMAND_MODULES
    from ptmlab.studies import STUDY_MODULES

    seen = []
    for name in COMMAND_MODULES + STUDY_MODULES:
        mod = importlib.import_module(name)
        for obj in vars(mod).values():
            if dataclasses.is_dataclass(obj) and isinstance(obj, type) and any(
                    f.metadata.get("help") is not None for f in dataclasses.fields(obj)):
                seen.append(obj)
                assert obj.__dataclass_params__.frozen, f"{obj.__module__}.{obj.__name__} is not frozen"
    assert len(seen) > 10


def test_every_option_dataclass_checks_itself_when_it_is_made():
    """A config with checks runs them however it is made (flags, YAML, the Python API, a direct constructor call),
    so no path skips validation: every option class with ``validate`` is a ``Validated``."""
    import importlib

    from ptmlab.cli import COMMAND_MODULES
    from ptmlab.core.config import Validated
    from ptmlab.core.errors import PtmlabError
    from ptmlab.serve.config import ServeConfig
    from ptmlab.studies import STUDY_MODULES

    unchecked = set()
    for name in COMMAND_MODULES + STUDY_MODULES:
        for obj in vars(importlib.import_module(name)).values():
            if dataclasses.is_dataclass(obj) and isinstance(obj, type) and hasattr(obj, "validate") and any(
                    f.metadata.get("help") is not None for f in dataclasses.fields(obj)):
                if not issubclass(obj, Validated):
                    unchecked.add(f"{obj.__module__}.{obj.__name__}")
    assert not unchecked, sorted(unchecked)
    with pytest.raises(PtmlabError, match="--max-wait-ms must be at most"):
        ServeConfig(max_wait_ms=1e13)  # built directly, not through build_config
