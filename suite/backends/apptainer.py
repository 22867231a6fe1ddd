"""The apptainer backend: each worker runs in its framework's SIF,
``apptainer exec [--nv] --pwd /opt/dlsuite --bind RUN_DIR F.sif python -m suite.worker TASK``.

The SIF is ``$DLSUITE_IMAGE_DIR/<framework>.sif`` (a site profile's ``image_dir``; default
``~/.cache/dlsuite/images``), made by ``dlsuite images sif``. Apptainer runs as the caller, so
the records it writes in the run directory are the caller's. ``--nv`` is added for a task on
``cuda``, and for one on ``auto`` when the host has an NVIDIA GPU. The host environment
reaches the container (Apptainer's default), which is how ``srun``'s rank variables get to
each rank, but without the host's ``PYTHONPATH``, ``PYTHONHOME`` and ``VIRTUAL_ENV`` (they
would put the host's suite before the image's) and with ``PYTHONNOUSERSITE=1`` (the bound
home's ``~/.local`` stays out). Variables the backend sets for an in-image launcher travel as
``APPTAINERENV_<NAME>``, which keeps commas and spaces intact. ``--pwd`` keeps the host's
working directory (a checkout's ``suite/``) off ``sys.path``.
"""

from __future__ import annotations

import shlex
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from suite import images
from suite.backends.container import (
    ContainerBackend,
    InsideCommand,
    gpus_present,
    warn_if_other_commit,
)
from suite.images import sif_labels

if TYPE_CHECKING:
    from suite.backends.base import Backend
    from suite.settings import RunConfig

#: host variables that must not reach the image's interpreter
DROPPED = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")
ENV_PREFIX = "APPTAINERENV_"
#: what Apptainer says when it cannot mount the SIF and unpacks it for the worker instead
UNPACKING = "Converting SIF file to temporary sandbox"


class ApptainerBackend(ContainerBackend):
    kind = "apptainer"
    #: Apptainer run by a user where SIFs cannot be mounted (no squashfuse) unpacks the image
    #: into $TMPDIR and removes it after the worker exits: for pytorch's 1.5 GB, 33 s and more
    #: on a busy disk here. Ended within the 30 s other backends get, it left the rest there
    #: (about 100 MB per worker session, never removed)
    exit_grace_s = 600.0
    #: the same removal after a SIGTERM (a timeout, an interrupt): 13 s here with the worker
    #: stopped at once; killed after the 5 s others get, it left part of the image behind
    stop_grace_s = 120.0

    @classmethod
    def create(cls, framework: str, settings: RunConfig) -> Backend:
        """``<framework>.sif``; for a run on ``cuda`` (or ``auto`` on a host with an NVIDIA GPU)
        the recipe's GPU build ``<framework>-cuda.sif`` where it is in the image directory."""
        gpu = settings.device == "cuda" or (settings.device == "auto" and gpus_present())
        cuda = images.sif_path(framework, variant=images.CUDA)
        if gpu and cuda.is_file():
            return cls(framework, sif=cuda)
        return cls(framework)

    def __init__(
        self,
        framework: str,
        gpus: bool | None = None,
        sif: Path | None = None,
        apptainer: str | None = None,
    ) -> None:
        super().__init__(framework, gpus)
        self.sif = sif or images.sif_path(framework)
        found = apptainer or shutil.which("apptainer") or shutil.which("singularity")
        if not found:
            raise images.ImageError(
                "--backend apptainer: apptainer is not installed (or not on PATH); load your "
                "site's module or see docs/guide/apptainer.md"
            )
        self.apptainer = found
        if not self.sif.is_file():
            raise images.ImageError(
                f"--backend apptainer: no image {self.sif}; make it with `dlsuite images sif "
                f"--framework {framework}` (or set DLSUITE_IMAGE_DIR to where the SIFs are)",
                image=str(self.sif),
            )
        self.image = str(self.sif)
        self.image_digest = images.sif_digest(self.sif)
        self._inside: dict[str, str] = {}
        variant = images.CUDA if self.sif.name == images.sif_name(framework, images.CUDA) else None
        also = f" --variant {variant}" if variant else ""
        made = self.sif.parent / images.sif_name(framework, variant)
        self.rebuild = (
            f"dlsuite images build --framework {framework}{also} && dlsuite images sif "
            f"--framework {framework}{also} --dir {shlex.quote(str(self.sif.parent))}"
        ) + (
            ""
            if made == self.sif
            else f" && mv {shlex.quote(str(made))} {shlex.quote(str(self.sif))}"
        )
        labels = sif_labels(self.apptainer, self.sif)
        self.built_from = warn_if_other_commit(self.image, labels, self.rebuild)

    def wrap(self, inside: InsideCommand) -> list[str]:
        # the host's environment reaches the container (but DROPPED): every rank variable too
        self._inside = dict(inside.env)
        out = [self.apptainer, "exec"]
        if self.wants_gpus(inside.task_path):  # NVIDIA's driver libraries and devices bound in
            out.append("--nv")
        binds = ",".join(
            src if src == dst and not ro else f"{src}:{dst}" + (":ro" if ro else "")
            for src, dst, ro in self.binds(inside.task_path)
        )
        return [*out, "--pwd", images.IMAGE_HOME, "--bind", binds, str(self.sif), *inside.argv]

    def log_header(self, argv: list[str]) -> str | None:
        """The log starts with the command line (``srun ... apptainer exec [--nv] ...``), to
        rerun by hand."""
        return "[dlsuite.apptainer] " + shlex.join(argv)

    def startup_failure(self, output: str) -> str | None:
        """Apptainer's last ``FATAL:`` line (a SIF it cannot mount, no space to unpack it)."""
        said = [line for line in output.splitlines() if line.startswith("FATAL:")]
        return " ".join(said[-1].split()) if said else None

    def slow_start(self, output: str) -> str | None:
        """Apptainer's "Converting SIF file to temporary sandbox": this user cannot mount SIFs
        here, so each worker's start unpacks the whole image (a minute or more for pytorch's)."""
        if UNPACKING not in output:
            return None
        size = self.sif.stat().st_size / 2**20 if self.sif.is_file() else 0
        return (
            "apptainer: this user cannot mount SIFs here, so each worker's start first unpacks "
            f"{self.sif.name} ({size:.0f} MB) into a temporary sandbox in $TMPDIR "
            "(docs/guide/apptainer.md); for a framework's image that takes a minute or more"
        )

    def environment(self) -> dict[str, str]:
        env = super().environment()
        for name in DROPPED:
            env.pop(name, None)
            env.pop(ENV_PREFIX + name, None)
        env[ENV_PREFIX + "PYTHONNOUSERSITE"] = "1"
        for key, value in self._inside.items():
            env[ENV_PREFIX + key] = value
        return env
