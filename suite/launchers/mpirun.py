"""Open MPI's mpirun: ranks find their rank in OMPI_COMM_WORLD_*; rendezvous via MASTER_*."""

from __future__ import annotations

import os

from suite.launchers.base import Launch, Launcher


class Mpirun(Launcher):
    name = "mpirun"

    def __init__(self, mpirun: str = "mpirun") -> None:
        self.mpirun = mpirun

    def command(self, launch: Launch) -> list[str]:
        argv = [self.mpirun, "-np", str(launch.world_size), "--oversubscribe", "--bind-to", "none"]
        if os.geteuid() == 0:
            argv.append("--allow-run-as-root")  # containers and CI run as root
        for var in ("MASTER_ADDR", "MASTER_PORT", "OMP_NUM_THREADS", "PYTHONPATH"):
            argv += ["-x", var]
        return [*argv, *launch.worker]

    def environment(self, launch: Launch) -> dict[str, str]:
        cores = (
            len(os.sched_getaffinity(0))
            if hasattr(os, "sched_getaffinity")
            else (os.cpu_count() or 1)
        )
        return {
            **super().environment(launch),
            "OMP_NUM_THREADS": str(max(1, cores // launch.world_size)),
        }
