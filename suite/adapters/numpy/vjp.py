"""The NumPy adapter's operators with their vector-Jacobian products: each returns its output
and its VJP, computing in the dtype of its inputs (Python float constants do not promote
float32 arrays). The adapter's operator words and the network kernels (kernels.py) use them."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view
from scipy.special import erf

Backward = Callable[[np.ndarray, Sequence[bool]], Sequence[np.ndarray | None]]


def unbroadcast(g: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Sum ``g`` down to ``shape``: the VJP of NumPy broadcasting an array of ``shape``."""
    while g.ndim > len(shape):
        g = g.sum(axis=0)
    for axis, size in enumerate(shape):
        if size == 1 and g.shape[axis] != 1:
            g = g.sum(axis=axis, keepdims=True)
    return g


def matmul(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, Backward]:
    """``a @ b`` (batched and broadcasting as ``np.matmul``)."""

    def backward(dy: np.ndarray, needs: Sequence[bool]) -> list[np.ndarray | None]:
        da = db = None
        if needs[0]:
            da = unbroadcast(dy @ b.swapaxes(-1, -2), a.shape)
        if needs[1] and b.ndim == 2:
            # a weight shared by every row of a batched ``a``: one product over all the rows
            db = a.reshape(-1, a.shape[-1]).T @ dy.reshape(-1, dy.shape[-1])
        elif needs[1]:
            db = unbroadcast(a.swapaxes(-1, -2) @ dy, b.shape)
        return [da, db]

    return a @ b, backward


def _windows(x: np.ndarray, kernel: tuple[int, int], strides: tuple[int, int]) -> np.ndarray:
    """Every ``kernel``-sized window of NCHW ``x`` at ``strides``: a (N, C, OH, OW, KH, KW) view."""
    sh, sw = strides
    return sliding_window_view(x, kernel, axis=(2, 3))[:, :, ::sh, ::sw]


def _add_windows(
    windows: np.ndarray, shape: tuple[int, ...], strides: tuple[int, int]
) -> np.ndarray:
    """The adjoint of :func:`_windows`: add each window's values back where they were read."""
    out = np.zeros(shape, dtype=windows.dtype)
    _, _, oh, ow, kh, kw = windows.shape
    sh, sw = strides
    for i in range(kh):
        for j in range(kw):
            out[:, :, i : i + sh * (oh - 1) + 1 : sh, j : j + sw * (ow - 1) + 1 : sw] += windows[
                :, :, :, :, i, j
            ]
    return out


def conv2d(
    x: np.ndarray,
    w: np.ndarray,
    *,
    strides: tuple[int, int] = (1, 1),
    pads: tuple[int, int, int, int] = (0, 0, 0, 0),
) -> tuple[np.ndarray, Backward]:
    """Cross-correlation of NCHW ``x`` with OIHW ``w`` (no bias, dilation 1, groups 1) as
    im2col + one matrix product (``np.tensordot`` copies the windows into a matrix and calls
    BLAS). ``pads`` are ONNX's (top, left, bottom, right)."""
    top, left, bottom, right = pads
    xp = np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)))
    cols = _windows(xp, (w.shape[2], w.shape[3]), strides)  # (N, C, OH, OW, KH, KW)
    y = np.tensordot(cols, w, axes=((1, 4, 5), (1, 2, 3)))  # (N, OH, OW, O)

    def backward(dy: np.ndarray, needs: Sequence[bool]) -> list[np.ndarray | None]:
        dx = dw = None
        if needs[0]:
            dcols = np.tensordot(dy, w, axes=(1, 0))  # (N, OH, OW, C, KH, KW)
            dxp = _add_windows(dcols.transpose(0, 3, 1, 2, 4, 5), xp.shape, strides)
            dx = dxp[:, :, top : top + x.shape[2], left : left + x.shape[3]]
        if needs[1]:
            dw = np.tensordot(dy, cols, axes=((0, 2, 3), (0, 2, 3)))  # (O, C, KH, KW)
        return [dx, dw]

    return np.ascontiguousarray(y.transpose(0, 3, 1, 2)), backward


