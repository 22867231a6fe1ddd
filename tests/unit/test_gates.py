"""`make test` on a machine without the system packages: the tests that need them are
deselected with one line each naming the missing piece and the command that installs it, and
DLSUITE_REQUIRE_SYSTEM=1 (CI) turns that into a failure."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.helpers import ROOT

MODULES = ["tests/integration/test_slurm.py", "tests/integration/test_distributed.py",
           "tests/integration/test_docker.py"]  # fmt: skip


def collect(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    # only the interpreter's own directory on PATH: no mpirun, dockerd, slurmctld, apptainer
    bare = {k: v for k, v in os.environ.items() if k != "DLSUITE_REQUIRE_SYSTEM"}
    bare.update(PATH=str(Path(sys.executable).parent), **env)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--co", "-q", *MODULES],
        capture_output=True, text=True, cwd=ROOT, env=bare, timeout=120,
    )  # fmt: skip


def test_missing_system_packages_deselect_with_a_note() -> None:
    proc = collect({})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    notes = [ln for ln in proc.stdout.splitlines() if ln.startswith("dlsuite: ")]
    for marker, missing in (("docker", "dockerd"), ("slurm", "slurmctld"), ("mpi", "mpirun")):
        (line,) = [n for n in notes if f" {marker} test(s) deselected" in n]
        assert missing in line and "tests/system-deps.sh" in line, line
    assert "tests/integration/test_distributed.py::test_mpirun_allreduce" not in proc.stdout
    assert "test_distributed.py::test_bad_distributed_flags" in proc.stdout  # the rest stays


def test_ci_requires_them() -> None:
    proc = collect({"DLSUITE_REQUIRE_SYSTEM": "1"})
    assert proc.returncode != 0
    assert "DLSUITE_REQUIRE_SYSTEM=1 but the" in proc.stdout + proc.stderr
