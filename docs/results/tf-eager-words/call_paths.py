"""Each TensorFlow operator word three ways, forward and backward, at the quick fp32 sizes: as a
``tf.function`` (what every word was before e9672ca), eagerly (what a bare ``tf.matmul(a, b)``
loop does), and through a traced concrete function called directly. Rounds interleave the
paths; each cell is the median of the rounds (the adapter's own ``time``, 40 calls a round).

    PYTHONPATH=. $DLSUITE_ENVS_DIR/tensorflow-<hash>/bin/python \
        docs/results/tf-eager-words/call_paths.py [ROUNDS]

Its output on the 2-core AMD EPYC VM, 2026-12-02: call_paths.txt beside this file.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
from suite.adapters.tensorflow.adapter import TensorFlowAdapter  # noqa: E402

ad = TensorFlowAdapter()
ad.setup("cpu")
tf = ad.tf
rng = np.random.default_rng(0)


def t(*shape: int) -> Any:
    return ad.from_numpy(rng.standard_normal(shape), "fp32")


WORDS: dict[str, tuple[Callable[..., Any], dict[str, Any], tuple[int, ...]]] = {
    "gemm": (lambda a, b: ad.matmul(a, b), {"a": t(256, 256), "b": t(256, 256)}, (256, 256)),
    "conv2d": (lambda x, w: ad.conv2d(x, w, stride=1, padding=1),
               {"x": t(4, 32, 28, 28), "w": t(32, 32, 3, 3)}, (4, 32, 28, 28)),
    "softmax": (lambda x: ad.softmax(x), {"x": t(2048, 128)}, (2048, 128)),
    "gelu": (lambda x: ad.gelu(x), {"x": t(1024, 1024)}, (1024, 1024)),
    "layer_norm": (lambda x, g, b: ad.layer_norm(x, g, b, eps=1e-5),
                   {"x": t(512, 256), "g": t(256), "b": t(256)}, (512, 256)),
    "batch_norm": (lambda x, g, b: ad.batch_norm(x, g, b, eps=1e-5),
                   {"x": t(8, 32, 28, 28), "g": t(32), "b": t(32)}, (8, 32, 28, 28)),
    "attention": (lambda q, k, v: ad.attention(q, k, v, causal=False),
                  {"q": t(2, 4, 128, 32), "k": t(2, 4, 128, 32), "v": t(2, 4, 128, 32)},
                  (2, 4, 128, 32)),
}  # fmt: skip


class Concrete:
    """A word traced once per (Python arguments, shapes, dtypes), its concrete function called."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn, self.cache = fn, {}  # type: ignore[var-annotated]

    def __call__(self, *args: Any) -> Any:
        tensors = [a for a in args if hasattr(a, "dtype")]
        key = (tuple(a for a in args if not hasattr(a, "dtype")),
               tuple((tuple(a.shape), a.dtype) for a in tensors))  # fmt: skip
        cf = self.cache.get(key)
        if cf is None:
            where = [i for i, a in enumerate(args) if hasattr(a, "dtype")]

            def bound(*ts: Any, args: tuple[Any, ...] = args) -> Any:
                full = list(args)
                for i, x in zip(where, ts, strict=True):
                    full[i] = x
                return self.fn(*full)

            traced = tf.function(lambda *ts: bound(*ts), autograph=False)
            cf = self.cache[key] = traced.get_concrete_function(*tensors)
        return cf(*tensors)


plain = {name: getattr(f, "python_function", f) for name, f in ad._ops.items()}
PATHS = {
    "function": {n: tf.function(f, autograph=False) for n, f in plain.items()},
    "eager": plain,
    "concrete": {n: Concrete(f) for n, f in plain.items()},
}
calls = {}
for path, ops in PATHS.items():
    ad._ops = ops
    for name, (word, primals, cot) in WORDS.items():
        calls[(path, name, "fwd")] = lambda word=word, primals=primals: word(**primals)
        calls[(path, name, "bwd")] = ad.vjp(word, primals, t(*cot))
times: dict[tuple[str, str, str], list[float]] = {k: [] for k in calls}
for _ in range(int(sys.argv[1]) if len(sys.argv) > 1 else 7):
    for key, fn in calls.items():
        ad._ops = PATHS[key[0]]
        fn()
        times[key].append(ad.time(fn, 40) / 40)


def med(key: tuple[str, str, str]) -> float:
    v = sorted(times[key])
    return v[len(v) // 2] * 1e6


print(f"TensorFlow {tf.__version__}, oneDNN {ad._onednn()}; medians in us")
print(f"{'word':11s} dir  {'function':>9s} {'eager':>9s} {'concrete':>9s}  eager/function  "
      "concrete/function")  # fmt: skip
for name in WORDS:
    for d in ("fwd", "bwd"):
        f, e, c = (med((p, name, d)) for p in PATHS)
        print(f"{name:11s} {d}  {f:9.1f} {e:9.1f} {c:9.1f}  {e / f:14.2f}  {c / f:17.2f}")
