"""The Slurm scheduler at scale, without a cluster: what the host does per poll does not grow
with what it already merged (each part's records are read and validated once), one ``squeue``
answers for every array in the queue with its pending elements on one line, arrays are never
larger than Slurm's MaxArraySize, and the host clock charges each moment to one phase.

The same paths run against a real cluster in tests/integration/test_slurm.py (a 200-task
array) and benchmarks/studies/slurm_array.py (1,000 tasks, docs/guide/clusters.md)."""

from __future__ import annotations

import io
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from suite.config import resolve
from suite.errors import SchedulerError
from suite.plan import Task, build
from suite.results import read_records
from suite.rundir import write_text_atomic
from suite.schedulers.hostclock import HostClock, process_started_ago
from suite.schedulers.slurm import (
    JobsFile,
    SlurmScheduler,
    Submission,
    group_tasks,
    parse_array_size,
    parse_squeue,
    queue_summary,
)

SIZES = ", ".join(f"{{m = {m}, n = 4, k = 4}}" for m in range(1, 13))


@pytest.fixture
def setup(tmp_path: Path) -> tuple[SlurmScheduler, list[Task], Path]:
    config = tmp_path / "c.toml"
    config.write_text(f"[operator.gemm]\nsizes = [{SIZES}]\n")
    cfg = resolve(
        {"level": ["operator"], "frameworks": ["numpy"], "benchmarks": ["gemm"],
         "dtypes": ["fp32"], "config": str(config), "scheduler": "slurm", "site": "local",
         "out": str(tmp_path / "run")},
        env={},
    )  # fmt: skip
    tasks = build(cfg)
    assert len(tasks) == 12
    run_dir = tmp_path / "run"
    (run_dir / "slurm").mkdir(parents=True)
    return SlurmScheduler(cfg), tasks, run_dir


class Results:
    """The host's results.jsonl, counting what is appended and how often."""

    def __init__(self, path: Path) -> None:
        from suite.results import ResultsFile

        self.file = ResultsFile(path)
        self.path = path
        self.writes = 0

    def append_many(self, records: list[dict[str, Any]], *, validate: bool = True) -> None:
        self.writes += 1
        self.file.append_many(records, validate=validate)


def record(s: SlurmScheduler, sub: Submission, task: Task, run_dir: Path) -> dict[str, Any]:
    """A valid record of ``task`` (a placeholder: its shape is all that matters here)."""
    return s.placeholder(task, "run1", sub, 0, None, "CANCELLED", run_dir)


def line(rec: dict[str, Any]) -> str:
    return json.dumps(rec, sort_keys=True) + "\n"


def ids(path: Path) -> list[str]:
    return [r["task_id"] for r in read_records(path)]


def start(s: SlurmScheduler, run_dir: Path, elements: int) -> tuple[Submission, Results]:
    s.begin(run_dir / "results.jsonl")
    sub = Submission("s1", "7", [[] for _ in range(elements)], "now")
    for i in range(elements):
        sub.part(run_dir, i).mkdir(parents=True)
    return sub, Results(run_dir / "results.jsonl")


def test_each_part_is_read_once_and_torn_lines_wait(
    setup: tuple[SlurmScheduler, list[Task], Path],
) -> None:
    s, tasks, run_dir = setup
    sub, results = start(s, run_dir, 2)
    part0 = sub.part(run_dir, 0) / "results.jsonl"
    part1 = sub.part(run_dir, 1) / "results.jsonl"
    recs = [record(s, sub, t, run_dir) for t in tasks]
    part0.write_text("".join(line(r) for r in recs[:3]))
    assert s.collect(run_dir, sub, results) == 3
    assert s.cursor(sub, 0) == part0.stat().st_size  # all of it consumed
    assert results.writes == 1  # one write (and one fsync) per collection, not per record
    # the next poll: nothing new, nothing parsed or written
    assert s.collect(run_dir, sub, results) == 0 and results.writes == 1
    # a record being written (no newline yet) waits for its end
    torn = line(recs[3])
    with part0.open("a") as fh:
        fh.write(torn[:40])
    part1.write_text(line(recs[4]))
    assert s.collect(run_dir, sub, results) == 1
    assert s.cursor(sub, 0) == part0.stat().st_size - 40
    with part0.open("a") as fh:
        fh.write(torn[40:])
    assert s.collect(run_dir, sub, results) == 1
    assert ids(results.path) == [t.task_id for t in tasks[:3]] + [
        tasks[4].task_id,
        tasks[3].task_id,
    ]
    assert s.have == {t.task_id for t in tasks[:5]}


