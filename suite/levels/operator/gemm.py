"""GEMM: C = A @ B with A (m, k) and B (k, n), batched (``batch`` independent products, as
attention's q k^T and p v are), forward or backward (dA and dB: the vector-Jacobian product)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import numpy as np

from suite.adapters.base import Adapter, Tensor
from suite.levels.operator.base import (
    RANDOM_SIGN_TERMS_MAX_ELEMENTS,
    Field,
    OperatorBenchmark,
    Params,
    SizeSpec,
)
from suite.levels.operator.grad import DIRECTION, backward_build, directions, is_backward
from suite.params import value

_BERT_TOKENS = 32 * 128  # BERT-base fine-tuning: batch 32 x sequence 128


class Benchmark(OperatorBenchmark):
    name: ClassVar[str] = "gemm"
    summary: ClassVar[str] = "matrix multiply C = A @ B (batched), forward or backward"
    fields: ClassVar[dict[str, Field]] = {
        "m": Field(int),
        "n": Field(int),
        "k": Field(int),
        # added in round 4: left out of a record's parameters at their defaults (params.py)
        "batch": Field(int, default=1, implicit=True),
        "direction": DIRECTION,
    }
    words: ClassVar[frozenset[str]] = frozenset({"matmul"})
    cotangent: ClassVar[str] = "dc"

    def label(self, p: Params) -> str:
        b = value(self.fields, p, "batch")
        d = "bwd " if is_backward(p) else ""
        return f"{d}{'' if b == 1 else f'{b}x'}{p['m']}x{p['n']}x{p['k']}"

    def sizes(self, size_set: str) -> list[SizeSpec]:
        if size_set == "quick":
            return [
                SizeSpec({"m": 256, "n": 256, "k": 256}, "quick: CPU smoke size"),
                SizeSpec(
                    {"m": 32, "n": 48, "k": 40, "batch": 3, "direction": "backward"},
                    "quick: batched backward, CPU smoke size",
                    kit=True,
                ),
            ]
        t = _BERT_TOKENS
        base = [
            SizeSpec(
                {"m": t, "n": 2304, "k": 768}, "BERT-base fused QKV projection (batch 32 x seq 128)"
            ),
            SizeSpec(
                {"m": t, "n": 768, "k": 768},
                "BERT-base attention output projection (batch 32 x seq 128)",
            ),
            SizeSpec(
                {"m": t, "n": 3072, "k": 768}, "BERT-base FFN up-projection (batch 32 x seq 128)"
            ),
            SizeSpec(
                {"m": t, "n": 768, "k": 3072}, "BERT-base FFN down-projection (batch 32 x seq 128)"
            ),
            SizeSpec(
                {"m": 128, "n": 128, "k": 64, "batch": 32 * 12},
                "BERT-base attention scores q k^T (batch 32 x 12 heads, seq 128, head 64)",
            ),
            SizeSpec(
                {"m": 256, "n": 1000, "k": 2048},
                "ResNet-50 final fully connected layer (batch 256)",
            ),
        ]
        out = directions(base)
        out.append(
            SizeSpec(
                {"m": 8192, "n": 8192, "k": 8192},
                "square 8192^3 (peak-rate reference, as in DeepBench)",
            )
        )
        return out

    def _batch(self, params: Params) -> tuple[int, ...]:
        b = value(self.fields, params, "batch")
        return () if b == 1 else (b,)

    def inputs(self, params: Params, rng: np.random.Generator) -> dict[str, np.ndarray]:
        m, n, k, b = params["m"], params["n"], params["k"], self._batch(params)
        out = {"a": rng.standard_normal((*b, m, k)), "b": rng.standard_normal((*b, k, n))}
        if is_backward(params):
            out["dc"] = rng.standard_normal((*b, m, n))
        return out

    def reference(self, params: Params, x: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        if not is_backward(params):
            return {"c": x["a"] @ x["b"]}
        dc = x["dc"]
        return {"da": dc @ np.swapaxes(x["b"], -1, -2), "db": np.swapaxes(x["a"], -1, -2) @ dc}

    def reference_terms(self, params: Params, x: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        # Each element is a dot product of random signs: its size is the root sum of squares
        # of its k terms only on average, and one element can come out a hundredth of it (a
        # 1x1 product over k = 1e6: c = 9.5 where the terms' size is 1000; PyTorch's fp32
        # result, 3e-6 of the terms off, was 3e-4 of c). Where the output has few elements,
        # they are judged against the terms' size.
        def size(a: np.ndarray, b: np.ndarray) -> np.ndarray | None:
            if (
                a.shape[-2] * b.shape[-1] * int(np.prod(a.shape[:-2]))
                > RANDOM_SIGN_TERMS_MAX_ELEMENTS
            ):
                return None
            return np.sqrt(np.square(a) @ np.square(b))

        if is_backward(params):
            pairs = {"da": (x["dc"], np.swapaxes(x["b"], -1, -2)),
                     "db": (np.swapaxes(x["a"], -1, -2), x["dc"])}  # fmt: skip
        else:
            pairs = {"c": (x["a"], x["b"])}
        out = {name: size(a, b) for name, (a, b) in pairs.items()}
        return {name: t for name, t in out.items() if t is not None}

    def build(
        self, adapter: Adapter, params: Params, t: Mapping[str, Tensor]
    ) -> Callable[[], dict[str, Tensor]]:
        matmul = adapter.matmul
        if is_backward(params):
            return backward_build(adapter, matmul, t, {"da": "a", "db": "b"}, "dc")
        a, b = t["a"], t["b"]
        return lambda: {"c": matmul(a, b)}

    def grad_pairs(self, params: Params) -> dict[str, str]:
        return {"da": "a", "db": "b"} if is_backward(params) else {}

    def forward_fn(self, params: Params) -> Callable[..., np.ndarray] | None:
        return (lambda a, b: a @ b) if is_backward(params) else None

    def gradcheck_params(self, params: Params) -> Params:
        small: dict[str, Any] = {**params, "m": min(params["m"], 8), "n": min(params["n"], 8)}
        small["k"] = min(params["k"], 8)
        if "batch" in params:
            small["batch"] = min(params["batch"], 2)
        return small

    def reduction_length(self, params: Params, output: str) -> int:
        if output == "da":  # dc @ b^T: over n
            return int(params["n"])
        if output == "db":  # a^T @ dc: over m (per batch entry)
            return int(params["m"])
        return int(params["k"])

    def flops(self, params: Params) -> float:
        b = value(self.fields, params, "batch")
        fwd = 2.0 * b * params["m"] * params["n"] * params["k"]
        return 2.0 * fwd if is_backward(params) else fwd

    def bytes_moved(self, params: Params, itemsize: int) -> float:
        m, n, k = params["m"], params["n"], params["k"]
        b = value(self.fields, params, "batch")
        if is_backward(params):  # read dc, a, b; write da, db
            return float(itemsize * b * (m * n + 2 * m * k + 2 * k * n))
        return float(itemsize * b * (m * k + k * n + m * n))
