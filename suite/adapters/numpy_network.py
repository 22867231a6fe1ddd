"""ONNX graph -> a NumPy network that trains: the graph runs node by node, and its gradient is
reverse-mode autodiff over the same nodes.

Imported only by the NumPy adapter's ``build_network`` (so only inside a worker). Every ONNX op
is a function returning its output and its VJP (vector-Jacobian product, see
``numpy_adapter.Backward``). ``train_step`` runs the graph keeping the VJPs on a tape, walks
the tape backwards from the loss (the chain rule) to the gradient of every trainable
initializer, and takes one SGD-with-momentum step as ``torch.optim.SGD`` does.

Initializers are sorted as the PyTorch builder sorts them: float tensors with more than one
element are trainable, except BatchNormalization's running mean and variance (state, updated
in training mode with the node's momentum); scalars and integer tensors are constants.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from onnx import ModelProto, NodeProto, numpy_helper

from suite.adapters import numpy_adapter as K
from suite.adapters.base import NetworkOptions
from suite.errors import UnsupportedError
from suite.levels.network.zoo import node_attributes


@dataclass
class _Mode:
    """What an op may depend on besides its inputs: training or inference, and the generator
    of dropout masks."""

    training: bool
    rng: np.random.Generator


#: an op: (input values, node attributes, mode) -> (output, VJP)
Op = Callable[[list[Any], dict[str, Any], _Mode], tuple[np.ndarray, K.Backward]]


def _pads(a: dict[str, Any]) -> tuple[int, int, int, int]:
    top, left, bottom, right = a.get("pads", (0, 0, 0, 0))
    return int(top), int(left), int(bottom), int(right)


def _strides(a: dict[str, Any]) -> tuple[int, int]:
    sh, sw = a.get("strides", (1, 1))
    return int(sh), int(sw)


def _gemm(v: list[Any], a: dict[str, Any], mode: _Mode) -> tuple[np.ndarray, K.Backward]:
    """``alpha * A' @ B' + beta * C`` with A' = A or A^T (transA), B' likewise (transB)."""
    x, w = v[0], v[1]
    c = v[2] if len(v) > 2 else None
    alpha, beta = float(a.get("alpha", 1.0)), float(a.get("beta", 1.0))
    trans_a, trans_b = bool(a.get("transA", 0)), bool(a.get("transB", 0))
    xa = x.T if trans_a else x
    wb = w.T if trans_b else w
    y = alpha * (xa @ wb)
    if c is not None:
        y = y + beta * c

    def backward(dy: np.ndarray, needs: Sequence[bool]) -> list[np.ndarray | None]:
        dx = dw = dc = None
        if needs[0]:
            g = alpha * (dy @ wb.T)
            dx = g.T if trans_a else g
        if needs[1]:
            g = alpha * (xa.T @ dy)
            dw = g.T if trans_b else g
        if c is not None and needs[2]:
            dc = K.unbroadcast(beta * dy, c.shape)
        return [dx, dw, dc]

    return y, backward


def _conv(v: list[Any], a: dict[str, Any], mode: _Mode) -> tuple[np.ndarray, K.Backward]:
    y, conv_backward = K.conv2d(v[0], v[1], strides=_strides(a), pads=_pads(a))
    bias = v[2] if len(v) > 2 else None
    if bias is None:
        return y, conv_backward
    y += bias.reshape(1, -1, 1, 1)

    def backward(dy: np.ndarray, needs: Sequence[bool]) -> list[np.ndarray | None]:
        dx, dw = conv_backward(dy, needs[:2])
        return [dx, dw, dy.sum(axis=(0, 2, 3)) if needs[2] else None]

    return y, backward


def _batch_norm(v: list[Any], a: dict[str, Any], mode: _Mode) -> tuple[np.ndarray, K.Backward]:
    """Training: batch statistics, and the running ones updated in place as PyTorch does
    (ONNX momentum m keeps m of the old value; the variance folded in is unbiased).
    Inference: a per-channel affine map with the running statistics."""
    x, scale, bias, running_mean, running_var = v
    eps = float(a.get("epsilon", 1e-5))
    if mode.training:
        y, backward = K.batch_norm(x, scale, bias, eps=eps)
        m = float(a.get("momentum", 0.9))
        n = x.size // x.shape[1]
        running_mean *= m
        running_mean += (1.0 - m) * x.mean(axis=(0, 2, 3))
        running_var *= m
        running_var += (1.0 - m) * (n / (n - 1)) * x.var(axis=(0, 2, 3))
        return y, backward
    channel = (1, -1, 1, 1)
    rstd = (1.0 / np.sqrt(running_var + eps)).reshape(channel)
    xhat = (x - running_mean.reshape(channel)) * rstd
    y = xhat * scale.reshape(channel) + bias.reshape(channel)

    def inference_backward(dy: np.ndarray, needs: Sequence[bool]) -> list[np.ndarray | None]:
        axes = (0, 2, 3)
        return [dy * (scale.reshape(channel) * rstd), (dy * xhat).sum(axis=axes), dy.sum(axis=axes)]

    return y, inference_backward


def _max_pool(v: list[Any], a: dict[str, Any], mode: _Mode) -> tuple[np.ndarray, K.Backward]:
    kh, kw = a["kernel_shape"]
    return K.max_pool(v[0], kernel=(int(kh), int(kw)), strides=_strides(a), pads=_pads(a))


def _relu(v: list[Any], a: dict[str, Any], mode: _Mode) -> tuple[np.ndarray, K.Backward]:
    x = v[0]
    return np.maximum(x, 0), lambda dy, needs: [np.where(x > 0, dy, 0)]


def _global_average_pool(
    v: list[Any], a: dict[str, Any], mode: _Mode
) -> tuple[np.ndarray, K.Backward]:
    x = v[0]
    area = x.shape[2] * x.shape[3]
    return (
        x.mean(axis=(2, 3), keepdims=True),
        lambda dy, needs: [np.broadcast_to(dy / area, x.shape)],
    )


def _flatten(v: list[Any], a: dict[str, Any], mode: _Mode) -> tuple[np.ndarray, K.Backward]:
    x = v[0]
    axis = int(a.get("axis", 1))
    rows = int(np.prod(x.shape[:axis]))
    return x.reshape(rows, -1), lambda dy, needs: [dy.reshape(x.shape)]


def _reshape(v: list[Any], a: dict[str, Any], mode: _Mode) -> tuple[np.ndarray, K.Backward]:
    x, shape = v
    dims = [int(d) for d in shape]
    if not a.get("allowzero", 0):  # 0 copies the input's dimension
        dims = [x.shape[i] if d == 0 else d for i, d in enumerate(dims)]
    return x.reshape(dims), lambda dy, needs: [dy.reshape(x.shape)]


def _transpose(v: list[Any], a: dict[str, Any], mode: _Mode) -> tuple[np.ndarray, K.Backward]:
    x = v[0]
    perm = list(a.get("perm", range(x.ndim)[::-1]))
    return x.transpose(perm), lambda dy, needs: [dy.transpose(np.argsort(perm))]


def _dropout(v: list[Any], a: dict[str, Any], mode: _Mode) -> tuple[np.ndarray, K.Backward]:
    """Identity in inference; in training, zero each element with probability ``ratio`` and
    scale the rest by 1 / (1 - ratio) (inverted dropout, as PyTorch)."""
    x = v[0]
    ratio = float(v[1]) if len(v) > 1 and v[1] is not None else float(a.get("ratio", 0.5))
    if not mode.training or ratio == 0.0:
        return x, lambda dy, needs: [dy]
    keep = mode.rng.random(x.shape, dtype=x.dtype) >= ratio
    mask = keep.astype(x.dtype) / (1.0 - ratio)
    return x * mask, lambda dy, needs: [dy * mask]


def _gather(v: list[Any], a: dict[str, Any], mode: _Mode) -> tuple[np.ndarray, K.Backward]:
    """``np.take`` along ``axis``; the gradient adds each output slice back at its index
    (an index used twice gets both)."""
    data, idx = v[0], np.asarray(v[1], dtype=np.int64)
    axis = int(a.get("axis", 0)) % data.ndim

    def backward(dy: np.ndarray, needs: Sequence[bool]) -> list[np.ndarray | None]:
        g = np.zeros_like(data)
        index_axes = tuple(range(axis, axis + idx.ndim))
        np.add.at(np.moveaxis(g, axis, 0), idx, np.moveaxis(dy, index_axes, range(idx.ndim)))
        return [g]

    return np.take(data, idx, axis=axis), backward


def _layer_norm(v: list[Any], a: dict[str, Any], mode: _Mode) -> tuple[np.ndarray, K.Backward]:
    x, scale = v[0], v[1]
    bias = v[2] if len(v) > 2 and v[2] is not None else np.zeros_like(scale)
    if int(a.get("axis", -1)) not in (-1, x.ndim - 1):
        raise UnsupportedError(
            "numpy: LayerNormalization over more than the last axis is not mapped"
        )
    return K.layer_norm(x, scale, bias, eps=float(a.get("epsilon", 1e-5)))


def _softmax(v: list[Any], a: dict[str, Any], mode: _Mode) -> tuple[np.ndarray, K.Backward]:
    return K.softmax(v[0], axis=int(a.get("axis", -1)))


def _binary(
    forward: Callable[[Any, Any], np.ndarray],
    grads: Callable[[np.ndarray, Any, Any], tuple[np.ndarray, np.ndarray]],
) -> Op:
    """An elementwise op with NumPy broadcasting; ``grads(dy, x, y)`` gives (dx, dy) before
    summing down to each input's shape."""

    def op(v: list[Any], a: dict[str, Any], mode: _Mode) -> tuple[np.ndarray, K.Backward]:
        x, y = v

        def backward(dy: np.ndarray, needs: Sequence[bool]) -> list[np.ndarray | None]:
            gx, gy = grads(dy, x, y)
            return [
                K.unbroadcast(gx, np.shape(x)) if needs[0] else None,
                K.unbroadcast(gy, np.shape(y)) if needs[1] else None,
            ]

        return forward(x, y), backward

    return op


