"""The command-line flags of the settings, generated from their one declaration
(:data:`suite.settings.OPTIONS`): ``dlsuite run`` takes them all, other subcommands the ones
they share (``dlsuite envs --envs-dir``, ``dlsuite data make --data-dir``, ...)."""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from typing import Any

from suite.cli.common import csv, int_csv
from suite.settings import Option

#: the flag's value type of each kind of setting (bounds and choices are checked with the
#: other layers' values, by suite.config.check)
FLAG_TYPES: dict[str, Any] = {"str": None, "int": int, "float": float, "list[str]": csv,
                              "list[int]": int_csv}  # fmt: skip


def flag_help(o: Option) -> str:
    """``o``'s help, a plug-in's with its registry's names (no plug-in module is imported),
    and the variable that sets it too."""
    text = o.help
    if o.plugin:
        from suite.config import plugin_choices

        names = ", ".join(c for c in plugin_choices(o.name) if c != "auto")
        text = text.replace("{choices}", names)
    return f"{text} [{o.env}]" if o.env else text


def add_flag(
    parser: argparse.ArgumentParser,
    o: Option,
    *,
    given_only: bool = True,
    **overrides: Any,
) -> None:
    """Add ``o``'s flag to ``parser`` (its value lands in ``args.<o.name>``). ``given_only``:
    the default is None, so the settings' layers see only what the user typed; ``overrides``
    are argparse's keywords (a subcommand's own ``help``, ``required``)."""
    assert o.flag is not None, o.name
    spec: dict[str, Any] = {"dest": o.name, "help": flag_help(o)}
    spec["default"] = None if given_only else o.default
    if o.kind == "bool":
        spec["action"] = argparse.BooleanOptionalAction if o.negatable else "store_true"
    else:
        spec["metavar"] = o.metavar
        if FLAG_TYPES[o.kind] is not None:
            spec["type"] = FLAG_TYPES[o.kind]
    spec.update(overrides)
    parser.add_argument(o.flag, **spec)


def add_flags(
    parser: argparse.ArgumentParser, options: Iterable[Option], *, given_only: bool = True
) -> None:
    for o in options:
        if o.flag is not None:
            add_flag(parser, o, given_only=given_only)
