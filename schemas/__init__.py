"""JSON Schemas for the documents host and worker exchange: config, task, result record.

``validate(kind, doc)`` raises SchemaError naming the first bad field as a JSON path.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from functools import cache
from importlib import resources
from typing import Any

from jsonschema import Draft202012Validator, validators
from jsonschema.exceptions import ValidationError, best_match

from suite.errors import SchemaError

KINDS = ("config", "task", "result", "manifest", "site", "session")


@cache
def schema(kind: str) -> dict[str, Any]:
    if kind not in KINDS:
        raise ValueError(f"unknown schema {kind!r}")
    text = resources.files(__name__).joinpath(f"{kind}.schema.json").read_text()
    doc: dict[str, Any] = json.loads(text)
    return doc


@cache
def ecma_pattern(pattern: str) -> re.Pattern[str]:
    """``pattern`` compiled with JSON Schema's (ECMA-262's) meaning of ``$``: the end of the
    string. Python's ``$`` also matches before a final newline, so with ``re.search`` a
    whitelist such as ``^[a-z]+$`` accepted ``"name\\n"``, and that newline split a batch
    script's line. Every ``$`` outside a character class becomes ``\\Z``."""
    out, in_class, i = [], False, 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            out.append(pattern[i : i + 2])
            i += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
        elif c == "$":
            c = r"\Z"
        out.append(c)
        i += 1
    return re.compile("".join(out))


def _pattern(
    validator: Any, pattern: str, instance: Any, schema: dict[str, Any]
) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and not ecma_pattern(pattern).search(instance):
        # the schema's own words for what is allowed, where it has them, rather than the regex
        what = schema.get("description") if isinstance(schema, dict) else None
        if what:
            yield ValidationError(f"{instance!r} does not match what is allowed here: {what}")
        else:
            yield ValidationError(f"{instance!r} does not match {pattern!r}")


#: Draft 2020-12 with ECMA-262 ``$`` in ``pattern`` (also where ``propertyNames`` uses it)
Validator = validators.extend(Draft202012Validator, {"pattern": _pattern})


@cache
def validator(kind: str) -> Any:
    """The validator of ``kind``. The schemas are the repository's own files: that each is a
    valid Draft 2020-12 schema is a test's check (tests/unit/test_schemas.py), not every
    process's (checking the result schema against the meta-schema cost each worker and each
    runner about 0.3 s of a quick task's 1 s, 1.8 s on a loaded machine)."""
    return Validator(schema(kind))


def field_path(err: ValidationError) -> str:
    path = ""
    for part in err.absolute_path:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path or "top level"


def errors(kind: str, doc: Any) -> list[str]:
    """Every problem as ``field: message`` (empty when valid)."""
    return [f"{field_path(e)}: {e.message}" for e in validator(kind).iter_errors(doc)]


def unknown_key_message(err: ValidationError) -> str | None:
    """An ``additionalProperties`` error as a user reads it: the key not known, the closest
    known one (``framework``: did you mean ``frameworks``?) and the keys that are; None for
    another kind of error, or where the object's keys are not listed (a pattern's)."""
    known = sorted(err.schema.get("properties", {})) if isinstance(err.schema, dict) else []
    if err.validator != "additionalProperties" or not known or not isinstance(err.instance, dict):
        return None
    unknown = [k for k in err.instance if k not in known]
    if not unknown:
        return None
    import difflib

    key = unknown[0]
    close = difflib.get_close_matches(str(key), known, n=1, cutoff=0.6)
    more = f" ({len(unknown) - 1} more unknown)" if len(unknown) > 1 else ""
    if close:
        return f"unknown key {key!r} (did you mean {close[0]!r}?){more}"
    return f"unknown key {key!r}{more}; the keys here are {', '.join(known)}"


def validate(kind: str, doc: Any) -> None:
    """Raise SchemaError naming the most relevant bad field (an unknown key with the closest
    known one)."""
    err = best_match(validator(kind).iter_errors(doc))
    if err is not None:
        raise SchemaError(f"{field_path(err)}: {unknown_key_message(err) or err.message}")
