"""NumPy op kernels for the ONNX importer (suite/onnx/importer.py), each with its
vector-Jacobian product.

A kernel is ``kernel(ctx, step, args) -> (output, backward)``: ``args`` are the step's tensor
inputs (NumPy arrays; ``None`` for an absent optional input), ``step.attrs`` its normalised
attributes (static inputs included), and ``backward(dy, needs)`` returns the gradient of each
tensor input (``None`` where ``needs`` says it is not needed). A step with several outputs
(Split) returns a tuple of outputs, and its backward takes a list of cotangents (``None`` for an
output nothing read). Ops without a gradient (comparisons, Cast to integers, index arithmetic)
return :data:`NO_GRAD`; a gradient asked of them is an error naming the node.

Adding an op: one function here, one entry in :data:`KERNELS`, the op's name in ``CORE_OPS``
(suite/onnx/ops.py: ``NumPyAdapter.onnx_ops`` declares them without importing
this module).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view
from scipy.special import erf

from suite.adapters.numpy.vjp import Backward, unbroadcast
from suite.errors import UnsupportedError
from suite.onnx.importer import Step
from suite.onnx.kernels import KernelTable, optional


@dataclass
class Ctx:
    """What a kernel may depend on besides its inputs."""

    training: bool
    rng: np.random.Generator
    dtype: np.dtype[Any]


Result = tuple[Any, Backward]
Kernel = Callable[[Ctx, Step, list[Any]], Result]

#: the kernels written as functions below enter the table where they are defined
kernels = KernelTable()


def NO_GRAD(dy: Any, needs: Sequence[bool]) -> list[np.ndarray | None]:  # noqa: N802
    if any(needs):
        raise UnsupportedError("a gradient was asked of an op that has none")
    return [None] * len(needs)


def _unary(
    fn: Callable[[np.ndarray], np.ndarray], grad: Callable[[np.ndarray, np.ndarray], np.ndarray]
) -> Kernel:
    """``grad(x, y)`` is dy/dx elementwise."""

    def kernel(ctx: Ctx, step: Step, v: list[Any]) -> Result:
        x = v[0]
        y = fn(x)
        return y, lambda dy, needs: [dy * grad(x, y)]

    return kernel


def _binary(
    fn: Callable[[Any, Any], np.ndarray],
    grads: Callable[[np.ndarray, Any, Any, np.ndarray], tuple[Any, Any]],
) -> Kernel:
    """Broadcasting binary op; ``grads(dy, a, b, y)`` gives the two unreduced gradients."""

    def kernel(ctx: Ctx, step: Step, v: list[Any]) -> Result:
        a, b = v
        y = fn(a, b)

        def backward(dy: np.ndarray, needs: Sequence[bool]) -> list[np.ndarray | None]:
            ga, gb = grads(dy, a, b, y)
            return [
                unbroadcast(np.asarray(ga), np.shape(a)) if needs[0] else None,
                unbroadcast(np.asarray(gb), np.shape(b)) if needs[1] else None,
            ]

        return y, backward

    return kernel


def _no_grad(fn: Callable[[Ctx, Step, list[Any]], Any]) -> Kernel:
    return lambda ctx, step, v: (fn(ctx, step, v), NO_GRAD)


def _variadic(fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Kernel:
    """Max/Min/Sum over any number of inputs; the gradient goes to the input that won (the
    first one on ties)."""

    def kernel(ctx: Ctx, step: Step, v: list[Any]) -> Result:
        y = v[0]
        for other in v[1:]:
            y = fn(y, other)

        def backward(dy: np.ndarray, needs: Sequence[bool]) -> list[np.ndarray | None]:
            taken = np.zeros(np.shape(y), bool)
            out: list[np.ndarray | None] = []
            for x, need in zip(v, needs, strict=True):
                mine = (np.broadcast_to(x, np.shape(y)) == y) & ~taken
                taken |= mine
                out.append(unbroadcast(np.where(mine, dy, 0), np.shape(x)) if need else None)
            return out

        return y, backward

    return kernel


# -- matrix products -----------------------------------------------------------------------
@kernels.op("MatMul")
def _matmul(ctx: Ctx, step: Step, v: list[Any]) -> Result:
    a, b = v

    def backward(dy: np.ndarray, needs: Sequence[bool]) -> list[np.ndarray | None]:
        da = db = None
        a2 = a[None, :] if a.ndim == 1 else a
        b2 = b[:, None] if b.ndim == 1 else b
        d2 = dy
        if a.ndim == 1:
            d2 = np.expand_dims(d2, -2)
        if b.ndim == 1:
            d2 = np.expand_dims(d2, -1)
        if needs[0]:
            da = unbroadcast(d2 @ np.swapaxes(b2, -1, -2), a2.shape).reshape(a.shape)
        if needs[1]:
            if b2.ndim == 2:
                db = (
                    a2.reshape(-1, a2.shape[-1]).T
                    @ np.broadcast_to(
                        d2, (*np.broadcast_shapes(a2.shape[:-2], d2.shape[:-2]), *d2.shape[-2:])
                    ).reshape(-1, d2.shape[-1])
                ).reshape(b.shape)
            else:
                db = unbroadcast(np.swapaxes(a2, -1, -2) @ d2, b2.shape).reshape(b.shape)
        return [da, db]

    return np.matmul(a, b), backward


@kernels.op("Gemm")
def _gemm(ctx: Ctx, step: Step, v: list[Any]) -> Result:
    a = step.attrs
    x, w = v[0], v[1]
    c = optional(v, 2)
    xa = x.T if a["transA"] else x
    wb = w.T if a["transB"] else w
    y = a["alpha"] * (xa @ wb)
    if c is not None:
        y = y + a["beta"] * c

    def backward(dy: np.ndarray, needs: Sequence[bool]) -> list[np.ndarray | None]:
        dx = dw = dc = None
        if needs[0]:
            g = a["alpha"] * (dy @ wb.T)
            dx = g.T if a["transA"] else g
        if needs[1]:
            g = a["alpha"] * (xa.T @ dy)
            dw = g.T if a["transB"] else g
        if c is not None and len(needs) > 2 and needs[2]:
            dc = unbroadcast(a["beta"] * dy, np.shape(c))
        return [dx, dw, dc]

    return y.astype(x.dtype, copy=False), backward


@kernels.op("Einsum")
def _einsum(ctx: Ctx, step: Step, v: list[Any]) -> Result:
    eq = step.attrs["equation"]
    lhs, _, out = eq.partition("->")
    terms = lhs.split(",")
    if "..." in eq or not out and "->" not in eq:
        raise UnsupportedError(
            f"{step.where()}: einsum with ellipsis or implicit output is not mapped"
        )
    y = np.einsum(eq, *v, optimize=True)

    def backward(dy: np.ndarray, needs: Sequence[bool]) -> list[np.ndarray | None]:
        grads: list[np.ndarray | None] = []
        for i, need in enumerate(needs):
            if not need:
                grads.append(None)
                continue
            others = [t for j, t in enumerate(terms) if j != i]
            avail = set(out) | set("".join(others))
            if any(ch not in avail for ch in terms[i]) or len(set(terms[i])) != len(terms[i]):
                raise UnsupportedError(f"{step.where()}: the gradient of this einsum is not mapped")
            spec = ",".join([out, *others]) + "->" + terms[i]
            grads.append(
                np.einsum(spec, dy, *[x for j, x in enumerate(v) if j != i], optimize=True)
            )
        return grads

    return y, backward


# -- convolution and pooling ---------------------------------------------------------------
def _windows(xp: np.ndarray, k: Sequence[int], s: Sequence[int], d: Sequence[int]) -> np.ndarray:
    """(N, C, OH, OW, KH, KW) windows of padded NCHW ``xp``."""
    span = [(k[i] - 1) * d[i] + 1 for i in range(2)]
    w = sliding_window_view(xp, span, axis=(2, 3))
    return w[:, :, :: s[0], :: s[1], :: d[0], :: d[1]]


def _scatter_windows(
    cols: np.ndarray, shape: Sequence[int], s: Sequence[int], d: Sequence[int]
) -> np.ndarray:
    """The adjoint of :func:`_windows`: (N, C, OH, OW, KH, KW) added back into ``shape``."""
    out = np.zeros(shape, cols.dtype)
    _, _, oh, ow, kh, kw = cols.shape
    for i in range(kh):
        for j in range(kw):
            r, c = i * d[0], j * d[1]
            out[:, :, r : r + s[0] * (oh - 1) + 1 : s[0], c : c + s[1] * (ow - 1) + 1 : s[1]] += (
                cols[:, :, :, :, i, j]
            )
    return out


def _pad2(x: np.ndarray, pads: Sequence[tuple[int, int]], value: float = 0.0) -> np.ndarray:
    return np.pad(x, ((0, 0), (0, 0), *pads), constant_values=value)


def _need_2d(step: Step) -> None:
    if len(step.attrs["kernel_shape"]) != 2:
        raise UnsupportedError(f"numpy: {step.where()}: only 2-D windows are mapped")


def conv_forward(x: np.ndarray, w: np.ndarray, pads: Sequence[tuple[int, int]], s: Sequence[int],
                 d: Sequence[int], g: int) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """Grouped, dilated cross-correlation; returns (y, windows)."""
    xp = _pad2(x, pads)
    cols = _windows(xp, w.shape[2:], s, d)  # (N, C, OH, OW, KH, KW)
    n, c, oh, ow, kh, kw = cols.shape
    o = w.shape[0]
    if g == 1:
        y = np.tensordot(cols, w, axes=((1, 4, 5), (1, 2, 3))).transpose(0, 3, 1, 2)
    else:
        cg = cols.reshape(n, g, c // g, oh, ow, kh, kw)
        wg = w.reshape(g, o // g, c // g, kh, kw)
        y = np.einsum("ngchwij,gocij->ngohw", cg, wg, optimize=True).reshape(n, o, oh, ow)
    return np.ascontiguousarray(y), cols


def conv_input_grad(dy: np.ndarray, w: np.ndarray, padded: Sequence[int], s: Sequence[int],
                    d: Sequence[int], g: int) -> np.ndarray:  # fmt: skip
    """The gradient of :func:`conv_forward` with respect to its padded input (shape ``padded``)."""
    n, o, oh, ow = dy.shape
    _, cpg, kh, kw = w.shape
    if g == 1:
        dcols = np.tensordot(dy, w, axes=(1, 0)).transpose(
            0, 3, 1, 2, 4, 5
        )  # (N, C, OH, OW, KH, KW)
    else:
        dyg = dy.reshape(n, g, o // g, oh, ow)
        wg = w.reshape(g, o // g, cpg, kh, kw)
        dcols = np.einsum("ngohw,gocij->ngchwij", dyg, wg, optimize=True).reshape(
            n, g * cpg, oh, ow, kh, kw
        )
    return _scatter_windows(dcols, padded, s, d)


def conv_weight_grad(
    dy: np.ndarray, cols: np.ndarray, w_shape: Sequence[int], g: int
) -> np.ndarray:
    n, o, oh, ow = dy.shape
    if g == 1:
        return np.tensordot(dy, cols, axes=((0, 2, 3), (0, 2, 3)))
    c = cols.shape[1]
    dyg = dy.reshape(n, g, o // g, oh, ow)
    cg = cols.reshape(n, g, c // g, *cols.shape[2:])
    return np.einsum("ngohw,ngchwij->gocij", dyg, cg, optimize=True).reshape(w_shape)


def _crop(xp: np.ndarray, pads: Sequence[tuple[int, int]], shape: Sequence[int]) -> np.ndarray:
    (t, _), (lft, _) = pads
    return xp[:, :, t : t + shape[2], lft : lft + shape[3]]


def conv2d_grouped(
    x: np.ndarray, w: np.ndarray, *, stride: int, padding: int, dilation: int, groups: int
) -> Result:
    """The operator word's grouped or dilated convolution (no bias) and its VJP."""
    pads, s, d = ((padding, padding), (padding, padding)), (stride, stride), (dilation, dilation)
    y, cols = conv_forward(x, w, pads, s, d, groups)
    padded = (x.shape[0], x.shape[1], x.shape[2] + 2 * padding, x.shape[3] + 2 * padding)

    def backward(dy: np.ndarray, needs: Sequence[bool]) -> list[np.ndarray | None]:
        dx = (
            _crop(conv_input_grad(dy, w, padded, s, d, groups), pads, x.shape) if needs[0] else None
        )
        dw = conv_weight_grad(dy, cols, w.shape, groups) if needs[1] else None
        return [dx, dw]

    return y, backward


