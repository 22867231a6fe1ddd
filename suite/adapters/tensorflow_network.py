"""ONNX graph -> Keras functional model with the same initializer values.

Imported only by the TensorFlow adapter's network words (so only inside a worker). Every ONNX
node becomes a Keras layer where Keras has one (``Dense``, ``Conv2D``, ``BatchNormalization``,
``MaxPooling2D``, ``LayerNormalization``, ``Embedding``, ``Dropout``, ``Softmax``, ...) and a
``keras.ops`` call in the functional graph where it has none (``erf``, a batched ``matmul``), so
the model that is measured is a plain ``keras.Model``. Float initializers with more than one
element become trainable weights (loaded from the ONNX values, transposed where Keras' layout
differs); BatchNormalization's mean and variance become the layer's moving statistics; scalars
and integer initializers become constants.

Layout: TensorFlow's CPU convolutions (and all their gradients) exist only for NHWC, so 4-D
image activations are kept channels-last inside the model: the NCHW graph input is permuted
once, layout-aware ops (Conv, pools, BatchNormalization, element-wise ops, GlobalAveragePool)
work on NHWC, and any other op first gets the tensor back in ONNX's NCHW layout (so ``Flatten``
flattens in ONNX's C, H, W order and the following weights need no permutation).

Written for Keras 3 (TensorFlow >= 2.16); it also runs on tf.keras 2.12 (TensorFlow 2.12.1, the
Horovod-over-TensorFlow environment: Horovod 0.28.1 builds against TensorFlow <= 2.12), where the
few Keras-3-only calls (``keras.ops``, ``keras.DTypePolicy``, the optimizer's ``scale_loss``) have
their Keras 2 equivalents (see ``KERAS3``).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import keras
import numpy as np
import tensorflow as tf
from keras import layers
from onnx import ModelProto, NodeProto, numpy_helper

from suite.adapters.base import NetworkOptions
from suite.adapters.tensorflow import same_pads
from suite.levels.network.zoo import node_attributes

#: Keras 3, or tf.keras 2 (TensorFlow 2.12). Keras 2 has no ``keras.ops``: there the TensorFlow
#: op is called on the symbolic tensor, which Keras 2 wraps in a layer of the functional model.
#: Its optimizers are taken from ``tf.keras`` (``keras.optimizers.SGD`` of the keras 2 package
#: is the legacy optimizer, without ``build``).
KERAS3 = int(keras.__version__.split(".")[0]) >= 3
if KERAS3:
    ops: Any = keras.ops
    DTypePolicy: Any = keras.DTypePolicy
    SGD: Any = keras.optimizers.SGD
    LossScaleOptimizer: Any = keras.optimizers.LossScaleOptimizer
else:
    ops = SimpleNamespace(
        add=tf.math.add, subtract=tf.math.subtract, multiply=tf.math.multiply,
        divide=tf.math.divide, matmul=tf.linalg.matmul, erf=tf.math.erf, sqrt=tf.math.sqrt,
        pad=tf.pad, reshape=tf.reshape, transpose=tf.transpose,
        take=lambda x, indices, axis: tf.gather(x, indices, axis=axis),
    )  # fmt: skip
    DTypePolicy = tf.keras.mixed_precision.Policy
    SGD = tf.keras.optimizers.SGD
    LossScaleOptimizer = tf.keras.mixed_precision.LossScaleOptimizer

# The ONNX ops this builder maps (the zoo's op set plus a few common ones in user files).
ONNX_OPS = frozenset(
    {
        "Add", "AveragePool", "BatchNormalization", "Concat", "Conv", "Div", "Dropout", "Erf",
        "Flatten", "Gather", "Gemm", "GlobalAveragePool", "Identity", "LayerNormalization",
        "MatMul", "MaxPool", "Mul", "Relu", "Reshape", "Sigmoid", "Softmax", "Sqrt", "Sub",
        "Tanh", "Transpose",
    }
)  # fmt: skip

#: ONNX (NCHW) axis -> axis of the same dimension in the NHWC tensor
_NCHW_TO_NHWC_AXIS = {0: 0, 1: 3, 2: 1, 3: 2}
_TO_NHWC, _TO_NCHW = (0, 2, 3, 1), (0, 3, 1, 2)

_BINARY: dict[str, Callable[[Any, Any], Any]] = {
    "Add": ops.add,
    "Sub": ops.subtract,
    "Mul": ops.multiply,
    "Div": ops.divide,
    "MatMul": ops.matmul,
}


_attrs = node_attributes


class OnnxWeightOp(layers.Layer):
    """``op(x, w)`` (or ``op(w, x)``) with ``w`` a trainable initializer of the ONNX graph: the
    Keras home of a weight that no built-in layer owns (e.g. BERT's position embeddings, added
    to the token embeddings)."""

    def __init__(self, op: str, shape: tuple[int, ...], weight_first: bool, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.op = op
        self.weight_shape = tuple(shape)
        self.weight_first = weight_first

    def build(self, input_shape: Any) -> None:
        self.w = self.add_weight(
            shape=self.weight_shape, initializer="zeros", trainable=True, name="value"
        )

    def call(self, x: Any) -> Any:
        fn = _BINARY[self.op]
        return fn(self.w, x) if self.weight_first else fn(x, self.w)


@dataclass
class _Param:
    """Where an ONNX initializer lives in the Keras model and how to convert its layout."""

    variable: Any
    to_keras: Callable[[np.ndarray], np.ndarray]
    to_onnx: Callable[[np.ndarray], np.ndarray]


def _same(a: np.ndarray) -> np.ndarray:
    return a


@dataclass
class KerasGraph:
    """The built functional model and the mapping of ONNX initializers to its variables."""

    model: Any
    #: trainable ONNX initializers (float, more than one element), by ONNX name
    params: dict[str, _Param]
    #: moving statistics of BatchNormalization, by ONNX name (loaded, not trainable)
    stats: dict[str, _Param]
    #: float initializers no node uses (returned unchanged, as the PyTorch builder does)
    unused: dict[str, np.ndarray] = field(default_factory=dict)
    input_name: str = ""
    image_input: bool = False


class _Builder:
    """Walks the ONNX graph once, in order, creating Keras layers and functional calls."""

    def __init__(self, model: ModelProto, policy: Any, channels_last: bool, seed: int) -> None:
        self.graph = model.graph
        self.policy = policy
        self.channels_last = channels_last
        self.seed = seed
        self.inits = {i.name: numpy_helper.to_array(i) for i in self.graph.initializer}
        #: computed values: name -> (KerasTensor, is an NCHW value held as NHWC)
        self.env: dict[str, tuple[Any, bool]] = {}
        self._nchw_cache: dict[str, Any] = {}
        self.params: dict[str, _Param] = {}
        self.stats: dict[str, _Param] = {}
        self.loads: list[tuple[Any, np.ndarray]] = []
        self.fused: dict[str, str] = {}  # Add nodes folded into a preceding Dense (by output)
        self._names: Counter[str] = Counter()
        self.consumers: dict[str, list[NodeProto]] = {}
        for node in self.graph.node:
            for name in node.input:
                self.consumers.setdefault(name, []).append(node)
        self.uses = Counter(n for node in self.graph.node for n in node.input if n)
        self.outputs = {o.name for o in self.graph.output}
        self.dropouts = 0

    # -- helpers -----------------------------------------------------------------------------
    def name(self, node: NodeProto) -> str | None:
        if not node.name:
            return None
        base = re.sub(r"[^A-Za-z0-9_.\-]", "_", node.name)
        self._names[base] += 1
        return base if self._names[base] == 1 else f"{base}_{self._names[base]}"

    def is_init(self, name: str) -> bool:
        return name in self.inits and name not in self.env

    def trainable_init(self, name: str) -> bool:
        a = self.inits.get(name)
        return a is not None and a.dtype.kind == "f" and a.size > 1

    def onnx_layout(self, name: str) -> Any:
        """The value in ONNX's layout (NHWC values are permuted back to NCHW once)."""
        t, nhwc = self.env[name]
        if not nhwc:
            return t
        if name not in self._nchw_cache:
            self._nchw_cache[name] = layers.Permute((3, 1, 2), dtype=self.policy)(t)
        return self._nchw_cache[name]

    def nhwc(self, name: str) -> Any:
        """An NCHW value in NHWC (permuting an ONNX-layout 4-D value if needed)."""
        t, nhwc = self.env[name]
        if nhwc:
            return t
        if len(t.shape) != 4:
            raise NotImplementedError(f"{name!r} is not a 4-D image tensor")
        return layers.Permute((2, 3, 1), dtype=self.policy)(t)

    def data_format(self) -> str:
        return "channels_last" if self.channels_last else "channels_first"

    def image(self, name: str) -> Any:
        """Input of a layout-aware image op, in the model's image layout."""
        return self.nhwc(name) if self.channels_last else self.onnx_layout(name)

    def set(self, name: str, tensor: Any, nhwc: bool = False) -> None:
        self.env[name] = (tensor, nhwc)

    def param(
        self,
        onnx_name: str,
        variable: Any,
        to_keras: Callable[[np.ndarray], np.ndarray] = _same,
        to_onnx: Callable[[np.ndarray], np.ndarray] = _same,
        stats: bool = False,
    ) -> None:
        if self.uses[onnx_name] > 1 and not stats:
            raise NotImplementedError(
                f"initializer {onnx_name!r} is shared by {self.uses[onnx_name]} nodes; "
                "the Keras builder maps each weight to one layer"
            )
        (self.stats if stats else self.params)[onnx_name] = _Param(variable, to_keras, to_onnx)
        self.loads.append((variable, to_keras(self.inits[onnx_name])))

    def scalar(self, name: str) -> float:
        return float(np.asarray(self.inits[name]).reshape(()))

    # -- the walk ----------------------------------------------------------------------------
    def build(self) -> KerasGraph:
        inputs = [i for i in self.graph.input if i.name not in self.inits]
        if len(inputs) != 1:
            raise NotImplementedError(f"the graph has {len(inputs)} inputs; expected one")
        spec = inputs[0]
        tt = spec.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None
                for d in tt.shape.dim]  # fmt: skip
        is_float = tt.elem_type in (1, 10, 11, 16)
        inp = keras.Input(
            shape=tuple(dims[1:]), dtype="float32" if is_float else "int64", name="input"
        )
        image = is_float and len(dims) == 4
        if image and self.channels_last:
            self.set(spec.name, layers.Permute((2, 3, 1), dtype=self.policy)(inp), nhwc=True)
        else:
            self.set(spec.name, inp)
        for node in self.graph.node:
            if node.output[0] in self.fused:
                continue
            handler = getattr(self, f"op_{node.op_type}", None)
            if handler is None:
                raise NotImplementedError(f"unsupported op {node.op_type} in node {node.name}")
            handler(node, _attrs(node))
        out = self.onnx_layout(self.graph.output[0].name)
        # logits in float32 under mixed precision (the loss is computed in float32)
        out = layers.Activation("linear", dtype="float32", name="logits_fp32")(out)
        model = keras.Model(inputs=inp, outputs=out, name=self.graph.name or "onnx")
        for variable, value in self.loads:
            if tuple(variable.shape) != value.shape:
                raise ValueError(
                    f"shape mismatch loading {getattr(variable, 'path', variable.name)}: {tuple(variable.shape)} vs {value.shape}"
                )
            variable.assign(value)
        mapped = set(self.params) | set(self.stats)
        unused = {
            name: a
            for name, a in self.inits.items()
            if a.dtype.kind == "f" and a.size > 1 and name not in mapped and not self.uses[name]
        }
        return KerasGraph(model, self.params, self.stats, unused, spec.name, image)

    # -- ops ---------------------------------------------------------------------------------
    def op_Identity(self, node: NodeProto, a: dict[str, Any]) -> None:
        self.env[node.output[0]] = self.env[node.input[0]]

    def _unary(self, node: NodeProto, fn: Any) -> None:
        t, nhwc = self.env[node.input[0]]
        self.set(node.output[0], fn(t), nhwc)

    def op_Relu(self, node: NodeProto, a: dict[str, Any]) -> None:
        self._unary(node, layers.ReLU(name=self.name(node), dtype=self.policy))

    def op_Sigmoid(self, node: NodeProto, a: dict[str, Any]) -> None:
        self._unary(node, layers.Activation("sigmoid", name=self.name(node), dtype=self.policy))

    def op_Tanh(self, node: NodeProto, a: dict[str, Any]) -> None:
        self._unary(node, layers.Activation("tanh", name=self.name(node), dtype=self.policy))

    def op_Erf(self, node: NodeProto, a: dict[str, Any]) -> None:
        self._unary(node, ops.erf)

    def op_Sqrt(self, node: NodeProto, a: dict[str, Any]) -> None:
        self._unary(node, ops.sqrt)

    def op_Dropout(self, node: NodeProto, a: dict[str, Any]) -> None:
        ratio = a.get("ratio", 0.5)
        if len(node.input) > 1 and node.input[1]:
            if not self.is_init(node.input[1]):
                raise NotImplementedError(f"Dropout ratio must be a constant (node {node.name})")
            ratio = self.scalar(node.input[1])
        if len(node.input) > 2 and node.input[2]:
            raise NotImplementedError(f"Dropout training_mode input in node {node.name}")
        self.dropouts += 1
        self._unary(
            node,
            layers.Dropout(
                ratio, seed=self.seed + self.dropouts, name=self.name(node), dtype=self.policy
            ),
        )

    def _binary(self, node: NodeProto, a: dict[str, Any]) -> None:
        op = node.op_type
        x, y = node.input
        if self.is_init(x) and self.is_init(y):
            raise NotImplementedError(f"{op} of two constants in node {node.name}")
        if self.is_init(x) or self.is_init(y):
            const, comp, weight_first = (x, y, True) if self.is_init(x) else (y, x, False)
            value = self.inits[const]
            if value.dtype.kind != "f":
                raise NotImplementedError(f"{op} with a non-float constant in node {node.name}")
            t, nhwc = self.env[comp]
            if value.size == 1 and op != "MatMul":
                c = self.scalar(const)  # a Python float keeps the tensor's (mixed) dtype
                fn = _BINARY[op]
                out = fn(c, t) if weight_first else fn(t, c)
                self.set(node.output[0], out, nhwc)
                return
            layer = OnnxWeightOp(
                op, value.shape, weight_first, name=self.name(node), dtype=self.policy
            )
            out = layer(self.onnx_layout(comp))
            self.param(const, layer.w)
            self.set(node.output[0], out)
            return
        (tx, nx), (ty, ny) = self.env[x], self.env[y]
        if nx and ny and op != "MatMul":
            fx, fy = tx, ty
            nhwc = True
        else:
            fx, fy = self.onnx_layout(x), self.onnx_layout(y)
            nhwc = False
        merge = {"Add": layers.Add, "Sub": layers.Subtract, "Mul": layers.Multiply}.get(op)
        if merge is not None and tuple(fx.shape) == tuple(fy.shape):
            out = merge(name=self.name(node), dtype=self.policy)([fx, fy])
        else:
            out = _BINARY[op](fx, fy)
        self.set(node.output[0], out, nhwc)

    op_Add = op_Sub = op_Mul = op_Div = _binary

    def op_MatMul(self, node: NodeProto, a: dict[str, Any]) -> None:
        x, w = node.input
        if self.is_init(x) or not self.is_init(w) or self.inits[w].ndim != 2:
            self._binary(node, a)
            return
        kernel = self.inits[w]
        bias_name = self._fusable_bias(node, kernel.shape[1])
        dense = layers.Dense(
            kernel.shape[1], use_bias=bias_name is not None, name=self.name(node),
            dtype=self.policy,
        )  # fmt: skip
        out = dense(self.onnx_layout(x))
        self.param(w, dense.kernel)
        target = node.output[0]
        if bias_name is not None:
            self.param(bias_name, dense.bias)
            target = self.consumers[node.output[0]][0].output[0]
            self.fused[target] = node.output[0]
        self.set(target, out)

    def _fusable_bias(self, node: NodeProto, units: int) -> str | None:
        """The bias of ``MatMul -> Add(bias)`` (a 1-D initializer of ``units`` values), which
        then becomes the Dense layer's own bias."""
        out = node.output[0]
        users = self.consumers.get(out, [])
        if out in self.outputs or len(users) != 1 or users[0].op_type != "Add":
            return None
        other = [n for n in users[0].input if n != out]
        if len(other) != 1 or not self.is_init(other[0]):
            return None
        b = self.inits[other[0]]
        if b.dtype.kind != "f" or b.shape != (units,) or self.uses[other[0]] > 1:
            return None
        return other[0]

    def op_Gemm(self, node: NodeProto, a: dict[str, Any]) -> None:
        x, w = node.input[0], node.input[1]
        c = node.input[2] if len(node.input) > 2 and node.input[2] else None
        if a.get("transA", 0) or a.get("alpha", 1.0) != 1.0 or a.get("beta", 1.0) != 1.0:
            raise NotImplementedError(f"Gemm with transA/alpha/beta in node {node.name}")
        if not self.is_init(w) or (c is not None and not self.is_init(c)):
            raise NotImplementedError(f"Gemm with a computed weight or bias in node {node.name}")
        trans_b = bool(a.get("transB", 0))
        weight = self.inits[w]
        units = weight.shape[0] if trans_b else weight.shape[1]
        if c is not None and self.inits[c].size != units:
            raise NotImplementedError(f"Gemm with a broadcast bias in node {node.name}")
        dense = layers.Dense(units, use_bias=c is not None, name=self.name(node), dtype=self.policy)
        out = dense(self.onnx_layout(x))
        if trans_b:
            self.param(w, dense.kernel, lambda v: v.T, lambda v: v.T)
        else:
            self.param(w, dense.kernel)
        if c is not None:
            shape = self.inits[c].shape
            self.param(c, dense.bias, lambda v: v.reshape(-1), lambda v: v.reshape(shape))
        self.set(node.output[0], out)

    def _padding(
        self, node: NodeProto, a: dict[str, Any], x: Any, kernel: tuple[int, ...],
        strides: tuple[int, ...], dilations: tuple[int, ...],
    ) -> tuple[tuple[int, int], tuple[int, int]] | None:  # fmt: skip
        """ONNX ``pads`` as ((top, bottom), (left, right)); None for no padding."""
        auto = a.get("auto_pad", b"NOTSET")
        auto = auto.decode() if isinstance(auto, bytes) else auto
        if auto not in ("NOTSET", "VALID"):
            raise NotImplementedError(f"{node.op_type} auto_pad={auto} in node {node.name}")
        pads = [int(p) for p in a.get("pads", [0, 0, 0, 0])]
        if len(pads) != 4 or len(kernel) != 2:
            raise NotImplementedError(f"{node.op_type} is not 2-D in node {node.name}")
        if not any(pads):
            return None
        t, lft, b, r = pads
        return (t, b), (lft, r)

    def _is_same(
        self, x: Any, pads: tuple[tuple[int, int], tuple[int, int]], kernel: tuple[int, ...],
        strides: tuple[int, ...], dilations: tuple[int, ...],
    ) -> bool:  # fmt: skip
        """Whether TensorFlow's ``padding="same"`` pads exactly ``pads`` here."""
        h, w = (x.shape[1], x.shape[2]) if self.channels_last else (x.shape[2], x.shape[3])
        return pads == (
            same_pads(h, kernel[0], strides[0], dilations[0]),
            same_pads(w, kernel[1], strides[1], dilations[1]),
        )

    def _pad(self, x: Any, pads: tuple[tuple[int, int], tuple[int, int]], value: float) -> Any:
        if value == 0.0:
            return layers.ZeroPadding2D(pads, data_format=self.data_format(), dtype=self.policy)(x)
        if self.channels_last:
            widths = [(0, 0), pads[0], pads[1], (0, 0)]
        else:
            widths = [(0, 0), (0, 0), pads[0], pads[1]]
        return ops.pad(x, widths, constant_values=value)

    def op_Conv(self, node: NodeProto, a: dict[str, Any]) -> None:
        if not self.is_init(node.input[1]):
            raise NotImplementedError(f"Conv with a computed weight in node {node.name}")
        weight = self.inits[node.input[1]]
        if weight.ndim != 4:
            raise NotImplementedError(f"Conv is not 2-D in node {node.name}")
        bias = node.input[2] if len(node.input) > 2 and node.input[2] else None
        kernel = tuple(a.get("kernel_shape", weight.shape[2:]))
        strides = tuple(a.get("strides", (1, 1)))
        dilations = tuple(a.get("dilations", (1, 1)))
        x = self.image(node.input[0])
        pads = self._padding(node, a, x, kernel, strides, dilations)
        padding = "valid"
        if pads is not None and self._is_same(x, pads, kernel, strides, dilations):
            padding = "same"
        elif pads is not None:
            x = self._pad(x, pads, 0.0)
        conv = layers.Conv2D(
            weight.shape[0], kernel, strides=strides, padding=padding,
            data_format=self.data_format(), dilation_rate=dilations,
            groups=a.get("group", 1), use_bias=bias is not None, name=self.name(node),
            dtype=self.policy,
        )  # fmt: skip
        out = conv(x)
        # OIHW <-> HWIO
        self.param(
            node.input[1],
            conv.kernel,
            lambda v: v.transpose(2, 3, 1, 0),
            lambda v: v.transpose(3, 2, 0, 1),
        )
        if bias is not None:
            self.param(bias, conv.bias)
        self.set(node.output[0], out, self.channels_last)

    def _pool(self, node: NodeProto, a: dict[str, Any], kind: str) -> None:
        if a.get("ceil_mode", 0):
            raise NotImplementedError(f"{node.op_type} ceil_mode=1 in node {node.name}")
        if any(d != 1 for d in a.get("dilations", (1, 1))):
            raise NotImplementedError(f"{node.op_type} with dilations in node {node.name}")
        if len(node.output) > 1 and node.output[1]:
            raise NotImplementedError(f"{node.op_type} with an indices output in node {node.name}")
        kernel = tuple(a["kernel_shape"])
        strides = tuple(a.get("strides", (1, 1)))
        x = self.image(node.input[0])
        pads = self._padding(node, a, x, kernel, strides, (1, 1))
        include_pad = kind == "avg" and bool(a.get("count_include_pad", 0))
        padding = "valid"
        if pads is not None and not include_pad and self._is_same(x, pads, kernel, strides, (1, 1)):
            padding = "same"  # TensorFlow's SAME pools ignore the padded cells, as ONNX does
        elif pads is not None and kind == "max":
            x = self._pad(x, pads, float("-inf"))  # padded cells never win the max
        elif pads is not None and include_pad:
            x = self._pad(x, pads, 0.0)
        elif pads is not None:
            raise NotImplementedError(
                f"AveragePool with count_include_pad=0 and pads that TensorFlow's SAME padding "
                f"does not reproduce, in node {node.name}"
            )
        cls = layers.MaxPooling2D if kind == "max" else layers.AveragePooling2D
        pool = cls(
            kernel, strides=strides, padding=padding, data_format=self.data_format(),
            name=self.name(node), dtype=self.policy,
        )  # fmt: skip
        self.set(node.output[0], pool(x), self.channels_last)

    def op_MaxPool(self, node: NodeProto, a: dict[str, Any]) -> None:
        self._pool(node, a, "max")

    def op_AveragePool(self, node: NodeProto, a: dict[str, Any]) -> None:
        self._pool(node, a, "avg")

    def op_GlobalAveragePool(self, node: NodeProto, a: dict[str, Any]) -> None:
        pool = layers.GlobalAveragePooling2D(
            data_format=self.data_format(), keepdims=True, name=self.name(node),
            dtype=self.policy,
        )  # fmt: skip
        self.set(node.output[0], pool(self.image(node.input[0])), self.channels_last)

    def op_BatchNormalization(self, node: NodeProto, a: dict[str, Any]) -> None:
        x_name, scale, bias, mean, var = node.input[:5]
        if not all(self.is_init(n) for n in (scale, bias, mean, var)):
            raise NotImplementedError(f"BatchNormalization with computed statistics ({node.name})")
        if len(node.output) > 1 and any(node.output[1:]):
            raise NotImplementedError(f"BatchNormalization training outputs in node {node.name}")
        t, nhwc = self.env[x_name]
        rank = len(t.shape)
        if rank == 4:
            x = self.image(x_name)
            axis = -1 if self.channels_last else 1
        else:
            x, axis = self.onnx_layout(x_name), 1
        # ONNX and Keras share the momentum convention (running = m * running + (1 - m) *
        # batch; PyTorch's momentum 0.1 is ONNX's 0.9) and add epsilon to the variance.
        bn = layers.BatchNormalization(
            axis=axis, momentum=a.get("momentum", 0.9), epsilon=a.get("epsilon", 1e-5),
            name=self.name(node), dtype=self.policy,
        )  # fmt: skip
        out = bn(x)
        self.param(scale, bn.gamma)
        self.param(bias, bn.beta)
        self.param(mean, bn.moving_mean, stats=True)
        self.param(var, bn.moving_variance, stats=True)
        self.set(node.output[0], out, rank == 4 and self.channels_last)

    def op_LayerNormalization(self, node: NodeProto, a: dict[str, Any]) -> None:
        x = self.onnx_layout(node.input[0])
        scale = node.input[1]
        bias = node.input[2] if len(node.input) > 2 and node.input[2] else None
        if not self.is_init(scale) or (bias is not None and not self.is_init(bias)):
            raise NotImplementedError(f"LayerNormalization with computed scale ({node.name})")
        if a.get("stash_type", 1) != 1 or (len(node.output) > 1 and any(node.output[1:])):
            raise NotImplementedError(f"LayerNormalization stash/outputs in node {node.name}")
        rank = len(x.shape)
        axis = a.get("axis", -1)
        axis = axis if axis >= 0 else rank + axis
        axes = list(range(axis, rank))
        ln = layers.LayerNormalization(
            axis=axes if len(axes) > 1 else axes[0], epsilon=a.get("epsilon", 1e-5),
            center=bias is not None, name=self.name(node), dtype=self.policy,
        )  # fmt: skip
        out = ln(x)
        shape = tuple(x.shape[axis:])
        self.param(scale, ln.gamma, lambda v: v.reshape(shape), _same)
        if bias is not None:
            self.param(bias, ln.beta, lambda v: v.reshape(shape), _same)
        self.set(node.output[0], out)

    def op_Softmax(self, node: NodeProto, a: dict[str, Any]) -> None:
        sm = layers.Softmax(axis=a.get("axis", -1), name=self.name(node), dtype=self.policy)
        self.set(node.output[0], sm(self.onnx_layout(node.input[0])))

    def op_Flatten(self, node: NodeProto, a: dict[str, Any]) -> None:
        axis = a.get("axis", 1)
        t, nhwc = self.env[node.input[0]]
        if nhwc and axis == 1 and t.shape[1] == 1 and t.shape[2] == 1:
            # (N, 1, 1, C) flattens to the same order as ONNX's (N, C, 1, 1)
            self.set(node.output[0], layers.Flatten(name=self.name(node), dtype=self.policy)(t))
            return
        x = self.onnx_layout(node.input[0])
        if axis == 1:
            out = layers.Flatten(name=self.name(node), dtype=self.policy)(x)
        else:
            dims = x.shape
            if axis == 0 or any(d is None for d in dims[1:]):
                raise NotImplementedError(f"Flatten axis={axis} in node {node.name}")
            inner = int(np.prod(dims[axis:]))
            out = ops.reshape(x, (-1, inner))
        self.set(node.output[0], out)

    def op_Reshape(self, node: NodeProto, a: dict[str, Any]) -> None:
        x_name, shape_name = node.input[:2]
        if not self.is_init(shape_name):
            raise NotImplementedError(f"Reshape with a computed shape in node {node.name}")
        x = self.onnx_layout(x_name)
        shape = [int(v) for v in self.inits[shape_name].reshape(-1)]
        dims = list(x.shape)
        if not a.get("allowzero", 0):
            shape = [dims[i] if v == 0 else v for i, v in enumerate(shape)]
        if shape and shape[0] is None:  # the batch dimension is kept
            out = layers.Reshape(tuple(shape[1:]), name=self.name(node), dtype=self.policy)(x)
        else:
            out = ops.reshape(x, tuple(-1 if v is None else v for v in shape))
        self.set(node.output[0], out)

    def op_Transpose(self, node: NodeProto, a: dict[str, Any]) -> None:
        t, nhwc = self.env[node.input[0]]
        perm = list(a.get("perm", range(len(t.shape) - 1, -1, -1)))
        if nhwc and tuple(perm) == _TO_NHWC:
            self.set(node.output[0], t)  # the NHWC tensor already is NCHW transposed so
            return
        x = self.onnx_layout(node.input[0])
        if perm[0] == 0:
            out = layers.Permute(tuple(perm[1:]), name=self.name(node), dtype=self.policy)(x)
        else:
            out = ops.transpose(x, perm)
        self.set(node.output[0], out)

    def op_Gather(self, node: NodeProto, a: dict[str, Any]) -> None:
        data, idx = node.input
        axis = a.get("axis", 0)
        if self.is_init(data) and not self.is_init(idx) and axis == 0:
            table = self.inits[data]
            if table.ndim != 2 or table.dtype.kind != "f":
                raise NotImplementedError(f"Gather from a {table.ndim}-D table in {node.name}")
            emb = layers.Embedding(
                table.shape[0], table.shape[1], name=self.name(node), dtype=self.policy
            )
            out = emb(self.onnx_layout(idx))
            self.param(data, emb.embeddings)
            self.set(node.output[0], out)
            return
        if self.is_init(data):
            raise NotImplementedError(f"Gather from a constant with axis {axis} in {node.name}")
        x = self.onnx_layout(data)
        axis = axis if axis >= 0 else len(x.shape) + axis
        if self.is_init(idx):
            index = self.inits[idx].astype(np.int64)
            size = x.shape[axis]
            if (index < 0).any():
                if size is None:
                    raise NotImplementedError(
                        f"negative Gather index on a dynamic axis ({node.name})"
                    )
                index = np.where(index < 0, index + size, index)
            indices: Any = int(index) if index.ndim == 0 else index
        else:
            indices = self.onnx_layout(idx)
        self.set(node.output[0], ops.take(x, indices, axis=axis))

    def op_Concat(self, node: NodeProto, a: dict[str, Any]) -> None:
        if any(self.is_init(n) for n in node.input):
            raise NotImplementedError(f"Concat with a constant input in node {node.name}")
        axis = a["axis"]
        vals = [self.env[n] for n in node.input]
        if all(nhwc for _, nhwc in vals):
            rank_axis = axis if axis >= 0 else 4 + axis
            cat = layers.Concatenate(
                axis=_NCHW_TO_NHWC_AXIS[rank_axis], name=self.name(node), dtype=self.policy
            )
            self.set(node.output[0], cat([t for t, _ in vals]), True)
            return
        cat = layers.Concatenate(axis=axis, name=self.name(node), dtype=self.policy)
        self.set(node.output[0], cat([self.onnx_layout(n) for n in node.input]))


