"""torchrun (torch.distributed.run): static rendezvous on one node; c10d rendezvous on several
(the same command started on every node)."""

from __future__ import annotations

from suite.cpuinfo import usable_cores
from suite.launchers.base import Launch, Launcher


class Torchrun(Launcher):
    name = "torchrun"
    rank_variables = ("RANK", "WORLD_SIZE", "LOCAL_RANK")
    distribution = "torch"  # python -m torch.distributed.run
    ranks_die_with_launcher = True  # torchrun starts every rank in a session of its own

    def command(self, launch: Launch) -> list[str]:
        worker = launch.worker
        if worker[:2] != [launch.python, "-m"]:
            raise ValueError(f"torchrun launches a Python module; got {worker!r}")
        if launch.nodes < 1 or launch.world_size % launch.nodes:
            raise ValueError(
                f"{launch.world_size} ranks do not split evenly over {launch.nodes} node(s)"
            )
        if launch.nodes == 1:
            # static rendezvous: this node hosts the store
            rendezvous = [
                f"--master-addr={launch.master_addr}",
                f"--master-port={launch.master_port}",
            ]
        else:
            # Static rendezvous would need each node's --node-rank, which one command cannot
            # carry (every node would claim node rank 0). With c10d the same command runs on
            # every node and the rendezvous numbers the nodes; the endpoint is the first node.
            rendezvous = [
                "--rdzv-backend=c10d",
                f"--rdzv-endpoint={launch.master_addr}:{launch.master_port}",
            ]
        return [
            launch.python, "-m", "torch.distributed.run",
            f"--nnodes={launch.nodes}",
            f"--nproc-per-node={launch.world_size // launch.nodes}",
            *rendezvous,
            "--max-restarts=0",
            "--monitor-interval=0.5",
            "-m", *worker[2:],
        ]  # fmt: skip

    def environment(self, launch: Launch) -> dict[str, str]:
        # torchrun's own default is 1 thread per rank with a warning; say it explicitly and
        # share the cores between the ranks of this node.
        cores = usable_cores()
        per_rank = max(1, cores // max(1, launch.world_size // launch.nodes))
        return {**super().environment(launch), "OMP_NUM_THREADS": str(per_rank)}
