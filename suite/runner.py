"""The run: plan → worker sessions (suite/session.py: one worker process per rank runs a
sequence of tasks) → validated records in RUN_DIR/results.jsonl.

RUN_DIR layout::

    manifest.json        run id, config, plan, state (updated atomically)
    results.jsonl        one validated record per task, appended and fsynced one by one
    tasks/<id>.json      the task document a worker read
    tasks/<id>.<attempt>.records.jsonl   what one attempt's worker wrote (merged by the runner;
                         per attempt, so an orphan of a killed run can never add a duplicate)
    sessions/<sid>.json  a worker session: its task files in order
    sessions/<sid>.rank<r>.jsonl   rank r's events: a task started, a task ended
    logs/<id>.log        the task's output (the worker's stdout and stderr while it ran)
    logs/<sid>.log       the session's output outside its tasks (start-up, the launcher)
"""

from __future__ import annotations

import dataclasses
import errno
import os
import re
import shlex
import signal
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

import suite
from suite import schemas
from suite.adapters import ADAPTERS
from suite.aggregate import (
    StrategyBaselines,
    add_scaling_efficiency,
    group_by_point,
    merge_ranks,
    missing_ranks_record,
    scaling_key,
)
from suite.backends import BACKENDS
from suite.backends.base import Backend, WorkerResult, terminate_group
from suite.errors import SuiteError
from suite.launchers import LAUNCHERS
from suite.oom import OOM_KILL, OUTSIDE_KILL, KillWitness, Verdict
from suite.provenance import host_provenance, hostname, now_iso
from suite.results import (
    ResultsFile,
    is_complete,
    noisy,
    points_path,
    read_records,
    record_skeleton,
    validate_record,
)
from suite.rundir import (
    EXIT_DISK_FULL,
    FULL_BELOW_BYTES,
    LOCK_NAME,
    DiskFullError,
    Manifest,
    RunLock,
    RunOutcome,
    check_resumed_data,
    default_run_dir,
    free_bytes,
    is_disk_full,
    open_run_dir,
    write_json_atomic,
)
from suite.session import SessionProgress, follow, isolation_reason, progress_path, sessions
from suite.telemetry.quiet import is_refusal

if TYPE_CHECKING:
    from suite.plan import Task
    from suite.settings import RunConfig


def resume_message(run_dir: Path) -> str:
    return f"dlsuite run --resume --out {shlex.quote(str(run_dir))} (and the same other flags)"


def stop_for_full_disk(
    run_dir: Path,
    lock: RunLock,
    manifest: Manifest | None,
    results: ResultsFile,
    task_ids: list[str],
    current: str | None,
    exc: OSError,
) -> DiskFullError:
    """The run cannot go on: free the reserve, remove what the interrupted task left half
    written, say in the manifest why the run stopped, and return the one-line error."""
    lock.free_reserve()
    if current is not None:
        for pattern in (f"tasks/{current}.*.records.jsonl*", f"telemetry/{current}-rank*.jsonl"):
            for partial in run_dir.glob(pattern):
                partial.unlink(missing_ok=True)
    for tmp in [*run_dir.glob(".*.tmp"), *run_dir.glob("*/.*.tmp")]:
        tmp.unlink(missing_ok=True)
    try:
        results.repair()
        have = results.complete_task_ids() & set(task_ids)
    except OSError:
        have = set()
    where = exc.filename or run_dir
    msg = (
        f"the disk is full ({exc.strerror} writing {where}); the run stopped with "
        f"{len(have)} of {len(task_ids)} tasks complete, nothing measured was lost"
        + (f" and {current} reruns" if current else "")
        + f"; free space on {run_dir}'s file system, then continue with: "
        + resume_message(run_dir)
    )
    if manifest is not None:
        try:
            manifest.save(state="stopped", stop_reason=msg)
        except OSError:
            msg += " (manifest.json could not be updated either)"
    return DiskFullError(msg)


def failure_record(
    doc: dict[str, Any],
    status: str,
    message: str,
    log_rel: str,
    log_tail: str,
    started_at: str,
    duration_s: float,
    error_type: str | None = None,
    evidence: str | None = None,
) -> dict[str, Any]:
    rec = record_skeleton(doc, host=hostname(), started_at=started_at)
    error = {
        "type": error_type
        or {"timeout": "Timeout", "oom": "OutOfMemory"}.get(status, "WorkerDied"),
        "message": message + ("\n--- worker log (tail) ---\n" + log_tail if log_tail else ""),
        "log": log_rel,
    }
    if evidence:
        error["evidence"] = evidence
    rec.update(status=status, reason=message, duration_s=duration_s, error=error)
    return rec


def tail(path: Path, n: int = 2000) -> str:
    try:
        data = path.read_bytes()
    except OSError:
        return ""
    return data[-n:].decode("utf-8", "replace")


def run(
    cfg: RunConfig,
    tasks: list[Task],
    argv: list[str],
    console: Console | None = None,
    scheduler_section: dict[str, Any] | None = None,
) -> RunOutcome:
    """Run ``tasks`` here, now, into ``cfg.out``. ``scheduler_section``: what every record's
    ``scheduler`` says, given by the scheduler whose job this runs in (None: no job)."""
    console = console or Console(stderr=True)
    run_dir = Path(cfg.out) if cfg.out else default_run_dir(cfg)
    lock = open_run_dir(run_dir, cfg.resume, argv)
    try:
        return _run_locked(cfg, tasks, argv, console, run_dir, lock, scheduler_section)
    finally:
        lock.release()


