"""MXNet (1.9) op kernels for the ONNX importer (suite/onnx/importer.py).

A kernel is ``kernel(ctx, step, args) -> symbol`` (a tuple for several outputs): the network
runs the importer's plan once per input shape on ``mx.sym`` variables and hands the symbol to a
hybridized ``gluon.SymbolBlock`` (suite/adapters/mxnet/network.py), so every shape a kernel
needs is static (``step.in_shapes``/``out_shapes``) and ``step.attrs`` are Python values.
``autograd`` differentiates the graph; BatchNormalization's running statistics are its
auxiliary states (updated by ``BatchNorm`` in training mode, never differentiated).

Values: MXNet's legacy operators do not promote types, so every value of the graph is fp32,
integers and booleans included (token ids, indices, masks: exact below 2**24); ``Cast`` to an
integer truncates, to bool compares with zero. A constant of one element is a Python scalar
for the scalar operators; a larger one, and the tables kernels make (Resize, Pad, pooling
divisors), become ``ctx.const`` variables that the network loads as parameters without a
gradient.

Adding an op: one function here, one entry in :data:`KERNELS`, the op's name in ``CORE_OPS``
(suite/onnx/ops.py: ``MXNetAdapter.onnx_ops`` declares them without importing
MXNet).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import mxnet as mx
import numpy as np

from suite.errors import UnsupportedError
from suite.onnx.importer import Step
from suite.onnx.kernels import KernelTable, optional
from suite.onnx.kernels import reduce as _reduce

S = mx.sym


@dataclass
class Ctx:
    """The constants a plan's symbol reads, by variable name (fp32 values)."""

    prefix: str  # of the constants' variable names (unique per symbol built)
    constants: dict[str, np.ndarray] = field(default_factory=dict)

    def const(self, value: Any) -> Any:
        """A constant array as a variable of the symbol (loaded as a parameter, no gradient)."""
        value = np.asarray(value, dtype=np.float32)
        if value.ndim == 0:  # the legacy operators have no 0-d arrays: shape () is "unknown"
            value = value.reshape(1)
        name = f"{self.prefix}const{len(self.constants)}"
        self.constants[name] = value
        return S.var(name, shape=value.shape, dtype="float32")

    def value(self, v: Any) -> Any:
        """A tensor input as a symbol, whether computed or constant."""
        return self.const(v) if isinstance(v, np.ndarray) else v


Kernel = Callable[[Ctx, Step, list[Any]], Any]

#: the kernels written as functions below enter the table where they are defined
kernels = KernelTable()


def _scalar(v: Any) -> float | None:
    """A one-element constant as a Python number (for MXNet's scalar operators)."""
    if isinstance(v, np.ndarray) and v.size == 1:
        return float(v.reshape(()))
    return None


def _shape(step: Step, i: int) -> tuple[int, ...]:
    shape = step.in_shapes[i] if i < len(step.in_shapes) else None
    if shape is None:
        raise UnsupportedError(f"mxnet: {step.where()}: input {i} has no static shape")
    return shape


def _to(step: Step, y: Any) -> Any:
    """``y`` reshaped to the step's output shape (a scalar operand may have added dims)."""
    return S.reshape(y, shape=step.out_shape())


# -- element-wise -----------------------------------------------------------------------------
def _binary(broadcast: str, scalar: Callable[[Any, float], Any],
            scalar_first: Callable[[float, Any], Any]) -> Kernel:  # fmt: skip
    def kernel(ctx: Ctx, step: Step, v: list[Any]) -> Any:
        a, b = v
        sa, sb = _scalar(a), _scalar(b)
        if sb is not None and sa is None:
            return _to(step, scalar(a, sb))
        if sa is not None and sb is None:
            return _to(step, scalar_first(sa, b))
        return getattr(S, broadcast)(ctx.value(a), ctx.value(b))

    return kernel


def _variadic(broadcast: str, scalar: Callable[[Any, float], Any]) -> Kernel:
    def kernel(ctx: Ctx, step: Step, v: list[Any]) -> Any:
        tensors = [x for x in v if _scalar(x) is None]
        y = ctx.value(tensors[0])
        for other in tensors[1:]:
            y = getattr(S, broadcast)(y, ctx.value(other))
        for x in v:
            if _scalar(x) is not None:
                y = scalar(y, float(x.reshape(())))
        return _to(step, y)

    return kernel


