"""What the docker and apptainer backends share: the worker runs in the framework's image.

Where the launcher runs decides the shape of the command line:

* ``single``, ``spawn``, ``torchrun``, ``horovodrun`` start their ranks as child processes, so
  they run **inside** one container, with the image's interpreter: ``CONTAINER -- LAUNCHER --
  WORKER``. Their rendezvous variables are handed to the container explicitly.
* ``srun`` and ``mpirun`` start ranks on other nodes, so they run on the **host** and start one
  container per rank: ``LAUNCHER -- CONTAINER -- WORKER`` (how Slurm sites run Apptainer). The
  rank variables the launcher sets reach each container.

Which of the two a launcher is, its class says (``Launcher.container_per_rank``).

The run directory is bind-mounted at its host path (task files and records use absolute paths);
a file the task names (``--model my.onnx``) is mounted read-only at its path too. Host side:
nothing here imports a framework.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from abc import abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from suite.backends.base import Backend
from suite.errors import ConfigError
from suite.images import IMAGE_HOME, IMAGE_PYTHON
from suite.provenance import SOURCE_ROOT, git_info

if TYPE_CHECKING:
    from suite.settings import RunConfig

Bind = tuple[str, str, bool]  # host path, container path, read-only


@dataclass(frozen=True)
class InsideCommand:
    """What a container backend runs inside the image: ``argv`` with ``env`` set, for the task
    ``task_path``; ``per_rank``: started by a host launcher, so the rank variables of the host
    process must reach the container (the usual ones, and ``rank_variables``: those the
    launcher declares)."""

    argv: list[str]
    task_path: Path
    env: dict[str, str] = field(default_factory=dict)
    per_rank: bool = False
    rank_variables: tuple[str, ...] = ()


def gpus_present() -> bool:
    """Whether this host has an NVIDIA GPU a container should be given (``nvidia-smi -L``)."""
    if shutil.which("nvidia-smi") is None:
        return False
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return False
    return out.returncode == 0 and "GPU" in out.stdout


class ContainerBackend(Backend):
    """A backend whose worker runs in ``framework``'s image with the image's interpreter."""

    kind = "container"
    per_framework = True  # the framework's image
    python = IMAGE_PYTHON
    image: str = ""
    image_digest: str | None = None

    @classmethod
    def create(cls, framework: str, settings: RunConfig) -> Backend:
        """The framework's image (a missing one raises the SuiteError that says how to make it)."""
        return cls(framework)

    def __init__(self, framework: str, gpus: bool | None = None) -> None:
        self.framework = framework
        self.gpus = gpus_present() if gpus is None else gpus

    def worker(self, task_path: Path) -> list[str]:
        return [IMAGE_PYTHON, "-m", "suite.worker", str(task_path)]

    @abstractmethod
    def wrap(self, inside: InsideCommand) -> list[str]:
        """The host's command line that runs ``inside`` in the image."""

    def command(self, task_path: Path) -> list[str]:
        return self.wrap(InsideCommand(self.worker(task_path), task_path))

    def wants_gpus(self, task_path: Path) -> bool:
        """Whether the task's container is given the host's GPUs: a task on ``cuda`` always
        (without a GPU the worker then says so itself), one on ``auto`` when this host has an
        NVIDIA GPU, one on ``cpu`` never."""
        devices = task_devices(task_path)
        return "cuda" in devices or (self.gpus and devices != {"cpu"})

    def binds(self, task_path: Path) -> list[Bind]:
        """The run directory (read-write) and every existing absolute file path among the
        task's parameters (read-only), each at its host path."""
        run_dir = str(task_path.parent.parent)
        out: list[Bind] = [(run_dir, run_dir, False)]
        for value in _parameter_values(task_path):
            if (
                isinstance(value, str)
                and os.path.isabs(value)
                and os.path.exists(value)
                and not value.startswith(run_dir + os.sep)
                and (value, value, True) not in out
            ):
                out.append((value, value, True))
        return out

    def launch_command(
        self, task_path: Path, launcher: Any = None, world_size: int = 1, nodes: int = 1
    ) -> tuple[list[str], dict[str, str]]:
        from suite.launchers.base import Launch, free_port, free_ports

        # wrap() first: a backend may pass the in-image variables through environment()
        if launcher is None:
            return self.command(task_path), self.environment()
        ports = free_ports(world_size + 1) if world_size > 1 else (free_port(),)

        def launch(worker: list[str]) -> Launch:
            return Launch(
                worker=worker,
                python=IMAGE_PYTHON,
                world_size=world_size,
                nodes=nodes,
                master_port=ports[0],
                rank_ports=ports[1:],
            )

        if launcher.container_per_rank:
            worker = self.wrap(
                InsideCommand(
                    self.worker(task_path), task_path, per_rank=True,
                    rank_variables=launcher.rank_variables or (),
                )
            )  # fmt: skip
            spec = launch(worker)
            argv = launcher.command(spec)
            env = self.environment()
            env.update(launcher.environment(spec))
            return argv, env
        spec = launch(self.worker(task_path))
        argv = self.wrap(
            InsideCommand(launcher.command(spec), task_path, launcher.environment(spec))
        )
        return argv, self.environment()

    def describe(self) -> dict[str, str | None]:
        """What records carry as ``backend.image`` and ``backend.image_digest``."""
        return {"image": self.image, "image_digest": self.image_digest}

    def stale_worker_hint(self) -> str | None:
        """The image's suite, and the command that rebuilds the image (set by the subclass:
        ``rebuild`` and ``built_from``, from the image's labels)."""
        rebuild = getattr(self, "rebuild", None)
        if not rebuild:
            return None
        return stale_image_hint(self.image, getattr(self, "built_from", ""), rebuild)


