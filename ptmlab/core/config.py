"""Typed configs: dataclasses filled from defaults, then a YAML file (``--config``), then CLI flags (flags win).

Every field becomes a flag automatically (``max_train`` -> ``--max-train``), so a command declares its options
once, as a dataclass, and the resolved config is saved into the run directory.
"""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

import yaml

from ptmlab.core.errors import PtmlabError, did_you_mean

C = TypeVar("C")


class Validated:
    """Base of the option groups: a config's ``validate()`` runs whenever it is made, by ``build_config`` (flags,
    YAML), a direct ``FinetuneConfig(...)`` in Python or ``dataclasses.replace``, so no path skips the checks."""

    def __post_init__(self) -> None:
        validate = getattr(self, "validate", None)
        if validate:
            validate()


def at_least(cfg: Any, minimum: float, *names: str) -> None:
    """Raise a one-line error naming the flag when any of the options ``names`` of ``cfg`` is below ``minimum``
    (a count that must be positive, a size that may be 0 for "off" or "all")."""
    for name in names:
        value = getattr(cfg, name)
        if value is not None and not value >= minimum:  # NaN fails too
            raise PtmlabError(f"--{name.replace('_', '-')} must be >= {minimum}, got {value}")


def positive(cfg: Any, *names: str) -> None:
    """Raise a one-line error naming the flag when any of the options ``names`` of ``cfg`` (a learning rate, a number
    of epochs) is not above 0."""
    for name in names:
        value = getattr(cfg, name)
        if value is not None and not value > 0:
            raise PtmlabError(f"--{name.replace('_', '-')} must be positive, got {value}")


