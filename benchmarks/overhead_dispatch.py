"""What the suite's way of calling an operator costs per call, alone: the benchmark's timed
callable (`build`: the adapter's word, its outputs in a dict) against the bare PyTorch call
(`benchmarks/overhead.py`'s `bare_op`) on the same tiny tensors, one thread, so the operator
itself is a microsecond or two and the difference is the Python between (issue 31).

    python benchmarks/overhead_dispatch.py

Each figure is the best of 7 repeats of 20,000 calls; the two alternate twice.
"""

from __future__ import annotations

import sys
import timeit
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from overhead import bare_op  # noqa: E402

from suite.adapters.pytorch.adapter import PyTorchAdapter  # noqa: E402
from suite.levels import load_benchmark  # noqa: E402

TINY: list[tuple[str, dict[str, Any]]] = [
    ("gemm", {"m": 2, "n": 2, "k": 2}),
    ("softmax", {"rows": 2, "cols": 4}),
    ("gelu", {"rows": 2, "cols": 4}),
    ("norm", {"kind": "layer", "batch": 2, "channels": 4, "height": 1, "width": 1}),
]


def main() -> int:
    adapter = PyTorchAdapter()
    adapter.setup("cpu")
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, 1 thread; ns per call, best of 7 x 20,000")
    for name, params in TINY:
        bench = load_benchmark("operator", name)
        p = bench.validate(params)
        inputs = bench.inputs(p, np.random.default_rng(0))
        t = bench._tensors(adapter, p, inputs, "fp32")  # type: ignore[attr-defined]
        fn = bench.build(adapter, p, t)  # type: ignore[attr-defined]
        op = bare_op(name, p, t)
        for k, v in fn().items():  # the same values either way
            want = op()
            assert torch.equal(v, want if not isinstance(want, tuple) else want[0]), k
        best: dict[str, list[float]] = {"bare": [], "suite": []}
        for _ in range(2):
            for label, f in (("bare", op), ("suite", fn)):
                best[label].append(min(timeit.repeat(f, number=20_000, repeat=7)) / 20_000)
        b, s = min(best["bare"]) * 1e9, min(best["suite"]) * 1e9
        print(f"{bench.label(p):>14s} {name:8s} bare {b:6.0f}  suite {s:6.0f}  +{s - b:4.0f} ns")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
