"""What the container tests need, made for real and reused: a Docker daemon (``dockerd``
started here when none answers, shared by every test process that needs one and stopped by the
last of them to finish, never one the tests did not start), the Debian base bootstrapped from Debian's archive, a wheelhouse, the pytorch image.

The slow parts are cached under ``~/.cache/dlsuite/`` (``DLSUITE_CACHE_DIR``): the base's root
file system tarball (``images/base-debian-bookworm.tar``) and the wheelhouse (``wheelhouse/``);
an image whose context and build arguments are unchanged is reused (its context-digest label).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import pytest

from suite import images

TAG = "test"  # the tests' images: dlsuite/<framework>:test, never a user's tag
CACHE = Path(os.environ.get("DLSUITE_CACHE_DIR", Path.home() / ".cache" / "dlsuite"))


#: pytest-xdist runs the Docker and the Apptainer modules in two processes at once: they share
#: one daemon. Each holds a shared lock on ``users`` while it uses the daemon; the daemon the
#: tests started (its pid in ``pid``) is stopped by the last to let go, who alone can take the
#: lock exclusively. (Before, the process that had started it stopped it at its own end, under
#: the other's image build: two errors in a plain `make test`, none in CI, whose script starts
#: dockerd first.)
SHARED = Path(tempfile.gettempdir()) / "dlsuite-tests-dockerd"


@dataclass
class DaemonLease:
    """One test process's use of the shared daemon, until ``stop_daemon``."""

    users: IO[str]


def _locked(name: str) -> IO[str]:
    SHARED.mkdir(exist_ok=True)
    return (SHARED / name).open("a+")


def ensure_daemon(log_dir: Path) -> tuple[Any, DaemonLease]:
    """A Docker SDK client, and this process's lease on the daemon (started here when none
    answers)."""
    import docker
    import docker.errors

    users = _locked("users")
    fcntl.flock(users, fcntl.LOCK_SH)  # held while this process uses the daemon
    lease = DaemonLease(users)
    with _locked("start") as start:
        fcntl.flock(start, fcntl.LOCK_EX)  # one process starts it; the others wait and ping
        try:
            client = docker.from_env(timeout=600)
            client.ping()
            return client, lease
        except docker.errors.DockerException:
            pass
        dockerd = shutil.which("dockerd")
        if dockerd is None:
            pytest.fail(
                "no Docker daemon answers and dockerd is not installed: apt-get install docker.io"
            )
        if os.geteuid() != 0:
            pytest.fail("no Docker daemon answers, and starting dockerd needs root")
        # overlay2 where the kernel allows it (an image's containers and build steps share its
        # files), else vfs (each copies the whole file system: ~30 s for the pytorch image here)
        for driver in ("overlay2", "vfs"):
            log = (log_dir / "dockerd.log").open("ab")
            proc = subprocess.Popen(
                [dockerd, f"--storage-driver={driver}"],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
            deadline = time.monotonic() + 90
            while time.monotonic() < deadline and proc.poll() is None:
                try:
                    client = docker.from_env(timeout=600)
                    client.ping()
                    (SHARED / "pid").write_text(str(proc.pid))
                    return client, lease
                except docker.errors.DockerException:
                    time.sleep(0.5)
            _stop(proc.pid)
    pytest.fail(f"dockerd did not start with overlay2 or vfs; see {log_dir / 'dockerd.log'}")


def _stop(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            os.kill(pid, 0)  # ProcessLookupError once it has gone
            if Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z":
                os.waitpid(pid, 0)  # our own child: reap it
                return
            time.sleep(0.2)
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, ChildProcessError, FileNotFoundError):
        return


def stop_daemon(lease: DaemonLease) -> None:
    """Let go of the daemon; the last process to let go stops the one the tests started."""
    fcntl.flock(lease.users, fcntl.LOCK_UN)
    try:
        fcntl.flock(lease.users, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:  # another process still uses it: the last one stops it
        lease.users.close()
        return
    try:
        pid_file = SHARED / "pid"
        if pid_file.exists():
            pid = int(pid_file.read_text())
            cmdline = Path(f"/proc/{pid}/cmdline")
            if cmdline.exists() and b"dockerd" in cmdline.read_bytes():  # not a stale file's pid
                _stop(pid)
            pid_file.unlink()
    finally:
        lease.users.close()  # closing releases the lock


def ensure_base(client: Any) -> str:
    """``dlsuite/base:debian-bookworm``: imported from the cached tarball, bootstrapped first
    (debootstrap from Debian's archive, about a minute) when there is none."""
    import docker.errors

    try:
        return str(client.images.get(images.LOCAL_BASE).id)
    except docker.errors.ImageNotFound:
        pass
    tarball = CACHE / "images" / "base-debian-bookworm.tar"
    if not tarball.is_file():
        if shutil.which("debootstrap") is None:
            pytest.fail("debootstrap is not installed: apt-get install debootstrap")
        assert images.bootstrap_base(tarball).returncode == 0, "containers/base/bootstrap.sh failed"
    return images.import_base(tarball, images.LOCAL_BASE)


def ensure_image(client: Any, framework: str, log_dir: Path) -> images.BuildResult:
    """``dlsuite/<framework>:test`` from the local base and a wheelhouse filled on this host
    (reused when nothing it is made from changed)."""
    import docker.errors

    ensure_base(client)
    ref = f"dlsuite/{framework}:{TAG}"
    try:
        replaced = str(client.images.get(ref).id)
    except docker.errors.ImageNotFound:
        replaced = ""
    wheelhouse = CACHE / "wheelhouse"
    images.prepare_wheelhouse(framework, wheelhouse, say=lambda s: None)
    lines: list[str] = []
    result = images.build(
        framework,
        images.BuildOptions(base=images.LOCAL_BASE, tag=TAG),
        wheelhouse=wheelhouse,
        log_dir=log_dir,
        on_line=lines.append,
    )
    (log_dir / f"build-{framework}.out").write_text("\n".join(lines) + "\n")
    if replaced and replaced != str(client.images.get(ref).id):
        # the test image this build replaced (1.6 GB for pytorch) is untagged now and nothing
        # will use it again: left there, every commit's test run kept one, and a machine that
        # ran CI for each of them filled its disk (a CI run died "No space left on device")
        try:
            client.images.remove(replaced)
        except docker.errors.APIError:
            pass  # a container still holds it; docker image prune removes it later
    return result
