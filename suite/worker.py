"""The worker: ``python -m suite.worker TASK.json`` inside the task's environment.

The only place an adapter (and so a framework) is imported. It runs one task and writes its
record(s), validated, to the task's ``record_path``; a task that fails still gets a record.
Exit code 0 means a record was written (whatever its status), non-zero that none could be.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from suite import schemas
from suite.errors import SuiteError, UnsupportedError
from suite.provenance import SOURCE_ROOT, hostname, now_iso, worker_provenance
from suite.results import (
    append_records,
    finite_or_null,
    points_path,
    record_skeleton,
    validate_record,
)
from suite.rundir import EXIT_DISK_FULL, is_disk_full, watch_runner

#: how the frameworks' allocators word a refused allocation in an exception that is not a
#: MemoryError: PyTorch's CPU allocator ("DefaultCPUAllocator: can't allocate memory: you
#: tried to allocate N bytes. Error code 12 (Cannot allocate memory)", a RuntimeError), the
#: C library's ENOMEM, CUDA's and XLA's "out of memory"
_OOM_WORDS = ("out of memory", "can't allocate memory", "cannot allocate memory")


def _is_oom(exc: BaseException) -> bool:
    if isinstance(exc, MemoryError):
        return True
    name = type(exc).__name__
    message = str(exc).lower()
    return name in ("OutOfMemoryError", "ResourceExhaustedError") or any(
        words in message for words in _OOM_WORDS
    )


def _telemetry(task: dict[str, Any], rank: int) -> Any:
    """The task's telemetry (suite/telemetry); its series go to RUN_DIR/telemetry/ when the
    record path is the runner's RUN_DIR/tasks/<id>.<attempt>.records.jsonl."""
    from suite.telemetry import DEFAULT_INTERVAL_MS, TaskTelemetry

    settings = task.get("telemetry") or {}
    record_dir = Path(task["record_path"]).parent
    return TaskTelemetry(
        task_id=task["task_id"],
        rank=rank,
        world_size=task["world_size"],
        interval_ms=settings.get("interval_ms", DEFAULT_INTERVAL_MS),
        series_dir=record_dir.parent / "telemetry" if record_dir.name == "tasks" else None,
        sampling=bool(settings.get("sampling", True)),
    )


def _attach_telemetry(records: list[dict[str, Any]], tel: Any) -> None:
    """Each record's telemetry section (a sweep's record i gets timed region i) and its
    energy metric."""
    per_segment = len(tel.segments) == len(records) and len(records) > 1
    for i, rec in enumerate(records):
        _attach_section(rec, tel.section(i if per_segment else None))


def _attach_section(rec: dict[str, Any], section: dict[str, Any]) -> None:
    """The record's telemetry ``section`` (the quiet verdict it holds kept) and its energy."""
    from suite.telemetry import energy_metric, work_items

    for key in ("quiet", "quiet_unavailable_reason"):
        if key in rec["telemetry"]:
            section[key] = rec["telemetry"][key]
    rec["telemetry"] = section
    if rec.get("status") != "ok":
        return
    entry = energy_metric(section, rec)
    if entry is not None:
        items = work_items(rec)
        if items is not None and section["gpu"] is not None:
            section["gpu"]["work"] = {"items": items[0], "unit": items[1]}
        rec["metrics"].append(entry)


def worker_section(task: dict[str, Any]) -> dict[str, Any]:
    """The record's ``worker``: the process the task ran in, and what it had run before.
    ``isolation`` is "task" (a process for this task alone: ``--isolate task``, or a framework
    whose distributed runtime cannot be set up twice) or "session" (one process for a
    sequence of tasks, suite/session.py)."""
    isolation = task.get("isolation") or {"mode": "task", "reason": None}
    session = task.get("session")
    out: dict[str, Any] = {
        "isolation": isolation["mode"],
        "isolation_reason": isolation.get("reason"),
        "pid": os.getpid(),
    }
    if session is not None:
        out.update(
            session_id=session["session_id"],
            position=session["position"],
            reset=session["reset"],
            warm=session["warm"],
        )
    return out


