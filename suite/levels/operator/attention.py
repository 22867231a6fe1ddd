"""Scaled dot-product attention: softmax(q k^T / sqrt(d) [+ causal mask]) v; forward or
backward (the gradients of q, k and v)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import ClassVar

import numpy as np

from suite.adapters.base import Adapter, Tensor
from suite.levels.operator.base import Field, OperatorBenchmark, Params, SizeSpec
from suite.levels.operator.grad import DIRECTION, directions, is_backward
from suite.levels.operator.softmax import softmax_ref


def _probabilities(q: np.ndarray, k: np.ndarray, causal: bool) -> np.ndarray:
    d = q.shape[-1]
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(d)
    if causal:
        s = scores.shape[-1]
        mask = np.triu(np.ones((s, s), dtype=bool), k=1)
        scores = np.where(mask, -np.inf, scores)
    return softmax_ref(scores)


def attention_ref(q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool) -> np.ndarray:
    return _probabilities(q, k, causal) @ v


def attention_backward(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, do: np.ndarray, causal: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Float64 (dq, dk, dv) of ``sum(do * attention(q, k, v))``."""
    scale = 1.0 / np.sqrt(q.shape[-1])
    p = _probabilities(q, k, causal)
    dv = np.swapaxes(p, -1, -2) @ do
    dp = do @ np.swapaxes(v, -1, -2)
    ds = p * (dp - (dp * p).sum(axis=-1, keepdims=True))  # masked entries: p = 0
    return ds @ k * scale, np.swapaxes(ds, -1, -2) @ q * scale, dv


class Benchmark(OperatorBenchmark):
    name: ClassVar[str] = "attention"
    summary: ClassVar[str] = (
        "scaled dot-product attention (batch, heads, seq, head_dim), forward or backward"
    )
    fields: ClassVar[dict[str, Field]] = {
        "batch": Field(int),
        "heads": Field(int),
        "seq": Field(int),
        "head_dim": Field(int),
        "causal": Field(bool, default=False),
        "direction": DIRECTION,
    }
    cotangent: ClassVar[str] = "do"
    words: ClassVar[frozenset[str]] = frozenset({"attention"})

    def label(self, p: Params) -> str:
        return ("bwd " if is_backward(p) else "") + (
            f"B{p['batch']} H{p['heads']} S{p['seq']} D{p['head_dim']}"
            + (" causal" if p["causal"] else "")
        )

    def sizes(self, size_set: str) -> list[SizeSpec]:
        if size_set == "quick":
            return [
                SizeSpec(
                    {"batch": 2, "heads": 4, "seq": 128, "head_dim": 32, "causal": False},
                    "quick: CPU smoke size",
                ),
                SizeSpec(
                    {
                        "batch": 1,
                        "heads": 2,
                        "seq": 16,
                        "head_dim": 8,
                        "causal": True,
                        "direction": "backward",
                    },
                    "quick: causal backward, CPU smoke size",
                    kit=True,
                ),  # fmt: skip
            ]
        return directions(
            [
                SizeSpec(
                    {"batch": 32, "heads": 12, "seq": 128, "head_dim": 64, "causal": False},
                    "BERT-base self-attention (batch 32, seq 128)",
                ),
                SizeSpec(
                    {"batch": 8, "heads": 12, "seq": 512, "head_dim": 64, "causal": False},
                    "BERT-base self-attention (batch 8, seq 512)",
                ),
                SizeSpec(
                    {"batch": 8, "heads": 12, "seq": 512, "head_dim": 64, "causal": True},
                    "BERT-base-sized causal (decoder) self-attention (batch 8, seq 512)",
                ),
            ]
        )

    def inputs(self, params: Params, rng: np.random.Generator) -> dict[str, np.ndarray]:
        shape = (params["batch"], params["heads"], params["seq"], params["head_dim"])
        names = ("q", "k", "v", "do") if is_backward(params) else ("q", "k", "v")
        return {name: rng.standard_normal(shape) for name in names}

    def reference(self, params: Params, x: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        if is_backward(params):
            dq, dk, dv = attention_backward(x["q"], x["k"], x["v"], x["do"], params["causal"])
            return {"dq": dq, "dk": dk, "dv": dv}
        return {"o": attention_ref(x["q"], x["k"], x["v"], params["causal"])}

    def build(
        self, adapter: Adapter, params: Params, t: Mapping[str, Tensor]
    ) -> Callable[[], dict[str, Tensor]]:
        return self.call_build(
            adapter, params, t, adapter.attention, ("q", "k", "v"), "o", causal=params["causal"]
        )

    def grad_pairs(self, params: Params) -> dict[str, str]:
        return {"dq": "q", "dk": "k", "dv": "v"} if is_backward(params) else {}

    def forward_fn(self, params: Params) -> Callable[..., np.ndarray] | None:
        if not is_backward(params):
            return None
        causal = params["causal"]
        return lambda q, k, v: attention_ref(q, k, v, causal)

    def gradcheck_params(self, params: Params) -> Params:
        return {**params, "batch": 1, "heads": min(params["heads"], 2),
                "seq": min(params["seq"], 6), "head_dim": min(params["head_dim"], 4)}  # fmt: skip

    def reduction_length(self, params: Params, output: str) -> int:
        # q.k over head_dim, then the probabilities times v over the keys (backward: dk and
        # dv sum over the queries as well)
        return int(max(params["head_dim"], params["seq"]))

    def flops(self, params: Params) -> float:
        b, h, s, d = params["batch"], params["heads"], params["seq"], params["head_dim"]
        full = 4.0 * b * h * s * s * d  # q k^T and p v, FMA = 2
        if is_backward(params):  # dv, dp, dq, dk: four products of the forward's two's size
            full *= 2.0
        # FlashAttention's convention: a causal mask halves the useful work.
        return full / 2 if params["causal"] else full

    def bytes_moved(self, params: Params, itemsize: int) -> float:
        n = params["batch"] * params["heads"] * params["seq"] * params["head_dim"]
        if is_backward(params):  # read q, k, v, do; write dq, dk, dv
            return float(itemsize * 7 * n)
        return float(itemsize * 4 * n)  # q, k, v read; o written
