"""JAX op kernels for the ONNX importer (suite/onnx/importer.py).

A kernel is ``kernel(ctx, step, args) -> array`` (a tuple for several outputs), called while
``jax.jit`` traces the network, so shapes are static and ``step.attrs`` (normalised by the
importer, static inputs included) are Python values. ``jax.grad`` differentiates the kernels;
BatchNormalization writes its new running statistics to ``ctx.new_state`` (wrapped in
``stop_gradient``). Under mixed precision (``ctx.amp``), MatMul, Gemm, Einsum and the
convolutions compute in the low-precision dtype (as autocast does) and normalisations keep
their statistics in fp32.

Adding an op: one function here, one entry in :data:`KERNELS`, the op's name in ``CORE_OPS``
(suite/onnx/ops.py: ``JaxAdapter.onnx_ops`` declares them without importing
JAX).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from suite.errors import UnsupportedError
from suite.onnx.importer import Step
from suite.onnx.kernels import KernelTable, index_slice, optional
from suite.onnx.kernels import binary as _binary
from suite.onnx.kernels import reduce as _reduce
from suite.onnx.kernels import unary as _unary
from suite.onnx.kernels import variadic as _variadic


@dataclass
class Ctx:
    """What a kernel may depend on besides its inputs (one per trace)."""

    training: bool
    key: Any  # jax.random key for dropout masks (None in inference)
    amp: Any  # the low-precision dtype of the products under mixed precision, or None
    #: BatchNormalization running statistics written in training mode: name -> new value
    new_state: dict[str, Any] = field(default_factory=dict)


Kernel = Callable[[Ctx, Step, list[Any]], Any]

#: the kernels written as functions below enter the table where they are defined
kernels = KernelTable()


def _low(ctx: Ctx, *xs: Any) -> list[Any]:
    """Under mixed precision, the inputs of a product cast to the low-precision dtype."""
    if ctx.amp is None:
        return list(xs)
    return [None if x is None else jnp.asarray(x).astype(ctx.amp) for x in xs]


def _stats_dtype(x: Any) -> Any:
    """Statistics (mean, variance, softmax sums) in fp32 for 16-bit inputs, as cuDNN does."""
    return jnp.float32 if x.dtype in (jnp.bfloat16, jnp.float16) else x.dtype


def _spatial(n: int) -> tuple[str, str, str]:
    s = "DHW"[-n:] if n <= 3 else None
    if s is None:
        raise UnsupportedError(f"jax: {n}-D windows are not mapped")
    return (f"NC{s}", f"OI{s}", f"NC{s}")


@kernels.op("Conv")
def _conv(ctx: Ctx, step: Step, v: list[Any]) -> Any:
    a = step.attrs
    x, w, b = _low(ctx, v[0], v[1], optional(v, 2))
    y = lax.conv_general_dilated(x, w, window_strides=a["strides"], padding=a["pads"],
                                 rhs_dilation=a["dilations"],
                                 dimension_numbers=_spatial(len(a["pads"])),
                                 feature_group_count=a["group"])  # fmt: skip
    return y if b is None else y + b.reshape((1, -1) + (1,) * (y.ndim - 2))


@kernels.op("ConvTranspose")
def _conv_transpose(ctx: Ctx, step: Step, v: list[Any]) -> Any:
    """The gradient of a convolution with respect to its input: a convolution of the
    stride-dilated input with the flipped, transposed weight."""
    a = step.attrs
    x, w, b = _low(ctx, v[0], v[1], optional(v, 2))
    g = a["group"]
    n = len(a["pads"])
    cin, coutg = w.shape[:2]
    k = w.shape[2:]
    # (C_in, C_out/g, k...) -> (C_out, C_in/g, k...) flipped
    wt = w.reshape(g, cin // g, coutg, *k).swapaxes(1, 2).reshape(g * coutg, cin // g, *k)
    wt = jnp.flip(wt, axis=tuple(range(2, 2 + n)))
    out = step.out_shape()[2:]
    # the stride-dilated input padded with span - begin before and span - end + output_padding
    # after gives ONNX's output size s*(in-1) + output_padding + span + 1 - begin - end
    pads = []
    for i, (lo, hi) in enumerate(a["pads"]):
        span = (k[i] - 1) * a["dilations"][i]
        pads.append((span - lo, span - hi + a["output_padding"][i]))
    y = lax.conv_general_dilated(x, wt, window_strides=(1,) * n, padding=pads,
                                 lhs_dilation=a["strides"], rhs_dilation=a["dilations"],
                                 dimension_numbers=_spatial(n), feature_group_count=g)  # fmt: skip
    y = y[(slice(None), slice(None), *(slice(0, o) for o in out))]
    return y if b is None else y + b.reshape((1, -1) + (1,) * n)


def _pool_pads(a: dict[str, Any]) -> list[tuple[int, int]]:
    return [(0, 0), (0, 0), *a["ceil_pads"]]


@kernels.op("MaxPool")
def _max_pool(ctx: Ctx, step: Step, v: list[Any]) -> Any:
    a = step.attrs
    x = v[0]
    return lax.reduce_window(x, -jnp.inf, lax.max, (1, 1, *a["kernel_shape"]), (1, 1, *a["strides"]),
                             _pool_pads(a), window_dilation=(1, 1, *a["dilations"]))  # fmt: skip


@kernels.op("AveragePool")
def _avg_pool(ctx: Ctx, step: Step, v: list[Any]) -> Any:
    a = step.attrs
    x = v[0]
    total = lax.reduce_window(x, 0.0, lax.add, (1, 1, *a["kernel_shape"]), (1, 1, *a["strides"]),
                              _pool_pads(a), window_dilation=(1, 1, *a["dilations"]))  # fmt: skip
    if a["uniform_divisor"] is not None:
        return total / a["uniform_divisor"]
    return total / jnp.asarray(a["divisor"], total.dtype)


@kernels.op("BatchNormalization")
def _batch_norm(ctx: Ctx, step: Step, v: list[Any]) -> Any:
    """Training: batch statistics (biased variance) normalise; the running ones are updated as
    PyTorch does. Inference: the running statistics. Statistics in fp32 for 16-bit inputs."""
    x, scale, bias, running_mean, running_var = v
    eps = step.attrs["epsilon"]
    xs = x.astype(_stats_dtype(x))
    axes = (0, *range(2, x.ndim))
    channel = (1, -1) + (1,) * (x.ndim - 2)
    if ctx.training:
        mean = xs.mean(axis=axes)
        var = jnp.mean(jnp.square(xs - mean.reshape(channel)), axis=axes)
        m = step.attrs["momentum"]
        n = x.size // x.shape[1]
        stats = lax.stop_gradient((mean, var))
        ctx.new_state[step.inputs[3]] = m * running_mean + (1.0 - m) * stats[0].astype(
            running_mean.dtype
        )
        ctx.new_state[step.inputs[4]] = m * running_var + (1.0 - m) * (n / max(n - 1, 1)) * stats[
            1
        ].astype(running_var.dtype)
    else:
        mean, var = running_mean.astype(xs.dtype), running_var.astype(xs.dtype)
    rstd = lax.rsqrt(var + eps)
    y = (xs - mean.reshape(channel)) * (rstd * scale.astype(xs.dtype)).reshape(channel)
    return (y + bias.astype(xs.dtype).reshape(channel)).astype(x.dtype)


def _normalise(x: Any, axes: tuple[int, ...], eps: float) -> Any:
    xs = x.astype(_stats_dtype(x))
    mean = xs.mean(axis=axes, keepdims=True)
    var = jnp.mean(jnp.square(xs - mean), axis=axes, keepdims=True)
    return (xs - mean) * lax.rsqrt(var + eps)


@kernels.op("LayerNormalization")
def _layer_norm(ctx: Ctx, step: Step, v: list[Any]) -> Any:
    x, scale = v[0], v[1]
    bias = optional(v, 2)
    xh = _normalise(x, tuple(range(step.attrs["axis"], x.ndim)), step.attrs["epsilon"])
    y = xh * scale.astype(xh.dtype)
    if bias is not None:
        y = y + bias.astype(xh.dtype)
    return y.astype(x.dtype)


@kernels.op("LRN")
def _lrn(ctx: Ctx, step: Step, v: list[Any]) -> Any:
    a, x = step.attrs, v[0]
    xs = x.astype(_stats_dtype(x))
    c = x.shape[1]
    sq = jnp.pad(xs * xs, ((0, 0), (a["lo"], a["hi"])) + ((0, 0),) * (x.ndim - 2))
    s = sum(sq[:, k : k + c] for k in range(a["size"]))
    return (xs * (a["bias"] + a["alpha"] / a["size"] * s) ** -a["beta"]).astype(x.dtype)


@kernels.op("InstanceNormalization")
def _instance_norm(ctx: Ctx, step: Step, v: list[Any]) -> Any:
    x, scale, bias = v
    channel = (1, -1) + (1,) * (x.ndim - 2)
    xh = _normalise(x, tuple(range(2, x.ndim)), step.attrs["epsilon"])
    return (xh * scale.reshape(channel) + bias.reshape(channel)).astype(x.dtype)


def _softmax(fn: Callable[..., Any]) -> Kernel:
    def kernel(ctx: Ctx, step: Step, v: list[Any]) -> Any:
        x = v[0]
        return fn(x.astype(_stats_dtype(x)), axis=step.attrs["axis"]).astype(x.dtype)

    return kernel


@kernels.op("Gemm")
def _gemm(ctx: Ctx, step: Step, v: list[Any]) -> Any:
    a = step.attrs
    x, w, c = _low(ctx, v[0], v[1], optional(v, 2))
    if a["transA"]:
        x = x.T
    if a["transB"]:
        w = w.T
    y = x @ w
    if a["alpha"] != 1.0:
        y = y * a["alpha"]
    if c is not None:
        y = y + (c if a["beta"] == 1.0 else a["beta"] * c)
    return y


@kernels.op("MatMul")
def _matmul(ctx: Ctx, step: Step, v: list[Any]) -> Any:
    x, w = _low(ctx, v[0], v[1])
    return jnp.matmul(x, w)


@kernels.op("Einsum")
def _einsum(ctx: Ctx, step: Step, v: list[Any]) -> Any:
    return jnp.einsum(step.attrs["equation"], *_low(ctx, *v))


@kernels.op("Gather")
def _gather(ctx: Ctx, step: Step, v: list[Any]) -> Any:
    data, idx = v
    axis = step.attrs["axis"]
    idx = jnp.asarray(idx).astype(jnp.int32)
    idx = jnp.where(idx < 0, idx + data.shape[axis], idx)
    return jnp.take(data, idx, axis=axis)


@kernels.op("Pad")
def _pad(ctx: Ctx, step: Step, v: list[Any]) -> Any:
    a = step.attrs
    mode = {"constant": "constant", "reflect": "reflect", "edge": "edge", "wrap": "wrap"}.get(
        a["mode"]
    )
    if mode is None:
        raise UnsupportedError(f"jax: {step.where()}: pad mode {a['mode']!r} is not mapped")
    if mode == "constant":
        return jnp.pad(v[0], a["pads"], constant_values=a["constant_value"])
    return jnp.pad(v[0], a["pads"], mode=mode)


@kernels.op("Resize")
def _resize(ctx: Ctx, step: Step, v: list[Any]) -> Any:
    y = v[0]
    for axis, table in step.attrs["tables"]:
        if step.attrs["mode"] == "nearest":
            y = jnp.take(y, jnp.asarray(table), axis=axis)
        else:
            lo, hi, wl, wh = table
            shape = [1] * y.ndim
            shape[axis] = -1
            y = (jnp.take(y, jnp.asarray(lo), axis=axis) * jnp.asarray(wl, y.dtype).reshape(shape)
                 + jnp.take(y, jnp.asarray(hi), axis=axis) * jnp.asarray(wh, y.dtype).reshape(shape))  # fmt: skip
    return y


@kernels.op("Split")
def _split(ctx: Ctx, step: Step, v: list[Any]) -> Any:
    bounds = np.cumsum(step.attrs["split"])[:-1].tolist()
    return tuple(jnp.split(v[0], bounds, axis=step.attrs["axis"]))


@kernels.op("Cast")
def _cast(ctx: Ctx, step: Step, v: list[Any]) -> Any:
    to = np.dtype(step.attrs["dtype"])
    x = v[0]
    if to.kind == "f" and jnp.issubdtype(x.dtype, jnp.floating):
        return x  # floats stay in the network's (or mixed precision's) dtype
    if to == np.int64 and not jax.config.jax_enable_x64:
        to = np.dtype(np.int32)
    return x.astype(to)


@kernels.op("Dropout")
def _dropout(ctx: Ctx, step: Step, v: list[Any]) -> Any:
    """Identity in inference; in training inverted dropout, the mask from this step's key
    folded with the node's position."""
    x, ratio = v[0], step.attrs["ratio"]
    if not ctx.training or ratio == 0.0:
        return x
    key = jax.random.fold_in(ctx.key, step.index)
    keep = jax.random.bernoulli(key, 1.0 - ratio, x.shape)
    return jnp.where(keep, x / (1.0 - ratio), jnp.zeros((), x.dtype)).astype(x.dtype)


