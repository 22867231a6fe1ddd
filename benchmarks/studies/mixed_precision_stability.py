"""Mixed-precision training stability at the network level: the fp16 and bf16 quick trainings
of every zoo network, over seeds and thread counts, in every framework that trains in mixed
precision, as a failure-rate table.

    python -m benchmarks.studies.mixed_precision_stability [--frameworks pytorch,jax,tensorflow,mxnet]
        [--networks mlp,alexnet,resnet18,resnet50,resnet101,transformer] [--dtypes fp16,bf16]
        [--seeds 20] [--threads 1,2] [--steps 40] [--residual-gain G]
        [--out DIR] [--baseline DIR] [--markdown docs/studies/mixed-precision-stability.md]

Each point is the network level's own ``train`` task (suite/levels/network/) run
in-process, so its verdict is the record's: every correctness check it would carry (logits
against onnxruntime, every step's loss finite, the loss-scale skips, the loss falling, the
inference-mode loss after training). What differs from a ``dlsuite run`` is the number of
steps: a run measures for a time budget, so how many steps it trains depends on the machine's
speed and load (issue 20: a record passed where it was fixed and failed elsewhere, because a
faster machine trained more steps); here the warm-up is ``--steps`` steps and the sampling
phase three, so every point trains the same number of steps on any machine (plus the
loss-scale settling and the timer check's few calls, which the record counts).

One process per framework and thread count (the framework's environment, as the venv backend
builds it; PyTorch's is this interpreter when it imports torch): OMP_NUM_THREADS sets the
threads (PyTorch and TensorFlow read it; JAX gets ``XLA_FLAGS`` with one Eigen thread for 1).
Points are appended to ``DIR/points.jsonl`` as they finish, so an interrupted sweep resumes
where it stopped. ``--residual-gain`` overrides the zoo's ``RESIDUAL_BN_GAIN`` (1.0 is the zoo
before issue 20's fix) for a before/after comparison; ``--baseline`` adds such a run's table to
the Markdown. An adapter that declares a dtype unsupported (MXNet: no mixed precision) gets one
row saying so, with its reason.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

FRAMEWORKS = ("pytorch", "jax", "tensorflow", "mxnet")
NETWORKS = ("mlp", "alexnet", "resnet18", "resnet50", "resnet101", "transformer")
DTYPES = ("fp16", "bf16", "fp32")
POINTS = "points.jsonl"
RUN_INFO = "run.json"
GENERATED_END = "<!-- end of the generated part: text below this line is kept on regeneration -->"


def measure_settings(steps: int) -> dict[str, Any]:
    """A fixed number of steps: ``steps`` warm-up steps, then three samples of one step (the
    time budget is spent at once; no step is too short for one sample here)."""
    return {
        "warmup_iters": steps,
        "warmup_s": 0.0,
        "min_samples": 3,
        "max_samples": 3,
        "time_budget_s": 0.0,
        "min_sample_s": 0.0,
    }


# -- the worker: one framework, one thread count, in its environment --------------------------
def _point(task: dict[str, Any], adapter: Any, device: Any) -> dict[str, Any]:
    from suite.levels import execute

    t0 = time.perf_counter()
    try:
        out = execute(task, adapter, device)
        assert isinstance(out, dict), "the train benchmark gives one record"
    except Exception as exc:  # noqa: BLE001 - a crash is a failed point, the sweep goes on
        return {"status": "error", "passed": False, "reason": f"{type(exc).__name__}: {exc}"[:300],
                "wall_s": time.perf_counter() - t0}  # fmt: skip
    checks = out["correctness"]["checks"]
    by_name = {c["name"]: c for c in checks}
    work = out["work"]
    finite = by_name.get("loss_finite_every_step", {})
    return {
        "status": "ok",
        "passed": out["correctness"]["passed"],
        "failed": [c for c in checks if not c["passed"]],
        "steps": work["steps"],
        "settle_steps": work.get("loss_scale_settle_steps", 0),
        "first_nonfinite_step": (finite.get("detail") or {}).get("first_nonfinite_step"),
        "skipped_share": by_name.get("fp16_loss_scale.skipped_share_of_measured_steps", {}).get(
            "error"
        ),
        # absent (None) for a graph with dropout, whose loss-falls check reads that loss
        "inference_check": by_name.get("inference_loss.after_over_before_training"),
        "loss_falls": next((c["error"] for n, c in by_name.items() if n.startswith("loss_falls")), None),
        "wall_s": time.perf_counter() - t0,
    }  # fmt: skip


def worker(args: argparse.Namespace) -> int:
    from suite.adapters import ADAPTERS
    from suite.levels import load_benchmark
    from suite.onnx import zoo

    if args.residual_gain is not None:
        zoo.RESIDUAL_BN_GAIN = args.residual_gain
    if args.worker == "jax":
        # Every point builds its network anew, and each build compiles its steps again: XLA
        # took 16 minutes for the quick ResNet-101's fp16 step on this loaded 2-core VM. The
        # seeds' programs are the same (weights are arguments), so a persistent cache
        # compiles each network once per dtype and thread count.
        import jax

        jax.config.update("jax_compilation_cache_dir", str(Path(args.points).parent / "jax-cache"))
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    adapter = ADAPTERS.load(args.worker)()
    device = adapter.setup("cpu")
    if args.worker == "pytorch":
        import torch

        torch.set_num_threads(args.threads)
    threads_seen = {k: v for k, v in device.extra.items() if "thread" in k or k == "xla_flags"}
    bench = load_benchmark("network", "train")
    sizes = {s.params["network"]: s.params for s in bench.sizes("quick")}
    points = Path(args.points)
    done = set()
    if points.is_file():
        for line in points.read_text().splitlines():
            p = json.loads(line)
            done.add((p["framework"], p["threads"], p["network"], p["dtype"], p["seed"]))
    for network in args.networks:
        for dtype in args.dtypes:
            key = {"framework": args.worker, "threads": args.threads, "network": network,
                   "dtype": dtype, "residual_gain": zoo.RESIDUAL_BN_GAIN}  # fmt: skip
            ok, why = adapter.supports(dtype)
            if not ok or "network" not in adapter.words:
                why = why if not ok else f"{args.worker} has no network words"
                if (args.worker, args.threads, network, dtype, None) not in done:
                    _append(points, {**key, "seed": None, "status": "unsupported", "reason": why})
                continue
            for seed in args.seeds:
                if (args.worker, args.threads, network, dtype, seed) in done:
                    continue
                params = {"network": network, **sizes[network]}
                task = {"benchmark": "train", "params": params, "dtype": dtype, "seed": seed,
                        "measure": measure_settings(args.steps)}  # fmt: skip
                point = {**key, "seed": seed, **_point(task, adapter, device)}
                point["threads_seen"] = threads_seen
                _append(points, point)
                verdict = "pass" if point["passed"] else "FAIL " + _failure_text(point)
                print(f"{args.worker} t{args.threads} {network} {dtype} seed {seed}: {verdict} "
                      f"({point.get('steps')} steps, {point['wall_s']:.0f} s)", flush=True)  # fmt: skip
    return 0


def _append(path: Path, doc: dict[str, Any]) -> None:
    with path.open("a") as fh:
        fh.write(json.dumps(doc) + "\n")


def _failure_text(p: dict[str, Any]) -> str:
    if p["status"] == "error":
        return str(p["reason"])
    parts = []
    for c in p["failed"]:
        err = "NaN/Inf" if c["error"] is None else f"{c['error']:.3g}"
        detail = c.get("detail") or {}
        first = detail.get("first_nonfinite_step")
        parts.append(
            f"{c['name']}={err}"
            + (f" (first non-finite step {first})" if first is not None else "")
        )
    return "; ".join(parts)  # fmt: skip


# -- the host: one worker per framework and thread count, then the table ----------------------
def interpreter(framework: str) -> str:
    """PyTorch: this interpreter when it imports torch; otherwise the framework's environment
    (built on first use, as the venv backend does)."""
    import importlib.util

    if framework == "pytorch" and importlib.util.find_spec("torch") is not None:
        return sys.executable
    from suite import envs

    return str(envs.ensure(framework).python)


def thread_environment(framework: str, threads: int) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": str(threads)}
    env["TF_NUM_INTEROP_THREADS"] = str(threads)
    if framework == "jax" and threads == 1:
        flags = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
        env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " " + flags).strip()
    return env


def load_points(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / POINTS
    return [json.loads(x) for x in path.read_text().splitlines()] if path.is_file() else []


def _fmt(v: float | None, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def table_rows(points: list[dict[str, Any]], threads: list[int]) -> list[list[str]]:
    """One row per framework, network and dtype: failures per thread count, the checks that
    failed (with the first non-finite step seen), and the worst values of the stability
    checks over every point."""
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for p in points:
        groups[(p["framework"], p["network"], p["dtype"])].append(p)
    order = {n: i for i, n in enumerate(NETWORKS)}
    rows = []
    for (fw, net, dtype), pts in sorted(
        groups.items(),
        key=lambda kv: (FRAMEWORKS.index(kv[0][0]) if kv[0][0] in FRAMEWORKS else 99,
                        order.get(kv[0][1], 99), kv[0][2]),
    ):  # fmt: skip
        unsupported = [p for p in pts if p["status"] == "unsupported"]
        if unsupported:
            rows.append([fw, net, dtype, *["-"] * len(threads), f"unsupported: {unsupported[0]['reason']}",
                         "-", "-", "-", "-"])  # fmt: skip
            continue
        cells = []
        for t in threads:
            mine = [p for p in pts if p["threads"] == t]
            fails = sum(not p["passed"] for p in mine)
            cells.append(f"{fails}/{len(mine)}" if mine else "-")
        failed: dict[str, int] = defaultdict(int)
        firsts = []
        for p in pts:
            if p["status"] == "error":
                failed["error: " + p["reason"][:60]] += 1
            for c in p.get("failed", []):
                failed[c["name"]] += 1
            if p.get("first_nonfinite_step") is not None:
                firsts.append(p["first_nonfinite_step"])
        what = ", ".join(f"{n} ×{k}" for n, k in sorted(failed.items())) or "none"
        if firsts:
            what += f" (first non-finite step {min(firsts)}-{max(firsts)})"
        ok = [p for p in pts if p["status"] == "ok"]
        settle = max((p["settle_steps"] for p in ok), default=None)
        skipped = max(
            (p["skipped_share"] for p in ok if p["skipped_share"] is not None), default=None
        )
        inference = [p["inference_check"] for p in ok if p["inference_check"] is not None]
        worst_ratio = (
            "NaN/Inf" if any(c["error"] is None for c in inference)
            else _fmt(max((c["error"] for c in inference), default=None), ".3g")
        )  # fmt: skip
        steps = sorted({p["steps"] for p in ok})
        rows.append([fw, net, dtype, *cells, what, _fmt(settle, "d"), _fmt(skipped, ".2f"), worst_ratio,
                     f"{steps[0]}-{steps[-1]}" if steps else "-"])  # fmt: skip
    return rows


def headers(threads: list[int]) -> list[str]:
    return ["framework", "network", "dtype", *[f"failed, {t} thread{'s' * (t > 1)}" for t in threads],
            "failed checks", "max settle steps", "max skipped share", "max inference loss after/before",
            "steps"]  # fmt: skip


def markdown_table(rows: list[list[str]], head: list[str]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def render(run_dir: Path, baseline: Path | None) -> str:
    info = json.loads((run_dir / RUN_INFO).read_text())
    pts = load_points(run_dir)
    threads = info["threads"]
    n_fail = sum(not p["passed"] for p in pts if p["status"] != "unsupported")
    n_all = sum(p["status"] != "unsupported" for p in pts)
    out = [
        "# Mixed-precision training stability (network level, quick sizes)",
        "",
        f"Generated by `{info['command']}` on {info['host']} ({info['cpu']}), "
        f"git {info['git_commit']}, {info['started']}; wall time {info.get('wall_s', 0) / 3600:.1f} h, "
        f"load average {info.get('load_start')} at the start and {info.get('load_end')} at the end "
        "(a shared 2-core VM: timings are not the point here, verdicts are).",
        "",
        f"**After** (zoo residual gain {info['residual_gain']}): {n_fail} failed of {n_all} points.",
        "",
        markdown_table(table_rows(pts, threads), headers(threads)),
    ]
    if baseline is not None:
        binfo = json.loads((baseline / RUN_INFO).read_text())
        bpts = load_points(baseline)
        b_fail = sum(not p["passed"] for p in bpts if p["status"] != "unsupported")
        b_all = sum(p["status"] != "unsupported" for p in bpts)
        out += [
            "",
            f"**Before** (zoo residual gain {binfo['residual_gain']}, `{binfo['command']}`, "
            f"git {binfo['git_commit']}): {b_fail} failed of {b_all} points.",
            "",
            markdown_table(table_rows(bpts, binfo["threads"]), headers(binfo["threads"])),
        ]
    return "\n".join(out) + "\n"


def write_markdown(path: Path, text: str) -> None:
    """Write ``text``; a hand-written part below GENERATED_END in the old file is kept."""
    kept = ""
    if path.is_file() and GENERATED_END in path.read_text():
        kept = path.read_text().split(GENERATED_END, 1)[1]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n" + GENERATED_END + (kept or "\n"))


def _names(text: str, known: tuple[str, ...], what: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    bad = [n for n in names if n not in known]
    if bad or not names:
        raise SystemExit(f"--{what}: unknown {bad or text!r}; choose from {', '.join(known)}")
    return names


def arguments(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--frameworks", default=",".join(FRAMEWORKS))
    ap.add_argument("--networks", default=",".join(NETWORKS))
    ap.add_argument("--dtypes", default="fp16,bf16")
    ap.add_argument("--seeds", type=int, default=20, help="seeds 0..N-1")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--steps", type=int, default=40, help="warm-up steps of each point")
    ap.add_argument("--residual-gain", type=float, default=None)
    ap.add_argument("--out", type=Path, default=ROOT / "runs" / "mixed-precision-stability")
    ap.add_argument("--baseline", type=Path, help="a previous run directory, shown as 'before'")
    ap.add_argument("--render-only", action="store_true", help="only print/write the tables")
    ap.add_argument("--markdown", type=Path)
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--points", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.networks = _names(args.networks, NETWORKS, "networks")
    args.dtypes = _names(args.dtypes, DTYPES, "dtypes")
    if args.worker is None:
        args.frameworks = _names(args.frameworks, FRAMEWORKS, "frameworks")
    threads = [n.strip() for n in str(args.threads).split(",")]
    if not all(t.isdigit() and int(t) > 0 for t in threads):
        raise SystemExit(f"--threads: expected positive integers, got {args.threads!r}")
    args.threads = [int(t) for t in threads]
    if args.seeds < 1 or args.steps < 5:
        raise SystemExit("--seeds must be >= 1 and --steps >= 5 (the loss-falls check reads five)")
    args.seeds = list(range(args.seeds))
    return args


def _git_commit() -> str:
    proc = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    )
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                           capture_output=True, text=True).stdout.strip()  # fmt: skip
    return proc.stdout.strip() + ("-dirty" if dirty else "")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = arguments(argv)
    if args.worker:
        args.threads = args.threads[0]
        return worker(args)
    run_dir: Path = args.out
    crashed = 0
    if not args.render_only:
        from suite.cpuinfo import model_name

        run_dir.mkdir(parents=True, exist_ok=True)
        info_path = run_dir / RUN_INFO
        from suite.onnx import zoo

        gain = zoo.RESIDUAL_BN_GAIN if args.residual_gain is None else args.residual_gain
        info = {
            "command": shlex.join(["python", "-m", "benchmarks.studies.mixed_precision_stability", *argv]),
            "host": platform.node(), "cpu": model_name(), "git_commit": _git_commit(),
            "started": time.strftime("%Y-%m-%d %H:%M"), "threads": args.threads,
            "residual_gain": gain, "steps": args.steps, "load_start": round(os.getloadavg()[0], 1),
        }  # fmt: skip
        if info_path.is_file():  # resuming: keep when it started and what it took so far
            old = json.loads(info_path.read_text())
            info.update(started=old["started"], load_start=old["load_start"])
            info["wall_s_before"] = old.get("wall_s", 0.0)
        t0 = time.perf_counter()
        for fw in args.frameworks:
            python = interpreter(fw)
            for t in args.threads:
                cmd = [python, "-m", "benchmarks.studies.mixed_precision_stability", "--worker", fw, "--threads", str(t),
                       "--points", str(run_dir / POINTS), "--networks", ",".join(args.networks),
                       "--dtypes", ",".join(args.dtypes), "--seeds", str(len(args.seeds)),
                       "--steps", str(args.steps)]  # fmt: skip
                cmd += ["--residual-gain", str(gain)]
                proc = subprocess.run(cmd, env=thread_environment(fw, t), cwd=ROOT)
                if proc.returncode != 0:
                    crashed += 1
                    print(
                        f"{fw} with {t} thread(s): the worker exited {proc.returncode}",
                        file=sys.stderr,
                    )
        info["wall_s"] = info.pop("wall_s_before", 0.0) + time.perf_counter() - t0
        info["load_end"] = round(os.getloadavg()[0], 1)
        info_path.write_text(json.dumps(info, indent=1))
    text = render(run_dir, args.baseline)
    print(text)
    if args.markdown:
        write_markdown(args.markdown, text)
    return 1 if crashed else 0  # the points kept are in the table; a crashed worker is not a pass


if __name__ == "__main__":
    raise SystemExit(main())
