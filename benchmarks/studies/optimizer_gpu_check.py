"""The optimizer benchmark on a GPU (a lent device machine): PyTorch's three implementations
and optax jitted, on flat parameter sets large enough to be bound by HBM bandwidth, each
record with its correctness check, step time, GB/s and % of the GPU's declared bandwidth.

    python -m benchmarks.studies.optimizer_gpu_check OUT_DIR [--sizes 16777216,67108864]

Writes every record to OUT_DIR/records.json and prints a table. Framework-specific parts are
the suite's adapters (suite/adapters/{pytorch,jax}/optimizers.py); nothing here is new
measurement code.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from suite.adapters import ADAPTERS
from suite.levels import execute

CASES = {
    "pytorch": ["sgd", "momentum", "adam", "adamw", "adagrad", "rmsprop"],
    "jax": ["momentum", "adamw", "lamb", "lars"],
}


def run(framework: str, sizes: list[int], steps: int, budget: float) -> list[dict[str, Any]]:
    adapter = ADAPTERS.load(framework)()
    device = adapter.setup("cuda")
    out = []
    for size in sizes:
        for optimizer in CASES[framework]:
            task = {
                "level": "training", "benchmark": "optimizer", "dtype": "fp32", "seed": 0,
                "measure": {"time_budget_s": budget},
                "params": {"optimizer": optimizer, "params": f"flat:{size}", "steps": steps},
            }  # fmt: skip
            t0 = time.time()
            try:
                recs = execute(task, adapter, device)
            except Exception as exc:  # noqa: BLE001 - a device check reports, never stops
                print(f"{framework} {optimizer} {size}: {type(exc).__name__}: {exc}", flush=True)
                continue
            for rec in recs if isinstance(recs, list) else [recs]:
                m = {x["name"]: x.get("median", x.get("value")) for x in rec["metrics"]}
                sec = rec["optimizer"]
                checks = {c["name"].split(".")[0]: c["error"] for c in rec["correctness"]["checks"]}
                print(
                    f"{framework:8s} {optimizer:9s} {sec['implementation']:8s} {size:>10d} "
                    f"{m['time'] * 1e3:9.3f} ms {m['bandwidth']:8.1f} GB/s "
                    f"{m.get('percent_of_peak_bandwidth', float('nan')):5.1f}% "
                    f"{'pass' if rec['correctness']['passed'] else 'FAIL'} {checks} "
                    f"({time.time() - t0:.0f} s)",
                    flush=True,
                )
                rec["device"] = device.to_dict()
                out.append(rec)
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--sizes", default="16777216,67108864")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--budget", type=float, default=1.0)
    ap.add_argument("--frameworks", default="pytorch,jax")
    ap.add_argument("--only", default="", help="framework:optimizer,... (default: CASES)")
    args = ap.parse_args()
    if args.only:
        CASES.clear()
        for item in args.only.split(","):
            fw, _, opt = item.partition(":")
            CASES.setdefault(fw, []).append(opt)
        args.frameworks = ",".join(CASES)
    sizes = [int(s) for s in args.sizes.split(",")]
    records = []
    for fw in args.frameworks.split(","):
        try:
            records += run(fw, sizes, args.steps, args.budget)
        except Exception as exc:  # noqa: BLE001
            print(f"{fw}: {type(exc).__name__}: {exc}", flush=True)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    Path(args.out, "records.json").write_text(json.dumps(records, default=str, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
