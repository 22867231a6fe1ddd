"""JSON Schemas for the documents host and worker exchange: config, task, result record.

``validate(kind, doc)`` raises SchemaError naming the first bad field as a JSON path.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError, best_match

from suite.errors import SchemaError

KINDS = ("config", "task", "result", "manifest", "site")


@cache
def schema(kind: str) -> dict[str, Any]:
    if kind not in KINDS:
        raise ValueError(f"unknown schema {kind!r}")
    text = resources.files(__name__).joinpath(f"{kind}.schema.json").read_text()
    doc: dict[str, Any] = json.loads(text)
    return doc


@cache
def validator(kind: str) -> Draft202012Validator:
    s = schema(kind)
    Draft202012Validator.check_schema(s)
    return Draft202012Validator(s)


def field_path(err: ValidationError) -> str:
    path = ""
    for part in err.absolute_path:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path or "(document)"


def errors(kind: str, doc: Any) -> list[str]:
    """Every problem as ``field: message`` (empty when valid)."""
    return [f"{field_path(e)}: {e.message}" for e in validator(kind).iter_errors(doc)]


def validate(kind: str, doc: Any) -> None:
    """Raise SchemaError naming the most relevant bad field."""
    err = best_match(validator(kind).iter_errors(doc))
    if err is not None:
        raise SchemaError(f"{field_path(err)}: {err.message}")
