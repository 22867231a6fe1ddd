"""PyTorch op kernels for the ONNX importer (suite/onnx/importer.py).

A kernel is ``kernel(ctx, step, args) -> tensor`` (a tuple for several outputs): ``args`` are
the step's tensor inputs (``None`` for an absent optional input), ``step.attrs`` its
normalised attributes, static inputs included (see the importer). Autograd differentiates the
kernels; BatchNormalization's running statistics are buffers (never differentiated), updated
by ``F.batch_norm`` in training mode.

Adding an op: one function here, one entry in :data:`KERNELS`, the op's name in ``CORE_OPS``
(suite/onnx/ops.py: ``PyTorchAdapter.onnx_ops`` declares them without importing
PyTorch).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from suite.errors import UnsupportedError
from suite.onnx.importer import Step
from suite.onnx.kernels import KernelTable, cast_target, optional, reduce
from suite.onnx.kernels import binary as _binary
from suite.onnx.kernels import variadic as _variadic


@dataclass
class Ctx:
    training: bool


Kernel = Callable[[Ctx, Step, list[Any]], Any]

#: the kernels written as functions below enter the table where they are defined
kernels = KernelTable()

_TORCH_DTYPES = {
    "float32": torch.float32, "float64": torch.float64, "float16": torch.float16,
    "int64": torch.int64, "int32": torch.int32, "int8": torch.int8, "uint8": torch.uint8,
    "bool": torch.bool, "bfloat16": torch.bfloat16,
}  # fmt: skip


def _pads_flat(pads: list[tuple[int, int]]) -> list[int]:
    """Per-axis (begin, end) -> F.pad's order (last axis first)."""
    out: list[int] = []
    for b, e in reversed(pads):
        out += [b, e]
    return out


@kernels.op("Conv")
def _conv(ctx: Ctx, step: Step, v: list[Any]) -> Any:
    a = step.attrs
    x, w = v[0], v[1]
    b = optional(v, 2)
    pads = a["pads"]
    n = len(pads)
    if all(p == q for p, q in pads):
        padding: Any = tuple(p for p, _ in pads)
    else:
        x, padding = F.pad(x, _pads_flat(pads)), 0
    conv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}.get(n)
    if conv is None:
        raise UnsupportedError(f"pytorch: {step.where()}: {n}-D convolution is not mapped")
    return conv(x, w, b, stride=a["strides"], padding=padding, dilation=a["dilations"],
                groups=a["group"])  # fmt: skip


@kernels.op("ConvTranspose")
def _conv_transpose(ctx: Ctx, step: Step, v: list[Any]) -> Any:
    a = step.attrs
    x, w = v[0], v[1]
    b = optional(v, 2)
    pads = a["pads"]
    n = len(pads)
    fn = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}[n]
    # uncropped, then crop the (begin, end) pads; output_padding adds cells at the end
    y = fn(x, w, b, stride=a["strides"], padding=0, dilation=a["dilations"], groups=a["group"],
           output_padding=a["output_padding"])  # fmt: skip
    out = step.out_shape()
    index = (
        slice(None),
        slice(None),
        *(slice(p, p + o) for (p, _), o in zip(pads, out[2:], strict=True)),
    )
    return y[index]


@kernels.op("MaxPool")
def _max_pool(ctx: Ctx, step: Step, v: list[Any]) -> Any:
    a = step.attrs
    x = v[0]
    pads = a["ceil_pads"]
    n = len(pads)
    if len([o for o in step.outputs if o]) > 1:
        raise UnsupportedError(f"pytorch: {step.where()}: the indices output is not mapped")
    x = F.pad(x, _pads_flat(pads), value=-math.inf)
    fn = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}[n]
    return fn(x, a["kernel_shape"], a["strides"], 0, a["dilations"])


@kernels.op("AveragePool")
def _avg_pool(ctx: Ctx, step: Step, v: list[Any]) -> Any:
    a = step.attrs
    x = v[0]
    pads = a["ceil_pads"]
    n = len(pads)
    if any(d != 1 for d in a["dilations"]):
        raise UnsupportedError(f"pytorch: {step.where()}: dilated average pooling is not mapped")
    x = F.pad(x, _pads_flat(pads))
    fn = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}[n]
    total = fn(x, a["kernel_shape"], a["strides"], 0) * math.prod(a["kernel_shape"])
    if a["uniform_divisor"] is not None:
        return total / a["uniform_divisor"]
    return total / torch.as_tensor(a["divisor"], dtype=total.dtype, device=total.device)