def _run_locked(
    cfg: RunConfig,
    tasks: list[Task],
    argv: list[str],
    console: Console,
    run_dir: Path,
    lock: RunLock,
    job: dict[str, Any] | None,
) -> RunOutcome:
    results = ResultsFile(run_dir / "results.jsonl")
    manifest: Manifest | None = None
    task_ids = [t.task_id for t in tasks]
    try:
        retries: dict[str, dict[str, Any]] = {}
        done: set[str] = set()
        resumed = cfg.resume and results.path.exists()  # a first start has nothing to resume
        if cfg.resume:
            check_resumed_data(run_dir, cfg)
            dropped = results.repair()
            if dropped:
                console.print(
                    f"[yellow]resume: dropped a partial last line ({dropped} bytes) from "
                    f"{results.path}"
                )
            adopted = adopt_killed_points(run_dir, tasks, results)
            if adopted:
                resumed = True
                console.print(
                    f"resume: recorded {adopted} size(s) that tasks of the killed run had "
                    "measured (kept: those tasks measure only the sizes left)"
                )
            done = results.complete_task_ids()
            # a sweep stopped part-way measures only what it had left, its points stay
            rests = sweep_rests(tasks, done, results)
            superseded = run_dir / "superseded.jsonl"
            # other tasks with records that are not complete run again; those records move aside
            retries = results.supersede(
                {t for t in task_ids if t not in done and t not in rests}, superseded
            )
            for tid in rests:
                retries[tid] = results.retry_of_rest(tid, superseded)
            tasks = [
                dataclasses.replace(t, resume_params=rests[t.task_id]) if t.task_id in rests else t
                for t in tasks
            ]
        manifest = Manifest.open(run_dir, cfg, argv, task_ids)
        todo = [t for t in tasks if t.task_id not in done]
        if resumed:
            console.print(
                f"resume: {len(tasks) - len(todo)} of {len(tasks)} tasks are complete; running "
                f"{len(todo)} ({len(retries)} again after a failed, refused or lost attempt"
                + (
                    f"; {len(rests)} sweep(s) only for the points they had left, the points "
                    "measured before are kept"
                    if rests
                    else ""
                )
                + ")"
            )
        return _run_tasks(cfg, tasks, todo, done, retries, console, run_dir, manifest, results, job)
    except _TaskDiskFull as full:
        raise stop_for_full_disk(
            run_dir, lock, manifest, results, task_ids, full.task_id, full.error
        ) from None
    except OSError as exc:
        if not is_disk_full(exc):
            raise
        raise stop_for_full_disk(run_dir, lock, manifest, results, task_ids, None, exc) from None


def sweep_rests(
    tasks: list[Task], done: set[str], results: ResultsFile
) -> dict[str, dict[str, Any]]:
    """Per incomplete sweep whose earlier attempt kept the points it measured (each an ok
    record of its own, :func:`kept_points`) and recorded the rest as unfinished: the
    parameters of the points still to measure (``Benchmark.remaining``), which ``--resume``
    runs instead of the whole sweep. A task with an incomplete record for all its parameters
    (it failed before any point, or a Slurm placeholder) runs whole again."""
    from suite.levels import load_benchmark

    mine: dict[str, list[dict[str, Any]]] = {}
    for rec in read_records(results.path, strict=False):
        mine.setdefault(rec.get("task_id", ""), []).append(rec)
    rests: dict[str, dict[str, Any]] = {}
    for task in tasks:
        recs = mine.get(task.task_id, [])
        if task.task_id in done or not recs:
            continue
        kept = [r for r in recs if is_complete(r)]
        unfinished = [r for r in recs if not is_complete(r)]
        if not kept or any(r["benchmark"]["params"] == task.params for r in unfinished):
            continue
        bench = load_benchmark(task.level, task.benchmark)
        points = [r["benchmark"]["params"] for r in kept]
        if any(r["status"] != "ok" for r in kept) or not all(
            bench.covers(task.params, p) for p in points
        ):
            continue
        rest = bench.remaining(task.params, points)
        if rest is not None and rest != task.params:
            rests[task.task_id] = rest
    return rests


def adopt_killed_points(run_dir: Path, tasks: list[Task], results: ResultsFile) -> int:
    """A run killed outright (SIGKILL, a lost login session) recorded nothing of the task it
    was running, but a sweep had written the points it measured (suite/worker.py): each such
    task of the plan without a complete set of records gets those points as records, and one
    ``failed`` record for the rest (``RunKilled``), appended now, before ``--resume`` decides
    what to run (the task is not complete: it runs again for the points it had left,
    :func:`sweep_rests`). Returns how many points were recorded."""
    import json

    # (a sweep resumed for its rest has its earlier points and a placeholder for the rest)
    have = results.complete_task_ids()
    adopted = 0
    for task in tasks:
        doc_path = run_dir / "tasks" / f"{task.task_id}.json"
        if task.task_id in have or not doc_path.is_file():
            continue
        try:
            doc = json.loads(doc_path.read_text())
        except (OSError, ValueError):
            continue
        if "record_path" not in doc:
            continue
        # the attempt's file names in this run directory (a directory moved since: not its
        # old path)
        record_path = run_dir / "tasks" / Path(doc["record_path"]).name
        points = [points_path(record_path, r, task.world_size) for r in range(task.world_size)]
        if not any(p.exists() for p in points):
            continue
        log_rel = f"logs/{task.task_id}.log"
        why = failure_record(
            doc, "failed", "the run was killed while this task ran (it wrote no record); "
            "--resume runs it again", log_rel, "", now_iso(), 0.0, error_type="RunKilled",
        )  # fmt: skip
        recs = kept_points(task, doc, why, points)
        if any(r is not why for r in recs):
            results.append_many(recs)
            adopted += sum(r is not why for r in recs)
        for path in points:
            path.unlink(missing_ok=True)
    return adopted


