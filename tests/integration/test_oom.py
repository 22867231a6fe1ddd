"""``oom`` only when the kernel says so (suite/oom.py), for one rank and several.

Real kills: the runner runs in a memory cgroup with a small limit (made by the test, as root:
what a Slurm job's or a container's limit is to a run), makes a cgroup of its own for each
worker below it, and the "worker" (a real process in place of ``python -m suite.worker``, as in
test_faults.py) allocates until the kernel's OOM killer takes it. The other real kill is a
``kill -9`` from outside. The first must read ``oom`` with the kernel's evidence, the second
``failed``, "killed by SIGKILL from outside the worker (no OOM kill recorded for it)". Once
more with the worker cgroup off (``DLSUITE_WORKER_CGROUP=off``): the kernel log's OOM line
naming the worker's PID is then the evidence. The cgroup v2 reading is tested on fixture text
(these machines mount cgroup v1).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from suite.oom import (
    OUTSIDE_KILL,
    CgroupPlace,
    KillWitness,
    WorkerCgroup,
    evidence_path,
    make_worker_cgroup,
    memory_cgroup_of,
    note_oom,
    oom_kills_v1,
    oom_kills_v2,
    oom_lines_naming,
    own_memory_cgroup,
    slurm_oom_line,
)
from suite.results import validate_record
from tests.helpers import ROOT

#: the limit of the run's cgroup: the runner (~80 MB) fits, a worker allocating 2 GiB does not
LIMIT_BYTES = 384 << 20

# The "worker": rank 1 (the only rank of a 1-rank task) allocates and touches 2 GiB in 16 MiB
# steps, or writes its PID and waits to be killed; other ranks wait for the launcher to stop
# them. argv[1] is the session document (its directory is where the PID goes).
WORKER = """
import os, sys, time
rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
mine = rank == world - 1
what = {what!r}
sessions = os.path.dirname(sys.argv[1])
if mine and what == "hog":
    held = []
    for _ in range(128):
        block = bytearray(16 << 20)
        block[::4096] = b"x" * len(block[::4096])
        held.append(block)
if mine:
    with open(os.path.join(sessions, "victim.pid"), "w") as fh:
        fh.write(str(os.getpid()))
time.sleep(120)
"""

# The run, in a process of its own (so that it can be put in the limited cgroup): the plan's
# first task, the backend replaced by the worker above, the records printed as JSON.
DRIVER = """
import json, sys
from suite.backends.local import LocalBackend
from suite.config import resolve
from suite.plan import build
from suite.runner import run

class Script(LocalBackend):
    @classmethod
    def create(cls, framework, settings):
        return cls()
    def command(self, task_path):
        return [sys.executable, "-c", {worker!r}, str(task_path)]

import suite.runner
suite.runner.BACKENDS.load = lambda name: Script
cfg = resolve({cfg!r}, env={{}})
outcome = run(cfg, build(cfg)[:1], ["test"])
print(json.dumps(outcome.records))
"""


def _config(out: Path, world: int) -> dict[str, Any]:
    if world == 1:
        return {"quick": True, "benchmarks": ["gemm"], "dtypes": ["fp32"], "out": str(out),
                "timeout": 120}  # fmt: skip
    return {"level": ["distributed"], "frameworks": ["pytorch"], "benchmarks": ["allreduce"],
            "quick": True, "world_size": world, "launcher": "spawn", "out": str(out),
            "timeout": 120}  # fmt: skip


@contextlib.contextmanager
def limited_cgroup(limit: int) -> Iterator[WorkerCgroup]:
    """A memory cgroup with ``limit`` bytes below this process's own (root)."""
    made = make_worker_cgroup(f"test-{uuid.uuid4().hex[:8]}")
    if isinstance(made, str):
        pytest.fail(f"a memory cgroup is needed for this test (as root): {made}")
    limit_file = "memory.limit_in_bytes" if made.place.version == 1 else "memory.max"
    (made.path / limit_file).write_text(str(limit))
    try:
        yield made
    finally:
        assert made.remove(), f"{made.path} could not be removed"


def start_run(
    tmp_path: Path, what: str, world: int, cgroup: WorkerCgroup | None, env: dict[str, str]
) -> subprocess.Popen[str]:
    out = tmp_path / "run"
    code = DRIVER.format(worker=WORKER.format(what=what), cfg=_config(out, world))
    argv = [sys.executable, "-c", code]
    if cgroup is not None:
        argv = cgroup.enter(argv)
    return subprocess.Popen(
        argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},
    )  # fmt: skip


def finish(proc: subprocess.Popen[str]) -> dict[str, Any]:
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, err[-3000:]
    (rec,) = json.loads(out.splitlines()[-1])
    validate_record(rec)
    return rec


def worker_cgroups_left(parent: Path) -> list[Path]:
    return sorted(parent.glob("dlsuite-s*"))