@kernels.op("BatchNormalization")
def _batch_norm(ctx: Ctx, step: Step, v: list[Any]) -> Any:
    x, scale, bias, mean, var = v
    return F.batch_norm(x, mean, var, scale, bias, training=ctx.training,
                        momentum=1.0 - step.attrs["momentum"], eps=step.attrs["epsilon"])  # fmt: skip


@kernels.op("LayerNormalization")
def _layer_norm(ctx: Ctx, step: Step, v: list[Any]) -> Any:
    x, scale = v[0], v[1]
    bias = optional(v, 2)
    shape = tuple(x.shape[step.attrs["axis"] :])
    if tuple(scale.shape) != shape:
        scale = scale.expand(shape)
    if bias is not None and tuple(bias.shape) != shape:
        bias = bias.expand(shape)
    return F.layer_norm(x, shape, scale, bias, eps=step.attrs["epsilon"])


@kernels.op("LRN")
def _lrn(ctx: Ctx, step: Step, v: list[Any]) -> Any:
    a, x = step.attrs, v[0]
    if a["lo"] == a["hi"]:  # an odd size: PyTorch's own (its window is centred)
        return F.local_response_norm(x, a["size"], alpha=a["alpha"], beta=a["beta"], k=a["bias"])
    # an even size: ONNX's window has one channel more above than below
    sq = F.pad(x * x, (0, 0) * (x.dim() - 2) + (a["lo"], a["hi"]))
    s = sum(sq[:, k : k + x.shape[1]] for k in range(a["size"]))
    return x * (a["bias"] + a["alpha"] / a["size"] * s) ** -a["beta"]


@kernels.op("InstanceNormalization")
def _instance_norm(ctx: Ctx, step: Step, v: list[Any]) -> Any:
    x, scale, bias = v
    return F.instance_norm(x, weight=scale, bias=bias, eps=step.attrs["epsilon"])


@kernels.op("Gemm")
def _gemm(ctx: Ctx, step: Step, v: list[Any]) -> Any:
    a = step.attrs
    x, w = v[0], v[1]
    c = optional(v, 2)
    if a["transA"]:
        x = x.t()
    if a["transB"] and a["alpha"] == 1.0 and a["beta"] == 1.0 and (c is None or c.dim() == 1):
        return F.linear(x, w, c)
    y = x @ (w.t() if a["transB"] else w)
    if a["alpha"] != 1.0:
        y = y * a["alpha"]
    if c is not None:
        y = y + (c if a["beta"] == 1.0 else a["beta"] * c)
    return y


@kernels.op("Gather")
def _gather(ctx: Ctx, step: Step, v: list[Any]) -> Any:
    data, idx = v
    axis = step.attrs["axis"]
    idx = idx.long()
    idx = torch.where(idx < 0, idx + data.shape[axis], idx)
    if idx.dim() == 0:
        return data.select(axis, int(idx))
    if axis == 0 and data.dim() == 2 and data.is_floating_point():
        return F.embedding(idx, data)
    flat = torch.index_select(data, axis, idx.reshape(-1))
    return flat.reshape(*data.shape[:axis], *idx.shape, *data.shape[axis + 1 :])


@kernels.op("Slice")
def _slice(ctx: Ctx, step: Step, v: list[Any]) -> Any:
    x = v[0]
    index, flip = [], []
    for axis, (start, stop, stride) in enumerate(step.attrs["slices"]):
        if stride > 0:
            index.append(slice(start, stop, stride))
        else:  # PyTorch has no negative steps: flip, then step forward
            dim = x.shape[axis]
            first = dim - 1 - start
            last = dim if stop is None else dim - 1 - stop
            flip.append(axis)
            index.append(slice(first, last, -stride))
    if flip:
        x = torch.flip(x, flip)
    return x[tuple(index)]