@kernels.op("Conv")
def _conv(ctx: Ctx, step: Step, v: list[Any]) -> Result:
    _need_2d(step)
    a = step.attrs
    x, w = v[0], v[1]
    b = optional(v, 2)
    s, d, g, pads = a["strides"], a["dilations"], a["group"], a["pads"]
    y, cols = conv_forward(x, w, pads, s, d, g)
    if b is not None:
        y += b.reshape(1, -1, 1, 1)
    padded = (x.shape[0], x.shape[1], x.shape[2] + sum(pads[0]), x.shape[3] + sum(pads[1]))

    def backward(dy: np.ndarray, needs: Sequence[bool]) -> list[np.ndarray | None]:
        dx = dw = db = None
        if needs[0]:
            dx = _crop(conv_input_grad(dy, w, padded, s, d, g), pads, x.shape)
        if needs[1]:
            dw = conv_weight_grad(dy, cols, w.shape, g)
        if b is not None and len(needs) > 2 and needs[2]:
            db = dy.sum(axis=(0, 2, 3))
        return [dx, dw, db]

    return y, backward


@kernels.op("ConvTranspose")
def _conv_transpose(ctx: Ctx, step: Step, v: list[Any]) -> Result:
    """The adjoint of a convolution with the same weight (C_in, C_out/group, KH, KW)."""
    _need_2d(step)
    a = step.attrs
    x, w = v[0], v[1]
    b = optional(v, 2)
    s, d, g, pads = a["strides"], a["dilations"], a["group"], a["pads"]
    out = step.out_shape()
    padded = (out[0], out[1], out[2] + sum(pads[0]), out[3] + sum(pads[1]))
    y = _crop(conv_input_grad(x, w, padded, s, d, g), pads, out)
    if b is not None:
        y = y + b.reshape(1, -1, 1, 1)

    def backward(dy: np.ndarray, needs: Sequence[bool]) -> list[np.ndarray | None]:
        dx = dw = db = None
        dyp = _pad2(dy, pads)
        cols = _windows(dyp, w.shape[2:], s, d)[:, :, : x.shape[2], : x.shape[3]]
        if needs[0]:
            dx, _ = conv_forward(dy, w, pads, s, d, g)
            dx = dx[:, :, : x.shape[2], : x.shape[3]]
        if needs[1]:
            dw = conv_weight_grad(x, cols, w.shape, g)
        if b is not None and len(needs) > 2 and needs[2]:
            db = dy.sum(axis=(0, 2, 3))
        return [dx, dw, db]

    return np.ascontiguousarray(y), backward