class _TaskDiskFull(Exception):
    """The run directory's disk filled up while ``task_id`` ran or was recorded."""

    def __init__(self, task_id: str | None, error: OSError) -> None:
        super().__init__(task_id, error)
        self.task_id, self.error = task_id, error


def _run_tasks(
    cfg: RunConfig,
    tasks: list[Task],
    todo: list[Task],
    done: set[str],
    retries: dict[str, dict[str, Any]],
    console: Console,
    run_dir: Path,
    manifest: Manifest,
    results: ResultsFile,
    job: dict[str, Any] | None,
) -> RunOutcome:
    """``job``: the records' ``scheduler`` section (inside a scheduler's job), or None."""
    backends = BackendPool(cfg, console)
    provenance = host_provenance()
    progress = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[current]}"),
        console=console,
        transient=False,
        disable=not console.is_terminal and os.environ.get("DLSUITE_PROGRESS") != "1",
    )
    statuses: Counter[str] = Counter()
    done_tasks = 0
    # 1-rank data-parallel runs (also from before a resume): the scaling baselines.
    baselines = {
        scaling_key(r): r
        for r in read_records(results.path, strict=False)
        if r["benchmark"]["name"] == "data_parallel"
        and r.get("world_size") == 1
        and r["status"] == "ok"
    }

    # the strategies benchmark's allreduce baselines (also from before a resume)
    strategy_baselines = StrategyBaselines(read_records(results.path, strict=False))

    def on_sigterm(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt  # same path as Ctrl-C: terminate the worker, mark the run

    previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        with progress:
            bar = progress.add_task(f"run {manifest.run_id}", total=len(todo), current="")
            planned = len(todo)  # grows by each --retry-noisy round's tasks

            def record(task: Task, recs: list[dict[str, Any]]) -> None:
                """A task's records into results.jsonl (all or none) as soon as it ended."""
                nonlocal done_tasks
                try:
                    for rec in recs:
                        if rec["benchmark"]["name"] == "data_parallel" and rec["status"] == "ok":
                            if rec["world_size"] == 1:
                                baselines[scaling_key(rec)] = rec
                            else:
                                add_scaling_efficiency(rec, baselines.get(scaling_key(rec)))
                        strategy_baselines.observe(rec)
                        if job:
                            rec.setdefault("scheduler", job)
                        if task.task_id in retries:
                            rec["retry"] = retries[task.task_id]
                    if task.resume_params is not None:  # the rest of a sweep: replaces its
                        # placeholder, the points measured before stay
                        results.replace_unfinished(task.task_id, recs, run_dir / "superseded.jsonl")
                    else:
                        results.append_many(recs)  # all of a task's records, or none
                except OSError as exc:
                    if is_disk_full(exc):
                        raise _TaskDiskFull(task.task_id, exc) from None
                    raise
                statuses.update(rec["status"] for rec in recs)
                if not progress.disable:
                    progress.advance(bar)
                else:
                    done_tasks += 1
                    console.print(
                        f"[{done_tasks}/{planned}] {task.task_id}: "
                        f"{', '.join(f'{k}={v}' for k, v in sorted(statuses.items()))}"
                    )

            def current(task: Task) -> None:
                progress.update(bar, current=f"{task.benchmark} {task.dtype} {task.framework}")

            run_plan(cfg, todo, backends, run_dir, manifest.run_id, provenance, record, current)
            for _ in range(cfg.retry_noisy):
                again = noisy_tasks(results, tasks, retries, run_dir)
                if not again:
                    break
                planned += len(again)
                progress.update(bar, total=planned)
                console.print(f"--retry-noisy: measuring {len(again)} noisy task(s) again")
                run_plan(
                    cfg, again, backends, run_dir, manifest.run_id, provenance, record, current
                )
    except (KeyboardInterrupt, BrokenPipeError):  # a Ctrl-C, SIGTERM, the output's reader gone
        manifest.save(state="interrupted")
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)
    matrices = agreement_matrices(run_dir, tasks, todo, done, manifest.run_id, provenance)
    results.supersede({r["task_id"] for r in matrices}, run_dir / "superseded.jsonl")
    for rec in matrices:
        if job:
            rec.setdefault("scheduler", job)
    results.append_many(matrices)
    all_records = list(read_records(results.path))
    manifest.save(state="finished", counts=dict(Counter(r["status"] for r in all_records)))
    return RunOutcome(run_dir, all_records, len(todo), len(tasks) - len(todo))


