"""The distributed level for real: ranks started by torchrun and mpirun, gloo on the CPU.

One quick level run (module-scoped, ~90 s on 2 cores) is checked record by record; mpirun runs
a collective for real (CI installs ``openmpi-bin``: a missing mpirun fails, it does not skip);
a rank killed or stopped mid-run becomes a ``failed`` or ``timeout`` record, the run goes on and
no process of it survives; bad distributed flags are one-line errors with exit code 2.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from suite.launchers.base import Launch, free_port
from suite.launchers.torchrun import Torchrun
from suite.results import validate_record
from tests.helpers import (
    FAST_MEASURE,
    ROOT,
    cli,
    export_torch_aux_head,
    export_torch_encoder,
    records,
)

STRATEGIES_KIT = ROOT / "tests" / "strategies-kit.toml"

pytestmark = [pytest.mark.pytorch, pytest.mark.slow]

COLLECTIVES = ("allreduce", "allgather", "broadcast", "reduce_scatter")
QUICK_SIZES = [8, 1024, 65536, 1 << 20, 16 << 20]


# -- processes ---------------------------------------------------------------------------------
def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError:  # gone, or not ours to read
        return b""


def running(pid: int) -> bool:
    """Alive and not a zombie (an orphan reparented to a PID 1 that does not reap stays Z)."""
    stat = _read(f"/proc/{pid}/stat").decode(errors="replace")
    if not stat:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def processes_of(marker: str) -> list[int]:
    """Live processes whose command line mentions ``marker`` (a run directory)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        if marker.encode() in _read(f"/proc/{entry}/cmdline") and running(int(entry)):
            out.append(int(entry))
    return out


def find_rank(rank: int, marker: str, timeout: float = 120.0) -> int:
    """The pid of the worker of rank ``rank`` whose command line holds ``marker`` (the run's
    sessions/ folder: a worker runs a session's file): ``RANK=<rank>`` in its environment, ``suite.worker`` in its command line, and not
    the launcher itself (torchrun's command line names the worker module too)."""
    deadline = time.monotonic() + timeout
    want = f"RANK={rank}".encode()
    while time.monotonic() < deadline:
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            argv = _read(f"/proc/{entry}/cmdline").split(b"\0")
            if (
                b"suite.worker" in argv
                and any(marker.encode() in a for a in argv)
                and b"torch.distributed.run" not in argv
                and want in _read(f"/proc/{entry}/environ").split(b"\0")
                and running(int(entry))
            ):
                return int(entry)
        time.sleep(0.05)
    raise AssertionError(f"no rank-{rank} worker with {marker!r} appeared in {timeout:g} s")


def wait_until_framework_loaded(pid: int, timeout: float = 120.0) -> None:
    """Until the rank has imported torch (its gloo library is mapped): it is mid-run."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        maps = _read(f"/proc/{pid}/maps")
        if b"libtorch_cpu" in maps or b"libtorch_cuda" in maps:
            return
        if not running(pid):
            raise AssertionError(f"rank process {pid} ended before it imported torch")
        time.sleep(0.1)
    raise AssertionError(f"rank process {pid} did not import torch in {timeout:g} s")


def kill_leftovers(marker: str) -> None:
    """Test cleanup only: SIGKILL what this test's run left behind, by pid."""
    for pid in processes_of(marker):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def start_run(*args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-m", "suite", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        cwd=ROOT,
    )


def finish(proc: subprocess.Popen[str], timeout: float) -> str:
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        raise AssertionError(f"the run did not finish in {timeout:g} s:\n{out[-4000:]}") from None
    return out


def params_of(rec: dict[str, Any]) -> dict[str, Any]:
    p: dict[str, Any] = rec["benchmark"]["params"]
    return p


def check(rec: dict[str, Any], name: str) -> list[dict[str, Any]]:
    """The record's checks whose name (after the ``rankN.`` prefix) starts with ``name``."""
    return [c for c in rec["correctness"]["checks"] if c["name"].split(".", 1)[1].startswith(name)]


