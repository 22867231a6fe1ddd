"""The history of every run: an embedded SQLite store that ``dlsuite run`` appends to.

``dlsuite compare`` sees two runs; a centre that benchmarks every week, or after every driver
or framework upgrade, needs the whole history of a figure on a machine. This module keeps it:
one row per run, one per record, one per figure (record x metric) and one per correctness
check, queried by ``dlsuite history`` (suite/cli/history.py), the check and the trends
(suite/history/analysis.py) and the report's trend plots (suite/history/report.py); run
directories come in through suite/history/ingest.py. The host side only: no framework, no
matplotlib here.

**Why SQLite, not DuckDB.** The store has one job that decides it: two runs finishing at the
same moment (two Slurm jobs, two CI runs on one machine) must both land. DuckDB allows one
writing *process* at a time (a second one fails to open the file); SQLite in WAL mode lets any
number of processes take turns, each waiting for the other's transaction
(``busy_timeout``), while readers never block. The queries the store serves are small (one
task's last N runs on one host, one figure's trend, the list of runs), which SQLite answers
through an index; DuckDB's column scans pay off on large aggregations this store never runs.
And ``sqlite3`` is in the standard library: nothing to install on a login node. On a network
file system (NFS, Lustre, GPFS, ...) WAL's shared memory does not work across hosts, so there the
store uses SQLite's rollback journal instead (:func:`journal_mode_for`).

**The records stay the source of truth.** Everything in the store is derived from run
directories (``results.jsonl`` and ``manifest.json``): ``dlsuite history rebuild RUN_DIR...``
makes it again, and a store that cannot be read is a :class:`HistoryStoreError` (exit 2) naming
that command, never a reason to touch a record. A run is keyed by its run id: importing it
again changes nothing (same records) or replaces it (a resumed run that gained records).

**Queries take parameters.** Every statement here is a constant string; every value a user
typed travels as a bound parameter (lists as a JSON array read with ``json_each``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shlex
import sqlite3
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from suite.compare import BAD_STATUSES
from suite.errors import ConfigError
from suite.levels import task_covers
from suite.report.load import base_identity, device_identity, load_run
from suite.summary import busy_findings

STORE_SCHEMA_VERSION = "4"
#: what each older version lacks, added in place when the store is opened (where it can be written):
#: 1 -> 2, records.busy (the quiet check's first busy finding; NULL for the records before it);
#: 2 -> 3, records.setup (what the figure was measured with besides the framework: record_setup);
#: 3 -> 4, the peak a % of peak divides by, in records.setup (a share of another peak is not
#: compared: suite.compare.peak_change).
#: Each is read back from the run directories that are still there.
_UPGRADES = {
    "1": ("ALTER TABLE records ADD COLUMN busy TEXT",),
    "2": ("ALTER TABLE records ADD COLUMN setup TEXT",),
    "3": (),
}
ENV_VAR = "DLSUITE_HISTORY"
MEMORY = Path(":memory:")  # an in-memory store (a run directory checked without importing it)
STORE_NAME = "history.sqlite"
#: how long a writer waits for another process's transaction before giving up (seconds)
BUSY_TIMEOUT_S = 60.0
#: file systems on which SQLite's WAL (shared memory between processes) is not safe across
#: hosts: there the store uses the rollback journal ("delete"), which relies on POSIX locks only
NETWORK_FILE_SYSTEMS = frozenset(
    {"nfs", "nfs4", "lustre", "gpfs", "beegfs", "cifs", "smb3", "smbfs", "ceph", "glusterfs",
     "fuse.glusterfs", "fuse.sshfs", "fuse.cephfs", "panfs", "wekafs", "afs", "9p", "virtiofs"}
)  # fmt: skip

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY,
    run_dir TEXT NOT NULL,
    host TEXT NOT NULL,
    devices TEXT NOT NULL,
    cpu_model TEXT,
    suite_version TEXT,
    git_commit TEXT,
    git_dirty INTEGER,
    frameworks TEXT NOT NULL,
    started_at TEXT NOT NULL,
    finished_at TEXT,
    state TEXT NOT NULL,
    n_records INTEGER NOT NULL,
    n_ok INTEGER NOT NULL,
    n_skipped INTEGER NOT NULL,
    n_failed INTEGER NOT NULL,
    n_wrong INTEGER NOT NULL,
    digest TEXT NOT NULL,
    added_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS runs_by_time ON runs (started_at, run_id);
CREATE TABLE IF NOT EXISTS records (
    record_id INTEGER PRIMARY KEY,
    run_id TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
    line INTEGER NOT NULL,
    task_id TEXT NOT NULL,
    level TEXT NOT NULL,
    benchmark TEXT NOT NULL,
    params_key TEXT NOT NULL,
    framework TEXT NOT NULL,
    framework_version TEXT,
    dtype TEXT NOT NULL,
    device_kind TEXT,
    device_name TEXT,
    driver TEXT,
    world_size INTEGER NOT NULL,
    rank INTEGER NOT NULL,
    host TEXT NOT NULL,
    status TEXT NOT NULL,
    correctness_passed INTEGER,
    reason TEXT,
    error_type TEXT,
    started_at TEXT NOT NULL,
    busy TEXT,
    setup TEXT
);
CREATE INDEX IF NOT EXISTS records_by_task
    ON records (level, benchmark, params_key, framework, dtype, world_size, rank, host);
CREATE INDEX IF NOT EXISTS records_by_run ON records (run_id, line);
CREATE TABLE IF NOT EXISTS figures (
    record_id INTEGER NOT NULL REFERENCES records (record_id) ON DELETE CASCADE,
    position INTEGER NOT NULL,
    metric TEXT NOT NULL,
    unit TEXT NOT NULL,
    higher_is_better INTEGER NOT NULL,
    value REAL NOT NULL,
    median REAL,
    ci_lo REAL,
    ci_hi REAL,
    n INTEGER,
    PRIMARY KEY (record_id, position)
);
CREATE TABLE IF NOT EXISTS checks (
    record_id INTEGER NOT NULL REFERENCES records (record_id) ON DELETE CASCADE,
    position INTEGER NOT NULL,
    name TEXT NOT NULL,
    passed INTEGER NOT NULL,
    error REAL,
    tolerance REAL NOT NULL,
    PRIMARY KEY (record_id, position)
);
CREATE VIEW IF NOT EXISTS figure_history AS
    SELECT u.host AS run_host, u.started_at AS run_started_at, u.run_id, u.suite_version,
           u.git_commit, r.host, r.level, r.benchmark, r.params_key, r.framework,
           r.framework_version, r.dtype, r.device_kind, r.device_name, r.driver, r.world_size,
           r.rank, r.status, r.correctness_passed, f.metric, f.unit, f.higher_is_better,
           f.value, f.median, f.ci_lo, f.ci_hi, f.n
    FROM figures f JOIN records r ON r.record_id = f.record_id
    JOIN runs u ON u.run_id = r.run_id;
"""

