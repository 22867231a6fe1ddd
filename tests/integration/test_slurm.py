"""``--scheduler slurm`` for real, against the local cluster of ``cluster/local-cluster.sh``
(munged, slurmctld, two slurmd on this machine; CI installs slurm-wlm and munge: if they are
missing these tests fail, they do not skip).

A distributed run over both nodes writes ok records carrying the Slurm job; an array job killed
with scancel leaves failed records naming the job and its state, and --resume runs only the
tasks without records; Ctrl-C cancels the job (also with its output gone); --dry-run submits
nothing; a job sbatch refuses or the cluster would never start stops with the site field to
change, and --resume completes it once the profile is right. About 2 minutes.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from benchmarks.studies.slurm_array import free_port_run
from suite.results import validate_record
from tests.helpers import ROOT, cli, records, records_at

pytestmark = [pytest.mark.slurm, pytest.mark.pytorch, pytest.mark.slow]

SCRIPT = ROOT / "cluster" / "local-cluster.sh"
BASE = ["run", "--level", "distributed", "--framework", "pytorch", "--quick", "--world-size", "2",
        "--scheduler", "slurm", "--site", "local"]  # fmt: skip


@pytest.fixture(scope="session")
def cluster() -> Iterator[dict[str, str]]:
    """A local cluster of its own (directory, ports, munge key), so that a developer's
    `make cluster-up` and test sessions running at the same time never meet; stopped at the
    end. A missing slurm-wlm/munge fails here, naming what to install."""
    cluster_dir = tempfile.mkdtemp(prefix="dlsuite-slurm-test-", dir="/tmp")
    os.chmod(cluster_dir, 0o755)  # munged runs as user munge and must reach its socket
    env = {**os.environ, "DLSUITE_CLUSTER_DIR": cluster_dir, "DLSUITE_CLUSTER_NODES": "2",
           "DLSUITE_CLUSTER_PORT": str(free_port_run(3)), "DLSUITE_CLUSTER_LINK": "0"}  # fmt: skip
    up = subprocess.run(
        ["bash", str(SCRIPT), "up"], env=env, capture_output=True, text=True, timeout=180
    )
    try:
        if up.returncode != 0:
            pytest.fail(f"the local Slurm cluster did not come up:\n{up.stdout}\n{up.stderr}")
        yield {"SLURM_CONF": f"{cluster_dir}/slurm.conf", "DLSUITE_SLURM_POLL_S": "1"}
    finally:
        subprocess.run(["bash", str(SCRIPT), "down"], env=env, capture_output=True, timeout=120)
        shutil.rmtree(cluster_dir, ignore_errors=True)


def slurm(*argv: str, env: dict[str, str]) -> str:
    out = subprocess.run(list(argv), capture_output=True, text=True, timeout=60,
                         env={**os.environ, **env})  # fmt: skip
    assert out.returncode == 0, out.stderr
    return out.stdout


def jobs(run_dir: Path) -> list[dict[str, Any]]:
    doc: dict[str, Any] = json.loads((run_dir / "slurm" / "jobs.json").read_text())
    return list(doc["submissions"])


def _default_sigint() -> None:
    # Ctrl-C reaches a command in a terminal with SIGINT's default action. A test run started
    # in the background by a shell without job control (`cmd &` in a script) ignores SIGINT,
    # and the children inherit that, so the interrupt below would go unheard: restore it.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start(args: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "suite", *args],
        preexec_fn=_default_sigint,  # noqa: PLW1509 - a test helper, no threads fork here
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},
    )


def wait_for(what: str, check: Any, timeout: float = 180) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def test_distributed_run_over_two_nodes(cluster: dict[str, str], tmp_path: Path) -> None:
    run_dir = tmp_path / "slurm run"  # a space in the run directory, through #SBATCH lines too
    # two tasks in one array element: one worker session (per rank, started by srun on each
    # node) runs both, keeping its process group
    proc = cli(*BASE, "--nodes", "2", "--benchmark", "allreduce,broadcast", "--tasks-per-job",
               "2", "--out", str(run_dir), env=cluster, timeout=400)  # fmt: skip
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert "submitted job" in proc.stderr
    recs = records(run_dir)
    assert len(recs) == 10 and {r["status"] for r in recs} == {"ok"}
    workers = {r["benchmark"]["name"]: r["worker"] for r in recs}
    assert workers["allreduce"]["session_id"] == workers["broadcast"]["session_id"]
    assert workers["allreduce"]["pid"] == workers["broadcast"]["pid"]
    assert {workers["allreduce"]["position"], workers["broadcast"]["position"]} == {0, 1}
    (sub,) = jobs(run_dir)
    for r in recs:
        validate_record(r)
        s = r["scheduler"]
        assert s["kind"] == "slurm" and s["array_job_id"] == sub["job_id"]
        assert s["array_task_id"] == 0 and s["job_id"].isdigit()
        assert s["nodelist"] == "node[1-2]" and s["partition"] == "debug"
        assert r["distributed"]["launcher"] == "srun" and r["world_size"] == 2
        assert r["correctness"]["passed"]
    assert sub["finished"] and sub["states"] == {"0": "COMPLETED"}
    script = (run_dir / "slurm" / "s1" / "job.sbatch").read_text()
    assert "#SBATCH --nodes=2\n" in script and "#SBATCH --ntasks-per-node=1\n" in script
    out = (run_dir / "slurm" / "s1" / f"slurm-{sub['job_id']}_0.out").read_text()
    assert "element 0 finished: 10 record(s), ok=10" in out
    assert cli("validate", str(run_dir)).returncode == 0
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["state"] == "finished" and {r["run_id"] for r in recs} == {manifest["run_id"]}
    # the report says where the records ran: the cluster, partition, job and nodes
    assert cli("report", str(run_dir), "--format", "md").returncode == 0
    md = (run_dir / "report.md").read_text()
    assert "| scheduler | slurm (cluster dlsuite-local, partition debug) |" in md
    assert f"| Slurm jobs | {sub['job_id']} |" in md and "| Slurm nodes | node[1-2] |" in md


def test_scancel_is_reported_and_resume_completes_the_rest(
    cluster: dict[str, str], tmp_path: Path
) -> None:
    run_dir = tmp_path / "run"
    args = [*BASE, "--benchmark", "allreduce,allgather,broadcast", "--out", str(run_dir)]
    proc = start(args, cluster)
    # the first element's records reach results.jsonl while the job runs; then kill the job
    wait_for("the first task's records", lambda: (run_dir / "results.jsonl").exists()
             and (run_dir / "results.jsonl").stat().st_size > 0)  # fmt: skip
    job_id = jobs(run_dir)[0]["job_id"]
    slurm("scancel", job_id, env=cluster)
    stdout, stderr = proc.communicate(timeout=180)
    assert proc.returncode == 1, stderr + stdout
    first = records(run_dir)
    done = {r["task_id"] for r in first if r["status"] == "ok"}
    failed = [r for r in first if r["status"] == "failed"]
    assert len(done) == 1 and len(failed) == 2, Counter(r["status"] for r in first)
    for r in failed:
        validate_record(r)
        assert r["error"]["type"] == "SlurmJobEnded"
        assert f"Slurm job {job_id}_" in r["reason"] and "CANCELLED" in r["reason"]
        assert r["scheduler"]["array_job_id"] == job_id and r["scheduler"]["state"] == "CANCELLED"
        assert "--resume" in r["reason"]

    proc2 = cli(*args, "--resume", env=cluster, timeout=300)
    assert proc2.returncode == 0, proc2.stderr + proc2.stdout
    assert "resume: 1 of 3 tasks are complete" in proc2.stderr
    final = records(run_dir)
    assert {r["status"] for r in final} == {"ok"}
    per_task = Counter(r["task_id"] for r in final)
    assert len(per_task) == 3 and set(per_task.values()) == {5}  # nothing repeated or lost
    subs = jobs(run_dir)
    assert len(subs) == 2 and subs[1]["job_id"] != job_id
    assert sorted(t for e in subs[1]["elements"] for t in e) == sorted(
        {r["task_id"] for r in failed}
    )
    assert done.isdisjoint(t for e in subs[1]["elements"] for t in e)  # not resubmitted
    superseded = records_at(run_dir / "superseded.jsonl")
    assert len(superseded) == 2 and {r["error"]["type"] for r in superseded} == {"SlurmJobEnded"}
    for r in final:
        if r["task_id"] in {f["task_id"] for f in failed}:
            assert r["retry"] == {
                "attempt": 2, "previous_status": "failed",
                "previous_reason": next(f["reason"] for f in failed if f["task_id"] == r["task_id"]),
            }  # fmt: skip
        else:
            assert "retry" not in r
    assert {r["scheduler"]["array_job_id"] for r in final} == {job_id, subs[1]["job_id"]}


def test_resume_submits_a_cancelled_sweep_for_the_sizes_it_had_left(
    cluster: dict[str, str], tmp_path: Path
) -> None:
    """scancel while an element's sweep runs: its runner keeps the sizes measured (SIGTERM,
    then KillWait) and one failed record for the rest; --resume submitted the whole sweep
    again (a sweep that ran out of its time limit ran out again), now only the sizes left,
    the kept ones staying as they were."""
    run_dir = tmp_path / "run"
    config = tmp_path / "sweep.toml"
    config.write_text(
        "[measure]\ntime_budget_s = 2.0\n"
        "[distributed.allgather]\nsizes = [{sizes = [48, 6000, 100000]}]\n"
    )
    args = [*BASE[:5], *BASE[6:], "--benchmark", "allgather", "--config", str(config),
            "--out", str(run_dir), "--no-history"]  # fmt: skip
    assert "--quick" not in args
    proc = start(args, cluster)

    def measured() -> bool:
        points = [list(run_dir.glob(f"slurm/s1/part-0/tasks/*.points.rank{r}")) for r in (0, 1)]
        return all(p and p[0].read_text().strip() for p in points)

    wait_for("the sweep's first size", measured, timeout=240)
    job_id = jobs(run_dir)[0]["job_id"]
    slurm("scancel", job_id, env=cluster)
    stdout, stderr = proc.communicate(timeout=180)
    assert proc.returncode == 1, stderr + stdout
    first = records(run_dir)
    kept = [r for r in first if r["status"] == "ok"]
    (rest,) = [r for r in first if r["status"] != "ok"]
    assert kept and rest["error"]["type"] == "Interrupted", [r.get("reason") for r in first]
    left = rest["benchmark"]["params"]["sizes"]
    assert [r["benchmark"]["params"]["requested_bytes"] for r in kept] + left == [48, 6000, 100000]

    proc2 = cli(*args, "--resume", env=cluster, timeout=400)
    assert proc2.returncode == 0, proc2.stderr + proc2.stdout
    assert "1 sweep(s) only for the points they had left" in " ".join(proc2.stderr.split())
    plan = json.loads((run_dir / "slurm" / "s2" / "plan.json").read_text())
    (element,) = plan["elements"]
    assert element[0]["resume_params"] == {"sizes": left}  # only the sizes left were submitted
    final = records(run_dir)
    assert [r["benchmark"]["params"]["requested_bytes"] for r in final] == [48, 6000, 100000]
    assert {r["status"] for r in final} == {"ok"}
    assert final[: len(kept)] == kept  # the kept sizes stay as they were
    new = final[len(kept) :]
    assert {r["scheduler"]["array_job_id"] for r in new} == {jobs(run_dir)[1]["job_id"]}
    assert {(r["retry"]["attempt"], r["retry"]["previous_status"]) for r in new} == {(2, "failed")}
    (moved,) = records_at(run_dir / "superseded.jsonl")
    assert moved["error"]["type"] == "Interrupted"
    assert cli("validate", str(run_dir)).returncode == 0


def test_ctrl_c_cancels_the_job(cluster: dict[str, str], tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    proc = start([*BASE, "--benchmark", "allreduce", "--out", str(run_dir)], cluster)
    wait_for("the job to start", lambda: (run_dir / "slurm" / "jobs.json").exists()
             and jobs(run_dir)[0]["job_id"])  # fmt: skip
    job_id = jobs(run_dir)[0]["job_id"]
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr
    assert f"cancelled job(s) {job_id}" in stderr and "--resume" in stderr
    queue = wait_for(
        "the job to leave the queue",
        lambda: (
            slurm("squeue", "--noheader", f"--jobs={job_id}", env=cluster).strip() == "" or None
        ),
    )
    assert queue
    assert json.loads((run_dir / "manifest.json").read_text())["state"] == "interrupted"


def test_dry_run_submits_nothing(cluster: dict[str, str], tmp_path: Path) -> None:
    before = slurm("squeue", "--noheader", "--all", env=cluster)
    last = slurm("scontrol", "--oneliner", "show", "jobs", env=cluster).count("JobId=")
    proc = cli(*BASE, "--benchmark", "allreduce,allgather", "--dry-run", "--out",
               str(tmp_path / "run"), env=cluster)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "#SBATCH --array=0-1%1" in proc.stdout and "nothing submitted" in proc.stdout
    assert not (tmp_path / "run").exists()
    assert slurm("squeue", "--noheader", "--all", env=cluster) == before
    assert slurm("scontrol", "--oneliner", "show", "jobs", env=cluster).count("JobId=") == last


ARRAY_SITE = """\
# a 200-task array: 20 tasks per element, 4 elements at once (2 per node)
scheduler = "slurm"
launcher = "srun"
backend = "local"
partition = "debug"
array_parallelism = 4
tasks_per_job = 20
poll_interval_s = 1