# -- the quick level with 2 ranks via torchrun --------------------------------------------------
@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Any]]:
    out = tmp_path_factory.mktemp("dist") / "run"
    # --device cpu: gloo on the CPU also where a GPU is visible
    proc = cli(
        "run",
        "--level",
        "distributed",
        "--framework",
        "pytorch",
        "--device",
        "cpu",
        "--quick",
        "--world-size",
        "2",
        # the strategies benchmark: the allreduce baseline, a compressed and a pipeline
        # strategy under torchrun (the conformance kit runs them all under spawn)
        "--strategy",
        "fp16,pipeline",
        "--config",
        str(STRATEGIES_KIT),
        "--out",
        str(out),
        timeout=1200,
    )
    yield out, proc


def test_quick_level_exits_zero_and_validates(quick_run: tuple[Path, Any]) -> None:
    out, proc = quick_run
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    recs = records(out)
    # four collectives' sizes, data_parallel (2 networks: one 1-rank baseline, strong and
    # weak at 2 ranks) and the three strategies
    assert len(recs) == 4 * len(QUICK_SIZES) + 6 + 3
    for rec in recs:
        validate_record(rec)
        assert rec["status"] == "ok", (rec["task_id"], rec.get("reason"))
        assert rec["correctness"]["passed"], rec["correctness"]
        assert rec["framework"]["name"] == "pytorch"
        assert rec["dtype"] == "fp32"
    assert cli("validate", str(out)).returncode == 0


@pytest.mark.parametrize("op", COLLECTIVES)
def test_quick_collective_records(quick_run: tuple[Path, Any], op: str) -> None:
    out, _ = quick_run
    recs = [r for r in records(out) if r["benchmark"]["name"] == op]
    assert sorted(params_of(r)["requested_bytes"] for r in recs) == QUICK_SIZES
    for rec in recs:
        assert rec["world_size"] == 2 and rec["rank"] is None
        names = {m["name"]: m for m in rec["metrics"]}
        assert {"time", "algbw", "busbw"} <= set(names)
        for m in names.values():
            assert m["value"] > 0
            assert m["across_ranks"]["min"] <= m["across_ranks"]["median"]
            assert m["across_ranks"]["median"] <= m["across_ranks"]["max"]
        # busbw = algbw x nccl-tests' factor (allreduce 2(n-1)/n = 1, the others (n-1)/n or 1)
        factor = {"allreduce": 1.0, "broadcast": 1.0}.get(op, 0.5)
        assert rec["work"]["bus_factor"] == factor
        assert names["busbw"]["value"] == pytest.approx(names["algbw"]["value"] * factor)
        p = params_of(rec)
        assert p["message_bytes"] == p["elements"] * 4 >= p["requested_bytes"]
        wrong = check(rec, f"{op}.wrong_elements")
        assert sorted(c["name"] for c in wrong) == [
            f"rank0.{op}.wrong_elements",
            f"rank1.{op}.wrong_elements",
        ]
        assert all(c["error"] == 0 and c["passed"] for c in wrong)
        assert rec["work"]["wrong_elements"] == 0
        d = rec["distributed"]
        assert d["world_size"] == 2 and d["launcher"] == "torchrun" and d["backend"] == "gloo"
        assert [r["rank"] for r in d["ranks"]] == [0, 1]
        assert all(r["status"] == "ok" for r in d["ranks"])


