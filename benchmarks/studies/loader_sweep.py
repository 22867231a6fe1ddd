"""The PyTorch loader over the quick set at 1, 2, 4 ... up to the cores workers (warm), and,
where a GPU and the zoo's dependencies are there, the feed benchmark on it: how many cores of
this machine's loader it takes to keep its accelerator busy. One JSON line per record on
stdout. Used on the lent GPU machine (docs/reference/training-level.md).

    python -m benchmarks.studies.loader_sweep [--data-dir DIR] [--batch 64] [--feed]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from suite.levels.training.loader import usable_cores, worker_sweep


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--feed", action="store_true", help="also the feed benchmark on the device")
    ap.add_argument("--device", default="auto")
    args = ap.parse_args()
    from suite.adapters import ADAPTERS
    from suite.levels import execute

    adapter = ADAPTERS.load("pytorch")()
    device = adapter.setup(args.device)
    t0 = time.time()
    from suite.datasets import make as M

    data_dir = args.data_dir or str(Path.home() / ".cache/dlsuite/data")
    M.make_imagefolder(Path(data_dir), "quick")
    print(json.dumps({"made_s": time.time() - t0, "cores": usable_cores(),
                      "device": device.name, "load": os.getloadavg()}), flush=True)  # fmt: skip
    for workers in worker_sweep(usable_cores(), quick=False):
        task = {"benchmark": "loader", "level": "training", "dtype": "fp32", "seed": 0,
                "world_size": 1, "data": {"dir": data_dir},
                "params": {"format": "folder", "workers": workers, "batch": args.batch,
                           "cache": "warm", "transform": "train", "dataset": "quick"}}  # fmt: skip
        out = execute(task, adapter, device)
        assert isinstance(out, dict)
        m = {x["name"]: x["value"] for x in out["metrics"]}
        print(json.dumps({"benchmark": "loader", "workers": workers, "throughput": m["throughput"],
                          "steady": out["pipeline"]["epoch"]["steady_rate"],
                          "cores": m["pipeline_cpu_cores"], "passed": out["correctness"]["passed"],
                          "feeding": out["pipeline"]["feeding"],
                          "load": os.getloadavg()}), flush=True)  # fmt: skip
    if args.feed and device.kind == "gpu":
        for workers in (2, 8, max(2, usable_cores() - 2)):
            task = {"benchmark": "feed", "level": "training", "dtype": "fp32", "seed": 0,
                    "world_size": 1, "data": {"dir": data_dir},
                    "params": {"format": "folder", "workers": workers, "batch": args.batch,
                               "dataset": "quick", "network": "resnet50", "steps": 20,
                               "warmup": 5}}  # fmt: skip
            try:
                out = execute(task, adapter, device)
            except Exception as exc:  # noqa: BLE001 - report and go on
                print(
                    json.dumps({"benchmark": "feed", "workers": workers, "error": str(exc)[:300]})
                )
                continue
            assert isinstance(out, dict)
            print(json.dumps({"benchmark": "feed", "workers": workers, **out["end_to_end"],
                              "passed": out["correctness"]["passed"]}), flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