_RUN_COLUMNS = (
    "run_id", "run_dir", "host", "devices", "cpu_model", "suite_version", "git_commit",
    "git_dirty", "frameworks", "started_at", "finished_at", "state", "n_records", "n_ok",
    "n_skipped", "n_failed", "n_wrong", "digest", "added_at",
)  # fmt: skip
_INSERT_RUN = "INSERT INTO runs VALUES (" + ", ".join("?" * len(_RUN_COLUMNS)) + ")"
_INSERT_RECORD = """INSERT INTO records (run_id, line, task_id, level, benchmark, params_key,
    framework, framework_version, dtype, device_kind, device_name, driver, world_size, rank,
    host, status, correctness_passed, reason, error_type, started_at, busy, setup)
    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"""
_INSERT_FIGURE = "INSERT INTO figures VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
_INSERT_CHECK = "INSERT INTO checks VALUES (?, ?, ?, ?, ?, ?)"

_RECORD_SELECT = """SELECT r.record_id, r.run_id, r.line, r.task_id, r.level, r.benchmark,
    r.params_key, r.framework, r.framework_version, r.dtype, r.device_kind, r.device_name,
    r.driver, r.world_size, r.rank, r.host, r.status, r.correctness_passed, r.reason,
    r.error_type, r.started_at, r.busy, r.setup
    FROM records r JOIN runs u ON u.run_id = r.run_id"""
# Filters are NULL (no filter) or a JSON array of accepted values: one constant statement.
_FILTERED_RECORDS = (
    _RECORD_SELECT
    + """
    WHERE (:run_id IS NULL OR r.run_id = :run_id)
      AND (:level IS NULL OR r.level IN (SELECT value FROM json_each(:level)))
      AND (:benchmark IS NULL OR r.benchmark IN (SELECT value FROM json_each(:benchmark)))
      AND (:framework IS NULL OR r.framework IN (SELECT value FROM json_each(:framework)))
      AND (:dtype IS NULL OR r.dtype IN (SELECT value FROM json_each(:dtype)))
      AND (:host IS NULL OR r.host IN (SELECT value FROM json_each(:host)))
      AND (:metric IS NULL OR r.status <> 'ok' OR EXISTS (SELECT 1 FROM figures f
           WHERE f.record_id = r.record_id AND f.metric IN (SELECT value FROM json_each(:metric))))
    ORDER BY u.started_at, u.run_id, r.line"""
)
_BASELINE_RECORDS = (
    _RECORD_SELECT
    + """
    WHERE r.level = ? AND r.benchmark = ? AND (? IS NULL OR r.params_key = ?) AND r.framework = ?
      AND r.dtype = ? AND r.world_size = ? AND r.rank = ?
      AND (? IS NULL OR r.host = ?)
      AND r.run_id <> ?
      AND (u.started_at < ? OR (u.started_at = ? AND u.run_id < ?))
    ORDER BY u.started_at DESC, u.run_id DESC, r.line"""
)


