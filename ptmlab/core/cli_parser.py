"""The argument parser every ptmlab command and study uses: usage errors on one line with exit code 2, a
did-you-mean for a misspelled flag or verb, and options declared once as a config dataclass (``parse_config``).
The grammar every command follows is written down in docs/cli.md."""

from __future__ import annotations

import argparse
import difflib
import re
import sys

# where the parser that took the command's arguments is left on the namespace (the deepest subcommand's parser)
_PARSER_ATTR = "_ptmlab_parser"


class ArgParser(argparse.ArgumentParser):
    """argparse that reports a usage error on one line with exit code 2, and suggests the closest flag or verb.
    A flag is taken only as spelt in full: ``--max-step`` is not read as ``--max-steps`` (``allow_abbrev`` off), so
    a prefix never changes meaning when an option is added."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str):  # noqa: D401
        choice = re.match(r"argument (\S+): invalid choice: '([^']*)' \(choose from (.*)\)$", message)
        if choice:
            options = [c.strip().strip("'") for c in choice.group(3).split(",")]
            close = difflib.get_close_matches(choice.group(2), options, n=1)
            if close:  # the suggestion instead of the whole list
                message = f"argument {choice.group(1)}: invalid choice: '{choice.group(2)}': did you mean '{close[0]}'?"
        self.exit(2, f"error: {message} (see '{self.prog} --help')\n")

    def parse_known_args(self, args=None, namespace=None):
        ns, extras = super().parse_known_args(args, namespace)
        self._note_deprecated(sys.argv[1:] if args is None else list(args))
        if not hasattr(ns, _PARSER_ATTR):  # a subcommand's parser ran first and set itself
            setattr(ns, _PARSER_ATTR, self)
        return ns, extras

    def parse_args(self, args=None, namespace=None):
        ns, extras = self.parse_known_args(args, namespace)
        parser = getattr(ns, _PARSER_ATTR, self)
        delattr(ns, _PARSER_ATTR)
        if extras:
            parser.unrecognized(extras)
        return ns

    def _note_deprecated(self, argv: list[str]) -> None:
        """A flag kept under an old spelling still works, with a one-line note naming the new one."""
        for a in self._actions:
            new = getattr(a, "deprecated_for", None)
            if new and any(x == s or x.startswith(s + "=") for s in a.option_strings for x in argv):
                print(f"note: {a.option_strings[0]} is deprecated: use {new}", file=sys.stderr)

    def unrecognized(self, extras: list[str]):
        """One line naming the unknown arguments, with the closest flag this (sub)command offers."""
        flags = [s for a in self._actions for s in a.option_strings if a.help is not argparse.SUPPRESS]
        hints = []
        for extra in extras:
            if extra.startswith("--"):
                close = difflib.get_close_matches(extra.split("=", 1)[0], flags, n=1, cutoff=0.75)
                if close:
                    hints.append(f"did you mean {close[0]}?")
        hint = f": {' '.join(hints)}" if hints else ""
        self.error(f"unrecognized arguments: {' '.join(extras)}{hint}")


class ListAction(argparse.Action):
    """A list option that takes the one list syntax, comma-separated (``--files A,B``), and also space-separated
    values (``--files A B``) where a command took them so before."""

    def __init__(self, option_strings, dest, nargs="+", **kwargs):
        super().__init__(option_strings, dest, nargs=nargs, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        items = [p.strip() for v in values for p in v.split(",") if p.strip()]
        setattr(namespace, self.dest, [*(getattr(namespace, self.dest, None) or []), *items])


def option_group(parser: argparse.ArgumentParser, title: str) -> argparse._ArgumentGroup:
    """The parser's argument group ``title`` (created on first use), so that --help lists options by topic."""
    for group in parser._action_groups:
        if group.title == title:
            return group
    return parser.add_argument_group(title)


def refuse_with_resume(args: argparse.Namespace, cls, allowed: tuple[str, ...] = ()) -> None:
    """``--resume RUN`` continues a run with the options it recorded: any option flag given beside it (they are
    parsed with ``default=SUPPRESS``, so only given ones are on ``args``) is an error, not silently dropped."""
    import dataclasses

    from ptmlab.core.errors import PtmlabError

    names = {f.name for f in dataclasses.fields(cls)} | {"config"}
    given = [n for n in names - set(allowed) if n in vars(args) and (n != "config" or args.config)]
    if given:
        flags = ", ".join(sorted("--" + n.replace("_", "-") for n in given))
        raise PtmlabError(f"--resume continues a run with the options it recorded; drop {flags} (or start a new run "
                          f"with --output)")


def output_file(output: str, name: str):
    """The file a command writes into its ``--output`` directory. ``--output`` is always a directory; an older
    spelling that named a .json file still writes that file, with a note."""
    from pathlib import Path

    if output.endswith(".json"):
        print(f"note: --output is a directory now (the file would be OUT/{name}); writing {output} as asked",
              file=sys.stderr)
        return Path(output)
    return Path(output) / name


CONFIG_HELP = "YAML file with options (flags override it)"


def config_command(sub, verb: str, cls, func, *, help: str, description: str | None = None,  # noqa: A002
                   thing: tuple[str, str, str] | None = None, exclude: tuple[str, ...] = ()):
    """The parser of a verb whose options are the fields of config ``cls``: the thing it acts on (``thing``: dest,
    metavar and help of its positional argument), ``--config FILE``, one flag per field (``exclude``: fields the
    positional stands for) and ``func`` to run. Returns the parser for any argument of the verb's own."""
    from ptmlab.core.config import add_config_args

    p = sub.add_parser(verb, help=help, description=description or help)
    if thing is not None:
        dest, metavar, what = thing
        p.add_argument(dest, metavar=metavar, help=what)
    p.add_argument("--config", help=CONFIG_HELP)
    add_config_args(p, cls, exclude=exclude)
    p.set_defaults(func=func)
    return p


def parse_config(prog: str, cls, argv: list[str], description: str = ""):
    """``--config FILE`` plus one flag per field of ``cls``, resolved and validated by the one builder."""
    from ptmlab.core.config import add_config_args, resolve_config

    p = ArgParser(prog=prog, description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", help=CONFIG_HELP)
    add_config_args(p, cls)
    args = p.parse_args(argv)
    return resolve_config(cls, args, args.config)