@kernels.op("MaxPool")
def _max_pool(ctx: Ctx, step: Step, v: list[Any]) -> Result:
    _need_2d(step)
    a = step.attrs
    x = v[0]
    k, s, d, pads = a["kernel_shape"], a["strides"], a["dilations"], a["ceil_pads"]
    if int(a.get("storage_order", 0)) or len([o for o in step.outputs if o]) > 1:
        raise UnsupportedError(f"numpy: {step.where()}: the indices output is not mapped")
    xp = _pad2(x, pads, -np.inf)
    cols = _windows(xp, k, s, d)
    flat = cols.reshape(*cols.shape[:4], -1)
    where = flat.argmax(axis=-1)[..., None]
    y = np.take_along_axis(flat, where, axis=-1)[..., 0]

    def backward(dy: np.ndarray, needs: Sequence[bool]) -> list[np.ndarray | None]:
        dflat = np.zeros(flat.shape, dy.dtype)
        np.put_along_axis(dflat, where, dy[..., None], axis=-1)
        return [_crop(_scatter_windows(dflat.reshape(cols.shape), xp.shape, s, d), pads, x.shape)]

    return y, backward


@kernels.op("AveragePool")
def _avg_pool(ctx: Ctx, step: Step, v: list[Any]) -> Result:
    _need_2d(step)
    a = step.attrs
    x = v[0]
    k, s, d, pads = a["kernel_shape"], a["strides"], a["dilations"], a["ceil_pads"]
    divisor = a["divisor"].astype(x.dtype)
    xp = _pad2(x, pads)
    cols = _windows(xp, k, s, d)
    y = cols.sum(axis=(4, 5)) / divisor

    def backward(dy: np.ndarray, needs: Sequence[bool]) -> list[np.ndarray | None]:
        g = np.broadcast_to((dy / divisor)[..., None, None], cols.shape)
        return [_crop(_scatter_windows(np.ascontiguousarray(g), xp.shape, s, d), pads, x.shape)]

    return y, backward