class HistoryStoreError(ConfigError):
    """The history store cannot be used (unreadable, busy, not a store): exit code 2."""


# -- where the store is ------------------------------------------------------------------------


def default_store_path(env: dict[str, str] | None = None) -> Path:
    """``$XDG_DATA_HOME/dlsuite/history.sqlite`` (``~/.local/share/dlsuite/...`` without it)."""
    env = dict(os.environ) if env is None else env
    data_home = env.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data_home) / "dlsuite" / STORE_NAME


def resolve_store_path(flag: str | None, env: dict[str, str] | None = None) -> Path:
    """The store's path: ``--history PATH``, else ``DLSUITE_HISTORY``, else the default."""
    env = dict(os.environ) if env is None else env
    if flag is not None and not flag.strip():
        raise ConfigError("--history: empty path; give the store's file (e.g. history.sqlite)")
    chosen = flag or env.get(ENV_VAR) or None
    path = Path(chosen).expanduser() if chosen else default_store_path(env)
    if path.is_dir():
        given = f"--history {path}" if flag else f"{ENV_VAR}={path}" if chosen else str(path)
        raise HistoryStoreError(
            f"{given}: is a directory; give the store's file, e.g. {path / STORE_NAME}"
        )
    return path


def rebuild_command(path: Path) -> str:
    """The command that makes the store again from the run directories."""
    where = "" if path == default_store_path() else f" --history {shlex.quote(str(path))}"
    return f"dlsuite history rebuild{where} RUN_DIR... (e.g. runs/*)"


def parse_mountinfo(text: str) -> list[tuple[str, str]]:
    """(mount point, file-system type) of every line of /proc/self/mountinfo."""
    out = []
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        fields = left.split()
        if not sep or len(fields) < 5 or not right.split():
            continue
        mount = fields[4]
        for esc, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
            mount = mount.replace(esc, char)
        out.append((mount, right.split()[0]))
    return out


def file_system_type(path: Path, mountinfo: str | None = None) -> str | None:
    """The type of the file system ``path`` is on (the longest mount point above it)."""
    if mountinfo is None:
        try:
            mountinfo = Path("/proc/self/mountinfo").read_text(encoding="utf-8")
        except OSError:
            return None
    target = str(path.resolve())
    best: tuple[int, str] | None = None
    for mount, fstype in parse_mountinfo(mountinfo):
        prefix = mount.rstrip("/") + "/"
        if (target == mount or target.startswith(prefix) or mount == "/") and (
            best is None or len(mount) >= best[0]
        ):
            best = (len(mount), fstype)
    return best[1] if best else None


def journal_mode_for(path: Path, mountinfo: str | None = None) -> str:
    """``wal`` on a local file system; ``delete`` (the rollback journal) on a network one,
    where WAL's shared-memory index cannot be shared between hosts."""
    fstype = file_system_type(path, mountinfo)
    return "delete" if fstype in NETWORK_FILE_SYSTEMS else "wal"


# -- errors ------------------------------------------------------------------------------------

_CORRUPT_CODES = {11, 26}  # SQLITE_CORRUPT, SQLITE_NOTADB
_BUSY_CODES = {5, 6}  # SQLITE_BUSY, SQLITE_LOCKED
_READONLY_CODE = 8  # SQLITE_READONLY


def store_error(path: Path, exc: sqlite3.Error) -> HistoryStoreError:
    """One line for a SQLite error on the store, naming what to do."""
    code = getattr(exc, "sqlite_errorcode", None)  # Python 3.11+
    text = str(exc)
    if code in _CORRUPT_CODES or "not a database" in text or "malformed" in text:
        return HistoryStoreError(
            f"history store {path} is unreadable ({text}); no record is lost: the run "
            f"directories are the source of truth. Rebuild it with: {rebuild_command(path)}"
        )
    if code in _BUSY_CODES or "locked" in text:
        return HistoryStoreError(
            f"history store {path} stayed busy for {BUSY_TIMEOUT_S:g} s (another process is "
            "writing to it); try again"
        )
    return HistoryStoreError(
        f"history store {path}: {text}; choose a writable place with --history PATH or "
        f"{ENV_VAR}, or rebuild it with: {rebuild_command(path)}"
    )


# -- what a run directory holds, as rows --------------------------------------------------------


@dataclass
class RunInfo:
    """One run as the store knows it."""

    run_id: str
    run_dir: str
    host: str
    devices: list[str]
    cpu_model: str | None
    suite_version: str | None
    git_commit: str | None
    git_dirty: bool | None
    frameworks: dict[str, str | None]
    started_at: str
    finished_at: str | None
    state: str
    counts: dict[str, int]

    @property
    def software(self) -> str:
        """Suite version, commit and framework versions in one line."""
        commit = (self.git_commit or "")[:10]
        dirty = "+dirty" if self.git_dirty else ""
        fws = ", ".join(f"{k} {v or '?'}" for k, v in sorted(self.frameworks.items()))
        return (
            f"dlsuite {self.suite_version or '?'}"
            + (f" @{commit}{dirty}" if commit else "")
            + (f"; {fws}" if fws else "")
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id, "run_dir": self.run_dir, "host": self.host,
            "devices": self.devices, "cpu_model": self.cpu_model,
            "suite_version": self.suite_version, "git_commit": self.git_commit,
            "git_dirty": self.git_dirty, "frameworks": self.frameworks,
            "started_at": self.started_at, "finished_at": self.finished_at, "state": self.state,
            "counts": self.counts,
        }  # fmt: skip