@kernels.op("Pow")
def _pow(ctx: Ctx, step: Step, v: list[Any]) -> Any:
    a, b = v
    e = _scalar(b)
    if e == 2.0:
        return a * a
    if e is not None:
        return a**e
    return S.broadcast_power(ctx.value(a), ctx.value(b))


@kernels.op("Clip")
def _clip(ctx: Ctx, step: Step, v: list[Any]) -> Any:
    x, low, high = v[0], step.attrs["min"], step.attrs["max"]
    if low is not None:
        x = S.maximum(x, low)
    if high is not None:
        x = S.minimum(x, high)
    return x


@kernels.op("Gelu")
def _gelu(ctx: Ctx, step: Step, v: list[Any]) -> Any:
    x = v[0]
    if step.attrs["approximate"] == "tanh":
        return 0.5 * x * (1.0 + S.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)))
    return 0.5 * x * (1.0 + S.erf(x * (1.0 / math.sqrt(2.0))))


@kernels.op("Cast")
def _cast(ctx: Ctx, step: Step, v: list[Any]) -> Any:
    """Every value is fp32 (see the module docstring): to an integer truncates towards zero,
    to bool is ``x != 0``, to a float changes nothing."""
    to = np.dtype(step.attrs["dtype"])
    x = v[0]
    if to.kind == "f":
        return S.identity(x)
    if to.kind == "b":
        return x != 0.0
    return S.trunc(x)


@kernels.op("Where")
def _where(ctx: Ctx, step: Step, v: list[Any]) -> Any:
    out = step.out_shape()
    full = [
        S.broadcast_to(
            S.reshape(ctx.value(t), shape=(1,) * (len(out) - len(s)) + s), shape=out
        )  # fmt: skip
        for t, s in zip(v, (_shape(step, i) for i in range(3)), strict=True)
    ]
    return S.where(*full)


# -- products ---------------------------------------------------------------------------------
def _pad_constant(x: Any, shape: tuple[int, ...], pads: list[tuple[int, int]], value: float) -> Any:
    """Constant padding of any axes: MXNet's ``pad`` where it applies (4-D/5-D, spatial axes
    only), else blocks of ``value`` concatenated on each padded axis."""
    if not any(p for pair in pads for p in pair):
        return x
    if len(shape) in (4, 5) and pads[0] == pads[1] == (0, 0):
        width = tuple(p for pair in pads for p in pair)
        return S.pad(x, mode="constant", pad_width=width, constant_value=value)
    cur = list(shape)
    for axis, (lo, hi) in enumerate(pads):
        parts = []
        if lo:
            parts.append(S.full(shape=tuple(cur[:axis] + [lo] + cur[axis + 1 :]), val=value))
        parts.append(x)
        if hi:
            parts.append(S.full(shape=tuple(cur[:axis] + [hi] + cur[axis + 1 :]), val=value))
        if len(parts) > 1:
            x = S.concat(*parts, dim=axis)
            cur[axis] += lo + hi
    return x


@kernels.op("Conv")
def _conv(ctx: Ctx, step: Step, v: list[Any]) -> Any:
    a = step.attrs
    x, w = v[0], v[1]
    b = optional(v, 2)
    w_shape = _shape(step, 1)
    pads = a["pads"]
    symmetric = all(lo == hi for lo, hi in pads)
    if not symmetric:
        x = _pad_constant(x, _shape(step, 0), [(0, 0), (0, 0), *pads], 0.0)
    args = [x, w] + ([b] if b is not None else [])
    return S.Convolution(*args, kernel=tuple(w_shape[2:]), stride=tuple(a["strides"]),
                         dilate=tuple(a["dilations"]),
                         pad=tuple(lo for lo, _ in pads) if symmetric else (0,) * len(pads),
                         num_filter=w_shape[0], num_group=a["group"], no_bias=b is None)  # fmt: skip


