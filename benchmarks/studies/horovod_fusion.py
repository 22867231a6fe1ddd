"""Horovod's fusion threshold as data_parallel's ``bucket``: the suite's 2-rank data-parallel
step at each threshold beside a bare Horovod loop (``horovodrun --gloo``, the same network
with ``hvd.DistributedOptimizer``, HOROVOD_FUSION_THRESHOLD in the ranks' environment) at the
same thresholds, in the same run; beside each suite row, what ``dlsuite project`` makes of it
from the one-rank records and the run's allreduce sweep alone (the 2-rank records held out).

    python -m benchmarks.studies.horovod_fusion [--thresholds 4KiB,1MiB,128MiB]
        [--steps 100] [--out DIR] [--json FILE]

The network is the zoo's MLP with 40 layers of 512 x 512 and a head to 10 classes (82 tensors:
40 weights of exactly 1 MiB, their biases of 2 KiB, the head's two), per-rank batch 8, one
thread a rank. Every row carries its check from the
same run: the suite's records' correctness (the data-parallel network equal to one process on
the global batch, the ranks' weights identical), the bare loop's (every loss finite, the ranks'
weights identical after the timed steps). docs/guide/projection.md ("Horovod's fusion
threshold measured on this machine") cites it.
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

from benchmarks.studies.jax_messages import print_rows, projected_two_rank, suite_data_parallel
from suite.metrics.base import median_ci
from suite.params import parse_size

ROOT = Path(__file__).resolve().parents[2]
#: the deep MLP of docs/results/projection-bucket/ and docs/results/horovod-fusion/
ARCH = {"network": "mlp", "features": 512, "hidden": 512, "layers": 40, "classes": 10}
BATCH, LR = 8, 1e-4


def worker(args: argparse.Namespace) -> int:
    """One rank of the bare loop (run by horovodrun in Horovod's environment)."""
    import horovod.torch as hvd
    import torch

    torch.set_num_threads(1)
    hvd.init()
    torch.manual_seed(0)  # the same weights on every rank; Horovod broadcasts them anyway
    layers: list[torch.nn.Module] = []  # the zoo's MLP: (Gemm + ReLU) x layers, a head
    width = ARCH["features"]
    for _ in range(ARCH["layers"]):
        layers += [torch.nn.Linear(width, ARCH["hidden"]), torch.nn.ReLU()]
        width = ARCH["hidden"]
    layers.append(torch.nn.Linear(width, ARCH["classes"]))
    net = torch.nn.Sequential(*layers)
    opt = hvd.DistributedOptimizer(
        torch.optim.SGD(net.parameters(), lr=LR), named_parameters=net.named_parameters()
    )
    hvd.broadcast_parameters(net.state_dict(), root_rank=0)
    gen = torch.Generator().manual_seed(1 + hvd.rank())  # each rank its own shard
    x = torch.randn(BATCH, ARCH["features"], generator=gen)
    y = torch.randint(0, ARCH["classes"], (BATCH,), generator=gen)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step() -> float:
        opt.zero_grad()
        loss = loss_fn(net(x), y)
        loss.backward()
        opt.step()  # waits for every gradient's allreduce
        return float(loss)

    for _ in range(5):
        step()
    times, losses = [], []
    for _ in range(args.steps):
        t = time.perf_counter()
        losses.append(step())
        times.append(time.perf_counter() - t)
    flat = torch.cat([p.detach().reshape(-1) for p in net.parameters()])
    every = hvd.allgather(flat.unsqueeze(0))
    spread = float((every - every[0]).abs().max() / every[0].abs().max())
    if hvd.rank() == 0:
        print("RESULT " + json.dumps({"times_s": times, "losses_finite": bool(np.all(np.isfinite(losses))),
                                      "weights_max_rel_diff": spread,
                                      "threshold_env": os.environ.get("HOROVOD_FUSION_THRESHOLD")}),
              flush=True)  # fmt: skip
    hvd.shutdown()
    return 0


def _bare(python: str, threshold: int, steps: int) -> dict[str, Any]:
    horovodrun = str(Path(python).parent / "horovodrun")
    env = {**os.environ, "HOROVOD_FUSION_THRESHOLD": str(threshold), "OMP_NUM_THREADS": "1",
           "PYTHONPATH": str(ROOT)}  # fmt: skip
    cmd = [horovodrun, "--gloo", "-np", "2", "-H", "localhost:2", python, "-m",
           "benchmarks.studies.horovod_fusion", "--worker", "--steps", str(steps)]  # fmt: skip
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    line = next((ln for ln in proc.stdout.splitlines() if "RESULT " in ln), None)
    if proc.returncode or line is None:
        raise SystemExit(f"the bare loop failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return dict(json.loads(line[line.index("RESULT ") + len("RESULT ") :]))


def _suite(out: Path, thresholds: list[int], budget: float) -> list[dict[str, Any]]:
    fields = ", ".join(f"{k} = {json.dumps(v)}" for k, v in ARCH.items())
    sizes = [
        f'{{ {fields}, scaling = "weak", batch = {BATCH}, lr = {LR}, bucket = {b} }}'
        for b in thresholds
    ]
    return suite_data_parallel(
        out / "horovod-fusion.toml",
        "horovod",
        sizes,
        f"time_budget_s = {budget}",
        {"OMP_NUM_THREADS": "1"},
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--thresholds", default="4KiB,1MiB,128MiB", help="fusion thresholds")
    ap.add_argument("--steps", type=int, default=100, help="bare steps timed per threshold")
    ap.add_argument(
        "--budget", type=float, default=20.0, help="the suite's seconds of sampling per task"
    )
    ap.add_argument("--out", type=Path, default=None, help="where the suite's run goes")
    ap.add_argument("--json", type=Path, default=None, help="every figure, as JSON")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        return worker(args)

    from benchmarks.studies.frameworks_cpu import interpreter_for
    from suite.levels.distributed.arithmetic import human_bytes

    thresholds = [int(parse_size(b, "--thresholds")) for b in args.thresholds.split(",") if b]
    out = args.out or ROOT / "runs" / time.strftime("%Y%m%d-%H%M%S-horovod-fusion")
    out.mkdir(parents=True, exist_ok=True)
    python, how = interpreter_for("horovod", None)
    load_before = list(os.getloadavg())
    bare = {b: _bare(python, b, args.steps) for b in thresholds}
    records = [
        r for r in _suite(out, thresholds, args.budget) if r["benchmark"]["name"] == "data_parallel"
    ]
    load_after = list(os.getloadavg())
    projected = projected_two_rank(out)

    rows: list[dict[str, Any]] = []
    for b in thresholds:
        for rec in records:
            if rec["benchmark"]["params"].get("bucket") != b or rec["world_size"] != 2:
                continue
            step = next((m for m in rec.get("metrics") or [] if m["name"] == "step_time"), None)
            work = rec.get("work") or {}
            ok = rec["status"] == "ok" and rec["correctness"]["passed"]
            started = work.get("horovod_fusion_threshold_bytes")
            rows.append({
                "what": f"suite data_parallel, threshold {human_bytes(b)}", "threshold": b,
                "median_s": step["value"] if step else None,
                "ci95_s": step["ci95"] if step else None,
                "check": ("pass" if ok else "FAIL") + f" (Horovod started with {started})",
                "passed": ok and started == b,
                "projected_s": projected.get(float(b)), "task_id": rec["task_id"],
            })  # fmt: skip
        got = bare[b]
        times = got["times_s"]
        med, (lo, hi) = float(np.median(times)), median_ci(times)  # as the suite's records
        ok = got["losses_finite"] and got["weights_max_rel_diff"] <= 1e-6
        rows.append({
            "what": f"bare horovodrun loop, threshold {human_bytes(b)}", "threshold": b,
            "median_s": med, "ci95_s": [lo, hi],
            "check": ("pass" if ok else "FAIL")
            + f" (weights {got['weights_max_rel_diff']:.1e} apart)",
            "passed": ok and got["threshold_env"] == str(b),
            "projected_s": None, "times_s": times,
        })  # fmt: skip
    print_rows(f"Horovod's fusion threshold, 2 ranks ({how}: {python})", rows)
    print(
        f"load average before {load_before[0]:.2f}, after {load_after[0]:.2f}; "
        f"the suite's run: {out / 'suite'}"
    )
    doc = {"rows": rows, "arch": ARCH, "batch": BATCH, "steps": args.steps,
           "load_before": load_before, "load_after": load_after, "python": python}  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    return 0 if rows and all(r["passed"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
