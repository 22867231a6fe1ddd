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

from suite import schemas
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


def points_path(record_path: str | Path, rank: int, world_size: int) -> Path:
    """Where a sweep's worker writes each point's record as soon as it is measured
    (``<record_path>.points``, ``.rankN`` after it with several ranks): what the runner keeps of
    a task stopped by its timeout. The task's records proper go to ``record_path`` at its end."""
    return Path(f"{record_path}.points" + (f".rank{rank}" if world_size > 1 else ""))


def append_records(path: Path, records: list[dict[str, Any]]) -> None:
    """Append ``records`` as whole lines, flushed to disk; a failed write leaves none of them."""
    with path.open("ab") as fh:
        size = fh.seek(0, os.SEEK_END)
        try:
            fh.write("".join(dumps(r) + "\n" for r in records).encode("utf-8"))
            fh.flush()
            os.fsync(fh.fileno())
        except BaseException:
            fh.truncate(size)  # no partial record is left for a reader
            raise


def noisy(record: dict[str, Any]) -> float | None:
    """The relative width of the confidence interval of the median when the record is
    *noisy* — its time budget or its sample cap (``max_samples``) stopped it before that
    interval was as narrow as the target (``ci_rel_width`` over ``target_ci_rel``) — else
    None. Such a median is still the median of what was measured, but it is known less well
    than asked: the summary and the report mark it, and ``--retry-noisy`` measures it again. An
    unknown width (one sample) counts as infinite. A measurement with no target (a fixed
    number of epochs or steps) is never noisy: its interval is what it is, and shown."""
    m = record.get("measurement") or {}
    if record.get("status") != "ok" or m.get("stop_reason") not in ("time_budget", "max_samples"):
        return None
    width, target = m.get("ci_rel_width"), m.get("target_ci_rel")
    if target is None:
        return None
    if width is None:
        return math.inf
    return float(width) if width > target else None


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
        self.append_many([record])

    def append_many(self, records: list[dict[str, Any]], *, validate: bool = True) -> None:
        """Validate, then append every record in one write: a task's records are in the file
        all together or not at all (a failed write, e.g. on a full disk, is cut back off).
        ``validate=False``: the caller has just validated each record itself."""
        for record in records if validate else ():
            validate_record(record)
        data = "".join(dumps(r) + "\n" for r in records).encode("utf-8")
        with self.path.open("ab") as fh:
            size = fh.seek(0, os.SEEK_END)
            try:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            except BaseException:
                fh.truncate(size)  # frees what the failed write took; no partial line stays
                raise

    def complete_task_ids(self) -> set[str]:
        """Tasks whose records are all complete: ok, or skipped for a reason that a rerun
        would not change. Failed, timeout, oom and refused records (``--require-quiet``), and
        the placeholders a Slurm job leaves for tasks it never recorded, make a task
        incomplete: ``--resume`` runs it again."""
        complete: dict[str, bool] = {}
        for r in read_records(self.path, strict=False):
            if "task_id" in r:
                complete[r["task_id"]] = complete.get(r["task_id"], True) and is_complete(r)
        return {tid for tid, ok in complete.items() if ok}

    def supersede(self, task_ids: set[str], to: Path) -> dict[str, dict[str, Any]]:
        """Move every record of ``task_ids`` out of the file into ``to`` (appended), so a rerun
        leaves one set of records per task. Returns, per task moved now or before (``to`` holds
        its earlier attempts), the ``retry`` section its new records carry. The results file is
        replaced atomically."""
        records = list(read_records(self.path, strict=False))
        old = [r for r in records if r.get("task_id") in task_ids]
        earlier = [r for r in read_records(to, strict=False) if r.get("task_id") in task_ids]
        if old:
            with to.open("a", encoding="utf-8") as fh:
                fh.write("".join(dumps(r) + "\n" for r in old))
                fh.flush()
                os.fsync(fh.fileno())
            from suite.rundir import write_text_atomic

            keep = [dumps(r) + "\n" for r in records if r.get("task_id") not in task_ids]
            write_text_atomic(self.path, "".join(keep))
        retry: dict[str, dict[str, Any]] = {}
        # a task moved aside by an earlier --resume that was itself stopped before it reran
        # has its attempts only in ``to``: its new records are still a retry
        for tid in {r["task_id"] for r in old + earlier}:
            mine = [r for r in old if r["task_id"] == tid] or [
                r for r in earlier if r["task_id"] == tid
            ][-1:]
            retry[tid] = _retry_section(mine, [e for e in earlier + old if e["task_id"] == tid])
        return retry

    def retry_of_rest(self, task_id: str, to: Path) -> dict[str, Any]:
        """The ``retry`` section of the records a sweep resumed for the points it had left
        (its earlier points stay in the file): which attempt, and why the last one stopped."""
        now = [r for r in read_records(self.path, strict=False) if r.get("task_id") == task_id]
        earlier = [r for r in read_records(to, strict=False) if r.get("task_id") == task_id]
        return _retry_section(now, now + earlier)

    def replace_unfinished(self, task_id: str, records: list[dict[str, Any]], to: Path) -> None:
        """A sweep resumed for the points it had left: its incomplete records (what stood for
        those points) move to ``to`` and ``records`` join the file, in one atomic replacement,
        so the file never holds the earlier points without a record for the rest (a run
        killed in between leaves the old placeholder in place: resumed again)."""
        for record in records:
            validate_record(record)
        existing = list(read_records(self.path, strict=False))
        moved = [r for r in existing if r.get("task_id") == task_id and not is_complete(r)]
        if moved:
            with to.open("a", encoding="utf-8") as fh:
                fh.write("".join(dumps(r) + "\n" for r in moved))
                fh.flush()
                os.fsync(fh.fileno())
        from suite.rundir import write_text_atomic

        keep = [r for r in existing if not (r.get("task_id") == task_id and not is_complete(r))]
        write_text_atomic(self.path, "".join(dumps(r) + "\n" for r in keep + records))

    def __iter__(self) -> Iterator[dict[str, Any]]:
        yield from read_records(self.path)

    def done_task_ids(self) -> set[str]:
        return {r["task_id"] for r in read_records(self.path, strict=False) if "task_id" in r}