@kernels.op("ConvTranspose")
def _conv_transpose(ctx: Ctx, step: Step, v: list[Any]) -> Any:
    """MXNet's Deconvolution takes ONNX's weight layout (C_in, C_out / group, k...); the
    uncropped output is cut to ONNX's (begin, end) pads."""
    a = step.attrs
    x, w = v[0], v[1]
    b = optional(v, 2)
    w_shape = _shape(step, 1)
    n = len(a["pads"])
    args = [x, w] + ([b] if b is not None else [])
    y = S.Deconvolution(*args, kernel=tuple(w_shape[2:]), stride=tuple(a["strides"]),
                        dilate=tuple(a["dilations"]), pad=(0,) * n, adj=tuple(a["output_padding"]),
                        num_filter=w_shape[1] * a["group"], num_group=a["group"],
                        no_bias=b is None)  # fmt: skip
    out = step.out_shape()
    begin = (0, 0, *(lo for lo, _ in a["pads"]))
    end = (out[0], out[1], *(lo + o for (lo, _), o in zip(a["pads"], out[2:], strict=True)))
    return S.slice(y, begin=begin, end=end)


@kernels.op("MatMul")
def _matmul(ctx: Ctx, step: Step, v: list[Any]) -> Any:
    x, w = ctx.value(v[0]), ctx.value(v[1])
    sx, sw = _shape(step, 0), _shape(step, 1)
    out = step.out_shape()
    if len(sw) == 2:  # (..., k) @ (k, n): dot contracts x's last axis with w's first
        return S.reshape(S.dot(S.reshape(x, shape=(-1, sx[-1])) if len(sx) > 2 else x, w),
                         shape=out)  # fmt: skip
    if len(sw) == 1:  # (..., k) @ (k,)
        return S.reshape(S.dot(S.reshape(x, shape=(-1, sx[-1])), S.reshape(w, shape=(sw[0], 1))),
                         shape=out)  # fmt: skip
    if len(sx) == 1:  # (k,) @ (..., k, n): a (1, k) row, the row axis dropped after
        full = (*out[:-1], 1, out[-1])
        y = _matmul_batched(S.reshape(x, shape=(1, sx[0])), w, 2, len(sw), full, (1, sx[0]), sw)
        return S.reshape(y, shape=out)
    return _matmul_batched(x, w, len(sx), len(sw), out, sx, sw)


def _matmul_batched(x: Any, w: Any, rx: int, rw: int, out: tuple[int, ...],
                    sx: tuple[int, ...] | None = None, sw: tuple[int, ...] | None = None) -> Any:  # fmt: skip
    """(..., m, k) @ (..., k, n) with the leading dimensions broadcast to the output's."""
    if rx == 2 and rw == 2:
        return S.dot(x, w)
    lead = tuple(out[:-2])
    if sx is not None and sw is not None:
        x = S.broadcast_to(S.reshape(x, shape=(1,) * (len(out) - rx) + sx),
                           shape=(*lead, *sx[-2:]))  # fmt: skip
        w = S.broadcast_to(S.reshape(w, shape=(1,) * (len(out) - rw) + sw),
                           shape=(*lead, *sw[-2:]))  # fmt: skip
    if len(out) == 3:
        return S.batch_dot(x, w)
    return S.linalg.gemm2(x, w)


@kernels.op("Gemm")
def _gemm(ctx: Ctx, step: Step, v: list[Any]) -> Any:
    a = step.attrs
    x, w = ctx.value(v[0]), ctx.value(v[1])
    c = optional(v, 2)
    w_shape = _shape(step, 1)
    plain = a["transB"] and not a["transA"] and a["alpha"] == 1.0 and a["beta"] == 1.0
    if plain and c is not None and len(step.in_shapes) > 2 and step.in_shapes[2] == (w_shape[0],):
        return S.FullyConnected(x, w, ctx.value(c), num_hidden=w_shape[0], flatten=False)
    y = S.dot(x, w, transpose_a=a["transA"], transpose_b=a["transB"])
    if a["alpha"] != 1.0:
        y = y * a["alpha"]
    if c is not None:
        sc = _scalar(c)
        if sc is not None:
            y = y + a["beta"] * sc
        else:
            cv = ctx.value(c)
            y = S.broadcast_add(y, cv if a["beta"] == 1.0 else cv * a["beta"])
    return y