def noisy_tasks(
    results: ResultsFile, tasks: list[Task], retries: dict[str, dict[str, Any]], run_dir: Path
) -> list[Task]:
    """The planned tasks with a noisy record (:func:`suite.results.noisy`): their records
    move to superseded.jsonl, and ``retries`` says in each new record which attempt it is
    and how wide the interval was."""
    from suite.summary import noisy_label

    why: dict[str, str] = {}
    for rec in read_records(results.path, strict=False):
        width = noisy(rec)
        if width is not None and rec["task_id"] not in why:
            why[rec["task_id"]] = f"noisy: the CI of the median was {noisy_label(rec, width)}"
    again = [t for t in tasks if t.task_id in why]
    moved = results.supersede({t.task_id for t in again}, run_dir / "superseded.jsonl")
    for tid, section in moved.items():
        retries[tid] = {**section, "previous_reason": why[tid]}
    return again


def run_plan(
    cfg: RunConfig,
    todo: list[Task],
    backends: BackendPool,
    run_dir: Path,
    run_id: str,
    provenance: dict[str, Any],
    record: Callable[[Task, list[dict[str, Any]]], None],
    current: Callable[[Task], None] = lambda task: None,
) -> None:
    """Run ``todo`` in worker sessions (suite/session.py), handing each task's records to
    ``record`` as the task ends: skipped where its adapter does not run the level, failed
    where its environment could not be made, else what its worker wrote (or why it wrote
    nothing). A session ended early (a task died, timed out or failed) is followed by a fresh
    one for the rest."""
    for group in sessions(todo, cfg.isolate):
        workers: list[Task] = []
        for task in group:
            not_here = level_not_run(task)
            if not_here:
                record(task, [skipped_record(task, run_id, not_here)])
                continue
            backend = backends.get(task)
            if isinstance(backend, SuiteError):
                record(task, [environment_failure(task, run_id, backend)])
                continue
            workers.append(task)
        while workers:
            backend = backends.get(workers[0])
            assert not isinstance(backend, SuiteError)  # such tasks were recorded above
            refused = backend.refused_task
            if refused:  # its worker cannot read this checkout's tasks: none is started again
                for task in workers:
                    record(task, [environment_failure(task, run_id, refused)])
                break
            current(workers[0])
            done = run_session(
                workers, run_dir, run_id, provenance, backend, cfg.isolate, record, current,
                say=lambda line: backends.console.print(line, markup=False, soft_wrap=True),
            )  # fmt: skip
            workers = workers[done:]


def agreement_matrices(
    run_dir: Path,
    tasks: list[Task],
    ran: list[Task],
    done: set[str],
    run_id: str,
    provenance: dict[str, Any],
) -> list[dict[str, Any]]:
    """The host's half of cross-framework agreement: a matrix record per point whose
    frameworks' tasks ran now (a resumed run with nothing new adds none)."""
    from suite.levels.network import agreement

    points: dict[str, dict[str, Any]] = {}
    fresh = {t.task_id for t in ran}
    for t in tasks:
        if t.benchmark != "agreement" or t.dtype != "fp32" or level_not_run(t):
            continue  # (an adapter that skips the network level has no point to compare)
        key = agreement.point_key(t.params, t.seed)
        info = points.setdefault(
            key,
            {"params": t.params, "size_set": t.size_set, "source": t.source,
             "frameworks": [], "fresh": False},
        )  # fmt: skip
        info["frameworks"].append(t.framework)
        info["fresh"] = info["fresh"] or t.task_id in fresh
    wanted = {
        k: v
        for k, v in points.items()
        if v["fresh"] and len(v["frameworks"]) > 1 and f"network-agreement-matrix-{k}" not in done
    }
    return agreement.matrix_records(run_dir, wanted, run_id, provenance)


class BackendPool:
    """One backend per kind, or per kind and framework for a backend that declares
    ``per_framework`` (its environment or image), made on first use (``Backend.create``). A
    venv backend builds the framework's environment then; if that fails, every task of the
    framework gets a failed record saying which package failed, and the run goes on with the
    other frameworks."""

    def __init__(self, cfg: RunConfig, console: Console) -> None:
        self.cfg, self.console = cfg, console
        self._made: dict[tuple[str, str], Backend | SuiteError] = {}

    def get(self, task: Task) -> Backend | SuiteError:
        """The backend of ``task``, or the error that made it (recorded once per framework)."""
        key = (task.backend, task.framework)
        if key in self._made:
            return self._made[key]
        try:
            cls = BACKENDS.load(task.backend)
            shared = (task.backend, "")  # one for every framework's tasks
            if not cls.per_framework:
                if shared not in self._made:
                    self._made[shared] = cls.create(task.framework, self.cfg)
                return self._made[shared]
            self._made[key] = cls.create(task.framework, self.cfg)
        except SuiteError as exc:
            self.console.print(
                f"dlsuite: {exc}; {task.framework}'s tasks are recorded as failed",
                style="red",
                markup=False,  # pip's words may hold brackets (dlsuite[dev])
                soft_wrap=True,  # one line, however narrow the terminal
            )
            self._made[key] = exc
        return self._made[key]