def test_a_replaced_part_is_read_again_without_duplicates(
    setup: tuple[SlurmScheduler, list[Task], Path],
) -> None:
    s, tasks, run_dir = setup
    sub, results = start(s, run_dir, 1)
    part = sub.part(run_dir, 0) / "results.jsonl"
    recs = [record(s, sub, t, run_dir) for t in tasks]
    part.write_text("".join(line(r) for r in recs[:4]))
    assert s.collect(run_dir, sub, results) == 4
    # a requeued element's runner moves records out of its part (a new file, shorter)
    write_text_atomic(part, line(recs[0]) + line(recs[5]))
    assert s.collect(run_dir, sub, results) == 1
    # or cuts a partial last line off in place (the same file, shorter)
    with part.open("a") as fh:
        fh.write(line(recs[6]) + line(recs[7])[:30])
    assert s.collect(run_dir, sub, results) == 1
    os.truncate(part, part.stat().st_size - 30)
    with part.open("a") as fh:
        fh.write(line(recs[8]))
    assert s.collect(run_dir, sub, results) == 1
    merged = ids(results.path)
    assert sorted(merged) == sorted(t.task_id for t in tasks[:4] + [tasks[5], tasks[6], tasks[8]])
    assert len(merged) == len(set(merged))


def test_bad_lines_are_skipped_and_a_bad_last_line_is_read_again(
    setup: tuple[SlurmScheduler, list[Task], Path],
) -> None:
    s, tasks, run_dir = setup
    sub, results = start(s, run_dir, 1)
    part = sub.part(run_dir, 0) / "results.jsonl"
    recs = [record(s, sub, t, run_dir) for t in tasks]
    invalid = {**recs[1], "status": "exploded"}  # JSON, but not a record
    part.write_text(line(recs[0]) + "{not json\n" + line(invalid) + line(recs[2]) + "{nor this\n")
    assert s.collect(run_dir, sub, results) == 2
    assert ids(results.path) == [tasks[0].task_id, tasks[2].task_id]
    # consumed up to the last good line: a bad last line is looked at again (a runner's
    # repair may still replace it), the bad lines before a good one are not
    assert s.cursor(sub, 0) == part.stat().st_size - len("{nor this\n")


def test_merging_cost_does_not_grow_with_what_was_merged(
    setup: tuple[SlurmScheduler, list[Task], Path],
) -> None:
    """1,000 records in 100 parts: the first collection reads them all; a poll after that,
    with nothing new, costs a stat per part (well under a millisecond per part), not a parse
    and a validation of every record as before."""
    s, tasks, run_dir = setup
    sub, results = start(s, run_dir, 100)
    base = record(s, sub, tasks[0], run_dir)
    for i in range(100):
        recs = [{**base, "task_id": f"{base['task_id']}-{i}-{j}"} for j in range(10)]
        (sub.part(run_dir, i) / "results.jsonl").write_text("".join(line(r) for r in recs))
    assert s.collect(run_dir, sub, results) == 1000
    t0 = time.process_time()
    for _ in range(20):
        assert s.collect(run_dir, sub, results) == 0
    per_poll = (time.process_time() - t0) / 20
    assert per_poll < 0.05, f"{per_poll * 1e3:.1f} ms per poll of 100 unchanged parts"
    assert len(s.have) == 1000 and results.writes == 1


