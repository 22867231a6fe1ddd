"""Launchers render argument lists (never shell strings), exactly; their environments; the rank
environment every launcher gives the worker; free ports; a rank dies with its launcher."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from suite.backends.base import Backend
from suite.launchers import LAUNCHERS
from suite.launchers import base as launcher_base
from suite.launchers.base import (
    Launch,
    RankEnv,
    SingleProcess,
    export_rank_env,
    free_port,
    rank_env,
)
from suite.launchers.horovodrun import ENTRY, Horovodrun
from suite.launchers.mpirun import Mpirun
from suite.launchers.srun import Srun, first_node
from suite.launchers.torchrun import Torchrun
from tests.helpers import ROOT

PY = "/opt/py env/bin/python3"  # a space in the interpreter's path too
NASTY = "/tmp/my runs; rm -rf ~/x/tasks/$(reboot) `id` 'q' \"d\".json"
WORKER = [PY, "-m", "suite.worker", NASTY]


def launch(world: int = 2, nodes: int = 1, **kw: Any) -> Launch:
    return Launch(worker=list(WORKER), python=PY, world_size=world, nodes=nodes, **kw)


@pytest.fixture
def eight_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)


# -- rendered commands, compared exactly ----------------------------------------------------------
def test_torchrun_two_ranks() -> None:
    assert Torchrun().command(launch(2, master_port=29555)) == [
        PY, "-m", "torch.distributed.run",
        "--nnodes=1", "--nproc-per-node=2",
        "--master-addr=127.0.0.1", "--master-port=29555",
        "--max-restarts=0", "--monitor-interval=0.5",
        "-m", "suite.worker", NASTY,
    ]  # fmt: skip


def test_torchrun_four_ranks_on_two_nodes() -> None:
    # the same command on both nodes: c10d rendezvous at the first node numbers the nodes
    cmd = Torchrun().command(launch(4, 2, master_addr="node01", master_port=29600))
    assert cmd == [
        PY, "-m", "torch.distributed.run",
        "--nnodes=2", "--nproc-per-node=2",
        "--rdzv-backend=c10d", "--rdzv-endpoint=node01:29600",
        "--max-restarts=0", "--monitor-interval=0.5",
        "-m", "suite.worker", NASTY,
    ]  # fmt: skip
    assert not any(a.startswith("--node-rank") for a in cmd)


def test_torchrun_refuses_a_non_module_worker_and_an_uneven_split() -> None:
    with pytest.raises(ValueError, match="Python module"):
        Torchrun().command(Launch(["/bin/worker", NASTY], PY, 2))
    with pytest.raises(ValueError, match="split evenly"):
        Torchrun().command(launch(3, 2))


def test_mpirun_as_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert Mpirun().command(launch(2, master_port=29555)) == [
        "mpirun", "-np", "2", "--oversubscribe", "--bind-to", "none", "--allow-run-as-root",
        "-x", "MASTER_ADDR", "-x", "MASTER_PORT", "-x", "OMP_NUM_THREADS", "-x", "PYTHONPATH",
        "-x", "DLSUITE_RANKS_FROM",
        PY, "-m", "suite.worker", NASTY,
    ]  # fmt: skip


def test_mpirun_as_a_user(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert Mpirun("/opt/openmpi 4/bin/mpirun").command(launch(4)) == [
        "/opt/openmpi 4/bin/mpirun", "-np", "4", "--oversubscribe", "--bind-to", "none",
        "-x", "MASTER_ADDR", "-x", "MASTER_PORT", "-x", "OMP_NUM_THREADS", "-x", "PYTHONPATH",
        "-x", "DLSUITE_RANKS_FROM",
        PY, "-m", "suite.worker", NASTY,
    ]  # fmt: skip


def test_mpirun_places_ranks_per_node(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert Mpirun().command(launch(4, 2)) == [
        "mpirun", "-np", "4", "--oversubscribe", "--bind-to", "none",
        "--map-by", "ppr:2:node",
        "-x", "MASTER_ADDR", "-x", "MASTER_PORT", "-x", "OMP_NUM_THREADS", "-x", "PYTHONPATH",
        "-x", "DLSUITE_RANKS_FROM",
        PY, "-m", "suite.worker", NASTY,
    ]  # fmt: skip
    with pytest.raises(ValueError, match="split evenly"):
        Mpirun().command(launch(4, 3))


def test_srun() -> None:
    assert Srun().command(launch(4, 2)) == [
        "srun", "--ntasks=4", "--nodes=2", "--kill-on-bad-exit=1", "--export=ALL",
        PY, "-m", "suite.worker", NASTY,
    ]  # fmt: skip


def test_single_process() -> None:
    assert SingleProcess().command(launch(1)) == WORKER
    with pytest.raises(ValueError, match="exactly one rank"):
        SingleProcess().command(launch(2))


def test_horovodrun_one_node() -> None:
    assert Horovodrun().command(launch(2)) == [
        PY, "-m", ENTRY, "--gloo", "-np", "2", "-H", "localhost:2",
        "--gloo-timeout-seconds", "300", *WORKER,
    ]  # fmt: skip


def test_horovodrun_takes_the_hosts_of_the_allocation(monkeypatch: pytest.MonkeyPatch) -> None:
    import suite.launchers.horovodrun as H

    monkeypatch.setattr(H, "allocation_hosts", lambda: ["gpu01", "gpu02", "gpu03"])
    cmd = Horovodrun().command(launch(4, 2))
    assert cmd[cmd.index("-H") + 1] == "gpu01:2,gpu02:2"
    monkeypatch.setattr(H, "allocation_hosts", lambda: [])
    with pytest.raises(ValueError, match="needs a Slurm allocation of that many nodes"):
        Horovodrun().command(launch(4, 2))
    with pytest.raises(ValueError, match="do not split evenly"):
        Horovodrun().command(launch(3, 2))


def test_end_processes_terminates_then_kills() -> None:
    """What the spawn launcher and the adapters' servers use: a process that ends on SIGTERM
    ends by it, one that ignores it is killed after the grace, one already done is left."""
    sleep = [sys.executable, "-c", "import time; time.sleep(60)"]
    deaf = [sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, "
            "signal.SIG_IGN); print('deaf', flush=True); time.sleep(60)"]  # fmt: skip
    polite = subprocess.Popen(sleep)
    stubborn = subprocess.Popen(deaf, stdout=subprocess.PIPE)
    assert stubborn.stdout is not None and stubborn.stdout.readline() == b"deaf\n"
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    done.wait()
    t0 = time.monotonic()
    launcher_base.end_processes([polite, stubborn, done], grace_s=1.0)
    assert polite.returncode == -signal.SIGTERM
    assert stubborn.returncode == -signal.SIGKILL
    assert done.returncode == 0
    assert 1.0 <= time.monotonic() - t0 < 10.0
    stubborn.stdout.close()


def test_registry_names_every_launcher() -> None:
    assert set(LAUNCHERS.names()) >= {"single", "torchrun", "mpirun", "srun", "horovodrun"}
    for name in ("single", "torchrun", "mpirun", "srun", "spawn", "horovodrun"):
        assert LAUNCHERS.load(name)().name == name


@pytest.mark.parametrize("launcher", [Torchrun(), Mpirun(), Srun(), SingleProcess(), Horovodrun()])
def test_no_shell_string_ever(launcher: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A path with spaces, quotes and ``;rm -rf`` stays one argument of a list of strings."""
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    world = 1 if launcher.name == "single" else 2
    cmd = launcher.command(launch(world))
    assert isinstance(cmd, list) and all(isinstance(a, str) for a in cmd)
    assert cmd.count(NASTY) == 1 and cmd[-1] == NASTY
    assert not any("rm -rf" in a for a in cmd if a != NASTY)
    env = launcher.environment(launch(world))
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in env.items())


