"""Worker sessions (suite/session.py): one worker process runs a sequence of tasks, and a task
that crashes, hangs or runs out of memory in the middle of it costs that task only.

The faults come from a real third-party adapter: a package in a temporary folder that
registers itself through the ``dlsuite.adapters`` entry-point group, as a user's would. It is
the NumPy reference adapter whose GEMM, for one size each, kills its own process with a
signal, hangs, raises MemoryError or is killed with SIGKILL (from outside, as far as the
kernel can tell: suite/oom.py); every other size measures normally.
"""

from __future__ import annotations

import os
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import FAST_MEASURE, cli, records, records_at

FAULTY = """
import os
import signal
import time

from suite.adapters.numpy.adapter import NumPyAdapter

#: GEMM size m -> what goes wrong
FAULTS = {{9: "segv", 11: "hang", 13: "memory", 15: "kill"}}


class FaultyAdapter(NumPyAdapter):
    name = "faulty"
    distribution = "faulty"

    def matmul(self, a, b):
        fault = FAULTS.get(int(a.shape[0]))
        if fault == "segv":
            os.kill(os.getpid(), signal.SIGSEGV)
        elif fault == "hang":
            with open({pidfile!r}, "w") as fh:
                fh.write(str(os.getpid()))
            time.sleep(600)
        elif fault == "memory":
            raise MemoryError("faulty: out of memory on purpose")
        elif fault == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        return super().matmul(a, b)
"""


