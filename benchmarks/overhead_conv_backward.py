"""Conv2d backward (the quick size, fp32, about 0.6 ms a call: the case the suite read highest
against a bare loop, issue 31), timed several ways on the same input tensors and paired
sample by sample: each round takes one sample (4 calls, as the suite calibrates here) of
every way in turn, the order reversing every round, so drift of the machine hits all alike
and a ratio is the median of thousands of paired ratios.

    python benchmarks/overhead_conv_backward.py [--seconds 60]

The ways: the bare loop (`torch.autograd.grad` on a graph of its own, each result dropped);
the suite's timed callable (`build`) in the same loop; `Adapter.time` on it (what the suite
times); the two as they were before the Python between calls was cut (the callable's
gradients put in a dict by `dict(zip(..., strict=True))` then re-keyed, and a timed loop
calling the no-op `realize` after every call); and the bare call followed by a little Python
of no use: one `dict(zip(...))` (0.6 us) or a 0.6 us busy wait on the clock, to show that
the Python after a call costs more than its own time. Run on an otherwise idle machine.
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

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import overhead as O  # noqa: E402

from suite.dtypes import quantize  # noqa: E402
from suite.levels import load_benchmark  # noqa: E402

INNER = 4


def loop(f: Callable[[], Any]) -> Callable[[int], float]:
    """The bare loop: each call's result dropped as it returns."""

    def timen(n: int) -> float:
        t0 = time.perf_counter()
        for _ in range(n):
            f()
        return time.perf_counter() - t0

    return timen


def old_time_loop(adapter: O.CapturingAdapter, f: Callable[[], Any]) -> Callable[[int], float]:
    """`Adapter.time` before f09d7ad: the previous outputs released, then the no-op
    `realize` called after every call."""

    def timen(n: int) -> float:
        adapter.synchronize()
        t0 = time.perf_counter()
        out = None
        for _ in range(n):
            out = None
            out = f()
            adapter.realize(out)
        adapter.wait(out)
        adapter.synchronize()
        return time.perf_counter() - t0

    return timen


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=60.0, help="how long to sample")
    args = ap.parse_args()
    adapter = O.CapturingAdapter()
    adapter.created = []
    adapter.setup("cpu")
    name, params, dtype = next(
        c
        for c in O.cpu_cases(False)
        if c[0] == "conv2d" and c[2] == "fp32" and c[1]["direction"] == "backward"
    )
    bench = load_benchmark("operator", name)
    p = bench.validate(params)
    inputs = {k: quantize(v, dtype) for k, v in bench.inputs(p, np.random.default_rng(0)).items()}
    t = bench._tensors(adapter, p, inputs, dtype)
    suite_fn = bench.build(adapter, p, t)
    bare = O.bare_op(name, p, t)  # its own graph on the same tensors
    x, w, dy = t["x"], t["w"], t["dy"]
    y = torch.nn.functional.conv2d(x, w, stride=p["stride"], padding=p["padding"])
    names = ["x", "w"]

    def old_suite_fn() -> dict[str, Any]:  # the vjp callable and conv2d's run() before f09d7ad
        g = dict(zip(names, torch.autograd.grad(y, [x, w], dy, retain_graph=True), strict=True))
        return {"dx": g["x"], "dw": g["w"]}

    def bare_then_dict() -> Any:
        g = torch.autograd.grad(y, (x, w), dy, retain_graph=True)
        dict(zip(names, [1, 2], strict=True))
        return g

    def bare_then_wait() -> Any:
        g = torch.autograd.grad(y, (x, w), dy, retain_graph=True)
        end = time.perf_counter() + 0.6e-6
        while time.perf_counter() < end:
            pass
        return g

    ways: dict[str, Callable[[int], float]] = {
        "bare loop": loop(bare),
        "bare loop, the suite's callable": loop(suite_fn),
        "Adapter.time, the suite's callable (the suite)": lambda n: adapter.time(suite_fn, n),
        "before: old Adapter.time, old callable": old_time_loop(adapter, old_suite_fn),
        "bare loop, the old callable": loop(old_suite_fn),
        "bare call + dict(zip(...)) (0.6 us)": loop(bare_then_dict),
        "bare call + 0.6 us busy wait": loop(bare_then_wait),
    }
    keys = list(ways)
    for k in keys:
        ways[k](2)
    got: dict[str, list[float]] = {k: [] for k in keys}
    end = time.perf_counter() + args.seconds
    r = 0
    while time.perf_counter() < end:
        for k in keys if r % 2 == 0 else reversed(keys):
            got[k].append(ways[k](INNER) / INNER)
        r += 1
    base = got[keys[0]]
    print(
        f"conv2d backward {bench.label(p)} fp32, {torch.get_num_threads()} threads, "
        f"{len(base)} paired samples of {INNER} calls each, {args.seconds:.0f} s"
    )
    print(f"{'way':50s} {'median us':>10s} {'ratio of medians':>17s} {'median paired ratio':>20s}")
    for k in keys:
        paired = [a / b for a, b in zip(got[k], base, strict=True)]
        med = statistics.median(got[k])
        print(
            f"{k:50s} {med * 1e6:10.1f} {med / statistics.median(base):17.4f} "
            f"{statistics.median(paired):20.4f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
