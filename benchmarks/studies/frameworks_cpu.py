"""Every framework's operator and network levels (quick sizes) on this CPU, from one suite run,
as one comparison table; next to it, per framework, a bare fp32 GEMM loop in that framework's
own environment, so the suite's overhead per framework is visible.

    python -m benchmarks.studies.frameworks_cpu [--frameworks pytorch,tensorflow,mxnet,jax,numpy]
        [--levels operator,network] [--dtypes fp32] [--out DIR | --run-dir EXISTING]
        [--bare-rounds 3] [--bare-budget 1.0] [--no-bare] [--markdown docs/studies/frameworks-cpu.md]

The script drives the suite itself: one ``dlsuite run --level ... --framework ... --quick
--device cpu --dtype ... --out DIR`` (its progress streams here), then reads
``DIR/results.jsonl``. Rows are benchmark + parameters + dtype; each framework's cell holds the
record's median time, its throughput (TFLOP/s for operators, samples/s for networks, epochs for
digits) and the correctness verdict of the same record (pass / FAIL with the worst check /
skipped or failed with the reason). The fastest framework among those that passed is starred.

The bare loop is a small inline script run with the interpreter the suite's gemm record ran in
(the framework's environment): seeded normal inputs (never zeros), warm-up, a sample of >= 2 ms
of back-to-back calls, the framework's own sync before the clock is read (PyTorch on a CPU:
nothing; TensorFlow: ``.numpy()``; MXNet: ``mx.nd.waitall()``; JAX: ``block_until_ready``;
NumPy: nothing), the median of the samples per round, and the median of the rounds. Its result
is checked against float64 too. It runs right after the suite, in the same invocation; with
``--run-dir`` the bare timings saved with that run are reused (or, if there are none, measured
now and labelled so). Horovod is distributed-only (no operator or network words): it has no
place in these levels; ``benchmarks/validation/allreduce_vs_bare.py`` is where distributed numbers live.
"""

from __future__ import annotations

import argparse
import json
import platform
import shlex
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from suite.summary import fmt_seconds, params_label

ROOT = Path(__file__).resolve().parents[2]

FRAMEWORKS = ("pytorch", "tensorflow", "mxnet", "jax", "numpy")
LEVELS = ("operator", "network")
# kept in the run directory next to results.jsonl, read again by --run-dir
BARE_FILE = "frameworks_cpu_bare.json"  # the bare loops' timings
RUN_INFO = "frameworks_cpu_run.json"  # this script's command line, wall times, suite exit code
GENERATED_END = "<!-- end of the generated part: text below this line is kept on regeneration -->"

# What each bare loop calls (the framework's plain API, no suite code in the process).
BARE_CALL = {
    "pytorch": "torch.matmul(a, b)",
    "tensorflow": "tf.matmul(a, b), eager",
    "mxnet": "mx.nd.dot(a, b)",
    "jax": "jax.jit(jnp.matmul)(a, b)",
    "numpy": "a @ b",
}

