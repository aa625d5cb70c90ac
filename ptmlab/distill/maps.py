"""Layer maps: which teacher layer each student layer learns from (0-based transformer layers).

``uniform`` (TinyBERT): student layer i <- teacher layer round((i + 1) * T / S) - 1, so the last maps to the last.
``skip`` (PKD-skip): every floor(T / S)-th teacher layer.  ``last`` (PKD-last): the teacher's last S layers.
An explicit map lists teacher layers for student layers 0..S-1 (``1,3,5``) or pairs (``0:1,2:5``).
"""

from __future__ import annotations

from ptmlab.core.errors import PtmlabError

MAP_KINDS = ("uniform", "skip", "last")


def layer_map(spec: str, n_student: int, n_teacher: int) -> list[tuple[int, int]]:
    """(student layer, teacher layer) pairs for a map name or an explicit list; checks every index."""
    spec = spec.strip()
    if spec == "uniform":
        pairs = [(i, round((i + 1) * n_teacher / n_student) - 1) for i in range(n_student)]
    elif spec == "skip":
        stride = max(1, n_teacher // n_student)
        pairs = [(i, min(n_teacher - 1, (i + 1) * stride - 1)) for i in range(n_student)]
    elif spec == "last":
        if n_student > n_teacher:
            raise PtmlabError(f"layer map 'last' needs a student no deeper than the teacher ({n_student} > "
                              f"{n_teacher} layers): use 'uniform' or an explicit map")
        pairs = [(i, n_teacher - n_student + i) for i in range(n_student)]
    else:
        pairs = _explicit(spec)
    check_pairs(pairs, n_student, n_teacher, spec)
    return pairs


def _explicit(spec: str) -> list[tuple[int, int]]:
    try:
        items = [p.strip() for p in spec.split(",") if p.strip()]
        if all(":" in p for p in items):
            return [(int(a), int(b)) for a, b in (p.split(":") for p in items)]
        return [(i, int(p)) for i, p in enumerate(items)]
    except ValueError:
        raise PtmlabError(f"layer map '{spec}' is not {', '.join(MAP_KINDS)}, a list of teacher layers (1,3,5) "
                          f"or student:teacher pairs (0:1,2:5)") from None


def check_pairs(pairs: list[tuple[int, int]], n_student: int, n_teacher: int, spec: str = "map") -> None:
    if not pairs:
        raise PtmlabError(f"layer map '{spec}' is empty: name at least one student:teacher pair")
    for s, t in pairs:
        if not 0 <= s < n_student:
            raise PtmlabError(f"layer map '{spec}' names student layer {s}, but the student has layers "
                              f"0..{n_student - 1}")
        if not 0 <= t < n_teacher:
            raise PtmlabError(f"layer map '{spec}' names teacher layer {t}, but the teacher has layers "
                              f"0..{n_teacher - 1}")
