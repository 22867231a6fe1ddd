"""Declared parameters: a benchmark's (or a zoo network's) fields and the one validation that
checks them. Framework-neutral, below everything that declares parameters (the ONNX zoo, the
benchmarks of every level), so a field is declared once and checked the same way everywhere:
every bad value is one :class:`~suite.errors.ConfigError` naming ``<owner>.<field>`` and the
fix."""

from __future__ import annotations

import builtins
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from suite.errors import ConfigError

Params = dict[str, Any]


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


#: the default of a field that must be given
REQUIRED: Any = _Required()

#: a size's units: decimal (KB, MB, GB) and binary (KiB, MiB, GiB) bytes
SIZE_UNITS = {"B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9, "KiB": 1 << 10, "MiB": 1 << 20,
              "GiB": 1 << 30}  # fmt: skip


def parse_size(text: str, what: str) -> float:
    """Bytes from ``"64 MiB"``, ``"25MB"`` or a plain number of bytes."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]*)?)\s*([KMG]i?B|B)?\s*", str(text))
    if not m or float(m.group(1)) <= 0:
        raise ConfigError(f"{what} = {text!r}: give a size such as 25MiB, 64MB or 1048576")
    return float(m.group(1)) * SIZE_UNITS[m.group(2) or "B"]


_TYPE_WORDS = {int: "an integer", float: "a number", bool: "true or false", str: "a string",
               list: "a list", dict: "a table"}  # fmt: skip


@dataclass(frozen=True)
class SizeSpec:
    """One parameter set and where it comes from (the network it is taken from).

    ``kit``: a case the conformance kit and the tests exercise in every framework (a word's
    backward, a grouped convolution), left out of the plan's quick set, which stays the first
    contact's 24 tasks (docs/studies/run-efficiency-cpu.md)."""

    params: Params
    source: str
    kit: bool = False


@dataclass(frozen=True)
class Field:
    """A declared parameter.

    ``type`` is int, float (an integer is accepted and converted), bool, str, list or dict;
    numbers must be positive (``positive``; False: >= 0) and below ``below`` when it is set;
    ``choices`` lists the allowed values; ``items`` is the element type of a list (its
    elements obey ``positive``); ``nullable`` lets None through (meaning "choose for me");
    ``default`` is used when the field is absent (``REQUIRED``: it must be given);
    ``implicit``: a field added after records of its benchmark exist is left out of the
    validated parameters while it holds its default, so a record of an earlier version (which
    has no such field and means that default) keeps its identity (task id, comparisons);
    read it with :func:`value`. ``size``: an int field of bytes that also takes a size with its
    unit ("1MiB", "25 MB"), kept as the whole number of bytes (so both spellings are one
    task)."""

    type: type
    default: Any = REQUIRED
    positive: bool = True
    choices: tuple[Any, ...] | None = None
    below: float | None = None
    items: builtins.type | None = None
    nullable: bool = False
    implicit: bool = False
    size: bool = False

    @property
    def required(self) -> bool:
        return self.default is REQUIRED

    def parse(self, where: str, value: Any) -> Any:
        """``value`` checked (and an int widened to a float field); a ConfigError otherwise."""
        if value is None and self.nullable:
            return None
        if self.size and isinstance(value, str):
            size = parse_size(value, where)
            if size != int(size):
                raise ConfigError(f"{where} = {value!r}: not a whole number of bytes")
            value = int(size)
        value = _typed(where, self.type, value)
        if self.type is list:
            if not value:
                raise ConfigError(f"{where}: give a non-empty list")
            if self.items is not None:
                value = [self._number(where, _typed(where, self.items, v)) for v in value]
        elif self.type in (int, float):
            value = self._number(where, value)
        if self.choices is not None and value not in self.choices:
            raise ConfigError(
                f"{where}: {value!r} is not one of {list(self.choices)}; choose one of them"
            )
        return value

    def _number(self, where: str, value: Any) -> Any:
        if not isinstance(value, (int, float)):
            return value
        kind = "integer" if isinstance(value, int) else "number"
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"{where}: expected a finite number, got {value!r}")
        if self.positive and value <= 0:
            raise ConfigError(f"{where}: must be a positive {kind}, got {value!r}")
        if not self.positive and value < 0:
            raise ConfigError(f"{where}: must be >= 0, got {value!r}")
        if self.below is not None and not value < self.below:
            raise ConfigError(f"{where}: must be below {self.below:g}, got {value!r}")
        return value


def _typed(where: str, kind: type, value: Any) -> Any:
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    ok = isinstance(value, kind) and not (kind is not bool and isinstance(value, bool))
    if not ok:
        raise ConfigError(
            f"{where}: expected {_TYPE_WORDS.get(kind, kind.__name__)}, got {value!r}"
        )
    return value


def validate_fields(
    owner: str,
    fields: Mapping[str, Field],
    params: Any,
    *,
    extra: Callable[[Params, Params], Params] | None = None,
    derived: Callable[[Params], Params] | None = None,
) -> Params:
    """``params`` checked against ``fields``, defaults filled, in the fields' order.

    ``extra(out, rest)`` validates the parameters ``fields`` does not declare (a network
    benchmark's architecture fields belong to the zoo network it names) and returns them;
    without it an undeclared parameter is an error. ``derived(out)`` fills defaults that
    depend on other fields before the required ones are checked."""
    if not isinstance(params, Mapping):
        raise ConfigError(f"{owner}: parameters must be a table, got {params!r}")
    rest = {k: v for k, v in params.items() if k not in fields}
    if rest and extra is None:
        key = sorted(rest)[0]
        raise ConfigError(
            f"{owner}.{key}: unknown field; known fields: {', '.join(fields) or 'none'}"
        )
    out: Params = {}
    for key, spec in fields.items():
        if key in params and not (params[key] is None and not spec.nullable):
            out[key] = spec.parse(f"{owner}.{key}", params[key])
        elif not spec.required:
            out[key] = spec.default
    if derived is not None:
        out = derived(out)
    for key, spec in fields.items():
        if key not in out:
            kind = spec.type.__name__
            raise ConfigError(f"{owner}.{key}: missing; set {key} = <{kind}>")
    out = {
        key: out[key]
        for key, spec in fields.items()
        if not (spec.implicit and out[key] == spec.default)
    }
    if extra is not None:
        out.update(extra(out, rest))
    return out


def value(fields: Mapping[str, Field], params: Mapping[str, Any], key: str) -> Any:
    """``params[key]``, or the field's default where an ``implicit`` field was left out."""
    return params[key] if key in params else fields[key].default