def _global_pool(kind: str) -> Kernel:
    def kernel(ctx: Ctx, step: Step, v: list[Any]) -> Result:
        x = v[0]
        axes = tuple(range(2, x.ndim))
        if kind == "avg":
            area = math.prod(x.shape[2:])
            return x.mean(axis=axes, keepdims=True), lambda dy, needs: [
                np.broadcast_to(dy / area, x.shape)
            ]
        y = x.max(axis=axes, keepdims=True)
        mask = x == y
        first = mask & (np.cumsum(mask.reshape(*x.shape[:2], -1), axis=-1).reshape(x.shape) == 1)
        return y, lambda dy, needs: [np.where(first, dy, 0)]

    return kernel


# -- normalisation -------------------------------------------------------------------------
def _normalise(x: np.ndarray, axes: tuple[int, ...], eps: float) -> tuple[np.ndarray, np.ndarray]:
    mean = x.mean(axis=axes, keepdims=True)
    rstd = 1.0 / np.sqrt(x.var(axis=axes, keepdims=True) + eps)
    return (x - mean) * rstd, rstd


def _normalise_backward(
    dxhat: np.ndarray, xhat: np.ndarray, rstd: np.ndarray, axes: tuple[int, ...]
) -> np.ndarray:
    return rstd * (
        dxhat
        - dxhat.mean(axis=axes, keepdims=True)
        - xhat * (dxhat * xhat).mean(axis=axes, keepdims=True)
    )


@kernels.op("BatchNormalization")
def _batch_norm(ctx: Ctx, step: Step, v: list[Any]) -> Result:
    """Training: batch statistics, and the running ones updated in place as PyTorch does (ONNX
    momentum m keeps m of the old value; the variance folded in is unbiased). Inference: the
    running statistics."""
    x, scale, bias, mean, var = v
    eps = step.attrs["epsilon"]
    axes = (0, *range(2, x.ndim))
    channel = (1, -1) + (1,) * (x.ndim - 2)
    if ctx.training:
        xhat, rstd = _normalise(x, axes, eps)
        m = step.attrs["momentum"]
        n = x.size // x.shape[1]
        mean *= m
        mean += (1.0 - m) * x.mean(axis=axes)
        var *= m
        var += (1.0 - m) * (n / max(n - 1, 1)) * x.var(axis=axes)
    else:
        rstd = (1.0 / np.sqrt(var + eps)).reshape(channel)
        xhat = (x - mean.reshape(channel)) * rstd
    y = xhat * scale.reshape(channel) + bias.reshape(channel)
    training = ctx.training

    def backward(dy: np.ndarray, needs: Sequence[bool]) -> list[np.ndarray | None]:
        dxhat = dy * scale.reshape(channel)
        dx = _normalise_backward(dxhat, xhat, rstd, axes) if training else dxhat * rstd
        return [dx, (dy * xhat).sum(axis=axes), dy.sum(axis=axes), None, None]

    return y.astype(x.dtype, copy=False), backward


