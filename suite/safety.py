"""Text that reaches a script, a command line or a file name carries no control characters.

A newline in a value splits an ``#SBATCH`` line or a shell command; a carriage return, tab,
escape or NUL hides or truncates what a user reads or a program parses. Every user value
(flags, config file, site profile, environment) is checked here before it is used, so one
rule covers them all; the whitelists of the Slurm renderer and the schemas come on top.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterator
from typing import Any

from suite.errors import ConfigError


def control_characters(text: str) -> list[str]:
    """The distinct control characters (Unicode category Cc: C0, DEL, C1) in ``text``."""
    return sorted({c for c in text if unicodedata.category(c) == "Cc"})


def check_text(value: str, what: str) -> str:
    """``value``, or one ConfigError naming the field and the characters to remove."""
    bad = control_characters(value)
    if bad:
        raise ConfigError(
            f"{what} {value!r}: holds the control character(s) "
            f"{', '.join(repr(c) for c in bad)}; remove them (no newline, tab, escape or other "
            "control character may reach a script, a command line or a file name)"
        )
    return value


def strings(doc: Any, path: str = "") -> Iterator[tuple[str, str]]:
    """Every string of a parsed document (keys too), with its dotted path."""
    if isinstance(doc, str):
        yield path or "(document)", doc
    elif isinstance(doc, dict):
        for key, value in doc.items():
            name = repr(key) if isinstance(key, str) and control_characters(key) else str(key)
            sub = f"{path}.{name}" if path else name
            if isinstance(key, str):
                yield f"{sub} (the key)", key
            yield from strings(value, sub)
    elif isinstance(doc, (list, tuple)):
        for i, value in enumerate(doc):
            yield from strings(value, f"{path}[{i}]")


def check_document(doc: Any, where: str) -> None:
    """Every string in ``doc`` is free of control characters; the error names the field."""
    for path, value in strings(doc):
        check_text(value, f"{where}: {path} =")
