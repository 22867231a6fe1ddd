"""A float64 NumPy evaluator for ONNX graphs (inference semantics), framework-free.

Used as the float64 function in the network gradient check (central finite differences of the
loss) and as a third opinion next to onnxruntime. Covers the zoo's op set; anything else
raises ``NotImplementedError`` naming the op and node.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from onnx import ModelProto, numpy_helper
from scipy.special import erf

from suite.onnx.importer import node_attributes
from suite.reference_ops import conv2d_forward

_attrs = node_attributes


def _pool(x: np.ndarray, a: dict[str, Any], kind: str) -> np.ndarray:
    kh, kw = a["kernel_shape"]
    sh, sw = a.get("strides", (1, 1))
    t, lft, b, r = a.get("pads", (0, 0, 0, 0))
    fill = -np.inf if kind == "max" else 0.0
    xp = np.pad(x, ((0, 0), (0, 0), (t, b), (lft, r)), constant_values=fill)
    oh = (xp.shape[2] - kh) // sh + 1
    ow = (xp.shape[3] - kw) // sw + 1
    windows = np.stack(
        [
            xp[:, :, i : i + sh * (oh - 1) + 1 : sh, j : j + sw * (ow - 1) + 1 : sw]
            for i in range(kh)
            for j in range(kw)
        ]
    )
    if kind == "max":
        out: np.ndarray = windows.max(axis=0)
        return out
    if a.get("count_include_pad", 0) or not any((t, lft, b, r)):
        return windows.mean(axis=0)
    ones = np.pad(np.ones((1, 1) + x.shape[2:]), ((0, 0), (0, 0), (t, b), (lft, r)))
    counts = np.stack(
        [
            ones[:, :, i : i + sh * (oh - 1) + 1 : sh, j : j + sw * (ow - 1) + 1 : sw]
            for i in range(kh)
            for j in range(kw)
        ]
    ).sum(axis=0)
    return windows.sum(axis=0) / counts


def _conv(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, a: dict[str, Any]) -> np.ndarray:
    if a.get("group", 1) != 1 or tuple(a.get("dilations", (1, 1))) != (1, 1):
        raise NotImplementedError("Conv with groups or dilation")
    sh, sw = a.get("strides", (1, 1))
    t, lft, bt, r = a.get("pads", (0, 0, 0, 0))
    if sh != sw or not (t == bt == lft == r):
        x = np.pad(x, ((0, 0), (0, 0), (t, bt), (lft, r)))
        if sh != sw:
            raise NotImplementedError("Conv with different strides per axis")
        t = 0
    y = conv2d_forward(x, w, sh, t)
    return y + b[None, :, None, None] if b is not None else y


def _gemm(x: np.ndarray, w: np.ndarray, c: np.ndarray | None, a: dict[str, Any]) -> np.ndarray:
    if a.get("transA", 0):
        x = x.T
    if a.get("transB", 0):
        w = w.T
    y = a.get("alpha", 1.0) * (x @ w)
    return y + a.get("beta", 1.0) * c if c is not None else y


def _softmax(x: np.ndarray, axis: int) -> np.ndarray:
    z = np.exp(x - x.max(axis=axis, keepdims=True))
    out: np.ndarray = z / z.sum(axis=axis, keepdims=True)
    return out


def _layernorm(
    x: np.ndarray, scale: np.ndarray, bias: np.ndarray | None, a: dict[str, Any]
) -> np.ndarray:
    axis = a.get("axis", -1)
    axes = tuple(range(axis if axis >= 0 else x.ndim + axis, x.ndim))
    mean = x.mean(axis=axes, keepdims=True)
    var = x.var(axis=axes, keepdims=True)
    y = (x - mean) / np.sqrt(var + a.get("epsilon", 1e-5)) * scale
    return y + bias if bias is not None else y


def _reshape(x: np.ndarray, shape: np.ndarray, a: dict[str, Any]) -> np.ndarray:
    dims = [int(v) for v in shape]
    if not a.get("allowzero", 0):
        dims = [x.shape[i] if v == 0 else v for i, v in enumerate(dims)]
    return x.reshape(dims)


Op = Callable[[list[Any], dict[str, Any]], np.ndarray]
_OPS: dict[str, Op] = {
    "Add": lambda v, a: v[0] + v[1],
    "Sub": lambda v, a: v[0] - v[1],
    "Mul": lambda v, a: v[0] * v[1],
    "Div": lambda v, a: v[0] / v[1],
    "MatMul": lambda v, a: np.matmul(v[0], v[1]),
    "Relu": lambda v, a: np.maximum(v[0], 0.0),
    "Sigmoid": lambda v, a: 1.0 / (1.0 + np.exp(-v[0])),
    "Tanh": lambda v, a: np.tanh(v[0]),
    "Erf": lambda v, a: erf(v[0]),
    "Sqrt": lambda v, a: np.sqrt(v[0]),
    "Identity": lambda v, a: v[0],
    "Dropout": lambda v, a: v[0],
    "Conv": lambda v, a: _conv(v[0], v[1], v[2] if len(v) > 2 else None, a),
    "BatchNormalization": lambda v, a: (
        (v[0] - v[3][None, :, None, None])
        / np.sqrt(v[4][None, :, None, None] + a.get("epsilon", 1e-5))
        * v[1][None, :, None, None]
        + v[2][None, :, None, None]
    ),
    "MaxPool": lambda v, a: _pool(v[0], a, "max"),
    "AveragePool": lambda v, a: _pool(v[0], a, "avg"),
    "GlobalAveragePool": lambda v, a: v[0].mean(axis=(2, 3), keepdims=True),
    "Flatten": lambda v, a: v[0].reshape(int(np.prod(v[0].shape[: a.get("axis", 1)])), -1),
    "Gemm": lambda v, a: _gemm(v[0], v[1], v[2] if len(v) > 2 else None, a),
    "Reshape": lambda v, a: _reshape(v[0], v[1], a),
    "Transpose": lambda v, a: np.transpose(v[0], a.get("perm")),
    "Softmax": lambda v, a: _softmax(v[0], a.get("axis", -1)),
    "LayerNormalization": lambda v, a: _layernorm(v[0], v[1], v[2] if len(v) > 2 else None, a),
    "Gather": lambda v, a: np.take(v[0], v[1].astype(np.int64), axis=a.get("axis", 0)),
    "Concat": lambda v, a: np.concatenate(v, axis=a["axis"]),
}
OPS = frozenset(_OPS)


class NumpyGraph:
    """Evaluate ``model`` in float64; ``params`` overrides initializers by name."""

    def __init__(self, model: ModelProto) -> None:
        self.model = model
        self.inits = {
            i.name: numpy_helper.to_array(i).astype(np.float64)
            if numpy_helper.to_array(i).dtype.kind == "f"
            else numpy_helper.to_array(i)
            for i in model.graph.initializer
        }
        self.inputs = [i.name for i in model.graph.input if i.name not in self.inits]
        self.output = model.graph.output[0].name
        for node in model.graph.node:
            if node.op_type not in _OPS:
                raise NotImplementedError(
                    f"unsupported op {node.op_type} in node {node.name or '?'}"
                )

    def __call__(
        self, *inputs: np.ndarray, params: Mapping[str, np.ndarray] | None = None
    ) -> np.ndarray:
        env: dict[str, Any] = {**self.inits, **(params or {})}
        env.update(zip(self.inputs, inputs, strict=True))
        for node in self.model.graph.node:
            values = [env[n] if n else None for n in node.input]
            env[node.output[0]] = _OPS[node.op_type](values, _attrs(node))
        out: np.ndarray = env[self.output]
        return out


def cross_entropy(logits: np.ndarray, labels: np.ndarray) -> float:
    """Mean softmax cross-entropy in float64."""
    z = logits - logits.max(axis=1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    return float(-logp[np.arange(len(labels)), labels].mean())