def run_task(task: dict[str, Any], held: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Run the task on this rank; one record, or one per parameter point of a sweep.
    ``held`` (a session's) receives the adapter, whose state is freed after the task."""
    from suite.adapters import ADAPTERS
    from suite.launchers.base import export_rank_env, rank_env
    from suite.levels import execute
    from suite.schedulers import environment_section

    started = now_iso()
    t0 = time.perf_counter()
    ranks = rank_env()
    export_rank_env(ranks)
    record = record_skeleton(task, host=hostname(), started_at=started)
    record["rank"] = ranks.rank
    job = environment_section(os.environ)
    if job:  # this rank's own job section: its node (srun starts ranks on several)
        record["scheduler"] = job
    record["backend"].update(python=sys.executable, environment=sys.prefix)
    record["worker"] = worker_section(task)
    several: list[dict[str, Any]] = []
    tel = None
    try:
        adapter_cls = ADAPTERS.load(task["framework"])
        record["framework"].update(
            version=adapter_cls.installed_version(), adapter_version=adapter_cls.adapter_version
        )
        ok, why = adapter_cls.available()
        if not ok:
            raise SuiteError(f"{task['framework']} is not available here: {why}")
        if task["level"] not in adapter_cls.levels:
            raise UnsupportedError(
                adapter_cls.levels_reason
                or f"{task['framework']} does not run the {task['level']} level"
            )
        if task.get("xla") and adapter_cls.xla_declined():
            raise UnsupportedError(adapter_cls.xla_declined())
        adapter = adapter_cls()
        adapter.xla = bool(task.get("xla"))  # read by setup (an adapter that compiles operators)
        if held is not None:
            held["adapter"] = adapter
        device = adapter.setup(task["device"])
        if task.get("peak_tflops"):
            device.peak_tflops.update(task["peak_tflops"])
            configured = ", ".join(sorted(task["peak_tflops"]))
            device.peak_source = (
                f"configured for {configured}: [device] peak_tflops in the config file; "
                f"other dtypes: {device.peak_source}"
            )
        if device.kind == "cpu" and task["level"] in ("operator", "training"):
            # the roofline's memory roof (and the optimizer step's % of it): measured once per
            # host and cached (suite/membw.py)
            from suite.membw import device_extra

            device.extra.update(device_extra())
        record["device"] = device.to_dict()
        record["provenance"] = worker_provenance(task.get("provenance", {}), adapter.versions())
        tel = _telemetry(task, ranks.rank)
        tel.open(device.kind)
        record["telemetry"]["gpu_unavailable_reason"] = tel.gpu_reason
        if tel.readers:  # GPU energy is measured: a region long enough for the counter's steps
            from suite.telemetry import GPU_MIN_REGION_S

            task["measure"] = {"min_time_s": GPU_MIN_REGION_S, **(task.get("measure") or {})}
        # The quiet-machine check (suite/telemetry/quiet.py) reads over the task's warm-up:
        # it starts here and ends at the first timed region's entry, which raises
        # QuietRefusal under --require-quiet when the machine was busy. (It had a 0.25 s
        # window of its own before every task: most of the time between two tasks.)
        from suite.telemetry.quiet import QuietRefusal

        settings = task.get("telemetry") or {}
        refusal = None
        try:
            tel.quiet_begin(required=bool(settings.get("require_quiet")),
                            storage_window_s=settings.get("quiet_window_s"),
                            # the task's data (training level): read before it is touched
                            storage_paths=(task.get("data") or {}).get("paths") or None)  # fmt: skip
        except Exception as exc:  # noqa: BLE001 - telemetry must never fail a task by itself
            why = f"the quiet check failed: {type(exc).__name__}: {exc}"
            record["telemetry"].update(quiet=None, quiet_unavailable_reason=why[:500])
            if settings.get("require_quiet"):
                refusal = f"machine not known to be quiet (--require-quiet): {why}"
        result: Any = None
        if refusal is None:
            record["worker"]["setup_s"] = time.perf_counter() - t0
            point_done = _PointWriter(task, record, tel, t0)
            try:
                result = execute(
                    task, adapter, device, timed_region=tel.region, point_done=point_done
                )
            except QuietRefusal as exc:
                refusal = str(exc)
            if "quiet_unavailable_reason" not in record["telemetry"]:
                quiet = tel.quiet_end()  # ended by the first timed region, or now
                record["telemetry"]["quiet"] = quiet
                if quiet is None:
                    why = tel.quiet_unavailable_reason or "the quiet check gave no verdict"
                    record["telemetry"]["quiet_unavailable_reason"] = why[:500]
        if refusal is not None:
            record.update(status="skipped", reason=refusal[:500])
            several.append(record)
        else:
            for fields in result if isinstance(result, list) else [result]:
                rec = json.loads(json.dumps(record))  # a deep copy per record
                rec["benchmark"]["params"] = fields.pop("params")
                rec.update(fields)
                rec["status"] = "ok"
                several.append(rec)
            _attach_telemetry(several, tel)
    except UnsupportedError as exc:
        record.update(status="skipped", reason=str(exc).strip() or _no_reason(exc))
    except Exception as exc:  # noqa: BLE001 - any failure becomes a record; the run goes on
        if is_disk_full(exc):
            raise  # not the benchmark's failure: the run stops and --resume reruns the task
        status = "oom" if _is_oom(exc) else "failed"
        record.update(
            status=status,
            reason=f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:500],
            error={
                "type": type(exc).__name__,
                "message": str(exc)[:4000],
                "traceback": traceback.format_exc()[-8000:],
            },
        )
    finally:
        if tel is not None and getattr(tel, "_quiet_window", None) is not None:
            record["telemetry"]["quiet"] = tel.quiet_end()  # the task failed in its warm-up
        if tel is not None:
            tel.close()
    if tel is not None and tel.segments and not several:
        _attach_telemetry([record], tel)  # a failure after (part of) the timing
    duration = time.perf_counter() - t0
    out = several or [record]
    for rec in out:
        rec["duration_s"] = duration
    return out


class _PointWriter:
    """Writes each point of a sweep, as soon as it is measured, to the task's points file
    (:func:`suite.results.points_path`) as the record the task's end would write for it, so a
    task stopped later (its timeout, a crash) keeps what it measured: the runner takes those
    records when the task's own never came (suite/runner.py: ``kept_points``)."""

    def __init__(self, task: dict[str, Any], record: dict[str, Any], tel: Any, t0: float) -> None:
        self.path = points_path(task["record_path"], record["rank"] or 0, task["world_size"])
        self.record, self.tel, self.t0 = record, tel, t0
        self.seen = 0  # points handed over so far (a sweep's point i was timed in region i)

    def __call__(self, fields: dict[str, Any]) -> None:
        rec = json.loads(json.dumps(self.record))  # a deep copy, as for the task's records
        fields = copy.deepcopy(fields)  # the task's own record of the point appends to its lists
        rec["benchmark"]["params"] = fields.pop("params")
        rec.update(fields)
        rec["status"] = "ok"
        tel = self.tel
        if "quiet_unavailable_reason" not in rec["telemetry"]:
            quiet = tel.quiet_end()  # ended by the point's timed region: the verdict it gave
            rec["telemetry"]["quiet"] = quiet
            if quiet is None:
                why = tel.quiet_unavailable_reason or "the quiet check gave no verdict"
                rec["telemetry"]["quiet_unavailable_reason"] = why[:500]
        i, self.seen = self.seen, self.seen + 1
        _attach_section(rec, tel.section(i if i < len(tel.segments) else None))
        rec["duration_s"] = time.perf_counter() - self.t0
        rec = finite_or_null(rec)
        try:
            validate_record(rec)
        except SuiteError as exc:  # the task's end says so in its record; nothing kept early
            print(f"[dlsuite.worker] point {i} not kept early: {exc}", file=sys.stderr)
            return
        append_records(self.path, [rec])


def _no_reason(exc: UnsupportedError) -> str:
    """A skipped record's reason for an ``UnsupportedError`` raised without one (the record
    needs one: the schema refused it and the skip read as a suite bug): where it was raised.
    The traceback goes to the task's log."""
    traceback.print_exception(exc, file=sys.stderr)
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return "UnsupportedError with no reason"
    frame = frames[-1]
    path = Path(frame.filename)
    with contextlib.suppress(ValueError):
        path = path.resolve().relative_to(SOURCE_ROOT)
    return f"UnsupportedError with no reason, raised at {path}:{frame.lineno} ({frame.name})"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m suite.worker TASK.json|SESSION.json", file=sys.stderr)
        return 2
    doc = json.loads(Path(args[0]).read_text())
    if "session_id" in doc:
        schemas.validate("session", doc)
        if doc.get("run_lock"):
            watch_runner(Path(doc["run_lock"]))  # end with the runner, whatever kills it
        return run_session(doc)
    schemas.validate("task", doc)
    if doc.get("run_lock"):
        watch_runner(Path(doc["run_lock"]))
    return run_one(doc)[0]


def run_one(task: dict[str, Any], held: dict[str, Any] | None = None) -> tuple[int, str]:
    """Run one task and write its records: the exit code for the launcher, and the status of
    the first record. ``held`` receives the task's adapter (a session frees its state)."""
    try:
        records = [finite_or_null(r) for r in run_task(task, held)]
        return write_records(task, records), records[0]["status"]
    except OSError as exc:
        if not is_disk_full(exc):
            raise
        print(
            f"[dlsuite.worker] {task['task_id']}: no record, the disk is full ({exc})", flush=True
        )
        return EXIT_DISK_FULL, "none"


def run_session(doc: dict[str, Any]) -> int:
    """Run the session's tasks in order in this process (suite/session.py has the protocol):
    an event line before and after each task, each task's output in its own log. A task that
    failed ends the session (a fresh process takes the rest), and so does a rank that must
    stop its launcher. Between tasks the adapter frees what a fresh process would not hold
    (:meth:`Adapter.end_task`); the next record says what was reset and what stayed warm."""
    from suite.launchers.base import rank_env
    from suite.session import write_event

    progress = Path(doc["progress_dir"]) / f"{doc['session_id']}.rank{rank_env().rank}.jsonl"
    between: dict[str, list[str]] = {"reset": [], "warm": []}
    paths = doc["tasks"]
    for position, path in enumerate(paths):
        task = json.loads(Path(path).read_text())
        schemas.validate("task", task)
        last = position == len(paths) - 1
        task["session"] = {
            "session_id": doc["session_id"], "position": position, "last": last, **between,
        }  # fmt: skip
        held: dict[str, Any] = {}
        write_event(
            progress,
            {"event": "start", "task_id": task["task_id"], "pid": os.getpid(), "t": time.time()},
        )
        with task_output(task.get("log_path")):
            code, status = run_one(task, held)
        stop = code != 0 or status in ("failed", "oom")
        write_event(
            progress,
            {"event": "end", "task_id": task["task_id"], "status": status, "code": code,
             "stop": stop, "t": time.time()},
        )  # fmt: skip
        if stop:
            return code
        if not last:  # the runner records the task meanwhile
            between = end_task(held.pop("adapter", None))
    return 0


def end_task(adapter: Any) -> dict[str, list[str]]:
    """Between two tasks of a session: the adapter frees its framework's state
    (:meth:`Adapter.end_task`), then Python's garbage is collected. Returns what the next
    record says was reset and what stayed warm."""
    import gc

    reset, warm = [], ["imported modules"]
    if adapter is not None:
        try:
            said = adapter.end_task()
            reset += said.get("reset", [])
            warm += said.get("warm", [])
        except Exception as exc:  # noqa: BLE001 - the next task's record says so
            reset.append(f"not freed: {type(exc).__name__}: {exc}"[:300])
    del adapter
    gc.collect()
    # What survives this collection is the process's own: imported modules, the framework's
    # state. Frozen, later collections skip it and scan only what the next tasks make: a full
    # collection over PyTorch's objects took 0.3-0.4 s, once per task, before this.
    gc.freeze()
    reset.append("the task's Python objects (gc.collect)")
    return {"reset": reset, "warm": warm}


class task_output:
    """This process's stdout and stderr (file descriptors 1 and 2, so the framework's own C++
    logs too) appended to ``log_path`` for the duration of a task; unchanged when None."""

    def __init__(self, log_path: str | None) -> None:
        self.log_path = log_path
        self.saved: list[int] = []

    def __enter__(self) -> task_output:
        if self.log_path:
            sys.stdout.flush()
            sys.stderr.flush()
            fd = os.open(self.log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            self.saved = [os.dup(1), os.dup(2)]
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            os.close(fd)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.saved:
            sys.stdout.flush()
            sys.stderr.flush()
            for target, saved in zip((1, 2), self.saved, strict=True):
                os.dup2(saved, target)
                os.close(saved)
            self.saved = []


def write_records(task: dict[str, Any], records: list[dict[str, Any]]) -> int:
    """Validate and write the records (all or none); the exit code for the launcher."""
    for i, record in enumerate(records):
        try:
            validate_record(record)
        except SuiteError as exc:  # a suite bug: still leave a valid record saying so
            records[i] = {
                **record_skeleton(task, host=hostname(), started_at=record["started_at"]),
                "rank": record.get("rank"),
                "status": "failed",
                "reason": f"record failed schema validation: {exc}",
                "error": {"type": "SchemaError", "message": str(exc)},
            }
            validate_record(records[i])
    # One file per rank: ranks never interleave their writes.
    rank = records[0].get("rank") or 0
    out = Path(task["record_path"] + (f".rank{rank}" if task["world_size"] > 1 else ""))
    append_records(out, records)  # all or none: no partial record is left for the runner
    record = records[0]
    print(f"[dlsuite.worker] {task['task_id']}: {record['status']}", flush=True)
    from suite.telemetry.quiet import is_refusal

    refused = any(is_refusal(r) for r in records)
    if task["world_size"] > 1 and (
        refused or any(r["status"] in ("failed", "oom") for r in records)
    ):
        # Exit non-zero so the launcher (torchrun, mpirun, srun) stops the other ranks, which
        # may be blocked in a collective waiting for this one (also when this rank refused a
        # busy machine: the others would wait for it); the record is already written.
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
