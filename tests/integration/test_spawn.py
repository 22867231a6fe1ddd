"""The suite's own spawn launcher, for real: ranks get their variables, one failing rank stops
the others (as torchrun does), and killing the launcher takes the ranks along."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from suite.launchers.base import Launch
from suite.launchers.spawn import Spawn
from tests.helpers import ROOT

ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def spawn(nproc: int, code: str, **kw: object) -> subprocess.Popen[str]:
    argv = Spawn().command(
        Launch(worker=[sys.executable, "-c", code], python=sys.executable, world_size=nproc)
    )
    return subprocess.Popen(
        argv, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def test_every_rank_gets_its_variables(tmp_path: Path) -> None:
    # one file per rank: ranks share the launcher's stdout, and their writes interleave
    code = (
        "import os; e = os.environ;"
        f"open({str(tmp_path)!r} + '/rank' + e['RANK'], 'w').write("
        "' '.join((e['RANK'], e['WORLD_SIZE'], e['LOCAL_RANK'], e['DLSUITE_RANK_PORTS'])))"
    )
    argv = Spawn().command(
        Launch(worker=[sys.executable, "-c", code], python=sys.executable, world_size=3)
    )
    env = {**ENV, **Spawn().environment(
        Launch(worker=[], python="", world_size=3, rank_ports=(1001, 1002, 1003))
    )}  # fmt: skip
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    got = sorted((tmp_path / f"rank{r}").read_text() for r in range(3))
    assert got == [f"{r} 3 {r} 1001,1002,1003" for r in range(3)]
    assert int(env["OMP_NUM_THREADS"]) >= 1  # the cores shared out between the ranks


def test_a_failing_rank_stops_the_others_and_gives_its_exit_code(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    code = (
        "import os, sys, time; r = int(os.environ['RANK']);"
        f"open({str(pids)!r} + str(r), 'w').write(str(os.getpid()));"
        "time.sleep(0.5) if r == 1 else time.sleep(120); sys.exit(3 if r == 1 else 0)"
    )
    t0 = time.monotonic()
    proc = spawn(3, code)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 3 and time.monotonic() - t0 < 30
    assert "rank 1 failed (exit code 3)" in err
    for r in (0, 2):
        pid = int((tmp_path / f"pids{r}").read_text())
        assert (
            not Path(f"/proc/{pid}").exists()
            or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]
        )


def test_terminating_the_launcher_ends_every_rank(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    code = (
        "import os, time; r = os.environ['RANK'];"
        f"open({str(pids)!r} + r, 'w').write(str(os.getpid())); time.sleep(120)"
    )
    proc = spawn(2, code)
    deadline = time.monotonic() + 30
    while not all((tmp_path / f"pids{r}").exists() for r in (0, 1)):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=30)
    time.sleep(0.5)
    for r in (0, 1):
        pid = int((tmp_path / f"pids{r}").read_text())
        assert not Path(f"/proc/{pid}").exists(), f"rank {r} outlived its launcher"


def test_spawn_is_one_node_only() -> None:
    import pytest

    with pytest.raises(ValueError, match="this node only"):
        Spawn().command(Launch(worker=["x"], python="python3", world_size=4, nodes=2))
