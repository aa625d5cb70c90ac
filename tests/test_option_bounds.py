"""Every command's and every study's numeric options are checked when the options are built: a negative count,
size, rate, fraction or tolerance is a one-line error naming its flag, before any model is loaded or any hour of
training is spent."""

import dataclasses
import importlib
import pkgutil

import pytest

import ptmlab
from ptmlab.core.config import Validated, _field_types, at_least, build_config, positive
from ptmlab.core.errors import PtmlabError

# the option groups that are only mixins of a command's options (checked through the commands that use them)
MIXINS = {"DataArgs", "ModelArgs", "TrainArgs", "LongArgs", "MultiTaskArgs", "RecoveryArgs", "_ChangeArgs"}
# what a command needs before its numbers are looked at (an input it cannot run without)
REQUIRED = {"AnomalyConfig": {"blimp": "blimp"}, "PruneConfig": {"heads": 0.3}, "LongifyConfig": {"output": "o"},
            "PretrainConfig": {"files": ["t.txt"]}, "ScaleConfig": {"files": ["t.txt"]},
            "LowRankConfig": {"rank_ratio": 0.5}, "CleanConfig": {"output": "o"}, "OptimizeConfig": {"max_loss": 1.0}}


def _option_classes():
    found = {}
    for m in pkgutil.walk_packages(ptmlab.__path__, "ptmlab."):
        mod = importlib.import_module(m.name)
        for v in vars(mod).values():
            if (isinstance(v, type) and issubclass(v, Validated) and dataclasses.is_dataclass(v)
                    and v.__module__ == mod.__name__ and v.__name__ not in MIXINS):
                found[f"{m.name.removeprefix('ptmlab.')}.{v.__qualname__}"] = v
    return found


CLASSES = _option_classes()
# a seed may be any integer; every other number an option holds has a lower bound
CASES = [(name, f.name) for name, cls in sorted(CLASSES.items()) for f in dataclasses.fields(cls)
         if _field_types(cls)[f.name] in (int, float) and f.name != "seed"]


def test_the_commands_and_studies_are_all_found():
    names = {n.rsplit(".", 1)[1] for n in CLASSES}
    assert {"FinetuneConfig", "ServeConfig", "PretrainConfig", "MetaKDStudyArgs", "PretrainStudyArgs"} <= names
    assert len(CLASSES) >= 45 and len(CASES) > 1000


@pytest.mark.parametrize("cls_name,field", CASES)
def test_a_negative_number_is_rejected_naming_its_flag(cls_name, field):
    cls = CLASSES[cls_name]
    required = REQUIRED.get(cls.__name__, {})
    build_config(cls, dict(required), source="options")  # valid as given: the failure below is the number's
    with pytest.raises(PtmlabError) as err:
        build_config(cls, {**required, field: -1}, source="options")
    assert field.replace("_", "-") in str(err.value) and "\n" not in str(err.value), str(err.value)


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
