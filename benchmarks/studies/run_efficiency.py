"""The cost of a number: how much of a level's wall time is measuring, with a worker process per
task (``--isolate task``) and with worker sessions (the default), in one run; and how long the
adaptive timer takes to reach a 1% confidence interval of the median against a fixed
10 warm-up + 100 measured iterations (tf_cnn_benchmarks' defaults) on the same network.

    python -m benchmarks.studies.run_efficiency [--level operator] [--framework pytorch]
        [--device cpu] [--sizes quick] [--rounds 1] [--network resnet18]
        [--markdown docs/studies/run-efficiency-cpu.md]

Part 1 runs ``dlsuite run`` both ways, alternating which goes first in each round (so drift in
the machine's load hits both), and reads the records: wall time (the command's, start to
exit), sampling time (the sum of every record's ``measurement.elapsed_s``: the timed samples
only), their ratio, and the time outside the tasks per task: wall time less the sum of the
workers' task durations (``duration_s``), divided by the tasks (the CLI, process start-up,
dispatch); and, for the tasks after the first of a worker session, what each paid before its
benchmark started: the gap between the previous task's end and its start in the session's event
file, plus its ``setup_s`` (the adapter's set-up, telemetry, the 0.25 s quiet-machine check; in
a fresh process also the framework's import). Every record's correctness verdict is counted too: a run
that measured wrong numbers fast is not efficient.

Part 2 times one training step of a zoo network (PyTorch) in one process: the suite's adaptive
timer (warm-up, calibration, samples until the 95% CI of the median is within 1% of it)
against 10 warm-up + 100 measured single steps, each timed alone; for both, the wall time
spent, the median and the CI width achieved.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from suite.metrics import summarise

ROOT = Path(__file__).resolve().parents[2]


def run_level(args: argparse.Namespace, isolate: str, out: Path) -> dict[str, Any]:
    """One ``dlsuite run`` of the level; its wall time and what its records say."""
    cmd = [
        sys.executable, "-m", "suite", "run", "--level", args.level,
        "--framework", args.framework, "--device", args.device, "--isolate", isolate,
        "--out", str(out),
    ]  # fmt: skip
    if args.sizes == "quick":
        cmd.append("--quick")
    if args.dtype:
        cmd += ["--dtype", args.dtype]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    wall = time.perf_counter() - t0
    if proc.returncode not in (0, 1):
        raise SystemExit(f"dlsuite run --isolate {isolate} failed:\n{proc.stderr[-3000:]}")
    recs = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    ran = [r for r in recs if r.get("worker")]  # not the host's skipped records
    sampling = sum((r.get("measurement") or {}).get("elapsed_s") or 0.0 for r in recs)
    durations = sum(r["duration_s"] for r in ran)
    before = before_benchmark(out, ran)
    medians = {
        (r["task_id"], json.dumps(r["benchmark"]["params"], sort_keys=True)): m["median"]
        for r in recs
        for m in (r.get("metrics") or [])[:1]
        if r["status"] == "ok" and m.get("median")
    }
    checks = {
        r["task_id"]: sorted(
            c["name"] for c in r["correctness"]["checks"] if not c["name"].startswith("timer_")
        )
        for r in recs
        if r.get("correctness")
    }
    return {
        "phases": phases(recs, ran, wall),
        "medians": medians,
        "checks": checks,
        "isolate": isolate,
        "wall_s": wall,
        "tasks": len(ran),
        "records": len(recs),
        "ok": sum(r["status"] == "ok" for r in recs),
        "correct": sum(bool((r.get("correctness") or {}).get("passed")) for r in recs),
        "sampling_s": sampling,
        "task_s": durations,
        "outside_per_task_s": (wall - durations) / max(1, len(ran)),
        "before_after_first_s": statistics.mean(before) if before else None,
        "processes": len({r["worker"].get("pid") for r in ran}),
    }


#: the operator level's phases inside a task (``measurement.phases_s``), in the order they run
PHASES = ("inputs", "correctness", "warmup", "calibration", "timer_check", "sampling")


def phases(recs: list[dict[str, Any]], ran: list[dict[str, Any]], wall: float) -> dict[str, float]:
    """Where the wall time went, in seconds, summed over the run: the CLI and worker start
    (process, imports, plan, the first task's set-up: the framework's import), each later
    task's set-up, each phase inside the tasks (the operator level's ``phases_s``), what else
    the tasks spent (records, telemetry), and what the runner spent between and after them
    (merging, the summary table, the history store)."""
    by_task: dict[str, dict[str, Any]] = {}
    for r in ran:
        by_task.setdefault(r["task_id"], r)  # a sweep's records share their task's duration
    first = [r for r in by_task.values() if (r["worker"].get("position") or 0) == 0]
    later = [r for r in by_task.values() if (r["worker"].get("position") or 0) > 0]
    out: dict[str, float] = {
        "first task's set-up (framework import, adapter)": sum(
            r["worker"].get("setup_s") or 0.0 for r in first
        ),
        "later tasks' set-up (telemetry, quiet check)": sum(
            r["worker"].get("setup_s") or 0.0 for r in later
        ),
    }
    for name in PHASES:
        out[name] = sum(((r.get("measurement") or {}).get("phases_s") or {}).get(name, 0.0)
                        for r in recs)  # fmt: skip
    durations = sum(r["duration_s"] for r in by_task.values())
    inside = sum(out.values())
    out["rest of the tasks (records, telemetry, between phases)"] = durations - inside
    out["outside the tasks (CLI, worker start, runner, summary)"] = wall - durations
    return out


def phase_table(rows: list[dict[str, Any]]) -> Table:
    t = Table(title="Where the wall time goes (session mode), seconds and share of the wall")
    t.add_column("part")
    for r in rows:
        t.add_column(f"round {r['round']}", justify="right")
    names = list(rows[0]["phases"]) if rows else []
    for name in names:
        t.add_row(name, *(f"{r['phases'][name]:.2f} ({r['phases'][name] / r['wall_s']:.0%})"
                          for r in rows))  # fmt: skip
    t.add_row("wall", *(f"{r['wall_s']:.2f}" for r in rows))
    return t


def before_benchmark(out: Path, ran: list[dict[str, Any]]) -> list[float]:
    """For each task after the first of its worker session: the seconds it paid before its
    benchmark started: the gap between the previous task's end event and its own start event
    in the session's event file (freeing the previous task's state, reading the task), plus
    its ``setup_s`` (the adapter's set-up, telemetry, the quiet-machine check)."""
    events: dict[str, dict[str, float]] = {}
    for path in (out / "sessions").glob("*.rank0.jsonl"):
        previous_end = None
        for line in path.read_text().splitlines():
            e = json.loads(line)
            if e["event"] == "start" and previous_end is not None:
                events[e["task_id"]] = {"gap": e["t"] - previous_end}
            elif e["event"] == "end":
                previous_end = e["t"]
    out_s = []
    for r in ran:
        gap = events.get(r["task_id"], {}).get("gap")
        setup = r["worker"].get("setup_s")
        if r["worker"].get("position", 0) > 0 and gap is not None and setup is not None:
            out_s.append(gap + setup)
    return out_s


def same_content(rows: list[dict[str, Any]]) -> str:
    """Whether the two modes wrote the same records: the same value checks per task (the timer
    check is made only when the work is long enough to tell) and medians within noise (the
    ratio session / task of each record's headline median, per round)."""
    lines = []
    for i in sorted({r["round"] for r in rows}):
        task = next(r for r in rows if r["round"] == i and r["isolate"] == "task")
        session = next(r for r in rows if r["round"] == i and r["isolate"] == "session")
        same = sum(task["checks"].get(t) == c for t, c in session["checks"].items())
        ratios = sorted(
            session["medians"][k] / task["medians"][k]
            for k in session["medians"]
            if k in task["medians"]
        )
        if not ratios:
            continue
        geo = statistics.geometric_mean(ratios)
        lines.append(
            f"round {i}: the same value checks in {same} of {len(session['checks'])} tasks; "
            f"median session/task over {len(ratios)} records: geometric mean {geo:.3f}, "
            f"range {ratios[0]:.2f}-{ratios[-1]:.2f}, middle half "
            f"{ratios[len(ratios) // 4]:.2f}-{ratios[(3 * len(ratios)) // 4]:.2f}"
        )
    return "\n".join(lines)


def level_table(rows: list[dict[str, Any]]) -> Table:
    t = Table(title="Part 1: wall time against sampling time, one run of each mode per round")
    for col in (
        "round", "mode", "tasks", "processes", "wall", "sampling", "sampling / wall",
        "outside tasks, per task", "before the benchmark (tasks after the first)",
        "ok / correct",
    ):  # fmt: skip
        t.add_column(col, justify="right")
    for r in rows:
        setup = r["before_after_first_s"]
        t.add_row(
            str(r["round"]),
            "--isolate task" if r["isolate"] == "task" else "session (default)",
            str(r["tasks"]),
            str(r["processes"]),
            f"{r['wall_s']:.1f} s",
            f"{r['sampling_s']:.1f} s",
            f"{r['sampling_s'] / r['wall_s']:.0%}",
            f"{r['outside_per_task_s']:.2f} s",
            "-" if setup is None else f"{setup:.2f} s",
            f"{r['ok']}/{r['correct']} of {r['records']}",
        )
    return t


def trustworthy_number(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Part 2: adaptive 1% CI against 10 + 100 fixed iterations, one training step."""
    import numpy as np

    from suite.adapters.base import NetworkOptions
    from suite.adapters.pytorch.adapter import PyTorchAdapter
    from suite.levels import load_benchmark
    from suite.levels.network import workload as NB
    from suite.measure import MeasureConfig, measure

    adapter = PyTorchAdapter()
    adapter.setup(args.device)
    bench = load_benchmark("network", "train")
    size = next(s for s in bench.sizes("quick") if s.params["network"] == args.network)
    params = bench.validate(size.params)
    w = bench.workload(params, seed=0)
    net = adapter.build_network(
        w.model, "fp32", NetworkOptions(lr=params["lr"], momentum=0.9, channels_last=False)
    )
    x, y = NB.synthetic_batch(w.input, params["batch"], w.classes, np.random.default_rng(0))
    xt, yt = adapter.from_numpy(x, "fp32"), adapter.labels_from_numpy(y)

    def step() -> Any:
        return adapter.train_step(net, xt, yt)

    out = []
    for _ in range(args.rounds):
        t0 = time.perf_counter()
        m = measure(
            lambda n: adapter.time(step, n),
            MeasureConfig(target_ci_rel=0.01, time_budget_s=args.adaptive_budget, min_samples=10),
        )
        wall = time.perf_counter() - t0
        s = summarise(m.samples)
        out.append({"method": "adaptive, until the CI is 1% wide", "wall_s": wall,
                    "median_s": s.median, "ci_rel": s.ci_rel_width, "steps": m.calls,
                    "stop": m.stop_reason})  # fmt: skip
        t0 = time.perf_counter()
        for _ in range(10):
            adapter.time(step, 1)
        fixed = [adapter.time(step, 1) for _ in range(100)]
        wall = time.perf_counter() - t0
        s = summarise(fixed)
        out.append({"method": "fixed: 10 warm-up + 100 measured", "wall_s": wall,
                    "median_s": s.median, "ci_rel": s.ci_rel_width, "steps": 110,
                    "stop": "100 iterations"})  # fmt: skip
    return out


def trust_table(rows: list[dict[str, Any]], network: str) -> Table:
    t = Table(title=f"Part 2: one training step of {network} (quick), PyTorch, the same process")
    for col in ("method", "wall", "steps", "median step", "CI of the median (width)", "stopped"):
        t.add_column(col, justify="right")
    for r in rows:
        t.add_row(
            r["method"], f"{r['wall_s']:.1f} s", str(r["steps"]), f"{r['median_s'] * 1e3:.2f} ms",
            f"{r['ci_rel']:.2%}", r["stop"],
        )  # fmt: skip
    return t


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--level", default="operator")
    p.add_argument("--framework", default="pytorch")
    p.add_argument("--device", default="cpu")
    p.add_argument("--sizes", choices=("quick", "full"), default="quick")
    p.add_argument("--dtype", default=None, help="passed to dlsuite run (default: its own)")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--network", default="resnet18", help="part 2's network (quick size)")
    p.add_argument("--adaptive-budget", type=float, default=120.0)
    p.add_argument("--skip-trust", action="store_true", help="part 1 only")
    p.add_argument(
        "--modes", default="task,session",
        help="which of --isolate task and session to run (default both)",
    )  # fmt: skip
    p.add_argument("--json", type=Path, help="every run's figures (docs/results/...)")
    p.add_argument("--markdown", type=Path, help="also write the tables to this file")
    args = p.parse_args()
    console = Console(width=200, record=True)
    load_start = os.getloadavg()[0]
    console.print(
        f"# run efficiency: {args.level} level ({args.sizes}), {args.framework}, {args.device}; "
        f"{platform.node()}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} "
        "at start"
    )
    rows = []
    with tempfile.TemporaryDirectory(prefix="dlsuite-efficiency-") as tmp:
        for i in range(args.rounds):
            order = ("task", "session") if i % 2 == 0 else ("session", "task")
            for mode in (m for m in order if m in args.modes.split(",")):
                row = run_level(args, mode, Path(tmp) / f"r{i}-{mode}")
                rows.append({"round": i + 1, **row})
    console.print(level_table(rows))
    if {"task", "session"} <= set(args.modes.split(",")):
        console.print(same_content(rows))
    sessions = [r for r in rows if r["isolate"] == "session"]
    if sessions:
        console.print(phase_table(sessions))
    if args.json:
        keep = ("round", "isolate", "wall_s", "sampling_s", "task_s", "tasks", "records", "ok",
                "correct", "processes", "phases")  # fmt: skip
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(
            {"host": platform.node(), "cpus": os.cpu_count(), "load_start": load_start,
             "load_end": os.getloadavg()[0], "runs": [{k: r[k] for k in keep} for r in rows]},
            indent=1) + "\n")  # fmt: skip
    for mode in ("task", "session"):
        mine = [r for r in rows if r["isolate"] == mode]
        if not mine:
            continue
        console.print(
            f"{mode:>7}: wall {statistics.mean(r['wall_s'] for r in mine):.1f} s, sampling "
            f"{statistics.mean(r['sampling_s'] / r['wall_s'] for r in mine):.0%} of it"
        )
    if not args.skip_trust:
        console.print(trust_table(trustworthy_number(args), args.network))
    console.print(f"load average at the end: {os.getloadavg()[0]:.1f}")
    if args.markdown:
        args.markdown.write_text("```\n" + console.export_text() + "```\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