@kernels.op("LayerNormalization")
def _layer_norm(ctx: Ctx, step: Step, v: list[Any]) -> Result:
    x, scale = v[0], v[1]
    bias = optional(v, 2)
    axes = tuple(range(step.attrs["axis"], x.ndim))
    xhat, rstd = _normalise(x, axes, step.attrs["epsilon"])
    y = xhat * scale
    if bias is not None:
        y = y + bias

    def backward(dy: np.ndarray, needs: Sequence[bool]) -> list[np.ndarray | None]:
        lead = tuple(range(x.ndim - len(axes)))
        dx = _normalise_backward(dy * scale, xhat, rstd, axes) if needs[0] else None
        ds = unbroadcast((dy * xhat).sum(axis=lead), np.shape(scale)) if needs[1] else None
        db = (
            unbroadcast(dy.sum(axis=lead), np.shape(bias))
            if bias is not None and needs[2]
            else None
        )
        return [dx, ds, db]

    return y.astype(x.dtype, copy=False), backward


def _channel_window(a: np.ndarray, before: int, after: int) -> np.ndarray:
    """Per channel, the sum of ``a`` over the channels from ``before`` below it to ``after``
    above it (zeros past the ends)."""
    pad = [(0, 0)] * a.ndim
    pad[1] = (before, after)
    padded, c = np.pad(a, pad), a.shape[1]
    return sum(padded[:, k : k + c] for k in range(before + after + 1))  # type: ignore[return-value]


@kernels.op("LRN")
def _lrn(ctx: Ctx, step: Step, v: list[Any]) -> Result:
    a = step.attrs
    x = v[0]
    s = a["bias"] + a["alpha"] / a["size"] * _channel_window(x * x, a["lo"], a["hi"])
    scale = s ** -a["beta"]
    y = x * scale

    def backward(dy: np.ndarray, needs: Sequence[bool]) -> list[np.ndarray | None]:
        # y = x s^-b, s = bias + (alpha/size) W(x^2): dx = dy s^-b + 2x (alpha/size) W'(g),
        # g = -b dy x s^(-b-1), and W' (the transpose) the window with its ends swapped
        g = -a["beta"] * dy * x * scale / s
        return [dy * scale + 2 * x * a["alpha"] / a["size"] * _channel_window(g, a["hi"], a["lo"])]

    return y.astype(x.dtype, copy=False), backward


@kernels.op("Elu", "Selu")
def _elu(ctx: Ctx, step: Step, v: list[Any]) -> Result:
    """``gamma * (x if x > 0 else alpha * (exp(x) - 1))``: Elu (gamma 1) and Selu."""
    x, alpha, gamma = v[0], step.attrs["alpha"], step.attrs["gamma"]
    neg = gamma * alpha * np.exp(np.minimum(x, 0))  # d/dx of the negative side
    y = np.where(x > 0, gamma * x, neg - gamma * alpha).astype(x.dtype)
    return y, lambda dy, needs: [dy * np.where(x > 0, gamma, neg)]


@kernels.op("PRelu")
def _prelu(ctx: Ctx, step: Step, v: list[Any]) -> Result:
    x, slope = v
    s = np.reshape(slope, step.attrs["slope_shape"])
    neg = x < 0
    y = np.where(neg, s * x, x).astype(x.dtype)

    def backward(dy: np.ndarray, needs: Sequence[bool]) -> list[np.ndarray | None]:
        ds = unbroadcast(np.where(neg, x, 0) * dy, s.shape).reshape(np.shape(slope))
        return [np.where(neg, s, 1) * dy, ds if needs[1] else None]

    return y, backward


@kernels.op("InstanceNormalization")
def _instance_norm(ctx: Ctx, step: Step, v: list[Any]) -> Result:
    x, scale, bias = v
    axes = tuple(range(2, x.ndim))
    channel = (1, -1) + (1,) * (x.ndim - 2)
    xhat, rstd = _normalise(x, axes, step.attrs["epsilon"])
    y = xhat * scale.reshape(channel) + bias.reshape(channel)

    def backward(dy: np.ndarray, needs: Sequence[bool]) -> list[np.ndarray | None]:
        dx = _normalise_backward(dy * scale.reshape(channel), xhat, rstd, axes)
        red = (0, *axes)
        return [dx, (dy * xhat).sum(axis=red), dy.sum(axis=red)]

    return y.astype(x.dtype, copy=False), backward


def _softmax(log: bool) -> Kernel:
    def kernel(ctx: Ctx, step: Step, v: list[Any]) -> Result:
        x, axis = v[0], step.attrs["axis"]
        z = x - x.max(axis=axis, keepdims=True)
        e = np.exp(z)
        s = e.sum(axis=axis, keepdims=True)
        if log:
            y = z - np.log(s)
            p = e / s
            return y, lambda dy, needs: [dy - p * dy.sum(axis=axis, keepdims=True)]
        y = e / s
        return y, lambda dy, needs: [y * (dy - (dy * y).sum(axis=axis, keepdims=True))]

    return kernel


# -- reductions ----------------------------------------------------------------------------
_REDUCERS: dict[str, Callable[..., Any]] = {
    "mean": np.mean, "sum": np.sum, "max": np.max, "min": np.min, "prod": np.prod,
    "sumsq": lambda t, axis, keepdims: np.sum(t * t, axis=axis, keepdims=keepdims),
    "l2": lambda t, axis, keepdims: np.sqrt(np.sum(t * t, axis=axis, keepdims=keepdims)),
}  # fmt: skip


