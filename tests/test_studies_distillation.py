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