def test_quick_data_parallel_records(quick_run: tuple[Path, Any]) -> None:
    out, _ = quick_run
    recs = [r for r in records(out) if r["benchmark"]["name"] == "data_parallel"]
    points = {(params_of(r)["network"], params_of(r)["scaling"], r["world_size"]) for r in recs}
    # at 1 rank strong and weak scaling are one configuration, measured once (the plan's
    # first, strong) and the baseline of both
    assert points == {
        (net, scaling, world)
        for net in ("mlp", "resnet18")
        for scaling, world in (("strong", 1), ("strong", 2), ("weak", 2))
    }
    by_id = {r["task_id"]: r for r in recs}
    for rec in recs:
        metrics = {m["name"]: m for m in rec["metrics"]}
        assert {"step_time", "throughput", "throughput_per_rank"} <= set(metrics)
        p, world = params_of(rec), rec["world_size"]
        global_batch = p["batch"] if p["scaling"] == "strong" else p["batch"] * world
        assert rec["work"]["global_batch"] == global_batch
        assert rec["work"]["per_rank_batch"] == global_batch // world
        if world == 1:
            assert rec["rank"] == 0 and not rec.get("distributed")
            assert "scaling_efficiency" not in metrics
            continue
        assert rec["rank"] is None
        d = rec["distributed"]
        assert (d["world_size"], d["launcher"], d["backend"], len(d["ranks"])) == (
            2,
            "torchrun",
            "gloo",
            2,
        )
        # scaling efficiency against the 1-rank record of the same run: tp_2 / (2 tp_1)
        base = by_id[rec["work"]["scaling_baseline_task_id"]]
        assert base["world_size"] == 1 and params_of(base) == {**p, "scaling": "strong"}
        tp1 = next(m["value"] for m in base["metrics"] if m["name"] == "throughput")
        assert metrics["scaling_efficiency"]["value"] == pytest.approx(
            100 * metrics["throughput"]["value"] / (2 * tp1)
        )
        assert 0 <= metrics["comm_share"]["value"] <= 100
        for name in ("weights_identical_across_ranks", "equals_single_process_on_global_batch"):
            found = check(rec, name)
            assert len(found) == 2, (name, rec["correctness"]["checks"])
            assert all(c["passed"] for c in found)


def test_quick_strategies_records(quick_run: tuple[Path, Any], tmp_path: Path) -> None:
    out, _ = quick_run
    recs = {
        params_of(r)["strategy"]: r for r in records(out) if r["benchmark"]["name"] == "strategies"
    }
    assert set(recs) == {"allreduce", "fp16", "pipeline"}
    for name, rec in recs.items():
        assert rec["status"] == "ok", (name, rec["status"], rec.get("reason"))
        d = rec["distributed"]
        assert (d["launcher"], d["world_size"], d["backend"]) == ("torchrun", 2, "gloo")
        section = rec["strategy"]
        # the bytes computed from the definition against what the process wrote (gloo writes
        # with writev: the kernel counts it): within 5%, plus a few hundred bytes of framing
        sent = section["bytes_per_step"]
        assert sent["written_by_process"] == pytest.approx(sent["computed"], rel=0.05, abs=1024)
        metrics = {m["name"]: m["value"] for m in rec["metrics"]}
        assert metrics["bytes_per_step"] == sent["computed"] > 0
        assert metrics["final_accuracy"] >= 0.93 and metrics["steps_to_target"] > 0
        if name in ("allreduce", "pipeline"):  # exact: k steps equal one process's
            found = check(rec, "equals_single_process_on_global_batch")
            assert len(found) == 2 and all(c["passed"] for c in found)
            assert metrics["distance_from_sync"] < 1e-4
    full = recs["allreduce"]["strategy"]["bytes_per_step"]["computed"]
    assert recs["fp16"]["strategy"]["bytes_per_step"]["computed"] == full / 2
    assert recs["fp16"]["strategy"]["vs_baseline"]["bytes_per_step_ratio"] == 0.5
    assert "comm_share" not in {m["name"] for m in recs["pipeline"]["metrics"]}
    # the report draws the strategies section from these records
    assert cli("report", str(out), "--out", str(tmp_path), "--format", "md").returncode == 0
    md = (tmp_path / "report.md").read_text()
    section = md.split("## Distributed strategies", 1)[1].split("\n## ", 1)[0]
    assert "strategies-cost" in section and "strategies-bytes" in section
    assert "| pytorch | fp16 |" in section and "| pytorch | pipeline (microbatches=4" in section


