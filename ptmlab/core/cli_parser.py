"""The argument parser every ptmlab command and study uses: usage errors on one line with exit code 2, and
options declared once as a config dataclass (``parse_config``)."""

from __future__ import annotations

import argparse


class ArgParser(argparse.ArgumentParser):
    """argparse that reports a usage error on one line with exit code 2."""

    def error(self, message: str):  # noqa: D401
        self.exit(2, f"error: {message} (see '{self.prog} --help')\n")


def parse_config(prog: str, cls, argv: list[str], description: str = ""):
    """``--config FILE`` plus one flag per field of ``cls``, resolved and validated by the one builder."""
    from ptmlab.core.config import add_config_args, resolve_config

    p = ArgParser(prog=prog, description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", help="YAML file with options (flags override it)")
    add_config_args(p, cls)
    args = p.parse_args(argv)
    return resolve_config(cls, args, args.config)