BARE_SCRIPT = r"""
import json, statistics, sys, time
import numpy as np

fw = sys.argv[1]
m, n, k = (int(v) for v in sys.argv[2:5])
budget, rounds, seed = float(sys.argv[5]), int(sys.argv[6]), int(sys.argv[7])
rng = np.random.default_rng(seed)
a32 = rng.standard_normal((m, k)).astype(np.float32)
b32 = rng.standard_normal((k, n)).astype(np.float32)
ref = a32.astype(np.float64) @ b32.astype(np.float64)

def nothing(out):
    pass

before = nothing
if fw == "pytorch":
    import torch
    a, b = torch.from_numpy(a32), torch.from_numpy(b32)
    op = lambda: torch.matmul(a, b)
    sync = nothing  # CPU tensors: the op has finished when it returns
    host = lambda out: out.numpy()
    version = torch.__version__
elif fw == "tensorflow":
    import tensorflow as tf
    a, b = tf.constant(a32), tf.constant(b32)
    op = lambda: tf.matmul(a, b)
    sync = lambda out: out.numpy()
    host = lambda out: out.numpy()
    version = tf.__version__
elif fw == "mxnet":
    import mxnet as mx
    a, b = mx.nd.array(a32, dtype="float32"), mx.nd.array(b32, dtype="float32")
    op = lambda: mx.nd.dot(a, b)
    sync = lambda out: mx.nd.waitall()
    before = sync
    host = lambda out: out.asnumpy()
    version = mx.__version__
elif fw == "jax":
    import jax, jax.numpy as jnp
    a, b = jax.device_put(a32), jax.device_put(b32)
    matmul = jax.jit(jnp.matmul)
    op = lambda: matmul(a, b)
    sync = lambda out: out.block_until_ready()
    host = lambda out: np.asarray(out)
    version = jax.__version__
elif fw == "numpy":
    a, b = a32, b32
    op = lambda: a @ b
    sync = nothing
    host = lambda out: out
    version = np.__version__
else:
    raise SystemExit(f"no bare loop for {fw}")

out = host(op()).astype(np.float64)
max_rel = float(np.max(np.abs(out - ref)) / np.max(np.abs(ref)))

def run(count):
    before(None)
    t0 = time.perf_counter()
    last = None
    for _ in range(count):
        last = op()
    sync(last)
    return time.perf_counter() - t0

warm_end, warm = time.perf_counter() + 0.2, 0
while warm < 3 or time.perf_counter() < warm_end:
    run(1)
    warm += 1
inner = 1
while run(inner) < 0.002 and inner < 65536:
    inner *= 2
round_medians, counts = [], []
for _ in range(rounds):
    samples, end = [], time.perf_counter() + budget
    while len(samples) < 10 or time.perf_counter() < end:
        samples.append(run(inner) / inner)
    round_medians.append(statistics.median(samples))
    counts.append(len(samples))
print(json.dumps({
    "framework": fw, "version": version, "python": sys.executable,
    "call": sys.argv[8], "median_s": statistics.median(round_medians),
    "round_medians_s": round_medians, "samples": counts, "inner": inner,
    "warmup_calls": warm, "max_rel_error_vs_fp64": max_rel,
}))
"""


# -- arguments ------------------------------------------------------------------------------------
def _names(text: str, known: tuple[str, ...], what: str) -> list[str]:
    from suite.adapters import ADAPTERS

    names = [t.strip() for t in text.split(",") if t.strip()]
    for name in names:
        if name in ADAPTERS.names() and not set(LEVELS) & ADAPTERS.load(name).levels:
            raise argparse.ArgumentTypeError(
                f"{name}: {ADAPTERS.load(name).levels_reason}; it does not run these levels "
                "(see benchmarks/validation/allreduce_vs_bare.py for distributed numbers)"
            )
        if name not in known:
            raise argparse.ArgumentTypeError(
                f"unknown {what} {name!r}; choose from {', '.join(known)}"
            )
    if not names:
        raise argparse.ArgumentTypeError(f"no {what} given")
    return names


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument(
        "--frameworks",
        type=lambda s: _names(s, FRAMEWORKS, "framework"),
        help=f"comma-separated (default {','.join(FRAMEWORKS)}; with --run-dir, those in it)",
    )
    ap.add_argument(
        "--levels",
        type=lambda s: _names(s, LEVELS, "level"),
        default=list(LEVELS),
        help="operator, network or both (default both)",
    )
    ap.add_argument("--dtypes", default="fp32", help="passed to --dtype (default fp32)")
    ap.add_argument("--out", type=Path, help="run directory (default runs/<time>-frameworks-cpu)")
    ap.add_argument(
        "--run-dir", type=Path, help="tabulate this existing run instead of running the suite"
    )
    ap.add_argument("--timeout", type=float, help="per-task timeout passed to dlsuite run")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--bare-rounds", type=int, default=3, help="rounds of the bare loop (3)")
    ap.add_argument("--bare-budget", type=float, default=1.0, help="seconds per round (1.0)")
    ap.add_argument("--no-bare", action="store_true", help="skip the bare GEMM loops")
    ap.add_argument("--markdown", type=Path, help="also write the tables as Markdown here")
    args = ap.parse_args(argv)
    if args.run_dir and args.out:
        ap.error("--run-dir tabulates an existing run; --out names a new one: give one of them")
    if args.run_dir and not (args.run_dir / "results.jsonl").is_file():
        ap.error(f"--run-dir {args.run_dir}: there is no results.jsonl in it")
    if args.bare_rounds < 1 or args.bare_budget <= 0:
        ap.error("--bare-rounds and --bare-budget must be positive")
    return args