# -- pooling ----------------------------------------------------------------------------------
def _pool(ctx: Ctx, step: Step, x: Any, kind: str, value: float) -> Any:
    a = step.attrs
    if any(d != 1 for d in a["dilations"]):
        raise UnsupportedError(f"mxnet: {step.where()}: dilated pooling is not mapped")
    x = _pad_constant(x, _shape(step, 0), [(0, 0), (0, 0), *a["ceil_pads"]], value)
    return S.Pooling(x, kernel=tuple(a["kernel_shape"]), stride=tuple(a["strides"]),
                     pool_type=kind, pooling_convention="valid")  # fmt: skip


@kernels.op("MaxPool")
def _max_pool(ctx: Ctx, step: Step, v: list[Any]) -> Any:
    if len([o for o in step.outputs if o]) > 1:
        raise UnsupportedError(f"mxnet: {step.where()}: the indices output is not mapped")
    return _pool(ctx, step, v[0], "max", -math.inf)


@kernels.op("AveragePool")
def _avg_pool(ctx: Ctx, step: Step, v: list[Any]) -> Any:
    """The window means on zero-padded input times the window's size, divided by the cells
    ONNX counts (the importer's divisor)."""
    a = step.attrs
    mean = _pool(ctx, step, v[0], "avg", 0.0)
    size = math.prod(a["kernel_shape"])
    if a["uniform_divisor"] is not None:
        return mean if a["uniform_divisor"] == size else mean * (size / a["uniform_divisor"])
    return S.broadcast_mul(mean, ctx.const(size / a["divisor"]))


def _global_pool(fn: Callable[..., Any]) -> Kernel:
    def kernel(ctx: Ctx, step: Step, v: list[Any]) -> Any:
        rank = len(_shape(step, 0))
        return fn(v[0], axis=tuple(range(2, rank)), keepdims=True)

    return kernel


# -- normalisation ----------------------------------------------------------------------------
@kernels.op("BatchNormalization")
def _batch_norm(ctx: Ctx, step: Step, v: list[Any]) -> Any:
    """MXNet's BatchNorm: batch statistics in training mode (``autograd.record``), updating the
    running ones (its momentum is ONNX's: the weight of the old value); otherwise those."""
    x, scale, bias, mean, var = (ctx.value(t) for t in v)
    return S.BatchNorm(x, scale, bias, mean, var, eps=step.attrs["epsilon"],
                       momentum=step.attrs["momentum"], fix_gamma=False, use_global_stats=False,
                       axis=1)  # fmt: skip


@kernels.op("LayerNormalization")
def _layer_norm(ctx: Ctx, step: Step, v: list[Any]) -> Any:
    """MXNet's LayerNorm normalises one axis: the normalised axes are merged into the last."""
    x, scale = v[0], ctx.value(v[1])
    shape = _shape(step, 0)
    axis = step.attrs["axis"]
    inner = math.prod(shape[axis:])
    bias = None if optional(v, 2) is None else ctx.value(v[2])

    def vector(t: Any, i: int) -> Any:
        s = _shape(step, i)
        if math.prod(s) != inner:  # a broadcast scale or bias
            t = S.broadcast_to(S.reshape(t, shape=(1,) * (len(shape) - axis - len(s)) + s),
                               shape=shape[axis:])  # fmt: skip
        return S.reshape(t, shape=(inner,))

    gamma = vector(scale, 1)
    beta = vector(bias, 2) if bias is not None else S.zeros_like(gamma)
    flat = S.reshape(x, shape=(*shape[:axis], inner)) if len(shape) - axis != 1 else x
    y = S.LayerNorm(flat, gamma, beta, axis=-1, eps=step.attrs["epsilon"])
    return S.reshape(y, shape=shape) if len(shape) - axis != 1 else y


@kernels.op("LRN")
def _lrn(ctx: Ctx, step: Step, v: list[Any]) -> Any:
    a = step.attrs
    if a["lo"] != a["hi"] or len(_shape(step, 0)) != 4:
        raise UnsupportedError(
            f"{step.where()}: MXNet's LRN takes 4-D input and an odd size (its window is "
            f"centred); this node has size {a['size']} on a {len(_shape(step, 0))}-D input"
        )
    return S.LRN(ctx.value(v[0]), alpha=a["alpha"], beta=a["beta"], knorm=a["bias"],
                 nsize=a["size"])  # fmt: skip


