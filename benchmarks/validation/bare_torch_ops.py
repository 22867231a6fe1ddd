"""The bare PyTorch call behind each operator word, written by hand on given tensors: what
benchmarks/validation/overhead.py (and the scripts built on it) times beside the suite's own measurement.

Forward: the call the PyTorch adapter's word makes (suite/adapters/pytorch/adapter.py), the
result discarded, as one would time it. Backward: that call's ``torch.autograd.grad`` with the
forward recorded once, as the suite's ``vjp`` does (suite/levels/operator/grad.py): only the
backward pass is timed, for every operator with a ``direction`` (conv2d, gemm, norm, softmax,
gelu, attention), grouped and dilated convolutions included.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch

from suite.levels import load_benchmark
from suite.params import value


def bare_op(name: str, p: dict[str, Any], t: dict[str, Any]) -> Any:
    """A callable timing operator ``name`` at validated parameters ``p`` on the tensors ``t``
    (the benchmark's inputs by name, the cotangent among them for a backward task)."""
    F = torch.nn.functional
    bench = load_benchmark("operator", name)

    def get(key: str) -> Any:
        return value(bench.fields, p, key)

    backward = "direction" in bench.fields and get("direction") == "backward"
    forward: Any
    wrt: tuple[str, ...]  # the inputs a backward call differentiates, and its cotangent
    if name == "gemm":
        forward, wrt, cot = (lambda a, b: torch.matmul(a, b)), ("a", "b"), "dc"
    elif name == "softmax":
        forward, wrt, cot = (lambda x: torch.softmax(x, dim=-1)), ("x",), "dy"
    elif name == "gelu":
        forward, wrt, cot = (lambda x: F.gelu(x, approximate="none")), ("x",), "dy"
    elif name == "attention":
        causal = p["causal"]
        forward = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal)  # noqa: E731
        wrt, cot = ("q", "k", "v"), "do"
    elif name == "norm":
        from suite.levels.operator.norm import EPS

        if p["kind"] == "batch":
            forward = lambda x, gamma, beta: F.batch_norm(  # noqa: E731
                x, None, None, gamma, beta, training=True, eps=EPS
            )
        else:
            forward = lambda x, gamma, beta: F.layer_norm(  # noqa: E731
                x, (x.shape[-1],), gamma, beta, eps=EPS
            )
        wrt, cot = ("x", "gamma", "beta"), "dy"
    elif name == "conv2d":
        kw = {"stride": p["stride"], "padding": p["padding"], "dilation": get("dilation"),
              "groups": get("groups")}  # fmt: skip
        forward = lambda x, w: F.conv2d(x, w, **kw)  # noqa: E731
        wrt = ("x", "w") if get("input_grad") else ("w",)
        cot = "dy"
    else:
        raise SystemExit(f"bare_torch_ops.py: no bare call for the operator {name!r}; add it")
    if not backward:
        args = dict(t)
        return lambda: forward(**args)
    inputs = {k: (v.requires_grad_(True) if k in wrt else v) for k, v in t.items() if k != cot}
    y = forward(**inputs)
    primals = tuple(inputs[k] for k in wrt)
    dy = t[cot]
    return lambda: torch.autograd.grad(y, primals, dy, retain_graph=True)


def bare_seconds(fn: Callable[[], Any], n: int, cuda: bool) -> float:
    """Seconds for ``n`` calls of ``fn`` as one would time them by hand: CUDA events around the
    loop with the device synchronised before and after on a GPU, ``perf_counter`` on a CPU."""
    if cuda:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        for _ in range(n):
            fn()
        end.record()
        end.synchronize()
        return float(start.elapsed_time(end)) / 1e3
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return time.perf_counter() - t0
