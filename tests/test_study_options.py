"""Every study's numeric options are checked when its options are built: a negative count, size, rate or tolerance
is a one-line error naming its flag, before any model is loaded or any hour of training is spent."""

import dataclasses
import importlib
import pkgutil

import pytest

import ptmlab.studies as studies
from ptmlab.core.config import _field_types, at_least, build_config, positive
from ptmlab.core.errors import PtmlabError
from ptmlab.studies.common import StudyBase


def _option_classes():
    found = {}
    for m in pkgutil.iter_modules(studies.__path__):
        mod = importlib.import_module(f"ptmlab.studies.{m.name}")
        for v in vars(mod).values():
            if isinstance(v, type) and issubclass(v, StudyBase) and v.__module__ == mod.__name__:
                found[v.__qualname__] = v
    return found


CLASSES = _option_classes()
# a seed may be any integer; every other number an option holds has a lower bound
CASES = [(name, f.name) for name, cls in sorted(CLASSES.items()) for f in dataclasses.fields(cls)
         if _field_types(cls)[f.name] in (int, float) and f.name != "seed"]


def test_every_study_declares_option_classes():
    assert len(CLASSES) >= 20 and "MetaKDStudyArgs" in CLASSES and "PretrainStudyArgs" in CLASSES
    assert len(CASES) > 200


@pytest.mark.parametrize("cls_name,field", CASES)
def test_a_negative_number_is_rejected_naming_its_flag(cls_name, field):
    flag = "--" + field.replace("_", "-")
    with pytest.raises(PtmlabError) as err:
        build_config(CLASSES[cls_name], {field: -1}, source="options")
    assert flag in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_bound_helpers():
    @dataclasses.dataclass
    class C:
        steps: int = 3
        lr: float = 0.0
        cap: int | None = None

    at_least(C(), 1, "steps", "cap")  # None means "no cap" and passes
    with pytest.raises(PtmlabError, match="--steps must be >= 4, got 3"):
        at_least(C(), 4, "steps")
    with pytest.raises(PtmlabError, match="--lr must be >= 0, got nan"):
        at_least(C(lr=float("nan")), 0, "lr")
    with pytest.raises(PtmlabError, match="--lr must be positive, got 0.0"):
        positive(C(), "lr")
    positive(C(lr=1e-5), "lr")
