"""Normalisation: batch norm (training mode, NCHW) and layer norm (last axis)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import ClassVar

import numpy as np

from suite.adapters.base import Adapter, Tensor
from suite.errors import ConfigError
from suite.levels.operator.base import Field, OperatorBenchmark, Params, SizeSpec

EPS = 1e-5
# Nominal FLOPs per element: mean (1), variance (3), normalise and affine (4).
FLOPS_PER_ELEMENT = 8


def batch_norm_ref(
    x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float = EPS
) -> np.ndarray:
    mean = x.mean(axis=(0, 2, 3), keepdims=True)
    var = x.var(axis=(0, 2, 3), keepdims=True)  # biased, as training-mode batch norm uses
    return (x - mean) / np.sqrt(var + eps) * gamma[None, :, None, None] + beta[None, :, None, None]


def layer_norm_ref(
    x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float = EPS
) -> np.ndarray:
    mean = x.mean(axis=-1, keepdims=True)
    var = x.var(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


class Benchmark(OperatorBenchmark):
    name: ClassVar[str] = "norm"
    summary: ClassVar[str] = "batch norm (training, NCHW) or layer norm (last axis)"
    fields: ClassVar[dict[str, Field]] = {
        "kind": Field(str, choices=("batch", "layer")),
        # batch norm: (batch, channels, height, width); layer norm: (batch, channels) =
        # (tokens, hidden) with height = width = 1.
        "batch": Field(int),
        "channels": Field(int),
        "height": Field(int, default=1),
        "width": Field(int, default=1),
    }
    words: ClassVar[frozenset[str]] = frozenset({"batch_norm", "layer_norm"})

    def check(self, params: Params) -> None:
        if params["kind"] == "layer" and (params["height"], params["width"]) != (1, 1):
            raise ConfigError(
                "norm.height/width: layer norm normalises (batch, channels) rows; "
                "leave height and width at 1 and put tokens in batch"
            )
        if params["kind"] == "batch" and params["batch"] * params["height"] * params["width"] < 2:
            raise ConfigError("norm.batch: batch norm needs at least 2 values per channel")

    def label(self, p: Params) -> str:
        if p["kind"] == "batch":
            return f"batch N{p['batch']} C{p['channels']} {p['height']}x{p['width']}"
        return f"layer {p['batch']}x{p['channels']}"

    def sizes(self, size_set: str) -> list[SizeSpec]:
        def bn(b: int, c: int, hw: int) -> Params:
            return {"kind": "batch", "batch": b, "channels": c, "height": hw, "width": hw}

        def ln(tokens: int, hidden: int) -> Params:
            return {"kind": "layer", "batch": tokens, "channels": hidden, "height": 1, "width": 1}

        if size_set == "quick":
            return [
                SizeSpec(bn(8, 32, 28), "quick: CPU smoke size"),
                SizeSpec(ln(512, 256), "quick: CPU smoke size"),
            ]
        return [
            SizeSpec(bn(32, 64, 112), "ResNet-50/101 bn1 after conv1 (batch 32, 112x112)"),
            SizeSpec(bn(32, 256, 56), "ResNet-50/101 conv2_x output bn (batch 32, 56x56)"),
            SizeSpec(bn(32, 1024, 14), "ResNet-50/101 conv4_x output bn (batch 32, 14x14)"),
            SizeSpec(
                ln(32 * 128, 768),
                "BERT-base layer norm (batch 32 x seq 128 or batch 8 x seq 512 = 4096 tokens, hidden 768)",
            ),
        ]

    def _xshape(self, p: Params) -> tuple[int, ...]:
        if p["kind"] == "batch":
            return (p["batch"], p["channels"], p["height"], p["width"])
        return (p["batch"], p["channels"])

    def inputs(self, params: Params, rng: np.random.Generator) -> dict[str, np.ndarray]:
        c = params["channels"]
        # A non-zero mean and non-unit spread, so the normalisation has real work to do.
        x = 0.5 + 2.0 * rng.standard_normal(self._xshape(params))
        return {
            "x": x,
            "gamma": 1.0 + 0.1 * rng.standard_normal((c,)),
            "beta": 0.1 * rng.standard_normal((c,)),
        }

    def reference(self, params: Params, x: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        f = batch_norm_ref if params["kind"] == "batch" else layer_norm_ref
        return {"y": f(x["x"], x["gamma"], x["beta"])}

    def build(
        self, adapter: Adapter, params: Params, t: Mapping[str, Tensor]
    ) -> Callable[[], dict[str, Tensor]]:
        x, g, b = t["x"], t["gamma"], t["beta"]
        op = adapter.batch_norm if params["kind"] == "batch" else adapter.layer_norm
        return lambda: {"y": op(x, g, b, eps=EPS)}

    def reduction_length(self, params: Params, output: str) -> int:
        # the mean and variance: over batch and positions per channel, or over the channels
        if params["kind"] == "batch":
            return int(params["batch"] * params["height"] * params["width"])
        return int(params["channels"])

    def flops(self, params: Params) -> float:
        return float(FLOPS_PER_ELEMENT * np.prod(self._xshape(params)))

    def bytes_moved(self, params: Params, itemsize: int) -> float:
        n = int(np.prod(self._xshape(params)))
        return float(itemsize * (2 * n + 2 * params["channels"]))
