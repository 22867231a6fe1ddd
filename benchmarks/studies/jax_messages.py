"""JAX's data-parallel exchange on CPUs, one gloo call per tensor or flat buffers: the suite's
data_parallel step at 2 ranks (no bucket, then the benchmark's ``bucket``) beside a bare
two-process loop that ``pmean``s the same network's tensors (its gradients and batch norm
statistics, by the projection's own count) one array each or raveled into one, in the same run;
beside each 2-rank step, what ``dlsuite project`` makes of it from the one-rank records and the
run's allreduce sweep alone (the 2-rank records held out).

    python -m benchmarks.studies.jax_messages [--repeats 40] [--buckets 25MiB,1MiB]
        [--out DIR] [--json FILE]

XLA combines a step's ``pmean``s into one all-reduce and its CPU runtime calls gloo once per
tensor of it (``AllReduceThunk::Execute``, xla/backends/cpu/runtime/all_reduce_thunk.cc). The
bare loop shows that cost without the network; the suite's rows show it inside the step. Every
row carries its check from the same run: the suite's records' correctness (the ranks' weights
equal one process's), the bare loop's sums (each rank fills its arrays with rank + 1, so the
mean is exactly (world + 1) / 2 everywhere). docs/reference/frameworks.md ("JAX") cites it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from suite.launchers.base import free_port
from suite.metrics.base import median_ci
from suite.params import parse_size

ROOT = Path(__file__).resolve().parents[2]
#: the quick size set's ResNet-18 (the data_parallel benchmark's own)
ARCH = {"network": "resnet18", "resolution": 32, "classes": 10, "width": 4}
BATCH = 24


def worker(args: argparse.Namespace) -> int:
    """One rank of the bare loop (run in JAX's environment)."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(f"127.0.0.1:{os.environ['MASTER_PORT']}", world, rank)
    devices = sorted(jax.devices(), key=lambda d: (d.process_index, d.id))
    mesh = Mesh(np.array(devices), ("r",))
    rep = NamedSharding(mesh, P())
    sizes = [int(n) for n in json.loads(args.sizes)]
    want = (world + 1) / 2

    def run(ravel: bool) -> dict[str, Any]:
        def mean(arrays: list[Any]) -> list[Any]:
            if not ravel:
                return jax.lax.pmean(arrays, "r")
            flat = jax.lax.pmean(jnp.concatenate(arrays), "r")
            out, at = [], 0
            for n in sizes:
                out.append(flat[at : at + n])
                at += n
            return out

        f = jax.jit(jax.shard_map(mean, mesh=mesh, in_specs=(P(),), out_specs=P()))
        local = [jnp.full((n,), float(rank + 1), jnp.float32) for n in sizes]
        arrays = [jax.make_array_from_single_device_arrays((n,), rep, [a]) for n, a in
                  zip(sizes, local, strict=True)]  # fmt: skip
        out = f(arrays)
        jax.block_until_ready(out)
        worst = max(float(np.max(np.abs(np.asarray(o.addressable_shards[0].data) - want)))
                    for o in out)  # fmt: skip
        times = []
        for _ in range(args.repeats):
            t = time.perf_counter()
            jax.block_until_ready(f(arrays))  # the same inputs each call: a sum, not a drift
            times.append(time.perf_counter() - t)
        return {"times_s": times, "worst_abs_error": worst}

    result = {"per_tensor": run(False), "one_buffer": run(True)}
    if rank == 0:
        print("RESULT " + json.dumps(result), flush=True)
    jax.distributed.shutdown()
    return 0


def _bare(python: str, sizes: list[int], repeats: int) -> dict[str, Any]:
    port = free_port()
    procs = []
    for rank in range(2):
        env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": "2", "MASTER_PORT": str(port),
               "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}  # fmt: skip
        cmd = [python, "-m", "benchmarks.studies.jax_messages", "--worker",
               "--sizes", json.dumps(sizes), "--repeats", str(repeats)]  # fmt: skip
        procs.append(subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=600)[0] for p in procs]
    if any(p.returncode for p in procs):
        raise SystemExit(f"the bare loop failed: {[p.returncode for p in procs]}")
    line = next(ln for ln in outs[0].splitlines() if ln.startswith("RESULT "))
    return dict(json.loads(line[len("RESULT ") :]))


def _suite(out: Path, buckets: list[int]) -> list[dict[str, Any]]:
    fields = ", ".join(f"{k} = {json.dumps(v)}" for k, v in ARCH.items())
    sizes = [f'{{ {fields}, scaling = "strong", batch = {BATCH} }}'] + [
        f'{{ {fields}, scaling = "strong", batch = {BATCH}, bucket = {b} }}' for b in buckets
    ]
    return suite_data_parallel(out / "jax-messages.toml", "jax", sizes)


def suite_data_parallel(
    config: Path,
    framework: str,
    sizes: list[str],
    measure: str = "",
    env: dict[str, str] | None = None,
) -> list[dict[str, Any]]:
    """The suite's allreduce sweep and data_parallel at ``sizes`` (TOML inline tables) on 2
    ranks, configured in ``config`` (``measure``: a ``[measure]`` table's lines), run into
    ``suite`` beside it; its records. Shared with the other data-parallel studies
    (horovod_fusion)."""
    head = f"[measure]\n{measure}\n\n" if measure else ""
    config.write_text(
        head + "[distributed.data_parallel]\nsizes = [\n  " + ",\n  ".join(sizes) + ",\n]\n",
        encoding="utf-8",
    )
    out = config.parent
    run = out / "suite"
    cmd = [sys.executable, "-m", "suite", "run", "--level", "distributed", "--benchmark",
           "allreduce,data_parallel", "--framework", framework, "--quick", "--dtype", "fp32",
           "--world-size", "2", "--config", str(config), "--out", str(run), "--no-history"]  # fmt: skip
    subprocess.run(cmd, cwd=ROOT, check=False, env={**os.environ, **(env or {})})
    return [json.loads(ln) for ln in (run / "results.jsonl").read_text().splitlines() if ln]