def _div(a: Any, b: Any) -> Any:
    if jnp.issubdtype(jnp.result_type(a, b), jnp.integer):
        return lax.div(a, b)
    return jnp.divide(a, b)


def _pow(a: Any, b: Any) -> Any:
    return jnp.power(a, b).astype(a.dtype)


@kernels.op("HardSigmoid")
def _hard_sigmoid(ctx: Ctx, step: Step, v: list[Any]) -> Any:
    return jnp.clip(step.attrs["alpha"] * v[0] + step.attrs["beta"], 0.0, 1.0).astype(v[0].dtype)


_OWN_KERNELS: dict[str, Kernel] = {
    "Slice": index_slice,
    "Add": _binary(jnp.add),
    "Sub": _binary(jnp.subtract),
    "Mul": _binary(jnp.multiply),
    "Div": _binary(_div),
    "Pow": _binary(_pow),
    "Max": _variadic(jnp.maximum),
    "Min": _variadic(jnp.minimum),
    "Sum": _variadic(jnp.add),
    "Relu": _unary(jax.nn.relu),
    "LeakyRelu": lambda ctx, step, v: jax.nn.leaky_relu(v[0], step.attrs["alpha"]),
    # Elu and Selu (gamma * elu)
    "Elu": lambda ctx, step, v: jax.nn.elu(v[0], step.attrs["alpha"]) * step.attrs["gamma"],
    "Selu": lambda ctx, step, v: jax.nn.elu(v[0], step.attrs["alpha"]) * step.attrs["gamma"],
    "PRelu": lambda ctx, step, v: jnp.where(
        v[0] < 0, v[0] * jnp.reshape(v[1], step.attrs["slope_shape"]), v[0]
    ),
    "Sigmoid": _unary(jax.nn.sigmoid),
    "Tanh": _unary(jnp.tanh),
    "Exp": _unary(jnp.exp),
    "Log": _unary(jnp.log),
    "Sqrt": _unary(jnp.sqrt),
    "Reciprocal": _unary(jnp.reciprocal),
    "Neg": _unary(jnp.negative),
    "Abs": _unary(jnp.abs),
    "Erf": _unary(lax.erf),
    "Softplus": _unary(jax.nn.softplus),
    "Gelu": lambda ctx, step, v: jax.nn.gelu(v[0], approximate=step.attrs["approximate"] == "tanh"),
    "HardSwish": _unary(jax.nn.hard_swish),
    "Clip": lambda ctx, step, v: jnp.clip(v[0], step.attrs["min"], step.attrs["max"]).astype(
        v[0].dtype
    ),
    "Identity": _unary(lambda x: x),
    "Floor": _unary(jnp.floor),
    "Ceil": _unary(jnp.ceil),
    "Equal": _binary(jnp.equal),
    "Less": _binary(jnp.less),
    "Greater": _binary(jnp.greater),
    "IsNaN": _unary(jnp.isnan),
    "IsInf": _unary(jnp.isinf),
    "Not": _unary(jnp.logical_not),
    "And": _binary(jnp.logical_and),
    "Or": _binary(jnp.logical_or),
    "Where": lambda ctx, step, v: jnp.where(v[0], v[1], v[2]),
    "GlobalAveragePool": _unary(lambda x: x.mean(axis=tuple(range(2, x.ndim)), keepdims=True)),
    "GlobalMaxPool": _unary(lambda x: x.max(axis=tuple(range(2, x.ndim)), keepdims=True)),
    "Softmax": _softmax(jax.nn.softmax),
    "LogSoftmax": _softmax(jax.nn.log_softmax),
    "ReduceMean": _reduce(jnp.mean),
    "ReduceSum": _reduce(jnp.sum),
    "ReduceMax": _reduce(jnp.max),
    "ReduceMin": _reduce(jnp.min),
    "ReduceProd": _reduce(jnp.prod),
    "Reshape": lambda ctx, step, v: v[0].reshape(step.attrs["shape"]),
    "Expand": lambda ctx, step, v: jnp.broadcast_to(v[0], step.attrs["shape"]),
    "Transpose": lambda ctx, step, v: jnp.transpose(v[0], step.attrs["perm"]),
    "Concat": lambda ctx, step, v: jnp.concatenate(list(v), axis=step.attrs["axis"]),
    "Tile": lambda ctx, step, v: jnp.tile(
        v[0], [int(r) for r in np.asarray(step.attrs["repeats"]).reshape(-1)]
    ),
}
#: the table: the kernels entered with ``@kernels.op`` above, the one-expression kernels of
#: ``_OWN_KERNELS`` and the shared ones (suite/onnx/kernels.py: SHARED)
KERNELS: dict[str, Kernel] = kernels.with_shared(_OWN_KERNELS)
