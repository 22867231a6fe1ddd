"""The run directory: one run at a time, files written whole or not at all, a full disk that
stops the run cleanly.

* **The lock.** ``RUN_DIR/.lock`` is held with ``flock`` (an advisory, exclusive lock the
  kernel drops when the holding process dies, however it dies) for the whole run. A second
  ``dlsuite run`` on the same ``--out`` (``--resume`` too) exits 2 naming the holder, which the
  lock file describes (pid, host, start, command line). Workers watch the same lock
  (:func:`watch_runner`): when the runner is gone, they end themselves and the launcher and
  ranks of their process group, so a killed runner leaves no worker holding a GPU.
* **Atomic files.** :func:`write_json_atomic` writes a unique temporary file beside the target,
  fsyncs it and renames it over the target; on any error the temporary file is removed.
* **A full disk.** A 1 MiB reserve file is allocated when the lock is taken. When a write
  fails with ENOSPC or EDQUOT, the runner deletes the reserve, which frees room for the
  manifest to say why the run stopped, then stops with one line (:class:`DiskFullError`).
* **What a run leaves.** :func:`open_run_dir` makes the directory and takes the lock;
  :class:`Manifest` is ``manifest.json`` (run id, config, plan, state, updated atomically);
  :class:`RunOutcome` is what a scheduler returns when the run is over.

The bottom of the host side: every scheduler and the runner use this module, and it imports
none of them (arrows run cli -> schedulers -> runner -> rundir).
"""

from __future__ import annotations

import datetime as dt
import errno
import fcntl
import json
import os
import signal
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import suite
from suite import schemas
from suite.errors import OutputError
from suite.provenance import git_info, hostname, now_iso

if TYPE_CHECKING:
    from suite.settings import RunConfig

LOCK_NAME = ".lock"
RESERVE_NAME = ".reserve"
RESERVE_BYTES = 1 << 20
#: free space (bytes) under which a worker that died without a record is taken to have died of
#: a full disk (its own error may be lost: its log is on the same disk)
FULL_BELOW_BYTES = RESERVE_BYTES
#: how a worker that could not write its record for want of space exits
EXIT_DISK_FULL = 75  # EX_TEMPFAIL: "try again later", which --resume does
DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
WATCH_INTERVAL_S = 0.5


class RunDirBusyError(OutputError):
    """Another run holds the run directory."""


class DiskFullError(OutputError):
    """The run directory's file system is full; the run stopped and can be resumed."""


