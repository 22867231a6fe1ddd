"""Float64 NumPy reference implementations shared by the operator level (suite/levels/operator/)
and the ONNX evaluator (suite/onnx/numpy_eval.py): what a framework's result is checked
against. Below both; NumPy only."""

from __future__ import annotations

import numpy as np


def out_size(size: int, kernel: int, stride: int, padding: int) -> int:
    return (size + 2 * padding - kernel) // stride + 1


def conv2d_forward(x: np.ndarray, w: np.ndarray, stride: int, padding: int) -> np.ndarray:
    """Float64 convolution (cross-correlation, as every DL framework defines it)."""
    n, c, h, wd = x.shape
    o, c2, r, s = w.shape
    assert c == c2
    oh, ow = out_size(h, r, stride, padding), out_size(wd, s, stride, padding)
    xp = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    y = np.zeros((n, o, oh, ow))
    for i in range(r):
        for j in range(s):
            patch = xp[
                :, :, i : i + stride * (oh - 1) + 1 : stride, j : j + stride * (ow - 1) + 1 : stride
            ]
            # (o, c) x (n, c, oh, ow) -> (n, o, oh, ow)
            y += np.einsum("oc,nchw->nohw", w[:, :, i, j], patch, optimize=True)
    return y


def conv2d_backward(
    x: np.ndarray, w: np.ndarray, dy: np.ndarray, stride: int, padding: int
) -> tuple[np.ndarray, np.ndarray]:
    """Float64 gradients (dx, dw) of sum(dy * conv2d(x, w))."""
    n, c, h, wd = x.shape
    o, _, r, s = w.shape
    oh, ow = dy.shape[2], dy.shape[3]
    xp = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    dxp = np.zeros_like(xp)
    dw = np.zeros_like(w)
    for i in range(r):
        for j in range(s):
            hs = slice(i, i + stride * (oh - 1) + 1, stride)
            ws = slice(j, j + stride * (ow - 1) + 1, stride)
            dw[:, :, i, j] = np.einsum("nohw,nchw->oc", dy, xp[:, :, hs, ws], optimize=True)
            dxp[:, :, hs, ws] += np.einsum("oc,nohw->nchw", w[:, :, i, j], dy, optimize=True)
    dx = dxp[:, :, padding : padding + h, padding : padding + wd]
    return dx, dw
