"""Float64 NumPy reference implementations shared by the operator level (suite/levels/operator/)
and the ONNX evaluator (suite/onnx/numpy_eval.py): what a framework's result is checked
against. Below both; NumPy only."""

from __future__ import annotations

import numpy as np


def out_size(size: int, kernel: int, stride: int, padding: int, dilation: int = 1) -> int:
    return (size + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1


def _grouped(w: np.ndarray, groups: int) -> np.ndarray:
    """OIHW weight of a grouped convolution as (G, O/G, I/G, KH, KW)."""
    o, cg, r, s = w.shape
    return w.reshape(groups, o // groups, cg, r, s)


def conv2d_forward(
    x: np.ndarray, w: np.ndarray, stride: int, padding: int, dilation: int = 1, groups: int = 1
) -> np.ndarray:
    """Float64 convolution (cross-correlation, as every DL framework defines it): NCHW input,
    OIHW weight with I = C / groups, zero padding, kernel taps ``dilation`` apart."""
    n, c, h, wd = x.shape
    o, cg, r, s = w.shape
    assert c == cg * groups and o % groups == 0
    oh = out_size(h, r, stride, padding, dilation)
    ow = out_size(wd, s, stride, padding, dilation)
    xp = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    xg = xp.reshape(n, groups, cg, *xp.shape[2:])
    wg = _grouped(w, groups)
    y = np.zeros((n, groups, o // groups, oh, ow))
    for i in range(r):
        for j in range(s):
            hi, wj = i * dilation, j * dilation
            patch = xg[:, :, :, hi : hi + stride * (oh - 1) + 1 : stride,
                       wj : wj + stride * (ow - 1) + 1 : stride]  # fmt: skip
            # (g, o, c) x (n, g, c, oh, ow) -> (n, g, o, oh, ow)
            y += np.einsum("goc,ngchw->ngohw", wg[:, :, :, i, j], patch, optimize=True)
    return y.reshape(n, o, oh, ow)


def conv2d_backward(
    x: np.ndarray,
    w: np.ndarray,
    dy: np.ndarray,
    stride: int,
    padding: int,
    dilation: int = 1,
    groups: int = 1,
) -> tuple[np.ndarray, np.ndarray]:
    """Float64 gradients (dx, dw) of sum(dy * conv2d(x, w))."""
    n, c, h, wd = x.shape
    o, cg, r, s = w.shape
    oh, ow = dy.shape[2], dy.shape[3]
    xp = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    xg = xp.reshape(n, groups, cg, *xp.shape[2:])
    dyg = dy.reshape(n, groups, o // groups, oh, ow)
    wg = _grouped(w, groups)
    dxg = np.zeros_like(xg)
    dwg = np.zeros_like(wg)
    for i in range(r):
        for j in range(s):
            hi, wj = i * dilation, j * dilation
            hs = slice(hi, hi + stride * (oh - 1) + 1, stride)
            ws = slice(wj, wj + stride * (ow - 1) + 1, stride)
            dwg[:, :, :, i, j] = np.einsum(
                "ngohw,ngchw->goc", dyg, xg[:, :, :, hs, ws], optimize=True
            )
            dxg[:, :, :, hs, ws] += np.einsum(
                "goc,ngohw->ngchw", wg[:, :, :, i, j], dyg, optimize=True
            )
    dxp = dxg.reshape(xp.shape)
    dx = dxp[:, :, padding : padding + h, padding : padding + wd]
    return dx, dwg.reshape(w.shape)