def _reduce(kind: str) -> Kernel:
    def kernel(ctx: Ctx, step: Step, v: list[Any]) -> Result:
        x = v[0]
        axes, keep = tuple(step.attrs["axes"]), step.attrs["keepdims"]
        if not axes:
            return x, lambda dy, needs: [dy]
        fn = _REDUCERS[kind]
        y = np.asarray(fn(x, axis=axes, keepdims=keep))
        yk = np.asarray(fn(x, axis=axes, keepdims=True))
        count = math.prod(x.shape[a] for a in axes)

        def backward(dy: np.ndarray, needs: Sequence[bool]) -> list[np.ndarray | None]:
            dyk = dy.reshape(yk.shape)
            if kind == "mean":
                return [np.broadcast_to(dyk / count, x.shape)]
            if kind == "sum":
                return [np.broadcast_to(dyk, x.shape)]
            if kind == "sumsq":
                return [2 * x * dyk]
            if kind == "l2":
                return [x * dyk / np.where(yk == 0, 1, yk)]
            if kind == "prod":
                return [dyk * yk / x]
            hit = x == yk
            return [np.where(hit, dyk, 0) / hit.sum(axis=axes, keepdims=True)]

        return y.astype(x.dtype, copy=False), backward

    return kernel


# -- shapes and indexing -------------------------------------------------------------------
@kernels.op("Reshape")
def _reshape(ctx: Ctx, step: Step, v: list[Any]) -> Result:
    x = v[0]
    return x.reshape(step.attrs["shape"]), lambda dy, needs: [dy.reshape(x.shape)]


@kernels.op("Expand")
def _expand(ctx: Ctx, step: Step, v: list[Any]) -> Result:
    x = v[0]
    return np.broadcast_to(x, step.attrs["shape"]), lambda dy, needs: [unbroadcast(dy, x.shape)]


@kernels.op("Transpose")
def _transpose(ctx: Ctx, step: Step, v: list[Any]) -> Result:
    perm = step.attrs["perm"]
    return v[0].transpose(perm), lambda dy, needs: [dy.transpose(np.argsort(perm))]


@kernels.op("Concat")
def _concat(ctx: Ctx, step: Step, v: list[Any]) -> Result:
    axis = step.attrs["axis"]
    bounds = np.cumsum([t.shape[axis] for t in v])[:-1]
    return np.concatenate(v, axis=axis), lambda dy, needs: np.split(dy, bounds, axis=axis)


@kernels.op("Split")
def _split(ctx: Ctx, step: Step, v: list[Any]) -> Result:
    x, axis, sizes = v[0], step.attrs["axis"], step.attrs["split"]
    parts = np.split(x, np.cumsum(sizes)[:-1], axis=axis)

    def backward(dys: list[np.ndarray | None], needs: Sequence[bool]) -> list[np.ndarray | None]:
        full = [np.zeros_like(p) if g is None else g for p, g in zip(parts, dys, strict=True)]
        return [np.concatenate(full, axis=axis)]

    return tuple(parts), backward  # type: ignore[return-value]


@kernels.op("Slice")
def _slice(ctx: Ctx, step: Step, v: list[Any]) -> Result:
    x = v[0]
    index = tuple(slice(*s) for s in step.attrs["slices"])

    def backward(dy: np.ndarray, needs: Sequence[bool]) -> list[np.ndarray | None]:
        g = np.zeros(x.shape, dy.dtype)
        g[index] = dy
        return [g]

    return x[index], backward


@kernels.op("Gather")
def _gather(ctx: Ctx, step: Step, v: list[Any]) -> Result:
    data, idx = v[0], np.asarray(v[1], dtype=np.int64)
    axis = step.attrs["axis"]
    idx = np.where(idx < 0, idx + data.shape[axis], idx)

    def backward(dy: np.ndarray, needs: Sequence[bool]) -> list[np.ndarray | None]:
        g = np.zeros(data.shape, dy.dtype)
        index_axes = tuple(range(axis, axis + idx.ndim))
        np.add.at(np.moveaxis(g, axis, 0), idx, np.moveaxis(dy, index_axes, range(idx.ndim)))
        return [g, None]

    return np.take(data, idx, axis=axis), backward


@kernels.op("Pad")
def _pad(ctx: Ctx, step: Step, v: list[Any]) -> Result:
    x, a = v[0], step.attrs
    pads = a["pads"]
    mode = a["mode"]
    if mode == "constant":
        y = np.pad(x, pads, constant_values=a["constant_value"])
    elif mode in ("reflect", "edge", "wrap"):
        y = np.pad(x, pads, mode=mode)
    else:
        raise UnsupportedError(f"numpy: {step.where()}: pad mode {mode!r} is not mapped")
    index = tuple(slice(b, b + n) for (b, _), n in zip(pads, x.shape, strict=True))

    def backward(dy: np.ndarray, needs: Sequence[bool]) -> list[np.ndarray | None]:
        if mode != "constant":
            raise UnsupportedError(
                f"numpy: {step.where()}: the gradient of {mode} padding is not mapped"
            )
        return [dy[index]]

    return y, backward


