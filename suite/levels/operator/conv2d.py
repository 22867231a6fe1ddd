"""2-D convolution, NCHW / OIHW, forward or backward (input and weight gradients); grouped
(``groups``: ResNeXt, MobileNet's depthwise) and dilated (``dilation``: DeepLab) as real
networks use them."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import numpy as np

from suite.adapters.base import Adapter, Tensor
from suite.errors import ConfigError
from suite.levels.operator.base import Field, OperatorBenchmark, Params, SizeSpec
from suite.params import value
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
    summary: ClassVar[str] = "2-D convolution (NCHW; grouped, dilated), forward or backward"
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
        # added in round 4: left out of a record's parameters at their defaults (params.py)
        "groups": Field(int, default=1, implicit=True),
        "dilation": Field(int, default=1, implicit=True),
        # backward: whether the input's gradient is computed too (False: the first layer of a
        # network, whose input is data: only the weight gradient is needed)
        "input_grad": Field(bool, default=True, implicit=True),
    }
    words: ClassVar[frozenset[str]] = frozenset({"conv2d"})

    @classmethod
    def get(cls, params: Params, key: str) -> Any:
        return value(cls.fields, params, key)

    def check(self, params: Params) -> None:
        groups, dilation = self.get(params, "groups"), self.get(params, "dilation")
        span = dilation * (params["kernel"] - 1) + 1
        for axis in ("height", "width"):
            if params[axis] + 2 * params["padding"] < span:
                raise ConfigError(
                    f"conv2d.kernel: {params['kernel']} (dilation {dilation}) spans {span}, more "
                    f"than the padded {axis} {params[axis]} + 2*{params['padding']}; use a "
                    "smaller kernel or dilation, or more padding"
                )
        for side in ("in_channels", "out_channels"):
            if params[side] % groups:
                raise ConfigError(
                    f"conv2d.groups: {groups} does not divide {side} {params[side]}; choose "
                    f"groups dividing both in_channels and out_channels"
                )
        if not self.get(params, "input_grad") and params["direction"] != "backward":
            raise ConfigError("conv2d.input_grad: only a backward convolution has one; drop it")

    def label(self, p: Params) -> str:
        d = "fwd" if p["direction"] == "forward" else "bwd"
        if d == "bwd" and not self.get(p, "input_grad"):
            d = "bwd(dw)"
        extra = ""
        if self.get(p, "groups") != 1:
            extra += f" g{self.get(p, 'groups')}"
        if self.get(p, "dilation") != 1:
            extra += f" d{self.get(p, 'dilation')}"
        return (
            f"{d} N{p['batch']} C{p['in_channels']} {p['height']}x{p['width']} K{p['out_channels']} "
            f"{p['kernel']}x{p['kernel']}/{p['stride']} p{p['padding']}{extra}"
        )

    def sizes(self, size_set: str) -> list[SizeSpec]:
        specs: list[SizeSpec] = []
        if size_set == "quick":
            base = [
                SizeSpec(
                    _resnet(4, 32, 28, 32, 3, 1, 1), "quick: CPU smoke size (3x3, ResNet-like)"
                ),
                SizeSpec(
                    {**_resnet(2, 8, 12, 8, 3, 1, 2), "groups": 4, "dilation": 2},
                    "quick: grouped (4) and dilated (2) 3x3, CPU smoke size",
                    kit=True,
                ),
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
                SizeSpec(
                    {**_resnet(b, 256, 28, 256, 3, 1, 1), "groups": 32},
                    "ResNeXt-50 32x4d conv3_x grouped 3x3 (32 groups, batch 32, 28x28)",
                ),
                SizeSpec(
                    {**_resnet(b, 144, 56, 144, 3, 1, 1), "groups": 144},
                    "MobileNetV2 depthwise 3x3 (144 channels, batch 32, 56x56)",
                ),
                SizeSpec(
                    {**_resnet(8, 512, 64, 512, 3, 1, 2), "dilation": 2},
                    "DeepLabv3 ResNet-50 layer3 dilated 3x3 (dilation 2, batch 8, 64x64)",
                ),
            ]
        for spec in base:
            for direction in ("forward", "backward"):
                specs.append(
                    SizeSpec({**spec.params, "direction": direction}, spec.source, spec.kit)
                )
        return specs

    def _shapes(self, p: Params) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        dilation, groups = self.get(p, "dilation"), self.get(p, "groups")
        oh = out_size(p["height"], p["kernel"], p["stride"], p["padding"], dilation)
        ow = out_size(p["width"], p["kernel"], p["stride"], p["padding"], dilation)
        x = (p["batch"], p["in_channels"], p["height"], p["width"])
        w = (p["out_channels"], p["in_channels"] // groups, p["kernel"], p["kernel"])
        y = (p["batch"], p["out_channels"], oh, ow)
        return x, w, y

    def _attrs(self, p: Params) -> dict[str, int]:
        """The word's keyword arguments; dilation and groups only where they are not 1, so an
        adapter written before they existed still runs every plain convolution."""
        out = {"stride": p["stride"], "padding": p["padding"]}
        for key in ("dilation", "groups"):
            if self.get(p, key) != 1:
                out[key] = self.get(p, key)
        return out

    def inputs(self, params: Params, rng: np.random.Generator) -> dict[str, np.ndarray]:
        xs, ws, ys = self._shapes(params)
        fan_in = ws[1] * ws[2] * ws[3]
        out = {"x": rng.standard_normal(xs), "w": rng.standard_normal(ws) * np.sqrt(2.0 / fan_in)}
        if params["direction"] == "backward":
            out["dy"] = rng.standard_normal(ys)
        return out

    def reference(self, params: Params, x: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        a = self._attrs(params)
        if params["direction"] == "forward":
            return {"y": conv2d_forward(x["x"], x["w"], **a)}
        dx, dw = conv2d_backward(x["x"], x["w"], x["dy"], **a)
        return {"dx": dx, "dw": dw} if self.get(params, "input_grad") else {"dw": dw}

    def build(
        self, adapter: Adapter, params: Params, t: Mapping[str, Tensor]
    ) -> Callable[[], dict[str, Tensor]]:
        attrs = self._attrs(params)
        conv = adapter.conv2d
        if params["direction"] == "forward":
            x, w = t["x"], t["w"]
            return lambda: {"y": conv(x, w, **attrs)}
        if not self.get(params, "input_grad"):
            x = t["x"]
            weight_only = adapter.vjp(lambda w: conv(x, w, **attrs), {"w": t["w"]}, t["dy"])

            def run_dw() -> dict[str, Tensor]:
                (dw,) = weight_only()
                return {"dw": dw}

            return run_dw
        backward = adapter.vjp(
            lambda x, w: conv(x, w, **attrs), {"x": t["x"], "w": t["w"]}, t["dy"]
        )

        def run() -> dict[str, Tensor]:
            dx, dw = backward()  # in the order of the primals
            return {"dx": dx, "dw": dw}

        return run

    def forward_fn(self, params: Params) -> Callable[..., np.ndarray] | None:
        if params["direction"] != "backward":
            return None
        a = self._attrs(params)
        return lambda x, w: conv2d_forward(x, w, **a)

    def gradcheck_params(self, params: Params) -> Params:
        k, pad, stride = params["kernel"], params["padding"], params["stride"]
        groups, dilation = self.get(params, "groups"), self.get(params, "dilation")
        span = dilation * (k - 1) + 1
        side = max(span + stride, 2 * span - 2 * pad, 4)
        per_group = 2 if groups > 1 else 4
        return {
            **params,
            "batch": 2,
            "in_channels": min(params["in_channels"], per_group * groups),
            "out_channels": min(params["out_channels"], per_group * groups),
            "height": min(params["height"], side),
            "width": min(params["width"], side),
        }

    def grad_pairs(self, params: Params) -> dict[str, str]:
        if params["direction"] != "backward":
            return {}
        return {"dx": "x", "dw": "w"} if self.get(params, "input_grad") else {"dw": "w"}

    def reduction_length(self, params: Params, output: str) -> int:
        _, w, y = self._shapes(params)
        groups = self.get(params, "groups")
        if output == "dw":  # over the batch and every output position
            return y[0] * y[2] * y[3]
        if output == "dx":  # over the group's output channels and the kernel window
            return (w[0] // groups) * w[2] * w[3]
        return w[1] * w[2] * w[3]  # y: over the group's input channels and the kernel window

    def flops(self, params: Params) -> float:
        _, w, y = self._shapes(params)
        fwd = 2.0 * y[0] * y[1] * y[2] * y[3] * w[1] * w[2] * w[3]
        if params["direction"] == "forward":
            return fwd
        return (2.0 if self.get(params, "input_grad") else 1.0) * fwd  # data + weight gradients

    def bytes_moved(self, params: Params, itemsize: int) -> float:
        x, w, y = self._shapes(params)
        nx, nw, ny = np.prod(x), np.prod(w), np.prod(y)
        if params["direction"] == "forward":
            return float(itemsize * (nx + nw + ny))
        if not self.get(params, "input_grad"):
            return float(itemsize * (ny + nx + nw))  # read dy, x; write dw
        return float(itemsize * (ny + nx + nw + nx + nw))  # read dy, x, w; write dx, dw
