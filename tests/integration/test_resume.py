"""A run killed mid-way loses nothing; --resume finishes it without duplicates."""

from __future__ import annotations

import json
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

    # the report of the killed run says what it lacks and how to get it
    planned = json.loads((out / "manifest.json").read_text())["tasks"]
    done = {json.loads(line)["task_id"] for line in before.splitlines()}
    missing = [t for t in planned if t not in done]
    assert len(planned) == 6 and len(missing) == 6 - n_before
    rep = cli("report", str(out), "--format", "md")
    assert rep.returncode == 0, rep.stderr[-2000:]
    md = (out / "report.md").read_text()
    state = "running per its manifest, but no dlsuite run holds it (killed?)"
    assert f"**Incomplete runs**: run ({state}): {len(missing)} of 6 planned tasks" in md
    row = next(line for line in md.splitlines() if line.startswith(f"| run | {out} |"))
    assert f"| {state} | 6 | {len(missing)} | {n_before} | {n_before} |" in row
    note = next(line for line in md.splitlines() if line.startswith("run: "))
    assert all(t in note for t in missing) and not any(t in note for t in done)
    assert f"--out {out} --resume` runs them" in note

    resumed = cli(*ARGS, "--out", str(out), "--resume")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    rep = cli("report", str(out), "--format", "md")
    md = (out / "report.md").read_text()
    assert "Incomplete runs" not in md
    row = next(line for line in md.splitlines() if line.startswith(f"| run | {out} |"))
    assert "| finished | 6 | 0 | 6 | 6 |" in row
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