def test_one_squeue_for_every_array_pending_on_one_line() -> None:
    # squeue --format=%F|%A|%K|%T|%N|%r of two arrays: running elements one line each, the
    # pending rest of an array one line with its range and throttle
    text = (
        "41|41|28-99%4|PENDING||JobArrayTaskLimit\n"
        "41|69|27|RUNNING|node2|None\n"
        "41|68|26|RUNNING|node1|None\n"
        "90|90|3,5-6|PENDING||Priority\n"
        "garbage line\n"
    )
    q = parse_squeue(text, ["41", "90", "12"])
    assert sorted(q) == ["12", "41", "90"] and q["12"] == []
    assert len(q["41"]) == 72 + 2 and len(q["90"]) == 3
    pending = [st for st in q["41"] if st.state == "PENDING"]
    assert [st.array_task_id for st in pending] == list(range(28, 100))
    assert {st.reason for st in pending} == {"JobArrayTaskLimit"}
    running = {st.array_task_id: st for st in q["41"] if st.state == "RUNNING"}
    assert running[27].job_id == "69" and running[27].nodelist == "node2"
    assert running[27].reason is None
    assert [st.array_task_id for st in q["90"]] == [3, 5, 6]


def test_arrays_stay_within_slurms_max_array_size(
    setup: tuple[SlurmScheduler, list[Task], Path],
) -> None:
    _, tasks, _ = setup
    assert len(group_tasks(tasks, 1)) == 12
    capped = group_tasks(tasks, 1, max_elements=5)  # 12 groups: 3 per element, 4 elements
    assert len(capped) == 4 and {len(e) for e in capped} == {3}
    assert [t.task_id for e in capped for t in e] == [t.task_id for t in tasks]
    assert len(group_tasks(tasks, 4, max_elements=5)) == 3  # already within: unchanged
    assert (
        parse_array_size("AccountingStorageHost   = (null)\nMaxArraySize            = 40001\n")
        == 40001
    )
    assert parse_array_size("nothing here") == 1001  # Slurm's default


def test_host_clock_charges_each_moment_to_one_phase() -> None:
    clock = HostClock()
    with clock.phase("merge"):
        time.sleep(0.05)
        with clock.command("squeue"):
            time.sleep(0.05)
    with clock.phase("sleep"):
        time.sleep(0.1)
    doc = clock.to_dict()
    p = doc["phases"]
    assert 0.045 <= p["merge"]["wall_s"] < 0.09  # the nested command's time is not in it
    assert 0.045 <= p["squeue"]["wall_s"] < 0.09
    assert doc["commands"] == {"squeue": 1} and doc["command_wall_s"]["squeue"] >= 0.045
    assert 0.095 <= p["sleep"]["wall_s"]
    total = sum(v["wall_s"] for v in p.values())
    assert abs(total - doc["elapsed_s"]) < 0.01  # every moment charged, none twice
    assert doc["busy"]["wall_s"] == pytest.approx(
        doc["before"]["wall_s"] + total - p["sleep"]["wall_s"], abs=1e-5
    )
    ago = process_started_ago()
    assert ago is not None and ago > 0 and doc["before"]["cpu_s"] > 0


def test_a_dry_run_of_more_tasks_than_slurm_takes_packs_them(tmp_path: Path) -> None:
    sizes = ", ".join(f"{{m = {m}, n = 4, k = 4}}" for m in range(1, 1502))
    config = tmp_path / "c.toml"
    config.write_text(f"[operator.gemm]\nsizes = [{sizes}]\n")
    cfg = resolve(
        {"level": ["operator"], "frameworks": ["numpy"], "benchmarks": ["gemm"],
         "dtypes": ["fp32"], "config": str(config), "scheduler": "slurm", "site": "local",
         "out": str(tmp_path / "run")},
        env={},
    )  # fmt: skip
    tasks = build(cfg)
    assert len(tasks) == 1501  # one task per element (the local site), 1,501 > MaxArraySize
    text = "\n".join(SlurmScheduler(cfg).describe(tasks))
    assert "#SBATCH --array=0-750%1\n" in text + "\n"  # 2 tasks per element (751 elements)
    assert "1501 task(s) in an array of 751 element(s)" in text


