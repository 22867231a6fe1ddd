"""Which tasks share a worker session, and in which order sessions run (suite/session.py)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from suite.config import resolve
from suite.plan import Task, build
from suite.session import SessionProgress, isolation_reason, session_key, sessions


def _tasks(**cli: object) -> list[Task]:
    return build(resolve({"quick": True, "dtypes": ["fp32"], **cli}, env={}))


def test_single_rank_tasks_of_a_framework_share_one_session() -> None:
    tasks = _tasks(frameworks=["pytorch", "numpy"], benchmarks=["gemm", "softmax"])
    groups = sessions(tasks, "session")
    assert [{t.framework for t in g} for g in groups] == [{"pytorch"}, {"numpy"}]
    assert sum(len(g) for g in groups) == len(tasks)
    # plan order kept within a session
    for g in groups:
        assert [tasks.index(t) for t in g] == sorted(tasks.index(t) for t in g)


def test_isolate_task_gives_every_task_its_own_session() -> None:
    tasks = _tasks(benchmarks=["gemm", "softmax"])
    groups = sessions(tasks, "task")
    assert [len(g) for g in groups] == [1] * len(tasks)
    assert isolation_reason(tasks[0], "task") == "--isolate task"
    assert isolation_reason(tasks[0], "session") is None


def test_distributed_sessions_follow_the_process_group_rule() -> None:
    tasks = _tasks(
        level=["distributed"], frameworks=["pytorch", "tensorflow"], world_size=2,
        benchmarks=["allreduce", "data_parallel"], backend="venv",
    )  # fmt: skip
    groups = sessions(tasks, "session")
    # 1-rank scaling baselines first, whatever the plan order
    sizes = [g[0].world_size for g in groups]
    assert sizes == sorted(sizes) and sizes[0] == 1
    torch2 = [g for g in groups if g[0].framework == "pytorch" and g[0].world_size == 2]
    assert len(torch2) == 1 and len(torch2[0]) > 1  # PyTorch keeps its process group
    tf2 = [g for g in groups if g[0].framework == "tensorflow" and g[0].world_size == 2]
    assert tf2 and all(len(g) == 1 for g in tf2)  # TensorFlow: a process per task
    assert "tensorflow cannot set up" in (isolation_reason(tf2[0][0], "session") or "")


def test_a_different_launcher_or_device_is_another_session() -> None:
    (t,) = _tasks(benchmarks=["gemm"], frameworks=["numpy"])[:1]
    assert session_key(t, "session") != session_key(replace(t, device="cuda"), "session")
    assert session_key(t, "session") != session_key(replace(t, backend="venv"), "session")


def test_progress_reads_whole_lines_only(tmp_path: Path) -> None:
    path = tmp_path / "s.rank0.jsonl"
    events = SessionProgress(lambda r: path, 1)
    events.poll()  # no file yet
    assert not events.all_ended("a")
    path.write_text('{"event": "start", "task_id": "a"}\n{"event": "end", "task_')
    events.poll()
    assert events.started == {"a": {0}} and not events.all_ended("a")
    with path.open("a") as fh:
        fh.write('id": "a", "stop": true}\n')
    events.poll()
    assert events.all_ended("a") and events.stops_after("a")


def _session_that_cleans_up_after_its_task(tmp_path: Path, grace_s: float) -> tuple[bool, bool]:
    """A real process that says its one task ended (as a worker does), then goes on for 1.5 s
    before it exits, as `apptainer exec` does while it removes the image it unpacked: whether
    it finished that work, and whether it exited by itself."""
    import subprocess

    from suite.backends.base import terminate_group
    from suite.session import follow

    events = tmp_path / "s.rank0.jsonl"
    done = tmp_path / "cleaned-up"
    script = (
        f"""printf '%s\\n' '{{"event": "end", "task_id": "t"}}' >> '{events}'; """
        f"sleep 1.5; touch '{done}'"
    )
    proc = subprocess.Popen(["sh", "-c", script], start_new_session=True)
    progress = SessionProgress(lambda rank: events, 1)
    ended = list(
        follow(proc, ["t"], [60.0], progress, lambda: terminate_group(proc), exit_grace_s=grace_s)
    )
    assert [f.how for f in ended] == ["ended"]
    proc.wait(timeout=30)
    return done.exists(), proc.returncode == 0


def test_a_session_has_its_backends_grace_to_exit_after_its_last_task(tmp_path: Path) -> None:
    """Once its last task has ended, a session's process gets the backend's `exit_grace_s` to
    exit before it is ended. Apptainer run by a user without squashfuse removes the image it
    unpacked after the worker exits (33 s and more for pytorch's on a busy disk here); the 30 s
    every backend had ended it there, and each session left about 100 MB in $TMPDIR."""
    from suite.backends.apptainer import ApptainerBackend
    from suite.backends.base import Backend

    (tmp_path / "short").mkdir()
    (tmp_path / "long").mkdir()
    assert _session_that_cleans_up_after_its_task(tmp_path / "short", 0.3) == (False, False)
    assert _session_that_cleans_up_after_its_task(tmp_path / "long", 20.0) == (True, True)
    assert Backend.exit_grace_s == 30.0 and ApptainerBackend.exit_grace_s >= 300.0


def _stopped_worker_that_cleans_up(tmp_path: Path, grace_s: float) -> bool:
    """A real process that, on SIGTERM, takes 1.5 s to clean up before it exits (as
    `apptainer exec` removes the image it unpacked), stopped by :func:`terminate_group` with
    ``grace_s`` between SIGTERM and SIGKILL: whether it finished cleaning up."""
    import subprocess
    import time

    from suite.backends.base import terminate_group

    ready, done = tmp_path / "ready", tmp_path / "cleaned-up"
    script = f"trap 'sleep 1.5; touch \"{done}\"; exit 143' TERM; touch '{ready}'; while :; do sleep 0.1; done"
    proc = subprocess.Popen(["sh", "-c", script], start_new_session=True)
    deadline = time.monotonic() + 30
    while not ready.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    terminate_group(proc, grace_s)
    return done.exists()


def test_a_stopped_worker_has_its_backends_grace_before_sigkill(tmp_path: Path) -> None:
    """A worker the runner ends (a timeout, an interrupt) gets the backend's `stop_grace_s`
    between SIGTERM and SIGKILL. Apptainer took 13 s here to remove a user's unpacked image
    after a SIGTERM; SIGKILLed after the 5 s every backend had, it left part of it in
    $TMPDIR."""
    from suite.backends.apptainer import ApptainerBackend
    from suite.backends.base import Backend

    (tmp_path / "short").mkdir()
    (tmp_path / "long").mkdir()
    assert not _stopped_worker_that_cleans_up(tmp_path / "short", 0.3)
    assert _stopped_worker_that_cleans_up(tmp_path / "long", 20.0)
    assert Backend.stop_grace_s == 5.0 and ApptainerBackend.stop_grace_s >= 60.0