# -- the suite run --------------------------------------------------------------------------------
def suite_command(args: argparse.Namespace, out: Path) -> list[str]:
    cmd = [
        sys.executable, "-m", "suite", "run",
        "--level", ",".join(args.levels),
        "--framework", ",".join(args.frameworks),
        "--quick", "--device", "cpu",
        "--dtype", args.dtypes,
        "--seed", str(args.seed),
        "--out", str(out),
    ]  # fmt: skip
    if args.timeout:
        cmd += ["--timeout", str(args.timeout)]
    return cmd


def run_suite(cmd: list[str], console: Console) -> tuple[int, float]:
    console.print(f"[bold]$ {shlex.join(cmd)}[/]")
    t0 = time.perf_counter()
    rc = subprocess.run(cmd, cwd=ROOT, check=False).returncode
    return rc, time.perf_counter() - t0


def load_records(run_dir: Path) -> list[dict[str, Any]]:
    records = []
    for line in (run_dir / "results.jsonl").read_text().splitlines():
        if line.strip():
            rec = json.loads(line)
            if rec.get("rank") in (None, 0):
                records.append(rec)
    return records


# -- one cell per record --------------------------------------------------------------------------
def _metric(rec: dict[str, Any], name: str) -> dict[str, Any] | None:
    return next((m for m in rec.get("metrics") or [] if m["name"] == name), None)


def _center(m: dict[str, Any]) -> float:
    return float(m.get("median", m["value"]))


def _short(text: str, limit: int = 70) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass
class Cell:
    time_s: float | None  # median time (lower is better), when the record has one
    ci95: tuple[float, float] | None  # the record's 95% CI of that median
    time_name: str  # time, latency, step_time, time_to_accuracy
    rate: str  # TFLOP/s, samples/s, epochs or the agreement error
    verdict: str  # pass / FAIL ... / skipped: ... / failed: ...
    kind: str  # pass, fail, skipped, error
    correct: bool


def worst_check(corr: dict[str, Any]) -> dict[str, Any]:
    def ratio(c: dict[str, Any]) -> float:
        return float("inf") if c["error"] is None else c["error"] / max(c["tolerance"], 1e-300)

    failed = [c for c in corr["checks"] if not c["passed"]]
    return max(failed or corr["checks"], key=ratio)


def cell_of(rec: dict[str, Any]) -> Cell:
    status = rec["status"]
    if status == "skipped":
        return Cell(
            None, None, "", "", f"skipped: {_short(rec.get('reason') or '')}", "skipped", False
        )
    if status != "ok":
        err = rec.get("error") or {}
        why = f"{err.get('type', '')}: {err.get('message', '')}".strip(": ")
        return Cell(None, None, "", "", f"{status}: {_short(why or rec.get('reason') or '')}", "error", False)  # fmt: skip
    tm = next((m for m in rec.get("metrics") or [] if m["unit"] == "s" and "median" in m), None)
    rate = ""
    for name, fmt in (
        ("flop_rate", "{:.3f} TFLOP/s"),
        ("throughput", "{:.1f} samples/s"),
        ("epochs_to_target", "{:.1f} epochs"),
        ("agreement_error", "err {:.1e}"),
    ):
        m = _metric(rec, name)
        if m is not None:
            rate = fmt.format(_center(m))
            break
    corr = rec.get("correctness")
    if not corr:
        verdict, kind, correct = "no correctness check", "fail", False
    elif corr["passed"]:
        verdict, kind, correct = "pass", "pass", True
    else:
        w = worst_check(corr)
        err = "NaN/Inf" if w["error"] is None else f"{w['error']:.1e}"
        verdict = f"FAIL {w['name']} {err}>{w['tolerance']:.0e}"
        kind, correct = "fail", False
    ci = (float(tm["ci95"][0]), float(tm["ci95"][1])) if tm and tm.get("ci95") else None
    return Cell(
        _center(tm) if tm else None, ci, tm["name"] if tm else "", rate, verdict, kind, correct
    )


def ci_pct(c: Cell) -> float | None:
    """Half the width of the record's CI95 of the median, in % of the median."""
    if c.ci95 is None or not c.time_s:
        return None
    return (c.ci95[1] - c.ci95[0]) / 2 / c.time_s * 100


@dataclass
class Row:
    level: str
    benchmark: str
    params: str
    dtype: str
    cells: dict[str, Cell]
    fastest: str | None = None
    runner_up: tuple[str, float] | None = None  # (framework, its time / the fastest's)
    within_noise: bool = False  # the two CIs of the median overlap