@kernels.op("Pad")
def _pad(ctx: Ctx, step: Step, v: list[Any]) -> Any:
    a = step.attrs
    mode = {
        "constant": "constant",
        "reflect": "reflect",
        "edge": "replicate",
        "wrap": "circular",
    }.get(a["mode"])
    if mode is None:
        raise UnsupportedError(f"pytorch: {step.where()}: pad mode {a['mode']!r} is not mapped")
    pads = a["pads"]
    # F.pad pads trailing axes; leading unpadded axes are left out
    first = next((i for i, p in enumerate(pads) if p != (0, 0)), len(pads))
    flat = _pads_flat(pads[first:])
    if mode == "constant":
        return F.pad(v[0], flat, value=a["constant_value"])
    return F.pad(v[0], flat, mode=mode)


@kernels.op("Resize")
def _resize(ctx: Ctx, step: Step, v: list[Any]) -> Any:
    y = v[0]
    for axis, table in step.attrs["tables"]:
        if step.attrs["mode"] == "nearest":
            y = torch.index_select(y, axis, torch.as_tensor(table, device=y.device))
        else:
            lo, hi, wl, wh = (torch.as_tensor(t, device=y.device) for t in table)
            shape = [1] * y.dim()
            shape[axis] = -1
            y = (torch.index_select(y, axis, lo) * wl.to(y.dtype).reshape(shape)
                 + torch.index_select(y, axis, hi) * wh.to(y.dtype).reshape(shape))  # fmt: skip
    return y


@kernels.op("Cast")
def _cast(ctx: Ctx, step: Step, v: list[Any]) -> Any:
    to = cast_target(_TORCH_DTYPES, step, "pytorch")
    x = v[0]
    if to.is_floating_point and x.is_floating_point():
        return x  # floats stay in the network's (or autocast's) dtype
    return x.to(to)


@kernels.op("Clip")
def _clip(ctx: Ctx, step: Step, v: list[Any]) -> Any:
    return torch.clamp(v[0], step.attrs["min"], step.attrs["max"])


def _reduce_max(largest: bool) -> Kernel:
    def kernel(ctx: Ctx, step: Step, v: list[Any]) -> Any:
        x = v[0]
        fn = torch.amax if largest else torch.amin
        return (
            fn(x, dim=step.attrs["axes"], keepdim=step.attrs["keepdims"])
            if step.attrs["axes"]
            else x
        )

    return kernel


@kernels.op("Split")
def _split(ctx: Ctx, step: Step, v: list[Any]) -> Any:
    return tuple(torch.split(v[0], step.attrs["split"], dim=step.attrs["axis"]))


@kernels.op("Softmax")
def _softmax(ctx: Ctx, step: Step, v: list[Any]) -> Any:
    return torch.softmax(v[0], dim=step.attrs["axis"])


@kernels.op("LogSoftmax")
def _log_softmax(ctx: Ctx, step: Step, v: list[Any]) -> Any:
    return torch.log_softmax(v[0], dim=step.attrs["axis"])


@kernels.op("Dropout")
def _dropout(ctx: Ctx, step: Step, v: list[Any]) -> Any:
    return F.dropout(v[0], step.attrs["ratio"], training=ctx.training)


@kernels.op("Gelu")
def _gelu(ctx: Ctx, step: Step, v: list[Any]) -> Any:
    return F.gelu(v[0], approximate="tanh" if step.attrs["approximate"] == "tanh" else "none")


def _div(a: Any, b: Any) -> Any:
    if a.is_floating_point() or b.is_floating_point():
        return torch.div(a, b)
    return torch.div(a, b, rounding_mode="trunc")


def _pow(a: Any, b: Any) -> Any:
    if isinstance(b, torch.Tensor) and b.dim() == 0 and not b.requires_grad and float(b) == 2.0:
        return a * a
    return torch.pow(a, b).to(a.dtype)


@kernels.op("Where")
def _where(ctx: Ctx, step: Step, v: list[Any]) -> Any:
    cond, a, b = v
    return torch.where(cond.bool(), a, b)


@kernels.op("Tile")
def _tile(ctx: Ctx, step: Step, v: list[Any]) -> Any:
    return v[0].repeat(*[int(r) for r in np.asarray(step.attrs["repeats"]).reshape(-1)])


@kernels.op("HardSigmoid")
def _hard_sigmoid(ctx: Ctx, step: Step, v: list[Any]) -> Any:
    a = step.attrs
    if a["alpha"] == 1 / 6 and a["beta"] == 0.5:
        return F.hardsigmoid(v[0])
    return torch.clamp(a["alpha"] * v[0] + a["beta"], 0.0, 1.0)


