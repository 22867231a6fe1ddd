"""2-D convolution, NCHW / OIHW, forward or backward (input and weight gradients)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import ClassVar

import numpy as np

from suite.adapters.base import Adapter, Tensor
from suite.errors import ConfigError
from suite.levels.operator.base import Field, OperatorBenchmark, Params, SizeSpec
from suite.reference_ops import conv2d_backward, conv2d_forward, out_size


def _resnet(batch: int, c: int, hw: int, k: int, kernel: int, stride: int, padding: int) -> Params:
    return {
        "batch": batch,
        "in_channels": c,
        "height": hw,
        "width": hw,
        "out_channels": k,
        "kernel": kernel,
        "stride": stride,
        "padding": padding,
    }


class Benchmark(OperatorBenchmark):
    name: ClassVar[str] = "conv2d"
    summary: ClassVar[str] = "2-D convolution (NCHW), forward or backward"
    fields: ClassVar[dict[str, Field]] = {
        "batch": Field(int),
        "in_channels": Field(int),
        "height": Field(int),
        "width": Field(int),
        "out_channels": Field(int),
        "kernel": Field(int),
        "stride": Field(int, default=1),
        "padding": Field(int, positive=False, default=0),
        "direction": Field(str, choices=("forward", "backward"), default="forward"),
    }
    words: ClassVar[frozenset[str]] = frozenset({"conv2d"})

    def check(self, params: Params) -> None:
        for axis in ("height", "width"):
            if params[axis] + 2 * params["padding"] < params["kernel"]:
                raise ConfigError(
                    f"conv2d.kernel: {params['kernel']} is larger than the padded "
                    f"{axis} {params[axis]} + 2*{params['padding']}; use a smaller kernel or more padding"
                )

    def label(self, p: Params) -> str:
        d = "fwd" if p["direction"] == "forward" else "bwd"
        return (
            f"{d} N{p['batch']} C{p['in_channels']} {p['height']}x{p['width']} K{p['out_channels']} "
            f"{p['kernel']}x{p['kernel']}/{p['stride']} p{p['padding']}"
        )

    def sizes(self, size_set: str) -> list[SizeSpec]:
        specs: list[SizeSpec] = []
        if size_set == "quick":
            base = [
                SizeSpec(
                    _resnet(4, 32, 28, 32, 3, 1, 1), "quick: CPU smoke size (3x3, ResNet-like)"
                )
            ]
        else:
            b = 32
            base = [
                SizeSpec(
                    _resnet(b, 3, 224, 64, 7, 2, 3), "ResNet-50/101 conv1 7x7/2 (batch 32, 224x224)"
                ),
                SizeSpec(
                    _resnet(b, 64, 56, 64, 3, 1, 1), "ResNet-50/101 conv2_x 3x3 (batch 32, 56x56)"
                ),
                SizeSpec(
                    _resnet(b, 256, 56, 64, 1, 1, 0),
                    "ResNet-50/101 conv2_x 1x1 reduce 256->64 (batch 32)",
                ),
                SizeSpec(
                    _resnet(b, 128, 28, 128, 3, 1, 1), "ResNet-50/101 conv3_x 3x3 (batch 32, 28x28)"
                ),
                SizeSpec(
                    _resnet(b, 256, 14, 256, 3, 1, 1),
                    "ResNet-50/101 conv4_x 3x3 (batch 32, 14x14; x23 in ResNet-101)",
                ),
                SizeSpec(
                    _resnet(b, 1024, 14, 256, 1, 1, 0),
                    "ResNet-50/101 conv4_x 1x1 reduce 1024->256 (batch 32)",
                ),
                SizeSpec(
                    _resnet(b, 512, 7, 512, 3, 1, 1), "ResNet-50/101 conv5_x 3x3 (batch 32, 7x7)"
                ),
            ]
        for spec in base:
            for direction in ("forward", "backward"):
                specs.append(SizeSpec({**spec.params, "direction": direction}, spec.source))
        return specs

    def _shapes(self, p: Params) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        oh = out_size(p["height"], p["kernel"], p["stride"], p["padding"])
        ow = out_size(p["width"], p["kernel"], p["stride"], p["padding"])
        x = (p["batch"], p["in_channels"], p["height"], p["width"])
        w = (p["out_channels"], p["in_channels"], p["kernel"], p["kernel"])
        y = (p["batch"], p["out_channels"], oh, ow)
        return x, w, y

    def inputs(self, params: Params, rng: np.random.Generator) -> dict[str, np.ndarray]:
        xs, ws, ys = self._shapes(params)
        fan_in = ws[1] * ws[2] * ws[3]
        out = {"x": rng.standard_normal(xs), "w": rng.standard_normal(ws) * np.sqrt(2.0 / fan_in)}
        if params["direction"] == "backward":
            out["dy"] = rng.standard_normal(ys)
        return out

    def reference(self, params: Params, x: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        if params["direction"] == "forward":
            return {"y": conv2d_forward(x["x"], x["w"], params["stride"], params["padding"])}
        dx, dw = conv2d_backward(x["x"], x["w"], x["dy"], params["stride"], params["padding"])
        return {"dx": dx, "dw": dw}

    def build(
        self, adapter: Adapter, params: Params, t: Mapping[str, Tensor]
    ) -> Callable[[], dict[str, Tensor]]:
        stride, padding = params["stride"], params["padding"]
        conv = adapter.conv2d
        if params["direction"] == "forward":
            x, w = t["x"], t["w"]
            return lambda: {"y": conv(x, w, stride=stride, padding=padding)}
        backward = adapter.vjp(
            lambda x, w: conv(x, w, stride=stride, padding=padding),
            {"x": t["x"], "w": t["w"]},
            t["dy"],
        )

        def run() -> dict[str, Tensor]:
            dx, dw = backward()  # in the order of the primals
            return {"dx": dx, "dw": dw}

        return run

    def forward_fn(self, params: Params) -> Callable[..., np.ndarray] | None:
        if params["direction"] != "backward":
            return None
        stride, padding = params["stride"], params["padding"]
        return lambda x, w: conv2d_forward(x, w, stride, padding)

    def gradcheck_params(self, params: Params) -> Params:
        k, pad, stride = params["kernel"], params["padding"], params["stride"]
        side = max(k + stride, 2 * k - 2 * pad, 4)
        return {
            **params,
            "batch": 2,
            "in_channels": min(params["in_channels"], 4),
            "out_channels": min(params["out_channels"], 4),
            "height": min(params["height"], side),
            "width": min(params["width"], side),
        }

    def grad_pairs(self, params: Params) -> dict[str, str]:
        return {"dx": "x", "dw": "w"} if params["direction"] == "backward" else {}

    def reduction_length(self, params: Params, output: str) -> int:
        _, w, y = self._shapes(params)
        if output == "dw":  # over the batch and every output position
            return y[0] * y[2] * y[3]
        if output == "dx":  # over the output channels and the kernel window
            return w[0] * w[2] * w[3]
        return w[1] * w[2] * w[3]  # y: over the input channels and the kernel window

    def flops(self, params: Params) -> float:
        _, w, y = self._shapes(params)
        fwd = 2.0 * y[0] * y[1] * y[2] * y[3] * w[1] * w[2] * w[3]
        return fwd if params["direction"] == "forward" else 2.0 * fwd  # data + weight gradients

    def bytes_moved(self, params: Params, itemsize: int) -> float:
        x, w, y = self._shapes(params)
        nx, nw, ny = np.prod(x), np.prod(w), np.prod(y)
        if params["direction"] == "forward":
            return float(itemsize * (nx + nw + ny))
        return float(itemsize * (ny + nx + nw + nx + nw))  # read dy, x, w; write dx, dw