def faulty_package(root: Path, pidfile: Path) -> dict[str, str]:
    """The adapter package, installed the way pip leaves one (a module and its dist-info with
    the entry point); returns the environment that puts it on the path."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "faulty_adapter.py").write_text(FAULTY.format(pidfile=str(pidfile)))
    info = root / "faulty-1.0.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: faulty\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        "[dlsuite.adapters]\nfaulty = faulty_adapter:FaultyAdapter\n"
    )
    path = os.pathsep.join(p for p in (str(root), os.environ.get("PYTHONPATH", "")) if p)
    return {"PYTHONPATH": path}


def gemm_config(path: Path, sizes: list[int]) -> Path:
    rows = ",\n".join(f"  {{m = {m}, n = 16, k = 16}}" for m in sizes)
    path.write_text(
        FAST_MEASURE.read_text()
        + textwrap.dedent(
            """
            [operator.gemm]
            sizes = [
            """
        )
        + rows
        + "\n]\n"
    )
    return path


def by_m(recs: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    return {r["benchmark"]["params"]["m"]: r for r in recs}


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def test_faults_in_the_middle_of_a_session_cost_one_task_each(tmp_path: Path) -> None:
    pidfile = tmp_path / "hang.pid"
    env = faulty_package(tmp_path / "site", pidfile)
    sizes = [8, 9, 10, 11, 12, 13, 14, 15, 16]
    t0 = time.monotonic()
    proc = cli(
        "run", "--framework", "faulty", "--backend", "local", "--benchmark", "gemm",
        "--dtype", "fp32", "--config", str(gemm_config(tmp_path / "c.toml", sizes)),
        "--timeout", "30", "--out", str(tmp_path / "r"),
        env=env, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr[-3000:]  # some tasks failed: exit 1, not 2
    recs = by_m(records(tmp_path / "r"))
    assert sorted(recs) == sizes  # every task has exactly one record
    status = {m: recs[m]["status"] for m in sizes}
    assert status == {
        8: "ok", 9: "failed", 10: "ok", 11: "timeout", 12: "ok", 13: "oom", 14: "ok",
        15: "failed", 16: "ok",
    }, status  # fmt: skip
    assert "SIGSEGV" in recs[9]["reason"]
    assert "timeout of 30 s" in recs[11]["reason"]
    assert "MemoryError" in recs[13]["reason"]  # the worker's own record, then a fresh worker
    assert "killed by SIGKILL from outside the worker" in recs[15]["reason"]
    for m in (8, 10, 12, 14, 16):  # measured and correct after each fault
        assert recs[m]["correctness"]["passed"], recs[m]["correctness"]
    # Each fault ended its worker; the task after it started a fresh session (position 0).
    for m in (10, 12, 14, 16):
        assert recs[m]["worker"]["isolation"] == "session"
        assert recs[m]["worker"]["position"] == 0, recs[m]["worker"]
    assert recs[9]["worker"]["session_id"] == recs[8]["worker"]["session_id"]
    assert recs[9]["worker"]["position"] == 1  # it died second in its session
    assert recs[9]["error"]["log"] == f"logs/{recs[9]['task_id']}.log"
    assert not alive(int(pidfile.read_text())), "the hung worker survived its timeout"
    assert time.monotonic() - t0 < 300
    assert cli("validate", str(tmp_path / "r")).returncode == 0


def test_a_session_runs_many_tasks_in_one_process(tmp_path: Path) -> None:
    env = faulty_package(tmp_path / "site", tmp_path / "unused.pid")
    sizes = [8, 10, 12, 14]
    cfg = gemm_config(tmp_path / "c.toml", sizes)
    common = ["--framework", "faulty", "--backend", "local", "--benchmark", "gemm",
              "--dtype", "fp32", "--config", str(cfg)]  # fmt: skip
    proc = cli("run", *common, "--out", str(tmp_path / "s"), env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    recs = by_m(records(tmp_path / "s"))
    workers = [recs[m]["worker"] for m in sizes]
    assert {w["pid"] for w in workers} == {workers[0]["pid"]}  # one process ran them all
    assert [w["position"] for w in workers] == [0, 1, 2, 3]
    assert workers[0]["reset"] == [] and workers[0]["warm"] == []  # a fresh process
    assert all("gc.collect" in " ".join(w["reset"]) for w in workers[1:])
    # each task's output is in its own log, the session's own in logs/<session>.log
    for rec in recs.values():
        log = (tmp_path / "s" / "logs" / f"{rec['task_id']}.log").read_text()
        assert f"{rec['task_id']}: ok" in log
    assert (tmp_path / "s" / "logs" / f"{workers[0]['session_id']}.log").exists()

    proc = cli("run", *common, "--isolate", "task", "--out", str(tmp_path / "t"), env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    alone = by_m(records(tmp_path / "t"))
    assert len({alone[m]["worker"]["pid"] for m in sizes}) == len(sizes)
    for m in sizes:
        assert alone[m]["worker"]["isolation"] == "task"
        assert alone[m]["worker"]["isolation_reason"] == "--isolate task"
        assert alone[m]["worker"]["position"] == 0
        # the same checks, the same work either way
        assert alone[m]["correctness"]["passed"] and recs[m]["correctness"]["passed"]
        assert value_checks(alone[m]) == value_checks(recs[m])


def value_checks(rec: dict[str, Any]) -> list[str]:
    """The record's checks of the values computed (the timer check is left out: it is made
    only when the work is long enough to tell, which a loaded machine changes)."""
    return [c["name"] for c in rec["correctness"]["checks"] if not c["name"].startswith("timer_")]


def test_retry_noisy_measures_noisy_records_again(tmp_path: Path) -> None:
    env = faulty_package(tmp_path / "site", tmp_path / "unused.pid")
    cfg = gemm_config(tmp_path / "c.toml", [8, 10])
    # A target no measurement can meet within a 0.05 s budget: every record ends noisy.
    cfg.write_text(
        cfg.read_text().replace(
            "time_budget_s = 0.25", "time_budget_s = 0.05\ntarget_ci_rel = 1e-9"
        )
    )
    proc = cli(
        "run", "--framework", "faulty", "--backend", "local", "--benchmark", "gemm",
        "--dtype", "fp32", "--config", str(cfg), "--retry-noisy", "1",
        "--out", str(tmp_path / "r"), env={**env, "COLUMNS": "250"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "noisy" in proc.stdout  # the summary marks them
    assert "--retry-noisy: measuring 2 noisy task(s) again" in proc.stderr
    # the progress counts the tasks measured again among those planned ("[3/2]" before)
    assert "[3/4] " in proc.stderr and "[4/4] " in proc.stderr, proc.stderr[-3000:]
    recs = records(tmp_path / "r")
    assert len(recs) == 2  # one record per task: the re-measurement
    for rec in recs:
        assert rec["retry"]["attempt"] == 2
        assert rec["retry"]["previous_status"] == "ok"
        assert rec["retry"]["previous_reason"].startswith("noisy: the CI of the median was")
        assert rec["measurement"]["stop_reason"] == "time_budget"
    old = records_at(tmp_path / "r" / "superseded.jsonl")
    assert sorted(r["task_id"] for r in old) == sorted(r["task_id"] for r in recs)


@pytest.mark.pytorch
def test_distributed_tasks_share_a_session_and_a_process_group(tmp_path: Path) -> None:
    proc = cli(
        "run", "--level", "distributed", "--benchmark", "allreduce,broadcast", "--quick",
        "--world-size", "2", "--device", "cpu", "--launcher", "spawn",
        "--config", str(FAST_MEASURE), "--out", str(tmp_path / "d"),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    recs = records(tmp_path / "d")
    assert recs and all(r["status"] == "ok" for r in recs), [r.get("reason") for r in recs]
    workers = {r["benchmark"]["name"]: r["worker"] for r in recs}
    assert workers["allreduce"]["session_id"] == workers["broadcast"]["session_id"]
    assert workers["allreduce"]["pid"] == workers["broadcast"]["pid"]  # rank 0's process
    assert sorted({w["position"] for w in workers.values()}) == [0, 1]
    later = max(workers.values(), key=lambda w: w["position"])
    assert any("process group" in w for w in later["warm"])