[partitions.debug]
nodes = 2
gpus_per_node = 0
"""


@pytest.mark.numpy
def test_a_200_task_array_loses_nothing_and_resume_runs_exactly_the_rest(
    cluster: dict[str, str], tmp_path: Path
) -> None:
    """200 tasks (NumPy GEMMs at 200 sizes, each measured briefly and checked) in 10 array
    elements; the array is cancelled with half the records in; --resume submits exactly the
    tasks without an ok record. Every task ends with one ok, correct record, none ran twice,
    squeue was called once per poll, and the host's CPU time stays bounded (merging included:
    it grew with the records already merged before each part was read only once). The
    1,000-task version is benchmarks/studies/slurm_array.py (docs/guide/clusters.md). About 50 s."""
    n = 200
    sizes = ", ".join(f"{{m = {m}, n = 4, k = 4}}" for m in range(1, n + 1))
    config = tmp_path / "gemm.toml"
    config.write_text(
        "[measure]\ntime_budget_s = 0.005\nwarmup_s = 0.0\nwarmup_iters = 1\nmin_samples = 3\n"
        f"min_sample_s = 0.0001\ntarget_ci_rel = 1.0\n\n[operator.gemm]\nsizes = [{sizes}]\n"
    )
    site = tmp_path / "array.toml"
    site.write_text(ARRAY_SITE)
    run_dir = tmp_path / "run"
    args = ["run", "--framework", "numpy", "--backend", "local", "--benchmark", "gemm",
            "--dtype", "fp32", "--config", str(config), "--site", str(site), "--no-history",
            "--out", str(run_dir)]  # fmt: skip
    proc = start(args, cluster)
    wait_for("half the records", lambda: (run_dir / "results.jsonl").exists()
             and len((run_dir / "results.jsonl").read_bytes().splitlines()) >= n // 2)  # fmt: skip
    (first_sub,) = jobs(run_dir)
    slurm("scancel", first_sub["job_id"], env=cluster)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 1, stderr[-3000:]
    first = records(run_dir)
    assert len(first) == n and len({r["task_id"] for r in first}) == n  # ok or a placeholder
    missing = {r["task_id"] for r in first if r["status"] != "ok"}
    assert 0 < len(missing) < n, Counter(r["status"] for r in first)

    proc2 = cli(*args, "--resume", env=cluster, timeout=300)
    assert proc2.returncode == 0, proc2.stderr[-3000:]
    assert f"resume: {n - len(missing)} of {n} tasks are complete" in proc2.stderr
    subs = jobs(run_dir)
    assert len(subs) == 2 and len(subs[0]["elements"]) == 10
    assert {t for e in subs[1]["elements"] for t in e} == missing  # exactly the rest
    final = records(run_dir)
    per_task = Counter(r["task_id"] for r in final)
    assert len(per_task) == n and set(per_task.values()) == {1}  # 0 lost, 0 duplicated
    assert all(r["status"] == "ok" and r["correctness"]["passed"] for r in final)
    parts = [r for p in (run_dir / "slurm").glob("s*/part-*/results.jsonl") for r in records_at(p)]
    ran = Counter(r["task_id"] for r in parts if r["status"] == "ok")
    assert set(ran.values()) == {1}, "a task with an ok record ran again"
    assert cli("validate", str(run_dir)).returncode == 0

    clocks = records_at(run_dir / "slurm" / "host.jsonl")
    assert len(clocks) == 2
    for c in clocks:
        assert c["commands"]["squeue"] == c["counts"]["polls"]  # one squeue per poll
        assert c["counts"]["polls"] <= c["elapsed_s"] / c["poll_interval_s"] + 2
    cpu = sum(c["busy"]["cpu_s"] + c["busy"]["children_cpu_s"] for c in clocks)
    merge = sum(c["phases"]["merge"]["cpu_s"] for c in clocks)
    wall = sum(c["busy"]["wall_s"] for c in clocks)
    figures = f"host per task: {1e3 * wall / n:.1f} ms wall, {1e3 * cpu / n:.1f} ms CPU"
    assert cpu / n < 0.050, figures
    assert merge / n < 0.008, f"merging {1e3 * merge / n:.1f} ms CPU per task; {figures}"


def test_training_loader_ranks_under_srun(cluster: dict[str, str], tmp_path: Path) -> None:
    """The training level's loader on 2 ranks over the cluster's 2 nodes, started by srun:
    each rank reads its DistributedSampler shard, rank 0 checks the union exactly once."""
    conf = tmp_path / "c.toml"
    conf.write_text('[training.loader]\nsizes = [{format = "folder", workers = 1, batch = 16, '
                    'cache = "warm", images = 96, classes = 6}]\n')  # fmt: skip
    run_dir = tmp_path / "run"
    proc = cli("run", "--site", "local", "--level", "training", "--framework", "pytorch",
               "--benchmark", "loader", "--config", str(conf), "--world-size", "2", "--nodes",
               "2", "--data-dir", str(tmp_path / "data"), "--out", str(run_dir),
               env=cluster, timeout=400)  # fmt: skip
    assert proc.returncode == 0, proc.stderr + proc.stdout
    (rec,) = records(run_dir)
    assert rec["status"] == "ok" and rec["correctness"]["passed"]
    assert rec["distributed"]["launcher"] == "srun" and rec["scheduler"]["kind"] == "slurm"
    names = {c["name"] for c in rec["correctness"]["checks"]}
    assert "rank0.exactly_once_across_ranks" in names
    assert set(rec["pipeline"]["ranks"]["per_rank_rate"]) == {"0", "1"}


GEMM_SITE = """\
scheduler = "slurm"
launcher = "srun"
backend = "local"
partition = "{partition}"
poll_interval_s = 1
{extra}
[partitions.{partition}]
nodes = 1
gpus_per_node = 0
{partition_extra}
"""
GEMM = ["run", "--level", "operator", "--quick", "--framework", "numpy", "--backend", "local",
        "--benchmark", "gemm", "--dtype", "fp32", "--no-history"]  # fmt: skip


def one_error_line(stderr: str) -> str:
    (line,) = [x for x in stderr.splitlines() if x.startswith("dlsuite: error:")]
    return line


@pytest.mark.numpy
@pytest.mark.parametrize(
    ("limit", "extra", "partition_extra", "field"),
    [
        # the partition admits accounts the site profile does not use (sbatch accepts the job;
        # without a database slurmctld says so in words, with one: AccountNotAllowed)
        ("AllowAccounts=proj-ml", 'account = "proj-other"', "", "account = 'proj-other'"),
        # the site believes in a longer time limit than the partition has: PartitionTimeLimit
        ("MaxTime=00:05:00", "", 'max_time = "02:00:00"\ndefault_time = "00:30:00"',
         "partitions.debug.max_time = '02:00:00'"),
    ],
)  # fmt: skip
def test_a_job_that_would_never_start_stops_naming_the_field(
    cluster: dict[str, str],
    tmp_path: Path,
    limit: str,
    extra: str,
    partition_extra: str,
    field: str,
) -> None:
    """Slurm keeps a job whose request the partition refuses pending for ever (PENDING with
    PartitionTimeLimit, an account the partition does not allow...); the host used to poll it
    for ever. Now it cancels the job, exits 2 with one line naming the site field, and, once
    the profile is right, --resume runs the task."""
    site = tmp_path / "site.toml"
    site.write_text(
        GEMM_SITE.format(partition="debug", extra=extra, partition_extra=partition_extra)
    )
    run_dir = tmp_path / "run"
    args = [*GEMM, "--site", str(site), "--out", str(run_dir)]
    slurm("scontrol", "update", "PartitionName=debug", limit, env=cluster)
    try:
        proc = cli(*args, env=cluster, timeout=120)
    finally:
        reset = "AllowAccounts=ALL" if limit.startswith("Allow") else "MaxTime=INFINITE"
        slurm("scontrol", "update", "PartitionName=debug", reset, env=cluster)
    assert proc.returncode == 2, proc.stderr + proc.stdout
    line = one_error_line(proc.stderr)
    assert f"site {site}: {field}: Slurm job" in line and "would never start" in line, line
    assert "dlsuite cancelled it" in line and "--resume" in line
    (sub,) = jobs(run_dir)
    assert sub["finished"] and "never starts" in sub["states"]["*"]
    assert slurm("squeue", "--noheader", f"--jobs={sub['job_id']}", env=cluster).strip() == ""
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["state"] == "stopped" and manifest["stop_reason"] in line

    rec = _fixed_and_resumed(site, args, cluster, run_dir)
    assert rec["status"] == "ok" and rec["scheduler"]["array_job_id"] == jobs(run_dir)[1]["job_id"]


def _fixed_and_resumed(
    site: Path, args: list[str], cluster: dict[str, str], run_dir: Path
) -> dict[str, Any]:
    """The site profile put right (partition debug, no extras), the run resumed: its one
    record."""
    site.write_text(GEMM_SITE.format(partition="debug", extra="", partition_extra=""))
    again = cli(*args, "--resume", env=cluster, timeout=180)
    assert again.returncode == 0, again.stderr + again.stdout
    (rec,) = records(run_dir)
    return rec


@pytest.mark.numpy
def test_sbatch_refusing_the_partition_names_the_field_and_resume_continues(
    cluster: dict[str, str], tmp_path: Path
) -> None:
    site = tmp_path / "site.toml"
    site.write_text(GEMM_SITE.format(partition="gpu", extra="", partition_extra=""))
    run_dir = tmp_path / "run"
    args = [*GEMM, "--site", str(site), "--out", str(run_dir)]
    proc = cli(*args, env=cluster, timeout=120)
    assert proc.returncode == 2, proc.stderr + proc.stdout
    line = one_error_line(proc.stderr)
    assert f"site {site}: partition = 'gpu': sbatch refused the job" in line, line
    assert "Invalid partition name" in line and "TotalNodes" not in line
    (sub,) = jobs(run_dir)
    assert (
        sub["finished"] and sub["job_id"] is None and sub["states"] == {"*": "REFUSED (by sbatch)"}
    )
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["state"] == "stopped" and manifest["stop_reason"] in line

    rec = _fixed_and_resumed(site, args, cluster, run_dir)
    assert rec["status"] == "ok" and rec["scheduler"]["partition"] == "debug"


@pytest.mark.numpy
def test_ctrl_c_after_the_output_went_away_still_marks_the_run_interrupted(
    cluster: dict[str, str], tmp_path: Path
) -> None:
    """`dlsuite run ... 2>&1 | tee log` and Ctrl-C: tee ends with it, so writing to the output
    fails. The run used to lose its state that way (manifest left `running`, exit 1); the job
    is cancelled, the manifest says interrupted and the exit code is 130."""
    site = tmp_path / "site.toml"
    site.write_text(GEMM_SITE.format(partition="debug", extra="", partition_extra=""))
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "suite", *GEMM, "--site", str(site), "--out", str(run_dir)],
        preexec_fn=_default_sigint,  # noqa: PLW1509 - a test helper, no threads fork here
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), **cluster},
    )
    wait_for("the job to be submitted", lambda: (run_dir / "slurm" / "jobs.json").exists()
             and jobs(run_dir)[0]["job_id"])  # fmt: skip
    assert proc.stdout is not None
    proc.stdout.close()  # the tee is gone
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=120) == 130
    assert json.loads((run_dir / "manifest.json").read_text())["state"] == "interrupted"
    (sub,) = jobs(run_dir)
    assert sub["finished"] and sub["states"] == {"*": "CANCELLED (by dlsuite: interrupted)"}