def test_backend_runs_the_list_without_a_shell(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What Backend.run hands to Popen: the launcher's list as is, shell off, env merged."""
    seen: dict[str, Any] = {}

    class FakePopen:
        def __init__(self, argv: Any, **kw: Any) -> None:
            seen.update(argv=argv, **kw)
            self.pid = 0

        def wait(self, timeout: float | None = None) -> int:
            return 0

    class ListBackend(Backend):
        kind = "test"
        python = PY

        def command(self, task_path: Path) -> list[str]:
            return [PY, "-m", "suite.worker", str(task_path)]

    monkeypatch.setattr(subprocess, "Popen", FakePopen)
    task = Path(NASTY)
    result = ListBackend().run(task, tmp_path / "w.log", 10, launcher=Torchrun(), world_size=2)
    assert result.returncode == 0 and not result.timed_out
    argv = seen["argv"]
    assert isinstance(argv, list) and argv[:3] == [PY, "-m", "torch.distributed.run"]
    assert argv[-1] == NASTY and argv.count(NASTY) == 1
    assert not seen.get("shell")
    assert seen["start_new_session"] is True
    port = int(seen["env"]["MASTER_PORT"])
    assert f"--master-port={port}" in argv and seen["env"]["MASTER_ADDR"] == "127.0.0.1"


# -- environments ---------------------------------------------------------------------------------
def test_base_environment_is_the_rendezvous() -> None:
    env = SingleProcess().environment(launch(1, master_addr="10.0.0.7", master_port=1234))
    assert env == {
        "MASTER_ADDR": "10.0.0.7",
        "MASTER_PORT": "1234",
        "DLSUITE_RANKS_FROM": "single",
        "RANK": "0",
        "WORLD_SIZE": "1",
        "LOCAL_RANK": "0",
    }


@pytest.mark.usefixtures("eight_cores")
@pytest.mark.parametrize(
    ("world", "nodes", "threads"),
    [(1, 1, "8"), (2, 1, "4"), (4, 2, "4"), (8, 1, "1"), (16, 1, "1")],
)
def test_torchrun_environment_splits_the_cores(world: int, nodes: int, threads: str) -> None:
    env = Torchrun().environment(launch(world, nodes, master_port=4242))
    assert env == {
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "4242",
        "OMP_NUM_THREADS": threads,
        "DLSUITE_RANKS_FROM": "torchrun",
    }


@pytest.mark.usefixtures("eight_cores")
@pytest.mark.parametrize(("world", "nodes", "threads"), [(2, 1, "4"), (4, 2, "4"), (16, 1, "1")])
def test_mpirun_environment_splits_the_cores(world: int, nodes: int, threads: str) -> None:
    env = Mpirun().environment(launch(world, nodes, master_port=4243))
    assert env == {
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "4243",
        "OMP_NUM_THREADS": threads,
        "DLSUITE_RANKS_FROM": "mpirun",
    }


def test_srun_environment_uses_the_first_node(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[Any] = []

    def fake_run(argv: Any, **kw: Any) -> subprocess.CompletedProcess[str]:
        calls.append((argv, kw))
        return subprocess.CompletedProcess(argv, 0, stdout="gpu07\ngpu08\n", stderr="")

    monkeypatch.setattr("suite.launchers.srun.subprocess.run", fake_run)
    monkeypatch.setenv("SLURM_JOB_NODELIST", "gpu[07-08]")
    env = Srun().environment(launch(4, 2, master_port=5000))
    assert env == {"MASTER_ADDR": "gpu07", "MASTER_PORT": "5000", "DLSUITE_RANKS_FROM": "srun"}
    assert calls[0][0] == ["scontrol", "show", "hostnames", "gpu[07-08]"]
    assert not calls[0][1].get("shell")


def test_srun_environment_outside_an_allocation(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SLURM_JOB_NODELIST", raising=False)
    assert Srun().environment(launch(2, master_port=5001))["MASTER_ADDR"] == "127.0.0.1"
    assert first_node(None) is None and first_node("") is None


def test_first_node_without_scontrol(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(*a: Any, **kw: Any) -> Any:
        raise FileNotFoundError("scontrol")

    monkeypatch.setattr("suite.launchers.srun.subprocess.run", missing)
    assert first_node("gpu[07-08]") is None


# -- the rank environment -------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("env", "want"),
    [
        ({"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1"}, RankEnv(3, 4, 1, "torchrun")),
        (
            {
                "OMPI_COMM_WORLD_RANK": "1",
                "OMPI_COMM_WORLD_SIZE": "2",
                "OMPI_COMM_WORLD_LOCAL_RANK": "1",
            },
            RankEnv(1, 2, 1, "mpirun"),
        ),
        (
            {"SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_LOCALID": "1"},
            RankEnv(5, 8, 1, "srun"),
        ),
        ({"PMI_RANK": "2", "PMI_SIZE": "4", "MPI_LOCALRANKID": "0"}, RankEnv(2, 4, 0, "pmi")),
        ({}, RankEnv(0, 1, 0, "single")),
        # no local rank: the global one (a single node)
        ({"PMI_RANK": "3", "PMI_SIZE": "4"}, RankEnv(3, 4, 3, "pmi")),
        # a rank without a size is no launcher's
        ({"RANK": "1", "SLURM_PROCID": "1"}, RankEnv(0, 1, 0, "single")),
        # torchrun / mpirun inside a Slurm allocation: the launcher's own variables win
        (
            {
                "RANK": "1",
                "WORLD_SIZE": "2",
                "LOCAL_RANK": "1",
                "SLURM_PROCID": "0",
                "SLURM_NTASKS": "1",
            },
            RankEnv(1, 2, 1, "torchrun"),
        ),  # fmt: skip
        (
            {
                "OMPI_COMM_WORLD_RANK": "3",
                "OMPI_COMM_WORLD_SIZE": "4",
                "SLURM_PROCID": "0",
                "SLURM_NTASKS": "1",
                "PMI_RANK": "0",
                "PMI_SIZE": "1",
            },
            RankEnv(3, 4, 3, "mpirun"),
        ),  # fmt: skip
    ],
)
def test_rank_env(env: dict[str, str], want: RankEnv) -> None:
    assert rank_env(env) == want


INHERITED = {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "SLURM_PROCID": "0",
             "SLURM_NTASKS": "8", "SLURM_LOCALID": "0"}  # fmt: skip


@pytest.mark.parametrize(
    ("source", "own", "want"),
    [
        (
            "mpirun",
            {"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4",
             "OMPI_COMM_WORLD_LOCAL_RANK": "1"},
            RankEnv(3, 4, 1, "mpirun"),
        ),
        ("srun", {"SLURM_PROCID": "5", "SLURM_NTASKS": "6", "SLURM_LOCALID": "1"},
         RankEnv(5, 6, 1, "srun")),
        ("torchrun", {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1"},
         RankEnv(1, 2, 1, "torchrun")),
        ("horovodrun", {"HOROVOD_RANK": "1", "HOROVOD_SIZE": "2", "HOROVOD_LOCAL_RANK": "1"},
         RankEnv(1, 2, 1, "horovodrun")),
        ("single", {}, RankEnv(0, 1, 0, "single")),
        # a launcher whose variables are missing (another MPI): the usual order
        ("mpirun", {}, RankEnv(0, 2, 0, "torchrun")),
    ],
)  # fmt: skip
def test_the_launcher_that_started_the_rank_wins(
    source: str, own: dict[str, str], want: RankEnv
) -> None:
    """Variables inherited from the job the suite runs in (RANK of a torchrun/Kubernetes job,
    SLURM_* of the allocation) must not override the launcher that started this rank: under
    mpirun every rank would read the same inherited RANK and claim to be rank 0."""
    assert rank_env({**INHERITED, **own, "DLSUITE_RANKS_FROM": source}) == want


def test_rank_env_reads_the_process_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID",
                "DLSUITE_RANKS_FROM"):  # fmt: skip
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PMI_RANK", "1")
    monkeypatch.setenv("PMI_SIZE", "2")
    assert rank_env() == RankEnv(1, 2, 1, "pmi")


def test_export_rank_env(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[bool] = []

    def record() -> bool:
        asked.append(True)
        return True

    monkeypatch.setattr(launcher_base, "die_with_parent", record)
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR"):
        # setenv first: monkeypatch then restores (removes) what export_rank_env sets, so no
        # RANK/WORLD_SIZE leaks into later tests' subprocesses
        monkeypatch.setenv(var, "placeholder")
        monkeypatch.delenv(var)
    export_rank_env(RankEnv(1, 2, 0, "mpirun"))
    assert [os.environ[v] for v in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR")] == [
        "1",
        "2",
        "0",
        "127.0.0.1",
    ]
    assert asked == []  # only torchrun's ranks live in sessions of their own
    monkeypatch.setenv("MASTER_ADDR", "node01")
    export_rank_env(RankEnv(0, 2, 0, "torchrun"))
    assert os.environ["MASTER_ADDR"] == "node01" and asked == [True]


# -- free port ------------------------------------------------------------------------------------
def test_free_port_is_bindable() -> None:
    port = free_port()
    assert isinstance(port, int) and 1024 <= port <= 65535
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", port))
        s.listen()


def test_free_ports_differ_while_held() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind(("127.0.0.1", 0))
        assert free_port() != held.getsockname()[1]


# -- a rank dies with its launcher ----------------------------------------------------------------
PARENT = """\
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c",
    "import time; from suite.launchers.base import die_with_parent as d; "
    "print(int(d()), flush=True); time.sleep(120)"], stdout=subprocess.PIPE, text=True)
print(child.pid, child.stdout.readline().strip(), flush=True)
time.sleep(120)
"""


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_stopped_rank_dies_with_its_launcher() -> None:
    """torchrun puts each rank in a session of its own; when the launcher is killed, a rank
    (even a stopped one) must not survive it."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True, env=env
    )
    child = 0
    try:
        assert parent.stdout is not None
        line = parent.stdout.readline().split()
        child, accepted = int(line[0]), line[1]
        assert accepted == "1"
        os.kill(child, signal.SIGSTOP)
        parent.kill()
        parent.wait()
        deadline = time.monotonic() + 10
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(child), "the stopped child outlived its parent"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        if child and _alive(child):
            os.kill(child, signal.SIGKILL)
