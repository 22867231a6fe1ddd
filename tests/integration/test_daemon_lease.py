"""The container tests' shared Docker daemon: the last test process to let go stops the daemon
the tests started, and never one they did not (tests/integration/containers.py). The daemon
here is a stand-in process named dockerd: the protocol is the locks and the pid file."""

from __future__ import annotations

import fcntl
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration import containers


@pytest.fixture()
def shared(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setattr(containers, "SHARED", tmp_path / "shared")
    yield tmp_path / "shared"


def _lease() -> containers.DaemonLease:
    users = containers._locked("users")
    fcntl.flock(users, fcntl.LOCK_SH)
    return containers.DaemonLease(users)


def _daemon() -> subprocess.Popen[bytes]:
    """A running stand-in: returned once its command line reads ``dockerd``, as a real daemon's
    does long before the tests let go of it (read inside bash's exec of sleep, the command line
    can be empty, and the lease would rightly leave a process it cannot name alone)."""
    proc = subprocess.Popen(["bash", "-c", "exec -a dockerd sleep 300"])
    cmdline = Path(f"/proc/{proc.pid}/cmdline")
    deadline = time.monotonic() + 10
    while not cmdline.read_bytes().startswith(b"dockerd\0"):
        assert time.monotonic() < deadline, cmdline.read_bytes()
        time.sleep(0.01)
    return proc


def test_the_last_process_to_let_go_stops_the_daemon_the_tests_started(shared: Path) -> None:
    a, b = _lease(), _lease()  # two test processes (flock: two open files conflict like two)
    daemon = _daemon()
    (shared / "pid").write_text(str(daemon.pid))
    containers.stop_daemon(a)  # the starter finishes first: b still builds on it
    assert daemon.poll() is None
    containers.stop_daemon(b)
    assert daemon.wait(timeout=5) is not None and not (shared / "pid").exists()


def test_a_daemon_the_tests_did_not_start_is_left_running(shared: Path) -> None:
    daemon = _daemon()  # CI's, started before the tests: no pid file
    try:
        containers.stop_daemon(_lease())
        assert daemon.poll() is None
        other = subprocess.Popen(["sleep", "300"])  # a stale pid file naming something else
        (shared / "pid").write_text(str(other.pid))
        containers.stop_daemon(_lease())
        assert other.poll() is None and not (shared / "pid").exists()
        other.kill()
    finally:
        daemon.kill()