_OPS: dict[str, Op] = {
    "Add": _binary(np.add, lambda dy, x, y: (dy, dy)),
    "Sub": _binary(np.subtract, lambda dy, x, y: (dy, -dy)),
    "Mul": _binary(np.multiply, lambda dy, x, y: (dy * y, dy * x)),
    "Div": _binary(np.divide, lambda dy, x, y: (dy / y, -dy * x / (y * y))),
    "MatMul": lambda v, a, mode: K.matmul(v[0], v[1]),
    "Gemm": _gemm,
    "Conv": _conv,
    "BatchNormalization": _batch_norm,
    "MaxPool": _max_pool,
    "GlobalAveragePool": _global_average_pool,
    "Relu": _relu,
    "Erf": lambda v, a, mode: K.erf_kernel(v[0]),
    "Softmax": _softmax,
    "LayerNormalization": _layer_norm,
    "Flatten": _flatten,
    "Reshape": _reshape,
    "Transpose": _transpose,
    "Gather": _gather,
    "Dropout": _dropout,
}
#: the ONNX ops this builder maps (the zoo's op set)
ONNX_OPS = frozenset(_OPS)


_attrs = node_attributes


def _check_mapped(node: NodeProto, attrs: dict[str, Any]) -> None:
    """Attribute values the ops above do not implement: declared (skipped), not crashed."""
    where = f"{node.op_type} node {node.name or '?'}"
    if node.op_type not in _OPS:
        raise UnsupportedError(f"numpy: unsupported op {node.op_type} in node {node.name or '?'}")
    if len([o for o in node.output if o]) != 1:
        raise UnsupportedError(f"numpy: {where} has several outputs; only the first is mapped")
    if node.op_type in ("Conv", "MaxPool"):
        if attrs.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET"):
            raise UnsupportedError(f"numpy: {where}: auto_pad is not mapped (give pads)")
        if any(d != 1 for d in attrs.get("dilations", ())):
            raise UnsupportedError(f"numpy: {where}: dilations other than 1 are not mapped")
    if node.op_type == "Conv" and attrs.get("group", 1) != 1:
        raise UnsupportedError(f"numpy: {where}: grouped convolution is not mapped")
    if node.op_type == "MaxPool" and attrs.get("ceil_mode", 0):
        raise UnsupportedError(f"numpy: {where}: ceil_mode=1 is not mapped")


