"""Every command written in README.md, BENCHMARKS.md, docs/ and the investigations' README still parses, and
docs/cli.md's command reference is what the parsers print.

A renamed or removed option leaves the docs telling users to type a command that fails; this test parses each
documented command with the real parsers (the top-level one, and a study's own for ``ptmlab study NAME ...``)
without running anything. Prose fragments that name a verb and an option without the positional arguments
(``ptmlab prune --params``) and upper-case placeholders (``--format F``) are not failures; unknown options, unknown
studies and invalid choices are. Every ``python benchmarks/X.py --option ...`` written there must name a script
that exists and options that the script (or its shared helpers) declares. ``text`` code blocks hold what a command
prints (docs/cli.md's ``--help`` pages), not commands to type, and are not parsed.
"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
from pathlib import Path

import pytest

from ptmlab.cli import build_parser
from ptmlab.core.cli_parser import ArgParser

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", ROOT / "BENCHMARKS.md", *sorted((ROOT / "docs").glob("*.md")),
        ROOT / "benchmarks" / "investigations" / "README.md"]
COMMAND = re.compile(r"(?:^|\s|/)(ptmlab\s+[a-z].*)$")
PLACEHOLDER_MARKS = ("...", "[", "|", "<")


def documented_commands(path: Path) -> list[str]:
    """``ptmlab`` command lines in a markdown file: code blocks line by line (with ``\\`` continuations joined) and
    inline code spans (which may wrap across lines)."""
    text = path.read_text(encoding="utf-8")
    found = []
    for lang, block in re.findall(r"```([a-z]*)\n(.*?)```", text, flags=re.S):
        if lang == "text":  # a command's output (a --help page), not a command
            continue
        for line in re.sub(r"\s*\\\n\s*", " ", block).splitlines():
            for part in re.split(r"&&|;|\|\|", line):
                m = COMMAND.search(part.strip())
                if m:
                    found.append(m.group(1))
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    for span in re.findall(r"`([^`]+)`", prose):
        for part in re.split(r"&&|;", " ".join(span.split())):
            m = re.match(r"(?:\S*/)?(ptmlab\s+[a-z].*)$", part.strip())
            if m:
                found.append(m.group(1))
    return found


def argv_of(command: str) -> list[str] | None:
    """The arguments after ``ptmlab``; None for a synopsis (``[--x]``, ``a|b``, ``...``) or a bare verb."""
    if any(mark in command for mark in PLACEHOLDER_MARKS):
        return None
    argv = [t for t in shlex.split(command, comments=True)[1:] if t != "&"]
    return argv if len(argv) >= 2 else None


class _Parsed(Exception):
    """Raised by a command's own parser once it accepted its arguments, so that nothing runs."""


def parse_error(argv: list[str], monkeypatch) -> str | None:
    """None when ``ptmlab *argv`` parses; otherwise the parser's message."""
    original = ArgParser.parse_args

    def parse_then_stop(self, args=None, namespace=None):
        result = original(self, args, namespace)
        if self.prog != "ptmlab":  # a study's (or suite command's) own parser: parsed, stop before running
            raise _Parsed
        return result

    monkeypatch.setattr(ArgParser, "parse_args", parse_then_stop)
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            args = build_parser(argv).parse_args(argv)
            if args.command == "study" and args.name not in (None, "-h", "--help"):
                args.func(args)
    except _Parsed:
        return None
    except SystemExit as e:
        return err.getvalue().strip() or f"exit {e.code}" if e.code else None
    except Exception as e:  # an unknown study name and the like
        return f"{type(e).__name__}: {e}"
    finally:
        monkeypatch.setattr(ArgParser, "parse_args", original)
    return None


def is_fragment(message: str) -> bool:
    """A prose mention rather than a command: only positional arguments or an option's value are missing, or a
    choice is an upper-case placeholder."""
    if "the following arguments are required" in message or "expected one argument" in message:
        return True
    choice = re.search(r"invalid choice: '([^']*)'|unknown study '([^']*)'", message)
    return bool(choice and (choice.group(1) or choice.group(2)).isupper())


def test_the_extractor_finds_commands_in_code_blocks_and_spans(tmp_path):
    doc = tmp_path / "x.md"
    doc.write_text("Run `ptmlab finetune --task sst2\n--output r` then\n\n```bash\n"
                   "bash scripts/setup.sh && .venv/bin/ptmlab demo --quick   # comment\n"
                   "ptmlab study objectives \\\n  --seeds 0,1\n```\n", encoding="utf-8")
    commands = documented_commands(doc)
    assert commands == ["ptmlab demo --quick   # comment", "ptmlab study objectives --seeds 0,1",
                        "ptmlab finetune --task sst2 --output r"]
    assert [argv_of(c) for c in commands] == [["demo", "--quick"], ["study", "objectives", "--seeds", "0,1"],
                                              ["finetune", "--task", "sst2", "--output", "r"]]


