"""Float64 NumPy reference implementations shared by the operator level (suite/levels/operator/)
and the ONNX evaluator (suite/onnx/numpy_eval.py): what a framework's result is checked
against. Below both; NumPy only."""

from __future__ import annotations

import numpy as np


def out_size(size: int, kernel: int, stride: int, padding: int, dilation: int = 1) -> int:
    return (size + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1


#: the batch is cut into chunks whose patch matrix holds at most this many float64 elements
#: (64 MiB): a full-size ResNet conv1's patches at batch 32 would be 470 MB at once
_PATCH_ELEMENTS = 1 << 23


def _patches(
    xp: np.ndarray, r: int, s: int, stride: int, oh: int, ow: int, dilation: int = 1
) -> np.ndarray:
    """Every output position's input window, a view: (n, c, oh, ow, r, s), taps ``dilation``
    apart."""
    span_r, span_s = dilation * (r - 1) + 1, dilation * (s - 1) + 1
    v = np.lib.stride_tricks.sliding_window_view(xp, (span_r, span_s), axis=(2, 3))
    return v[:, :, ::stride, ::stride][:, :, :oh, :ow][..., ::dilation, ::dilation]


def _chunks(n: int, per_item: int) -> list[slice]:
    step = max(1, _PATCH_ELEMENTS // max(1, per_item))
    return [slice(b, min(n, b + step)) for b in range(0, n, step)]


def conv2d_forward(
    x: np.ndarray, w: np.ndarray, stride: int, padding: int, dilation: int = 1, groups: int = 1
) -> np.ndarray:
    """Float64 convolution (cross-correlation, as every DL framework defines it): NCHW input,
    OIHW weight with I = C / groups, zero padding, kernel taps ``dilation`` apart. One BLAS
    contraction of the input windows with the weights per group and chunk of the batch (a loop
    over the kernel's offsets with an einsum each was 1.5x slower for the quick size, 7x for
    its backward)."""
    n, c, h, wd = x.shape
    o, cg, r, s = w.shape
    assert c == cg * groups and o % groups == 0
    og = o // groups
    oh = out_size(h, r, stride, padding, dilation)
    ow = out_size(wd, s, stride, padding, dilation)
    xp = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    y = np.empty((n, o, oh, ow))
    for b in _chunks(n, cg * oh * ow * r * s):
        win = _patches(xp[b], r, s, stride, oh, ow, dilation)
        for g in range(groups):
            ci, oi = slice(g * cg, (g + 1) * cg), slice(g * og, (g + 1) * og)
            # (n, cg, oh, ow, r, s) x (og, cg, r, s) -> (n, oh, ow, og)
            y[b, oi] = np.tensordot(win[:, ci], w[oi], axes=([1, 4, 5], [1, 2, 3])).transpose(
                0, 3, 1, 2
            )
    return y


def conv2d_backward(
    x: np.ndarray,
    w: np.ndarray,
    dy: np.ndarray,
    stride: int,
    padding: int,
    dilation: int = 1,
    groups: int = 1,
) -> tuple[np.ndarray, np.ndarray]:
    """Float64 gradients (dx, dw) of sum(dy * conv2d(x, w)): dw contracts dy with the input
    windows, dx scatters w^T dy back over each kernel offset's window (per group)."""
    n, c, h, wd = x.shape
    o, cg, r, s = w.shape
    og = o // groups
    oh, ow = dy.shape[2], dy.shape[3]
    xp = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    dxp = np.zeros_like(xp)
    dw = np.zeros_like(w)
    for b in _chunks(n, cg * oh * ow * r * s):
        win = _patches(xp[b], r, s, stride, oh, ow, dilation)
        for gi in range(groups):
            ci, oi = slice(gi * cg, (gi + 1) * cg), slice(gi * og, (gi + 1) * og)
            dw[oi] += np.tensordot(dy[b, oi], win[:, ci], axes=([0, 2, 3], [0, 2, 3]))
            g = np.tensordot(dy[b, oi], w[oi], axes=([1], [0]))  # (n, oh, ow, cg, r, s)
            for i in range(r):
                for j in range(s):
                    hi, wj = i * dilation, j * dilation
                    hs = slice(hi, hi + stride * (oh - 1) + 1, stride)
                    ws = slice(wj, wj + stride * (ow - 1) + 1, stride)
                    dxp[b, ci, hs, ws] += g[:, :, :, :, i, j].transpose(0, 3, 1, 2)
    dx = dxp[:, :, padding : padding + h, padding : padding + wd]
    return dx, dw