@kernels.op("InstanceNormalization")
def _instance_norm(ctx: Ctx, step: Step, v: list[Any]) -> Any:
    x, scale, bias = (ctx.value(t) for t in v)
    return S.InstanceNorm(x, scale, bias, eps=step.attrs["epsilon"])


# -- reductions, layout, indexing -------------------------------------------------------------
@kernels.op("Reshape")
def _reshape(ctx: Ctx, step: Step, v: list[Any]) -> Any:
    return S.reshape(ctx.value(v[0]), shape=step.attrs["shape"])


@kernels.op("Expand")
def _expand(ctx: Ctx, step: Step, v: list[Any]) -> Any:
    shape, out = _shape(step, 0), step.attrs["shape"]
    x = S.reshape(ctx.value(v[0]), shape=(1,) * (len(out) - len(shape)) + shape)
    return S.broadcast_to(x, shape=out)


@kernels.op("Concat")
def _concat(ctx: Ctx, step: Step, v: list[Any]) -> Any:
    parts = [ctx.value(t) for t in v]
    return parts[0] if len(parts) == 1 else S.concat(*parts, dim=step.attrs["axis"])


@kernels.op("Split")
def _split(ctx: Ctx, step: Step, v: list[Any]) -> Any:
    axis, sizes = step.attrs["axis"], step.attrs["split"]
    bounds = np.cumsum([0, *sizes]).tolist()
    return tuple(S.slice_axis(v[0], axis=axis, begin=lo, end=hi)
                 for lo, hi in zip(bounds[:-1], bounds[1:], strict=True))  # fmt: skip


@kernels.op("Slice")
def _slice(ctx: Ctx, step: Step, v: list[Any]) -> Any:
    slices = step.attrs["slices"]
    return S.slice(ctx.value(v[0]), begin=tuple(s[0] for s in slices),
                   end=tuple(s[1] for s in slices), step=tuple(s[2] for s in slices))  # fmt: skip


@kernels.op("Gather")
def _gather(ctx: Ctx, step: Step, v: list[Any]) -> Any:
    data, idx = ctx.value(v[0]), v[1]
    axis = step.attrs["axis"]
    size = _shape(step, 0)[axis]
    if isinstance(idx, np.ndarray):
        idx = np.where(idx < 0, idx + size, idx)
        if idx.ndim == 0:  # one index: the axis goes away
            return S.reshape(S.slice_axis(data, axis=axis, begin=int(idx), end=int(idx) + 1),
                             shape=step.out_shape())  # fmt: skip
        return S.take(data, ctx.const(idx), axis=axis, mode="clip")
    return S.take(data, idx, axis=axis, mode="wrap")  # wrap: a negative index counts from the end


@kernels.op("Pad")
def _pad(ctx: Ctx, step: Step, v: list[Any]) -> Any:
    """constant: blocks of the value; reflect, edge and wrap: a gather of reflected, clamped or
    wrapped indices along each padded axis."""
    a = step.attrs
    x, mode, pads = v[0], a["mode"], a["pads"]
    shape = _shape(step, 0)
    if mode == "constant":
        return _pad_constant(x, shape, pads, a["constant_value"])
    if mode not in ("reflect", "edge", "wrap"):
        raise UnsupportedError(f"mxnet: {step.where()}: pad mode {mode!r} is not mapped")
    for axis, (lo, hi) in enumerate(pads):
        if lo or hi:
            n = shape[axis]
            idx = np.arange(-lo, n + hi)
            if mode == "edge":
                idx = np.clip(idx, 0, n - 1)
            elif mode == "wrap":
                idx = idx % n
            else:
                period = 2 * (n - 1) if n > 1 else 1
                idx = np.abs(idx) % period
                idx = np.where(idx >= n, period - idx, idx)
            x = S.take(x, ctx.const(idx), axis=axis)
    return x


