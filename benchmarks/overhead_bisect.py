"""Where a small operator's suite/bare gap comes from: a bisection between the bare PyTorch loop
and the suite's measurement, one step at a time, interleaved in one process.

    python benchmarks/overhead_bisect.py [--case gemm256|conv_fwd|conv_bwd] [--rounds 21]

Each variant changes one thing from the one before it; every variant is timed the same way
(best-effort equal: the same inner count per sample, the same number of samples, median of
per-call times), rounds interleave the variants, and the table gives each variant's median
over rounds and its ratio to the bare loop (1.000 = no cost). Variants:

* ``bare``: ``torch.matmul(a, b)`` on ``torch.randn`` tensors, result discarded;
* ``suite inputs``: the same on the suite's tensors (seeded float64 NumPy, rounded, converted);
* ``suite callable``: the benchmark's timed callable (``build``: a dict of outputs), discarded;
* ``keep previous``: the result of call i kept alive while call i+1 runs, as ``Adapter.time``
  kept it before the fix (an output buffer the allocator cannot reuse: two alternate);
* ``adapter.time``: the adapter's ``time(fn, n)`` (synchronize, realize, wait);
* ``measure()``: the suite's measurement loop (warm-up, calibration, adaptive sampling).

Run on a quiet machine: the figures are ratios of medians of interleaved rounds, and a busy
machine moves them more than the effect being looked for.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from suite.adapters.pytorch.adapter import PyTorchAdapter  # noqa: E402
from suite.dtypes import quantize  # noqa: E402
from suite.levels import load_benchmark  # noqa: E402
from suite.measure import MeasureConfig, measure  # noqa: E402

CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "gemm256": ("gemm", {"m": 256, "n": 256, "k": 256}),
    "conv_fwd": ("conv2d", {"batch": 4, "in_channels": 32, "height": 28, "width": 28,
                            "out_channels": 32, "kernel": 3, "stride": 1, "padding": 1,
                            "direction": "forward"}),
    "conv_bwd": ("conv2d", {"batch": 4, "in_channels": 32, "height": 28, "width": 28,
                            "out_channels": 32, "kernel": 3, "stride": 1, "padding": 1,
                            "direction": "backward"}),
}  # fmt: skip


def loop(fn: Callable[[], Any], n: int, keep: bool) -> float:
    t0 = time.perf_counter()
    if keep:
        out = None
        for _ in range(n):
            out = fn()
        del out
    else:
        for _ in range(n):
            fn()
    return (time.perf_counter() - t0) / n


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--case", choices=sorted(CASES), default="gemm256")
    ap.add_argument("--rounds", type=int, default=21)
    ap.add_argument("--samples", type=int, default=25, help="samples per variant per round")
    args = ap.parse_args()

    adapter = PyTorchAdapter()
    adapter.setup("cpu")
    name, params = CASES[args.case]
    bench = load_benchmark("operator", name)
    p = bench.validate(params)
    inputs = {k: quantize(v, "fp32") for k, v in bench.inputs(p, np.random.default_rng(0)).items()}
    suite_t = bench._tensors(adapter, p, inputs, "fp32")  # type: ignore[attr-defined]
    fn = bench.build(adapter, p, suite_t)

    def fresh(x: Any) -> Any:
        return torch.randn(x.shape, dtype=x.dtype).requires_grad_(x.requires_grad)

    bare_t = {k: fresh(v) for k, v in suite_t.items()}
    if name == "gemm":

        def bare_op(t: dict[str, Any]) -> Callable[[], Any]:
            a, b = t["a"], t["b"]
            return lambda: torch.matmul(a, b)
    elif p["direction"] == "forward":

        def bare_op(t: dict[str, Any]) -> Callable[[], Any]:
            x, w = t["x"], t["w"]
            return lambda: F.conv2d(x, w, stride=p["stride"], padding=p["padding"])
    else:

        def bare_op(t: dict[str, Any]) -> Callable[[], Any]:
            x, w = t["x"].requires_grad_(True), t["w"].requires_grad_(True)
            y = F.conv2d(x, w, stride=p["stride"], padding=p["padding"])
            dy = t["dy"]
            return lambda: torch.autograd.grad(y, (x, w), dy, retain_graph=True)

    bare, on_suite_inputs = bare_op(bare_t), bare_op(suite_t)
    # the inner count: samples of at least 2 ms, as the suite's and the bare loop's calibration
    inner = 1
    while loop(bare, inner, False) * inner < 0.002:
        inner *= 2
    cfg = MeasureConfig(
        warmup_iters=3, warmup_s=0.0, min_samples=args.samples, max_samples=args.samples,
        time_budget_s=60.0, target_ci_rel=0.0,
    )  # fmt: skip

    def sampled(f: Callable[[int], float]) -> float:
        return statistics.median(f(inner) for _ in range(args.samples))

    variants: dict[str, Callable[[], float]] = {
        "bare": lambda: sampled(lambda n: loop(bare, n, False)),
        "suite inputs": lambda: sampled(lambda n: loop(on_suite_inputs, n, False)),
        "suite callable": lambda: sampled(lambda n: loop(fn, n, False)),
        "keep previous": lambda: sampled(lambda n: loop(fn, n, True)),
        "adapter.time": lambda: sampled(lambda n: adapter.time(fn, n) / n),
        "measure()": lambda: statistics.median(measure(lambda n: adapter.time(fn, n), cfg).samples),
    }
    for v in variants.values():  # warm every path
        v()
    results: dict[str, list[float]] = {k: [] for k in variants}
    for r in range(args.rounds):
        order = list(variants) if r % 2 == 0 else list(reversed(variants))
        for k in order:
            results[k].append(variants[k]())
    base = statistics.median(results["bare"])
    table = Table(
        title=f"{args.case}: {bench.label(p)} fp32, {inner} calls per sample, "
        f"{args.samples} samples x {args.rounds} interleaved rounds, torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads"
    )
    for col in ("variant", "median per call", "ratio to bare", "round ratios p25-p75"):
        table.add_column(col)
    for k, vals in results.items():
        ratios = sorted(v / b for v, b in zip(vals, results["bare"], strict=True))
        q1, q3 = ratios[len(ratios) // 4], ratios[(3 * len(ratios)) // 4]
        table.add_row(
            k, f"{statistics.median(vals) * 1e6:.1f} us",
            f"{statistics.median(vals) / base:.3f}", f"{q1:.3f}-{q3:.3f}",
        )  # fmt: skip
    Console(width=140).print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
