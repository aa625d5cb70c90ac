"""Every registered study runs end to end with ``--budget small`` (a loop over the registry, so a study is covered
the day it is registered) and writes results.json with its table and verdict, and report.html; the verdict's values
are checked against its own numbers (``check_judged``)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from ptmlab.core.errors import PtmlabError
from ptmlab.studies import load_all
from tests.conftest import SHARED

STUDIES = load_all()
# studies whose --budget small run already happens end to end in their own test (which checks results.json and
# report.html too): running them again here would double the suite's slowest tests
COVERED_ELSEWHERE = {
    "objectives": "tests/test_pretrain_studies.py", "span-corruption": "tests/test_pretrain_studies.py",
    "domain-adaptation": "tests/test_pretrain_studies.py", "tokenizers-downstream": "tests/test_pretrain_studies.py",
    "multilingual-distillation": "tests/test_multilingual.py", "multitask": "tests/test_multitask.py",
    "static-vs-contextual": "tests/test_static_contextual.py", "ticket-sharing": "tests/test_ticket_sharing.py",
    "layer-ablation": "tests/test_study_suite.py", "attention-explanation": "tests/test_attention_explanation_study.py",
    "long-attention": "tests/test_studies_long_attention.py",
}


def _mobile_student_row(res: dict) -> None:
    """The MobileBERT-style student sits in the distillation table beside the others, with its size and
    batch-32 latency, and is smaller than the teacher; a narrow ``shrink:`` student of about its size beside it."""
    rows = {r["method"]: r for r in res["rows"]}
    mobile, teacher = rows["mobilebert"], rows["teacher"]
    assert mobile["student"].startswith("mobile:") and {"tinybert", "none"} <= set(rows), rows
    assert 0 < mobile["params"] < teacher["params"] and mobile["speedup_b32"] > 0, mobile
    assert res["chosen_method"] not in ("mobilebert", "shrink")  # other students: reported, never chosen
    # its equal-size yardstick: a narrow student sliced from the teacher, also smaller than the teacher
    shrink = rows["shrink"]
    assert shrink["student"].startswith("shrink:") and 0 < shrink["params"] < teacher["params"], shrink
    main = next(k for k in teacher if k not in ("method", "student", "teacher_%", "agreement", "params",
                                                  "speedup_b32", "train_seconds"))
    assert shrink["speedup_b32"] > 0 and 0.0 <= shrink[main] <= 1.0 and len(shrink["per_seed"]) >= 1, shrink
    # the BiLSTM and CNN students and TinyBERT's whole recipe (general stage, augmented data) run too,
    # beside the claim: their own students, their rows in the table, never the chosen method
    assert rows["bilstm"]["student"].startswith("bilstm") and rows["cnn"]["student"].startswith("cnn")
    assert rows["tinybert_aug"]["student"] == rows["tinybert"]["student"]
    assert set(res["beside_the_claim"]) == {"mobilebert", "shrink", "bilstm", "cnn", "tinybert_aug"}
    assert res["chosen_method"] not in res["beside_the_claim"] and res["general_text"]
    for m in ("bilstm", "cnn", "tinybert_aug"):
        assert 0.0 <= rows[m][main] <= 1.0 and 0 < rows[m]["params"] and rows[m]["speedup_b32"] > 0, rows[m]
    assert rows["bilstm"]["params"] < teacher["params"] and rows["cnn"]["params"] < teacher["params"]


# what a study's table must hold beyond the common checks
EXTRA_CHECKS = {"distillation": _mobile_student_row}


def test_studies_covered_elsewhere_are_run_there():
    from tests.conftest import ROOT

    for name, test_file in COVERED_ELSEWHERE.items():
        assert name in STUDIES.names(), name
        text = (ROOT / test_file).read_text()
        assert f'"{name}"' in text or f"studies.{name.replace('-', '_')} import run" in text, (name, test_file)
        assert '"--budget", "small"' in text, test_file


@pytest.mark.parametrize("name", sorted(set(STUDIES.names()) - set(COVERED_ELSEWHERE)))
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
    check_judged(name, res)
    EXTRA_CHECKS.get(name, lambda r: None)(res)


def check_judged(name: str, res: dict) -> None:
    """The values of a study's verdict, not only its shape: every condition's ``met`` is its value against its
    threshold, any unmet condition makes the outcome "cannot test", one seed never decides a claim, and the record
    judged again from its own numbers (``ptmlab.studies.rederive``) gives the same outcome and conditions."""
    from ptmlab.studies.rederive import rederive_record
    from ptmlab.studies.verdict import CANNOT_TEST, INCONCLUSIVE, OUTCOMES, holds

    assert res["outcome"] in OUTCOMES and res["validity"], res
    for c in res["validity"]:
        assert c["met"] == holds(c["value"], c["compare"], c["threshold"]), c
    assert (res["outcome"] == CANNOT_TEST) == any(not c["met"] for c in res["validity"])
    assert res["verdict"] == f"{res['outcome']}: {res['reason']}"
    if len(res["run"]["seeds"] or []) == 1:  # one seed: no condition rests on a seed-level interval
        assert all(c["value"] is None for c in res["validity"] if "over 1 seed" in c["condition"]
                   or "seed-level interval" in c["condition"]), res["validity"]
    if res["outcome"] == INCONCLUSIVE:
        assert "detectable_effect" in res
    again = rederive_record(name, res, STUDIES)
    assert again["outcome"] == res["outcome"] and again["validity"] == res["validity"]


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


def test_distillation_general_text_falls_back_to_the_task_text(tmp_path, monkeypatch):
    """Without the shared WikiText-2 (a user's fresh machine) TinyBERT's general stage reads the task's own training
    text, written once into the study's output; an explicit --general-text always wins."""
    import ptmlab.studies.pretrain_common as pc
    from ptmlab.studies.distillation import DistillationStudyArgs, _general_text

    monkeypatch.setattr(pc, "shared_dir", lambda: tmp_path / "no-shared-data")
    path = _general_text(DistillationStudyArgs(task="tweets"), tmp_path)
    text = (tmp_path / "general-text.txt").read_text()
    assert path == str(tmp_path / "general-text.txt") and text.count("\n\n") > 1000
    assert _general_text(DistillationStudyArgs(task="tweets", general_text="my.txt"), tmp_path) == "my.txt"
