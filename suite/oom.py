"""Whether the kernel killed a worker for want of memory: only evidence that is the worker's own.

A worker that dies from SIGKILL was killed by someone: the kernel's OOM killer, a user's
``kill -9``, a scheduler's preemption, a node's watchdog. The signal does not say which; the
kernel says when it killed for memory, in places that belong to the killed process:

* the ``oom_kill`` count of a memory cgroup that holds the worker's processes and nothing else.
  The runner makes one per worker session where it may (root, or a cgroup delegated to the
  user), *below its own* memory cgroup, so every limit above still applies (a Slurm job's, a
  container's, a systemd slice's), and starts the worker in it (:meth:`WorkerCgroup.enter`).
  cgroup v1: ``memory.oom_control``'s ``oom_kill``; cgroup v2: ``memory.events``' ``oom_kill``
  (hierarchical: this cgroup and the ones below it, i.e. the worker's processes only). The
  kernel counts a kill in the victim's cgroup whatever limit was hit: its own, an ancestor's
  or the machine's;
* the kernel log's OOM line naming one of the worker's PIDs (``/dev/kmsg``: root, or anyone
  where ``kernel.dmesg_restrict`` is 0), read from the worker's start on, when no cgroup of its
  own could be made;
* a container runtime's own statement (Docker's ``State.OOMKilled``), which the docker helper
  (``suite/backends/docker_run.py``) appends to the session's evidence file
  (:func:`evidence_path`), since the container's processes are in Docker's cgroup, not ours;
* Slurm's ``OUT_OF_MEMORY`` job state, for a task whose job left no record
  (``suite/schedulers/slurm.py``); and for ranks that ``srun`` started (under Slurm's step
  daemon, in Slurm's cgroup, not the runner's), slurmstepd's own line in the session's output,
  "Detected N oom_kill event(s) in StepId=...".

A counter shared with other processes (the runner's own cgroup, tests running beside it)
proves nothing and is not read. Without evidence a SIGKILL is ``failed``:
:data:`OUTSIDE_KILL`. Host side: the standard library only.

``DLSUITE_WORKER_CGROUP=off`` makes no cgroup (the kernel log is then the evidence).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import signal
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: the record's words for a SIGKILL nobody can show was the OOM killer's
OUTSIDE_KILL = "killed by SIGKILL from outside the worker (no OOM kill recorded for it)"
#: the record's words for one the kernel says was
OOM_KILL = "killed by the kernel's OOM killer"
#: a worker session's cgroup: this prefix and the session id
CGROUP_PREFIX = "dlsuite-"
KMSG = "/dev/kmsg"


# -- parsing (pure: tested on fixture text) --------------------------------------------------
def oom_kills_v1(oom_control: str) -> int | None:
    """``oom_kill N`` of cgroup v1's ``memory.oom_control`` (kernels since 4.13)."""
    return _field(oom_control, "oom_kill")


def oom_kills_v2(memory_events: str) -> int | None:
    """``oom_kill N`` of cgroup v2's ``memory.events``."""
    return _field(memory_events, "oom_kill")


def _field(text: str, name: str) -> int | None:
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == name:
            try:
                return int(value.strip())
            except ValueError:
                return None
    return None


@dataclass(frozen=True)
class CgroupPlace:
    """Where a process's memory cgroup is: the hierarchy's version and the directory."""

    version: int
    path: Path


def memory_cgroup_of(proc_cgroup: str, mountinfo: str) -> CgroupPlace | str:
    """The memory cgroup of a process, from its ``/proc/<pid>/cgroup`` and
    ``/proc/<pid>/mountinfo``; or why there is none. A v1 memory hierarchy wins over a v2 one
    (a hybrid machine mounts both, and binds the memory controller to v1)."""
    v1_path = v2_path = None
    for line in proc_cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hid, controllers, path = parts
        if hid == "0" and controllers == "":
            v2_path = path
        elif "memory" in controllers.split(","):
            v1_path = path
    v1_mount = v2_mount = None
    for line in mountinfo.splitlines():
        left, sep, right = line.partition(" - ")
        if not sep:
            continue
        fields, rfields = left.split(), right.split()
        if len(fields) < 5 or len(rfields) < 3:
            continue
        root, mountpoint = _unescape(fields[3]), _unescape(fields[4])
        fstype, superopts = rfields[0], rfields[2].split(",")
        if fstype == "cgroup" and "memory" in superopts and v1_mount is None:
            v1_mount = (root, mountpoint)
        elif fstype == "cgroup2" and v2_mount is None:
            v2_mount = (root, mountpoint)
    if v1_path is not None and v1_mount is not None:
        return CgroupPlace(1, _join(v1_mount, v1_path))
    if v2_path is not None and v2_mount is not None:
        return CgroupPlace(2, _join(v2_mount, v2_path))
    return "no memory cgroup hierarchy is mounted here"


