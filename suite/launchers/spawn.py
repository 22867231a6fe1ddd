"""The suite's own launcher for one node: ``python -m suite.launchers.spawn -n N -- WORKER...``.

Framework-neutral (it needs no torchrun and no MPI), so every framework's environment can run
several ranks. It starts N copies of the worker with RANK/WORLD_SIZE/LOCAL_RANK set, and
behaves like torchrun when one fails: the first rank that exits non-zero (or dies) has the
others terminated, and its exit code becomes the launcher's. Ranks ask the kernel to kill them
when the launcher dies (see ``die_with_parent``), so a timeout's kill reaches them too.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time

from suite.cpuinfo import usable_cores
from suite.launchers.base import Launch, Launcher, end_processes


class Spawn(Launcher):
    name = "spawn"
    rank_variables = ("RANK", "WORLD_SIZE", "LOCAL_RANK")
    ranks_die_with_launcher = True

    def command(self, launch: Launch) -> list[str]:
        if launch.nodes != 1:
            raise ValueError(
                "the spawn launcher starts ranks on this node only; use srun or mpirun for "
                f"--nodes {launch.nodes}"
            )
        return [
            launch.python, "-m", "suite.launchers.spawn",
            "--nproc", str(launch.world_size), "--", *launch.worker,
        ]  # fmt: skip

    def environment(self, launch: Launch) -> dict[str, str]:
        per_rank = max(1, usable_cores() // launch.world_size)
        return {**super().environment(launch), "OMP_NUM_THREADS": str(per_rank)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m suite.launchers.spawn")
    parser.add_argument("--nproc", type=int, required=True)
    parser.add_argument("worker", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    worker = args.worker[1:] if args.worker[:1] == ["--"] else args.worker
    if args.nproc < 1 or not worker:
        parser.error("need --nproc >= 1 and a worker command after --")
    procs: list[subprocess.Popen[bytes]] = []

    def on_signal(signum: int, frame: object) -> None:
        end_processes(procs)
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    for rank in range(args.nproc):
        env = dict(os.environ)
        env.update(RANK=str(rank), WORLD_SIZE=str(args.nproc), LOCAL_RANK=str(rank))
        env.update(LOCAL_WORLD_SIZE=str(args.nproc))
        procs.append(subprocess.Popen(worker, env=env))
    code = 0
    while procs and any(p.poll() is None for p in procs):
        for rank, p in enumerate(procs):
            rc = p.poll()
            if rc is not None and rc != 0 and code == 0:
                why = f"signal {-rc}" if rc < 0 else f"exit code {rc}"
                print(
                    f"[dlsuite.spawn] rank {rank} failed ({why}); stopping the other ranks",
                    file=sys.stderr,
                    flush=True,
                )
                code = rc if rc > 0 else 128 - rc
                end_processes(procs)
        time.sleep(0.05)
    if code == 0:
        for p in procs:
            rc = p.wait()
            if rc != 0:
                code = rc if rc > 0 else 128 - rc
                break
    return code


if __name__ == "__main__":
    raise SystemExit(main())