def _base_type(tp: Any) -> Any:
    """Strip Optional[...] / X | None to X."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return args[0] if len(args) == 1 else str
    return tp


def _nullable(cls) -> set[str]:
    """Fields whose type admits None (``X | None``)."""
    hints = typing.get_type_hints(cls)
    return {name for name, tp in hints.items()
            if typing.get_origin(tp) in (typing.Union, types.UnionType) and type(None) in typing.get_args(tp)}


def _field_types(cls) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    return {f.name: _base_type(hints[f.name]) for f in dataclasses.fields(cls)}


def add_config_args(parser: argparse.ArgumentParser, cls, exclude: tuple[str, ...] = ()) -> None:
    """Add one flag per dataclass field; defaults stay in the dataclass (flags given are the only ones seen).

    Flags are listed in --help by topic: the ``OPTION_GROUP`` of the class that first declares the field (or the
    field's ``group`` metadata); fields a class names in ``CLI_EXCLUDE`` (inherited options its command does not
    use) are not offered. A field's ``deprecated`` metadata names old flag spellings that still work, with a note;
    its ``aliases`` are other names that work as well (transformers' ``--learning-rate`` for ``--lr``)."""
    from ptmlab.core.cli_parser import option_group

    types_ = _field_types(cls)
    exclude = (*exclude, *getattr(cls, "CLI_EXCLUDE", ()))
    for f in dataclasses.fields(cls):
        if f.name in exclude or f.metadata.get("cli") is False:
            continue
        flag = "--" + f.name.replace("_", "-")
        tp = types_[f.name]
        help_ = f.metadata.get("help", "")
        default = f.default if f.default is not dataclasses.MISSING else None
        if default is not None and default != "":
            help_ = f"{help_} (default: {default})" if help_ else f"default: {default}"
        kw: dict[str, Any] = {"dest": f.name, "default": argparse.SUPPRESS, "help": help_.replace("%", "%%")}
        if tp is bool:
            kw["action"] = argparse.BooleanOptionalAction
        elif typing.get_origin(tp) is list:
            kw.update(type=_csv_list, metavar="A,B,...")
        else:
            kw.update(type=_cli_type(tp, flag), choices=f.metadata.get("choices"))
        group = option_group(parser, f.metadata.get("group") or _group_of(cls, f.name))
        action = group.add_argument(flag, *f.metadata.get("aliases", ()), **kw)
        action.field_name = f.name
        action.field_default = default  # read by the grammar test (one default seed and max length)
        for old in f.metadata.get("deprecated", ()):
            group.add_argument(old, **{**kw, "help": argparse.SUPPRESS}).deprecated_for = flag


def _group_of(cls, name: str) -> str:
    """The --help topic of field ``name``: ``OPTION_GROUP`` of the most basic class declaring it."""
    for klass in reversed(cls.__mro__):
        if name in vars(klass).get("__annotations__", {}):
            return vars(klass).get("FIELD_GROUPS", {}).get(name) or vars(klass).get("OPTION_GROUP") or "options"
    return "options"


def _csv_list(s: str) -> list[str]:
    return [p.strip() for p in s.split(",") if p.strip()]


def _cli_type(tp, flag):
    def conv(s: str):
        try:
            return tp(s)
        except (TypeError, ValueError):
            raise argparse.ArgumentTypeError(f"{flag} expects {tp.__name__}, got '{s}'") from None

    return conv


def _flatten(d: dict) -> dict:
    """Accept YAML written flat or in sections (``train: {lr: ...}``); sections are flattened."""
    out: dict = {}
    for k, v in d.items():
        key = str(k).replace("-", "_")
        if isinstance(v, dict) and key in ("model_args", "data", "train", "training", "model", "eval") and not (
            key == "model" and isinstance(v, str)
        ):
            out.update(_flatten(v))
        else:
            out[key] = v
    return out


def load_yaml(path: str | Path) -> dict:
    p = Path(path)
    if not p.is_file():
        raise PtmlabError(f"config file '{p}' does not exist: pass an existing YAML file to --config")
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as e:
        line = getattr(getattr(e, "problem_mark", None), "line", None)
        where = f" at line {line + 1}" if line is not None else ""
        raise PtmlabError(f"config file '{p}' is not valid YAML{where}: fix its syntax") from None
    if not isinstance(data, dict):
        raise PtmlabError(f"config file '{p}' must hold a mapping of option: value")
    data.pop("command", None)  # a run directory's config.yaml records the command that wrote it: not an option
    return _flatten(data)


def build_config(cls: type[C], values: dict[str, Any], source: str = "options") -> C:
    """Make a config from a dict, coercing types and naming unknown keys. A key spelt as a field's deprecated flag
    (``text_field`` for ``--text-field``) or one of its aliases (``learning_rate`` for ``lr``) is read as that field,
    so older YAML files, run records and transformers' ``TrainingArguments`` names load."""
    types_ = _field_types(cls)
    known = {f.name for f in dataclasses.fields(cls)}
    nullable = _nullable(cls)
    renamed = {old.lstrip("-").replace("-", "_"): f.name for f in dataclasses.fields(cls)
               for old in (*f.metadata.get("deprecated", ()), *f.metadata.get("aliases", ()))}
    kwargs = {}
    for k, v in values.items():
        if k not in known and renamed.get(k) in known:
            if renamed[k] in values:
                raise PtmlabError(f"options '{k}' and '{renamed[k]}' in {source} name the same setting: pass one")
            k = renamed[k]
        if k not in known:
            raise PtmlabError(f"unknown option '{k}' in {source}: {did_you_mean(k, known | set(renamed))}")
        if v is None and k not in nullable:
            default = next(f.default for f in dataclasses.fields(cls) if f.name == k)
            shown = "" if default is dataclasses.MISSING else f" (default: {default})"
            raise PtmlabError(f"option '{k}' in {source} is empty (null): give it a value{shown} or leave it out")
        kwargs[k] = _coerce(v, types_[k], k)
    cfg = cls(**kwargs)
    validate = getattr(cfg, "validate", None)
    if validate and not isinstance(cfg, Validated):  # a Validated config checked itself when it was made
        validate()
    return cfg


def _coerce(v: Any, tp: Any, name: str) -> Any:
    if v is None:
        return None
    try:
        if tp is bool:
            if isinstance(v, str):
                if v.lower() in ("true", "yes", "1", "on"):
                    return True
                if v.lower() in ("false", "no", "0", "off"):
                    return False
                raise ValueError
            return bool(v)
        if typing.get_origin(tp) is list:
            return _csv_list(v) if isinstance(v, str) else [str(x) for x in v]
        if tp in (int, float, str):
            if tp is int and isinstance(v, float) and not v.is_integer():
                raise ValueError
            return tp(v)
        return v
    except (TypeError, ValueError):
        tname = getattr(tp, "__name__", str(tp))
        raise PtmlabError(f"option '{name}' expects {tname}, got {v!r}") from None


def resolve_config(cls: type[C], args: argparse.Namespace, config_file: str | None = None) -> C:
    """defaults < YAML file < CLI flags."""
    values: dict[str, Any] = {}
    if config_file:
        values.update(load_yaml(config_file))
    known = {f.name for f in dataclasses.fields(cls)}
    values.update({k: v for k, v in vars(args).items() if k in known})
    return build_config(cls, values, source=f"config '{config_file}'" if config_file else "options")


def config_to_dict(cfg) -> dict:
    return dataclasses.asdict(cfg)


def opt(default: Any = None, help: str = "", **meta) -> Any:
    """A dataclass field with help text for its CLI flag."""
    meta["help"] = help
    if isinstance(default, list | dict):
        return dataclasses.field(default_factory=lambda d=default: type(d)(d), metadata=meta)
    return dataclasses.field(default=default, metadata=meta)
