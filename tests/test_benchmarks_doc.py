"""Every command BENCHMARKS.md gives to reproduce a figure can be typed as written, and every result file it cites
is committed.

The commands are ``python benchmarks/X.py ...``, ``ptmlab ...`` and ``bash scripts/...`` in code spans. A benchmark
script must exist and declare every long option the command gives it (read statically from its ``add_argument``
calls and its shared helpers: importing torch for a ``--help`` per script would take minutes); a ``ptmlab`` command
must parse with the real parser (``tests/test_docs_commands.py`` has that check for every page); a script under
``scripts/`` must exist. Prefixes such as ``OMP_NUM_THREADS=2`` are allowed.
"""

from __future__ import annotations

import ast
import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "BENCHMARKS.md"
RESULT = re.compile(r"benchmarks/(?:investigations/)?results/[A-Za-z0-9_.-]+\.(?:json|png)")


def code_spans(text: str) -> list[str]:
    """The inline code spans of a markdown text (fenced blocks dropped), whitespace folded."""
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    return [" ".join(span.split()) for span in re.findall(r"`([^`]+)`", prose)]


def commands(text: str) -> list[list[str]]:
    """Each command in a code span, as words, from the program on (``VAR=x`` prefixes dropped)."""
    found = []
    for span in code_spans(text):
        for part in re.split(r"&&|;", span):
            try:
                words = shlex.split(part)
            except ValueError:
                continue
            while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", words[0]):
                words = words[1:]
            if len(words) >= 2 and (words[0] == "python" and words[1].startswith("benchmarks/")
                                    or words[0] == "bash" and words[1].startswith("scripts/")):
                found.append(words)
            elif words and words[0] == "ptmlab" and len(words) >= 2:
                found.append(words)
    return found


def declared_options(script: Path) -> set[str]:
    """The long options a script's parser declares: the string arguments of its ``add_argument`` calls, and those of
    the private helpers beside it (``benchmarks/_*.py``) that scripts share."""
    options: set[str] = set()
    for path in [script, *sorted(script.parent.glob("_*.py"))]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument":
                options |= {a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)
                            and a.value.startswith("--")}
    return options


def problems(text: str) -> list[str]:
    broken = []
    for words in commands(text):
        if words[0] == "ptmlab":
            continue  # parsed by tests/test_docs_commands.py
        path = ROOT / words[1]
        if not path.is_file():
            broken.append(f"{words[1]}: no such script")
            continue
        if words[0] == "bash":
            continue
        options = declared_options(path)
        flags = [w.split("=", 1)[0] for w in words[2:] if w.startswith("--")]
        # argparse takes a unique prefix (--out for --output)
        broken += [f"{words[1]} {f}: not an option of the script" for f in flags
                   if f != "--help" and not any(o.startswith(f) for o in options)]
    broken += [f"{name}: no such result file" for name in sorted(set(RESULT.findall(text)))
               if "MACHINE" not in name and "BENCHMARK" not in name and not (ROOT / name).is_file()]
    return sorted(set(broken))


def test_the_check_catches_a_missing_script_option_and_result():
    text = ("`OMP_NUM_THREADS=2 python benchmarks/cpu_flops.py --repeats 5 --out x.json` "
            "`python benchmarks/cpu_flops.py --no-such-option 3` `python benchmarks/gone.py --x` "
            "`bash scripts/gone.sh` `ptmlab glue --model minilm --output OUT` "
            "(`benchmarks/results/nothing.cpu.json`)")
    assert [w[:2] for w in commands(text)] == [["python", "benchmarks/cpu_flops.py"],
                                               ["python", "benchmarks/cpu_flops.py"],
                                               ["python", "benchmarks/gone.py"], ["bash", "scripts/gone.sh"],
                                               ["ptmlab", "glue"]]
    assert problems(text) == ["benchmarks/cpu_flops.py --no-such-option: not an option of the script",
                              "benchmarks/gone.py: no such script",
                              "benchmarks/results/nothing.cpu.json: no such result file",
                              "scripts/gone.sh: no such script"]


def test_every_benchmark_command_and_result_file_exists():
    text = DOC.read_text(encoding="utf-8")
    assert len([w for w in commands(text) if w[0] == "python"]) >= 20  # the extractor still finds them
    broken = problems(text)
    assert not broken, "BENCHMARKS.md:\n" + "\n".join(broken)


@pytest.mark.parametrize("section", re.findall(r"^## (.+)$", DOC.read_text(encoding="utf-8"), flags=re.M)[1:])
def test_every_section_cites_a_result_file_and_its_command(section):
    """A benchmark section gives at least one command and the result file its numbers come from."""
    text = DOC.read_text(encoding="utf-8").split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    assert RESULT.search(text), f"{section}: no results file"
    assert any(w[0] in ("python", "ptmlab") for w in commands(text)), f"{section}: no command"