def comparison(records: list[dict[str, Any]], frameworks: list[str]) -> list[Row]:
    rows: dict[tuple[str, ...], Row] = {}
    for rec in records:
        fw = rec["framework"]["name"]
        if fw not in frameworks:
            continue  # the host's agreement matrix (framework "a+b+...") is tabulated apart
        b = rec["benchmark"]
        key = (b["level"], b["name"], json.dumps(b["params"], sort_keys=True), rec["dtype"])
        row = rows.setdefault(key, Row(b["level"], b["name"], params_label(rec), rec["dtype"], {}))
        row.cells[fw] = cell_of(rec)
    for row in rows.values():
        timed = sorted(
            ((c.time_s, fw) for fw, c in row.cells.items() if c.correct and c.time_s is not None)
        )
        if len(timed) >= 2:
            row.fastest = timed[0][1]
            row.runner_up = (timed[1][1], timed[1][0] / timed[0][0])
            first, second = row.cells[timed[0][1]].ci95, row.cells[timed[1][1]].ci95
            row.within_noise = bool(first and second and first[1] >= second[0])
    return list(rows.values())


def agreement_matrices(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for rec in records:
        if rec["benchmark"]["name"] != "agreement_matrix":
            continue
        row = {"network": params_label(rec), "frameworks": rec["framework"]["name"]}
        if rec["status"] != "ok":
            row.update(worst="-", verdict=f"{rec['status']}: {_short(rec.get('reason') or '')}")
        else:
            corr = rec["correctness"]
            bad = [c["name"] for c in corr["checks"] if not c["passed"]]
            row.update(
                worst=f"{_center(rec['metrics'][0]):.1e}",
                verdict="pass" if corr["passed"] else f"FAIL ({', '.join(bad)})",
            )
        out.append(row)
    return out


# -- the bare loops -------------------------------------------------------------------------------
def gemm_record(records: list[dict[str, Any]], fw: str) -> dict[str, Any] | None:
    """The suite's fp32 gemm record of ``fw`` (the quick size: 256^3)."""
    for rec in records:
        b = rec["benchmark"]
        if (b["level"], b["name"], rec["dtype"], rec["framework"]["name"]) == (
            "operator", "gemm", "fp32", fw,
        ):  # fmt: skip
            return rec
    return None


def interpreter_for(fw: str, rec: dict[str, Any] | None) -> tuple[str, str]:
    """The interpreter the suite ran ``fw``'s gemm in; without a record, the one
    ``--backend auto`` would pick (this interpreter when the framework imports here,
    else the framework's environment, built if missing)."""
    if rec is not None and (rec.get("backend") or {}).get("python"):
        return str(rec["backend"]["python"]), f"{rec['backend']['kind']} (as the suite's record)"
    from suite import envs
    from suite.adapters import ADAPTERS

    ok, _ = ADAPTERS.load(fw).available()
    if ok:
        return sys.executable, "local"
    return str(envs.ensure(fw).python), "venv"


def run_bare(
    fw: str, python: str, params: dict[str, int], args: argparse.Namespace
) -> dict[str, Any]:
    cmd = [
        python, "-c", BARE_SCRIPT, fw,
        str(params["m"]), str(params["n"]), str(params["k"]),
        str(args.bare_budget), str(args.bare_rounds), str(args.seed), BARE_CALL[fw],
    ]  # fmt: skip
    timeout = 300 + 2 * args.bare_rounds * args.bare_budget
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return {"framework": fw, "error": f"timed out after {timeout:.0f} s"}
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return {"framework": fw, "error": f"exit {proc.returncode}: {_short(tail, 160)}"}
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def bare_loops(
    records: list[dict[str, Any]],
    args: argparse.Namespace,
    run_dir: Path,
    console: Console,
    fresh: bool,
) -> dict[str, Any]:
    """The bare loops of this invocation (``fresh``) or those saved with ``run_dir``."""
    saved = run_dir / BARE_FILE
    if not fresh and saved.is_file():
        doc: dict[str, Any] = json.loads(saved.read_text())
        doc["reused"] = True
        return doc
    params = {"m": 256, "n": 256, "k": 256}
    for fw in args.frameworks:
        rec = gemm_record(records, fw)
        if rec is not None:
            params = {k: int(rec["benchmark"]["params"][k]) for k in ("m", "n", "k")}
            break
    results = {}
    t0 = time.perf_counter()
    for fw in args.frameworks:
        python, how = interpreter_for(fw, gemm_record(records, fw))
        with console.status(f"bare {BARE_CALL[fw]} ({fw}, {python})"):
            res = run_bare(fw, python, params, args)
        res["interpreter"] = how
        results[fw] = res
        shown = fmt_seconds(res["median_s"]) if "median_s" in res else res["error"]
        console.print(f"bare loop {fw}: {shown}")
    doc = {
        "params": params,
        "rounds": args.bare_rounds,
        "budget_s": args.bare_budget,
        "seed": args.seed,
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "same_invocation_as_suite": fresh,
        "wall_s": time.perf_counter() - t0,
        "results": results,
    }
    saved.write_text(json.dumps(doc, indent=1) + "\n")
    doc["reused"] = False
    return doc


@dataclass
class Overhead:
    framework: str
    suite: Cell | None
    bare: dict[str, Any]

    @property
    def ratio(self) -> float | None:
        if self.suite is None or self.suite.time_s is None or "median_s" not in self.bare:
            return None
        return self.suite.time_s / float(self.bare["median_s"])

    def bare_check(self) -> str:
        if "max_rel_error_vs_fp64" not in self.bare:
            return "-"
        err = float(self.bare["max_rel_error_vs_fp64"])
        return f"{'pass' if err <= 1e-4 else 'FAIL'} {err:.1e}"  # fp32 max_rel tolerance


def overheads(records: list[dict[str, Any]], bare: dict[str, Any]) -> list[Overhead]:
    out = []
    for fw, res in bare["results"].items():
        rec = gemm_record(records, fw)
        out.append(Overhead(fw, cell_of(rec) if rec else None, res))
    return out


# -- provenance -----------------------------------------------------------------------------------
SKIP_VERSION_KEYS = {"cuda", "cudnn", "nccl", "status"}


def environments(records: list[dict[str, Any]], frameworks: list[str]) -> list[dict[str, str]]:
    out = []
    for fw in frameworks:
        mine = [r for r in records if r["framework"]["name"] == fw]
        if not mine:
            continue
        rec = next((r for r in mine if r["status"] == "ok"), mine[0])
        prov = rec["provenance"]
        extra = {
            k: v
            for k, v in (prov.get("versions") or {}).items()
            if v and k not in SKIP_VERSION_KEYS and k != fw and v != rec["framework"].get("version")
        }
        if prov.get("numpy") and "numpy" not in extra and fw != "numpy":
            extra["numpy"] = prov["numpy"]
        counts: dict[str, int] = {}
        for r in mine:
            counts[r["status"]] = counts.get(r["status"], 0) + 1
        failed_checks = sum(
            1
            for r in mine
            if r["status"] == "ok" and not (r.get("correctness") or {}).get("passed")
        )
        backend = rec.get("backend") or {}
        env = Path(backend.get("environment") or "").name or "-"
        out.append({
            "framework": fw,
            "version": str(rec["framework"].get("version")),
            "with": ", ".join(f"{k} {v}" for k, v in sorted(extra.items())),
            "backend": f"{backend.get('kind', '?')} ({env})",
            "python": str(prov.get("python")),
            "records": ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
            + (f" ({failed_checks} failed checks)" if failed_checks else ""),
        })  # fmt: skip
    return out


def run_facts(records: list[dict[str, Any]], run_dir: Path) -> dict[str, str]:
    manifest: dict[str, Any] = {}
    if (run_dir / "manifest.json").is_file():
        manifest = json.loads((run_dir / "manifest.json").read_text())
    ok = next((r for r in records if r["status"] == "ok" and r.get("device")), None)
    dev = (ok or {}).get("device") or {}
    prov = (records[0] if records else {}).get("provenance") or {}
    starts = sorted(r["started_at"] for r in records)
    commit = prov.get("git_commit") or "unknown"
    hosts = [(r.get("telemetry") or {}).get("host") or {} for r in records]
    loads = sorted(h["loadavg_1m"] for h in hosts if h.get("loadavg_1m") is not None)
    utils = sorted(
        h["process_cpu_util_mean"] for h in hosts if h.get("process_cpu_util_mean") is not None
    )
    peak = (dev.get("peak_tflops") or {}).get("fp32")
    return {
        "device": f"{dev.get('name', '?')} ({dev.get('cores', '?')} cores)",
        "peak": f"{peak * 1e3:.0f} GFLOP/s fp32" if peak else "unknown",
        "peak_source": str(dev.get("peak_source", "")),
        "host": records[0]["host"] if records else "?",
        "platform": str(prov.get("platform", platform.platform())),
        "commit": commit[:12] + (" (uncommitted changes)" if prov.get("git_dirty") else ""),
        "suite": str(prov.get("suite_version", "?")),
        "run_id": str(manifest.get("run_id", records[0]["run_id"] if records else "?")),
        "argv": shlex.join(["dlsuite", *manifest.get("argv", [])]) if manifest else "?",
        "from": starts[0][:19] if starts else "?",
        "to": starts[-1][:19] if starts else "?",
        "load": (
            f"1-minute load average {loads[0]:.1f} to {loads[-1]:.1f} "
            f"(median {statistics.median(loads):.1f}) on {dev.get('cores', '?')} cores"
            if loads
            else "load average not recorded"
        ),
        "util": (
            f"a worker's process used {utils[0]:.0%} to {utils[-1]:.0%} of the machine's CPU "
            f"time while it measured (median {statistics.median(utils):.0%})"
            if utils
            else ""
        ),
    }


# -- rendering ------------------------------------------------------------------------------------
def cell_text(c: Cell | None, star: bool, markdown: bool) -> str:
    if c is None:
        return "-" if markdown else "[dim]-[/]"
    head = fmt_seconds(c.time_s) if c.time_s is not None else ""
    pct = ci_pct(c)
    if pct is not None:
        head += f" ±{pct:.0f}%" if pct >= 1 else f" ±{pct:.1f}%"
    if star:
        head = f"**★ {head}**" if markdown else f"[bold green]★ {head}[/]"
    verdict = c.verdict
    if not markdown:
        style = {"pass": "green", "fail": "red bold", "skipped": "yellow", "error": "red"}[c.kind]
        verdict = f"[{style}]{verdict}[/]"
    parts = [p for p in (head, c.rate, verdict) if p]
    return ("<br>" if markdown else "\n").join(parts)


def fastest_text(row: Row) -> str:
    if row.fastest is None:
        return "-"
    assert row.runner_up is not None
    fw, factor = row.runner_up
    noise = "; CIs overlap" if row.within_noise else ""
    return f"{row.fastest} ({factor:.2f}× faster than {fw}{noise})"


def console_tables(
    rows: list[Row],
    frameworks: list[str],
    over: list[Overhead],
    matrices: list[dict[str, Any]],
    title: str,
    console: Console,
) -> None:
    t = Table(title=title, show_lines=True, header_style="bold")
    t.add_column("benchmark")
    t.add_column("params", overflow="fold")
    t.add_column("dtype")
    for fw in frameworks:
        t.add_column(fw, overflow="fold")
    t.add_column("fastest correct", overflow="fold")
    for row in rows:
        t.add_row(
            f"{row.level[:3]} {row.benchmark}",
            row.params,
            row.dtype,
            *(cell_text(row.cells.get(fw), fw == row.fastest, False) for fw in frameworks),
            fastest_text(row),
        )
    console.print(t)
    if matrices:
        m = Table(title="cross-framework agreement (the host's matrix of the same run)")
        for col in ("network", "frameworks", "worst error", "verdict"):
            m.add_column(col)
        for mr in matrices:
            m.add_row(mr["network"], mr["frameworks"], mr["worst"], mr["verdict"])
        console.print(m)
    if over:
        o = Table(title="suite vs bare loop: fp32 GEMM, the quick size, per framework")
        for col in ("framework", "bare loop calls", "suite median", "bare median",
                    "ratio suite/bare", "bare rounds", "suite check", "bare check"):  # fmt: skip
            o.add_column(col, justify="right" if col in ("suite median", "bare median", "ratio suite/bare") else "left")  # fmt: skip
        for r in over:
            o.add_row(*overhead_cells(r))
        console.print(o)


def overhead_cells(r: Overhead) -> list[str]:
    bare = r.bare
    if "median_s" not in bare:
        return [r.framework, BARE_CALL[r.framework], suite_time(r), "-", "-", bare.get("error", "-"), suite_check(r), "-"]  # fmt: skip
    ratio = r.ratio
    return [
        r.framework,
        BARE_CALL[r.framework],
        suite_time(r),
        fmt_seconds(float(bare["median_s"])),
        f"{ratio:.3f}" if ratio is not None else "-",
        ", ".join(fmt_seconds(v) for v in bare["round_medians_s"]),
        suite_check(r),
        r.bare_check(),
    ]


def suite_time(r: Overhead) -> str:
    if r.suite is None or r.suite.time_s is None:
        return "-"
    pct = ci_pct(r.suite)
    return fmt_seconds(r.suite.time_s) + (f" ±{pct:.1f}%" if pct is not None else "")


def suite_check(r: Overhead) -> str:
    return r.suite.verdict if r.suite else "no gemm record"


def markdown(
    rows: list[Row],
    frameworks: list[str],
    over: list[Overhead],
    matrices: list[dict[str, Any]],
    envs_rows: list[dict[str, str]],
    facts: dict[str, str],
    bare: dict[str, Any] | None,
    run_info: dict[str, Any],
    command: str,
) -> str:
    lines = [
        "# Every framework on this CPU: operator and network levels (quick sizes)",
        "",
        f"Machine: {facts['device']}, host `{facts['host']}`, {facts['platform']}; peak used for "
        f"% of peak: {facts['peak']}. Suite {facts['suite']} at commit {facts['commit']}, "
        f"run `{facts['run_id']}`, records from {facts['from']} to {facts['to']} (UTC).",
        "",
        f"Load while the suite measured: {facts['load']}; {facts['util']} "
        "(from the records' host telemetry).",
        "",
        command_paragraph(facts, run_info, command),
        "",
        "| framework | version | with | backend (environment) | python | records |",
        "|---|---|---|---|---|---|",
    ]
    for e in envs_rows:
        lines.append(
            f"| {e['framework']} | {e['version']} | {e['with']} | {e['backend']} | "
            f"{e['python']} | {e['records']} |"
        )
    lines += [
        "",
        "Horovod is not in this table: it is distributed-only (no operator or network words).",
        "",
        "## All frameworks, one row per benchmark",
        "",
        "Each cell: the record's median time (`time` for operators, `latency` for inference, "
        "`step_time` for training, `time_to_accuracy` for digits), its throughput, and the "
        "correctness verdict of the same record. ★ marks the fastest framework among those "
        "whose check passed; the last column says by how much it beat the next one.",
        "",
        "| level | benchmark | params | dtype | " + " | ".join(frameworks) + " | fastest correct |",
        "|---|---|---|---|" + "---|" * len(frameworks) + "---|",
    ]
    for row in rows:
        cells = [cell_text(row.cells.get(fw), fw == row.fastest, True) for fw in frameworks]
        lines.append(
            f"| {row.level} | {row.benchmark} | {row.params} | {row.dtype} | "
            + " | ".join(cells)
            + f" | {fastest_text(row)} |"
        )
    if matrices:
        lines += [
            "",
            "Cross-framework agreement (the host's matrix over the saved logits and first SGD "
            "updates of the same run; tolerances in [methodology](../reference/methodology.md#cross-framework-agreement)):",
            "",
            "| network | frameworks | worst error | verdict |",
            "|---|---|---:|---|",
        ]
        lines += [
            f"| {r['network']} | {r['frameworks']} | {r['worst']} | {r['verdict']} |"
            for r in matrices
        ]
    if over and bare is not None:
        p = bare["params"]
        when = (
            "right after the suite, in the same invocation"
            if bare.get("same_invocation_as_suite")
            else f"at {bare['measured_at']}, NOT in the suite's invocation (re-tabulated run)"
        )
        lines += [
            "",
            "## The suite against a bare loop, per framework",
            "",
            f"fp32 GEMM {p['m']}x{p['k']} @ {p['k']}x{p['n']} (the quick size). Suite: the "
            "gemm record above. Bare: the framework's plain call in the same interpreter the "
            f"suite's worker used, {bare['rounds']} rounds of {bare['budget_s']} s, median of "
            f"the round medians, measured {when}. Ratio > 1: the suite measured a slower call.",
            "",
            "| framework | bare loop calls | suite median | bare median | ratio suite/bare | "
            "bare round medians | suite check | bare check (max rel. error vs fp64) |",
            "|---|---|---:|---:|---:|---|---|---|",
        ]
        lines += ["| " + " | ".join(overhead_cells(r)) + " |" for r in over]
    return "\n".join(lines) + "\n"


def command_paragraph(facts: dict[str, str], run_info: dict[str, Any], command: str) -> str:
    first = run_info.get("command")
    text = f"Command: `{first or command}`, which ran `{facts['argv']}`"
    if "suite_wall_s" in run_info:
        text += (
            f" ({run_info['suite_wall_s'] / 60:.1f} min wall, exit code "
            f"{run_info.get('suite_exit_code')})"
        )
    if "bare_wall_s" in run_info:
        text += f" and then the bare loops ({run_info['bare_wall_s']:.0f} s)"
    text += "."
    if first and first != command:
        text += f" Tables regenerated from the saved records with `{command}`."
    return text


def write_markdown(path: Path, text: str) -> None:
    """Write ``text``; a hand-written part below GENERATED_END in the old file is kept."""
    kept = ""
    if path.is_file():
        old = path.read_text()
        if GENERATED_END in old:
            kept = old.split(GENERATED_END, 1)[1]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n" + GENERATED_END + (kept or "\n"))


# -- main -----------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = arguments(argv)
    command = shlex.join(["python", "-m", "benchmarks.studies.frameworks_cpu", *argv])
    run_info: dict[str, Any] = {}
    if args.run_dir:
        run_dir = args.run_dir
        if args.frameworks is None:
            found = {r["framework"]["name"] for r in load_records(run_dir)}
            args.frameworks = [fw for fw in FRAMEWORKS if fw in found]
    else:
        args.frameworks = args.frameworks or list(FRAMEWORKS)
    console = Console(width=max(160, 50 + 34 * len(args.frameworks)))
    if not args.run_dir:
        default = ROOT / "runs" / f"{time.strftime('%Y%m%d-%H%M%S')}-frameworks-cpu"
        run_dir = (args.out or default).resolve()  # the suite runs in ROOT, not in our cwd
        cmd = suite_command(args, run_dir)
        rc, suite_wall = run_suite(cmd, console)
        if not (run_dir / "results.jsonl").is_file():
            console.print(f"[red]the suite wrote no records (exit {rc}); nothing to tabulate[/]")
            return rc or 1
        run_info = {"command": command, "suite_wall_s": suite_wall, "suite_exit_code": rc}
    elif (run_dir / RUN_INFO).is_file():
        run_info = json.loads((run_dir / RUN_INFO).read_text())
    records = load_records(run_dir)
    bare = None
    if not args.no_bare and any(gemm_record(records, fw) for fw in args.frameworks):
        bare = bare_loops(records, args, run_dir, console, fresh=not args.run_dir)
        if not bare.get("reused"):
            run_info["bare_wall_s"] = bare["wall_s"]
    if not args.run_dir:
        (run_dir / RUN_INFO).write_text(json.dumps(run_info, indent=1) + "\n")
    rows = comparison(records, args.frameworks)
    over = overheads(records, bare) if bare else []
    matrices = agreement_matrices(records)
    facts = run_facts(records, run_dir)
    dtypes = ",".join(sorted({r["dtype"] for r in records}))
    title = (
        f"{', '.join(args.frameworks)} on {facts['device']} — quick sizes, "
        f"{dtypes}, run {facts['run_id']}"
    )
    console_tables(rows, args.frameworks, over, matrices, title, console)
    console.print(f"load: {facts['load']}; {facts['util']}")
    if "suite_wall_s" in run_info:
        console.print(
            f"wall time: suite {run_info['suite_wall_s'] / 60:.1f} min (exit code "
            f"{run_info.get('suite_exit_code')}), bare loops {run_info.get('bare_wall_s', 0):.0f} s"
        )
    if args.markdown:
        text = markdown(
            rows,
            args.frameworks,
            over,
            matrices,
            environments(records, args.frameworks),
            facts,
            bare,
            run_info,
            command,
        )
        write_markdown(args.markdown, text)
        console.print(f"wrote {args.markdown}")
    wrong = [
        (row.benchmark, row.params, fw)
        for row in rows
        for fw, c in row.cells.items()
        if c.kind in ("fail", "error")
    ]
    bare_wrong = [r.framework for r in over if r.bare_check().startswith("FAIL")]
    for bench, params, fw in wrong:
        console.print(f"[red]not correct or not run: {bench} {params} on {fw}[/]")
    return 1 if wrong or bare_wrong else 0


if __name__ == "__main__":
    raise SystemExit(main())