@kernels.op("Resize")
def _resize(ctx: Ctx, step: Step, v: list[Any]) -> Result:
    x = v[0]
    tables = step.attrs["tables"]
    y = x
    trace = []
    for axis, table in tables:
        trace.append((axis, table, y.shape))
        if step.attrs["mode"] == "nearest":
            y = np.take(y, table, axis=axis)
        else:
            lo, hi, wl, wh = table
            shape = [1] * y.ndim
            shape[axis] = -1
            y = np.take(y, lo, axis=axis) * wl.reshape(shape).astype(y.dtype) + np.take(
                y, hi, axis=axis
            ) * wh.reshape(shape).astype(y.dtype)

    def backward(dy: np.ndarray, needs: Sequence[bool]) -> list[np.ndarray | None]:
        g = dy
        for axis, table, shape in reversed(trace):
            out = np.zeros(shape, g.dtype)
            moved = np.moveaxis(out, axis, 0)
            gm = np.moveaxis(g, axis, 0)
            if step.attrs["mode"] == "nearest":
                np.add.at(moved, table, gm)
            else:
                lo, hi, wl, wh = table
                extra = (-1,) + (1,) * (gm.ndim - 1)
                np.add.at(moved, lo, gm * wl.reshape(extra))
                np.add.at(moved, hi, gm * wh.reshape(extra))
            g = out
        return [g]

    return y, backward


@kernels.op("Tile")
def _tile(ctx: Ctx, step: Step, v: list[Any]) -> Result:
    x = v[0]
    reps = [int(r) for r in np.asarray(step.attrs["repeats"]).reshape(-1)]

    def backward(dy: np.ndarray, needs: Sequence[bool]) -> list[np.ndarray | None]:
        split = dy.reshape([s for r, n in zip(reps, x.shape, strict=True) for s in (r, n)])
        return [split.sum(axis=tuple(range(0, 2 * x.ndim, 2)))]

    return np.tile(x, reps), backward


@kernels.op("Where")
def _where(ctx: Ctx, step: Step, v: list[Any]) -> Result:
    cond, a, b = v
    y = np.where(cond, a, b)

    def backward(dy: np.ndarray, needs: Sequence[bool]) -> list[np.ndarray | None]:
        return [None,
                unbroadcast(np.where(cond, dy, 0), np.shape(a)) if needs[1] else None,
                unbroadcast(np.where(cond, 0, dy), np.shape(b)) if needs[2] else None]  # fmt: skip

    return y, backward


@kernels.op("Dropout")
def _dropout(ctx: Ctx, step: Step, v: list[Any]) -> Result:
    """Identity in inference; in training inverted dropout (as PyTorch)."""
    x, ratio = v[0], step.attrs["ratio"]
    if not ctx.training or ratio == 0.0:
        return x, lambda dy, needs: [dy]
    keep = ctx.rng.random(x.shape, dtype=x.dtype) >= ratio
    mask = keep.astype(x.dtype) / (1.0 - ratio)
    return x * mask, lambda dy, needs: [dy * mask]


@kernels.op("Cast")
def _cast(ctx: Ctx, step: Step, v: list[Any]) -> Result:
    x = v[0]
    to = np.dtype(step.attrs["dtype"])
    if to.kind == "f":  # floats stay in the network's dtype
        y = x.astype(ctx.dtype)
        return y, lambda dy, needs: [
            dy.astype(x.dtype) if np.asarray(x).dtype.kind == "f" else None
        ]
    return np.asarray(x).astype(to), NO_GRAD


@kernels.op("Clip")
def _clip(ctx: Ctx, step: Step, v: list[Any]) -> Result:
    x = v[0]
    lo, hi = step.attrs["min"], step.attrs["max"]
    y = np.clip(x, -np.inf if lo is None else lo, np.inf if hi is None else hi).astype(
        x.dtype, copy=False
    )
    inside = (x >= (-np.inf if lo is None else lo)) & (x <= (np.inf if hi is None else hi))
    return y, lambda dy, needs: [np.where(inside, dy, 0)]


@kernels.op("HardSigmoid")
def _hard_sigmoid(ctx: Ctx, step: Step, v: list[Any]) -> Result:
    x, alpha, beta = v[0], step.attrs["alpha"], step.attrs["beta"]
    z = alpha * x + beta
    inside = (z > 0) & (z < 1)
    return np.clip(z, 0, 1).astype(x.dtype), lambda dy, needs: [np.where(inside, dy * alpha, 0)]


@kernels.op("HardSwish")
def _hard_swish(ctx: Ctx, step: Step, v: list[Any]) -> Result:
    x = v[0]
    z = x / 6 + 0.5
    h = np.clip(z, 0, 1)
    grad = np.where(z <= 0, 0.0, np.where(z >= 1, 1.0, x / 3 + 0.5))
    return (x * h).astype(x.dtype), lambda dy, needs: [dy * grad.astype(x.dtype)]


_SQRT_HALF = math.sqrt(0.5)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


