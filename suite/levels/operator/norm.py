"""Normalisation: batch norm (training mode, NCHW) and layer norm (last axis), forward or
backward (the gradients of x, gamma and beta)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import ClassVar

import numpy as np

from suite.adapters.base import Adapter, Tensor
from suite.errors import ConfigError
from suite.levels.operator.base import Field, OperatorBenchmark, Params, SizeSpec
from suite.levels.operator.grad import DIRECTION, directions, is_backward

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


def norm_backward(
    kind: str, x: np.ndarray, gamma: np.ndarray, dy: np.ndarray, eps: float = EPS
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Float64 (dx, dgamma, dbeta) of ``sum(dy * norm(x))``: batch norm normalises NCHW over
    (N, H, W) with gamma per channel; layer norm over the last axis with gamma along it."""
    return _norm_backward(kind, x, gamma, dy, eps, magnitudes=False)


def norm_backward_terms(
    kind: str, x: np.ndarray, gamma: np.ndarray, dy: np.ndarray, eps: float = EPS
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per element of (dx, dgamma, dbeta), the size (root sum of squares) of the terms that
    :func:`norm_backward` adds. With few values per channel (or row) dx's terms cancel: with
    two, ``x_hat = +-sqrt(var / (var + eps))`` and dx is about ``eps / var`` times its terms,
    so a framework's result is known only to within the rounding of the terms."""
    return _norm_backward(kind, x, gamma, dy, eps, magnitudes=True)


def _norm_backward(
    kind: str, x: np.ndarray, gamma: np.ndarray, dy: np.ndarray, eps: float, magnitudes: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    axes: tuple[int, ...]
    params_axes: tuple[int, ...]
    shape: tuple[int, ...]
    if kind == "batch":
        axes, params_axes, shape = (0, 2, 3), (0, 2, 3), (1, -1, 1, 1)
    else:
        axes, params_axes, shape = (x.ndim - 1,), tuple(range(x.ndim - 1)), (-1,)
    m = int(np.prod([x.shape[a] for a in axes]))
    mean = x.mean(axis=axes, keepdims=True)
    inv_std = 1.0 / np.sqrt(x.var(axis=axes, keepdims=True) + eps)
    xhat = (x - mean) * inv_std
    dxhat = dy * gamma.reshape(shape)
    if magnitudes:
        # root sum of squares: the roundings of the terms are independent, so their errors add
        # in quadrature (a long sum of random signs is then its own size, nothing cancels)
        dx_terms = (inv_std / m) * np.sqrt(
            (m * dxhat) ** 2
            + dxhat.sum(axis=axes, keepdims=True) ** 2
            + (xhat * (dxhat * xhat).sum(axis=axes, keepdims=True)) ** 2
        )
        dgamma_terms = np.sqrt(((dy * xhat) ** 2).sum(axis=params_axes)).reshape(gamma.shape)
        dbeta_terms = np.sqrt((dy**2).sum(axis=params_axes)).reshape(gamma.shape)
        return dx_terms, dgamma_terms, dbeta_terms
    dx = (inv_std / m) * (
        m * dxhat
        - dxhat.sum(axis=axes, keepdims=True)
        - xhat * (dxhat * xhat).sum(axis=axes, keepdims=True)
    )
    dgamma = (dy * xhat).sum(axis=params_axes).reshape(gamma.shape)
    dbeta = dy.sum(axis=params_axes).reshape(gamma.shape)
    return dx, dgamma, dbeta


class Benchmark(OperatorBenchmark):
    name: ClassVar[str] = "norm"
    summary: ClassVar[str] = (
        "batch norm (training, NCHW) or layer norm (last axis), forward or backward"
    )
    fields: ClassVar[dict[str, Field]] = {
        "kind": Field(str, choices=("batch", "layer")),
        # batch norm: (batch, channels, height, width); layer norm: (batch, channels) =
        # (tokens, hidden) with height = width = 1.
        "batch": Field(int),
        "channels": Field(int),
        "height": Field(int, default=1),
        "width": Field(int, default=1),
        "direction": DIRECTION,
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
        d = "bwd " if is_backward(p) else ""
        if p["kind"] == "batch":
            return f"{d}batch N{p['batch']} C{p['channels']} {p['height']}x{p['width']}"
        return f"{d}layer {p['batch']}x{p['channels']}"

    def sizes(self, size_set: str) -> list[SizeSpec]:
        def bn(b: int, c: int, hw: int) -> Params:
            return {"kind": "batch", "batch": b, "channels": c, "height": hw, "width": hw}

        def ln(tokens: int, hidden: int) -> Params:
            return {"kind": "layer", "batch": tokens, "channels": hidden, "height": 1, "width": 1}

        if size_set == "quick":
            return [
                SizeSpec(bn(8, 32, 28), "quick: CPU smoke size"),
                SizeSpec(ln(512, 256), "quick: CPU smoke size"),
                SizeSpec(
                    {**bn(4, 8, 6), "direction": "backward"}, "quick: CPU smoke size", kit=True
                ),
                SizeSpec(
                    {**ln(32, 48), "direction": "backward"}, "quick: CPU smoke size", kit=True
                ),
            ]
        return directions(
            [
                SizeSpec(bn(32, 64, 112), "ResNet-50/101 bn1 after conv1 (batch 32, 112x112)"),
                SizeSpec(bn(32, 256, 56), "ResNet-50/101 conv2_x output bn (batch 32, 56x56)"),
                SizeSpec(bn(32, 1024, 14), "ResNet-50/101 conv4_x output bn (batch 32, 14x14)"),
                SizeSpec(
                    ln(32 * 128, 768),
                    "BERT-base layer norm (batch 32 x seq 128 or batch 8 x seq 512 = 4096 tokens, hidden 768)",
                ),
            ]
        )

    def _xshape(self, p: Params) -> tuple[int, ...]:
        if p["kind"] == "batch":
            return (p["batch"], p["channels"], p["height"], p["width"])
        return (p["batch"], p["channels"])

    def inputs(self, params: Params, rng: np.random.Generator) -> dict[str, np.ndarray]:
        c = params["channels"]
        # A non-zero mean and non-unit spread, so the normalisation has real work to do.
        x = 0.5 + 2.0 * rng.standard_normal(self._xshape(params))
        out = {
            "x": x,
            "gamma": 1.0 + 0.1 * rng.standard_normal((c,)),
            "beta": 0.1 * rng.standard_normal((c,)),
        }
        if is_backward(params):
            out["dy"] = rng.standard_normal(self._xshape(params))
        return out

    def reference(self, params: Params, x: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        if is_backward(params):
            dx, dg, db = norm_backward(params["kind"], x["x"], x["gamma"], x["dy"])
            return {"dx": dx, "dgamma": dg, "dbeta": db}
        f = batch_norm_ref if params["kind"] == "batch" else layer_norm_ref
        return {"y": f(x["x"], x["gamma"], x["beta"])}

    def reference_terms(self, params: Params, x: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        if not is_backward(params):
            return {}
        dx, dg, db = norm_backward_terms(params["kind"], x["x"], x["gamma"], x["dy"])
        return {"dx": dx, "dgamma": dg, "dbeta": db}

    def build(
        self, adapter: Adapter, params: Params, t: Mapping[str, Tensor]
    ) -> Callable[[], dict[str, Tensor]]:
        op = adapter.batch_norm if params["kind"] == "batch" else adapter.layer_norm
        return self.call_build(adapter, params, t, op, ("x", "gamma", "beta"), "y", eps=EPS)

    def grad_pairs(self, params: Params) -> dict[str, str]:
        if not is_backward(params):
            return {}
        return {"dx": "x", "dgamma": "gamma", "dbeta": "beta"}

    def forward_fn(self, params: Params) -> Callable[..., np.ndarray] | None:
        if not is_backward(params):
            return None
        return batch_norm_ref if params["kind"] == "batch" else layer_norm_ref

    def gradcheck_params(self, params: Params) -> Params:
        if params["kind"] == "batch":
            small = {"batch": min(params["batch"], 3), "channels": min(params["channels"], 4),
                     "height": min(params["height"], 3), "width": min(params["width"], 3)}  # fmt: skip
        else:
            small = {"batch": min(params["batch"], 6), "channels": min(params["channels"], 8)}
        return {**params, **small}

    def reduction_length(self, params: Params, output: str) -> int:
        # the mean and variance: over batch and positions per channel, or over the channels;
        # dgamma and dbeta sum over every position of their channel. dgamma sums dy * x_hat,
        # and x_hat carries the error of the statistics: for layer norm, sums over the
        # channels (MXNet's fp32 dgamma at 2 x 500009 was 7e-5 from float64, where the bound
        # of a 2-term sum is 1e-5 and that of the 500009-term statistics 8.4e-5).
        per_channel = int(params["batch"] * params["height"] * params["width"])
        statistics = per_channel if params["kind"] == "batch" else int(params["channels"])
        if output == "dbeta":
            return per_channel
        if output == "dgamma":
            return max(per_channel, statistics)
        return statistics

    def flops(self, params: Params) -> float:
        # backward: about twice the forward's element work (the two sums and the update)
        factor = 2 if is_backward(params) else 1
        return float(factor * FLOPS_PER_ELEMENT * np.prod(self._xshape(params)))

    def bytes_moved(self, params: Params, itemsize: int) -> float:
        n = int(np.prod(self._xshape(params)))
        if is_backward(params):  # read dy, x, gamma; write dx, dgamma, dbeta
            return float(itemsize * (3 * n + 3 * params["channels"]))
        return float(itemsize * (2 * n + 2 * params["channels"]))
