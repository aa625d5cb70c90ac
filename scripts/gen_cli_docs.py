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
import re
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


GROUP = re.compile(r"\n\n(?=[a-z][a-z0-9 ,&()/'-]*:\n)")  # an option group's title line after a blank line
SHARED_MIN_USES, SHARED_MIN_LINES = 3, 6  # a group printed once when this many commands print it word for word


def split_help(text: str) -> tuple[str, list[str]]:
    """A ``--help`` page as (usage and description, [each option group, its title line first])."""
    head, *groups = GROUP.split(text.rstrip())
    return head, groups


def study_head(head: str) -> str:
    """A study page's usage, its one-line summary and its claim: the rule, validity conditions, budgets and the
    study's notes are in docs/studies.md and in ``ptmlab study NAME --help``."""
    usage, *paras = head.split("\n\n")
    keep = paras[:1] + [p for p in paras[1:] if p.startswith("Claim")][:1]
    return "\n\n".join([usage, *keep])


OWN_GROUPS = ("options", "positional arguments")


def _title(group: str) -> str:
    return group.split("\n", 1)[0].rstrip(":")


def _slug(title: str) -> str:
    return re.sub(r"[^a-z0-9 -]", "", title.lower()).strip().replace(" ", "-")


def shared_groups(pages: dict[tuple[str, ...], str]) -> dict[str, str]:
    """The option groups that at least ``SHARED_MIN_USES`` commands print identically, each with its anchor
    (``shared-TITLE``, ``shared-TITLE-2`` for a second variant of the same title), in order of first use."""
    uses: dict[str, int] = {}
    for text in pages.values():
        for group in split_help(text)[1]:
            uses[group] = uses.get(group, 0) + 1
    shared: dict[str, str] = {}
    titles: dict[str, int] = {}
    for group, n in uses.items():
        if n >= SHARED_MIN_USES and group.count("\n") + 1 >= SHARED_MIN_LINES:
            title = _title(group)
            titles[title] = titles.get(title, 0) + 1
            shared[group] = f"shared-{_slug(title)}" + (f"-{titles[title]}" if titles[title] > 1 else "")
    return shared


def _short_usage(usage: str, options: set[str]) -> str:
    """The usage with the bracketed options of the shared groups left out (``[options below]`` in their place)."""
    first, _, rest = usage.partition("\n")
    text = " ".join(usage.split())
    kept = re.sub(r" \[(--[a-z0-9-]+)[^\[\]]*\]", lambda m: "" if m.group(1) in options else m.group(0), text)
    if kept == text:
        return usage
    kept += " [shared options]"
    prefix = re.match(r"usage: \S+(?: [a-z][a-z0-9-]*)*", kept)
    indent = " " * (len(prefix.group(0)) + 1 if prefix else 7)
    words, lines, line = kept.split(" "), [], ""
    for word in words:  # the brackets are kept whole: split only between bracketed items
        if line and len(line) + 1 + len(word) > WIDTH and not _open(line):
            lines.append(line)
            line = indent + word
        else:
            line = f"{line} {word}" if line else word
    return "\n".join([*lines, line])


def _open(text: str) -> bool:
    return text.count("[") > text.count("]")


def reference() -> str:
    """The generated part of docs/cli.md (the marker line included)."""
    os.environ["COLUMNS"] = str(WIDTH)  # argparse wraps help at the terminal's width: make it fixed
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from ptmlab.cli import COMMAND_HELP
    from ptmlab.commands.study import SUITE_COMMANDS

    cmds = commands()
    pages = {tuple(argv): help_of(argv) for argv in cmds}
    shared = shared_groups(pages)
    parts = [MARKER, "", "## Command reference", "",
             "Every command with its arguments, as `ptmlab COMMAND --help` prints them; option groups that many "
             "commands share are printed once, under [Shared options](#shared-options), and linked from each "
             "command. A study's page shows its own options and its claim; its rule, validity conditions and "
             "budgets are in [studies.md](studies.md). `ptmlab --help` lists the verbs:", "", "```text",
             help_of([]).rstrip(), "```", ""]
    titles = [" ".join(["ptmlab", *argv]) for argv in cmds]
    parts += ["Commands: " + " ·\n".join(f"[`{t}`](#{t.replace(' ', '-')})" for t in titles) + ".", ""]
    for argv in cmds:
        title = " ".join(["ptmlab", *argv])
        summary = COMMAND_HELP.get(argv[0], "") if len(argv) == 1 else ""  # the one-line help of ptmlab --help
        parts += [f"### `{title}`", ""]
        if summary:
            parts += [summary[0].upper() + summary[1:] + ".", ""]
        head, groups = split_help(pages[tuple(argv)])
        study = argv[0] == "study" and len(argv) == 2 and argv[1] not in SUITE_COMMANDS
        if study:
            head = study_head(head)
        linked = [g for g in groups if g in shared]
        # a study page keeps its own options; the fine-tuning groups it also takes are named, with a link
        others = [g for g in groups if g not in shared and study and _title(g) not in OWN_GROUPS]
        options = {o for g in linked + others for o in re.findall(r"^  (--[a-z0-9-]+)", g, flags=re.M)}
        usage, sep, rest = head.partition("\n\n")
        own = [_short_usage(usage, options) + sep + rest, *(g for g in groups if g not in shared and g not in others)]
        parts += ["```text", "\n\n".join(own), "```", ""]
        if linked:
            parts += ["Shared options: " + ", ".join(f"[{_title(g)}](#{shared[g]})" for g in linked) + ".", ""]
        if others:
            parts += ["Also the " + ", ".join(_title(g) for g in others) + " options of "
                      "[`ptmlab finetune`](#ptmlab-finetune), with this study's defaults "
                      f"(`ptmlab study {argv[1]} --help` prints them).", ""]
    parts += ["## Shared options", "",
              "Option groups that several commands print word for word; each command's page links to the ones it "
              "takes.", ""]
    for group, anchor in shared.items():
        users = sum(group in split_help(text)[1] for text in pages.values())
        heading = anchor.removeprefix("shared-").replace("-", " ")
        parts += [f"### shared {heading}", "", f"Taken by {users} commands.", "", "```text", group, "```", ""]
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