@dataclass
class RunEntry:
    """A run ready to be stored: its row and its records (as the run directory holds them)."""

    info: RunInfo
    records: list[dict[str, Any]]
    digest: str


def _most_common(values: Iterable[Any]) -> Any:
    counted = Counter(v for v in values if v is not None)
    return counted.most_common(1)[0][0] if counted else None


def run_entries(
    run_dir: Path, records: Sequence[dict[str, Any]], manifest: dict[str, Any] | None
) -> list[RunEntry]:
    """The runs a run directory holds (one, unless its results mix run ids): everything taken
    from the records and the manifest, so a store rebuilt from the directory is the same."""
    by_run: dict[str, list[dict[str, Any]]] = {}
    for rec in records:
        by_run.setdefault(str(rec["run_id"]), []).append(rec)
    manifest = manifest or {}
    entries = []
    for run_id, recs in by_run.items():
        own = manifest if manifest.get("run_id") == run_id else {}
        prov = [r.get("provenance") or {} for r in recs]
        statuses = Counter(r["status"] for r in recs)
        frameworks: dict[str, str | None] = {}
        for r in recs:
            fw = r["framework"]
            if fw.get("version") or fw["name"] not in frameworks:
                frameworks[fw["name"]] = fw.get("version")
        devices = sorted({r["device"]["name"] for r in recs if r.get("device")})
        cpu = next((r["device"]["name"] for r in recs if (r.get("device") or {}).get("kind") == "cpu"), None)  # fmt: skip
        starts = sorted(str(r["started_at"]) for r in recs)
        dirty = own.get("git_dirty", _most_common(p.get("git_dirty") for p in prov))
        info = RunInfo(
            run_id=run_id,
            run_dir=str(Path(run_dir).resolve()),
            host=str(own.get("host") or _most_common(r["host"] for r in recs)),
            devices=devices,
            cpu_model=cpu,
            suite_version=own.get("suite_version") or _most_common(p.get("suite_version") for p in prov),
            git_commit=own.get("git_commit") or _most_common(p.get("git_commit") for p in prov),
            git_dirty=None if dirty is None else bool(dirty),
            frameworks=dict(sorted(frameworks.items())),
            started_at=str(own.get("created_at") or starts[0]),
            finished_at=own.get("updated_at") or starts[-1],
            state=str(own.get("state") or "unknown"),
            counts={
                "records": len(recs),
                "ok": statuses["ok"],
                "skipped": statuses["skipped"],
                "failed": sum(statuses[s] for s in BAD_STATUSES),
                "wrong": sum(
                    1 for r in recs if r["status"] == "ok" and not (r.get("correctness") or {}).get("passed", True)
                ),
            },
        )  # fmt: skip
        digest = hashlib.sha256(
            json.dumps([info.to_dict(), recs], sort_keys=True, default=str).encode()
        ).hexdigest()
        entries.append(RunEntry(info, list(recs), digest))
    return entries


def _record_row(run_id: str, line: int, rec: dict[str, Any]) -> tuple[Any, ...]:
    level, name, pkey, framework, dtype, world_size, rank = base_identity(rec)
    dev = device_identity(rec)
    corr = rec.get("correctness")
    return (
        run_id, line, rec["task_id"], level, name, pkey, framework,
        rec["framework"].get("version"), dtype, dev[0] if dev else None,
        dev[1] if dev else None, (rec.get("device") or {}).get("driver"), world_size, rank,
        rec["host"], rec["status"], None if not corr else int(bool(corr["passed"])),
        rec.get("reason"), (rec.get("error") or {}).get("type"), str(rec["started_at"]),
        next(iter(busy_findings(rec)), None), json.dumps(record_setup(rec)),
    )  # fmt: skip


#: what a figure was measured with besides its task, framework version and driver (which the
#: records table holds): (label, where in the record). A change in one of these between two
#: runs changes a figure without the machine or the framework changing.
SETUP_FIELDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("backend", ("backend", "kind")),
    ("image", ("backend", "image")),
    ("image digest", ("backend", "image_digest")),
    ("cores", ("device", "cores")),
    ("devices", ("device", "count")),
    ("torch threads", ("device", "torch_threads")),
    ("OMP_NUM_THREADS", ("device", "omp_num_threads")),
    ("CUDA", ("provenance", "versions", "cuda")),
    ("cuDNN", ("provenance", "versions", "cudnn")),
    ("NCCL", ("provenance", "versions", "nccl")),
    ("peak", ("work", "peak_tflops")),
    ("peak bandwidth", ("work", "peak_bandwidth_gbps")),
)
#: the setup labels of the peaks a share of a peak divides by (the ``work`` fields above), and
#: those fields: a stored record carries them back (suite.compare.peak_change reads them)
PEAK_SETUP = {label: path[1] for label, path in SETUP_FIELDS if path[0] == "work"}


