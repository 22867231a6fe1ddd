"""TensorFlow op kernels for the ONNX importer (suite/onnx/importer.py).

A kernel is ``kernel(ctx, step, args) -> tensor`` (a tuple for several outputs), called while
``tf.function`` traces the network (the importer's plan gives every value a static shape, and
``step.attrs``, static inputs included, are Python values). ``tf.GradientTape`` differentiates
the kernels; BatchNormalization's running statistics are non-trainable variables, assigned in
training mode (never differentiated). Under mixed precision every float activation, parameter
and constant is in the compute dtype (``ctx.compute``, as Keras' mixed policies do), and the
normalisations and softmax keep their statistics in fp32.

Layout: TensorFlow's CPU convolutions and pools (and their gradients) exist only channels-last,
so with ``channels_last`` (always on the CPU) :func:`layout_call` keeps 4-D image activations
NHWC between the ops that can run on them (convolutions, pools, batch norm, element-wise ops,
concatenation on channels), wrapped in :class:`Nhwc`; every other op gets the value back in
ONNX's NCHW layout (permuted once per value). The layout-aware kernels read ``ctx.nhwc``.

Adding an op: one function here, one entry in :data:`KERNELS`, the op's name in ``CORE_OPS``
(suite/onnx/ops.py: ``TensorFlowAdapter.onnx_ops`` declares them without importing
TensorFlow); an op that can run on NHWC activations unchanged also goes in
:data:`ELEMENTWISE_NHWC`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import tensorflow as tf

from suite.errors import UnsupportedError
from suite.onnx.importer import Step
from suite.onnx.kernels import KernelTable, cast_target, index_slice, optional
from suite.onnx.kernels import binary as _binary
from suite.onnx.kernels import reduce as _reduce
from suite.onnx.kernels import unary as _unary
from suite.onnx.kernels import variadic as _variadic

_TO_NHWC, _TO_NCHW = (0, 2, 3, 1), (0, 3, 1, 2)
_NCHW_TO_NHWC_AXIS = (0, 3, 1, 2)  # ONNX axis -> the same dimension's axis in NHWC


@dataclass
class Ctx:
    """What a kernel may depend on besides its inputs (one per call of the network)."""

    training: bool
    compute: Any  # the tf dtype of float activations (float32, or bfloat16/float16 under amp)
    seed: int  # dropout masks: the op seed is seed + the node's index
    #: BatchNormalization running statistics (variables, by ONNX name), assigned in training
    state: dict[str, Any] = field(default_factory=dict)
    #: set by :func:`layout_call` while a layout-aware kernel runs on NHWC tensors
    nhwc: bool = False


Kernel = Callable[[Ctx, Step, list[Any]], Any]

#: the kernels written as functions below enter the table where they are defined
kernels = KernelTable()


def _float(x: Any) -> bool:
    return bool(tf.as_dtype(x.dtype).is_floating)


def _stats(x: Any) -> Any:
    """The input of a statistic in fp32 when it is 16-bit (as Keras' normalisation layers)."""
    return tf.cast(x, tf.float32) if x.dtype in (tf.bfloat16, tf.float16) else x


def _channel_shape(ctx: Ctx, rank: int) -> list[int]:
    """A per-channel vector's broadcast shape for an activation of ``rank``."""
    if ctx.nhwc:
        return [1] * (rank - 1) + [-1]
    return [1, -1] + [1] * (rank - 2)


# -- products ---------------------------------------------------------------------------------
def _explicit(pads: list[tuple[int, int]], nhwc: bool) -> list[list[int]]:
    spatial = [list(p) for p in pads]
    return [[0, 0], *spatial, [0, 0]] if nhwc else [[0, 0], [0, 0], *spatial]


@kernels.op("Conv")
def _conv(ctx: Ctx, step: Step, v: list[Any]) -> Any:
    a = step.attrs
    x, w = v[0], v[1]
    b = optional(v, 2)
    if any(s != 1 for s in a["strides"]) and any(d != 1 for d in a["dilations"]):
        raise UnsupportedError(
            f"tensorflow: {step.where()}: a convolution both strided and dilated is not mapped "
            "(tf.nn.convolution takes strides or dilations greater than 1, not both)"
        )
    n = len(a["pads"])
    if n != 2:
        return _conv_nd(ctx, step, x, w, b)
    fmt = "NHWC" if ctx.nhwc else "NCHW"
    cin = x.shape[-1] if ctx.nhwc else x.shape[1]
    cout, group = w.shape[0], a["group"]
    pads = a["pads"]
    padding: Any = (
        "VALID" if not any(p for pair in pads for p in pair) else _explicit(pads, ctx.nhwc)
    )
    strides, dil = a["strides"], a["dilations"]
    if group > 1 and ctx.nhwc:
        # TensorFlow's CPU kernels have no grouped convolution that survives Grappler's
        # Conv2D+BiasAdd+Relu fusion ("Fused conv implementation does not support grouped
        # convolutions"), so groups run as a depthwise convolution: input channel i of group g
        # gets one output per output channel of g, then each group's inputs are summed. The
        # same multiply-adds as the grouped convolution; depthwise is a group of one input.
        k, m = cin // group, cout // group
        wd = tf.reshape(w, (group, m, k, *w.shape[2:]))  # (G, m, k, kh, kw)
        wd = tf.reshape(tf.transpose(wd, (3, 4, 0, 2, 1)), (*w.shape[2:], cin, m))
        if padding != "VALID":
            x, padding = tf.pad(x, _explicit(pads, True)), "VALID"
        y = tf.nn.depthwise_conv2d(x, wd, (1, *strides, 1), padding, dilations=dil)
        if k > 1:
            n, h, wo = (int(d) for d in y.shape[:3])
            y = tf.reshape(tf.reduce_sum(tf.reshape(y, (n, h, wo, group, k, m)), axis=4),
                           (n, h, wo, cout))  # fmt: skip
    elif any(d != 1 for d in dil):
        # dilated: tf.nn.convolution (space-to-batch), whose gradient the CPU has
        if padding != "VALID":
            x, padding = tf.pad(x, _explicit(pads, ctx.nhwc)), "VALID"
        y = tf.nn.convolution(x, tf.transpose(w, (2, 3, 1, 0)), strides, padding, dilations=dil,
                              data_format=fmt)  # fmt: skip
    else:
        y = tf.nn.conv2d(x, tf.transpose(w, (2, 3, 1, 0)), strides, padding, data_format=fmt,
                         dilations=dil)  # fmt: skip
    if b is not None:
        y = tf.nn.bias_add(y, b, data_format=fmt)
    return y


def _conv_nd(ctx: Ctx, step: Step, x: Any, w: Any, b: Any) -> Any:
    """1-D and 3-D convolutions (ONNX layout in and out): channels-last inside, as the CPU
    kernels need."""
    a = step.attrs
    n = len(a["pads"])
    if a["group"] != 1:
        raise UnsupportedError(
            f"tensorflow: {step.where()}: grouped {n}-D convolution is not mapped"
        )
    perm = (0, *range(2, n + 2), 1)
    xl = tf.pad(tf.transpose(x, perm), [[0, 0], *[list(p) for p in a["pads"]], [0, 0]])
    wl = tf.transpose(w, (*range(2, n + 2), 1, 0))
    y = tf.nn.convolution(xl, wl, a["strides"], "VALID", dilations=a["dilations"])
    if b is not None:
        y = y + b
    return tf.transpose(y, (0, n + 1, *range(1, n + 1)))


@kernels.op("ConvTranspose")
def _conv_transpose(ctx: Ctx, step: Step, v: list[Any]) -> Any:
    a = step.attrs
    x, w = v[0], v[1]
    b = optional(v, 2)
    n = len(a["pads"])
    if n != 2 or a["group"] != 1 or any(d != 1 for d in a["dilations"]):
        raise UnsupportedError(
            f"tensorflow: {step.where()}: only 2-D, ungrouped, undilated ConvTranspose is mapped"
        )
    out = step.out_shape()  # NCHW
    xl = x if ctx.nhwc else tf.transpose(x, _TO_NHWC)
    k, s = a["kernel_shape"], a["strides"]
    # uncropped: s * (in - 1) + k + output_padding; then the (begin, end) pads are cropped
    full = [s[i] * (int(xl.shape[1 + i]) - 1) + k[i] + a["output_padding"][i] for i in range(2)]
    shape = (int(xl.shape[0]), full[0], full[1], int(w.shape[1]))
    y = tf.nn.conv2d_transpose(xl, tf.transpose(w, (2, 3, 1, 0)), shape, s, "VALID")
    (t, _), (lft, _) = a["pads"]
    y = y[:, t : t + out[2], lft : lft + out[3], :]
    if b is not None:
        y = y + b
    return y if ctx.nhwc else tf.transpose(y, _TO_NCHW)


@kernels.op("MatMul")
def _matmul(ctx: Ctx, step: Step, v: list[Any]) -> Any:
    x, w = v
    rx, rw = len(x.shape), len(w.shape)
    if rw == 2 and rx > 2:  # (..., k) @ (k, n) as one 2-D product
        out = step.out_shape()
        return tf.reshape(tf.matmul(tf.reshape(x, (-1, x.shape[-1])), w), out)
    if rx == 1 or rw == 1:
        xe = x[None, :] if rx == 1 else x
        we = w[:, None] if rw == 1 else w
        return tf.reshape(tf.matmul(xe, we), step.out_shape())
    return tf.matmul(x, w)


@kernels.op("Gemm")
def _gemm(ctx: Ctx, step: Step, v: list[Any]) -> Any:
    a = step.attrs
    x, w = v[0], v[1]
    c = optional(v, 2)
    y = tf.matmul(x, w, transpose_a=a["transA"], transpose_b=a["transB"])
    if a["alpha"] != 1.0:
        y = y * a["alpha"]
    if c is not None:
        y = y + (c if a["beta"] == 1.0 else a["beta"] * c)
    return y


# -- pooling ----------------------------------------------------------------------------------
def _pool_input(ctx: Ctx, step: Step, x: Any, value: float) -> Any:
    pads = step.attrs["ceil_pads"]
    if len(pads) != 2:
        raise UnsupportedError(f"tensorflow: {step.where()}: only 2-D pooling is mapped")
    if any(d != 1 for d in step.attrs["dilations"]):
        raise UnsupportedError(f"tensorflow: {step.where()}: dilated pooling is not mapped")
    if any(p for pair in pads for p in pair):
        x = tf.pad(x, _explicit(pads, ctx.nhwc), constant_values=value)
    return x


@kernels.op("MaxPool")
def _max_pool(ctx: Ctx, step: Step, v: list[Any]) -> Any:
    a = step.attrs
    if len([o for o in step.outputs if o]) > 1:
        raise UnsupportedError(f"tensorflow: {step.where()}: the indices output is not mapped")
    x = _pool_input(ctx, step, v[0], -math.inf)  # padded cells never win the max
    return tf.nn.max_pool2d(x, a["kernel_shape"], a["strides"], "VALID",
                            data_format="NHWC" if ctx.nhwc else "NCHW")  # fmt: skip


@kernels.op("AveragePool")
def _avg_pool(ctx: Ctx, step: Step, v: list[Any]) -> Any:
    """The window sums (an average over the whole window on zero-padded input, times its size)
    divided by the importer's divisor: the cells ONNX counts (count_include_pad, ceil_mode)."""
    a = step.attrs
    x = _pool_input(ctx, step, v[0], 0.0)
    fmt = "NHWC" if ctx.nhwc else "NCHW"
    mean = tf.nn.avg_pool2d(x, a["kernel_shape"], a["strides"], "VALID", data_format=fmt)
    size = math.prod(a["kernel_shape"])
    if a["uniform_divisor"] is not None:
        return mean if a["uniform_divisor"] == size else mean * (size / a["uniform_divisor"])
    divisor = a["divisor"].transpose(_TO_NHWC) if ctx.nhwc else a["divisor"]
    return mean * tf.constant(size / divisor, mean.dtype)


def _global_pool(fn: Callable[..., Any]) -> Kernel:
    def kernel(ctx: Ctx, step: Step, v: list[Any]) -> Any:
        x = v[0]
        rank = len(x.shape)
        axes = list(range(1, rank - 1)) if ctx.nhwc else list(range(2, rank))
        return fn(x, axis=axes, keepdims=True)

    return kernel


# -- normalisation ----------------------------------------------------------------------------
@kernels.op("BatchNormalization")
def _batch_norm(ctx: Ctx, step: Step, v: list[Any]) -> Any:
    """Training: the batch statistics normalise, and the running ones are updated as PyTorch
    does (ONNX momentum m keeps m of the old value; the variance folded in is the unbiased
    one), outside the gradient. Inference: the running statistics. Statistics in fp32."""
    x, scale, bias, running_mean, running_var = v
    # the variables themselves (to assign); statistics that are not training state (constants)
    # normalise in both modes and are never updated
    mean_var = (
        ctx.state.get(step.inputs[3], running_mean),
        ctx.state.get(step.inputs[4], running_var),
    )
    update = step.inputs[3] in ctx.state and step.inputs[4] in ctx.state
    eps, m = step.attrs["epsilon"], step.attrs["momentum"]
    scale, bias = tf.cast(scale, tf.float32), tf.cast(bias, tf.float32)
    rank = len(x.shape)
    if rank == 4:  # the fused kernel (NHWC or NCHW), in fp32: TF 2.12's has no bfloat16
        fmt = "NHWC" if ctx.nhwc else "NCHW"
        xs = _stats(x)
        if ctx.training and update:
            y, mean, var = tf.compat.v1.nn.fused_batch_norm(
                xs, scale, bias, epsilon=eps, data_format=fmt, is_training=True
            )  # ``var`` is already the unbiased batch variance
            y = tf.cast(y, x.dtype)
        else:
            y, _, _ = tf.compat.v1.nn.fused_batch_norm(
                xs, scale, bias, mean=tf.cast(mean_var[0], tf.float32),
                variance=tf.cast(mean_var[1], tf.float32), epsilon=eps, data_format=fmt,
                is_training=False,
            )  # fmt: skip
            return tf.cast(y, x.dtype)
    else:
        xs = _stats(x)
        channel = _channel_shape(ctx, rank)
        if ctx.training and update:
            axes = [i for i in range(rank) if i != (rank - 1 if ctx.nhwc else 1)]
            mean, biased = tf.nn.moments(xs, axes)
            n = math.prod(int(x.shape[i]) for i in axes)
            var = biased * (n / max(n - 1, 1))
        else:
            mean, biased = tf.cast(mean_var[0], xs.dtype), tf.cast(mean_var[1], xs.dtype)
        y = tf.nn.batch_normalization(xs, tf.reshape(mean, channel), tf.reshape(biased, channel),
                                      tf.reshape(bias, channel), tf.reshape(scale, channel), eps)  # fmt: skip
        y = tf.cast(y, x.dtype)
        if not (ctx.training and update):
            return y
    for variable, batch in zip(mean_var, (mean, var), strict=True):
        batch = tf.stop_gradient(tf.cast(batch, variable.dtype))
        variable.assign(m * variable + (1.0 - m) * batch)
    return y


def _elu(x: Any, alpha: float, gamma: float) -> Any:
    """``gamma * (x if x > 0 else alpha * (exp(x) - 1))``: Elu (gamma 1) and Selu; the
    exponential of the negative part only, so no branch overflows (tf.nn.elu has alpha 1)."""
    return gamma * (tf.nn.relu(x) + alpha * tf.math.expm1(tf.minimum(x, tf.zeros_like(x))))


def _normalise(x: Any, axes: list[int], eps: float) -> Any:
    xs = _stats(x)
    mean, var = tf.nn.moments(xs, axes, keepdims=True)
    return (xs - mean) * tf.math.rsqrt(var + eps)


@kernels.op("LayerNormalization")
def _layer_norm(ctx: Ctx, step: Step, v: list[Any]) -> Any:
    x, scale = v[0], v[1]
    bias = optional(v, 2)
    xh = _normalise(x, list(range(step.attrs["axis"], len(x.shape))), step.attrs["epsilon"])
    y = xh * tf.cast(scale, xh.dtype)
    if bias is not None:
        y = y + tf.cast(bias, xh.dtype)
    return tf.cast(y, x.dtype)


@kernels.op("LRN")
def _lrn(ctx: Ctx, step: Step, v: list[Any]) -> Any:
    a, x = step.attrs, v[0]
    xs = _stats(x)
    if ctx.nhwc and a["lo"] == a["hi"]:  # TensorFlow's own: channels last, a centred window
        y = tf.nn.local_response_normalization(xs, depth_radius=a["lo"], bias=a["bias"],
                                               alpha=a["alpha"] / a["size"], beta=a["beta"])  # fmt: skip
        return tf.cast(y, x.dtype)
    axis = len(x.shape) - 1 if ctx.nhwc else 1
    pads = [[0, 0]] * len(x.shape)
    pads[axis] = [a["lo"], a["hi"]]
    sq, c = tf.pad(xs * xs, pads), x.shape[axis]
    s = tf.add_n([tf.gather(sq, tf.range(k, k + c), axis=axis) for k in range(a["size"])])
    return tf.cast(xs * (a["bias"] + a["alpha"] / a["size"] * s) ** -a["beta"], x.dtype)


@kernels.op("InstanceNormalization")
def _instance_norm(ctx: Ctx, step: Step, v: list[Any]) -> Any:
    x, scale, bias = v
    rank = len(x.shape)
    axes = list(range(1, rank - 1)) if ctx.nhwc else list(range(2, rank))
    xh = _normalise(x, axes, step.attrs["epsilon"])
    channel = _channel_shape(ctx, rank)
    y = xh * tf.reshape(tf.cast(scale, xh.dtype), channel) + tf.reshape(
        tf.cast(bias, xh.dtype), channel
    )
    return tf.cast(y, x.dtype)


def _softmax(fn: Callable[..., Any]) -> Kernel:
    def kernel(ctx: Ctx, step: Step, v: list[Any]) -> Any:
        x = v[0]
        return tf.cast(fn(_stats(x), axis=step.attrs["axis"]), x.dtype)

    return kernel


# -- layout and indexing ----------------------------------------------------------------------
@kernels.op("Gather")
def _gather(ctx: Ctx, step: Step, v: list[Any]) -> Any:
    data, idx = v
    axis = step.attrs["axis"]
    size = int(data.shape[axis])
    if isinstance(idx, np.ndarray):
        idx = np.where(idx < 0, idx + size, idx)
    else:
        idx = tf.where(idx < 0, idx + tf.cast(size, idx.dtype), idx)
    return tf.gather(data, idx, axis=axis)


@kernels.op("Pad")
def _pad(ctx: Ctx, step: Step, v: list[Any]) -> Any:
    """constant and reflect are TensorFlow's own; edge and wrap gather clamped or wrapped
    indices along each padded axis."""
    a = step.attrs
    x, mode, pads = v[0], a["mode"], a["pads"]
    if mode == "constant":
        return tf.pad(x, [list(p) for p in pads], constant_values=a["constant_value"])
    if mode == "reflect":
        return tf.pad(x, [list(p) for p in pads], mode="REFLECT")
    if mode not in ("edge", "wrap"):
        raise UnsupportedError(f"tensorflow: {step.where()}: pad mode {mode!r} is not mapped")
    for axis, (lo, hi) in enumerate(pads):
        if lo or hi:
            size = int(x.shape[axis])
            idx = np.arange(-lo, size + hi)
            idx = np.clip(idx, 0, size - 1) if mode == "edge" else idx % size
            x = tf.gather(x, idx, axis=axis)
    return x


@kernels.op("Resize")
def _resize(ctx: Ctx, step: Step, v: list[Any]) -> Any:
    y = v[0]
    for axis, table in step.attrs["tables"]:
        if step.attrs["mode"] == "nearest":
            y = tf.gather(y, table, axis=axis)
        else:
            lo, hi, wl, wh = table
            shape = [1] * len(y.shape)
            shape[axis] = -1
            y = (tf.gather(y, lo, axis=axis) * tf.constant(wl.reshape(shape), y.dtype)
                 + tf.gather(y, hi, axis=axis) * tf.constant(wh.reshape(shape), y.dtype))  # fmt: skip
    return y


@kernels.op("Split")
def _split(ctx: Ctx, step: Step, v: list[Any]) -> Any:
    return tuple(tf.split(v[0], step.attrs["split"], axis=step.attrs["axis"]))


_TF_DTYPES = {"float32": tf.float32, "float64": tf.float64, "float16": tf.float16,
              "bfloat16": tf.bfloat16, "int64": tf.int64, "int32": tf.int32, "int8": tf.int8,
              "uint8": tf.uint8, "bool": tf.bool}  # fmt: skip


@kernels.op("Cast")
def _cast(ctx: Ctx, step: Step, v: list[Any]) -> Any:
    to = cast_target(_TF_DTYPES, step, "tensorflow")
    x = v[0]
    if to.is_floating:
        return x if _float(x) else tf.cast(x, ctx.compute)  # floats in the network's dtype
    return tf.cast(x, to)


@kernels.op("Dropout")
def _dropout(ctx: Ctx, step: Step, v: list[Any]) -> Any:
    x, ratio = v[0], step.attrs["ratio"]
    if not ctx.training or ratio == 0.0:
        return x
    return tf.nn.dropout(x, rate=ratio, seed=ctx.seed + step.index)


# -- element-wise -----------------------------------------------------------------------------
def _div(a: Any, b: Any) -> Any:
    if _float(a):
        return tf.math.divide(a, b)
    return tf.math.truncatediv(a, b)


def _pow(a: Any, b: Any) -> Any:
    if isinstance(b, np.ndarray) and b.size == 1 and float(b.reshape(())) == 2.0:
        return a * a
    return tf.pow(a, tf.cast(b, a.dtype))


@kernels.op("Clip")
def _clip(ctx: Ctx, step: Step, v: list[Any]) -> Any:
    x, low, high = v[0], step.attrs["min"], step.attrs["max"]
    if low is not None:
        x = tf.maximum(x, tf.cast(low, x.dtype))
    if high is not None:
        x = tf.minimum(x, tf.cast(high, x.dtype))
    return x


@kernels.op("HardSigmoid")
def _hard_sigmoid(ctx: Ctx, step: Step, v: list[Any]) -> Any:
    a, x = step.attrs, v[0]
    return tf.clip_by_value(a["alpha"] * x + a["beta"], 0.0, 1.0)


@kernels.op("Tile")
def _tile(ctx: Ctx, step: Step, v: list[Any]) -> Any:
    return tf.tile(v[0], [int(r) for r in np.asarray(step.attrs["repeats"]).reshape(-1)])


@kernels.op("Reshape")
def _flat(ctx: Ctx, step: Step, v: list[Any]) -> Any:
    return tf.reshape(v[0], step.attrs["shape"])


# -- the NHWC layout of image activations ------------------------------------------------------
class Nhwc:
    """A 4-D activation of ONNX shape (N, C, H, W) held as the (N, H, W, C) tensor ``t``."""

    __slots__ = ("t",)

    def __init__(self, t: Any) -> None:
        self.t = t


#: ops whose kernel reads ``ctx.nhwc`` and runs on a channels-last 4-D input
IMAGE_OPS = frozenset({"Conv", "ConvTranspose", "MaxPool", "AveragePool", "BatchNormalization",
                       "GlobalAveragePool", "GlobalMaxPool", "InstanceNormalization",
                       "LRN"})  # fmt: skip
#: element-wise ops: on NHWC inputs (the others broadcast into that layout) they give NHWC
ELEMENTWISE_NHWC = frozenset({
    "Abs", "Add", "Cast", "Ceil", "Clip", "Div", "Dropout", "Elu", "Erf", "Exp", "Floor", "Gelu",
    "HardSigmoid", "HardSwish", "Identity", "LeakyRelu", "Log", "Max", "Min", "Mul", "Neg", "Pow",
    "Reciprocal", "Relu", "Selu", "Sigmoid", "Softplus", "Sqrt", "Sub", "Sum", "Tanh",
})  # fmt: skip


def _nhwc_operand(v: Any) -> Any:
    """An operand broadcast against an NHWC activation, in the NHWC layout."""
    if isinstance(v, Nhwc):
        return v.t
    rank = len(v.shape)
    if rank == 0 or int(np.prod(v.shape)) == 1:
        return v
    shape = (1,) * (4 - rank) + tuple(int(d) for d in v.shape)
    if isinstance(v, np.ndarray):
        return v.reshape(shape).transpose(_TO_NHWC)
    return tf.transpose(tf.reshape(v, shape), _TO_NHWC)


def layout_call(kernels: dict[str, Kernel], ctx: Ctx) -> Callable[[Step, list[Any]], Any]:
    """The importer's ``call`` with 4-D image activations kept channels-last (see the module
    docstring); values in ONNX's layout are permuted in once, NHWC values out once."""
    onnx_layout: dict[int, Any] = {}

    def nchw(v: Any) -> Any:
        if not isinstance(v, Nhwc):
            return v
        if id(v) not in onnx_layout:
            onnx_layout[id(v)] = (v, tf.transpose(v.t, _TO_NCHW))
        return onnx_layout[id(v)][1]

    def call(step: Step, args: list[Any]) -> Any:
        op, kernel = step.op, kernels[step.op]
        out_rank = len(step.out_shapes[0]) if step.out_shapes and step.out_shapes[0] else None
        if op in IMAGE_OPS and len(step.in_shapes[0] or ()) == 4:
            x = args[0].t if isinstance(args[0], Nhwc) else tf.transpose(args[0], _TO_NHWC)
            ctx.nhwc = True
            try:
                return Nhwc(kernel(ctx, step, [x, *args[1:]]))
            finally:
                ctx.nhwc = False
        image = [a for a in args if isinstance(a, Nhwc)]
        if image and op in ELEMENTWISE_NHWC and out_rank == 4:
            return Nhwc(kernel(ctx, step, [None if a is None else _nhwc_operand(a) for a in args]))
        if image and op == "Concat" and len(image) == len(args):
            return Nhwc(
                tf.concat([a.t for a in image], axis=_NCHW_TO_NHWC_AXIS[step.attrs["axis"]])
            )
        if image and op == "Transpose" and tuple(step.attrs["perm"]) == _TO_NHWC:
            return args[0].t  # the NHWC tensor is that transpose already
        if (
            image
            and op in ("Flatten", "Reshape")
            and step.in_shapes[0] is not None
            and step.in_shapes[0][2:] == (1, 1)
            and step.attrs["shape"] == (step.in_shapes[0][0], step.in_shapes[0][1])
        ):
            return tf.reshape(args[0].t, step.attrs["shape"])  # (N, 1, 1, C): the same order
        if op == "Transpose" and tuple(step.attrs["perm"]) == _TO_NCHW and not image:
            return Nhwc(args[0])  # an (N, H, W, C) value read as NCHW: kept as it is
        return kernel(ctx, step, [nchw(a) for a in args])

    return call


def onnx_value(v: Any) -> Any:
    """A value of the graph in ONNX's layout (the graph's output may be NHWC)."""
    return tf.transpose(v.t, _TO_NCHW) if isinstance(v, Nhwc) else v


_OWN_KERNELS: dict[str, Kernel] = {
    "Slice": index_slice,
    "Add": _binary(tf.math.add),
    "Sub": _binary(tf.math.subtract),
    "Mul": _binary(tf.math.multiply),
    "Div": _binary(_div),
    "Pow": _binary(_pow),
    "Max": _variadic(tf.maximum),
    "Min": _variadic(tf.minimum),
    "Sum": _variadic(tf.math.add),
    "Relu": _unary(tf.nn.relu),
    "LeakyRelu": lambda ctx, step, v: tf.nn.leaky_relu(v[0], step.attrs["alpha"]),
    "Elu": lambda ctx, step, v: _elu(v[0], step.attrs["alpha"], step.attrs["gamma"]),
    "Selu": lambda ctx, step, v: _elu(v[0], step.attrs["alpha"], step.attrs["gamma"]),
    "PRelu": lambda ctx, step, v: tf.where(
        v[0] < 0, v[0] * tf.reshape(tf.cast(v[1], v[0].dtype), step.attrs["slope_shape"]), v[0]
    ),
    "Sigmoid": _unary(tf.math.sigmoid),
    "Tanh": _unary(tf.math.tanh),
    "Exp": _unary(tf.math.exp),
    "Log": _unary(tf.math.log),
    "Sqrt": _unary(tf.math.sqrt),
    "Reciprocal": _unary(tf.math.reciprocal),
    "Neg": _unary(tf.math.negative),
    "Abs": _unary(tf.math.abs),
    "Erf": _unary(tf.math.erf),
    "Softplus": _unary(tf.math.softplus),
    "Gelu": lambda ctx, step, v: tf.nn.gelu(v[0], approximate=step.attrs["approximate"] == "tanh"),
    "HardSwish": _unary(lambda x: x * tf.nn.relu6(x + 3.0) / 6.0),
    "Identity": _unary(tf.identity),
    "Floor": _unary(tf.math.floor),
    "Ceil": _unary(tf.math.ceil),
    "Equal": _binary(tf.math.equal),
    "Less": _binary(tf.math.less),
    "Greater": _binary(tf.math.greater),
    "IsNaN": _unary(tf.math.is_nan),
    "IsInf": _unary(tf.math.is_inf),
    "Not": _unary(tf.math.logical_not),
    "And": _binary(tf.math.logical_and),
    "Or": _binary(tf.math.logical_or),
    "Where": lambda ctx, step, v: tf.where(tf.cast(v[0], tf.bool), v[1], v[2]),
    "Einsum": lambda ctx, step, v: tf.einsum(step.attrs["equation"], *v),
    "GlobalAveragePool": _global_pool(tf.reduce_mean),
    "GlobalMaxPool": _global_pool(tf.reduce_max),
    "Softmax": _softmax(tf.nn.softmax),
    "LogSoftmax": _softmax(tf.nn.log_softmax),
    "ReduceMean": _reduce(tf.reduce_mean),
    "ReduceSum": _reduce(tf.reduce_sum),
    "ReduceMax": _reduce(tf.reduce_max),
    "ReduceMin": _reduce(tf.reduce_min),
    "ReduceProd": _reduce(tf.reduce_prod),
    "Expand": lambda ctx, step, v: tf.broadcast_to(v[0], step.attrs["shape"]),
    "Transpose": lambda ctx, step, v: tf.transpose(v[0], step.attrs["perm"]),
    "Concat": lambda ctx, step, v: tf.concat(list(v), axis=step.attrs["axis"]),
}
#: the table: the kernels entered with ``@kernels.op`` above, the one-expression kernels of
#: ``_OWN_KERNELS`` and the shared ones (suite/onnx/kernels.py: SHARED)
KERNELS: dict[str, Kernel] = kernels.with_shared(_OWN_KERNELS)