def _unescape(s: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), s)


def _join(mount: tuple[str, str], path: str) -> Path:
    root, mountpoint = mount
    rel = path[len(root) :] if root != "/" and path.startswith(root) else path
    return Path(mountpoint) / rel.lstrip("/")


#: slurmstepd's words when its cgroup saw an OOM kill in a step ("Detected 1 oom_kill event in
#: StepId=5.0. Some of the step tasks have been OOM Killed."; older: "oom-kill event(s)")
_SLURM_OOM = re.compile(r"Detected \d+ oom[-_]kill event(?:s|\(s\))? in [^\n]*")


def slurm_oom_line(log_text: str) -> str | None:
    """slurmstepd's report of an OOM kill in a step, from a session's output."""
    m = _SLURM_OOM.search(log_text)
    return m.group(0).strip() if m else None


#: the kernel's OOM report names the victim so (mm/oom_kill.c, since 4.x; 6.x adds the memcg
#: line "oom-kill:constraint=...,task=NAME,pid=PID,uid=UID")
_KILLED = re.compile(r"(?:Out of memory|Memory cgroup out of memory): Killed process (\d+) \(")
_OOM_KILL_LINE = re.compile(r"oom-kill:.*?[,:]pid=(\d+),")


def oom_lines_naming(kmsg_text: str, pids: Iterable[int]) -> list[str]:
    """The kernel log's OOM lines that name one of ``pids`` (``/dev/kmsg`` records: "pri,seq,
    ts,flags;message", or dmesg's lines)."""
    wanted = {int(p) for p in pids}
    out = []
    for line in kmsg_text.splitlines():
        message = line.split(";", 1)[1] if ";" in line.split(" ", 1)[0] else line
        m = _KILLED.search(message) or _OOM_KILL_LINE.search(message)
        if m and int(m.group(1)) in wanted:
            out.append(message.strip())
    return out


# -- the evidence file a container helper writes ----------------------------------------------
def evidence_path(doc_path: Path) -> Path:
    """Where evidence about the worker started on ``doc_path`` (a session or task document)
    is appended: ``sessions/<sid>.evidence.jsonl`` beside ``sessions/<sid>.json``."""
    return doc_path.with_name(doc_path.stem + ".evidence.jsonl")