@dataclass(frozen=True)
class _Node:
    op: Op
    inputs: tuple[str, ...]
    output: str
    attrs: dict[str, Any]
    #: which inputs need a gradient: those that depend on a trainable initializer
    needs: tuple[bool, ...]


def softmax_cross_entropy(logits: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean softmax cross-entropy over the batch, and its gradient with respect to the logits."""
    z = logits - logits.max(axis=1, keepdims=True)
    log_p = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    rows = np.arange(len(labels))
    loss = -log_p[rows, labels].mean()
    dlogits = np.exp(log_p)
    dlogits[rows, labels] -= 1.0
    return np.asarray(loss, dtype=logits.dtype), dlogits / len(labels)


class NumPyNetwork:
    """A built network: its values by ONNX name, the nodes in graph order, the SGD state."""

    def __init__(
        self, model: ModelProto, dtype: type[np.floating[Any]], options: NetworkOptions
    ) -> None:
        graph = model.graph
        self.dtype = np.dtype(dtype)
        self.lr, self.momentum = options.lr, options.momentum
        self.rng = np.random.default_rng(options.seed)  # dropout masks: reproducible per task
        running = {
            n.input[i] for n in graph.node if n.op_type == "BatchNormalization" for i in (3, 4)
        }
        self.params: dict[str, np.ndarray] = {}  # trainable
        self.state: dict[str, np.ndarray] = {}  # BatchNormalization running statistics
        self.consts: dict[str, np.ndarray] = {}  # scalars, shapes, indices
        for init in graph.initializer:
            value = numpy_helper.to_array(init)
            if value.dtype.kind != "f":
                self.consts[init.name] = value
            elif init.name in running:
                self.state[init.name] = value.astype(self.dtype)
            elif value.size > 1:
                self.params[init.name] = value.astype(self.dtype)
            else:
                self.consts[init.name] = value.astype(self.dtype)
        self.velocity = {name: np.zeros_like(p) for name, p in self.params.items()}
        known = {i.name for i in graph.initializer}
        self.input_name = next(i.name for i in graph.input if i.name not in known)
        self.output_name = graph.output[0].name

        needs_grad = set(self.params)
        self.nodes: list[_Node] = []
        for node in graph.node:
            attrs = _attrs(node)
            _check_mapped(node, attrs)
            needs = tuple(name in needs_grad for name in node.input)
            if any(needs):
                needs_grad.add(node.output[0])
            self.nodes.append(
                _Node(_OPS[node.op_type], tuple(node.input), node.output[0], attrs, needs)
            )

    def _run(
        self, x: np.ndarray, training: bool
    ) -> tuple[np.ndarray, list[tuple[_Node, K.Backward]]]:
        """The graph's output, and (in training) the tape of the nodes a gradient flows through."""
        if x.dtype.kind == "f":  # float data in the network's dtype; token ids stay integers
            x = np.asarray(x, dtype=self.dtype)
        mode = _Mode(training, self.rng)
        env: dict[str, Any] = {**self.consts, **self.state, **self.params, self.input_name: x}
        tape = []
        for node in self.nodes:
            args = [env[name] if name else None for name in node.inputs]
            env[node.output], backward = node.op(args, node.attrs, mode)
            if training and any(node.needs):
                tape.append((node, backward))
        return env[self.output_name], tape

    def forward(self, x: np.ndarray) -> np.ndarray:
        """Inference-mode logits: dropout off, BatchNorm with the running statistics."""
        return self._run(x, training=False)[0]

    def train_step(self, x: np.ndarray, labels: np.ndarray) -> np.ndarray:
        """One step: training-mode forward, softmax cross-entropy, backward, then for each
        parameter ``v = momentum * v + grad; p -= lr * v`` (torch.optim.SGD, no dampening).
        Returns the loss (before the update) as a 0-d array."""
        logits, tape = self._run(x, training=True)
        loss, dlogits = softmax_cross_entropy(logits, labels)
        grads: dict[str, np.ndarray] = {self.output_name: dlogits}
        for node, backward in reversed(tape):
            dy = grads.pop(node.output, None)
            if dy is None:
                continue
            # a VJP may leave out trailing constant inputs (ratios, shapes): strict=False
            for name, need, g in zip(
                node.inputs, node.needs, backward(dy, node.needs), strict=False
            ):
                if need and g is not None:
                    grads[name] = grads[name] + g if name in grads else g
        for name, p in self.params.items():
            if name not in grads:  # not used by this graph's output: no gradient, no step
                continue
            v = self.velocity[name]
            v *= self.momentum
            v += grads[name]
            p -= self.lr * v
        return loss

    def parameters(self) -> dict[str, np.ndarray]:
        """The trainable values as float64 copies, keyed by ONNX initializer name."""
        return {name: p.astype(np.float64) for name, p in self.params.items()}