def level_not_run(task: Task) -> str:
    """Why the task's adapter does not run its level, or the strategy it declares it cannot
    run ("" when it does): known from the adapter class on the host, so no environment is
    built and no worker started for a task that would be skipped."""
    try:
        cls = ADAPTERS.load(task.framework)
    except SuiteError:
        return ""  # the worker reports an adapter that does not load
    if task.level not in cls.levels:
        return cls.levels_reason or f"{task.framework} does not run the {task.level} level"
    if task.benchmark == "strategies":  # a strategy the adapter declares it cannot run
        return cls.strategy_declined(task.params["strategy"])
    from suite.levels import load_benchmark  # what the benchmark knows from the class alone

    return load_benchmark(task.level, task.benchmark).host_declined(cls, task.params, task.dtype)


def host_record(task: Task, run_id: str, status: str, reason: str, **fields: Any) -> dict[str, Any]:
    """A record the host writes for a task no worker ran (skipped before it, or its
    environment failed)."""
    doc = task.document(run_id=run_id, record_path="", provenance={})
    rec = record_skeleton(doc, host=hostname(), started_at=now_iso())
    rec.update(status=status, reason=reason[:500], duration_s=0.0, **fields)
    return rec


def skipped_record(task: Task, run_id: str, reason: str) -> dict[str, Any]:
    return host_record(task, run_id, "skipped", reason)


def stamp_image(records: list[dict[str, Any]], backend: Any) -> None:
    """A container backend's image (name or SIF path, and id or digest) in every record,
    also in the failure records the runner writes for a worker that wrote none."""
    describe = getattr(backend, "describe", None)
    if describe is None:
        return
    for rec in records:
        rec["backend"].update(describe())


def say_why_it_did_not_start(
    records: list[dict[str, Any]], backend: Backend, session_log: Path
) -> None:
    """A worker (or a rank) that died without a record because its backend's tool could not
    start it (Apptainer's ``FATAL:`` for a SIF it cannot mount, the docker helper's "cannot
    create the container" when the daemon went away): that tool's line in the
    reason, which the run's table shows. (Before, only "worker exited with code 255 and wrote
    no record", or for ranks "... (a rank crashed or was killed)".)"""
    died = [
        r for r in records if (r.get("error") or {}).get("type") in ("WorkerDied", "RankFailed")
    ]
    said = backend.startup_failure(tail(session_log, 8000)) if died else None
    for rec in died if said else []:
        rec["reason"] = f"{backend.kind} could not start the worker: {said} ({rec['reason']})"


#: the last line of a worker that refused its task (or session) document: an older worker's
#: uncaught schema error (SchemaError; jsonschema's own in early versions)
REFUSED = re.compile(
    r"^(?:suite\.errors\.SchemaError|jsonschema\.exceptions\.ValidationError): (.+)$", re.M
)


#: what ended a run before its end, in the words of the record of the task in flight
INTERRUPTED_BY: dict[type[BaseException], str] = {
    KeyboardInterrupt: "Ctrl-C or SIGTERM",
    BrokenPipeError: "the reader of the run's output went away",
}


def worker_refused_its_task(output: str) -> str | None:
    """What the worker's schema said of its task document, where the worker's traceback shows
    that it refused it. The host validated the same document against this checkout's schema
    before it wrote it, so a refusal means the worker runs another suite (an image built from
    an older commit)."""
    if not re.search(r'schemas\.validate\("(?:task|session)"', output):
        return None
    said = REFUSED.findall(output)
    return said[-1].strip() if said else None


def say_the_worker_cannot_read_its_task(
    records: list[dict[str, Any]], backend: Backend, logs: list[Path]
) -> None:
    """A worker that died without a record because its suite refused the task document (an
    image built from an older suite than this checkout): why, in the reason, and the command
    that rebuilds the image. (Before: "worker exited with code 1 and wrote no record", a
    traceback in the log and, on the host, only a note that the image came from another
    commit.)"""
    died = [
        r for r in records if (r.get("error") or {}).get("type") in ("WorkerDied", "RankFailed")
    ]
    said = worker_refused_its_task("\n".join(tail(p, 8000) for p in logs)) if died else None
    if not said:
        return
    hint = backend.stale_worker_hint() or (
        "the worker's suite cannot read this checkout's task format; reinstall the suite where "
        "the worker runs, from this checkout"
    )
    for rec in died:
        rec["reason"] = f"{hint}: its worker refused the task document ({said})"
        rec["error"]["message"] = rec["reason"] + "\n" + rec["error"]["message"]
    # the rest of this backend's tasks fail with the same reason without a worker each (an
    # Apptainer user's start unpacks the SIF first: a minute or more per task, for nothing)
    from suite.images import ImageError

    describe = getattr(backend, "describe", None)
    backend.refused_task = ImageError(
        f"{hint}: not started, a worker of the same suite refused its task document ({said})",
        image=describe()["image"] if describe else None,
    )


def environment_failure(task: Task, run_id: str, exc: SuiteError) -> dict[str, Any]:
    error = {"type": type(exc).__name__, "message": str(exc)}
    rec = host_record(task, run_id, "failed", str(exc), error=error)
    image = getattr(exc, "image", None)  # the image or SIF a container backend did not find
    if image:
        rec["backend"]["image"] = image
    return rec


