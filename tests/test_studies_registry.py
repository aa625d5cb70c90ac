"""Every registered study runs end to end with ``--budget small`` (a loop over the registry, so a study is covered
the day it is registered) and writes results.json with its table and verdict, and report.html."""

from __future__ import annotations

import dataclasses
import json

import pytest

from ptmlab.core.errors import PtmlabError
from ptmlab.studies import load_all
from tests.conftest import SHARED

STUDIES = load_all()


@pytest.mark.parametrize("name", sorted(STUDIES.names()))
def test_registered_study_runs_on_a_small_budget(name, tmp_path, capsys):
    out = tmp_path / name
    try:
        rc = STUDIES.get(name)(["--budget", "small", "--output", str(out)])
    except PtmlabError as e:
        if not SHARED.is_dir():
            pytest.skip(f"study {name} needs the shared data, absent here ({e})")
        raise
    assert rc == 0
    res = json.loads((out / "results.json").read_text())
    assert res["title"] and isinstance(res["rows"], list) and res["rows"], res
    assert isinstance(res["verdict"], str) and len(res["verdict"]) > 20, res["verdict"]
    assert (out / "report.html").stat().st_size > 500
    printed = capsys.readouterr().out
    assert "verdict:" in printed


def test_small_budget_preset_yields_to_explicit_flags(tmp_path):
    from ptmlab.studies.common import SMALL_FINETUNE as SMALL
    from ptmlab.studies.common import parse_study_args
    from ptmlab.studies.unfreezing import UnfreezingArgs

    a = parse_study_args("unfreezing", UnfreezingArgs, ["--budget", "small", "--max-train", "99"], small=SMALL)
    assert a.model == "tiny" and a.max_train == 99 and a.task
    b = parse_study_args("unfreezing", UnfreezingArgs, [], small=SMALL)
    assert b.model == "minilm" and b.max_train == 2000
    with pytest.raises(dataclasses.FrozenInstanceError):
        b.model = "tiny"  # configs are frozen