def build_keras(model: ModelProto, policy: Any, channels_last: bool, seed: int) -> KerasGraph:
    """The Keras functional model of ``model`` with its initializers loaded."""
    return _Builder(model, policy, channels_last, seed).build()


#: the ops the builder has a handler for (``op_<Type>`` methods); equal to ONNX_OPS
HANDLED_OPS = frozenset(n[3:] for n in dir(_Builder) if n.startswith("op_"))
assert HANDLED_OPS == ONNX_OPS, sorted(HANDLED_OPS ^ ONNX_OPS)


class KerasNetwork:
    """A built network: Keras model, SGD optimizer, precision policy, compiled steps.

    ``compile`` (NetworkOptions) compiles the inference and training steps with XLA
    (``jit_compile=True``); without it they are still ``tf.function`` graphs, as Keras' own
    ``fit`` runs them.
    """

    def __init__(
        self, model: ModelProto, dtype: str, options: NetworkOptions, channels_last: bool
    ) -> None:
        self.proto = model
        self.options = options
        self.channels_last = channels_last
        self.amp = options.amp and dtype in ("bf16", "fp16")
        self.policy = DTypePolicy(
            {"bf16": "mixed_bfloat16", "fp16": "mixed_float16"}[dtype] if self.amp else "float32"
        )
        tf.random.set_seed(options.seed)
        self.graph = build_keras(model, self.policy, channels_last, options.seed)
        self.model = self.graph.model
        self.optimizer = self._optimizer(self.model)
        self.strategy: Any = None
        self.world = 1
        #: Horovod's DistributedGradientTape (see ``exchange_gradients``)
        self.wrap_tape: Callable[[Any], Any] | None = None
        self.local: KerasNetwork | None = None
        self._local_warm = False
        #: ParameterServerStrategy's coordinator (see ``parameter_server``)
        self.coordinator: Any = None
        self._compile()

    # -- construction ------------------------------------------------------------------------
    def _optimizer(self, model: Any) -> Any:
        # Keras SGD: m = momentum * m - lr * g; p += m. For a constant lr this is PyTorch's
        # v = momentum * v + g; p -= lr * v (m = -lr * v), first step included.
        opt = SGD(learning_rate=self.options.lr, momentum=self.options.momentum)
        if self.amp and self.policy.compute_dtype == "float16":
            opt = LossScaleOptimizer(opt)  # dynamic loss scale
        opt.build(model.trainable_variables)
        return opt

    def _compile(self) -> None:
        jit = bool(self.options.compile)
        self._infer = tf.function(self._infer_impl, jit_compile=jit, autograph=False)
        # collectives cannot live inside an XLA cluster on the CPU: graph mode only
        if self.strategy is not None:
            self._train = tf.function(self._dist_train_impl, autograph=False)
        elif self.wrap_tape is not None:
            self._train = tf.function(self._train_impl, autograph=False)
        else:
            self._train = tf.function(self._train_impl, jit_compile=jit, autograph=False)

    def distribute(self, strategy: Any, world: int) -> None:
        """Rebuild the model and optimizer under ``strategy`` (MultiWorkerMirroredStrategy)
        with the current weights; the replaced single-process network is kept for the
        comm-share measurement (local steps without the gradient exchange)."""
        self._rebuild_keeping_local_twin(strategy.scope())
        self.strategy = strategy
        self.world = world
        self._compile()

    def parameter_server(self, strategy: Any, coordinator: Any, world: int) -> None:
        """Rebuild the model and optimizer under ``strategy`` (ParameterServerStrategy: the
        variables, momentum included, on the parameter server) with the current weights.
        ``train_step`` then splits the global batch into ``world`` shards and schedules one
        step per shard on ``coordinator``'s workers; each applies its gradient scaled by
        1/world (the ps-async definition) as soon as it has it."""
        self._rebuild_keeping_local_twin(strategy.scope())
        self.ps_strategy, self.coordinator, self.world = strategy, coordinator, world
        self._ps_step = tf.function(self._ps_step_impl, autograph=False)

    def _ps_step_impl(self, x: Any, y: Any) -> Any:
        scale = 1.0 / self.world

        def replica_step(x: Any, y: Any) -> Any:
            variables = self.model.trainable_variables
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(self._loss(self.model(x, training=True), y))
            grads = [g * scale for g in tape.gradient(loss, variables)]
            self.optimizer.apply_gradients(zip(grads, variables, strict=True))
            return loss

        return self.ps_strategy.run(replica_step, args=(x, y))

    def exchange_gradients(self, wrap_tape: Callable[[Any], Any]) -> None:
        """Average the gradients across ranks in the training step: ``wrap_tape(tape)`` gives a
        tape whose ``gradient`` is already averaged (Horovod's DistributedGradientTape). As
        with ``distribute``, the replaced network is kept for the no-exchange steps."""
        self._rebuild_keeping_local_twin(nullcontext())
        self.wrap_tape = wrap_tape
        self._compile()

    def _rebuild_keeping_local_twin(self, scope: Any) -> None:
        """A new model and optimizer (built inside ``scope``) with the current weights; the
        old ones become ``self.local``, whose steps are the same without any exchange."""
        local = KerasNetwork.__new__(KerasNetwork)
        local.__dict__.update(self.__dict__)
        local._compile()  # its steps must be bound to it, not to the rebuilt network
        local.local = None
        weights = self.model.get_weights()
        with scope:
            self.graph = build_keras(self.proto, self.policy, self.channels_last, self.options.seed)
            self.model = self.graph.model
            self.model.set_weights(weights)
            self.optimizer = self._optimizer(self.model)
        self.local = local

    def optimizer_variables(self) -> list[Any]:
        """The optimizer's state (iteration count, momentum buffers)."""
        held = self.optimizer.variables  # a method in Keras 2, a property in Keras 3
        return list(held() if callable(held) else held)

    def loss_scale(self) -> float | None:
        """The dynamic loss scale (Keras 3: ``dynamic_scale``; Keras 2: ``loss_scale``)."""
        if not isinstance(self.optimizer, LossScaleOptimizer):
            return None
        held = self.optimizer.dynamic_scale if KERAS3 else self.optimizer.loss_scale
        return float(held.numpy() if hasattr(held, "numpy") else held)

    def _scale_loss(self, loss: Any) -> Any:
        if KERAS3:
            return self.optimizer.scale_loss(loss)
        if isinstance(self.optimizer, LossScaleOptimizer):
            return self.optimizer.get_scaled_loss(loss)
        return loss

    def _unscale(self, grads: Any) -> Any:
        # Keras 3's LossScaleOptimizer unscales in apply_gradients; Keras 2's must be asked
        if not KERAS3 and isinstance(self.optimizer, LossScaleOptimizer):
            return self.optimizer.get_unscaled_gradients(grads)
        return grads

    # -- steps -------------------------------------------------------------------------------
    def _infer_impl(self, x: Any) -> Any:
        return self.model(x, training=False)

    def _loss(self, logits: Any, y: Any) -> Any:
        return keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True)

    def _train_impl(self, x: Any, y: Any) -> Any:
        variables = self.model.trainable_variables
        with tf.GradientTape() as tape:
            logits = self.model(x, training=True)
            loss = tf.reduce_mean(self._loss(logits, y))
            scaled = self._scale_loss(loss)
        if self.wrap_tape is not None:
            tape = self.wrap_tape(tape)
        grads = self._unscale(tape.gradient(scaled, variables))
        self.optimizer.apply_gradients(zip(grads, variables, strict=True))
        return loss

    def _dist_train_impl(self, x: Any, y: Any) -> Any:
        world = self.world

        def replica_step(x: Any, y: Any) -> Any:
            variables = self.model.trainable_variables
            with tf.GradientTape() as tape:
                logits = self.model(x, training=True)
                per_example = self._loss(logits, y)
                # sum / global batch: Keras' optimizer all-reduces (sums) the gradients
                # across replicas, so the update is the global-batch mean's gradient
                global_batch = tf.cast(tf.shape(per_example)[0] * world, per_example.dtype)
                loss = tf.reduce_sum(per_example) / global_batch
                scaled = self._scale_loss(loss)
            grads = self._unscale(tape.gradient(scaled, variables))
            self.optimizer.apply_gradients(zip(grads, variables, strict=True))
            return loss * world  # this rank's mean loss

        out = self.strategy.run(replica_step, args=(x, y))
        return self.strategy.experimental_local_results(out)[0]

    def forward(self, x: Any) -> Any:
        return self._infer(x)

    def train_step(self, x: Any, y: Any) -> Any:
        if self.coordinator is not None:
            from suite.adapters.tensorflow_strategies import PSSteps

            shards = zip(tf.split(x, self.world), tf.split(y, self.world), strict=True)
            return PSSteps([self.coordinator.schedule(self._ps_step, args=s) for s in shards])
        if self.local is not None and not self._local_warm:
            # The first data-parallel step (a warm-up step for the level) also traces and runs
            # the no-sync twin once, so the comm-share timing sees no tf.function tracing.
            self._local_warm = True
            self.local.train_step(x, y)
        return self._train(x, y)

    def train_step_no_sync(self, x: Any, y: Any) -> Any:
        if self.local is None:
            return self.train_step(x, y)
        return self.local.train_step(x, y)

    def parameters(self) -> dict[str, np.ndarray]:
        out = {
            name: np.asarray(p.to_onnx(np.asarray(p.variable.numpy())), dtype=np.float64)
            for name, p in self.graph.params.items()
        }
        out.update({k: v.astype(np.float64) for k, v in self.graph.unused.items()})
        return out


def param_count(net: KerasNetwork) -> int:
    return int(sum(np.prod(v.shape) for v in net.model.trainable_variables))
