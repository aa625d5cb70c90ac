import argparse

import pytest

from ptmlab.core.config import add_config_args, load_yaml, resolve_config
from ptmlab.core.errors import PtmlabError
from ptmlab.train.args import FinetuneConfig


def _parse(argv):
    p = argparse.ArgumentParser()
    p.add_argument("--config")
    add_config_args(p, FinetuneConfig)
    return p.parse_args(argv)


def test_yaml_then_flags_flags_win(tmp_path):
    y = tmp_path / "c.yaml"
    y.write_text("model: tiny\ntrain:\n  lr: 0.001\n  epochs: 2\ntask: sst2\nstrategy: frozen\n")
    args = _parse(["--config", str(y), "--lr", "3e-4", "--max-train", "50"])
    cfg = resolve_config(FinetuneConfig, args, args.config)
    assert cfg.model == "tiny" and cfg.task == "sst2" and cfg.strategy == "frozen"
    assert cfg.lr == pytest.approx(3e-4)  # the flag wins over the file
    assert cfg.epochs == 2.0 and cfg.max_train == 50
    assert cfg.batch_size == 32  # default kept


def test_a_run_directorys_config_yaml_is_a_valid_config(tmp_path):
    """The config.yaml a run writes (with the command that wrote it) repeats the run, flags changing one thing."""
    import dataclasses

    from ptmlab.core.rundir import RunDir

    first = dataclasses.replace(FinetuneConfig(), model="tiny", lr=3e-4, seed=0, output=str(tmp_path / "r0"))
    run = RunDir.create(tmp_path / "r0")
    run.write_config(dataclasses.asdict(first), "finetune")
    args = _parse(["--config", str(run.file("config.yaml")), "--seed", "1", "--output", str(tmp_path / "r1")])
    again = resolve_config(FinetuneConfig, args, args.config)
    assert again == dataclasses.replace(first, seed=1, output=str(tmp_path / "r1"))


def test_unknown_yaml_key_is_named(tmp_path):
    y = tmp_path / "c.yaml"
    y.write_text("lerning_rate: 0.1\n")
    with pytest.raises(PtmlabError, match="unknown option 'lerning_rate'.*did you mean 'learning_rate'"):
        resolve_config(FinetuneConfig, _parse([]), str(y))


def test_bad_values_are_rejected(tmp_path):
    with pytest.raises(PtmlabError, match="--lr must be positive"):
        resolve_config(FinetuneConfig, _parse(["--lr", "0"]))
    with pytest.raises(PtmlabError, match="unknown strategy 'fullish'"):
        resolve_config(FinetuneConfig, _parse(["--strategy", "fullish"]))
    with pytest.raises(PtmlabError, match="unknown schedule"):
        resolve_config(FinetuneConfig, _parse(["--schedule", "triangle"]))
    y = tmp_path / "bad.yaml"
    y.write_text("epochs: [1\n")
    with pytest.raises(PtmlabError, match="not valid YAML"):
        load_yaml(y)
    y.write_text("epochs: many\n")
    with pytest.raises(PtmlabError, match="expects float"):
        resolve_config(FinetuneConfig, _parse([]), str(y))


def test_bool_flags_and_lists():
    cfg = resolve_config(FinetuneConfig, _parse(["--no-group-by-length", "--no-keep-best"]))
    assert cfg.group_by_length is False and cfg.keep_best is False
