"""Write the command reference of docs/cli.md from the real parsers: every command's ``--help``, below the marker line.

The text above the marker (the command grammar) is written by hand and kept as it is. The reference lists every
verb, every subcommand (``ptmlab models install``, ``ptmlab study all``) and every study (``ptmlab study NAME``),
each with the help its parser prints, formatted at a fixed width so that the page does not depend on the terminal.

    python scripts/gen_cli_docs.py           # rewrite docs/cli.md below the marker
    python scripts/gen_cli_docs.py --check   # exit 1 (and say so) when docs/cli.md is out of date
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CLI_MD = ROOT / "docs" / "cli.md"
MARKER = "<!-- Generated below by `python scripts/gen_cli_docs.py` from the parsers: edit above this line only. -->"
WIDTH = 100


def help_of(argv: list[str]) -> str:
    """What ``ptmlab ARGV --help`` prints, with a default that names this machine's shared data folder or checkout
    written the way the docs write it (``../shared/data``, ``.``), so that the page is the same on every machine."""
    from ptmlab.cli import main
    from ptmlab.tokenization.corpora import shared_data_dir

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        try:
            main([*argv, "--help"])
        except SystemExit:
            pass
    text = out.getvalue()
    data = shared_data_dir()
    for local, shown in ((data, "../shared/data"), (ROOT, ".")):
        if local is not None:
            text = text.replace(str(local), shown)
    return text.rstrip() + "\n"


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """A parser's subcommands by name, aliases left out."""
    found: dict[str, argparse.ArgumentParser] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                if all(sub is not seen for seen in found.values()):
                    found[name] = sub
    return found


def _walk(path: list[str], parser: argparse.ArgumentParser) -> list[list[str]]:
    paths = [path]
    for name, sub in _subcommands(parser).items():
        paths += _walk([*path, name], sub)
    return paths


def commands() -> list[list[str]]:
    """Every command line prefix that has a help of its own, in ``ptmlab --help``'s order."""
    from ptmlab.cli import build_parser
    from ptmlab.commands.study import SUITE_COMMANDS
    from ptmlab.studies import load_all

    found: list[list[str]] = []
    for verb in _subcommands(build_parser([])):  # every registered verb, listed in COMMAND_HELP or not
        found += _walk([verb], _subcommands(build_parser([verb]))[verb])
    found += [["study", name] for name in (*SUITE_COMMANDS, *load_all())]
    return found


def reference() -> str:
    """The generated part of docs/cli.md (the marker line included)."""
    os.environ["COLUMNS"] = str(WIDTH)  # argparse wraps help at the terminal's width: make it fixed
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from ptmlab.cli import COMMAND_HELP

    cmds = commands()
    parts = [MARKER, "", "## Command reference", "",
             "Every command with its arguments, as `ptmlab COMMAND --help` prints them. `ptmlab --help` lists the "
             "verbs:", "", "```text", help_of([]).rstrip(), "```", ""]
    titles = [" ".join(["ptmlab", *argv]) for argv in cmds]
    parts += ["Commands: " + " ·\n".join(f"[`{t}`](#{t.replace(' ', '-')})" for t in titles) + ".", ""]
    for argv in cmds:
        title = " ".join(["ptmlab", *argv])
        summary = COMMAND_HELP.get(argv[0], "") if len(argv) == 1 else ""  # the one-line help of ptmlab --help
        parts += [f"### `{title}`", ""]
        if summary:
            parts += [summary[0].upper() + summary[1:] + ".", ""]
        parts += ["```text", help_of(argv).rstrip(), "```", ""]
    return "\n".join(parts)


def render(current: str) -> str:
    """``current`` with everything from the marker on replaced by the generated reference (the marker is appended
    after the hand-written text when the page has none yet)."""
    head = current.split(MARKER, 1)[0] if MARKER in current else current.rstrip() + "\n\n"
    return head + reference()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", help="only compare; exit 1 when docs/cli.md is out of date")
    a = p.parse_args(argv)
    current = CLI_MD.read_text(encoding="utf-8") if CLI_MD.is_file() else "# Command line\n"
    new = render(current)
    if a.check:
        if new != current:
            print(f"{CLI_MD.relative_to(ROOT)} is out of date: run python scripts/gen_cli_docs.py", file=sys.stderr)
            return 1
        return 0
    if new != current:
        from ptmlab.core.io import atomic_write_text

        atomic_write_text(CLI_MD, new)
    print(f"{CLI_MD.relative_to(ROOT)}: {len(commands())} commands")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
