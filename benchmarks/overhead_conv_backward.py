"""Conv2d backward (the quick size, fp32: the case the suite reads highest against a bare loop,
issue 31) timed six ways on the same input tensors, interleaved, the order alternating: the
bare loop of `overhead.py` (which builds its autograd graph anew every round), a bare sampler
on a bare call whose graph was built once at the start, the same sampler on the suite's timed
callable and on `Adapter.time`, and `measure()` on the bare call and on `Adapter.time`.

    python benchmarks/overhead_conv_backward.py [--rounds 8]

Ratios are medians over rounds against the first. Run on an otherwise idle machine.
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import overhead as O  # noqa: E402

from suite.adapters.pytorch.adapter import PyTorchAdapter  # noqa: E402
from suite.dtypes import quantize  # noqa: E402
from suite.levels import load_benchmark  # noqa: E402
from suite.measure import MeasureConfig, measure  # noqa: E402

ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
ap.add_argument("--rounds", type=int, default=8)
args = ap.parse_args()
ad = PyTorchAdapter()
info = ad.setup("cpu")
B = 1.5
cfg = MeasureConfig(time_budget_s=B, target_ci_rel=0.01, min_samples=10)
name, p, dt = [
    c
    for c in O.cpu_cases(True)
    if c[0] == "conv2d" and c[2] == "fp32" and c[1]["direction"] == "backward"
][0]
bench = load_benchmark("operator", name)
pv = bench.validate(p)
inp = {k: quantize(v, dt) for k, v in bench.inputs(pv, np.random.default_rng(0)).items()}
ts = bench._tensors(ad, pv, inp, dt)
fn = bench.build(ad, pv, ts)
op = O.bare_op(name, pv, ts)


def plain(f):
    def timen(n):
        t0 = time.perf_counter()
        for _ in range(n):
            f()
        return time.perf_counter() - t0

    return timen


def sampler(timen, inner, secs=B):
    for _ in range(3):
        timen(1)
    s = []
    end = time.perf_counter() + secs
    while time.perf_counter() < end or len(s) < 10:
        s.append(timen(inner) / inner)
    return statistics.median(s)


def med(m):
    return statistics.median(m.samples)


V = {
    "overhead.py's bare loop (graph anew)": lambda: O.bare_loop(name, p, dt, ad.device, B, 0, ts),
    "sampler, bare op": lambda: sampler(plain(op), 4),
    "sampler, suite fn": lambda: sampler(plain(fn), 4),
    "sampler, adapter.time(fn)": lambda: sampler(lambda n: ad.time(fn, n), 4),
    "measure, bare op": lambda: med(measure(plain(op), cfg)),
    "measure, adapter.time(fn)": lambda: med(measure(lambda n: ad.time(fn, n), cfg)),
}
got = {k: [] for k in V}
R = args.rounds
for r in range(R):
    for k in list(V) if r % 2 == 0 else list(reversed(V)):
        got[k].append(V[k]())
b = statistics.median(got["overhead.py's bare loop (graph anew)"])
print(f"conv2d backward {bench.label(pv)} fp32, {R} rounds, {B} s each")
for k, v in got.items():
    print(f"{k:38s} {statistics.median(v) / b:.3f}  rounds " + " ".join(f"{x / b:.3f}" for x in v))