def merged_ranks(
    doc: dict[str, Any],
    record_path: Path,
    task: Task,
    result: Any,
    started: str,
    log_rel: str,
    log_path: Path,
    witness: KillWitness | None = None,
) -> list[dict[str, Any]]:
    """Every rank's records, merged per parameter point; a rank that wrote nothing fails the
    task (``oom`` where the kernel says it killed a process of the worker for memory)."""
    rank_records: list[dict[str, Any]] = []
    for r in range(task.world_size):
        rank_records.extend(read_records(record_path.with_name(f"{record_path.name}.rank{r}")))
    seen = {int(r.get("rank") or 0) for r in rank_records}
    failed = [r for r in rank_records if r["status"] in ("failed", "oom")]
    missing = set(range(task.world_size)) - seen
    refused = [r for r in rank_records if is_refusal(r)]
    if refused and missing:
        # A rank refused a busy machine (--require-quiet) and exited non-zero, so the launcher
        # stopped the others before they wrote anything: the task is skipped, saying why.
        return [merge_ranks([refused[0]], task.world_size, task.launcher)]
    if failed and missing and not _launcher_blames(missing, log_path):
        # A rank failed and said why; the others were stopped by the launcher. (When the
        # launcher saw a silent rank die first, the others' failures are its consequence,
        # e.g. a gloo read error, and the missing-ranks record below names the cause.)
        return [merge_ranks([failed[0]], task.world_size, task.launcher)]
    if len(seen) < task.world_size:
        how = (
            f"the launcher exited with code {result.returncode}"
            if result.returncode
            else "the launcher exited without them"
        )
        skeleton = failure_record(
            doc, "failed", how, log_rel, tail(log_path), started, result.duration_s
        )
        rec = missing_ranks_record(
            skeleton, seen, task.world_size, how + " (a rank crashed or was killed)"
        )
        killed = result.signal == "SIGKILL" or _says_sigkill(rec["reason"])
        verdict = witness.verdict() if witness is not None else None
        if verdict is not None and verdict.oom:
            rec.update(status="oom", reason=f"{rec['reason']}; {verdict.words}")
            rec["error"].update(type="OutOfMemory", evidence=verdict.evidence)
        elif killed and verdict is not None:
            rec["reason"] += f"; {OUTSIDE_KILL}"
            rec["error"]["evidence"] = verdict.evidence
        return [rec]
    return [
        merge_ranks(group, task.world_size, task.launcher)
        for group in group_by_point(rank_records).values()
    ]


def _says_sigkill(reason: str) -> bool:
    """Whether the launcher's report (in ``reason``) says a rank died from SIGKILL."""
    return "SIGKILL" in reason or "signal 9)" in reason or "on signal 9" in reason


def _launcher_blames(ranks: set[int], log_path: Path) -> bool:
    """Whether the launcher's own report says one of ``ranks`` failed first."""
    import re

    from suite.aggregate import launcher_root_cause

    cause = launcher_root_cause(tail(log_path))
    m = re.search(r"rank (\d+)", cause or "")
    return m is not None and int(m.group(1)) in ranks