#: what a bound path cannot hold, per container backend: ':' separates the fields of docker's
#: ``--volume`` (the line the log gives to rerun by hand, and the helper's ``--mount``) and of
#: Apptainer's ``--bind``; ',' separates Apptainer's binds
UNBINDABLE = {"docker": ":", "apptainer": ":,"}


def check_bindable(run_dir: Path, tasks: list[Any]) -> None:
    """One ConfigError, before the run, for a run directory or a file a task names (``--model``)
    that a container backend of ``tasks`` would bind at its path but cannot: a path with a
    character in :data:`UNBINDABLE`. (Without it every task failed, "worker exited with code
    255 and wrote no record", the cause only in the task's log.)"""
    for kind in sorted({t.backend for t in tasks} & UNBINDABLE.keys()):
        paths = [("--out", str(run_dir.resolve()))]
        for t in tasks:
            if t.backend == kind:
                paths += [
                    (f"--{name.replace('_', '-')}", value)
                    for name, value in t.params.items()
                    if isinstance(value, str) and os.path.isabs(value) and os.path.exists(value)
                ]
        for what, path in paths:
            bad = sorted({c for c in path if c in UNBINDABLE[kind]})
            if bad:
                said = " and ".join(repr(c) for c in bad)
                raise ConfigError(
                    f"{what} {path}: --backend {kind} binds it into the container at its own "
                    f"path, which cannot hold {said} (they separate the fields of its bind "
                    "option); choose a path without them"
                )


def _task_documents(path: Path) -> list[dict[str, Any]]:
    """A task document, or every task document of a worker session's (none if unreadable)."""
    try:
        doc = json.loads(path.read_text())
        docs = [json.loads(Path(p).read_text()) for p in doc["tasks"]] if "tasks" in doc else [doc]
    except (OSError, ValueError, KeyError, TypeError):
        return []
    return [d for d in docs if isinstance(d, dict)]


def _parameter_values(path: Path) -> list[Any]:
    """The parameter values of a task document, or of every task of a worker session's."""
    return [v for d in _task_documents(path) for v in (d.get("params") or {}).values()]


def task_devices(path: Path) -> set[str]:
    """The ``device`` of a task document, or of every task of a session's (``auto`` where a
    document gives none)."""
    return {str(d.get("device") or "auto") for d in _task_documents(path)} or {"auto"}


def warn_if_other_commit(image: str, labels: dict[str, str], rebuild: str) -> str:
    """One line when the image's suite is not this checkout's: the worker in an image is the
    image's suite, and a task document of a newer suite may not validate there. ``rebuild``:
    the command that rebuilds the image. Returns the commit the image was built from ('' where
    its labels do not say)."""
    built_from = labels.get("org.opencontainers.image.revision", "")
    commit, _ = git_info()
    if commit and built_from and not built_from.startswith(commit):
        print(
            f"dlsuite: note: {image} was built from commit {built_from[:12]}, this checkout is "
            f"at {commit[:12]}; the workers run the image's suite (rebuild it: `{rebuild}`)",
            file=sys.stderr,
        )
    return built_from


def is_older_commit(commit: str) -> bool:
    """Whether ``commit`` is an ancestor of this checkout's (False where git cannot tell: no
    repository, a commit it does not hold)."""
    head, _ = git_info()
    if not commit or not head or commit.startswith(head):
        return False
    try:
        done = subprocess.run(
            ["git", "-C", str(SOURCE_ROOT), "merge-base", "--is-ancestor", commit, head],
            capture_output=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


def stale_image_hint(image: str, built_from: str, rebuild: str) -> str:
    """What a record says first when the image's worker refused this checkout's task document:
    whose suite the image holds, and the exact command that rebuilds it."""
    commit = (git_info()[0] or "unknown")[:12]
    if built_from and is_older_commit(built_from):
        whose = (
            f"the suite in {image} (commit {built_from[:12]}) is older than this checkout's "
            f"task format (commit {commit})"
        )
    elif built_from:
        whose = (
            f"the suite in {image} (commit {built_from[:12]}) cannot read this checkout's task "
            f"format (commit {commit})"
        )
    else:
        whose = (
            f"the suite in {image} (its commit unlabelled) cannot read this checkout's task format"
        )
    return f"{whose}; rebuild it: `{rebuild}`"


__all__ = ["IMAGE_HOME", "IMAGE_PYTHON", "ContainerBackend", "InsideCommand", "gpus_present"]
