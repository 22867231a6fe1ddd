"""Slurm's srun, inside an allocation: ranks read SLURM_PROCID/SLURM_NTASKS; the first node of
the allocation is the rendezvous host."""

from __future__ import annotations

import os
import subprocess

from suite.launchers.base import Launch, Launcher


def first_node(nodelist: str | None) -> str | None:
    """The first host of a Slurm node list, expanded by ``scontrol show hostnames``."""
    if not nodelist:
        return None
    try:
        out = subprocess.run(
            ["scontrol", "show", "hostnames", nodelist],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout.split()
    except (OSError, subprocess.SubprocessError):
        return None
    return out[0] if out else None


class Srun(Launcher):
    name = "srun"

    def command(self, launch: Launch) -> list[str]:
        return [
            "srun", f"--ntasks={launch.world_size}", f"--nodes={launch.nodes}", "--kill-on-bad-exit=1",
            "--export=ALL", *launch.worker,
        ]  # fmt: skip

    def environment(self, launch: Launch) -> dict[str, str]:
        env = super().environment(launch)
        host = first_node(os.environ.get("SLURM_JOB_NODELIST"))
        if host:
            env["MASTER_ADDR"] = host
        return env