def _retry_section(mine: list[dict[str, Any]], every: list[dict[str, Any]]) -> dict[str, Any]:
    """A rerun's ``retry`` section: ``mine``, the task's latest records (the first incomplete
    one made it rerun), ``every``, all its records so far (an attempt is counted by its start)."""
    why = next((r for r in mine if not is_complete(r)), mine[0])
    return {
        "attempt": len({e.get("started_at") for e in every}) + 1,
        "previous_status": why["status"],
        "previous_reason": why.get("reason"),
    }


def is_complete(record: dict[str, Any]) -> bool:
    """An ok record, or a skip that a rerun would not change (not a --require-quiet refusal)."""
    from suite.telemetry.quiet import is_refusal

    return record.get("status") == "ok" or (
        record.get("status") == "skipped" and not is_refusal(record)
    )


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


#: how many bad lines ``validate_file`` lists before it only counts the rest
MAX_LISTED = 20


def validate_file(path: Path) -> int:
    """Validate every record; SchemaError lists each bad line (its number and the first bad
    field), the first :data:`MAX_LISTED` of them, then how many more there are."""
    if not path.exists():
        raise SchemaError(f"{path}: no such file")
    n = objects = 0
    bad: list[str] = []
    for line_no, rec in _numbered(path):
        n += 1
        if isinstance(rec, SchemaError):
            bad.append(str(rec))
            continue
        if not isinstance(rec, dict):
            bad.append(f"{path}:{line_no}: a JSON {type(rec).__name__}, not a record")
            continue
        objects += 1
        try:
            validate_record(rec)
            _consistent(rec)
        except SchemaError as exc:
            bad.append(f"{path}:{line_no}: {exc}")
    if n == 0:
        raise SchemaError(f"{path}: holds no records")
    if len(bad) == 1:
        raise SchemaError(bad[0])
    if not objects:  # not one JSON object: not a results file (its lines are not listed)
        raise SchemaError(
            f"{path}: none of its {n} lines is a JSON record (line "
            f"{bad[0].removeprefix(f'{path}:')}); give a results.jsonl written by `dlsuite "
            "run` (or its run directory)"
        )
    if bad:
        more = len(bad) - MAX_LISTED
        raise SchemaError(
            f"{path}: {len(bad)} of its {n} lines are not valid records"
            + "".join(f"\n  {b}" for b in bad[:MAX_LISTED])
            + (f"\n  ... and {more} more bad line{'s' if more > 1 else ''}" if more > 0 else "")
        )
    return n