def projected_two_rank(out: Path) -> dict[float | None, float]:
    """The projection's 2-rank step of each case of ``out / "suite"``, fitted to the one-rank
    records only (the 2-rank records held out), by bucket (None: no bucket); {} where it
    projected none."""
    doc_path = out / "projection.json"
    cmd = [sys.executable, "-m", "suite", "project", str(out / "suite"), "--ranks", "2",
           "--fit-ranks", "1", "--accept-busy", "--out", str(doc_path)]  # fmt: skip
    subprocess.run(cmd, cwd=ROOT, check=False, stdout=subprocess.DEVNULL)
    if not doc_path.is_file():
        return {}
    rows = json.loads(doc_path.read_text())["projections"]
    return {r["bucket_bytes"]: r["step_s"] for r in rows if r["ranks"] == 2 and "step_s" in r}


def print_rows(title: str, rows: list[dict[str, Any]]) -> None:
    """A study's rows as a table: each row's what, median, 95% CI, check and projected step
    (seconds; the row's status where it has no median). Shared with horovod_fusion."""
    from rich.console import Console
    from rich.table import Table

    from suite.summary import fmt_seconds

    table = Table(title=title)
    for col in ("what", "median", "95% CI", "check", "projected from 1 rank"):
        table.add_column(col)
    for r in rows:
        ci = r["ci95_s"]
        table.add_row(
            r["what"],
            fmt_seconds(r["median_s"]) if r["median_s"] is not None else r.get("status", "-"),
            f"{fmt_seconds(ci[0])}–{fmt_seconds(ci[1])}" if ci else "-",
            r["check"],
            fmt_seconds(r["projected_s"]) if r["projected_s"] else "-",
        )
    Console(width=150).print(table)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=40, help="bare calls timed per variant")
    ap.add_argument("--buckets", default="25MiB,1MiB", help="the suite's bucketed rows")
    ap.add_argument("--out", type=Path, default=None, help="where the suite's run goes")
    ap.add_argument("--json", type=Path, default=None, help="every figure, as JSON")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--sizes", default="[]", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        return worker(args)

    from benchmarks.studies.frameworks_cpu import interpreter_for
    from suite.projection.records import graph_tensors

    t = graph_tensors(ARCH)
    sizes = [t.named[k] for k in sorted(t.named)] + [t.statistics[k] for k in sorted(t.statistics)]
    buckets = [int(parse_size(b, "--buckets")) for b in args.buckets.split(",") if b]
    out = args.out or ROOT / "runs" / time.strftime("%Y%m%d-%H%M%S-jax-messages")
    out.mkdir(parents=True, exist_ok=True)
    python, how = interpreter_for("jax", None)
    load_before = list(os.getloadavg())
    bare = _bare(python, sizes, args.repeats)
    records = [r for r in _suite(out, buckets) if r["benchmark"]["name"] == "data_parallel"]
    load_after = list(os.getloadavg())
    projected = projected_two_rank(out)

    rows: list[dict[str, Any]] = []
    for rec in sorted(
        records, key=lambda r: (r["world_size"], r["benchmark"]["params"].get("bucket") or 0)
    ):
        step = next((m for m in rec.get("metrics") or [] if m["name"] == "step_time"), None)
        bucket = rec["benchmark"]["params"].get("bucket")
        what = (
            "no bucket: one gloo call per tensor"
            if not bucket
            else f"bucket {bucket / 2**20:g} MiB"
        )
        rows.append({
            "what": f"suite data_parallel, {rec['world_size']} rank(s), {what}",
            "status": rec["status"],
            "median_s": step["value"] if step else None,
            "ci95_s": step["ci95"] if step else None,
            "check": "pass" if rec["status"] == "ok" and rec["correctness"]["passed"] else "FAIL",
            "projected_s": projected.get(float(bucket) if bucket else None) if rec["world_size"] == 2 else None,
            "task_id": rec["task_id"],
        })  # fmt: skip
    n = len(sizes)
    for key, what in (
        ("per_tensor", f"bare pmean, {n} arrays"),
        ("one_buffer", "bare pmean, one flat buffer"),
    ):
        times = bare[key]["times_s"]
        med, (lo, hi) = float(np.median(times)), median_ci(times)  # as the suite's records
        err = bare[key]["worst_abs_error"]
        rows.append({"what": f"{what} ({sum(sizes) * 4 / 1e6:.2f} MB)", "status": "ok",
                     "median_s": med, "ci95_s": [lo, hi],
                     "check": f"{'pass' if err == 0.0 else 'FAIL'} (worst error {err:g})",
                     "projected_s": None, "times_s": times})  # fmt: skip
    print_rows(f"JAX's exchange on CPUs, 2 ranks ({how}: {python})", rows)
    print(
        f"load average before {load_before[0]:.2f}, after {load_after[0]:.2f}; the suite's run: {out / 'suite'}"
    )
    doc = {"rows": rows, "tensors": n, "bytes": sum(sizes) * 4, "repeats": args.repeats,
           "load_before": load_before, "load_after": load_after, "python": python}  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    return 0 if all(r["check"].startswith("pass") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