@pytest.mark.root
@pytest.mark.parametrize("world", [1, 2])
def test_an_oom_kill_is_oom_with_the_kernels_evidence(tmp_path: Path, world: int) -> None:
    with limited_cgroup(LIMIT_BYTES) as run_cg:
        rec = finish(start_run(tmp_path, "hog", world, run_cg, {}))
        assert not worker_cgroups_left(run_cg.path)  # the worker's cgroup was removed
    assert rec["status"] == "oom", rec["reason"]
    assert rec["error"]["type"] == "OutOfMemory"
    assert "killed by the kernel's OOM killer" in rec["reason"]
    evidence = rec["error"]["evidence"]
    assert evidence.startswith("oom_kill ") and not evidence.startswith("oom_kill 0"), evidence
    assert "in its own memory cgroup" in evidence
    assert "/dlsuite-s" in evidence  # the session's cgroup, not the run's
    if world > 1:  # the launcher stopped rank 0 when rank 1 died: neither wrote a record
        assert rec["reason"].startswith("rank(s) [0, 1] wrote no record"), rec["reason"]


@pytest.mark.root
@pytest.mark.parametrize("world", [1, 2])
def test_a_kill_from_outside_is_failed(tmp_path: Path, world: int) -> None:
    with limited_cgroup(LIMIT_BYTES) as run_cg:
        proc = start_run(tmp_path, "wait", world, run_cg, {})
        pid = wait_for_victim(tmp_path, proc)
        os.kill(pid, signal.SIGKILL)  # a user's kill -9
        rec = finish(proc)
    assert rec["status"] == "failed", rec["reason"]
    assert OUTSIDE_KILL in rec["reason"]
    assert rec["error"]["evidence"].startswith("oom_kill 0 in its own memory cgroup")
    if world > 1:
        assert rec["reason"].startswith("rank(s) [0, 1] wrote no record"), rec["reason"]
        assert "spawn saw rank 1 fail first (signal 9)" in rec["reason"]


@pytest.mark.root
def test_without_a_worker_cgroup_the_kernel_log_names_the_pid(tmp_path: Path) -> None:
    off = {"DLSUITE_WORKER_CGROUP": "off"}
    with limited_cgroup(LIMIT_BYTES) as run_cg:
        rec = finish(start_run(tmp_path, "hog", 1, run_cg, off))
        assert not worker_cgroups_left(run_cg.path)
    assert rec["status"] == "oom", rec["reason"]
    assert rec["error"]["evidence"].startswith("the kernel log: "), rec["error"]["evidence"]
    assert "Killed process" in rec["error"]["evidence"]
    # and a kill -9 then: the log names no PID of the worker
    (tmp_path / "run").rename(tmp_path / "first")
    with limited_cgroup(LIMIT_BYTES) as run_cg:
        proc = start_run(tmp_path, "wait", 1, run_cg, off)
        os.kill(wait_for_victim(tmp_path, proc), signal.SIGKILL)
        rec = finish(proc)
    assert rec["status"] == "failed" and OUTSIDE_KILL in rec["reason"]
    assert "the kernel log names none of its PIDs" in rec["error"]["evidence"]


def wait_for_victim(tmp_path: Path, proc: subprocess.Popen[str]) -> int:
    deadline = time.monotonic() + 120
    while True:
        found = list((tmp_path / "run" / "sessions").glob("victim.pid"))
        if found and found[0].read_text():
            return int(found[0].read_text())
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        assert time.monotonic() < deadline, "the worker did not start"
        time.sleep(0.05)


# -- Docker's word, as the docker helper writes it ---------------------------------------------
def test_a_container_runtimes_statement_is_evidence(tmp_path: Path) -> None:
    doc = tmp_path / "sessions" / "s1.json"
    doc.parent.mkdir()
    doc.write_text("{}")
    w = KillWitness.open(doc, "s1test")
    try:
        w.task_started()
        assert not w.verdict().oom
        note_oom(doc, "Docker", "container abc (dlsuite/pytorch:x) State.OOMKilled true")
        v = w.verdict()
        assert (
            v.oom and v.evidence == "Docker: container abc (dlsuite/pytorch:x) State.OOMKilled true"
        )
        w.task_started()  # the next task: that statement was about the one before
        assert not w.verdict().oom
        assert evidence_path(doc) == tmp_path / "sessions" / "s1.evidence.jsonl"
    finally:
        w.close()


# -- parsing, on fixture text ------------------------------------------------------------------
V2_EVENTS = "low 0\nhigh 0\nmax 12\noom 2\noom_kill 1\noom_group_kill 0\n"
V1_CONTROL = "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n"