@kernels.op("Resize")
def _resize(ctx: Ctx, step: Step, v: list[Any]) -> Any:
    y = v[0]
    rank = len(_shape(step, 0))
    for axis, table in step.attrs["tables"]:
        if step.attrs["mode"] == "nearest":
            y = S.take(y, ctx.const(table), axis=axis)
        else:
            lo, hi, wl, wh = table
            shape = [1] * rank
            shape[axis] = -1
            y = S.broadcast_add(
                S.broadcast_mul(S.take(y, ctx.const(lo), axis=axis), ctx.const(wl.reshape(shape))),
                S.broadcast_mul(S.take(y, ctx.const(hi), axis=axis), ctx.const(wh.reshape(shape))),
            )
    return y


@kernels.op("Tile")
def _tile(ctx: Ctx, step: Step, v: list[Any]) -> Any:
    return S.tile(
        ctx.value(v[0]), reps=tuple(int(r) for r in np.asarray(step.attrs["repeats"]).reshape(-1))
    )


@kernels.op("Einsum")
def _einsum(ctx: Ctx, step: Step, v: list[Any]) -> Any:
    """Einsum of one or two operands as MXNet's legacy operators do it (they have no einsum):
    indices only one side has and the output lacks are summed first; then the operands are
    transposed to (batch, kept, contracted) and (batch, contracted, kept), reshaped to 3-D and
    multiplied with ``batch_dot``, and the result is reshaped and transposed to the output's
    order. An ellipsis, a repeated index within an operand (a diagonal) or more than two
    operands are refused, naming the node."""
    eq = step.attrs["equation"]
    inputs, _, out = eq.partition("->")
    subs = inputs.split(",")
    if "." in eq or len(subs) > 2 or any(len(set(t)) != len(t) for t in subs):
        raise UnsupportedError(f"mxnet: {step.where()}: einsum {eq!r} (an ellipsis, a diagonal "
                               "or more than two operands) is not mapped")  # fmt: skip
    if not _:  # implicit output: the indices that appear once, in alphabetical order
        out = "".join(sorted(i for i in set(inputs) - {","} if inputs.count(i) == 1))
    size: dict[str, int] = {}
    xs = []
    for k, t in enumerate(subs):
        shape = _shape(step, k)
        size.update(zip(t, shape, strict=True))
        others = "".join(subs[:k] + subs[k + 1 :])
        drop = [a for a, i in enumerate(t) if i not in out and i not in others]
        x = ctx.value(v[k])
        if drop:
            x = S.sum(x, axis=tuple(drop))
            t = "".join(i for i in t if i in out or i in others)
        xs.append((x, t))
    if len(xs) == 1:
        x, t = xs[0]
        return S.transpose(x, axes=tuple(t.index(i) for i in out))
    (a, ta), (b, tb) = xs
    batch = [i for i in out if i in ta and i in tb]
    left = [i for i in out if i in ta and i not in tb]
    right = [i for i in out if i in tb and i not in ta]
    contract = [i for i in ta if i in tb and i not in out]

    def n(idx: list[str]) -> int:
        return math.prod(size[i] for i in idx)

    a3 = S.reshape(S.transpose(a, axes=tuple(ta.index(i) for i in batch + left + contract)),
                   shape=(n(batch), n(left), n(contract)))  # fmt: skip
    b3 = S.reshape(S.transpose(b, axes=tuple(tb.index(i) for i in batch + contract + right)),
                   shape=(n(batch), n(contract), n(right)))  # fmt: skip
    got = batch + left + right
    y = S.reshape(S.batch_dot(a3, b3), shape=tuple(size[i] for i in got))
    return S.transpose(y, axes=tuple(got.index(i) for i in out))


def _unary(fn: Callable[[Any], Any]) -> Kernel:
    return lambda ctx, step, v: fn(ctx.value(v[0]))