def _consistent(rec: dict[str, Any]) -> None:
    """What the schema cannot say and the suite always writes: a metric's median lies within
    its ci95 and its min and max; a check passes exactly when its error is finite and within
    its tolerance, and a record's correctness passes exactly when every check does (the
    report, ``compare`` and the exit code read ``passed``)."""
    for i, m in enumerate(rec.get("metrics") or []):
        med, ci = m.get("median"), m.get("ci95")
        bounds = [("ci95", ci[0], ci[1])] if isinstance(ci, list) and len(ci) == 2 else []
        bounds.append(("min and max", m.get("min"), m.get("max")))
        for what, lo, hi in bounds:
            if None in (med, lo, hi) or lo <= med <= hi:
                continue
            raise SchemaError(
                f"metrics[{i}] ({m.get('name')}): median {med:g} lies outside its {what} "
                f"[{lo:g}, {hi:g}]; the suite writes a median inside both (was the record "
                "edited? a figure changed by hand no longer matches its samples' summary)"
            )
    corr = rec.get("correctness")
    if not isinstance(corr, dict):
        return
    checks = corr.get("checks") or []
    for i, c in enumerate(checks):
        err, tol = c.get("error"), c.get("tolerance")
        within = err is not None and tol is not None and err <= tol
        if c.get("passed") != within:
            said = "no finite error" if err is None else f"its error {err:g}"
            raise SchemaError(
                f"correctness.checks[{i}] ({c.get('name')}): passed is "
                f"{str(c.get('passed')).lower()} with {said} and tolerance {tol:g}; the suite "
                "writes passed exactly when the error is within the tolerance (was the record "
                "edited?)"
            )
    every = all(c.get("passed") is True for c in checks)
    if corr.get("passed") != every:
        raise SchemaError(
            f"correctness.passed is {str(corr.get('passed')).lower()} but "
            f"{'every check passed' if every else 'a check failed'}; the suite writes it as "
            "all its checks' verdicts (was the record edited?)"
        )


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON (the suite writes null for a number that is not finite)")


def _numbered(path: Path) -> Iterator[tuple[int, Any]]:
    """Each non-blank line's number and its JSON document, or the SchemaError that says why
    the line is not JSON (the caller lists every bad line, not only the first)."""
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
                yield (
                    lineno,
                    SchemaError(
                        f"{path}:{lineno}: not UTF-8 text; give a results.jsonl written by dlsuite "
                        "(or its run directory)"
                    ),
                )
                continue
            try:
                doc = json.loads(line, parse_constant=_no_constant)
            except ValueError as exc:
                if not raw.endswith(b"\n"):
                    yield (
                        lineno,
                        SchemaError(
                            f"{path}:{lineno}: the last line is cut off ({exc.args[0]}): a run "
                            "stopped while writing it; `dlsuite run --resume --out RUN_DIR` drops "
                            "it and runs that task again"
                        ),
                    )
                    continue
                yield lineno, SchemaError(f"{path}:{lineno}: not valid JSON ({exc.args[0]})")
                continue
            yield lineno, doc


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