# -- mpirun ------------------------------------------------------------------------------------
@pytest.mark.mpi
def test_mpirun_allreduce(tmp_path: Path) -> None:
    assert shutil.which("mpirun"), (
        "mpirun is not installed: CI installs openmpi-bin (apt-get install -y openmpi-bin)"
    )
    # a path no shell may see: spaces, a ';' and a harmless command after it
    out = tmp_path / "mpi runs; touch dlsuite-shell-injection" / "run"
    # RANK/WORLD_SIZE inherited from a job the suite runs in (torchrun, Kubernetes) must not
    # override Open MPI's own rank variables: every rank would claim to be rank 0
    inherited = {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0"}
    proc = cli(
        "run", "--level", "distributed", "--framework", "pytorch", "--device", "cpu", "--quick",
        "--benchmark", "allreduce", "--world-size", "2", "--launcher", "mpirun",
        "--out", str(out), timeout=600, env=inherited,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    recs = records(out)
    assert sorted(params_of(r)["requested_bytes"] for r in recs) == QUICK_SIZES
    for rec in recs:
        validate_record(rec)
        assert rec["status"] == "ok" and rec["correctness"]["passed"]
        d = rec["distributed"]
        assert (d["launcher"], d["world_size"], d["backend"]) == ("mpirun", 2, "gloo")
        assert [r["rank"] for r in d["ranks"]] == [0, 1]
    assert not processes_of(str(out))
    assert not (ROOT / "dlsuite-shell-injection").exists()
    assert not (tmp_path / "dlsuite-shell-injection").exists()


# -- a rank killed mid-run, a rank that hangs --------------------------------------------------
def test_killed_rank_fails_the_task_and_the_run_goes_on(tmp_path: Path) -> None:
    out = tmp_path / "killed"
    config = tmp_path / "long.toml"
    config.write_text("[measure]\ntime_budget_s = 2.0\n")  # ~15 s per collective task
    proc = start_run(
        "run", "--level", "distributed", "--framework", "pytorch", "--device", "cpu", "--quick",
        "--benchmark", "allreduce,broadcast", "--world-size", "2", "--timeout", "240",
        "--config", str(config), "--out", str(out),
    )  # fmt: skip
    try:
        pid = find_rank(1, str(out.resolve() / "sessions"))
        wait_until_framework_loaded(pid)
        time.sleep(1.0)
        # (no size measured yet either: a sweep keeps those, test_an_interrupted_sweep_...)
        assert not list((out / "tasks").glob("*.records.jsonl*.rank*")), "too late to kill"
        # the session's first task, allreduce, is the one running (its broadcast is next)
        (events,) = (out / "sessions").glob("*.rank1.jsonl")
        assert '"event": "start"' in events.read_text()
        assert "distributed-allreduce-" in events.read_text()
        killed_at = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        text = finish(proc, 600)
        # the killed task ended at once (torchrun saw the rank die), not at its timeout
        recs = records(out)
        assert [r["benchmark"]["name"] for r in recs[:1]] == ["allreduce"], text[-3000:]
        failed = recs[0]
        validate_record(failed)
        assert failed["status"] == "failed"
        assert failed["duration_s"] < 120
        assert "rank(s) [" in failed["reason"] and "1" in failed["reason"].split("]")[0]
        # torchrun's own report names the rank that died first
        assert "torchrun saw rank 1 fail first (SIGKILL)" in failed["reason"]
        # and nobody can show it was the OOM killer (suite/oom.py)
        assert failed["reason"].endswith(
            "; killed by SIGKILL from outside the worker (no OOM kill recorded for it)"
        )
        if os.geteuid() == 0:  # root makes each worker a memory cgroup of its own
            assert failed["error"]["evidence"].startswith("oom_kill 0 in its own memory cgroup")
        assert failed["error"]["type"] == "RankFailed"
        assert failed["error"]["log"].startswith("logs/")
        # the next task of the plan still ran, and ran well
        rest = recs[1:]
        assert rest and {r["benchmark"]["name"] for r in rest} == {"broadcast"}
        assert all(r["status"] == "ok" and r["correctness"]["passed"] for r in rest)
        assert len(rest) == len(QUICK_SIZES)
        assert proc.returncode == 1  # a failed task: exit 1, like any failure
        assert time.monotonic() - killed_at < 240
        assert not processes_of(str(out.resolve())), "a process of the run survived"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        kill_leftovers(str(out.resolve()))


def test_stopped_rank_times_out_and_leaves_no_process(tmp_path: Path) -> None:
    out = tmp_path / "hung"
    config = tmp_path / "long.toml"
    config.write_text("[measure]\ntime_budget_s = 3.0\n")  # still running when it is stopped
    started = time.monotonic()
    proc = start_run(
        "run", "--level", "distributed", "--framework", "pytorch", "--device", "cpu", "--quick",
        "--benchmark", "allreduce", "--world-size", "2", "--timeout", "25",
        "--config", str(config), "--out", str(out),
    )  # fmt: skip
    try:
        pid = find_rank(1, str(out.resolve() / "sessions"))
        wait_until_framework_loaded(pid)
        os.kill(pid, signal.SIGSTOP)
        # before its first size: the task's one record is its timeout (a size measured before
        # is kept: test_sweep_stopped_by_its_timeout_keeps_the_sizes_it_measured)
        assert not list((out / "tasks").glob("*.points.rank*")), "stopped too late"
        text = finish(proc, 300)
        recs = records(out)
        assert len(recs) == 1, text[-3000:]
        rec = recs[0]
        validate_record(rec)
        assert rec["status"] == "timeout"
        assert "timeout of 25 s" in rec["reason"]
        assert proc.returncode == 1
        # the runner waits the timeout, then a few seconds' grace: not torchrun's 30 s, nor
        # gloo's own collective timeout (300 s)
        assert time.monotonic() - started < 150
        time.sleep(0.5)
        left = processes_of(str(out.resolve()))
        assert not left, f"processes of the run survived: {left}"
        assert not running(pid), "the stopped rank survived"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        kill_leftovers(str(out.resolve()))


# -- a 2-node torchrun command, both "nodes" on this host ---------------------------------------
PROBE = """\
import os, pathlib, sys
keys = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT")
pathlib.Path(sys.argv[1], os.environ["RANK"]).write_text(
    " ".join(os.environ.get(k, "-") for k in keys))
"""


def test_two_node_torchrun_command_rendezvous(tmp_path: Path) -> None:
    """The same rendered 2-node command started twice (as a scheduler would on each node)
    gives 4 ranks 0..3 in one world, 2 per node."""
    (tmp_path / "rankprobe.py").write_text(PROBE)
    results = tmp_path / "ranks"
    results.mkdir()
    launch = Launch(
        worker=[sys.executable, "-m", "rankprobe", str(results)],
        python=sys.executable,
        world_size=4,
        nodes=2,
        master_port=free_port(),
    )
    launcher = Torchrun()
    argv = launcher.command(launch)
    env = {**os.environ, **launcher.environment(launch), "PYTHONPATH": str(tmp_path)}
    procs = [
        subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for _ in range(2)
    ]
    outs = []
    for p in procs:
        try:
            outs.append(p.communicate(timeout=180)[0])
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert [p.returncode for p in procs] == [0, 0], "\n".join(o[-3000:] for o in outs)
    seen = {f.name: f.read_text().split() for f in results.iterdir()}
    assert sorted(seen) == ["0", "1", "2", "3"]
    assert {v[1] for v in seen.values()} == {"4"}
    assert sorted(v[2] for v in seen.values()) == ["0", "0", "1", "1"]  # 2 ranks per node
    assert sorted(v[3] for v in seen.values()) == ["0", "0", "1", "1"]  # node (group) ranks
    assert len({(v[4], v[5]) for v in seen.values()}) == 1  # one rendezvous for all


# -- bad input ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["--world-size", "1", "--benchmark", "allreduce"], ["--world-size 1", "2 ranks"]),
        (["--nodes", "3", "--world-size", "2"], ["--nodes 3", "--world-size 2"]),
        (["--launcher", "bogus"], ["bogus", "torchrun", "mpirun"]),
    ],
)
def test_bad_distributed_flags(args: list[str], needles: list[str], tmp_path: Path) -> None:
    proc = cli("run", "--level", "distributed", "--quick", *args, "--out", str(tmp_path / "r"))
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0].startswith("dlsuite: error:"), lines[0]
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    assert not (tmp_path / "r" / "results.jsonl").exists()


