"""TensorFlow's ParameterServerStrategy for the ``ps-async`` strategy: a coordinator, workers and
a parameter server, each a process of its own on this machine.

How the suite's ranks host TensorFlow's roles (N ranks, N TensorFlow workers):

* rank 0's process is the **coordinator** (TF's "chief": ``ParameterServerStrategy`` and a
  ``ClusterCoordinator``); it starts two child processes that die with it: the **parameter
  server** (``ps:0``) and **worker 0**;
* rank i > 0 hosts **worker i** in its own process (an in-process ``tf.distribute.Server``);
* the workers listen on the launcher's per-rank ports (DLSUITE_RANK_PORTS); the parameter
  server's and the coordinator's ports are chosen by rank 0, which writes the cluster
  (``<rendezvous>.cluster.json``, next to the task's records) before anyone starts a server;
* the coordinator dispatches every training step to whichever worker is free
  (``ClusterCoordinator.schedule``), and each step applies its gradients to the variables on the
  parameter server without waiting for the others: asynchronous by TensorFlow's design;
* when the coordinator is done it writes its record fields (``<rendezvous>.result.json``); the
  other ranks, which only served, return them as their own.

Run as ``python -m suite.adapters.tensorflow.strategies ROLE INDEX CLUSTER_JSON PARENT_PID``
for a child server (imports TensorFlow only then).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from suite.adapters.base import Coordination
from suite.errors import AdapterError
from suite.launchers.base import end_processes

#: how long a rank waits for rank 0's cluster file and for the coordinator's result
WAIT_ENV = "DLSUITE_STRATEGY_WAIT"


def _write_json(path: Path, doc: dict[str, Any]) -> None:
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(doc), encoding="utf-8")
    os.replace(tmp, path)


def _wait_json(path: Path, what: str) -> dict[str, Any]:
    deadline = time.monotonic() + float(os.environ.get(WAIT_ENV, "3600"))
    while not path.exists():
        if time.monotonic() > deadline:
            raise AdapterError(f"tensorflow: no {what} at {path} in time ({WAIT_ENV})")
        time.sleep(0.1)
    doc: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return doc


class PSSteps:
    """The scheduled closures of one training step (one per worker shard): their
    ``RemoteValue`` losses, fetched (waiting for them) only when asked."""

    def __init__(self, remote: list[Any]) -> None:
        self.remote = remote

    def mean_loss(self) -> float:
        return float(sum(float(r.fetch()) for r in self.remote) / len(self.remote))


class ParameterServerCluster(Coordination):
    """The roles of one task's ranks (see the module's docstring)."""

    def __init__(self, tf: Any, rendezvous: str, rank: int, world: int) -> None:
        if not rendezvous:
            raise AdapterError("tensorflow: ParameterServerStrategy needs a rendezvous path")
        self.tf, self.rank, self.world = tf, rank, world
        self.cluster_file = Path(rendezvous + ".cluster.json")
        self.result_file = Path(rendezvous + ".result.json")
        self.children: list[subprocess.Popen[bytes]] = []
        self.server: Any = None
        self.strategy: Any = None
        self.coordinator: Any = None

    def start(self) -> str:
        from suite.launchers.base import RANK_PORTS, free_ports

        host = os.environ.get("MASTER_ADDR", "127.0.0.1")
        if self.rank == 0:
            ports = [int(p) for p in os.environ.get(RANK_PORTS, "").split(",") if p.strip()]
            if len(ports) != self.world:
                raise AdapterError(
                    f"tensorflow: ParameterServerStrategy needs one port per rank for its "
                    f"workers: {RANK_PORTS} has {len(ports)} for {self.world} ranks"
                )
            ps_port, chief_port = free_ports(2, host if host != "localhost" else "127.0.0.1")
            cluster = {
                "worker": [f"{host}:{p}" for p in ports],
                "ps": [f"{host}:{ps_port}"],
                "chief": [f"{host}:{chief_port}"],
            }
            _write_json(self.cluster_file, cluster)
            for role, index in (("ps", 0), ("worker", 0)):
                self.children.append(
                    subprocess.Popen(
                        [sys.executable, "-m", __name__, role, str(index),
                         str(self.cluster_file), str(os.getpid())],
                        stdin=subprocess.DEVNULL,
                    )
                )  # fmt: skip
            tf = self.tf
            os.environ["TF_CONFIG"] = json.dumps(
                {"cluster": cluster, "task": {"type": "chief", "index": 0}}
            )
            resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
            self.strategy = tf.distribute.experimental.ParameterServerStrategy(resolver)
            self.coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(
                self.strategy
            )
            return (
                f"ParameterServerStrategy (coordinator on rank 0, 1 parameter server, "
                f"{self.world} workers, gRPC)"
            )
        cluster = _wait_json(self.cluster_file, "cluster from rank 0")
        self.server = start_server(self.tf, cluster, "worker", self.rank)
        return f"ParameterServerStrategy worker {self.rank} (gRPC)"

    def coordinates(self) -> bool:
        return self.rank == 0  # the coordinator; the other ranks host workers and servers

    def feeds_all_ranks(self) -> bool:
        return self.rank == 0  # the coordinator dispatches each worker's shard

    def publish(self, fields: dict[str, Any]) -> None:
        _write_json(self.result_file, fields)

    def serve(self) -> dict[str, Any]:
        return _wait_json(self.result_file, "result from the coordinator (rank 0)")

    def stop(self, clean: bool = True) -> None:
        """End the child servers. After a clean run they are left to the kernel, which kills
        them when this process exits (``die_with_parent``): ended now, they would be gone while
        the coordinator's context still holds functions on them, and its teardown would log a
        gRPC error per function."""
        if clean and sys.platform.startswith("linux"):
            return
        end_processes(self.children, grace_s=10)
        self.children = []


def start_server(tf: Any, cluster: dict[str, Any], job: str, index: int) -> Any:
    """A gRPC server of the cluster. Its intra-op threads follow OMP_NUM_THREADS (the
    launcher's share of the cores); its inter-op pool keeps TensorFlow's default: a worker's
    step waits on reads from the parameter server inside that pool, and with a single
    inter-op thread (OMP_NUM_THREADS=1 on 2 cores and 2 ranks) it deadlocked."""
    threads = int(os.environ.get("OMP_NUM_THREADS", "0") or 0)
    config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=threads)
    return tf.distribute.Server(
        tf.train.ClusterSpec(cluster), job_name=job, task_index=index, protocol="grpc",
        config=config, start=True,
    )  # fmt: skip


def main(argv: list[str]) -> int:
    """A child server of rank 0: parameter server or worker 0, until rank 0 ends it."""
    from suite.launchers.base import die_with_parent

    role, index, cluster_file, parent = argv
    die_with_parent()
    if os.getppid() != int(parent):
        return 1  # rank 0 is gone already
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    import tensorflow as tf

    cluster = json.loads(Path(cluster_file).read_text(encoding="utf-8"))
    server = start_server(tf, cluster, role, int(index))
    server.join()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