def is_disk_full(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in DISK_FULL_ERRNOS


def free_bytes(path: Path) -> int:
    """Bytes an unprivileged writer may still use on ``path``'s file system."""
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def write_json_atomic(path: Path, doc: dict[str, Any]) -> None:
    """``doc`` as indented JSON at ``path`` (NaN refused: it is not JSON)."""
    write_text_atomic(path, json.dumps(doc, indent=2, sort_keys=True, allow_nan=False) + "\n")


def appended_lines(path: Path, offset: int) -> bytes:
    """The whole lines a writer appended to ``path`` after byte ``offset`` (a last line still
    being written is left for the next read); OSError when the file cannot be read."""
    with path.open("rb") as fh:
        fh.seek(offset)
        data = fh.read()
    return data[: data.rfind(b"\n") + 1]


def write_text_atomic(path: Path, text: str) -> None:
    """``text`` at ``path``: whole or not at all, never a stray temporary file. The temporary
    name is unique, so two writers never share one."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would hide the file from a container's user
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


class RunLock:
    """The exclusive lock on a run directory, held from :meth:`acquire` to :meth:`release`.

    The lock file's descriptor is close-on-exec, so no worker inherits the lock and a dead
    runner's lock is free at once, even while its workers still run."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.path = run_dir / LOCK_NAME
        self.reserve = run_dir / RESERVE_NAME
        self._fd: int | None = None

    def acquire(self, argv: list[str], out_flag: str) -> RunLock:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise
            raise RunDirBusyError(
                f"--out {out_flag}: in use by another dlsuite run ({self.holder()}); wait for "
                "it to end (or stop it), or choose another --out"
            ) from None
        self._fd = fd
        info = {"pid": os.getpid(), "host": hostname(), "started_at": now_iso(), "argv": argv}
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, (json.dumps(info) + "\n").encode(), 0)
            self._allocate_reserve()
        except OSError as exc:
            self.release()
            if is_disk_full(exc):
                raise DiskFullError(
                    f"--out {out_flag}: the disk is full ({free_bytes(self.run_dir)} bytes "
                    "free); free some space and run again (nothing was measured or lost)"
                ) from None
            raise
        return self

    def _allocate_reserve(self) -> None:
        if self.reserve.exists() and self.reserve.stat().st_size >= RESERVE_BYTES:
            return
        fd = os.open(self.reserve, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            os.posix_fallocate(fd, 0, RESERVE_BYTES)
        except OSError:
            os.close(fd)
            self.reserve.unlink(missing_ok=True)
            raise
        os.close(fd)

    def free_reserve(self) -> None:
        """Give the reserve back to the file system (on a full disk, before the last writes)."""
        self.reserve.unlink(missing_ok=True)

    def holder(self) -> str:
        """Who holds the lock, as the lock file says."""
        try:
            info = json.loads(self.path.read_text(encoding="utf-8") or "{}")
        except (OSError, ValueError):
            return "holder unknown"
        argv = " ".join(info.get("argv") or [])
        return (
            f"pid {info.get('pid', '?')} on {info.get('host', '?')}, started "
            f"{info.get('started_at', '?')}" + (f": dlsuite {argv}" if argv else "")
        )

    def release(self) -> None:
        if self._fd is None:
            return
        self.free_reserve()
        try:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        finally:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> RunLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def runner_alive(lock_path: Path) -> bool | None:
    """Whether a runner holds ``lock_path`` (None: there is no such file to ask)."""
    try:
        fd = os.open(lock_path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)  # closing the descriptor drops a shared lock taken just now
    return False


def watch_runner(lock_path: Path, interval_s: float = WATCH_INTERVAL_S) -> threading.Thread | None:
    """In a worker: a daemon thread that ends this process group when the runner that holds
    ``lock_path`` is gone (killed with SIGKILL, its node's OOM killer, a crash), so no worker,
    launcher or rank outlives it. Works through bind mounts (docker, apptainer): the lock is
    the kernel's. Not started when no runner holds the lock now (a worker run by hand)."""
    if runner_alive(lock_path) is not True:
        return None

    def watch() -> None:
        while True:
            time.sleep(interval_s)
            if runner_alive(lock_path) is False:
                print(
                    f"[dlsuite.worker] the runner holding {lock_path} is gone; ending this "
                    "worker and its process group",
                    file=sys.stderr,
                    flush=True,
                )
                try:
                    os.killpg(os.getpgrp(), signal.SIGKILL)
                finally:
                    os._exit(137)

    thread = threading.Thread(target=watch, name="dlsuite-runner-watch", daemon=True)
    thread.start()
    return thread


@dataclass
class RunOutcome:
    """A run's end: its directory, every record in its results.jsonl, how many tasks ran now
    and how many were already done (``--resume``)."""

    run_dir: Path
    records: list[dict[str, Any]]
    ran: int
    skipped_done: int


def default_run_dir(cfg: RunConfig) -> Path:
    """``runs/<timestamp>-<levels>`` (``--out`` not given)."""
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path("runs") / f"{stamp}-{'-'.join(cfg.level)}"


def open_run_dir(path: Path, resume: bool, argv: list[str]) -> RunLock:
    """Create the run directory and take its lock (a second run on it exits 2 naming the
    holder); refuse to write over results unless resuming. The caller releases the lock."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        lock = RunLock(path).acquire(argv, str(path))
    except OSError as exc:
        raise OutputError(
            f"--out {path}: cannot write there ({exc.strerror}); choose a writable directory"
        ) from None
    try:
        results = path / "results.jsonl"
        if results.exists() and results.stat().st_size > 0 and not resume:
            raise OutputError(
                f"--out {path}: already holds results; add --resume to continue that run, "
                "or choose another --out (nothing was overwritten)"
            )
        try:
            for sub in ("tasks", "logs"):
                (path / sub).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise OutputError(
                f"--out {path}: cannot write there ({exc.strerror}); choose a writable directory"
            ) from None
    except BaseException:
        lock.release()
        raise
    return lock


def check_resumed_data(run_dir: Path, cfg: RunConfig) -> None:
    """``--resume`` with ``--data`` a dataset whose contents changed since the run measured it
    (the same path, other samples, files or bytes): one ConfigError before anything moves;
    its complete tasks would be kept and the rest measured on other data, one run mixing
    two datasets under one path."""
    from suite.errors import ConfigError

    path = run_dir / "manifest.json"
    now = cfg.data_found
    if now is None or not path.is_file():
        return
    try:
        then = json.loads(path.read_text()).get("config", {}).get("data_found")
    except (OSError, ValueError, AttributeError):
        return  # an unreadable manifest is rewritten by the resumed run, as before
    if not isinstance(then, dict) or then.get("path") != now.get("path"):
        return
    keys = ("samples", "files", "bytes", "classes")
    if all(then[k] == now.get(k) for k in keys if k in then):  # what an older run recorded
        return

    def said(doc: dict[str, Any]) -> str:
        return ", ".join(f"{doc.get(k):,} {k}" for k in keys if isinstance(doc.get(k), int))

    raise ConfigError(
        f"--resume --data {now['path']}: the dataset changed since this run measured it "
        f"(then {said(then)}; now {said(now)}); its records would mix two datasets: give a "
        "new --out, or restore the dataset to resume"
    )


class Manifest:
    """``RUN_DIR/manifest.json``: the run id, config and plan, and the run's state; every
    save is validated against the manifest schema and written atomically."""

    def __init__(self, path: Path, doc: dict[str, Any]) -> None:
        self.path, self.doc = path, doc

    @classmethod
    def open(cls, run_dir: Path, cfg: RunConfig, argv: list[str], task_ids: list[str]) -> Manifest:
        path = run_dir / "manifest.json"
        if path.exists():
            doc = json.loads(path.read_text())
            doc["resumes"] = doc.get("resumes", 0) + 1
            doc["tasks"] = list(dict.fromkeys(doc.get("tasks", []) + task_ids))
        else:
            doc = {
                "schema_version": suite.SCHEMA_VERSION,
                "run_id": uuid.uuid4().hex[:12],
                "created_at": now_iso(),
                "suite_version": suite.__version__,
                "git_commit": git_info()[0],
                "host": hostname(),
                "tasks": task_ids,
                "resumes": 0,
            }
        doc.update(argv=argv, config=cfg.to_dict(), state="running", updated_at=now_iso())
        m = cls(path, doc)
        m.save()
        return m

    @property
    def run_id(self) -> str:
        run_id: str = self.doc["run_id"]
        return run_id

    def save(self, **updates: Any) -> None:
        self.doc.update(updates, updated_at=now_iso())
        schemas.validate("manifest", self.doc)
        write_json_atomic(self.path, self.doc)