def max_pool(
    x: np.ndarray,
    *,
    kernel: tuple[int, int],
    strides: tuple[int, int],
    pads: tuple[int, int, int, int] = (0, 0, 0, 0),
) -> tuple[np.ndarray, Backward]:
    """Max over each window of NCHW ``x`` (padding never wins); the gradient goes to the first
    maximum of each window, as in PyTorch."""
    top, left, bottom, right = pads
    xp = np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)), constant_values=-np.inf)
    windows = _windows(xp, kernel, strides)
    flat = windows.reshape(*windows.shape[:4], -1)  # (N, C, OH, OW, KH*KW), a copy
    where = flat.argmax(axis=-1)[..., None]
    y = np.take_along_axis(flat, where, axis=-1)[..., 0]

    def backward(dy: np.ndarray, needs: Sequence[bool]) -> list[np.ndarray | None]:
        dflat = np.zeros(flat.shape, dtype=dy.dtype)
        np.put_along_axis(dflat, where, dy[..., None], axis=-1)
        dxp = _add_windows(dflat.reshape(windows.shape), xp.shape, strides)
        return [dxp[:, :, top : top + x.shape[2], left : left + x.shape[3]]]

    return y, backward


def batch_norm(
    x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, *, eps: float
) -> tuple[np.ndarray, Backward]:
    """Training-mode batch norm of NCHW ``x``: statistics over N, H, W, biased variance."""
    axes = (0, 2, 3)
    mean = x.mean(axis=axes, keepdims=True)
    rstd = 1.0 / np.sqrt(x.var(axis=axes, keepdims=True) + eps)
    xhat = (x - mean) * rstd
    scale = gamma.reshape(1, -1, 1, 1)
    y = xhat * scale + beta.reshape(1, -1, 1, 1)

    def backward(dy: np.ndarray, needs: Sequence[bool]) -> list[np.ndarray | None]:
        dxhat = dy * scale
        dx = rstd * (
            dxhat
            - dxhat.mean(axis=axes, keepdims=True)
            - xhat * (dxhat * xhat).mean(axis=axes, keepdims=True)
        )
        return [dx, (dy * xhat).sum(axis=axes), dy.sum(axis=axes)]

    return y, backward


def layer_norm(
    x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, *, eps: float
) -> tuple[np.ndarray, Backward]:
    """Layer norm over the last axis, biased variance."""
    mean = x.mean(axis=-1, keepdims=True)
    rstd = 1.0 / np.sqrt(x.var(axis=-1, keepdims=True) + eps)
    xhat = (x - mean) * rstd
    y = xhat * gamma + beta

    def backward(dy: np.ndarray, needs: Sequence[bool]) -> list[np.ndarray | None]:
        dxhat = dy * gamma
        dx = rstd * (
            dxhat
            - dxhat.mean(axis=-1, keepdims=True)
            - xhat * (dxhat * xhat).mean(axis=-1, keepdims=True)
        )
        rows = (-1, x.shape[-1])
        return [dx, (dy * xhat).reshape(rows).sum(axis=0), dy.reshape(rows).sum(axis=0)]

    return y, backward


def softmax(x: np.ndarray, axis: int = -1) -> tuple[np.ndarray, Backward]:
    """Softmax along ``axis`` (the maximum subtracted first, so it never overflows)."""
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    y = e / e.sum(axis=axis, keepdims=True)

    def backward(dy: np.ndarray, needs: Sequence[bool]) -> list[np.ndarray | None]:
        return [y * (dy - (dy * y).sum(axis=axis, keepdims=True))]

    return y, backward


_SQRT_HALF = math.sqrt(0.5)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


def gelu(x: np.ndarray) -> tuple[np.ndarray, Backward]:
    """Exact GELU, ``x * Phi(x)`` with the normal CDF ``Phi`` from erf."""
    cdf = 0.5 * (1.0 + erf(x * _SQRT_HALF))

    def backward(dy: np.ndarray, needs: Sequence[bool]) -> list[np.ndarray | None]:
        pdf = np.exp(-0.5 * x * x) * _INV_SQRT_2PI
        return [dy * (cdf + x * pdf)]

    return x * cdf, backward


def attention(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, *, causal: bool
) -> tuple[np.ndarray, Backward]:
    """``softmax(q k^T / sqrt(d)) v`` on (..., seq, d); ``causal`` hides keys after the query
    (PyTorch's ``is_causal``: the mask is aligned to the top-left corner)."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    scores = (q @ k.swapaxes(-1, -2)) * scale
    if causal:
        later = np.triu(np.ones(scores.shape[-2:], dtype=bool), k=1)
        scores = np.where(later, -np.inf, scores)
    p, softmax_backward = softmax(scores)

    def backward(dy: np.ndarray, needs: Sequence[bool]) -> list[np.ndarray | None]:
        dv = p.swapaxes(-1, -2) @ dy
        (dscores,) = softmax_backward(dy @ v.swapaxes(-1, -2), (True,))
        assert dscores is not None
        dscores = dscores * scale
        return [dscores @ k, dscores.swapaxes(-1, -2) @ q, dv]

    return p @ v, backward