_OWN_KERNELS: dict[str, Kernel] = {
    "Add": _binary("broadcast_add", lambda t, c: t + c, lambda c, t: c + t),
    "Sub": _binary("broadcast_sub", lambda t, c: t - c, lambda c, t: c - t),
    "Mul": _binary("broadcast_mul", lambda t, c: t * c, lambda c, t: c * t),
    "Div": _binary("broadcast_div", lambda t, c: t / c, lambda c, t: c / t),
    "Max": _variadic("broadcast_maximum", lambda t, c: S.maximum(t, c)),
    "Min": _variadic("broadcast_minimum", lambda t, c: S.minimum(t, c)),
    "Sum": _variadic("broadcast_add", lambda t, c: t + c),
    "Equal": _binary("broadcast_equal", lambda t, c: t == c, lambda c, t: t == c),
    "Less": _binary("broadcast_lesser", lambda t, c: t < c, lambda c, t: t > c),
    "Greater": _binary("broadcast_greater", lambda t, c: t > c, lambda c, t: t < c),
    "And": _binary(
        "broadcast_logical_and", lambda t, c: t * float(c != 0), lambda c, t: t * float(c != 0)
    ),  # fmt: skip
    "Or": _binary(
        "broadcast_logical_or",
        lambda t, c: S.maximum(t, float(c != 0)),
        lambda c, t: S.maximum(t, float(c != 0)),
    ),  # fmt: skip
    "Not": _unary(S.logical_not),
    "Relu": _unary(S.relu),
    "LeakyRelu": lambda ctx, step, v: S.LeakyReLU(
        v[0], act_type="leaky", slope=step.attrs["alpha"]
    ),
    # Elu and Selu (gamma * elu)
    "Elu": lambda ctx, step, v: (
        S.LeakyReLU(ctx.value(v[0]), act_type="elu", slope=step.attrs["alpha"])
        * step.attrs["gamma"]
    ),
    "Selu": lambda ctx, step, v: (
        S.LeakyReLU(ctx.value(v[0]), act_type="elu", slope=step.attrs["alpha"])
        * step.attrs["gamma"]
    ),
    # x if x >= 0 else slope * x, as relu(x) - slope * relu(-x) with the slope broadcast
    "PRelu": lambda ctx, step, v: (
        S.relu(ctx.value(v[0]))
        - S.broadcast_mul(
            S.reshape(ctx.value(v[1]), shape=step.attrs["slope_shape"]), S.relu(-ctx.value(v[0]))
        )
    ),
    "Sigmoid": _unary(S.sigmoid),
    "Tanh": _unary(S.tanh),
    "Exp": _unary(S.exp),
    "Log": _unary(S.log),
    "Sqrt": _unary(S.sqrt),
    "Reciprocal": _unary(S.reciprocal),
    "Neg": _unary(S.negative),
    "Abs": _unary(S.abs),
    "Erf": _unary(S.erf),
    "Floor": _unary(S.floor),
    "Ceil": _unary(S.ceil),
    "IsNaN": _unary(lambda x: x != x),
    "IsInf": _unary(lambda x: S.abs(x) == math.inf),
    "Softplus": _unary(lambda x: S.Activation(x, act_type="softrelu")),
    "HardSigmoid": lambda ctx, step, v: S.clip(
        step.attrs["alpha"] * v[0] + step.attrs["beta"], 0.0, 1.0
    ),
    "HardSwish": _unary(lambda x: x * S.clip(x * (1.0 / 6.0) + 0.5, 0.0, 1.0)),
    "Identity": _unary(S.identity),
    "GlobalAveragePool": _global_pool(S.mean),
    "GlobalMaxPool": _global_pool(S.max),
    "Softmax": lambda ctx, step, v: S.softmax(v[0], axis=step.attrs["axis"]),
    "LogSoftmax": lambda ctx, step, v: S.log_softmax(v[0], axis=step.attrs["axis"]),
    "ReduceMean": _reduce(S.mean),
    "ReduceSum": _reduce(S.sum),
    "ReduceMax": _reduce(S.max),
    "ReduceMin": _reduce(S.min),
    "ReduceProd": _reduce(S.prod),
    "Transpose": lambda ctx, step, v: S.transpose(ctx.value(v[0]), axes=tuple(step.attrs["perm"])),
    "Dropout": lambda ctx, step, v: S.Dropout(v[0], p=step.attrs["ratio"]),
}
#: the table: the kernels entered with ``@kernels.op`` above, the one-expression kernels of
#: ``_OWN_KERNELS`` and the shared ones (suite/onnx/kernels.py: SHARED)
KERNELS: dict[str, Kernel] = kernels.with_shared(_OWN_KERNELS)