def run_session(
    tasks: list[Task],
    run_dir: Path,
    run_id: str,
    provenance: dict[str, Any],
    backend: Any,
    isolate: str,
    record: Callable[[Task, list[dict[str, Any]]], None],
    current: Callable[[Task], None] = lambda task: None,
    say: Callable[[str], None] = lambda line: None,
) -> int:
    """Start one worker session for ``tasks`` (which share a session key) and record each
    task as it ends; returns how many tasks it took (all, or up to the first that died, timed
    out or failed: the caller starts a fresh session for the rest). ``say``: a line for the
    user, once per backend, where the backend's tool says the worker's start takes long."""
    sid = f"s{uuid.uuid4().hex[:12]}"
    first = tasks[0]
    docs: list[dict[str, Any]] = []
    for task in tasks:
        tid = task.task_id
        doc = task.document(
            run_id=run_id,
            record_path=str((run_dir / "tasks" / f"{tid}.{uuid.uuid4().hex[:8]}.records.jsonl").resolve()),
            provenance=provenance,
        )  # fmt: skip
        reason = isolation_reason(task, isolate)
        doc.update(
            run_lock=str((run_dir / LOCK_NAME).resolve()),  # the worker's watchdog (rundir.py)
            log_path=str((run_dir / "logs" / f"{tid}.log").resolve()),
            isolation={"mode": "task" if reason else "session", "reason": reason},
        )
        schemas.validate("task", doc)
        write_json_atomic(run_dir / "tasks" / f"{tid}.json", doc)
        docs.append(doc)
    (run_dir / "sessions").mkdir(exist_ok=True)
    session_path = (run_dir / "sessions" / f"{sid}.json").resolve()
    session_doc = {
        "schema_version": suite.SCHEMA_VERSION,
        "session_id": sid,
        "tasks": [str((run_dir / "tasks" / f"{t.task_id}.json").resolve()) for t in tasks],
        "progress_dir": str(session_path.parent),
        "run_lock": str((run_dir / LOCK_NAME).resolve()),
    }
    schemas.validate("session", session_doc)
    write_json_atomic(session_path, session_doc)
    session_log = run_dir / "logs" / f"{sid}.log"
    # Always through a launcher, also for one rank: "single" sets RANK=0/WORLD_SIZE=1, so a
    # worker inside a Slurm step or a torchrun job never takes the outer job's rank for its own.
    launcher = LAUNCHERS.load(first.launcher if first.world_size > 1 else "single")()
    started = now_iso()
    # a memory cgroup of the session's own where the runner may make one (suite/oom.py): a
    # SIGKILL is an OOM kill only where the kernel says so
    # (ranks that srun or a multi-node mpirun start are not the runner's descendants: their
    # evidence is Slurm's, in the session's output)
    outside = first.world_size > 1 and (first.nodes > 1 or launcher.name == "srun")
    witness = KillWitness.open(session_path, sid, ranks_inside=not outside, log_path=session_log)
    try:
        proc = backend.start(
            session_path, session_log, launcher=launcher, world_size=first.world_size,
            nodes=first.nodes, cgroup=witness.cgroup,
        )  # fmt: skip
    except BaseException:
        witness.close()
        raise
    witness.pids.add(proc.pid)
    events = SessionProgress(lambda r: progress_path(run_dir, sid, r), first.world_size)
    taken = 0
    ended_early = True
    # until the first task ends, the session's output every half second: a backend's tool
    # that says the start takes long (Apptainer unpacking a SIF: a minute or more, and no
    # progress bar where the output is not a terminal) gets one line, once per backend
    watching, next_look = not backend.said_slow_start, 0.0

    def watch_start() -> None:
        nonlocal watching, next_look
        if not watching or time.monotonic() < next_look:
            return
        next_look = time.monotonic() + 0.5
        said = backend.slow_start(tail(session_log, 4000))
        if said:
            say(said)
            watching = False
            backend.said_slow_start = True

    try:
        for fin in follow(
            proc,
            [t.task_id for t in tasks],
            [t.timeout_s for t in tasks],
            events,
            terminate=lambda: terminate_group(proc, backend.stop_grace_s),
            exit_grace_s=backend.exit_grace_s,
            watch=watch_start,
        ):
            watching = False
            task, doc = tasks[fin.index], docs[fin.index]
            result = WorkerResult(
                0 if fin.how == "ended" else fin.returncode,
                fin.how == "timeout",
                fin.duration_s,
                fin.signal,
            )
            witness.pids.update(events.pids)
            recs = task_records(task, doc, result, run_dir, session_log, started, witness)
            for rec in recs:
                rec.setdefault(
                    "worker",
                    {"isolation": doc["isolation"]["mode"],
                     "isolation_reason": doc["isolation"]["reason"],
                     "session_id": sid, "position": fin.index},
                )  # fmt: skip
            stamp_image(recs, backend)
            say_why_it_did_not_start(recs, backend, session_log)
            say_the_worker_cannot_read_its_task(recs, backend, [session_log, Path(doc["log_path"])])
            taken = fin.index + 1
            record(task, recs)
            started = now_iso()
            witness.task_started()
            if taken < len(tasks) and fin.how == "ended":
                current(tasks[taken])
        ended_early = proc.poll() is None
    except (KeyboardInterrupt, BrokenPipeError) as exc:  # the task in flight keeps what it measured
        # a Ctrl-C, SIGTERM, or the reader of the run's output gone (`dlsuite run 2>&1 | head`)
        if proc.poll() is None:
            terminate_group(proc)
        if taken < len(tasks):
            doc = docs[taken]
            log_rel = str(Path(doc["log_path"]).relative_to(run_dir.resolve()))
            why = failure_record(
                doc, "failed", f"interrupted while it ran ({INTERRUPTED_BY[type(exc)]}); "
                "--resume runs it again", log_rel, "", started, 0.0, error_type="Interrupted",
            )  # fmt: skip
            points = [points_path(doc["record_path"], r, first.world_size)
                      for r in range(first.world_size)]  # fmt: skip
            recs = kept_points(tasks[taken], doc, why, points)
            if any(r is not why for r in recs):  # kept, the rest failed; none: rerun on resume
                stamp_image(recs, backend)
                record(tasks[taken], recs)
                for path in points:
                    path.unlink(missing_ok=True)
        raise
    finally:
        if proc.poll() is None:  # an interrupt, a full disk: leave no worker behind
            terminate_group(proc, backend.stop_grace_s)
        backend.finish(session_path, ended_early)
        witness.close()  # (also SIGKILLs what of the worker outlived its process group)
    return taken


def task_records(
    task: Task,
    doc: dict[str, Any],
    result: WorkerResult,
    run_dir: Path,
    session_log: Path,
    started: str,
    witness: KillWitness | None = None,
) -> list[dict[str, Any]]:
    """What the task's worker wrote, or, when it wrote nothing (it died, timed out), a
    record saying why. A worker killed by SIGKILL is ``oom`` only where ``witness`` has the
    kernel's word for it (suite/oom.py), else ``failed``. A sweep that did not finish keeps
    the points it measured before (:func:`kept_points`)."""
    records = _task_records(task, doc, result, run_dir, session_log, started, witness)
    points = [points_path(doc["record_path"], r, task.world_size) for r in range(task.world_size)]
    if len(records) == 1 and records[0]["status"] in ("failed", "timeout", "oom"):
        records = kept_points(task, doc, records[0], points)
    for path in points:
        path.unlink(missing_ok=True)
    return records


