"""The layering of ptmlab (docs/ARCHITECTURE.md): every module imports only its own floor or lower floors.

    core -> data, models, report -> train -> capabilities -> studies -> commands -> cli

A capability may use another capability only through a documented public function (listed in PUBLIC below), and
never imports studies or commands. The check reads every ``import`` statement (top level and inside functions)
with ``ast``, so it also catches lazy imports, and imports every module so a broken one fails here.
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path

import pytest

import ptmlab

ROOT = Path(ptmlab.__file__).parent
FLOORS = {
    "core": 0,
    "data": 1, "models": 1, "report": 1,
    "train": 2,
    "distill": 3, "compress": 3, "analysis": 3, "tokenization": 3, "serve": 3, "extraction": 3,
    "pretrain": 3, "clean": 3, "longseq": 3,
    "scaling": 3,
    "export": 3,
    "optimize": 3,  # the search over structures x backends (students, pruning, vocabulary, onnxruntime)
    "studies": 4,
    "integrations": 4,  # ptmlab inside transformers.Trainer scripts (over train and distill)
    "api": 5,  # the Python API: verbs over the capabilities, the commands parse flags into it
    "commands": 6, "__main__": 7, "cli": 7, "__init__": 0,
}
CAPABILITIES = {name for name, floor in FLOORS.items() if floor == 3}
# capability -> the other capabilities' public functions it may call (module paths)
PUBLIC = {
    "compress": {"ptmlab.distill.losses", "ptmlab.distill.spans"},  # recovery with a teacher: distill's soft_ce
    # (per word or per start/end position for span tasks)
    "scaling": {"ptmlab.pretrain.run", "ptmlab.pretrain.config", "ptmlab.pretrain.flops"},  # sweeps of runs
    "export": {"ptmlab.compress.quantize"},  # ONNX export, onnxruntime int8, the int8 layer choice
    # optimize: students (distill), pruning with recovery and its shape probe, vocabulary pruning, ONNX export and
    # int8 (compress), the parity check, the export's source check and the run's data options (export)
    "optimize": {"ptmlab.distill.pipeline", "ptmlab.distill.config", "ptmlab.distill.students",
                 "ptmlab.compress.prune", "ptmlab.compress.importance", "ptmlab.compress.surgery",
                 "ptmlab.compress.vocab", "ptmlab.compress.quantize", "ptmlab.export.parity", "ptmlab.export.run"},
}


def _room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _imports(path: Path, module: str) -> list[tuple[str, int]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names if a.name.startswith("ptmlab")]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and node.module.startswith("ptmlab"):
            out.append((node.module, node.lineno))
    return out


def _modules():
    for info in pkgutil.walk_packages([str(ROOT)], "ptmlab."):
        yield info.name


def _path(module: str) -> Path:
    rel = Path(*module.split(".")[1:])
    pkg = ROOT / rel / "__init__.py"
    return pkg if pkg.is_file() else ROOT / rel.with_suffix(".py")


def test_every_room_has_a_floor():
    rooms = {_room(m) for m in _modules()}
    missing = sorted(r for r in rooms if r not in FLOORS)
    assert not missing, f"new top-level modules need a floor in tests/test_architecture.py: {missing}"


def test_no_module_imports_a_higher_floor_or_another_capabilitys_internals():
    bad = []
    for module in _modules():
        room = _room(module)
        floor = FLOORS.get(room, 99)
        for target, line in _imports(_path(module), module):
            t_room = _room(target)
            t_floor = FLOORS.get(t_room, 99)
            where = f"{module}:{line} imports {target}"
            if t_floor > floor:
                bad.append(f"{where} (floor {floor} -> {t_floor})")
            elif room in CAPABILITIES and t_room in CAPABILITIES and t_room != room:
                if not any(target == p or target.startswith(p + ".") for p in PUBLIC.get(room, ())):
                    bad.append(f"{where} (another capability's internals)")
    assert not bad, "upward or sideways imports:\n" + "\n".join(bad)


@pytest.mark.parametrize("module", sorted(_modules()))
def test_every_module_imports(module):
    if module.endswith("__main__"):
        pytest.skip("running it starts the CLI")
    importlib.import_module(module)


def test_the_check_catches_an_upward_import(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("def f():\n    from ptmlab.studies.common import write_study\n")
    (target, _), = _imports(f, "ptmlab.data.m")
    assert FLOORS[_room(target)] > FLOORS[_room("ptmlab.data.m")]