@kernels.op("Gelu")
def _gelu(ctx: Ctx, step: Step, v: list[Any]) -> Result:
    x = v[0]
    if step.attrs["approximate"] == "tanh":
        c = math.sqrt(2 / math.pi)
        t = np.tanh(c * (x + 0.044715 * x**3))
        y = 0.5 * x * (1 + t)
        grad = 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * c * (1 + 3 * 0.044715 * x * x)
        return y, lambda dy, needs: [dy * grad]
    cdf = 0.5 * (1.0 + erf(x * _SQRT_HALF))
    return x * cdf, lambda dy, needs: [dy * (cdf + x * np.exp(-0.5 * x * x) * _INV_SQRT_2PI)]


def _pow(dy: np.ndarray, a: Any, b: Any, y: np.ndarray) -> tuple[Any, Any]:
    ga = dy * b * np.power(a, b - 1)
    gb = dy * y * np.log(np.where(np.asarray(a) > 0, a, 1))
    return ga, gb


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))


_OWN_KERNELS: dict[str, Kernel] = {
    # elementwise
    "Add": _binary(np.add, lambda dy, a, b, y: (dy, dy)),
    "Sub": _binary(np.subtract, lambda dy, a, b, y: (dy, -dy)),
    "Mul": _binary(np.multiply, lambda dy, a, b, y: (dy * b, dy * a)),
    "Div": _binary(
        lambda a, b: np.divide(a, b) if np.asarray(a).dtype.kind == "f" else np.floor_divide(a, b),
        lambda dy, a, b, y: (dy / b, -dy * a / (b * b)),
    ),  # fmt: skip
    "Pow": _binary(lambda a, b: np.power(a, b).astype(np.asarray(a).dtype), _pow),
    "Max": _variadic(np.maximum),
    "Min": _variadic(np.minimum),
    "Sum": _variadic(np.add),
    "Relu": _unary(lambda x: np.maximum(x, 0), lambda x, y: (x > 0).astype(x.dtype)),
    "LeakyRelu": lambda ctx, step, v: _unary(
        lambda x: np.where(x > 0, x, x * step.attrs["alpha"]).astype(x.dtype),
        lambda x, y: np.where(x > 0, 1.0, step.attrs["alpha"]).astype(x.dtype),
    )(ctx, step, v),  # fmt: skip
    "Sigmoid": _unary(_sigmoid, lambda x, y: y * (1 - y)),
    "Tanh": _unary(np.tanh, lambda x, y: 1 - y * y),
    "Exp": _unary(np.exp, lambda x, y: y),
    "Log": _unary(np.log, lambda x, y: 1 / x),
    "Sqrt": _unary(np.sqrt, lambda x, y: 0.5 / y),
    "Reciprocal": _unary(lambda x: 1 / x, lambda x, y: -y * y),
    "Neg": _unary(np.negative, lambda x, y: -np.ones_like(x)),
    "Abs": _unary(np.abs, lambda x, y: np.sign(x)),
    "Erf": _unary(
        lambda x: erf(x).astype(x.dtype), lambda x, y: (2 / math.sqrt(math.pi)) * np.exp(-x * x)
    ),
    "Softplus": _unary(lambda x: np.logaddexp(0, x).astype(x.dtype), lambda x, y: _sigmoid(x)),
    "Identity": lambda ctx, step, v: (v[0], lambda dy, needs: [dy]),
    "Floor": _no_grad(lambda ctx, step, v: np.floor(v[0])),
    "Ceil": _no_grad(lambda ctx, step, v: np.ceil(v[0])),
    "Equal": _no_grad(lambda ctx, step, v: np.equal(v[0], v[1])),
    "Less": _no_grad(lambda ctx, step, v: np.less(v[0], v[1])),
    "Greater": _no_grad(lambda ctx, step, v: np.greater(v[0], v[1])),
    "IsNaN": _no_grad(lambda ctx, step, v: np.isnan(v[0])),
    "IsInf": _no_grad(lambda ctx, step, v: np.isinf(v[0])),
    "Not": _no_grad(lambda ctx, step, v: np.logical_not(v[0])),
    "And": _no_grad(lambda ctx, step, v: np.logical_and(v[0], v[1])),
    "Or": _no_grad(lambda ctx, step, v: np.logical_or(v[0], v[1])),
    # pooling
    "GlobalAveragePool": _global_pool("avg"),
    "GlobalMaxPool": _global_pool("max"),
    # softmax
    "Softmax": _softmax(log=False),
    "LogSoftmax": _softmax(log=True),
    # reductions
    "ReduceMean": _reduce("mean"),
    "ReduceSum": _reduce("sum"),
    "ReduceMax": _reduce("max"),
    "ReduceMin": _reduce("min"),
    "ReduceProd": _reduce("prod"),
    "ReduceSumSquare": _reduce("sumsq"),
    "ReduceL2": _reduce("l2"),
}
#: the table: the kernels entered with ``@kernels.op`` above, the one-expression kernels of
#: ``_OWN_KERNELS`` and the shared ones (suite/onnx/kernels.py: SHARED)
KERNELS: dict[str, Kernel] = kernels.with_shared(_OWN_KERNELS)
