"""A run killed mid-way loses nothing; --resume finishes it without duplicates."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import ROOT, cli, records

ARGS = [
    "run",
    "--quick",
    "--device",
    "cpu",
    "--benchmark",
    "gemm,softmax,gelu",
    "--dtype",
    "fp32,bf16",
]


@pytest.mark.pytorch
@pytest.mark.slow
def test_kill_then_resume(tmp_path: Path) -> None:
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "suite", *ARGS, "--out", str(out)],
        env=env,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    results = out / "results.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if results.exists() and len(results.read_text().splitlines()) >= 2:
            break
        time.sleep(0.1)
    else:
        proc.kill()
        pytest.fail("run produced no records in time")
    os.killpg(proc.pid, signal.SIGKILL)  # the runner and its worker, no chance to clean up
    proc.wait()
    before = results.read_text()
    n_before = len(before.splitlines())
    assert 2 <= n_before < 6
    # a torn write: half a record at the end of the file
    with results.open("a") as fh:
        fh.write('{"schema_version": "1", "run_id": "x", "task')

    resumed = cli(*ARGS, "--out", str(out), "--resume")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    after = results.read_text()
    assert after.startswith(before), "records measured before the kill were changed"
    recs = records(out)
    ids = [r["task_id"] for r in recs]
    assert len(ids) == 6 and len(set(ids)) == 6
    assert all(r["status"] == "ok" for r in recs)
    assert len({r["run_id"] for r in recs}) == 1
    assert cli("validate", str(out)).returncode == 0

    # resuming a finished run runs nothing and adds nothing
    again = cli(*ARGS, "--out", str(out), "--resume")
    assert again.returncode == 0
    assert results.read_text() == after
    assert "resume: 6 of 6 tasks are complete; running 0" in again.stderr

    # --resume on a directory with nothing in it (a Slurm element's first start) is a first run,
    # and says nothing about resuming
    first = cli(*ARGS[:4], "--benchmark", "gemm", "--dtype", "fp32", "--out", str(tmp_path / "new"),
                "--resume")  # fmt: skip
    assert first.returncode == 0, first.stderr[-2000:]
    assert "resume:" not in first.stderr
    assert [r["status"] for r in records(tmp_path / "new")] == ["ok"]
