"""Horovod's own launcher, ``horovodrun --gloo``: it starts Horovod's gloo rendezvous server and
the ranks, each with HOROVOD_RANK/HOROVOD_SIZE/HOROVOD_LOCAL_RANK.

Run as ``python -m horovod.runner.launch`` (what the ``horovodrun`` script runs) with the
backend's interpreter, so the Horovod of the framework's environment (venv, image) is the one used.
One node: ``-H localhost:N``. Several: inside a Slurm allocation the hosts are the allocation's
nodes (``-H node1:K,node2:K``; horovodrun reaches the other nodes over ssh, as it does without
the suite). The suite's other launchers (spawn, srun, mpirun) work for Horovod too: the adapter
then hosts the rendezvous itself (see ``suite/adapters/horovod/adapter.py``).
"""

from __future__ import annotations

import os

from suite.cpuinfo import usable_cores
from suite.launchers.base import Launch, Launcher
from suite.launchers.srun import hostnames

ENTRY = "horovod.runner.launch"


def allocation_hosts() -> list[str]:
    """The hosts of the Slurm allocation this runs in (empty outside one)."""
    return hostnames(os.environ.get("SLURM_JOB_NODELIST"))


class Horovodrun(Launcher):
    name = "horovodrun"
    multi_node = True  # the allocation's hosts (-H), reached over ssh
    rank_variables = ("HOROVOD_RANK", "HOROVOD_SIZE", "HOROVOD_LOCAL_RANK")
    ranks_die_with_launcher = True
    distribution = "horovod"  # python -m horovod.runner.launch

    @classmethod
    def outside_allocation(cls, nodes: int) -> str:
        if nodes == 1:
            return ""
        return f"horovodrun on {nodes} nodes takes its hosts from the Slurm allocation"

    def command(self, launch: Launch) -> list[str]:
        if launch.nodes < 1 or launch.world_size % launch.nodes:
            raise ValueError(
                f"{launch.world_size} ranks do not split evenly over {launch.nodes} node(s)"
            )
        per_node = launch.world_size // launch.nodes
        if launch.nodes == 1:
            hosts = [f"localhost:{per_node}"]
        else:
            names = allocation_hosts()
            if len(names) < launch.nodes:
                raise ValueError(
                    f"horovodrun on {launch.nodes} nodes needs a Slurm allocation of that many "
                    f"nodes (SLURM_JOB_NODELIST has {len(names)})"
                )
            hosts = [f"{h}:{per_node}" for h in names[: launch.nodes]]
        return [
            launch.python, "-m", ENTRY,
            "--gloo", "-np", str(launch.world_size), "-H", ",".join(hosts),
            "--gloo-timeout-seconds", os.environ.get("DLSUITE_DIST_TIMEOUT", "300"),
            *launch.worker,
        ]  # fmt: skip

    def environment(self, launch: Launch) -> dict[str, str]:
        per_rank = max(1, usable_cores() // max(1, launch.world_size // launch.nodes))
        return {**super().environment(launch), "OMP_NUM_THREADS": str(per_rank)}
