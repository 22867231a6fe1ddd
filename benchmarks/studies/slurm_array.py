"""A 1,000-task job array on a real Slurm cluster: nothing lost, nothing run twice, and what
the host spends per task.

    python -m benchmarks.studies.slurm_array [--tasks 1000] [--tasks-per-job 10] [--parallelism 4]
        [--poll 2] [--resume-at 0.5] [--sizes 100,1000] [--slurm-conf PATH]
        [--json FILE] [--profile DIR]

The run is planned as N tasks: the NumPy adapter's GEMM at N distinct small sizes (m = 1..N,
n = k = 4), each a real task measured and checked against float64 like any other, with a
short measurement budget. It goes to Slurm as one job array, ``--tasks-per-job`` tasks per
element (a site profile written for it: ``array_parallelism`` elements at once,
``poll_interval_s`` between polls). Without ``--slurm-conf`` a private cluster of
``cluster/local-cluster.sh`` is started on free ports in its own directory (two nodes on
this machine) and stopped at the end, as tests/integration/test_slurm.py does.

Two experiments:

1. *straight*: ``dlsuite run`` of all N tasks to the end (for each of ``--sizes``, then N).
2. *resume*: the same plan in a new run directory; when ``--resume-at`` of the tasks have
   records, ``scancel`` the array; then ``dlsuite run --resume``.

Each run is checked: every planned task has exactly one record, ok and correct (0 lost,
0 duplicated); no task has more than one ok record across the array elements' own parts (0
run twice); after the resume, the second submission held exactly the tasks without a complete
record. The host's cost comes from the host process itself: its wall and CPU time (``wait4``:
its own and that of the Slurm commands it ran), the time it slept between polls and each
phase's wall and CPU time (``RUN_DIR/slurm/host.jsonl``, suite/schedulers/hostclock.py).
Host overhead = wall time minus the sleep between polls, per task.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

#: phases of RUN_DIR/slurm/host.jsonl, grouped as the figures report them
GROUPS = {
    "start-up and planning": ("before",),
    "submission": ("submit", "sbatch"),
    "polling": ("squeue", "scontrol", "progress"),
    "merging": ("merge",),
    "other (settings, manifest, final read)": ("other", "scancel"),
}


# -- the cluster ---------------------------------------------------------------------------
def free_port_run(n: int) -> int:
    """A port P with P..P+n-1 all free (slurmctld on P, node i's slurmd on P+i)."""
    for _ in range(200):
        base = random.randint(20000, 40000)
        socks: list[socket.socket] = []
        try:
            for port in range(base, base + n):
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                socks.append(s)
                s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise SystemExit("no run of free ports found")


@contextmanager
def private_cluster(nodes: int = 2) -> Iterator[str]:
    """A cluster of its own (directory, ports, munge key); yields its SLURM_CONF."""
    cluster_dir = tempfile.mkdtemp(prefix="dlsuite-slurm-array-", dir="/tmp")
    os.chmod(cluster_dir, 0o755)  # munged runs as user munge and must reach its socket
    env = {**os.environ, "DLSUITE_CLUSTER_DIR": cluster_dir,
           "DLSUITE_CLUSTER_NODES": str(nodes), "DLSUITE_CLUSTER_PORT": str(free_port_run(nodes + 1)),
           "DLSUITE_CLUSTER_LINK": "0"}  # fmt: skip
    script = ROOT / "cluster" / "local-cluster.sh"
    up = subprocess.run(["bash", str(script), "up"], env=env, capture_output=True, text=True,
                        timeout=180)  # fmt: skip
    try:
        if up.returncode != 0:
            raise SystemExit(f"the cluster did not come up:\n{up.stdout}\n{up.stderr}")
        yield f"{cluster_dir}/slurm.conf"
    finally:
        subprocess.run(["bash", str(script), "down"], env=env, capture_output=True, timeout=120)
        shutil.rmtree(cluster_dir, ignore_errors=True)


@contextmanager
def given(conf: str) -> Iterator[str]:
    yield str(Path(conf).resolve())


# -- the inputs ----------------------------------------------------------------------------
def write_inputs(
    work: Path, tasks: int, per_job: int, parallelism: int, poll: float
) -> tuple[Path, Path]:
    """The config (N GEMM sizes, a short measurement) and the site profile."""
    sizes = ",\n".join(f"  {{m = {m}, n = 4, k = 4}}" for m in range(1, tasks + 1))
    config = work / f"gemm-{tasks}.toml"
    config.write_text(
        "# benchmarks/studies/slurm_array.py: N small GEMMs, measured briefly (the host's cost is the "
        "point)\n[measure]\ntime_budget_s = 0.005\nwarmup_s = 0.0\nwarmup_iters = 1\n"
        "min_samples = 3\nmin_sample_s = 0.0001\ntarget_ci_rel = 1.0\n\n"
        f"[operator.gemm]\nsizes = [\n{sizes}\n]\n"
    )
    site = work / "array-bench.toml"
    site.write_text(
        "# benchmarks/studies/slurm_array.py: the local cluster, several elements at once\n"
        'description = "local cluster, job-array benchmark"\nscheduler = "slurm"\n'
        'launcher = "srun"\nbackend = "local"\npartition = "debug"\n'
        f"array_parallelism = {parallelism}\ntasks_per_job = {per_job}\n"
        f"poll_interval_s = {poll}\n\n[partitions.debug]\nnodes = 2\ngpus_per_node = 0\n"
    )
    return config, site


def run_args(config: Path, site: Path, run_dir: Path, per_job: int) -> list[str]:
    return ["run", "--framework", "numpy", "--backend", "local", "--benchmark", "gemm",
            "--dtype", "fp32", "--config", str(config), "--site", str(site),
            "--tasks-per-job", str(per_job), "--out", str(run_dir),
            "--history", str(run_dir.parent / "history.sqlite")]  # fmt: skip


def lines(path: Path) -> int:
    try:
        with path.open("rb") as fh:
            return sum(1 for _ in fh)
    except OSError:
        return 0


def host(
    args: list[str], env: dict[str, str], log: Path, *, profile: Path | None = None,
    scancel_at: int | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Run ``dlsuite ARGS`` as the host process; its wall time, CPU time (own and reaped
    children's, from wait4) and the load average while it ran. With ``scancel_at``, cancel
    the array once that many records were merged."""
    run_dir = Path(args[args.index("--out") + 1])
    prefix = [sys.executable]
    if profile is not None:
        prefix += ["-m", "cProfile", "-o", str(profile)]
    load: list[float] = []
    cancelled: dict[str, Any] = {}
    with log.open("w") as out:
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            [*prefix, "-m", "suite", *args], stdout=out, stderr=subprocess.STDOUT, cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT), **env},
        )  # fmt: skip
        while True:
            pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            load.append(os.getloadavg()[0])
            if scancel_at is not None and not cancelled:
                merged = lines(run_dir / "results.jsonl")
                if merged >= scancel_at:
                    doc = json.loads((run_dir / "slurm" / "jobs.json").read_text())
                    job = doc["submissions"][-1]["job_id"]
                    subprocess.run(["scancel", job], env={**os.environ, **env}, check=True)
                    cancelled = {"job_id": job, "records_when_cancelled": merged,
                                 "at_s": round(time.perf_counter() - t0, 1)}  # fmt: skip
            time.sleep(0.5)
        wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    return {
        "rc": proc.returncode,
        "wall_s": wall,
        "cpu_s": ru.ru_utime + ru.ru_stime,  # the host and the Slurm commands it ran
        "load_mean": sum(load) / len(load) if load else os.getloadavg()[0],
        "load_max": max(load, default=0.0),
        "cancelled": cancelled or None,
    }


# -- the checks ----------------------------------------------------------------------------
def read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def check(run_dir: Path) -> dict[str, Any]:
    """Lost, duplicated and run-twice counts, statuses and correctness of a finished run."""
    from suite.results import validate_file

    planned = json.loads((run_dir / "manifest.json").read_text())["tasks"]
    recs = read_jsonl(run_dir / "results.jsonl")
    per_task = Counter(r["task_id"] for r in recs)
    ok = {r["task_id"] for r in recs if r["status"] == "ok"}
    # what the array elements wrote themselves: a task with two ok records there ran twice
    parts = [r for p in sorted((run_dir / "slurm").glob("s*/part-*/results.jsonl"))
             for r in read_jsonl(p)]  # fmt: skip
    ok_runs = Counter(r["task_id"] for r in parts if r["status"] == "ok")
    subs = json.loads((run_dir / "slurm" / "jobs.json").read_text())["submissions"]
    validate_file(run_dir / "results.jsonl")
    return {
        "planned": len(planned),
        "records": len(recs),
        "statuses": dict(Counter(r["status"] for r in recs)),
        "lost": len(set(planned) - ok),
        "duplicated": sum(n - 1 for n in per_task.values() if n > 1),
        "unplanned": len(set(per_task) - set(planned)),
        "run_twice": sum(1 for n in ok_runs.values() if n > 1),
        "correct": sum(1 for r in recs if r["status"] == "ok" and r["correctness"]["passed"]),
        "submissions": [
            {
                "job_id": s["job_id"],
                "elements": len(s["elements"]),
                "tasks": sum(len(e) for e in s["elements"]),
                "states": dict(Counter(s["states"].values())),
            }
            for s in subs
        ],  # fmt: skip
    }


def breakdown(clock: dict[str, Any], tasks: int) -> dict[str, dict[str, float]]:
    """ms per task, wall and CPU (own + commands'), per group of phases."""
    phases = {"before": clock["before"], **clock["phases"]}
    out: dict[str, dict[str, float]] = {}
    for group, names in GROUPS.items():
        ps = [phases[n] for n in names if n in phases]
        out[group] = {
            "wall_ms": 1e3 * sum(p["wall_s"] for p in ps) / tasks,
            "cpu_ms": 1e3 * sum(p["cpu_s"] + p["children_cpu_s"] for p in ps) / tasks,
        }
    return out


def summarise(result: dict[str, Any], clocks: list[dict[str, Any]], tasks: int) -> dict[str, Any]:
    """The figures of one experiment (one or more host invocations on one run directory)."""
    sleep = sum(c["phases"].get("sleep", {}).get("wall_s", 0.0) for c in clocks)
    elapsed = sum(c["elapsed_s"] + c["before"]["wall_s"] for c in clocks)
    wall = sum(h["wall_s"] for h in result["hosts"])
    cpu = sum(h["cpu_s"] for h in result["hosts"])
    commands: Counter[str] = Counter()
    command_wall: Counter[str] = Counter()  # seconds
    for c in clocks:
        commands.update(c["commands"])
        command_wall.update(c["command_wall_s"])
    per_group: dict[str, dict[str, float]] = {}
    for c in clocks:
        for g, v in breakdown(c, tasks).items():
            acc = per_group.setdefault(g, {"wall_ms": 0.0, "cpu_ms": 0.0})
            acc["wall_ms"] += v["wall_ms"]
            acc["cpu_ms"] += v["cpu_ms"]
    clock_cpu = sum(c["busy"]["cpu_s"] + c["busy"]["children_cpu_s"] for c in clocks)
    per_group["after the scheduler (summary table, history store, exit)"] = {
        "wall_ms": 1e3 * (wall - elapsed) / tasks,
        "cpu_ms": 1e3 * (cpu - clock_cpu) / tasks,
    }
    minutes = sum(c["elapsed_s"] for c in clocks) / 60
    return {
        "wall_s": wall,
        "sleep_s": sleep,
        "host_wall_ms_per_task": 1e3 * (wall - sleep) / tasks,
        "host_cpu_ms_per_task": 1e3 * cpu / tasks,
        "breakdown_ms_per_task": per_group,
        "commands": dict(commands),
        "commands_per_minute": {k: v / minutes for k, v in commands.items()} if minutes else {},
        "command_wall_ms_mean": {k: 1e3 * command_wall[k] / v for k, v in commands.items()},
        "polls": sum(c["counts"].get("polls", 0) for c in clocks),
        "load_mean": max(h["load_mean"] for h in result["hosts"]),
    }


def experiment(
    name: str, work: Path, env: dict[str, str], tasks: int, opts: argparse.Namespace
) -> dict[str, Any]:
    config, site = write_inputs(work, tasks, opts.tasks_per_job, opts.parallelism, opts.poll)
    run_dir = work / f"{name}-{tasks}"
    args = run_args(config, site, run_dir, opts.tasks_per_job)
    prof = Path(opts.profile) / f"{name}-{tasks}.prof" if opts.profile else None
    result: dict[str, Any] = {"name": name, "tasks": tasks, "hosts": []}
    if name == "straight":
        result["hosts"].append(host(args, env, work / f"{name}-{tasks}.log", profile=prof))
    else:
        at = int(tasks * opts.resume_at)
        first = host(args, env, work / f"{name}-{tasks}-1.log", scancel_at=at)
        result["hosts"].append(first)
        result["after_cancel"] = check(run_dir)
        missing = {
            r["task_id"] for r in read_jsonl(run_dir / "results.jsonl") if r["status"] != "ok"
        }
        second = host([*args, "--resume"], env, work / f"{name}-{tasks}-2.log", profile=prof)
        result["hosts"].append(second)
        subs = json.loads((run_dir / "slurm" / "jobs.json").read_text())["submissions"]
        resubmitted = {t for e in subs[-1]["elements"] for t in e} if len(subs) > 1 else set()
        result["resubmitted"] = len(resubmitted)
        result["missing_after_cancel"] = len(missing)
        result["resubmitted_exactly_the_missing"] = resubmitted == missing
    result["check"] = check(run_dir)
    clocks = read_jsonl(run_dir / "slurm" / "host.jsonl")
    result["clocks"] = clocks
    result["figures"] = summarise(result, clocks, tasks)
    return result


def probe_squeue(
    env: dict[str, str], sizes: tuple[int, ...] = (10, 100, 1000)
) -> list[dict[str, Any]]:
    """The poll's own ``squeue`` against held arrays of each size (nothing runs): its wall time
    and output lines, and those of ``squeue --array`` (one line per element) beside it."""
    from suite.schedulers.slurm import SQUEUE_FORMAT

    full = {**os.environ, **env}
    out = []
    for n in sizes:
        job = subprocess.run(
            ["sbatch", "--parsable", "--hold", f"--array=0-{n - 1}", "--output=/dev/null",
             "--wrap", "true"], env=full, capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
        try:
            row: dict[str, Any] = {"elements": n}
            for name, extra in (("suite", []), ("--array", ["--array"])):
                argv = [
                    "squeue",
                    "--noheader",
                    *extra,
                    f"--jobs={job}",
                    f"--format={SQUEUE_FORMAT}",
                ]
                times = []
                for _ in range(10):
                    t0 = time.perf_counter()
                    text = subprocess.run(argv, env=full, capture_output=True, text=True).stdout
                    times.append(time.perf_counter() - t0)
                row[name] = {"ms_median": 1e3 * sorted(times)[5], "lines": len(text.splitlines())}
            out.append(row)
        finally:
            subprocess.run(["scancel", job], env=full, check=False)
    return out


def markdown(doc: dict[str, Any]) -> str:
    """The figures as the tables of docs/guide/clusters.md (recomputed from the raw measurements)."""
    for r in doc["results"]:
        r["figures"] = summarise(r, r["clocks"], r["tasks"])
    rows = [
        "| run | tasks | array elements | wall | host overhead per task, wall | host CPU per "
        "task | lost | duplicated | run twice | squeue calls (per minute) | load |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in doc["results"]:
        f, c = r["figures"], r["check"]
        rows.append(
            f"| {r['name']} | {r['tasks']} | "
            + " + ".join(str(s["elements"]) for s in c["submissions"])
            + f" | {f['wall_s']:.0f} s | {f['host_wall_ms_per_task']:.1f} ms | "
            f"{f['host_cpu_ms_per_task']:.1f} ms | {c['lost']} | {c['duplicated']} | "
            f"{c['run_twice']} | {f['commands'].get('squeue', 0)} "
            f"({f['commands_per_minute'].get('squeue', 0):.1f}) | {f['load_mean']:.1f} |"
        )
    groups = list(doc["results"][0]["figures"]["breakdown_ms_per_task"])
    rows += ["", "| ms per task (wall / CPU) | " + " | ".join(
        f"{r['name']} {r['tasks']}" for r in doc["results"]) + " |",
        "| --- |" + " ---: |" * len(doc["results"])]  # fmt: skip
    for g in groups:
        cells = [r["figures"]["breakdown_ms_per_task"][g] for r in doc["results"]]
        rows.append(f"| {g} | " + " | ".join(
            f"{v['wall_ms']:.2f} / {v['cpu_ms']:.2f}" for v in cells) + " |")  # fmt: skip
    rows.append("| **total (wall minus sleep) / CPU** | " + " | ".join(
        f"**{r['figures']['host_wall_ms_per_task']:.1f} / {r['figures']['host_cpu_ms_per_task']:.1f}**"
        for r in doc["results"]) + " |")  # fmt: skip
    return "\n".join(rows) + "\n"


def show(results: list[dict[str, Any]]) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title="job arrays on the local Slurm cluster (host overhead = wall - sleep)")
    for col in ("run", "tasks", "elements", "wall s", "host ms/task (wall)",
                "host ms/task (CPU)", "lost", "dup", "run twice", "squeue/min", "load"):  # fmt: skip
        t.add_column(col)
    for r in results:
        f, c = r["figures"], r["check"]
        t.add_row(
            r["name"], str(r["tasks"]),
            "+".join(str(s["elements"]) for s in c["submissions"]),
            f"{f['wall_s']:.0f}", f"{f['host_wall_ms_per_task']:.1f}",
            f"{f['host_cpu_ms_per_task']:.1f}", str(c["lost"]), str(c["duplicated"]),
            str(c["run_twice"]), f"{f['commands_per_minute'].get('squeue', 0):.1f}",
            f"{f['load_mean']:.1f}",
        )  # fmt: skip
    Console(width=160).print(t)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tasks", type=int, default=1000)
    ap.add_argument("--tasks-per-job", type=int, default=10)
    ap.add_argument("--parallelism", type=int, default=4, help="array elements at once")
    ap.add_argument("--poll", type=float, default=2.0, help="seconds between squeue polls")
    ap.add_argument(
        "--resume-at",
        type=float,
        default=0.5,
        help="scancel when this share of the tasks has records (0: no resume run)",
    )
    ap.add_argument("--sizes", default="", help="straight runs of these sizes first (e.g. 100,300)")
    ap.add_argument(
        "--slurm-conf", help="an existing cluster's slurm.conf (default: a private one)"
    )
    ap.add_argument("--work", help="where run directories go (default: a temporary directory)")
    ap.add_argument("--json", help="write every figure here")
    ap.add_argument("--profile", help="cProfile the host processes into this directory")
    ap.add_argument("--markdown", metavar="JSON", help="print the tables of an earlier --json")
    opts = ap.parse_args()
    if opts.markdown:
        print(markdown(json.loads(Path(opts.markdown).read_text())))
        return 0
    work = Path(opts.work or tempfile.mkdtemp(prefix="dlsuite-array-")).resolve()
    work.mkdir(parents=True, exist_ok=True)
    if opts.profile:
        Path(opts.profile).mkdir(parents=True, exist_ok=True)
    sizes = [int(s) for s in opts.sizes.split(",") if s] + [opts.tasks]
    cluster = given(opts.slurm_conf) if opts.slurm_conf else private_cluster()
    results = []
    with cluster as conf:
        env = {"SLURM_CONF": conf}
        probe = probe_squeue(env)
        print(f"squeue on held arrays: {json.dumps(probe)}", flush=True)
        for n in sizes:
            print(
                f"straight run of {n} tasks in {work} (load {os.getloadavg()[0]:.1f})", flush=True
            )
            results.append(experiment("straight", work, env, n, opts))
        if opts.resume_at > 0:
            print(
                f"scancel at {opts.resume_at:.0%}, then --resume ({opts.tasks} tasks)", flush=True
            )
            results.append(experiment("resume", work, env, opts.tasks, opts))
    show(results)
    doc = {
        "date": time.strftime("%Y-%m-%d %H:%M %Z"),
        "machine": {"cores": os.cpu_count(), "host": socket.gethostname()},
        "settings": {k: v for k, v in vars(opts).items() if k not in ("json",)},
        "squeue_probe": probe,
        "results": results,
    }
    if opts.json:
        Path(opts.json).write_text(json.dumps(doc, indent=2) + "\n")
    bad = [
        r["name"] for r in results
        if r["check"]["lost"] or r["check"]["duplicated"] or r["check"]["run_twice"]
        or r["check"]["correct"] != r["tasks"] or not r.get("resubmitted_exactly_the_missing", True)
    ]  # fmt: skip
    if bad:
        print(f"FAILED checks: {', '.join(bad)}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
