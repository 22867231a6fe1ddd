"""Does the worker's telemetry slow what it measures? `dlsuite run` wraps every sampling
phase in the task's telemetry region (its host sampler thread wakes every 100 ms in the worker
process); `benchmarks/overhead.py` times `execute` without it. This times the same quick
operators both ways, alternating in one process, with a bare loop on the suite's tensors
as the yardstick, so the two overhead figures can be read together (issue 31).

    python benchmarks/overhead_telemetry.py [--rounds 7]

Ratios: the median of the round medians over the bare loop's, and the median of the paired
round ratios (with telemetry / without). Run on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import overhead as O  # noqa: E402

from suite.levels import execute, load_benchmark  # noqa: E402
from suite.measure import MeasureConfig  # noqa: E402
from suite.telemetry import TaskTelemetry  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--budget", type=float, default=2.0, help="seconds per measurement")
    args = ap.parse_args()
    adapter = O.CapturingAdapter()
    adapter.created = []
    info = adapter.setup("cpu")
    cfg = MeasureConfig(time_budget_s=args.budget, target_ci_rel=0.01, min_samples=10).to_dict()
    cases = [
        c
        for c in O.cpu_cases(False)
        if (c[0] == "conv2d" and c[1]["direction"] == "backward")
        or c[0] == "gelu"
        or (c[0] == "norm" and c[1]["kind"] == "layer")
    ]
    print(f"{'case':40s} {'without / bare':>15s} {'with / bare':>12s} {'with / without':>15s}")
    for name, params, dtype in cases:
        got: dict[str, list[float]] = {"without": [], "with": [], "bare": []}
        for r in range(args.rounds):
            same = None
            for kind in ("without", "with") if r % 2 == 0 else ("with", "without"):
                adapter.created = []
                tel = TaskTelemetry(task_id="overhead", rank=0, world_size=1)
                tel.open("cpu")
                if tel.host is None:
                    raise SystemExit(f"overhead_telemetry.py: no host telemetry: {tel.host_reason}")
                task = {"benchmark": name, "params": params, "dtype": dtype, "seed": 0,
                        "measure": cfg}  # fmt: skip
                if kind == "with":
                    out = execute(task, adapter, info, timed_region=tel.region)
                else:
                    out = execute(task, adapter, info)
                    same = O.suite_tensors(adapter, name, params, dtype, seed=0)
                if not out["correctness"]["passed"]:
                    raise SystemExit(f"overhead_telemetry.py: {name} failed its correctness checks")
                got[kind].append(out["metrics"][0]["median"])
            got["bare"].append(
                O.bare_loop(name, params, dtype, adapter.device, args.budget, 0, same)
            )
        bench = load_benchmark("operator", name)
        label = f"{name} {bench.label(bench.validate(params))} {dtype}"
        b = statistics.median(got["bare"])
        paired = [w / wo for w, wo in zip(got["with"], got["without"], strict=True)]
        print(
            f"{label:40s} {statistics.median(got['without']) / b:15.3f} "
            f"{statistics.median(got['with']) / b:12.3f} {statistics.median(paired):15.3f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
