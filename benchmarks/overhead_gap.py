"""What a pause between two samples costs the next one: the suite's timed callable (conv2d
backward, N4 C32 28x28 fp32, the case the small-operator bias is largest for; issue 31)
sampled by a bare sampler (4 calls per sample, 2 s, median), with nothing between samples, with
the statistics `measure()` computed at its checkpoints before issue 31's fix (`summarise`), with
a 200 us and a 2 ms sleep (the core goes idle), a 200 us busy wait on the clock (the core stays
busy, touching no memory), and a read of 4 MiB (the caches evicted, no pause to speak of); and
the first two again with one untimed call after the pause (what `measure()` now does after each
check). Rounds interleave the variants, the order alternating.

    python benchmarks/overhead_gap.py [--rounds 6]

Run with the machine otherwise idle. docs/overhead-cpu.md holds what it read.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from metrics.base import summarise  # noqa: E402
from suite.adapters.pytorch.adapter import PyTorchAdapter  # noqa: E402
from suite.dtypes import quantize  # noqa: E402
from suite.levels import load_benchmark  # noqa: E402

CASE = {"batch": 4, "in_channels": 32, "height": 28, "width": 28, "out_channels": 32,
        "kernel": 3, "stride": 1, "padding": 1, "direction": "backward"}  # fmt: skip
INNER = 4  # calls per sample: what the suite's calibration chooses for this case here


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--seconds", type=float, default=2.0, help="sampling time per variant")
    args = ap.parse_args()

    adapter = PyTorchAdapter()
    adapter.setup("cpu")
    bench = load_benchmark("operator", "conv2d")
    p = bench.validate(CASE)
    rng = np.random.default_rng(0)
    x = {k: quantize(v, "fp32") for k, v in bench.inputs(p, rng).items()}  # type: ignore[attr-defined]
    tensors = bench._tensors(adapter, p, x, "fp32")  # type: ignore[attr-defined]
    fn = bench.build(adapter, p, tensors)  # type: ignore[attr-defined]

    def run(n: int) -> float:
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        return time.perf_counter() - t0

    def sampler(gap: Callable[[list[float]], object]) -> float:
        for _ in range(3):
            run(1)
        samples: list[float] = []
        end = time.perf_counter() + args.seconds
        while time.perf_counter() < end or len(samples) < 10:
            samples.append(run(INNER) / INNER)
            gap(samples)
        return statistics.median(samples)

    evict = np.ones(1 << 19)  # 4 MiB of float64: more than this CPU's L2

    def spin(seconds: float) -> None:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            pass

    def rewarm(gap: Callable[[list[float]], object]) -> Callable[[list[float]], object]:
        def then_one_call(s: list[float]) -> None:
            gap(s)
            fn()

        return then_one_call

    gaps: dict[str, Callable[[list[float]], object]] = {
        "nothing between samples": lambda s: None,
        "summarise (pre-fix check)": lambda s: summarise(s),
        "sleep 200 us": lambda s: time.sleep(0.0002),
        "sleep 2 ms": lambda s: time.sleep(0.002),
        "busy wait 200 us": lambda s: spin(0.0002),
        "read 4 MiB": lambda s: float(evict.sum()),
        "summarise, then 1 call": rewarm(lambda s: summarise(s)),
        "sleep 200 us, then 1 call": rewarm(lambda s: time.sleep(0.0002)),
    }
    got: dict[str, list[float]] = {k: [] for k in gaps}
    for i in range(args.rounds):
        for k in list(gaps) if i % 2 == 0 else list(reversed(gaps)):
            got[k].append(sampler(gaps[k]))
    base = statistics.median(got["nothing between samples"])
    print(f"conv2d backward N4 C32 28x28 fp32, {INNER} calls per sample, {args.rounds} rounds")
    for k, v in got.items():
        rounds = ", ".join(f"{r / base:.3f}" for r in v)
        print(f"{k:27s} {statistics.median(v) / base:.3f}  (rounds {rounds})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
