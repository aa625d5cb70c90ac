"""The product's pages and code speak of the product, not of how it was built.

README.md, BENCHMARKS.md, docs/, the investigations' README, and the comments and docstrings of ptmlab/,
benchmarks/, scripts/ and tests/ state facts; they do not narrate the work that produced them (work sessions and
periods, issue numbers, "the issue's target"), which lives in git history. Result file names say which benchmark
and machine made them, not which work period (``cpu_flops_avx2_s20.json`` was such a name), and what the results
record (benchmarks/results, benchmarks/investigations/results, studies/results) states facts as well.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", ROOT / "BENCHMARKS.md", *sorted((ROOT / "docs").glob("*.md")),
         ROOT / "benchmarks" / "investigations" / "README.md"]
CODE_DIRS = ("ptmlab", "benchmarks", "scripts", "tests")
RESULT_DIRS = ("benchmarks/results", "benchmarks/investigations/results", "studies/results")

# what narration looks like in text
NARRATION = re.compile(
    r"\bsessions?[\s-]+\d+"                       # "session 12", "sessions 8-14", "session-17"
    r"|\b(?:this|that|first|previous|next|earlier|later)\s+session\b"  # "the first session", "this session"
    r"|\bissues?\s+#?\d+"                         # "issue 18", "issues 2, 18", "issue #4"
    r"|\bissue's\b"                               # "the issue's target"
    r"|\bwork\s+periods?\b",
    re.IGNORECASE)
# what it looks like in a file name: a work-period tag such as _s19 or -s20-
NARRATED_NAME = re.compile(r"(?:^|[_.-])s\d{1,2}(?:[_.-]|$)|session|issue\d", re.IGNORECASE)


def narration(text: str) -> list[str]:
    """Each narrating phrase in ``text`` with its line number."""
    return [f"line {text.count(chr(10), 0, m.start()) + 1}: {m.group(0)!r}" for m in NARRATION.finditer(text)]


def code_files() -> list[Path]:
    me = Path(__file__).resolve()
    return sorted(p for d in CODE_DIRS for p in (ROOT / d).rglob("*")
                  if p.suffix in (".py", ".sh") and p.resolve() != me and "__pycache__" not in p.parts)


def test_the_check_finds_narration_and_leaves_facts_alone():
    session, issue = "sess" + "ion", "iss" + "ue"  # spelt apart so that this file does not match itself
    assert narration(f"Measured in {session} 12 (load 2).\nSee {issue} 18 and {issue} #4.") == [
        f"line 1: '{session} 12'", f"line 2: '{issue} 18'", f"line 2: '{issue} #4'"]
    assert narration(f"the {issue}'s target; {session}s 8-14; the first {session}; a work period") != []
    assert narration("an onnxruntime InferenceSession; `--seed 1 --output runs/sst2-s1`; 12 sessions of tests") == []
    assert NARRATED_NAME.search("cpu_flops_avx2_host_memory_s20_run3.json")
    assert not NARRATED_NAME.search("finetune_throughput.cpu-avx512-bf16.json")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_pages_do_not_narrate_the_work(page):
    found = narration(page.read_text(encoding="utf-8"))
    assert not found, f"{page.relative_to(ROOT)}: say what is, not how it was done:\n" + "\n".join(found)


def test_code_comments_and_docstrings_do_not_narrate_the_work():
    found = [f"{p.relative_to(ROOT)} {hit}" for p in code_files() for hit in narration(p.read_text(encoding="utf-8"))]
    assert not found, "narration in code:\n" + "\n".join(found)


def test_result_and_page_file_names_do_not_narrate_the_work():
    names = [p for d in RESULT_DIRS if (ROOT / d).is_dir() for p in (ROOT / d).rglob("*")]
    names += [*(ROOT / "docs").iterdir(), *(ROOT / "benchmarks").rglob("*.py")]
    assert names
    bad = [str(p.relative_to(ROOT)) for p in names if NARRATED_NAME.search(p.name)]
    assert not bad, f"file names that narrate the work: {bad}"


def test_committed_results_do_not_narrate_the_work():
    """The notes and commands recorded inside committed result files state facts too."""
    files = sorted(p for d in RESULT_DIRS if (ROOT / d).is_dir() for p in (ROOT / d).rglob("*.json"))
    assert files
    found = [f"{p.relative_to(ROOT)} {hit}" for p in files for hit in narration(p.read_text(encoding="utf-8"))]
    assert not found, "narration in results:\n" + "\n".join(found)