@pytest.mark.parametrize(
    ("state", "status"),
    [("OUT_OF_MEMORY", "oom"), ("CANCELLED by 0", "failed"), ("PREEMPTED", "failed"),
     ("TIMEOUT", "timeout"), ("NODE_FAIL", "failed")],
)  # fmt: skip
def test_slurms_out_of_memory_is_oom_with_its_evidence_and_other_kills_are_not(
    setup: tuple[SlurmScheduler, list[Task], Path], state: str, status: str
) -> None:
    """A job that left no record: Slurm's own word for memory is evidence, as Docker's
    OOMKilled and a worker cgroup's oom_kill count are (suite/oom.py); a job killed otherwise
    (scancel, preemption, a node failure) is failed."""
    from suite.results import validate_record
    from suite.schedulers.slurm import JobState

    s, tasks, run_dir = setup
    sub, _ = start(s, run_dir, 1)
    st = JobState("7_0", 0, state, nodelist="localhost", batch_host="localhost")
    rec = s.placeholder(tasks[0], "run1", sub, 0, st, state, run_dir)
    validate_record(rec)
    assert rec["status"] == status and state in rec["reason"]
    if status == "oom":
        assert rec["error"]["evidence"] == f"Slurm: job 7_0 ended in state {state}"
    else:
        assert "evidence" not in rec["error"]


def test_a_timed_out_element_names_the_field_its_time_limit_came_from(tmp_path: Path) -> None:
    """A TIMEOUT placeholder used to say only that --resume reruns the task, which with the
    same profile runs out of time again; it names the time limit and the field to raise."""
    from suite.results import validate_record
    from suite.schedulers.slurm import JobState, final_states_from

    site = tmp_path / "short.toml"
    site.write_text(
        'scheduler = "slurm"\npartition = "debug"\n[partitions.debug]\nnodes = 1\n'
        'default_time = "1"\n'
    )
    cfg = resolve(
        {"level": ["operator"], "frameworks": ["numpy"], "benchmarks": ["gemm"],
         "dtypes": ["fp32"], "quick": True, "scheduler": "slurm", "site": str(site),
         "out": str(tmp_path / "run")},
        env={},
    )  # fmt: skip
    s, tasks, run_dir = SlurmScheduler(cfg), build(cfg), tmp_path / "run"
    (run_dir / "slurm").mkdir(parents=True)
    sub, _ = start(s, run_dir, 1)
    # scontrol --oneliner show job of an element Slurm stopped at its limit (Slurm 22.05)
    line = ("JobId=27 ArrayJobId=27 ArrayTaskId=0 JobName=dlsuite-tmo JobState=TIMEOUT "
            "Reason=TimeLimit Dependency=(null) RunTime=00:01:21 TimeLimit=00:01:00 "
            "NodeList=node1 BatchHost=node1 ExitCode=0:0")  # fmt: skip
    st = final_states_from(line, "27")[0]
    assert isinstance(st, JobState) and st.time_limit == "00:01:00"
    rec = s.placeholder(tasks[0], "run1", sub, 0, st, st.state, run_dir)
    validate_record(rec)
    assert rec["status"] == "timeout"
    assert "ran out of its time limit of 00:01:00 (state TIMEOUT)" in rec["reason"]
    assert f"raise partitions.debug.default_time (now '1') in site {site}" in rec["reason"]
    assert rec["reason"].endswith("then dlsuite run --resume reruns it")