def record_setup(rec: dict[str, Any]) -> dict[str, str]:
    """The :data:`SETUP_FIELDS` a record carries, as text (absent and null ones left out)."""
    out: dict[str, str] = {}
    for label, path in SETUP_FIELDS:
        value: Any = rec
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        if value is not None and value != "":
            out[label] = str(value)
    return out


def _figure_rows(record_id: int, rec: dict[str, Any]) -> list[tuple[Any, ...]]:
    rows = []
    for i, m in enumerate(rec.get("metrics") or []):
        lo, hi = sorted(m["ci95"]) if "ci95" in m else (None, None)
        rows.append(
            (record_id, i, m["name"], m["unit"], int(bool(m["higher_is_better"])),
             float(m["value"]), m.get("median"), lo, hi, m.get("n"))
        )  # fmt: skip
    return rows


def _check_rows(record_id: int, rec: dict[str, Any]) -> list[tuple[Any, ...]]:
    checks = (rec.get("correctness") or {}).get("checks") or []
    return [
        (record_id, i, c["name"], int(bool(c["passed"])), c.get("error"), float(c["tolerance"]))
        for i, c in enumerate(checks)
    ]


# -- the store ---------------------------------------------------------------------------------


@dataclass
class StoredRecord:
    """A record as the store gives it back: the fields ``suite.compare`` reads, and its run."""

    record_id: int
    run: RunInfo
    host: str
    rec: dict[str, Any]
    #: :func:`record_setup` of the record (empty where the store does not know it: a run
    #: directory gone before the store's upgrade to version 3)
    setup: dict[str, str] = field(default_factory=dict)


@dataclass
class AddResult:
    run_id: str
    run_dir: str
    action: str  # added | replaced | unchanged
    records: int


