"""Open MPI's mpirun: ranks find their rank in OMPI_COMM_WORLD_*; rendezvous via MASTER_*."""

from __future__ import annotations

import os

from suite.cpuinfo import usable_cores
from suite.launchers.base import RANK_PORTS, RANKS_FROM, Launch, Launcher


class Mpirun(Launcher):
    name = "mpirun"
    container_per_rank = True  # Open MPI's daemons start the ranks
    rank_variables = ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK")

    def __init__(self, mpirun: str = "mpirun") -> None:
        self.mpirun = mpirun

    def command(self, launch: Launch) -> list[str]:
        if launch.nodes < 1 or launch.world_size % launch.nodes:
            raise ValueError(
                f"{launch.world_size} ranks do not split evenly over {launch.nodes} node(s)"
            )
        argv = [self.mpirun, "-np", str(launch.world_size), "--oversubscribe", "--bind-to", "none"]
        if launch.nodes > 1:
            # world/nodes ranks on each node; without it mpirun fills the first node's slots
            # and --nodes would be ignored (on too few hosts mpirun now says so and stops)
            argv += ["--map-by", f"ppr:{launch.world_size // launch.nodes}:node"]
        if os.geteuid() == 0:
            argv.append("--allow-run-as-root")  # containers and CI run as root
        for var in ("MASTER_ADDR", "MASTER_PORT", "OMP_NUM_THREADS", "PYTHONPATH", RANKS_FROM):
            argv += ["-x", var]
        if launch.rank_ports:
            argv += ["-x", RANK_PORTS]
        return [*argv, *launch.worker]

    def environment(self, launch: Launch) -> dict[str, str]:
        cores = usable_cores()
        per_node = max(1, launch.world_size // max(1, launch.nodes))  # ranks sharing these cores
        return {
            **super().environment(launch),
            "OMP_NUM_THREADS": str(max(1, cores // per_node)),
        }
