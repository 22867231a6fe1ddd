"""``dlsuite ... | head -1``: a reader that stops early ends the command quietly (exit 141, as a
Unix tool killed by SIGPIPE), with no BrokenPipeError traceback and no "Exception ignored" line
from the interpreter's flush at exit. The real CLI writes into a pipe whose reader is gone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from suite.cli import EXIT_BROKEN_PIPE
from tests.helpers import ROOT, cli, records


def run_into_closed_pipe(*args: str, stderr_too: bool = False) -> subprocess.CompletedProcess[str]:
    """The real CLI with its output (``stderr_too``: both outputs, as ``2>&1 |``) into a pipe
    whose reader has already stopped, as head does after its line."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run(
            [sys.executable, "-m", "suite", *args],
            stdout=write_end,
            stderr=write_end if stderr_too else subprocess.PIPE,
            text=True,
            timeout=120,
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
    finally:
        os.close(write_end)


@pytest.mark.parametrize("args", [("list", "--json"), ("list",)])  # print, then Rich's tables
def test_a_closed_pipe_ends_the_command_quietly(args: tuple[str, ...]) -> None:
    done = run_into_closed_pipe(*args)
    assert done.stderr == ""  # was a BrokenPipeError traceback
    assert done.returncode == EXIT_BROKEN_PIPE


@pytest.mark.numpy
def test_a_run_whose_reader_went_away_stops_as_interrupted_and_resumes(tmp_path: Path) -> None:
    """`dlsuite run ... 2>&1 | head -1`: once the reader is gone the run stops as an interrupted
    one (manifest `interrupted`, what was measured kept, exit 141, no traceback) and `--resume`
    runs the rest. Before, Rich's handler ended the process with exit 1 in the middle of the
    run, the manifest left `running`."""
    out = tmp_path / "run"
    argv = ["run", "--framework", "numpy", "--level", "operator", "--benchmark", "gemm,gelu",
            "--quick", "--dtype", "fp32", "--no-history", "--out", str(out)]  # fmt: skip
    done = run_into_closed_pipe(*argv, stderr_too=True)
    assert done.returncode == EXIT_BROKEN_PIPE
    assert json.loads((out / "manifest.json").read_text())["state"] == "interrupted"
    kept = records(out)
    assert kept and len(kept) < 2 and {r["status"] for r in kept} == {"ok"}
    resumed = cli(*argv, "--resume")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert sorted(r["benchmark"]["name"] for r in records(out)) == ["gelu", "gemm"]
