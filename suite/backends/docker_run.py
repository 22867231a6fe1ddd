"""Run one container through the Docker SDK as if it were a child process:
``python -m suite.backends.docker_run [OPTIONS] IMAGE -- ARGV...``.

Its output goes to this process's stdout, its exit status becomes this process's, and a
container that died from a signal (exit 128+N) ends this process with the same signal, as a
local worker would. A SIGKILL alone says nothing about memory (``docker kill`` sends one too):
when Docker says the container was OOM-killed (``State.OOMKilled``), that statement is appended
to the session's evidence file (suite/oom.py), which the runner reads before it records ``oom``. SIGTERM or SIGINT stops the container (SIGTERM, then SIGKILL after a grace period).
The container is removed at the end. The options mirror ``docker run``'s (see ContainerSpec).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from typing import Any

from suite.backends.docker import CANNOT_CREATE, TASK_LABEL, ContainerSpec

GRACE_S = 5.0
#: how long a SIGKILLed container's state is watched for Docker's OOM statement. containerd
#: sends its OOM event apart from the exit event, and containerd 1.6 (Debian bookworm's) not
#: always first (containerd/containerd#12714 orders them): the daemon can report the exit with
#: OOMKilled still false and set it a moment later. Only a 137 waits; a ``docker kill`` costs
#: this long.
OOM_EVENT_WAIT_S = 3.0


def parse(argv: list[str]) -> ContainerSpec:
    p = argparse.ArgumentParser(prog="python -m suite.backends.docker_run")
    p.add_argument("--network", default="host")
    p.add_argument("--ipc", default="host")
    p.add_argument("--workdir", default="/")
    p.add_argument("--user")
    p.add_argument("--mount", action="append", default=[], help="SRC:DST:ro|rw")
    p.add_argument("--env", action="append", default=[], help="KEY=VALUE")
    p.add_argument("--forward-env", action="append", default=[], help="NAME or PATTERN*")
    p.add_argument("--gpus", choices=("all",))
    p.add_argument("--label", action="append", default=[], help="KEY=VALUE")
    p.add_argument("--memory", help="a memory limit, as docker run's (512m, 4g)")
    p.add_argument("image")
    p.add_argument("argv", nargs=argparse.REMAINDER)
    args = p.parse_args(argv)
    command = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    if not command:
        p.error("a command after -- is required")
    mounts = []
    for m in args.mount:
        src, dst, mode = m.rsplit(":", 2)
        mounts.append((src, dst, mode == "ro"))
    return ContainerSpec(
        image=args.image,
        argv=command,
        mounts=mounts,
        env=dict(e.split("=", 1) for e in args.env),
        forward_env=tuple(args.forward_env),
        user=args.user,
        gpus=args.gpus == "all",
        workdir=args.workdir,
        labels=dict(kv.split("=", 1) for kv in args.label),
        network=args.network,
        ipc=args.ipc,
        memory=args.memory,
    )


def reap(task: str, within_s: float) -> int:
    """``--reap TASK --within S``: remove the container labelled ``dlsuite.task=TASK`` once the
    daemon has made it, waiting up to S seconds. Started, detached, by the docker backend after
    a timeout whose helper was killed while the daemon was still creating the container."""
    import time

    import docker.errors

    from suite.images import ImageError, docker_client

    deadline = time.monotonic() + within_s
    try:
        client = docker_client()
        while time.monotonic() < deadline:
            found = client.containers.list(all=True, filters={"label": f"dlsuite.task={task}"})
            for container in found:
                container.remove(force=True)
            if found:
                return 0
            time.sleep(2.0)
    except (ImageError, docker.errors.DockerException):
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    import shlex

    import docker.errors

    from suite.images import ImageError, docker_client

    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--reap"] and len(argv) == 4 and argv[2] == "--within":
        return reap(argv[1], float(argv[3]))
    spec = parse(argv)
    print("[dlsuite.docker] " + shlex.join(spec.docker_run()), flush=True)
    stopping = threading.Event()
    made: list[Any] = []  # the container, once created

    def stop_container() -> None:
        try:
            made[0].stop(timeout=int(GRACE_S))  # SIGTERM, then SIGKILL
        except docker.errors.DockerException:
            pass

    def stop(signum: int, frame: Any) -> None:
        if not stopping.is_set():
            stopping.set()
            if made:
                threading.Thread(target=stop_container, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        client = docker_client()
        made.append(client.containers.create(**spec.sdk_kwargs()))
    except (ImageError, docker.errors.DockerException) as exc:
        print(f"{CANNOT_CREATE}{exc}", file=sys.stderr)
        return 125  # docker run's own code for "the daemon failed"
    container = made[0]
    try:
        if stopping.is_set():  # stopped while the container was being created
            return 143
        container.start()
        out = sys.stdout.buffer
        for chunk in container.logs(stream=True, follow=True, stdout=True, stderr=True):
            out.write(chunk)
            out.flush()
        status = container.wait()
        code = int(status.get("StatusCode", 1))
        killed = code == 128 + signal.SIGKILL and not stopping.is_set()  # not by our stop()
        oom = _oom(container, wait_s=OOM_EVENT_WAIT_S if killed else 0.0)
    except docker.errors.DockerException as exc:
        print(f"[dlsuite.docker] {exc}", file=sys.stderr)
        return 125
    finally:
        try:
            container.remove(force=True)
        except docker.errors.DockerException:
            pass
    if oom:
        _note_oom(spec, container, code)
        code = 128 + signal.SIGKILL
    elif killed:
        print(
            f"[dlsuite.docker] container {container.short_id} was killed (SIGKILL) and Docker "
            f"did not say OOMKilled within {OOM_EVENT_WAIT_S:g} s",
            file=sys.stderr, flush=True,
        )  # fmt: skip
    if code > 128 and 0 < code - 128 < signal.NSIG and not stopping.is_set():
        # die from the same signal, as a local worker would
        sig = code - 128
        sys.stdout.flush()
        if sig not in (signal.SIGKILL, signal.SIGSTOP):  # (these take no handler: EINVAL)
            signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    return code


def _note_oom(spec: ContainerSpec, container: Any, code: int) -> None:
    """Docker's statement, where the runner looks for it (the session's evidence file)."""
    from pathlib import Path

    from suite.oom import note_oom

    doc = spec.labels.get(TASK_LABEL)
    detail = (
        f"container {container.short_id} ({spec.image}) exited with code {code} and "
        "State.OOMKilled true"
    )
    print(f"[dlsuite.docker] {detail}", file=sys.stderr, flush=True)
    if doc:
        try:
            note_oom(Path(doc), "Docker", detail)
        except OSError as exc:
            print(f"[dlsuite.docker] cannot write the OOM evidence: {exc}", file=sys.stderr)


def _oom(container: Any, wait_s: float) -> bool:
    """Docker's ``State.OOMKilled``, read again until it is true or ``wait_s`` has passed."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            container.reload()
        except Exception:  # noqa: BLE001 - removed already: no verdict
            return False
        if container.attrs.get("State", {}).get("OOMKilled"):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


if __name__ == "__main__":
    raise SystemExit(main())
