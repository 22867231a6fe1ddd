"""The docker backend: each worker runs in its framework's image (``dlsuite/<framework>:<tag>``)
through the Docker SDK.

The container is described by a :class:`ContainerSpec` and started by a small host process,
``python -m suite.backends.docker_run`` (the SDK, no ``docker`` CLI needed), so that it has an
argument list like every other backend: a launcher can wrap it (``srun`` starts one per rank),
the runner's timeout kills it, and its exit status and signal are the container's. The spec
also renders the equivalent ``docker run`` line, which the worker's log starts with.

How it runs: host networking (distributed runs rendezvous on the host's addresses) and host
IPC (NCCL and gloo use shared memory beyond Docker's 64 MB default); every GPU of the host when
it has any; the run directory bind-mounted at its own path; as the caller's uid:gid when the
caller is not root (the records in the run directory are then the caller's), else as the
image's non-root user ``dlsuite`` (containers never run as root): the run directory's
``tasks/``, ``sessions/`` and ``logs/`` are handed to that uid while the worker runs and taken
back, with all the worker wrote there, once it is gone, so root's records stay root's (on the
host that uid is whoever has it, who could otherwise rewrite them).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

from suite import images
from suite.backends.container import (
    Bind,
    ContainerBackend,
    InsideCommand,
    warn_if_other_commit,
)
from suite.provenance import SOURCE_ROOT

#: host variables a per-rank container receives: the rank and rendezvous variables of the
#: usual launchers (Slurm, Open MPI, PMI, torchrun-style), GPU selection and NCCL settings; a
#: launcher's own ``rank_variables`` that these do not cover are added to them
FORWARD_ENV = (
    "SLURM_*", "OMPI_*", "PMI_*", "PMIX_*", "HOROVOD_*", "NCCL_*", "DLSUITE_*",
    "MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
    "OMP_NUM_THREADS", "CUDA_VISIBLE_DEVICES",
)  # fmt: skip
TASK_LABEL = "dlsuite.task"


@dataclass(frozen=True)
class ContainerSpec:
    """One container: rendered as the helper's arguments, as ``docker run`` and as SDK keywords."""

    image: str
    argv: list[str]
    mounts: list[Bind] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    forward_env: tuple[str, ...] = ()
    user: str | None = None
    gpus: bool = False
    workdir: str = images.IMAGE_HOME
    labels: dict[str, str] = field(default_factory=dict)
    network: str = "host"
    ipc: str = "host"
    #: a memory limit (``docker run --memory``: "512m", "4g"); None: none of the container's own
    memory: str | None = None

    def helper_argv(self, python: str | None = None) -> list[str]:
        """``python -m suite.backends.docker_run ... IMAGE -- ARGV``: what the backend runs."""
        out = [python or sys.executable, "-m", "suite.backends.docker_run"]
        out += ["--network", self.network, "--ipc", self.ipc, "--workdir", self.workdir]
        if self.user:
            out += ["--user", self.user]
        for src, dst, ro in self.mounts:
            out += ["--mount", f"{src}:{dst}:{'ro' if ro else 'rw'}"]
        for key, value in sorted(self.env.items()):
            out += ["--env", f"{key}={value}"]
        for pattern in self.forward_env:
            out += ["--forward-env", pattern]
        out += self._gpus_labels_memory()
        return [*out, self.image, "--", *self.argv]

    def docker_run(self, environ: dict[str, str] | None = None) -> list[str]:
        """The equivalent ``docker run`` command line (for the log, and to rerun by hand)."""
        out = ["docker", "run", "--rm", "--network", self.network, "--ipc", self.ipc]
        if self.user:
            out += ["--user", self.user]
        for src, dst, ro in self.mounts:
            out += ["--volume", f"{src}:{dst}:{'ro' if ro else 'rw'}"]
        out += ["--workdir", self.workdir]
        for key, value in sorted(self.environment(environ).items()):
            out += ["--env", f"{key}={value}"]
        out += self._gpus_labels_memory()
        return [*out, "--entrypoint", self.argv[0], self.image, *self.argv[1:]]

    def _gpus_labels_memory(self) -> list[str]:
        """The options the helper's arguments and ``docker run`` spell the same way."""
        out = ["--gpus", "all"] if self.gpus else []
        for key, value in sorted(self.labels.items()):
            out += ["--label", f"{key}={value}"]
        if self.memory:
            out += ["--memory", self.memory]
        return out

    def environment(self, environ: dict[str, str] | None = None) -> dict[str, str]:
        """The container's variables: the forwarded host ones, then the explicit ones."""
        host = os.environ if environ is None else environ
        out = {
            k: v
            for k, v in host.items()
            if any(fnmatchcase(k, pattern) for pattern in self.forward_env)
        }
        out.update(self.env)
        return out

    def sdk_kwargs(self, environ: dict[str, str] | None = None) -> dict[str, Any]:
        """Keywords for ``client.containers.create`` (Docker SDK)."""
        from docker.types import DeviceRequest, Mount

        kwargs: dict[str, Any] = {
            "image": self.image,
            "entrypoint": [self.argv[0]],
            "command": self.argv[1:],
            "environment": self.environment(environ),
            "mounts": [
                Mount(target=dst, source=src, type="bind", read_only=ro)
                for src, dst, ro in self.mounts
            ],
            "working_dir": self.workdir,
            "network_mode": self.network,
            "ipc_mode": self.ipc,
            "labels": dict(self.labels),
            "detach": True,
        }
        if self.user:
            kwargs["user"] = self.user
        if self.gpus:
            kwargs["device_requests"] = [DeviceRequest(count=-1, capabilities=[["gpu"]])]
        if self.memory:
            kwargs["mem_limit"] = self.memory
        return kwargs


