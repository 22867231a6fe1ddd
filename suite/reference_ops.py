"""Float64 NumPy reference implementations shared by the operator level (suite/levels/operator/)
and the ONNX evaluator (suite/onnx/numpy_eval.py): what a framework's result is checked
against. Below both; NumPy only."""

from __future__ import annotations

import numpy as np


def out_size(size: int, kernel: int, stride: int, padding: int) -> int:
    return (size + 2 * padding - kernel) // stride + 1


#: the batch is cut into chunks whose patch matrix holds at most this many float64 elements
#: (64 MiB): a full-size ResNet conv1's patches at batch 32 would be 470 MB at once
_PATCH_ELEMENTS = 1 << 23


def _patches(xp: np.ndarray, r: int, s: int, stride: int, oh: int, ow: int) -> np.ndarray:
    """Every output position's input window, a view: (n, c, oh, ow, r, s)."""
    v = np.lib.stride_tricks.sliding_window_view(xp, (r, s), axis=(2, 3))
    return v[:, :, ::stride, ::stride][:, :, :oh, :ow]


def _chunks(n: int, per_item: int) -> list[slice]:
    step = max(1, _PATCH_ELEMENTS // max(1, per_item))
    return [slice(b, min(n, b + step)) for b in range(0, n, step)]


def conv2d_forward(x: np.ndarray, w: np.ndarray, stride: int, padding: int) -> np.ndarray:
    """Float64 convolution (cross-correlation, as every DL framework defines it): one BLAS
    contraction of the input windows with the weights per chunk of the batch (a loop over the
    kernel's offsets with an einsum each was 1.5x slower for the quick size, 7x for its
    backward)."""
    n, c, h, wd = x.shape
    o, c2, r, s = w.shape
    assert c == c2
    oh, ow = out_size(h, r, stride, padding), out_size(wd, s, stride, padding)
    xp = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    y = np.empty((n, o, oh, ow))
    for b in _chunks(n, c * oh * ow * r * s):
        win = _patches(xp[b], r, s, stride, oh, ow)
        # (n, c, oh, ow, r, s) x (o, c, r, s) -> (n, oh, ow, o)
        y[b] = np.tensordot(win, w, axes=([1, 4, 5], [1, 2, 3])).transpose(0, 3, 1, 2)
    return y


def conv2d_backward(
    x: np.ndarray, w: np.ndarray, dy: np.ndarray, stride: int, padding: int
) -> tuple[np.ndarray, np.ndarray]:
    """Float64 gradients (dx, dw) of sum(dy * conv2d(x, w)): dw contracts dy with the input
    windows, dx scatters w^T dy back over each kernel offset's window."""
    n, c, h, wd = x.shape
    o, _, r, s = w.shape
    oh, ow = dy.shape[2], dy.shape[3]
    xp = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    dxp = np.zeros_like(xp)
    dw = np.zeros_like(w)
    for b in _chunks(n, c * oh * ow * r * s):
        win = _patches(xp[b], r, s, stride, oh, ow)
        dw += np.tensordot(dy[b], win, axes=([0, 2, 3], [0, 2, 3]))  # (o, c, r, s)
        g = np.tensordot(dy[b], w, axes=([1], [0]))  # (n, oh, ow, c, r, s)
        for i in range(r):
            for j in range(s):
                hs = slice(i, i + stride * (oh - 1) + 1, stride)
                ws = slice(j, j + stride * (ow - 1) + 1, stride)
                dxp[b, :, hs, ws] += g[:, :, :, :, i, j].transpose(0, 3, 1, 2)
    dx = dxp[:, :, padding : padding + h, padding : padding + wd]
    return dx, dw