def test_the_progress_line_says_why_elements_wait() -> None:
    # squeue's answers on the local cluster: a 2-node array with node2 drained, then an
    # element requeued after its node failed; the progress line said "2 pending" for minutes
    drained = "34|34|0-2%1|PENDING||Nodes required for job are DOWN, DRAINED or reserved for jobs in higher priority partitions\n"  # noqa: E501
    q = parse_squeue(drained, ["34"])["34"]
    assert queue_summary(q) == (
        "3 pending (Nodes required for job are DOWN, DRAINED or reserved for jobs in higher "
        "priority partitions)"
    )
    mixed = "20|21|0|PENDING||BeginTime\n20|22|1|RUNNING|node[1-2]|None\n20|20|2-3%1|PENDING||JobArrayTaskLimit\n"  # noqa: E501
    q = parse_squeue(mixed, ["20"])["20"]
    assert queue_summary(q) == "1 pending (BeginTime), 2 pending (JobArrayTaskLimit), 1 running"


def test_squeue_failing_stops_the_wait_with_the_jobs_left_to_resume(
    setup: tuple[SlurmScheduler, list[Task], Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """squeue that cannot reach slurmctld (a real squeue with a configuration it cannot read):
    the host asked once and stopped with "squeue failed: ...", leaving no hint that the jobs
    run on. It now asks again for squeue_patience_s, then stops naming the jobs, that they
    may still run, and the --resume that collects them; nothing is cancelled."""
    from rich.console import Console

    if shutil.which("squeue") is None:
        pytest.fail("squeue not found: apt-get install slurm-client (tests/system-deps.sh)")
    s, tasks, run_dir = setup
    sub, results = start(s, run_dir, 1)
    sub.elements = [[tasks[0].task_id]]
    # an empty configuration: squeue exits at once (a missing file: it retries for 60 s; a
    # controller that is down: 18 s per call)
    conf = tmp_path / "empty-slurm.conf"
    conf.write_text("")
    monkeypatch.setenv("SLURM_CONF", str(conf))
    s.poll_s, s.squeue_patience_s = 0.2, 0.5
    out = io.StringIO()
    jobs = JobsFile(run_dir / "slurm" / "jobs.json")
    t0 = time.monotonic()
    with pytest.raises(SchedulerError) as err:
        s.wait(run_dir, [sub], results, {t.task_id: t for t in tasks}, "run1", jobs,
               Console(file=out, width=400), 1)  # fmt: skip
    assert time.monotonic() - t0 >= 0.5  # asked again, not given up at the first failure
    message = str(err.value)
    assert message.startswith("squeue failed: ")
    assert "stopped waiting for Slurm job(s) 7, which may still be queued or running" in message
    assert f"dlsuite run --resume --out {run_dir}" in message and "scancel 7" in message
    assert out.getvalue().count("asking again every 0.2 s for up to 0.5 s") == 1
    assert not sub.finished and not (run_dir / "results.jsonl").exists()


def test_a_placeholder_points_to_the_elements_output_only_when_there_is_one(
    setup: tuple[SlurmScheduler, list[Task], Path],
) -> None:
    # the whole array scancelled while element 1 waited: the report's log column named
    # slurm/s1/slurm-7_1.out, which Slurm never wrote
    s, tasks, run_dir = setup
    sub, _ = start(s, run_dir, 2)
    out0 = sub.directory(run_dir) / "slurm-7_0.out"
    out0.write_text("dlsuite job: element 0 ...\n*** JOB 8 ON node1 CANCELLED ***\n")
    ran = s.placeholder(tasks[0], "run1", sub, 0, None, "CANCELLED", run_dir)
    waited = s.placeholder(tasks[1], "run1", sub, 1, None, "CANCELLED", run_dir)
    assert ran["error"]["log"] == "slurm/s1/slurm-7_0.out"
    assert "JOB 8 ON node1 CANCELLED" in ran["error"]["message"]
    assert "log" not in waited["error"]
    assert not (sub.directory(run_dir) / "slurm-7_1.out").exists()