def test_the_check_catches_a_renamed_option_and_an_unknown_study(monkeypatch):
    assert parse_error(["finetune", "--task", "sst2", "--output", "r"], monkeypatch) is None
    assert "unrecognized arguments: --learn-rate" in parse_error(
        ["finetune", "--task", "sst2", "--learn-rate", "1e-4"], monkeypatch)
    assert parse_error(["study", "objectives", "--seeds", "0,1", "--budget", "small"], monkeypatch) is None
    assert "--no-such-flag" in parse_error(["study", "objectives", "--no-such-flag"], monkeypatch)
    assert "no-such-study" in parse_error(["study", "no-such-study", "--seeds", "0"], monkeypatch)
    assert is_fragment("error: the following arguments are required: RUN_DIR (see 'ptmlab serve --help')")
    assert not is_fragment("error: unrecognized arguments: --x (see 'ptmlab --help')")
    assert is_fragment("PtmlabError: unknown study 'NAME': choose from: anomaly, ghost")  # a placeholder
    assert not is_fragment("PtmlabError: unknown study 'gohst': choose from: anomaly, ghost")


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_documented_command_parses(doc, monkeypatch):
    commands = [(c, argv) for c in documented_commands(doc) if (argv := argv_of(c))]
    broken = [f"{c}\n    {msg}" for c, argv in commands
              if (msg := parse_error(argv, monkeypatch)) and not is_fragment(msg)]
    assert not broken, f"{doc.name}: commands that no longer parse:\n" + "\n".join(broken)


# the options run on until a code span ends, a table cell ends or a blank line
BENCHMARK = re.compile(r"python (benchmarks/(?:investigations/)?[a-z_0-9]+\.py)"
                       r"((?:(?:[ \t]*\n[ \t]*|[ \t]+)[^\s`|;&]+)*)")


def benchmark_commands(path: Path) -> list[tuple[str, list[str]]]:
    """``python benchmarks/X.py --flag ...`` in a markdown file: the script and the long options it is given."""
    text = re.sub(r"\\\n\s*", " ", path.read_text(encoding="utf-8"))
    return [(script, re.findall(r"(?<!\S)(--[a-z][a-z0-9-]*)", rest)) for script, rest in BENCHMARK.findall(text)]


def benchmark_problems(doc: Path) -> list[str]:
    """Documented benchmark scripts that do not exist, and options their scripts do not declare."""
    helpers = "".join(p.read_text(encoding="utf-8") for p in (ROOT / "benchmarks").glob("**/_*.py"))
    broken = []
    for script, flags in benchmark_commands(doc):
        path = ROOT / script
        if not path.is_file():
            broken.append(f"{script}: no such script")
            continue
        options = set(re.findall(r"[\"'](--[a-z][a-z0-9-]*)[\"']", path.read_text(encoding="utf-8") + helpers))
        # argparse accepts a unique prefix (--out for --output)
        broken += [f"{script} {flag}: not an option of the script" for flag in flags
                   if not any(option.startswith(flag) for option in options)]
    return sorted(set(broken))


def test_the_benchmark_check_catches_a_missing_script_and_a_wrong_option(tmp_path):
    doc = tmp_path / "b.md"
    doc.write_text("`python benchmarks/cpu_flops.py --repeats 5 --out x.json` and\n"
                   "    python benchmarks/cpu_flops.py --repeats 5 \\\n        --no-such-option 3\n"
                   "and `python benchmarks/gone.py --x`\n", encoding="utf-8")
    assert benchmark_commands(doc) == [("benchmarks/cpu_flops.py", ["--repeats", "--out"]),
                                       ("benchmarks/cpu_flops.py", ["--repeats", "--no-such-option"]),
                                       ("benchmarks/gone.py", ["--x"])]
    assert benchmark_problems(doc) == ["benchmarks/cpu_flops.py --no-such-option: not an option of the script",
                                       "benchmarks/gone.py: no such script"]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_documented_benchmark_exists_and_takes_its_options(doc):
    broken = benchmark_problems(doc)
    assert not broken, f"{doc.name}:\n" + "\n".join(broken)


def _cli_docs_generator():
    import importlib.util

    spec = importlib.util.spec_from_file_location("gen_cli_docs", ROOT / "scripts" / "gen_cli_docs.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    return gen


def test_the_cli_reference_is_what_the_parsers_print(monkeypatch):
    """docs/cli.md below its marker is regenerated in memory from the real parsers (every verb, subcommand and
    study, as ``--help`` prints it) and must equal the committed page: a renamed or added flag fails here until
    ``python scripts/gen_cli_docs.py`` is rerun."""
    monkeypatch.setenv("COLUMNS", "100")  # the generator fixes the width; undo it for the tests that follow
    gen = _cli_docs_generator()
    current = gen.CLI_MD.read_text(encoding="utf-8")
    assert gen.MARKER in current
    expected = gen.render(current)
    assert expected.split(gen.MARKER)[0] == current.split(gen.MARKER)[0]  # the hand-written part is kept
    for argv in (["finetune"], ["tokenizer", "train"], ["keys", "create"], ["study", "all"], ["study", "objectives"]):
        assert f"### `ptmlab {' '.join(argv)}`" in expected, argv
    assert "--max-train" in expected and "/work/" not in expected
    assert expected == current, "docs/cli.md is out of date: run python scripts/gen_cli_docs.py"


RESULT_FILE = re.compile(r"benchmarks/(?:investigations/)?results/[A-Za-z0-9_.-]+\.(?:json|png)")


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_result_file_a_page_names_is_committed(doc):
    """A number quoted from a result file can be checked: the file named beside it exists (``MACHINE`` and
    ``BENCHMARK`` are placeholders for a file a run writes)."""
    named = set(RESULT_FILE.findall(doc.read_text(encoding="utf-8")))
    missing = sorted(n for n in named if "MACHINE" not in n and "BENCHMARK" not in n and not (ROOT / n).is_file())
    assert not missing, f"{doc.name} names result files that do not exist: {missing}"
