"""``dlsuite ... | head -1``: a reader that stops early ends the command quietly (exit 141, as a
Unix tool killed by SIGPIPE), with no BrokenPipeError traceback and no "Exception ignored" line
from the interpreter's flush at exit. The real CLI writes into a pipe whose reader is gone."""

from __future__ import annotations

import os
import subprocess
import sys

from suite.cli import EXIT_BROKEN_PIPE
from tests.helpers import ROOT


def run_into_closed_pipe(*args: str) -> subprocess.CompletedProcess[str]:
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader has already stopped, as head does after its line
    try:
        return subprocess.run(
            [sys.executable, "-m", "suite", *args],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
    finally:
        os.close(write_end)


def test_a_closed_pipe_ends_the_command_quietly() -> None:
    done = run_into_closed_pipe("list", "--json")
    assert done.stderr == ""  # was a BrokenPipeError traceback
    assert done.returncode == EXIT_BROKEN_PIPE
