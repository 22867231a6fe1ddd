"""A task that hangs, crashes or dies gets a record with its status; the run goes on;
no process is left behind."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import pytest

from suite.backends.local import LocalBackend
from suite.config import resolve
from suite.plan import build
from suite.results import validate_record
from suite.runner import run
from tests.helpers import cli, records


def running(pid: int) -> bool:
    """Alive and not a zombie (an orphan reparented to a PID 1 that does not reap stays Z)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


class ScriptBackend(LocalBackend):
    """Runs a given Python snippet instead of the worker (a real process, really failing)."""

    def __init__(self, code: str) -> None:
        super().__init__()
        self.code = code

    def command(self, task_path: Path) -> list[str]:
        return [sys.executable, "-c", self.code, str(task_path)]


def script_backend(code: str) -> type[ScriptBackend]:
    """A backend class the runner makes as it makes any (``Backend.create``), running ``code``."""

    class Script(ScriptBackend):
        @classmethod
        def create(cls, framework: str, settings: Any) -> ScriptBackend:
            return cls(code)

    return Script


def _plan(tmp_path: Path, timeout: float = 30):  # type: ignore[no-untyped-def]
    cfg = resolve(
        {
            "quick": True,
            "benchmarks": ["gemm", "softmax"],
            "dtypes": ["fp32"],
            "out": str(tmp_path / "run"),
            "timeout": timeout,
        },
        env={},
    )
    return cfg, build(cfg)


@pytest.mark.parametrize(
    ("code", "status", "needle"),
    [
        ("import sys; sys.exit(3)", "failed", "exited with code 3"),
        ("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)", "failed", "SIGSEGV"),
        # a SIGKILL is an OOM kill only where the kernel says so (suite/oom.py; tests/
        # integration/test_oom.py makes a real one)
        (
            "import os, signal; os.kill(os.getpid(), signal.SIGKILL)",
            "failed",
            "killed by SIGKILL from outside the worker (no OOM kill recorded for it)",
        ),
    ],
)
def test_worker_death_becomes_a_record(
    code: str, status: str, needle: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg, tasks = _plan(tmp_path)
    monkeypatch.setattr("suite.runner.BACKENDS.load", lambda name: script_backend(code))
    outcome = run(cfg, tasks, ["test"])
    assert len(outcome.records) == len(tasks) == 2  # the run went on past the first failure
    for rec in outcome.records:
        validate_record(rec)
        assert rec["status"] == status
        assert needle in rec["reason"]
        assert rec["error"]["log"].startswith("logs/")


def test_hang_times_out_and_leaves_no_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pidfile = tmp_path / "child.pid"
    # The "worker" starts a grandchild that would outlive it, then hangs.
    code = (
        "import subprocess, sys, time\n"
        f"p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
        f"open({str(pidfile)!r}, 'w').write(str(p.pid))\n"
        "time.sleep(600)\n"
    )
    cfg, tasks = _plan(tmp_path, timeout=2)
    monkeypatch.setattr("suite.runner.BACKENDS.load", lambda name: script_backend(code))
    t0 = time.monotonic()
    outcome = run(cfg, tasks, ["test"])
    assert time.monotonic() - t0 < 30
    assert [r["status"] for r in outcome.records] == ["timeout", "timeout"]
    assert "timeout of 2 s" in outcome.records[0]["reason"]
    grandchild = int(pidfile.read_text())
    time.sleep(0.2)
    assert not running(grandchild), "the timed-out worker's child process survived"


@pytest.mark.pytorch
def test_real_worker_timeout(tmp_path: Path) -> None:
    # 1 s is less than importing torch and measuring: the real worker is cut off.
    proc = cli(
        "run",
        "--quick",
        "--device",
        "cpu",
        "--benchmark",
        "conv2d",
        "--dtype",
        "fp32",
        "--timeout",
        "1",
        "--out",
        str(tmp_path / "r"),
    )
    assert proc.returncode == 1
    recs = records(tmp_path / "r")
    assert len(recs) == 2 and {r["status"] for r in recs} == {"timeout"}
    # the closing line says they timed out (it said "2 failed" beside a table of timeouts)
    assert "0 ok, 0 skipped, 2 failed (2 timeout), 0 with failed" in proc.stdout, proc.stdout
    assert cli("validate", str(tmp_path / "r")).returncode == 0