def _users_model_data_parallel(path: Path, out: Path, *flags: str) -> list[dict[str, Any]]:
    """``--model path`` trained data-parallel by PyTorch at 1 and 2 ranks (per-rank batch 4):
    its records, each ok with every check passed."""
    proc = cli(
        "run", "--level", "distributed", "--framework", "pytorch", "--device", "cpu", "--quick",
        "--world-size", "2", "--benchmark", "data_parallel", "--model", str(path), *flags,
        "--batch", "4", "--config", str(FAST_MEASURE), "--out", str(out), timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    recs = records(out)
    assert sorted(r["world_size"] for r in recs) == [1, 2]
    for r in recs:
        assert r["status"] == "ok" and r["correctness"]["passed"], r.get("error") or r.get("reason")
    return recs


def test_a_users_encoder_with_bound_inputs_trains_data_parallel(tmp_path: Path) -> None:
    """A Hugging Face-style export (its mask and token types bound by their names, the mask's
    reshape baked at the traced sequence by the exporter) trains data-parallel on 2 ranks: each
    model is built at the batch it is fed (the per-rank batch; the global batch for the
    single-process check), so the bound mask has that batch's rows."""
    path = tmp_path / "encoder.onnx"
    export_torch_encoder(path)
    recs = _users_model_data_parallel(path, tmp_path / "run", "--model-dims", "sequence=16")
    for r in recs:
        assert r["work"]["inputs_bound"] == {"attention_mask": "ones", "token_type_ids": "zeros"}
    (two,) = [r for r in recs if r["world_size"] == 2]
    names = {c["name"] for c in two["correctness"]["checks"]}
    assert "rank1.equals_single_process_on_global_batch[onnx].l2_rel_error" in names


def test_a_training_mode_export_with_an_auxiliary_head_trains_data_parallel(
    tmp_path: Path,
) -> None:
    """A file exported in training mode with an auxiliary head beside its logits (GoogLeNet's
    shape) trains on 2 ranks under DDP: the batch norms and the dropout run as every network's,
    and the head that gets no loss is left out with its parameters (DDP refused them before:
    "Expected to have finished reduction in the prior iteration"). The records say both."""
    path = tmp_path / "aux.onnx"
    export_torch_aux_head(path)
    for r in _users_model_data_parallel(path, tmp_path / "run"):
        assert r["work"]["model_outputs_not_run"] == ["aux"]
        assert r["work"]["model_training_export_nodes"] == 4  # 3 batch norms, 1 dropout


def wait_for_points(out: Path, n: int, within_s: float = 120) -> None:
    """Until both ranks have written ``n`` points of the sweep in flight (suite/worker.py)."""
    points: list[list[Path]] = []
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        points = [list((out / "tasks").glob(f"*.records.jsonl.points.rank{r}")) for r in (0, 1)]
        if all(p and len(p[0].read_text().splitlines()) >= n for p in points):
            return
        time.sleep(0.02)
    raise AssertionError(f"no {n} points written in {within_s:g} s: {points}")


def test_an_interrupted_sweep_keeps_the_sizes_it_measured(tmp_path: Path) -> None:
    """Ctrl-C while a sweep runs: the sizes measured before are records of their own, the
    rest one failed record (``Interrupted``) that --resume runs again; the run says so and
    exits 130 (the measured sizes stayed in a file of tasks/ before, and results.jsonl had
    none)."""
    out = tmp_path / "interrupted"
    config = tmp_path / "sweep.toml"
    config.write_text(
        "[measure]\ntime_budget_s = 2.0\n"
        "[distributed.allgather]\nsizes = [{sizes = [48, 6000, 100000]}]\n"
    )
    proc = start_run(
        "run", "--level", "distributed", "--framework", "pytorch", "--device", "cpu",
        "--benchmark", "allgather", "--world-size", "2", "--timeout", "240",
        "--config", str(config), "--out", str(out), "--no-history",
    )  # fmt: skip
    try:
        wait_for_points(out, 1)
        proc.send_signal(signal.SIGINT)
        text = finish(proc, 120)
        assert proc.returncode == 130, text[-3000:]
        assert "interrupted; records so far are kept" in text
        recs = records(out)
        for rec in recs:
            validate_record(rec)
        *kept, rest = recs
        assert kept and all(r["status"] == "ok" for r in kept), text[-3000:]
        sizes = [params_of(r)["requested_bytes"] for r in kept]
        assert sizes == [48, 6000, 100000][: len(sizes)]
        assert rest["status"] == "failed" and rest["error"]["type"] == "Interrupted"
        assert params_of(rest) == {"sizes": [48, 6000, 100000][len(sizes) :]}
        assert not list((out / "tasks").glob("*.points*"))
        assert json.loads((out / "manifest.json").read_text())["state"] == "interrupted"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        kill_leftovers(str(out.resolve()))


def test_resume_after_a_killed_run_records_the_sizes_its_sweep_measured(tmp_path: Path) -> None:
    """``dlsuite run`` killed outright (SIGKILL) mid-sweep records nothing of it; --resume
    records the sizes the sweep had measured (they lay in tasks/ only) and a failed
    ``RunKilled`` record for the rest, then measures only the sizes left: the kept sizes stay
    in results.jsonl as they were, the failed record moves to superseded.jsonl, the new
    sizes are attempt 2 (the whole sweep ran again before)."""
    out = tmp_path / "killed-run"
    config = tmp_path / "sweep.toml"
    config.write_text(
        "[measure]\ntime_budget_s = 2.0\n"
        "[distributed.reduce_scatter]\nsizes = [{sizes = [64, 8192, 200000]}]\n"
    )
    argv = (
        "run", "--level", "distributed", "--framework", "pytorch", "--device", "cpu",
        "--benchmark", "reduce_scatter", "--world-size", "2", "--timeout", "240",
        "--config", str(config), "--out", str(out), "--no-history",
    )  # fmt: skip
    proc = start_run(*argv)
    try:
        wait_for_points(out, 1)
        proc.kill()
        proc.wait()
        deadline = time.monotonic() + 60  # the workers end themselves (rundir.watch_runner)
        while processes_of(str(out.resolve())) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not (out / "results.jsonl").exists() or not records(out)
        again = cli(*argv, "--resume", timeout=400)
        assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
        assert "that tasks of the killed run had measured" in again.stderr + again.stdout
        assert "only for the points they had left" in again.stderr + again.stdout
        moved = [json.loads(line) for line in (out / "superseded.jsonl").read_text().splitlines()]
        (rest,) = moved
        assert rest["status"] == "failed" and rest["error"]["type"] == "RunKilled"
        left = params_of(rest)["sizes"]
        recs = records(out)
        assert [params_of(r)["requested_bytes"] for r in recs] == [64, 8192, 200000]
        assert all(r["status"] == "ok" and r["world_size"] == 2 for r in recs)
        kept, new = recs[: 3 - len(left)], recs[3 - len(left) :]
        assert kept and new, left
        assert all("retry" not in r for r in kept)
        assert {(r["retry"]["attempt"], r["retry"]["previous_status"]) for r in new} == {
            (2, "failed")
        }
        assert {r["started_at"] for r in kept}.isdisjoint(r["started_at"] for r in new)
        (doc,) = [json.loads(p.read_text()) for p in (out / "tasks").glob("*.json")]
        assert doc["params"] == {"sizes": left}  # the worker was given only the sizes left
        assert not list((out / "tasks").glob("*.points*"))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        kill_leftovers(str(out.resolve()))


def test_sweep_stopped_by_its_timeout_keeps_the_sizes_it_measured(tmp_path: Path) -> None:
    """A collective sweep whose rank stops after two of its four sizes: the two are records
    of their own (merged over the ranks, as a finished sweep's), the other two one
    ``timeout`` record that names only them; no points file is left behind."""
    out = tmp_path / "stopped"
    config = tmp_path / "sweep.toml"
    config.write_text(
        "[measure]\ntime_budget_s = 2.0\n"  # each size is measured for a while
        "[distributed.broadcast]\nsizes = [{sizes = [4096, 24, 300000, 512]}]\n"
    )
    proc = start_run(
        "run", "--level", "distributed", "--framework", "pytorch", "--device", "cpu",
        "--benchmark", "broadcast", "--world-size", "2", "--timeout", "45",
        "--config", str(config), "--out", str(out), "--no-history",
    )  # fmt: skip
    try:
        pid = find_rank(1, str(out.resolve() / "sessions"))
        wait_for_points(out, 2)
        os.kill(pid, signal.SIGSTOP)  # rank 1 stops while measuring the third size
        text = finish(proc, 300)
        assert proc.returncode == 1, text[-3000:]
        recs = records(out)
        for rec in recs:
            validate_record(rec)
        assert [r["status"] for r in recs] == ["ok", "ok", "timeout"], text[-3000:]
        # sorted by the sweep: 24 and 512 first, each merged over both ranks
        assert [params_of(r)["requested_bytes"] for r in recs[:2]] == [24, 512]
        for rec in recs[:2]:
            assert rec["world_size"] == 2 and rec["work"]["dist_backend"] == "gloo"
            assert "across_ranks" in rec["metrics"][0]
            assert rec["correctness"]["passed"]
        assert params_of(recs[2]) == {"sizes": [4096, 300000]}
        assert "timeout of 45 s" in recs[2]["reason"]
        assert "the 2 sizes measured before are kept" in recs[2]["reason"]
        # one attempt (its start), so a --resume that reruns it counts attempt 2, not 3
        assert len({r["started_at"] for r in recs}) == 1
        assert not list((out / "tasks").glob("*.points*")), "the points files stayed"
        assert cli("validate", str(out)).returncode == 0
        # --resume measures only the sizes left (second attempt); the kept records stay
        again = cli(
            "run", "--level", "distributed", "--framework", "pytorch", "--device", "cpu",
            "--benchmark", "broadcast", "--world-size", "2", "--timeout", "240", "--resume",
            "--config", str(config), "--out", str(out), "--no-history", timeout=400,
        )  # fmt: skip
        assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
        recs = records(out)
        assert [params_of(r)["requested_bytes"] for r in recs] == [24, 512, 4096, 300000]
        assert all("retry" not in r for r in recs[:2]), "the kept sizes were measured again"
        assert {r["retry"]["attempt"] for r in recs[2:]} == {2}
        assert {r["retry"]["previous_status"] for r in recs[2:]} == {"timeout"}
        moved = [json.loads(line) for line in (out / "superseded.jsonl").read_text().splitlines()]
        assert [r["status"] for r in moved] == ["timeout"]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        kill_leftovers(str(out.resolve()))
