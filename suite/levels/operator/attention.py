"""Scaled dot-product attention: softmax(q k^T / sqrt(d) [+ causal mask]) v."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import ClassVar

import numpy as np

from suite.adapters.base import Adapter, Tensor
from suite.levels.operator.base import Field, OperatorBenchmark, Params, SizeSpec
from suite.levels.operator.softmax import softmax_ref


def attention_ref(q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool) -> np.ndarray:
    d = q.shape[-1]
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(d)
    if causal:
        s = scores.shape[-1]
        mask = np.triu(np.ones((s, s), dtype=bool), k=1)
        scores = np.where(mask, -np.inf, scores)
    return softmax_ref(scores) @ v


class Benchmark(OperatorBenchmark):
    name: ClassVar[str] = "attention"
    summary: ClassVar[str] = "scaled dot-product attention (batch, heads, seq, head_dim)"
    fields: ClassVar[dict[str, Field]] = {
        "batch": Field(int),
        "heads": Field(int),
        "seq": Field(int),
        "head_dim": Field(int),
        "causal": Field(bool, default=False),
    }
    words: ClassVar[frozenset[str]] = frozenset({"attention"})

    def label(self, p: Params) -> str:
        return f"B{p['batch']} H{p['heads']} S{p['seq']} D{p['head_dim']}" + (
            " causal" if p["causal"] else ""
        )

    def sizes(self, size_set: str) -> list[SizeSpec]:
        if size_set == "quick":
            return [
                SizeSpec(
                    {"batch": 2, "heads": 4, "seq": 128, "head_dim": 32, "causal": False},
                    "quick: CPU smoke size",
                )
            ]
        return [
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

    def inputs(self, params: Params, rng: np.random.Generator) -> dict[str, np.ndarray]:
        shape = (params["batch"], params["heads"], params["seq"], params["head_dim"])
        return {name: rng.standard_normal(shape) for name in ("q", "k", "v")}

    def reference(self, params: Params, x: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {"o": attention_ref(x["q"], x["k"], x["v"], params["causal"])}

    def build(
        self, adapter: Adapter, params: Params, t: Mapping[str, Tensor]
    ) -> Callable[[], dict[str, Tensor]]:
        q, k, v = t["q"], t["k"], t["v"]
        causal = params["causal"]
        op = adapter.attention
        return lambda: {"o": op(q, k, v, causal=causal)}

    def reduction_length(self, params: Params, output: str) -> int:
        # q.k over head_dim, then the probabilities times v over the keys
        return int(max(params["head_dim"], params["seq"]))

    def flops(self, params: Params) -> float:
        b, h, s, d = params["batch"], params["heads"], params["seq"], params["head_dim"]
        full = 4.0 * b * h * s * s * d  # q k^T and p v, FMA = 2
        # FlashAttention's convention: a causal mask halves the useful work.
        return full / 2 if params["causal"] else full

    def bytes_moved(self, params: Params, itemsize: int) -> float:
        n = params["batch"] * params["heads"] * params["seq"] * params["head_dim"]
        return float(itemsize * 4 * n)  # q, k, v read; o written
