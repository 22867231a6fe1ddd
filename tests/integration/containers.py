"""What the container tests need, made for real and reused: a Docker daemon (``dockerd
--storage-driver=vfs`` started here when none answers, stopped at the end only if started
here), the Debian base bootstrapped from Debian's archive, a wheelhouse, the pytorch image.

The slow parts are cached under ``~/.cache/dlsuite/`` (``DLSUITE_CACHE_DIR``): the base's root
file system tarball (``images/base-debian-bookworm.tar``) and the wheelhouse (``wheelhouse/``);
an image whose context and build arguments are unchanged is reused (its context-digest label).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from suite import images

TAG = "test"  # the tests' images: dlsuite/<framework>:test, never a user's tag
CACHE = Path(os.environ.get("DLSUITE_CACHE_DIR", Path.home() / ".cache" / "dlsuite"))


def ensure_daemon(log_dir: Path) -> tuple[Any, subprocess.Popen[bytes] | None]:
    """A Docker SDK client, and the dockerd started here (None when one already answered)."""
    import docker
    import docker.errors

    try:
        client = docker.from_env(timeout=600)
        client.ping()
        return client, None
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
                return client, proc
            except docker.errors.DockerException:
                time.sleep(0.5)
        stop_daemon(proc)
    pytest.fail(f"dockerd did not start with overlay2 or vfs; see {log_dir / 'dockerd.log'}")


def stop_daemon(proc: subprocess.Popen[bytes] | None) -> None:
    if proc is None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


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
