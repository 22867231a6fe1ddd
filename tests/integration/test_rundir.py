"""The run directory under pressure: two runs on one --out, a full disk, a killed runner,
and --resume of a run whose records are not all complete."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from suite.results import ResultsFile, dumps, record_skeleton, validate_record
from suite.rundir import LOCK_NAME, runner_alive, write_json_atomic
from tests.helpers import ROOT, cli, records, records_at

QUICK = ["run", "--quick", "--device", "cpu", "--dtype", "fp32"]


def start(args: list[str], **kw: object) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "suite", *args],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        **kw,  # type: ignore[call-overload]
    )


def wait_for(what: str, check, timeout: float = 120):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.1)
    pytest.fail(f"timed out waiting for {what}")


def alive(pid: int) -> bool:
    """Alive and not a zombie (an orphan reparented to a PID 1 that does not reap stays Z)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def workers_of(run_dir: Path) -> list[int]:
    """Processes of a run's task tree: workers (their command line names the run's worker
    session file, or a task file) and the launchers that started them."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        named = str(run_dir / "sessions") in cmd or str(run_dir / "tasks") in cmd
        if named and alive(int(proc.name)):
            pids.append(int(proc.name))
    return pids


# -- 1. one run at a time --------------------------------------------------------------------
def hold_lock(run_dir: Path) -> subprocess.Popen[str]:
    """Another process holding the run directory's lock, as a running `dlsuite run` does."""
    code = (
        "import sys, time; from pathlib import Path; from suite.rundir import RunLock\n"
        f"RunLock(Path({str(run_dir)!r})).acquire(['run', '--out', 'x'], 'x')\n"
        "print('held', flush=True); time.sleep(600)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


@pytest.mark.parametrize("resume", [False, True])
def test_a_locked_run_directory_is_refused(tmp_path: Path, resume: bool) -> None:
    out = tmp_path / "run"
    out.mkdir()
    holder = hold_lock(out)
    try:
        proc = cli(*QUICK, "--benchmark", "gemm", "--out", str(out), *(["--resume"] * resume))
        assert proc.returncode == 2, proc.stderr
        lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
        assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
        assert "in use by another dlsuite run" in lines[0]
        assert f"pid {holder.pid} on " in lines[0] and "--out" in lines[0]
        assert not (out / "results.jsonl").exists() and not (out / "manifest.json").exists()
    finally:
        holder.kill()
        holder.wait()
    # the kernel drops the lock with its holder, however it died
    assert runner_alive(out / LOCK_NAME) is False


@pytest.mark.pytorch
def test_two_runs_started_together_on_one_out(tmp_path: Path) -> None:
    out = tmp_path / "run"
    args = [*QUICK, "--benchmark", "gemm,softmax", "--out", str(out)]
    first, second = start(args), start(args)
    (_, e1), (_, e2) = first.communicate(timeout=300), second.communicate(timeout=300)
    codes = sorted([first.returncode, second.returncode])
    assert codes == [0, 2], (e1, e2)
    loser = e1 if first.returncode == 2 else e2
    assert "in use by another dlsuite run" in loser and "Traceback" not in loser
    recs = records(out)
    assert sorted(r["task_id"] for r in recs) == sorted({r["task_id"] for r in recs})
    assert len(recs) == 2 and {r["status"] for r in recs} == {"ok"}
    assert len({r["run_id"] for r in recs}) == 1


def test_atomic_json_leaves_no_temporary_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "manifest.json"
    write_json_atomic(target, {"a": 1})

    def writers(n: int) -> None:
        for i in range(200):
            write_json_atomic(target, {"writer": n, "i": i, "pad": "x" * 2000})

    threads = [threading.Thread(target=writers, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert json.loads(target.read_text())["i"] == 199  # whole documents only
    monkeypatch.setattr(os, "replace", lambda *a: (_ for _ in ()).throw(OSError(28, "full")))
    with pytest.raises(OSError):
        write_json_atomic(target, {"b": 2})
    with pytest.raises(ValueError):
        write_json_atomic(target, {"nan": float("nan")})  # not JSON: refused, nothing written
    assert sorted(p.name for p in tmp_path.iterdir()) == ["manifest.json"]


# -- 2. a full disk ---------------------------------------------------------------------------
@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A real, small file system (tmpfs) that the test can fill."""
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(disk)], check=True)
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def fill(disk: Path) -> Path:
    filler = disk / "filler"
    with filler.open("wb") as fh:
        try:
            while True:
                fh.write(b"\0" * 65536)
                fh.flush()
        except OSError:
            pass
    return filler


@pytest.mark.pytorch
@pytest.mark.root
def test_full_disk_stops_the_run_cleanly_and_resume_finishes_it(small_disk: Path) -> None:
    out = small_disk / "run"
    args = [*QUICK, "--benchmark", "gemm,softmax,gelu,norm", "--out", str(out)]
    proc = start(args)

    def first_record() -> bool:
        if proc.poll() is not None:
            pytest.fail(f"the run ended early: {proc.communicate()}")
        path = out / "results.jsonl"
        return path.exists() and path.read_text().count("\n") >= 1

    wait_for("a first record", first_record)
    filler = fill(small_disk)
    _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 2, stderr
    lines = [ln for ln in stderr.splitlines() if ln.startswith("dlsuite")]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    assert "the disk is full" in lines[0] and "--resume --out" in lines[0], lines[0]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["state"] == "stopped" and "disk is full" in manifest["stop_reason"]
    assert not list(out.rglob("*.tmp")), "a partial temporary file was left"
    before = records(out)
    assert 1 <= len(before) < 5
    for rec in before:
        validate_record(rec)
        assert rec["status"] == "ok", rec.get("reason")  # no "worker died" record for the cut task

    filler.unlink()
    resumed = cli(*args, "--resume")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    after = records(out)
    assert sorted(r["task_id"] for r in after) == sorted({r["task_id"] for r in after})
    assert len(after) == 5 and {r["status"] for r in after} == {"ok"}
    assert after[: len(before)] == before  # nothing measured was changed or lost
    assert json.loads((out / "manifest.json").read_text())["state"] == "finished"


@pytest.mark.root
def test_a_disk_too_full_to_start(small_disk: Path) -> None:
    fill(small_disk)
    proc = cli(*QUICK, "--benchmark", "gemm", "--out", str(small_disk / "run"))
    assert proc.returncode == 2
    assert "disk is full" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


# -- --resume reruns what is not complete -----------------------------------------------------
def _record(task_id: str, status: str, reason: str = "") -> dict[str, object]:
    doc = {
        "run_id": "r", "task_id": task_id, "level": "operator", "benchmark": "gemm",
        "params": {}, "framework": "pytorch", "backend": "local", "dtype": "fp32",
        "world_size": 1,
    }  # fmt: skip
    rec = record_skeleton(doc, host="h", started_at=f"2026-11-24T00:00:0{len(task_id)}")
    rec.update(status=status, reason=reason)
    return rec


def test_only_ok_and_real_skips_are_complete(tmp_path: Path) -> None:
    results = ResultsFile(tmp_path / "results.jsonl")
    results.path.write_text(
        "".join(
            dumps(r) + "\n"
            for r in [
                _record("ok", "ok"),
                _record("skip", "skipped", "pytorch has no fp8"),
                _record("refused", "skipped", "machine not quiet (--require-quiet): load 1.5"),
                _record("failed", "failed", "worker exited with code 3"),
                _record("sweep", "ok"),
                _record("sweep", "timeout", "task exceeded its timeout"),
            ]
        )
    )
    assert results.complete_task_ids() == {"ok", "skip"}
    retry = results.supersede({"refused", "failed", "sweep"}, tmp_path / "superseded.jsonl")
    assert retry["failed"] == {
        "attempt": 2, "previous_status": "failed", "previous_reason": "worker exited with code 3"
    }  # fmt: skip
    assert retry["sweep"]["previous_status"] == "timeout"
    assert [r["task_id"] for r in records_at(results.path)] == ["ok", "skip"]
    assert len(records_at(tmp_path / "superseded.jsonl")) == 4
    # a --resume stopped before these reran, resumed again: their records are only in
    # superseded.jsonl now, and the new records are still retries (they carried none)
    again = results.supersede({"refused", "failed", "sweep"}, tmp_path / "superseded.jsonl")
    assert again == retry
    assert len(records_at(tmp_path / "superseded.jsonl")) == 4  # nothing moved twice
    assert results.supersede({"never-ran"}, tmp_path / "superseded.jsonl") == {}


def test_resume_runs_only_the_sizes_a_stopped_sweep_had_left(tmp_path: Path) -> None:
    """A sweep stopped after 2 of its 3 sizes (its points kept, one failed record for the
    rest): --resume gives its worker only the size left, under the same task id, the kept
    points stay in results.jsonl, and the placeholder moves aside only as the rest's records
    come. A task that failed before any point, and one whose failure stands for all its
    sizes, run whole."""
    from suite.plan import Task
    from suite.runner import failure_record, sweep_rests

    def sweep(seed: int) -> Task:
        return Task(
            level="distributed", benchmark="allreduce", params={"sizes": [64, 4096, 1 << 20]},
            framework="pytorch", dtype="fp32", device="cpu", backend="local", world_size=2,
            seed=seed, size_set="custom", source="test", launcher="torchrun",
        )  # fmt: skip

    def rec(task: Task, status: str, params: dict[str, object], at: str) -> dict[str, object]:
        doc = {**task.document(run_id="r", record_path="", provenance={}), "params": params}
        if status == "ok":
            out = record_skeleton(doc, host="h", started_at=at)
            out.update(status="ok", duration_s=1.0)
            return out
        return failure_record(doc, status, "interrupted", "logs/x.log", "", at, 0.0)

    stopped, failed, whole = sweep(1), sweep(2), sweep(3)
    rest = {"sizes": [1 << 20]}
    at1, at2 = "2026-11-24T00:00:01", "2026-11-24T00:00:02"
    results = ResultsFile(tmp_path / "results.jsonl")
    kept = [
        rec(stopped, "ok", {"elements": 16, "message_bytes": 64, "requested_bytes": 64}, at1),
        rec(stopped, "ok", {"elements": 1024, "message_bytes": 4096, "requested_bytes": 4096}, at1),
    ]  # fmt: skip
    results.path.write_text(
        "".join(
            dumps(r) + "\n"
            for r in [
                *kept,
                rec(stopped, "failed", rest, at1),
                rec(failed, "failed", failed.params, at1),
                rec(whole, "ok", {"elements": 16, "message_bytes": 64, "requested_bytes": 64}, at1),
                rec(whole, "timeout", whole.params, at1),
            ]
        )
    )
    tasks = [stopped, failed, whole]
    assert sweep_rests(tasks, results.complete_task_ids(), results) == {stopped.task_id: rest}
    resumed = dataclasses.replace(stopped, resume_params=rest)
    assert resumed.task_id == stopped.task_id
    assert resumed.document(run_id="r", record_path="", provenance={})["params"] == rest
    to = tmp_path / "superseded.jsonl"
    assert results.retry_of_rest(stopped.task_id, to) == {
        "attempt": 2, "previous_status": "failed", "previous_reason": "interrupted",
    }  # fmt: skip
    # stopped again before its last size: the new placeholder replaces the old one at once
    again = rec(stopped, "failed", rest, at2)
    results.replace_unfinished(stopped.task_id, [again], to)
    mine = [r for r in records_at(results.path) if r["task_id"] == stopped.task_id]
    assert mine == [*kept, again]
    assert [r["started_at"] for r in records_at(to)] == [at1]
    assert len(records_at(results.path)) == 6  # the other tasks' records untouched
    assert results.retry_of_rest(stopped.task_id, to)["attempt"] == 3


@pytest.mark.pytorch
def test_resume_reruns_failed_tasks_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from suite.backends.local import LocalBackend
    from suite.config import resolve
    from suite.plan import build
    from suite.runner import run

    class Crashing(LocalBackend):
        def command(self, task_path: Path) -> list[str]:
            return [sys.executable, "-c", "import sys; sys.exit(3)"]

    def cfg(resume: bool):  # type: ignore[no-untyped-def]
        c = resolve({"quick": True, "benchmarks": ["gemm", "softmax"], "dtypes": ["fp32"],
                     "device": "cpu", "out": str(tmp_path / "run"), "resume": resume}, env={})  # fmt: skip
        return c, build(c)

    with monkeypatch.context() as m:
        m.setattr("suite.runner.BACKENDS.load", lambda name: Crashing)
        first = run(*cfg(False), ["first"])
    assert {r["status"] for r in first.records} == {"failed"}
    second = run(*cfg(True), ["second"])  # the real worker this time
    assert second.ran == 2
    assert {r["status"] for r in second.records} == {"ok"} and len(second.records) == 2
    for rec in second.records:
        assert rec["retry"]["attempt"] == 2 and rec["retry"]["previous_status"] == "failed"
        assert "exited with code 3" in rec["retry"]["previous_reason"]
    assert len(records_at(tmp_path / "run" / "superseded.jsonl")) == 2


# -- 5. workers end with their runner ---------------------------------------------------------
@pytest.mark.pytorch
@pytest.mark.parametrize(
    "args",
    [
        ["--benchmark", "gemm"],
        ["--level", "distributed", "--benchmark", "allreduce", "--world-size", "2",
         "--launcher", "torchrun"],
    ],
    ids=["one-worker", "torchrun-two-ranks"],
)  # fmt: skip
def test_workers_die_with_a_killed_runner(tmp_path: Path, args: list[str]) -> None:
    out = tmp_path / "run"
    slow = tmp_path / "slow.toml"
    # min_time_s holds the measurement for 120 s, and max_samples must not end it first (1000
    # samples of a quick gemm are about 2.5 s: the task ended before the runner was killed)
    slow.write_text("[measure]\ntime_budget_s = 120\nmin_time_s = 120\nmax_samples = 1000000\n")
    runner = start([*QUICK, *args, "--config", str(slow), "--out", str(out)])
    wanted = 3 if "torchrun" in args else 1
    workers = wait_for("the workers", lambda: len(w := workers_of(out)) >= wanted and w)
    time.sleep(3)  # well inside the measurement
    assert all(alive(p) for p in workers)
    os.kill(runner.pid, signal.SIGKILL)  # the runner only: no chance to clean up
    runner.wait()
    t0 = time.monotonic()
    wait_for("the workers to end", lambda: not any(alive(p) for p in workers), timeout=20)
    assert time.monotonic() - t0 < 10
    assert not workers_of(out)
    log = "".join(p.read_text() for p in (out / "logs").glob("*.log"))
    assert "runner holding" in log and "is gone" in log