#: how the helper (suite/backends/docker_run.py) says that it could not create the container
CANNOT_CREATE = "[dlsuite.docker] cannot create the container: "


def helper_failure(output: str) -> str | None:
    """The helper's last word that it could not create the worker's container (no daemon, or
    one this user may not use; an image removed since the run began), without its prefix."""
    said = [line for line in output.splitlines() if line.startswith(CANNOT_CREATE)]
    return said[-1].removeprefix("[dlsuite.docker] ") if said else None


class DockerBackend(ContainerBackend):
    kind = "docker"

    def __init__(
        self,
        framework: str,
        gpus: bool | None = None,
        tag: str | None = None,
        client: Any = None,
        uid: int | None = None,
        gid: int | None = None,
    ) -> None:
        super().__init__(framework, gpus)
        self.client = client or images.docker_client()
        self.image = images.image_ref(framework, tag)
        try:
            info = images.image_info(self.client, self.image)
        except images.ImageError:
            raise images.ImageError(
                f"--backend docker: image {self.image} not found"
                f"{images.tags_here(self.client, self.image, images.TAG_VAR)}; build it "
                f"with `dlsuite images build --framework {framework}` (docs/guide/containers.md)",
                image=self.image,
            ) from None
        self.image_digest = info["digest"] or info["id"]
        self.image_uid = int(info["labels"].get("dlsuite.uid", "1000"))
        self.uid = os.getuid() if uid is None else uid
        self.gid = os.getgid() if gid is None else gid
        tag = self.image.rpartition(":")[2]
        self.rebuild = f"dlsuite images build --framework {framework} --tag {tag}"
        self.built_from = warn_if_other_commit(self.image, info["labels"], self.rebuild)

    def spec(self, inside: InsideCommand) -> ContainerSpec:
        # the caller's uid:gid; root's worker runs as the image's non-root user (prepare)
        user = None if self.uid == 0 else f"{self.uid}:{self.gid}"
        # a launcher's own rank variables that the usual patterns do not cover reach it too
        declared = tuple(
            v for v in inside.rank_variables if not any(fnmatchcase(v, p) for p in FORWARD_ENV)
        )
        env = dict(inside.env)
        if user:
            env["HOME"] = "/tmp"  # the caller's uid has no home in the image
        return ContainerSpec(
            image=self.image,
            argv=inside.argv,
            mounts=self.binds(inside.task_path),
            env=env,
            forward_env=FORWARD_ENV + declared if inside.per_rank else (),
            user=user,
            gpus=self.gpus,
            labels={TASK_LABEL: str(inside.task_path)},
        )

    def wrap(self, inside: InsideCommand) -> list[str]:
        return self.spec(inside).helper_argv()

    def environment(self) -> dict[str, str]:
        env = super().environment()
        # the helper is this suite's code, run by the host's interpreter
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(SOURCE_ROOT), env.get("PYTHONPATH", "")) if p
        )
        return env

    def startup_failure(self, output: str) -> str | None:
        return helper_failure(output)

    #: what root's worker writes into: its records and points (tasks/), session events
    #: (sessions/) and output (logs/)
    HANDED = ("tasks", "sessions", "logs")

    def handed(self, path: Path) -> list[Path]:
        """The run directory's folders root's worker writes into (``path``: its task file)."""
        if self.uid != 0 or self.image_uid == 0:
            return []
        run_dir = path.parent.parent
        return [run_dir / sub for sub in self.HANDED if (run_dir / sub).is_dir()]

    def prepare(self, path: Path) -> None:
        self.remove_leftovers(path)  # an earlier worker's, if its creation came late
        self.hand_over(path)

    def hand_over(self, path: Path) -> None:
        """Root's run: the image's user writes into these folders while its worker runs."""
        for folder in self.handed(path):
            os.chown(folder, self.image_uid, -1)

    def finish(self, path: Path, ended_early: bool) -> None:
        removed = self.remove_leftovers(path)
        self.take_back(path)
        if ended_early and not removed:
            # the helper may have died while the daemon was still creating the container
            # (minutes on vfs): a detached reaper removes it once it exists
            self.start_reaper(path)

    def take_back(self, path: Path) -> None:
        """Root's folders and all the worker wrote in them back to root, once it is gone:
        none of root's records stays writable by whoever has the image's uid on the host.
        (The local runner runs one worker at a time; root's Docker runs sharing one run
        directory across concurrent jobs would hand and take back each other's folders.)"""
        for folder in self.handed(path):
            for p in (folder, *folder.rglob("*")):
                try:
                    if p.lstat().st_uid == self.image_uid:
                        os.lchown(p, self.uid, self.gid)
                except FileNotFoundError:  # removed meanwhile (a points file merged)
                    continue

    def reaper_argv(self, task_path: Path, within_s: float = 900) -> list[str]:
        return [
            sys.executable, "-m", "suite.backends.docker_run",
            "--reap", str(task_path), "--within", f"{within_s:g}",
        ]  # fmt: skip

    def start_reaper(self, task_path: Path) -> None:
        import subprocess

        subprocess.Popen(
            self.reaper_argv(task_path),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=self.environment(),
            start_new_session=True,  # outlives the run, and no signal of the run reaches it
        )

    def remove_leftovers(self, task_path: Path) -> int:
        """Kill and remove containers that outlived their helper (a SIGKILL on a timeout
        reaches the helper, not the container): this task's, and any other of the same run
        directory that is not running, such as one whose creation the daemon finished only
        after its helper was killed (creating a container takes minutes on vfs storage)."""
        import docker.errors

        gone = 0
        run_dir = str(task_path.parent.parent) + os.sep
        try:
            found = [
                c
                for c in self.client.containers.list(all=True, filters={"label": TASK_LABEL})
                if c.labels.get(TASK_LABEL) == str(task_path)
                or (c.labels.get(TASK_LABEL, "").startswith(run_dir) and c.status != "running")
            ]
        except docker.errors.DockerException:
            return 0
        for container in found:
            try:
                container.remove(force=True)
                gone += 1
            except docker.errors.DockerException:
                pass
        return gone
