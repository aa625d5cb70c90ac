"""The distillation study's teacher: fine-tuned on many more rows than the students, so it has something to teach."""

from __future__ import annotations

import yaml

from ptmlab.studies.common import parse_study_args
from ptmlab.studies.distillation import FULL, SMALL, DistillationStudyArgs, _teacher


def test_teacher_trains_on_more_rows_than_the_students(tmp_path):
    a = parse_study_args("distillation", DistillationStudyArgs, ["--budget", "small", "--task", "tweets",
                                                                 "--output", str(tmp_path)], small=SMALL, full=FULL)
    assert a.teacher_max_train > a.max_train  # the design, not only the defaults
    teacher = _teacher(a, tmp_path)
    cfg = yaml.safe_load((tmp_path / "teacher" / "config.yaml").read_text())
    assert teacher == str(tmp_path / "teacher")
    assert cfg["max_train"] == a.teacher_max_train == 128 and cfg["model"] == "tiny"
    defaults = DistillationStudyArgs()
    assert defaults.teacher_max_train >= 10 * defaults.max_train
    assert FULL["teacher_model"] == "mpnet" and FULL["teacher_max_train"] == 0  # all of the training data


def test_the_student_alone_trains_as_long_as_the_longest_trained_method(tmp_path):
    """TinyBERT's intermediate stage adds an epoch to the task epochs; the student trained on labels alone gets the
    same total, so the reference-budget condition of the study holds by design."""
    from dataclasses import replace

    from ptmlab.studies.distillation import _distill, _longest_epochs, validity

    a = parse_study_args("distillation", DistillationStudyArgs, ["--budget", "small", "--task", "tweets",
                                                                 "--methods", "none,soft_ce,tinybert",
                                                                 "--output", str(tmp_path)], small=SMALL, full=FULL)
    assert _longest_epochs(a) == a.epochs + 1.0
    assert _longest_epochs(replace(a, methods=["none", "soft_ce"])) == a.epochs
    assert _longest_epochs(replace(a, methods=["none", "soft_ce", "mobilebert"])) == a.epochs  # beside: not compared
    teacher = _teacher(a, tmp_path)
    _distill(a, teacher, "none", tmp_path / "none", 0)
    _distill(a, teacher, "soft_ce", tmp_path / "soft_ce", 0)
    epochs = {m: yaml.safe_load((tmp_path / m / "config.yaml").read_text())["epochs"] for m in ("none", "soft_ce")}
    assert epochs == {"none": a.epochs + 1.0, "soft_ce": a.epochs}
    record = {"rows": [], "train_epochs": {"reference": _longest_epochs(a), "compared": _longest_epochs(a)}}
    [budget] = [c for c in validity(record) if "training epochs" in c.condition]
    assert budget.met and budget.value == 1.0