# a cgroup v2 machine (systemd): one unified hierarchy
V2_CGROUP = "0::/user.slice/user-1000.slice/session-3.scope\n"
V2_MOUNTINFO = textwrap.dedent(
    """\
    22 27 0:21 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc rw
    25 27 0:23 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
    """
)
# this machine's kind: v1 controllers beside an empty v2 hierarchy (hybrid)
V1_CGROUP = "9:name=systemd:/\n4:memory:/process_api/0713\n1:cpu:/\n0::/\n"
V1_MOUNTINFO = textwrap.dedent(
    """\
    35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
    41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
    """
)
# inside a container: the mount's root is the container's own cgroup
NESTED_CGROUP = "0::/docker/abc/inner\n"
NESTED_MOUNTINFO = "1 0 0:30 /docker/abc /sys/fs/cgroup ro - cgroup2 cgroup2 rw\n"


def test_counts_are_read_from_v1_and_v2_files() -> None:
    assert oom_kills_v2(V2_EVENTS) == 1
    assert oom_kills_v1(V1_CONTROL) == 3
    assert oom_kills_v2("low 0\nhigh 0\n") is None  # a kernel without the count


def test_the_memory_cgroup_is_found_on_v1_v2_and_hybrid_machines() -> None:
    assert memory_cgroup_of(V2_CGROUP, V2_MOUNTINFO) == CgroupPlace(
        2, Path("/sys/fs/cgroup/user.slice/user-1000.slice/session-3.scope")
    )
    assert memory_cgroup_of(V1_CGROUP, V1_MOUNTINFO) == CgroupPlace(
        1, Path("/sys/fs/cgroup/memory/process_api/0713")
    )
    assert memory_cgroup_of(NESTED_CGROUP, NESTED_MOUNTINFO) == CgroupPlace(
        2, Path("/sys/fs/cgroup/inner")
    )
    assert isinstance(memory_cgroup_of("1:cpu:/\n", "x - proc proc rw\n"), str)


def test_v2_counting_on_a_fixture_cgroup(tmp_path: Path) -> None:
    cg = WorkerCgroup(CgroupPlace(2, tmp_path))
    (tmp_path / "memory.events").write_text(V2_EVENTS)
    assert cg.oom_kills() == 1 and cg.counter_file.name == "memory.events"
    w = KillWitness(tmp_path / "s.json", cgroup=cg)
    w.task_started()
    assert not w.verdict().oom  # the kill before this task is not its
    (tmp_path / "memory.events").write_text(V2_EVENTS.replace("oom_kill 1", "oom_kill 2"))
    v = w.verdict()
    assert v.oom and v.evidence.startswith("oom_kill 1 in its own memory cgroup (cgroup v2")


KMSG = textwrap.dedent(
    """\
    6,1843,514353853,-;oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,oom_memcg=/a,task_memcg=/a/b,task=python3,pid=25822,uid=0
    3,1844,514353864,-;Memory cgroup out of memory: Killed process 25822 (python3) total-vm:323784kB, anon-rss:102016kB, file-rss:6624kB, shmem-rss:0kB, UID:0 pgtables:264kB oom_score_adj:0
    3,1845,514353999,-;Out of memory: Killed process 4242 (java) total-vm:1kB
    """
)


def test_the_kernel_log_counts_only_lines_naming_the_workers_pids() -> None:
    assert len(oom_lines_naming(KMSG, {25822})) == 2
    assert oom_lines_naming(KMSG, {4242}) == [
        "Out of memory: Killed process 4242 (java) total-vm:1kB"
    ]
    assert oom_lines_naming(KMSG, {1, 2, 258}) == []
    dmesg = "[  514.353864] Memory cgroup out of memory: Killed process 25822 (python3) x\n"
    assert len(oom_lines_naming(dmesg, [25822])) == 1


def test_this_machine_has_a_memory_cgroup() -> None:
    """CI runs as root on cgroup v1 or v2: the runner must find its own memory cgroup."""
    place = own_memory_cgroup()
    assert not isinstance(place, str), place
    assert place.path.is_dir()


def test_ranks_started_by_srun_take_slurms_word(tmp_path: Path) -> None:
    """srun's ranks run under slurmstepd, in Slurm's cgroup: the runner's count says nothing
    about them; slurmstepd's own line in the session's output does."""
    log = tmp_path / "s.log"
    log.write_text("rank 0 ok\n")
    w = KillWitness(tmp_path / "s.json", ranks_inside=False, log_path=log)
    v = w.verdict()
    assert not v.oom and "outside the runner's memory cgroup" in v.evidence
    log.write_text(
        "slurmstepd: error: Detected 1 oom_kill event in StepId=5.0. Some of the step tasks "
        "have been OOM Killed.\nsrun: error: localhost: task 1: Out Of Memory\n"
    )
    v = w.verdict()
    assert (
        v.oom
        and v.evidence
        == "Slurm: Detected 1 oom_kill event in StepId=5.0. Some of the step tasks have been OOM Killed."
    )
    assert slurm_oom_line("slurmstepd: error: Detected 2 oom-kill event(s) in step 7.0 cgroup.")
