"""Slurm's srun, inside an allocation: ranks read SLURM_PROCID/SLURM_NTASKS; the first node of
the allocation is the rendezvous host."""

from __future__ import annotations

import os
import re
import subprocess

from suite.launchers.base import Launch, Launcher


def hostnames(nodelist: str | None) -> list[str]:
    """The hosts of a Slurm node list (``gpu[07-08]``), expanded by ``scontrol show hostnames``
    (empty when there is no list or no scontrol)."""
    if not nodelist:
        return []
    try:
        return subprocess.run(
            ["scontrol", "show", "hostnames", nodelist],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout.split()
    except (OSError, subprocess.SubprocessError):
        return []


def first_node(nodelist: str | None) -> str | None:
    """The first host of a Slurm node list."""
    hosts = hostnames(nodelist)
    return hosts[0] if hosts else None


def node_address(node: str) -> str:
    """The address Slurm reaches ``node`` at (``NodeAddr``; a node's name need not resolve:
    several slurmd on one host, or names apart from the interconnect's), else the name."""
    try:
        out = subprocess.run(
            ["scontrol", "--oneliner", "show", "node", node],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return node
    m = re.search(r"(?:^|\s)NodeAddr=(\S+)", out)
    return m.group(1) if m else node


class Srun(Launcher):
    name = "srun"
    multi_node = True  # every node of the allocation; the first one is the rendezvous host
    container_per_rank = True  # Slurm's step daemons start the ranks
    rank_variables = ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID")

    @classmethod
    def outside_allocation(cls, nodes: int) -> str:
        return "srun starts the ranks as a step of the Slurm allocation it runs in"

    def command(self, launch: Launch) -> list[str]:
        return [
            "srun", f"--ntasks={launch.world_size}", f"--nodes={launch.nodes}", "--kill-on-bad-exit=1",
            "--export=ALL", *launch.worker,
        ]  # fmt: skip

    def environment(self, launch: Launch) -> dict[str, str]:
        env = super().environment(launch)
        host = first_node(os.environ.get("SLURM_JOB_NODELIST"))
        if host:
            env["MASTER_ADDR"] = node_address(host)
        return env
