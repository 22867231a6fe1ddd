"""The optimizer benchmark's timing harness against a bare call, sample by sample.

``optimizer_vs_bare.py`` compares whole records, round by round; on a shared machine whose
speed drifts between rounds (this VM: the same fused AdamW step at 17 ms in one minute and
84 ms in another) that comparison measures the drift. This one isolates the harness: one
PyTorch fused AdamW handle built by the adapter's optimizer words, stepped alternately through
the suite's timed call (``adapter.time(lambda: adapter.optimizer_step(handle), 1)``, what the
measure loop samples) and through a bare ``optimizer.step()`` between two ``perf_counter``
reads, the order alternating per pair.

    .venv/bin/python benchmarks/optimizer_harness_pairs.py [--params zoo:resnet50:full] [--pairs 60]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from suite.adapters import ADAPTERS  # noqa: E402
from suite.adapters.optimizer_words import OptimizerSpec  # noqa: E402
from suite.dtypes import quantize  # noqa: E402
from suite.optimizers import catalogue  # noqa: E402
from suite.optimizers.gradients import gradients, parameter_set  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", default="zoo:resnet50:full")
    ap.add_argument("--pairs", type=int, default=60)
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    args = ap.parse_args()
    adapter = ADAPTERS.load("pytorch")()
    device = adapter.setup(args.device)
    ps = parameter_set(args.params)
    params0 = {n: quantize(v, "fp32") for n, v in ps.params.items()}
    spec = OptimizerSpec(
        "adamw", catalogue.get("adamw").complete({}), "fused", "fp32", False, tuple(ps.params)
    )
    handle = adapter.optimizer_build(spec, params0)
    grads = {n: quantize(g, "fp32") for n, g in gradients(ps.shapes, 1).items()}
    adapter.optimizer_set_gradients(handle, grads)
    for _ in range(5):
        adapter.optimizer_step(handle)
    print(f"{device.name}, {args.params}, {args.pairs} pairs; load {os.getloadavg()}")
    suite: list[float] = []
    bare: list[float] = []
    for i in range(args.pairs):
        for side in ("suite", "bare") if i % 2 == 0 else ("bare", "suite"):
            if side == "suite":
                suite.append(adapter.time(lambda: adapter.optimizer_step(handle), 1))
            else:
                adapter.synchronize()
                t0 = time.perf_counter()
                handle.optimizer.step()
                adapter.synchronize()
                bare.append(time.perf_counter() - t0)
    ratio = statistics.median(suite) / statistics.median(bare)
    pairwise = statistics.median(s / b for s, b in zip(suite, bare, strict=True))
    print(
        f"suite median {statistics.median(suite) * 1e3:.3f} ms, bare median "
        f"{statistics.median(bare) * 1e3:.3f} ms: ratio {ratio:.4f}, median of per-pair "
        f"ratios {pairwise:.4f}; load {os.getloadavg()}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