def note_oom(doc_path: Path, source: str, detail: str) -> None:
    """Append one OOM statement (by a container runtime) about the worker on ``doc_path``."""
    line = json.dumps({"event": "oom_kill", "source": source, "detail": detail, "t": time.time()})
    fd = os.open(evidence_path(doc_path), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    try:
        os.write(fd, (line + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def read_notes(doc_path: Path) -> list[dict[str, Any]]:
    try:
        text = evidence_path(doc_path).read_text()
    except OSError:
        return []
    out = []
    for line in text.splitlines():
        with contextlib.suppress(ValueError):
            out.append(json.loads(line))
    return out


# -- a cgroup of the worker's own -------------------------------------------------------------
@dataclass
class WorkerCgroup:
    """A memory cgroup made for one worker session, below the runner's own."""

    place: CgroupPlace

    @property
    def path(self) -> Path:
        return self.place.path

    @property
    def counter_file(self) -> Path:
        return self.path / ("memory.oom_control" if self.place.version == 1 else "memory.events")

    def oom_kills(self) -> int | None:
        try:
            text = self.counter_file.read_text()
        except OSError:
            return None
        return (oom_kills_v1 if self.place.version == 1 else oom_kills_v2)(text)

    def enter(self, argv: list[str]) -> list[str]:
        """``argv`` started inside this cgroup: a shell writes its own PID ("0": the writer)
        into ``cgroup.procs``, then becomes the command (same PID; its children are born
        inside). The command's words are the shell's positional parameters, never parsed."""
        return ["/bin/sh", "-c", 'echo 0 > "$0" && exec "$@"', str(self.path / "cgroup.procs"),
                *argv]  # fmt: skip

    def pids(self) -> list[int]:
        try:
            return [int(p) for p in (self.path / "cgroup.procs").read_text().split()]
        except (OSError, ValueError):
            return []

    def remove(self, grace_s: float = 5.0) -> bool:
        """SIGKILL what is left in it (the worker's own descendants: nothing else can be in
        it), then remove it. Returns whether it is gone."""
        deadline = time.monotonic() + grace_s
        while True:
            left = self.pids()
            for pid in left:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            try:
                self.path.rmdir()
                return True
            except FileNotFoundError:
                return True
            except OSError as exc:
                if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                    return False
            time.sleep(0.02)

    def describe(self) -> str:
        return f"cgroup v{self.place.version} {self.path}, {self.counter_file.name}"


def own_memory_cgroup() -> CgroupPlace | str:
    try:
        return memory_cgroup_of(
            Path("/proc/self/cgroup").read_text(), Path("/proc/self/mountinfo").read_text()
        )
    except OSError as exc:
        return f"cannot read /proc/self/cgroup: {exc.strerror}"


def make_worker_cgroup(name: str) -> WorkerCgroup | str:
    """A memory cgroup ``name`` below this process's own, or why none could be made."""
    if os.environ.get("DLSUITE_WORKER_CGROUP", "").lower() in ("off", "0", "no"):
        return "DLSUITE_WORKER_CGROUP=off"
    parent = own_memory_cgroup()
    if isinstance(parent, str):
        return parent
    if parent.version == 2:
        why = _enable_memory_v2(parent.path)
        if why:
            return why
    child = parent.path / name
    try:
        child.mkdir()
    except OSError as exc:
        return (
            f"cannot make a memory cgroup in {parent.path} ({exc.strerror}: it takes root or a "
            "cgroup delegated to this user)"
        )
    cg = WorkerCgroup(CgroupPlace(parent.version, child))
    if cg.oom_kills() is None:  # a kernel without the count (v1 before 4.13)
        cg.remove()
        return f"{cg.counter_file} has no oom_kill count (kernel {os.uname().release})"
    return cg


def _enable_memory_v2(parent: Path) -> str:
    """cgroup v2 gives a child the memory files only when the parent delegates the controller
    (``+memory`` in its ``cgroup.subtree_control``), which a cgroup holding processes other than
    the root's may not do (the no-internal-processes rule)."""
    control = parent / "cgroup.subtree_control"
    try:
        if "memory" in control.read_text().split():
            return ""
        control.write_text("+memory")
        return ""
    except OSError as exc:
        return (
            f"cannot delegate the memory controller below {parent} ({exc.strerror}: cgroup v2 "
            "allows it only in a cgroup without processes of its own, e.g. one made for the "
            "run by systemd-run --scope -p Delegate=yes)"
        )


# -- the verdict -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Verdict:
    """What the evidence says about a worker that died from SIGKILL: ``oom`` with the evidence,
    or not, with what was looked at."""

    oom: bool
    evidence: str

    @property
    def words(self) -> str:
        """The reason's words: "killed by the kernel's OOM killer (EVIDENCE)", or
        :data:`OUTSIDE_KILL` (what was looked at is the record's ``error.evidence``)."""
        return f"{OOM_KILL} ({self.evidence})" if self.oom else OUTSIDE_KILL


@dataclass
class KillWitness:
    """Everything the runner keeps about one worker session to tell an OOM kill from another
    SIGKILL: its cgroup (or why none), its kernel-log position, its evidence file, the PIDs its
    ranks reported, and the cgroup's count when the current task started."""

    doc_path: Path
    cgroup: WorkerCgroup | None = None
    no_cgroup: str = ""
    pids: set[int] = field(default_factory=set)
    #: whether the ranks are the runner's descendants (in its cgroup); not where a launcher
    #: starts them through another daemon (srun's slurmstepd, mpirun on other nodes)
    ranks_inside: bool = True
    #: the session's output, where slurmstepd reports an OOM kill of srun's ranks
    log_path: Path | None = None
    _baseline: int = 0
    _notes_seen: int = 0
    _kmsg: int | None = None
    _kmsg_text: str = ""

    @classmethod
    def open(
        cls, doc_path: Path, name: str, *, ranks_inside: bool = True, log_path: Path | None = None
    ) -> KillWitness:
        made = make_worker_cgroup(CGROUP_PREFIX + name)
        w = cls(doc_path, ranks_inside=ranks_inside, log_path=log_path)
        if isinstance(made, WorkerCgroup):
            w.cgroup = made
        else:
            w.no_cgroup = made
            w._kmsg = _open_kmsg_at_end()
        return w

    def enter(self, argv: list[str]) -> list[str]:
        return self.cgroup.enter(argv) if self.cgroup else argv

    def task_started(self) -> None:
        """The next task starts now: OOM kills before it are not its."""
        if self.cgroup:
            self._baseline = self.cgroup.oom_kills() or 0
        self._notes_seen = len(read_notes(self.doc_path))

    def verdict(self) -> Verdict:
        """Whether the kernel recorded an OOM kill of this worker since its task started."""
        notes = [n for n in read_notes(self.doc_path)[self._notes_seen :] if n.get("event")]
        if notes:
            return Verdict(True, "; ".join(f"{n['source']}: {n['detail']}" for n in notes))
        if not self.ranks_inside:
            line = None
            if self.log_path is not None:
                try:
                    line = slurm_oom_line(self.log_path.read_text(errors="replace"))
                except OSError:
                    line = None
            if line:
                return Verdict(True, f"Slurm: {line}")
            return Verdict(
                False,
                "its ranks ran under the launcher's own daemons (srun's slurmstepd, or "
                "mpirun's on other nodes), outside the runner's memory cgroup, and no "
                "OOM report of theirs (Slurm's 'Detected N oom_kill event') is in its output",
            )
        if self.cgroup:
            count = self.cgroup.oom_kills()
            if count is None:
                return Verdict(False, f"its memory cgroup could not be read ({self.cgroup.path})")
            new = count - self._baseline
            what = f"oom_kill {new} in its own memory cgroup ({self.cgroup.describe()})"
            return Verdict(new > 0, what)
        lines = self._kernel_lines()
        if lines is None:
            return Verdict(
                False,
                f"no memory cgroup of its own ({self.no_cgroup}) and the kernel log "
                f"({KMSG}) is not readable",
            )
        if lines:  # the "Killed process PID (name)" line says most in fewest words
            best = next((x for x in lines if "Killed process" in x), lines[0])
            return Verdict(True, f"the kernel log: {best}")
        return Verdict(
            False,
            f"no memory cgroup of its own ({self.no_cgroup}); the kernel log names none of its "
            f"PIDs {sorted(self.pids)}",
        )

    def _kernel_lines(self) -> list[str] | None:
        if self._kmsg is None:
            return None
        chunks = []
        while True:
            try:
                chunks.append(os.read(self._kmsg, 8192).decode("utf-8", "replace"))
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno == errno.EPIPE:  # records overwritten meanwhile: read on
                    continue
                break
        self._kmsg_text += "".join(chunks)
        return oom_lines_naming(self._kmsg_text, self.pids)

    def close(self) -> None:
        if self.cgroup:
            self.cgroup.remove()
        if self._kmsg is not None:
            os.close(self._kmsg)
            self._kmsg = None


def _open_kmsg_at_end() -> int | None:
    """/dev/kmsg, positioned after its last record (what comes later is this worker's time)."""
    try:
        fd = os.open(KMSG, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        os.lseek(fd, 0, os.SEEK_END)
    except OSError:
        os.close(fd)
        return None
    return fd