def _reduce_prod(step: Step, x: Any) -> Any:
    for axis in sorted(step.attrs["axes"], reverse=True):
        x = torch.prod(x, dim=axis, keepdim=step.attrs["keepdims"])
    return x


_OWN_KERNELS: dict[str, Kernel] = {
    "Add": _binary(torch.add),
    "Sub": _binary(torch.sub),
    "Mul": _binary(torch.mul),
    "Div": _binary(_div),
    "Pow": _binary(_pow),
    "Max": _variadic(torch.maximum),
    "Min": _variadic(torch.minimum),
    "Sum": _variadic(torch.add),
    "Relu": lambda ctx, step, v: F.relu(v[0]),
    "LeakyRelu": lambda ctx, step, v: F.leaky_relu(v[0], step.attrs["alpha"]),
    # Elu and Selu (gamma * elu; F.selu has the defaults' constants only)
    "Elu": lambda ctx, step, v: F.elu(v[0], step.attrs["alpha"]) * step.attrs["gamma"],
    "Selu": lambda ctx, step, v: F.elu(v[0], step.attrs["alpha"]) * step.attrs["gamma"],
    "PRelu": lambda ctx, step, v: torch.where(
        v[0] < 0, v[0] * v[1].reshape(step.attrs["slope_shape"]), v[0]
    ),
    "Sigmoid": lambda ctx, step, v: torch.sigmoid(v[0]),
    "Tanh": lambda ctx, step, v: torch.tanh(v[0]),
    "Exp": lambda ctx, step, v: torch.exp(v[0]),
    "Log": lambda ctx, step, v: torch.log(v[0]),
    "Sqrt": lambda ctx, step, v: torch.sqrt(v[0]),
    "Reciprocal": lambda ctx, step, v: torch.reciprocal(v[0]),
    "Neg": lambda ctx, step, v: torch.neg(v[0]),
    "Abs": lambda ctx, step, v: torch.abs(v[0]),
    "Erf": lambda ctx, step, v: torch.erf(v[0]),
    "Softplus": lambda ctx, step, v: F.softplus(v[0]),
    "HardSwish": lambda ctx, step, v: F.hardswish(v[0]),
    "Identity": lambda ctx, step, v: v[0],
    "Floor": lambda ctx, step, v: torch.floor(v[0]),
    "Ceil": lambda ctx, step, v: torch.ceil(v[0]),
    "Equal": _binary(torch.eq),
    "Less": _binary(torch.lt),
    "Greater": _binary(torch.gt),
    "IsNaN": lambda ctx, step, v: torch.isnan(v[0]),
    "IsInf": lambda ctx, step, v: torch.isinf(v[0]),
    "Not": lambda ctx, step, v: torch.logical_not(v[0]),
    "And": _binary(torch.logical_and),
    "Or": _binary(torch.logical_or),
    "MatMul": _binary(torch.matmul),
    "Einsum": lambda ctx, step, v: torch.einsum(step.attrs["equation"], *v),
    "GlobalAveragePool": lambda ctx, step, v: v[0].mean(
        dim=tuple(range(2, v[0].dim())), keepdim=True
    ),
    "GlobalMaxPool": lambda ctx, step, v: torch.amax(
        v[0], dim=tuple(range(2, v[0].dim())), keepdim=True
    ),
    "ReduceMean": reduce(torch.mean, axis="dim", keepdims="keepdim"),
    "ReduceSum": reduce(torch.sum, axis="dim", keepdims="keepdim"),
    "ReduceMax": _reduce_max(True),
    "ReduceMin": _reduce_max(False),
    "ReduceProd": lambda ctx, step, v: _reduce_prod(step, v[0]),
    "Reshape": lambda ctx, step, v: v[0].reshape(step.attrs["shape"]),
    "Expand": lambda ctx, step, v: v[0].expand(step.attrs["shape"]),
    "Transpose": lambda ctx, step, v: v[0].permute(*step.attrs["perm"]),
    "Concat": lambda ctx, step, v: torch.cat(list(v), dim=step.attrs["axis"]),
}
#: the table: the kernels entered with ``@kernels.op`` above, the one-expression kernels of
#: ``_OWN_KERNELS`` and the shared ones (suite/onnx/kernels.py: SHARED)
KERNELS: dict[str, Kernel] = kernels.with_shared(_OWN_KERNELS)
