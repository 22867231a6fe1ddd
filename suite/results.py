"""Records: validated when written, appended one line at a time and flushed to disk.

``results.jsonl`` has a single writer (the runner); workers write their records to per-task
files the runner validates and appends. A run killed mid-write leaves at most one partial last
line, which ``ResultsFile.repair`` truncates when the run is resumed, before anything new is
appended.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import schemas
from suite.errors import SchemaError


def dumps(record: dict[str, Any]) -> str:
    return json.dumps(record, sort_keys=True, allow_nan=False, separators=(",", ":"))


def finite_or_null(value: Any) -> Any:
    """The value with every NaN/Infinity float replaced by null (JSON has neither). A record
    keeps its non-finite evidence elsewhere: a correctness check whose error was non-finite
    never passes, and the loss checks say "loss_finite_every_step"."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite_or_null(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_or_null(v) for v in value]
    return value


def validate_record(record: dict[str, Any]) -> None:
    schemas.validate("result", record)


class ResultsFile:
    """Append-only JSON Lines file of validated records."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def repair(self) -> int:
        """Drop a partial (unterminated or unparsable) last line; returns bytes removed."""
        if not self.path.exists():
            return 0
        data = self.path.read_bytes()
        if not data:
            return 0
        keep = len(data)
        if not data.endswith(b"\n"):
            keep = data.rfind(b"\n") + 1
        else:
            last_start = data.rfind(b"\n", 0, len(data) - 1) + 1
            try:
                json.loads(data[last_start:])
            except ValueError:
                keep = last_start
        if keep != len(data):
            with self.path.open("r+b") as fh:
                fh.truncate(keep)
                fh.flush()
                os.fsync(fh.fileno())
        return len(data) - keep

    def append(self, record: dict[str, Any]) -> None:
        validate_record(record)
        line = dumps(record) + "\n"
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(line)
            fh.flush()
            os.fsync(fh.fileno())

    def __iter__(self) -> Iterator[dict[str, Any]]:
        yield from read_records(self.path)

    def done_task_ids(self) -> set[str]:
        return {r["task_id"] for r in read_records(self.path, strict=False) if "task_id" in r}


def read_records(path: Path, *, strict: bool = True) -> Iterator[dict[str, Any]]:
    """Records of a JSON Lines file; ``strict`` raises SchemaError on the first bad line."""
    if not path.exists():
        return
    with path.open("rb") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                doc = json.loads(line)  # bytes: json detects UTF-8 (a bad byte is a ValueError)
            except ValueError as exc:
                if strict:
                    raise SchemaError(f"{path}:{lineno}: not valid JSON ({exc})") from None
                continue
            yield doc


def validate_file(path: Path) -> int:
    """Validate every record; SchemaError names the line and the first bad field."""
    if not path.exists():
        raise SchemaError(f"{path}: no such file")
    n = 0
    for lineno, doc in enumerate(_numbered(path), 1):
        line_no, rec = doc
        if not isinstance(rec, dict):
            raise SchemaError(f"{path}:{line_no}: a JSON {type(rec).__name__}, not a record")
        try:
            validate_record(rec)
        except SchemaError as exc:
            raise SchemaError(f"{path}:{line_no}: {exc}") from None
        n = lineno
    if n == 0:
        raise SchemaError(f"{path}: holds no records")
    return n


def _numbered(path: Path) -> Iterator[tuple[int, Any]]:
    try:
        fh = path.open("rb")
    except OSError as exc:
        raise SchemaError(f"{path}: cannot read it ({exc.strerror})") from None
    with fh:
        for lineno, raw in enumerate(fh, 1):
            if not raw.strip():
                continue
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise SchemaError(
                    f"{path}:{lineno}: not UTF-8 text; give a results.jsonl written by dlsuite "
                    "(or its run directory)"
                ) from None
            try:
                yield lineno, json.loads(line)
            except ValueError as exc:
                raise SchemaError(f"{path}:{lineno}: not valid JSON ({exc.args[0]})") from None


def record_skeleton(task: dict[str, Any], *, host: str, started_at: str) -> dict[str, Any]:
    """The fields every record of ``task`` carries, whatever its status."""
    import suite
    from suite.provenance import worker_provenance

    return {
        "schema_version": suite.SCHEMA_VERSION,
        "run_id": task["run_id"],
        "task_id": task["task_id"],
        "status": "failed",
        "benchmark": {
            "level": task["level"],
            "name": task["benchmark"],
            "params": task["params"],
            "size_set": task.get("size_set", "custom"),
            "source": task.get("source", ""),
        },
        "framework": {"name": task["framework"], "version": None, "adapter_version": "unknown"},
        "backend": {"kind": task["backend"], "image": None},
        "dtype": task["dtype"],
        "device": None,
        "rank": None,
        "world_size": task["world_size"],
        "host": host,
        "telemetry": {"gpu": None, "gpu_unavailable_reason": "not measured", "host": None},
        "provenance": worker_provenance(task.get("provenance", {}), {}),
        "started_at": started_at,
        "duration_s": 0.0,
    }
