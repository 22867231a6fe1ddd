"""A launcher and a backend registered with one line each run a real task: the examples of
tests/unit/test_plugin_registries.py (the backends guide's ``taskset`` backend, and the
suite's spawn registered again as ``tagged``), registered in every process the run starts
(the CLI, its workers and their ranks), with no other edit anywhere."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.helpers import FAST_MEASURE, ROOT, cli, records
from tests.unit.test_plugin_registries import write_plugins


@pytest.mark.pytorch
@pytest.mark.slow
def test_a_registered_launcher_and_backend_run_a_task(tmp_path: Path) -> None:
    plugins = write_plugins(tmp_path / "plugins")
    out = tmp_path / "run"
    proc = cli(
        "run", "--level", "distributed", "--benchmark", "allreduce", "--quick",
        "--framework", "pytorch", "--world-size", "2", "--launcher", "tagged",
        "--backend", "taskset", "--config", str(FAST_MEASURE), "--out", str(out),
        env={"PYTHONPATH": os.pathsep.join([str(ROOT), str(plugins)])},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    recs = records(out)  # validated against the result schema as they were written
    assert recs and all(r["status"] == "ok" and r["correctness"]["passed"] for r in recs)
    assert {r["backend"]["kind"] for r in recs} == {"taskset"}
    assert {r["distributed"]["launcher"] for r in recs} == {"tagged"}
    assert {r["world_size"] for r in recs} == {2}