def kept_points(
    task: Task, doc: dict[str, Any], unfinished: dict[str, Any], points: list[Path]
) -> list[dict[str, Any]]:
    """The records of the points a sweep measured before it stopped (each written aside as
    it was measured: suite/worker.py), every rank's merged (a point some rank had not finished
    is left out), then ``unfinished``, the task's record of why it stopped, narrowed to the
    parameters it left unmeasured (:meth:`~suite.benchmark.Benchmark.remaining`) and saying
    how many points were kept; it is dropped when nothing was left. Only a record that stands
    for the whole task (the task's own parameters) is narrowed."""
    from suite.levels import load_benchmark

    if unfinished["benchmark"]["params"] != doc["params"]:
        return [unfinished]
    per_rank: list[dict[str, Any]] = []
    for path in points:
        per_rank.extend(read_records(path, strict=False))
    kept = []
    for group in group_by_point(per_rank).values():
        if {int(r.get("rank") or 0) for r in group} != set(range(task.world_size)):
            continue
        rec = (
            group[0] if task.world_size == 1 else merge_ranks(group, task.world_size, task.launcher)
        )
        try:
            validate_record(rec)
        except SuiteError:
            continue
        kept.append(rec)
    if not kept:
        return [unfinished]
    bench = load_benchmark(task.level, task.benchmark)
    rest = bench.remaining(doc["params"], [r["benchmark"]["params"] for r in kept])
    if rest is None:  # every point was measured: the task's records are those
        return kept
    n, word = len(kept), bench.point_word
    note = (
        f"; the {n} {word}s measured before are kept as records of their own"
        if n > 1
        else f"; the 1 {word} measured before is kept as a record of its own"
    ) + ", this record stands for the rest"
    unfinished["benchmark"]["params"] = rest
    # one attempt: --resume counts a task's attempts by their start (results.py: supersede)
    unfinished["started_at"] = kept[0]["started_at"]
    unfinished["reason"] = (unfinished.get("reason") or unfinished["status"]) + note
    if unfinished.get("error"):
        first, sep, after = unfinished["error"]["message"].partition("\n")
        unfinished["error"]["message"] = first + note + sep + after
    return [*kept, unfinished]


def _task_records(
    task: Task,
    doc: dict[str, Any],
    result: WorkerResult,
    run_dir: Path,
    session_log: Path,
    started: str,
    witness: KillWitness | None = None,
) -> list[dict[str, Any]]:
    record_path = Path(doc["record_path"])
    log_path = Path(doc["log_path"])
    if result.returncode and (
        result.returncode == EXIT_DISK_FULL or free_bytes(run_dir) < FULL_BELOW_BYTES
    ):
        # the worker could not write its record (or its log) for want of space: no record,
        # the run stops and --resume runs the task again
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(record_path))
    log_rel = str(log_path.relative_to(run_dir.resolve()))
    records: list[dict[str, Any]] = []
    if not result.timed_out:
        try:
            if task.world_size == 1:
                records = list(read_records(record_path))
            else:
                records = merged_ranks(
                    doc, record_path, task, result, started, log_rel, session_log, witness
                )
        except SuiteError:
            records = []
    if records:
        try:
            for rec in records:
                validate_record(rec)
            if witness is not None and any(r["status"] == "failed" for r in records):
                oom_inside(records, witness)
            return records
        except SuiteError as exc:
            return [
                failure_record(
                    doc,
                    "failed",
                    f"worker wrote an invalid record: {exc}",
                    log_rel,
                    task_log_tail(log_path, session_log),
                    started,
                    result.duration_s,
                    error_type="InvalidRecord",
                )
            ]
    if result.timed_out:
        msg = f"task exceeded its timeout of {task.timeout_s:g} s; the worker was terminated"
        status = "timeout"
    elif result.signal == "SIGKILL":
        verdict = witness.verdict() if witness is not None else Verdict(False, "nothing")
        words = verdict.words if verdict.oom else OUTSIDE_KILL
        return [
            failure_record(
                doc, "oom" if verdict.oom else "failed", f"worker {words}; it wrote no record",
                log_rel, task_log_tail(log_path, session_log), started, result.duration_s,
                evidence=verdict.evidence,
            )
        ]  # fmt: skip
    elif result.signal:
        msg = f"worker died from {result.signal} and wrote no record"
        status = "failed"
    else:
        msg = f"worker exited with code {result.returncode} and wrote no record"
        status = "failed"
    return [
        failure_record(
            doc, status, msg, log_rel, task_log_tail(log_path, session_log), started,
            result.duration_s,
        )
    ]  # fmt: skip


def oom_inside(records: list[dict[str, Any]], witness: KillWitness) -> None:
    """A task that failed inside its worker while the kernel OOM-killed one of the worker's
    processes (a data loader's worker, a compiler) failed for memory: ``oom``, with the
    evidence beside the worker's own reason."""
    verdict = witness.verdict()
    if not verdict.oom:
        return
    for rec in records:
        if rec["status"] == "failed":
            rec["status"] = "oom"
            rec["reason"] = (
                f"{rec.get('reason') or 'failed'}; a process of the worker was {OOM_KILL}"
            )
            error = rec.setdefault("error", {"type": "OutOfMemory", "message": rec["reason"]})
            error["evidence"] = verdict.evidence


def task_log_tail(log_path: Path, session_log: Path, n: int = 2000) -> str:
    """The end of the task's own output and of its session's (the launcher's and the
    worker's outside any task: a crash at start-up is there)."""
    parts = [tail(log_path, n)]
    session = tail(session_log, n)
    if session.strip():
        parts.append(f"--- {session_log.name} (the session's output) ---\n{session}")
    return "\n".join(p for p in parts if p)