class HistoryStore:
    """An open store. Use as a context manager; every SQLite error becomes a
    :class:`HistoryStoreError` naming the path and the fix."""

    def __init__(self, path: Path, *, create: bool = True, journal_mode: str | None = None):
        self.path = Path(path)
        if not create and not self.path.exists():
            raise HistoryStoreError(
                f"no history store at {self.path}: `dlsuite run` adds every run to it, and "
                "`dlsuite history import RUN_DIR...` fills it from run directories (or give "
                f"another store with --history PATH or {ENV_VAR})"
            )
        if create and self.path != MEMORY:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise HistoryStoreError(
                    f"history store {self.path}: cannot create {self.path.parent} "
                    f"({exc.strerror}); choose another with --history PATH or {ENV_VAR}"
                ) from None
        self.journal_mode = journal_mode or journal_mode_for(self.path.parent)
        with self._errors():
            # isolation_level=None: no implicit transactions; writes use BEGIN IMMEDIATE so
            # two writers queue on the busy timeout instead of deadlocking on an upgrade
            self.conn = sqlite3.connect(
                self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
            )
        try:
            with self._errors():
                self.conn.row_factory = sqlite3.Row
                self.conn.execute("PRAGMA foreign_keys = ON")
                self._prepare_waiting(create)
        except BaseException:
            self.conn.close()
            raise

    def _prepare_waiting(self, create: bool) -> None:
        """:meth:`_prepare`, retried while the store is busy: SQLite answers a journal-mode
        change or a first read racing another process's store creation with SQLITE_BUSY at
        once, without its busy handler (six processes opening a new WAL store together under
        load: one failed at once with "database is locked"), so the wait is done here, up to
        the same busy timeout."""
        deadline = time.monotonic() + BUSY_TIMEOUT_S
        while True:
            try:
                self._prepare(create)
                return
            except sqlite3.OperationalError as exc:
                code = getattr(exc, "sqlite_errorcode", None)
                busy = code in _BUSY_CODES or "locked" in str(exc)
                if not busy or time.monotonic() >= deadline:
                    raise
                if self.conn.in_transaction:
                    self.conn.execute("ROLLBACK")
                time.sleep(0.05)

    @contextlib.contextmanager
    def _errors(self) -> Iterator[None]:
        try:
            yield
        except sqlite3.Error as exc:
            raise store_error(self.path, exc) from None

    def _tables(self) -> set[str]:
        rows = self.conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        return {r[0] for r in rows}

    def _prepare(self, create: bool) -> None:
        """Check the store; a writer also sets the journal mode and, on a new file, creates
        the tables (one transaction: safe when several processes open a new store at once).
        A reader writes nothing but the in-place upgrade of an older store (a current store
        on a read-only mount can be read)."""
        tables = self._tables()
        if create:
            if self.conn.execute("PRAGMA journal_mode").fetchone()[0] != self.journal_mode:
                self.conn.execute(f"PRAGMA journal_mode = {self._checked_mode()}")
            if not tables:
                self.conn.execute("BEGIN IMMEDIATE")
                try:
                    if not self._tables():  # another process may have made them meanwhile
                        for statement in _SCHEMA.split(";"):
                            if statement.strip():
                                self.conn.execute(statement)
                        self.conn.execute(
                            "INSERT INTO meta VALUES ('schema_version', ?)", (STORE_SCHEMA_VERSION,)
                        )
                    self.conn.execute("COMMIT")
                except BaseException:
                    if self.conn.in_transaction:
                        self.conn.execute("ROLLBACK")
                    raise
                tables = self._tables()
        elif not tables:
            raise HistoryStoreError(
                f"history store {self.path} holds no runs yet: `dlsuite run` adds every run "
                "to it, `dlsuite history import RUN_DIR...` fills it from run directories"
            )
        if "meta" not in tables:
            raise HistoryStoreError(
                f"{self.path} is a SQLite file but not a dlsuite history store (tables "
                f"{', '.join(sorted(tables))}); give another path with --history PATH, or "
                f"move it aside and rebuild: {rebuild_command(self.path)}"
            )
        row = self.conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        version = row[0] if row else None
        if version in _UPGRADES:  # made current in place (a busy store: retried by the caller)
            try:
                version = self._upgrade(version)
            except sqlite3.OperationalError as exc:
                if getattr(exc, "sqlite_errorcode", None) != _READONLY_CODE:
                    raise
                raise HistoryStoreError(
                    f"history store {self.path} has schema version {version!r}, which this "
                    f"dlsuite upgrades in place to {STORE_SCHEMA_VERSION!r}, but it cannot be "
                    "written here (read-only): open it once where it can be written (any "
                    "`dlsuite history` command upgrades it), or give another with --history PATH"
                ) from None
        if version != STORE_SCHEMA_VERSION:
            raise HistoryStoreError(
                f"history store {self.path} has schema version {version!r}; this dlsuite "
                f"reads {STORE_SCHEMA_VERSION!r}. Rebuild it: {rebuild_command(self.path)}"
            )

    def _upgrade(self, version: str) -> str:
        """An older store made current in place (one transaction), as _UPGRADES says; from
        version 1, each record's busy finding read back from its run's results.jsonl where
        the run directory is still there (records of a run that is gone stay unknown)."""
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            row = self.conn.execute(
                "SELECT value FROM meta WHERE key = 'schema_version'"
            ).fetchone()
            version = row[0] if row else version  # another process may have upgraded it
            setup = False
            while version in _UPGRADES:
                for statement in _UPGRADES[version]:
                    self.conn.execute(statement)
                if version == "1":
                    self._fill_from_run_dirs("busy")
                setup = setup or version in ("2", "3")
                version = str(int(version) + 1)
            if setup:  # once, with every field record_setup knows now
                self._fill_from_run_dirs("setup")
            self.conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (version,))
            self.conn.execute("COMMIT")
        except BaseException:
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")
            raise
        return version

    def _fill_from_run_dirs(self, column: str) -> None:
        """records.busy or records.setup of the stored runs, from their run directories (the
        records in the order :meth:`add` numbered them)."""
        for run_id, run_dir in self.conn.execute("SELECT run_id, run_dir FROM runs").fetchall():
            try:
                run = load_run(Path(run_dir))
            except (ConfigError, OSError, ValueError):
                continue  # moved or deleted: its records stay not known to be busy, setup unknown
            for entry in run_entries(run.path, run.records, run.manifest):
                if entry.info.run_id != run_id:
                    continue
                for line, rec in enumerate(entry.records):
                    if column == "setup":
                        self.conn.execute(
                            "UPDATE records SET setup = ? WHERE run_id = ? AND line = ?",
                            (json.dumps(record_setup(rec)), run_id, line),
                        )
                        continue
                    found = busy_findings(rec)
                    if found:
                        self.conn.execute(
                            "UPDATE records SET busy = ? WHERE run_id = ? AND line = ?",
                            (found[0], run_id, line),
                        )

    def _checked_mode(self) -> str:
        # a PRAGMA takes no bound parameter: the value is one of two constants, never input
        if self.journal_mode not in ("wal", "delete", "memory"):
            raise ValueError(f"journal mode {self.journal_mode!r}")
        return self.journal_mode

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> HistoryStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- writing -------------------------------------------------------------------------------

    def add(self, entry: RunEntry) -> AddResult:
        """Store one run in one transaction: added, replaced (its records changed, e.g. a
        resumed run) or unchanged (the same run imported again)."""
        info = entry.info
        with self._errors():
            self.conn.execute("BEGIN IMMEDIATE")
            try:
                row = self.conn.execute(
                    "SELECT digest FROM runs WHERE run_id = ?", (info.run_id,)
                ).fetchone()
                if row is not None and row[0] == entry.digest:
                    self.conn.execute("COMMIT")
                    return AddResult(info.run_id, info.run_dir, "unchanged", len(entry.records))
                if row is not None:
                    self.conn.execute("DELETE FROM runs WHERE run_id = ?", (info.run_id,))
                from suite.provenance import now_iso

                self.conn.execute(
                    _INSERT_RUN,
                    (info.run_id, info.run_dir, info.host, json.dumps(info.devices),
                     info.cpu_model, info.suite_version, info.git_commit,
                     None if info.git_dirty is None else int(info.git_dirty),
                     json.dumps(info.frameworks), info.started_at, info.finished_at, info.state,
                     info.counts["records"], info.counts["ok"], info.counts["skipped"],
                     info.counts["failed"], info.counts["wrong"], entry.digest, now_iso()),
                )  # fmt: skip
                for line, rec in enumerate(entry.records):
                    cur = self.conn.execute(_INSERT_RECORD, _record_row(info.run_id, line, rec))
                    rid = int(cur.lastrowid or 0)
                    self.conn.executemany(_INSERT_FIGURE, _figure_rows(rid, rec))
                    self.conn.executemany(_INSERT_CHECK, _check_rows(rid, rec))
                self.conn.execute("COMMIT")
            except BaseException:
                if self.conn.in_transaction:
                    self.conn.execute("ROLLBACK")
                raise
        action = "added" if row is None else "replaced"
        return AddResult(info.run_id, info.run_dir, action, len(entry.records))

    def add_run_dir(
        self,
        run_dir: Path,
        records: Sequence[dict[str, Any]] | None = None,
        manifest: dict[str, Any] | None = None,
    ) -> list[AddResult]:
        """Store the run(s) of a run directory; ``records`` (already validated, as the runner
        holds them) saves reading ``results.jsonl`` again."""
        if records is None:
            run = load_run(Path(run_dir))
            records, manifest, run_dir = run.records, run.manifest, run.path
        elif manifest is None:
            manifest = _read_manifest(Path(run_dir))
        return [self.add(e) for e in run_entries(Path(run_dir), records, manifest)]

    # -- reading -------------------------------------------------------------------------------

    def runs(self, hosts: Sequence[str] | None = None) -> list[RunInfo]:
        """Every run, oldest first (by start, then run id)."""
        with self._errors():
            rows = self.conn.execute(
                "SELECT * FROM runs WHERE (:host IS NULL OR host IN (SELECT value FROM "
                "json_each(:host))) ORDER BY started_at, run_id",
                {"host": json.dumps(list(hosts)) if hosts else None},
            ).fetchall()
        return [_run_info(r) for r in rows]

    def run(self, run_id: str) -> RunInfo | None:
        with self._errors():
            row = self.conn.execute("SELECT * FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        return _run_info(row) if row else None

    def records(
        self,
        *,
        run_id: str | None = None,
        levels: Sequence[str] | None = None,
        benchmarks: Sequence[str] | None = None,
        frameworks: Sequence[str] | None = None,
        dtypes: Sequence[str] | None = None,
        hosts: Sequence[str] | None = None,
        metrics: Sequence[str] | None = None,
    ) -> list[StoredRecord]:
        """Records matching every given filter (a list: any of its values), oldest run first."""

        def js(values: Sequence[str] | None) -> str | None:
            return json.dumps(list(values)) if values else None

        params = {
            "run_id": run_id, "level": js(levels), "benchmark": js(benchmarks),
            "framework": js(frameworks), "dtype": js(dtypes), "host": js(hosts),
            "metric": js(metrics),
        }  # fmt: skip
        with self._errors():
            rows = self.conn.execute(_FILTERED_RECORDS, params).fetchall()
        return self._assemble(rows)

    def baseline(self, target: StoredRecord, last: int, any_host: bool) -> list[StoredRecord]:
        """The same task's records in the ``last`` runs before ``target``'s run, newest first:
        same level, benchmark, parameters, framework, dtype, world size, rank, device (a record
        of unknown device matches any, as in ``dlsuite compare``) and, unless ``any_host``,
        host. One record per run (its first). A record of a task that did not finish, which
        carries the task's parameters, is matched, where no record has them, by the records
        its task covers (a collective's sweep: each size; ``suite.compare``'s pairing)."""
        level, name, pkey, framework, dtype, world_size, rank = base_identity(target.rec)
        host = None if any_host else target.host
        run = target.run

        def query(params_key: str | None) -> list[sqlite3.Row]:
            with self._errors():
                return self.conn.execute(
                    _BASELINE_RECORDS,
                    (level, name, params_key, params_key, framework, dtype, world_size, rank,
                     host, host, run.run_id, run.started_at, run.started_at, run.run_id),
                ).fetchall()  # fmt: skip

        rows = query(pkey)
        if not rows and target.rec["status"] in BAD_STATUSES:
            bench = target.rec["benchmark"]
            rows = [r for r in query(None) if task_covers(bench, json.loads(r["params_key"]))]
        dev = device_identity(target.rec)
        picked: list[sqlite3.Row] = []
        seen: set[str] = set()
        for row in rows:
            row_dev = (row["device_kind"], row["device_name"]) if row["device_name"] else None
            if dev is not None and row_dev is not None and row_dev != dev:
                continue
            if row["run_id"] in seen:
                continue
            seen.add(row["run_id"])
            picked.append(row)
            if len(picked) >= last:
                break
        return self._assemble(picked)

    def _assemble(self, rows: Sequence[sqlite3.Row]) -> list[StoredRecord]:
        """Rebuild the records ``suite.compare`` reads from their rows, figures and checks."""
        if not rows:
            return []
        ids = json.dumps([r["record_id"] for r in rows])
        run_ids = json.dumps(sorted({r["run_id"] for r in rows}))
        with self._errors():
            figures = self.conn.execute(
                "SELECT * FROM figures WHERE record_id IN (SELECT value FROM json_each(?)) "
                "ORDER BY record_id, position",
                (ids,),
            ).fetchall()
            checks = self.conn.execute(
                "SELECT * FROM checks WHERE record_id IN (SELECT value FROM json_each(?)) "
                "ORDER BY record_id, position",
                (ids,),
            ).fetchall()
            runs = {
                r["run_id"]: _run_info(r)
                for r in self.conn.execute(
                    "SELECT * FROM runs WHERE run_id IN (SELECT value FROM json_each(?))",
                    (run_ids,),
                )
            }
        metrics_of: dict[int, list[dict[str, Any]]] = {}
        for f in figures:
            m: dict[str, Any] = {
                "name": f["metric"], "unit": f["unit"],
                "higher_is_better": bool(f["higher_is_better"]), "value": f["value"],
            }  # fmt: skip
            if f["median"] is not None:
                m["median"] = f["median"]
            if f["ci_lo"] is not None and f["ci_hi"] is not None:
                m["ci95"] = [f["ci_lo"], f["ci_hi"]]
            if f["n"] is not None:
                m["n"] = f["n"]
            metrics_of.setdefault(f["record_id"], []).append(m)
        checks_of: dict[int, list[dict[str, Any]]] = {}
        for c in checks:
            checks_of.setdefault(c["record_id"], []).append(
                {"name": c["name"], "passed": bool(c["passed"]), "error": c["error"],
                 "tolerance": c["tolerance"]}
            )  # fmt: skip
        out = []
        for r in rows:
            rid = r["record_id"]
            rec: dict[str, Any] = {
                "run_id": r["run_id"],
                "task_id": r["task_id"],
                "benchmark": {"level": r["level"], "name": r["benchmark"],
                              "params": json.loads(r["params_key"])},
                "framework": {"name": r["framework"], "version": r["framework_version"]},
                "dtype": r["dtype"],
                "world_size": r["world_size"],
                "rank": r["rank"],
                "host": r["host"],
                "device": {"kind": r["device_kind"], "name": r["device_name"],
                           "driver": r["driver"]} if r["device_name"] is not None else None,
                "status": r["status"],
                "reason": r["reason"],
                "error": {"type": r["error_type"]} if r["error_type"] else None,
                "metrics": metrics_of.get(rid, []),
                "correctness": None if r["correctness_passed"] is None else {
                    "passed": bool(r["correctness_passed"]), "checks": checks_of.get(rid, [])},
                "started_at": r["started_at"],
            }  # fmt: skip
            if r["busy"]:  # as the record said it (suite.summary.busy_findings reads it back)
                rec["telemetry"] = {"quiet": {"quiet": False, "findings": [
                    {"check": "stored", "busy": True, "message": r["busy"]}]}}  # fmt: skip
            setup = json.loads(r["setup"]) if r["setup"] else {}
            work = {key: float(setup[label]) for label, key in PEAK_SETUP.items() if label in setup}
            if work:
                rec["work"] = work
            out.append(StoredRecord(rid, runs[r["run_id"]], r["host"], rec, setup))
        return out


def _run_info(row: sqlite3.Row) -> RunInfo:
    return RunInfo(
        run_id=row["run_id"],
        run_dir=row["run_dir"],
        host=row["host"],
        devices=json.loads(row["devices"]),
        cpu_model=row["cpu_model"],
        suite_version=row["suite_version"],
        git_commit=row["git_commit"],
        git_dirty=None if row["git_dirty"] is None else bool(row["git_dirty"]),
        frameworks=json.loads(row["frameworks"]),
        started_at=row["started_at"],
        finished_at=row["finished_at"],
        state=row["state"],
        counts={k: row[f"n_{k}"] for k in ("records", "ok", "skipped", "failed", "wrong")},
    )


def _read_manifest(run_dir: Path) -> dict[str, Any] | None:
    try:
        doc = json.loads((run_dir / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None
