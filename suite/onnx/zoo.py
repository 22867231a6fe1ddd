"""The network zoo: framework-neutral ONNX graphs built with ``onnx.helper`` (NumPy + onnx only).

Every network is defined once here as an ONNX graph; each framework adapter maps the ONNX ops
in :data:`OPS` to its native layers and loads the same initializers, so all frameworks run the
same weights. A user may also pass any ``.onnx`` file (:func:`load_user_model`).

Conventions every graph follows (adapters rely on them):

* one graph input per :class:`InputSpec` with a symbolic batch dimension ``"N"``; one graph
  output ``"logits"`` of shape ``(N, classes)``; float32 everywhere except token ids (int64);
* initializer names are meaningful and unique (``"layer1.0.conv1.weight"``); ResNets use
  torchvision's names, the Transformer Hugging Face BERT's names;
* ``Gemm`` weights are ``(out, in)`` with ``transB=1`` (like ``torch.nn.Linear``), ``MatMul``
  weights are ``(in, out)``; ``Conv`` weights are ``(out, in, kh, kw)``;
* initializers that are not trainable are recognisable by name: BatchNormalization running
  statistics end in ``.running_mean`` / ``.running_var``, constants (shapes, indices, scalars)
  start with ``const.``;
* initial weights are seeded per tensor from ``(seed, crc32(name))``, so a tensor's values do
  not depend on the rest of the graph, and no weight is ever exactly zero: He-normal for a
  conv/dense layer that feeds a ReLU (directly or through BatchNorm), Glorot-uniform for the
  others (classifier heads, attention, FFN, embeddings, and the last conv of a residual branch
  and the shortcut conv, which feed the residual Add: this keeps ResNet-101's activations
  within float16 range), biases 0.01 * normal, normalisation scale 1 + 0.1 * normal and shift
  0.1 * normal, BatchNorm running mean 0.1 * normal and variance 1 + 0.1 * |normal|.
"""

from __future__ import annotations

import json
import math
import os
import zlib
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import onnx
from google.protobuf.message import DecodeError
from onnx import TensorProto, helper, numpy_helper

from suite.errors import ConfigError
from suite.onnx.importer import LeftOut, data_inputs, first_output_only, inference_form
from suite.params import Field, Params, SizeSpec, validate_fields

OPSET: int = 17
#: IR version of the models built here: 8 loads in onnxruntime >= 1.10 (opset 17 needs >= 1.13).
IR_VERSION: int = 8

#: The op set the zoo uses (default ONNX domain, opset 17), and the attributes each op uses.
#: Adapters implement exactly these to run every zoo network.
OPS: frozenset[str] = frozenset(
    {
        # Gemm(A, B, C): transB=1 (B is (out, in)); alpha=beta=1 (defaults); always with bias C.
        "Gemm",
        # Relu(X): no attributes.
        "Relu",
        # Conv(X, W[, B]): kernel_shape, strides, pads ([top, left, bottom, right], symmetric);
        # dilations=1 and group=1 (defaults); no bias in ResNets, a bias in AlexNet.
        "Conv",
        # MaxPool(X): kernel_shape, strides, pads; ceil_mode=0 (default); one output.
        "MaxPool",
        # BatchNormalization(X, scale, B, mean, var): epsilon=1e-5, momentum=0.9; inference
        # mode (training_mode=0, the default); one output.
        "BatchNormalization",
        # Add(A, B): no attributes; numpy broadcasting (biases, residuals, position embedding).
        "Add",
        # GlobalAveragePool(X): no attributes.
        "GlobalAveragePool",
        # Flatten(X): axis=1.
        "Flatten",
        # Dropout(data, ratio): ratio is the scalar initializer "const.dropout_ratio" (0.5); no
        # training_mode input, so inference is the identity; one output (no mask).
        "Dropout",
        # Gather(data, indices): axis=0 for the token embedding (int64 ids (N, seq)); axis=1
        # with a scalar int64 index 0 to pool the first token, (N, seq, h) -> (N, h).
        "Gather",
        # LayerNormalization(X, scale, B): axis=-1, epsilon=1e-5; one output.
        "LayerNormalization",
        # MatMul(A, B): no attributes; (N, seq, in) @ (in, out) and batched (N, heads, ., .).
        "MatMul",
        # Reshape(data, shape): shape is an int64 initializer with 0 entries that copy the
        # input dim (allowzero=0, the default), so the batch stays symbolic.
        "Reshape",
        # Transpose(X): perm (0, 2, 1, 3) to/from heads, (0, 2, 3, 1) for K^T.
        "Transpose",
        # Mul(A, B): no attributes; attention scale 1/sqrt(head_dim) and GELU's 0.5 and x*.
        "Mul",
        # Div(A, B): no attributes; GELU's x / sqrt(2).
        "Div",
        # Softmax(X): axis=-1.
        "Softmax",
        # Erf(X): no attributes; exact GELU x * 0.5 * (1 + erf(x / sqrt(2))).
        "Erf",
    }
)

_BN_EPSILON = 1e-5
_BN_MOMENTUM = 0.9
_LN_EPSILON = 1e-5
_BATCH_DIM = "N"
_OUTPUT = "logits"


@dataclass(frozen=True)
class InputSpec:
    """One graph input: name, shape without the batch dimension, and what data it takes."""

    name: str
    shape: tuple[int, ...]
    #: "float" (normally distributed data) or "int64" (token ids in [0, high))
    kind: str
    #: exclusive upper bound for int64 ids (the vocabulary size); 0 for float inputs
    high: int = 0


# ----------------------------------------------------------------------------------------------
# Graph building
# ----------------------------------------------------------------------------------------------


def _nonzero(a: np.ndarray, fill: float) -> np.ndarray:
    """Replace exact zeros (probability ~0, but the rule is "never zero") by ``fill``."""
    zeros = a == 0
    if zeros.any():
        a[zeros] = fill
    return a


class _Graph:
    """Collects nodes and seeded initializers of one network."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: dict[str, TensorProto] = {}
        self._names: set[str] = set()

    # -- initializers ----------------------------------------------------------------------
    def _rng(self, name: str) -> np.random.Generator:
        return np.random.default_rng([self.seed, zlib.crc32(name.encode())])

    def _add(self, name: str, array: np.ndarray) -> str:
        if name in self.initializers:
            raise ValueError(f"duplicate initializer {name!r}")
        self.initializers[name] = numpy_helper.from_array(array, name)
        return name

    def he_normal(self, name: str, shape: Sequence[int], fan_in: int) -> str:
        std = math.sqrt(2.0 / fan_in)
        a = self._rng(name).standard_normal(tuple(shape), dtype=np.float32) * np.float32(std)
        return self._add(name, _nonzero(a, std * 1e-3))

    def glorot_uniform(self, name: str, shape: Sequence[int], fan_in: int, fan_out: int) -> str:
        limit = math.sqrt(6.0 / (fan_in + fan_out))
        u = self._rng(name).random(tuple(shape), dtype=np.float32)
        a = (u * np.float32(2.0) - np.float32(1.0)) * np.float32(limit)
        return self._add(name, _nonzero(a, limit * 1e-3))

    def bias(self, name: str, n: int) -> str:
        a = self._rng(name).standard_normal((n,), dtype=np.float32) * np.float32(0.01)
        return self._add(name, _nonzero(a, 1e-4))

    def affine(self, prefix: str, n: int, gain: float = 1.0) -> tuple[str, str]:
        """Normalisation scale ``gain`` * (1 + 0.1 * normal) and shift 0.1 * normal (never
        trivial)."""
        scale = gain * (1.0 + 0.1 * self._rng(f"{prefix}.weight").standard_normal((n,)))
        shift = 0.1 * self._rng(f"{prefix}.bias").standard_normal((n,))
        return (
            self._add(f"{prefix}.weight", _nonzero(scale.astype(np.float32), 1.0)),
            self._add(f"{prefix}.bias", _nonzero(shift.astype(np.float32), 1e-3)),
        )

    def const(self, name: str, value: Any, dtype: type) -> str:
        """A constant initializer ``const.<name>`` (shared when asked for twice)."""
        full = f"const.{name}"
        if full not in self.initializers:
            self._add(full, np.asarray(value, dtype=dtype))
        return full

    # -- nodes -----------------------------------------------------------------------------
    def node(
        self, op: str, inputs: Sequence[str], name: str, output: str | None = None, **attrs: Any
    ) -> str:
        """Append ``op`` named ``name``; its single output is called ``output`` or ``name``."""
        if op not in OPS:
            raise ValueError(f"{op} is not in OPS")
        if name in self._names:
            raise ValueError(f"duplicate node name {name!r}")
        self._names.add(name)
        out = output or name
        self.nodes.append(helper.make_node(op, list(inputs), [out], name=name, **attrs))
        return out

    def conv(
        self,
        prefix: str,
        x: str,
        cin: int,
        cout: int,
        k: int,
        stride: int = 1,
        pad: int = 0,
        bias: bool = False,
        relu_next: bool = True,
    ) -> str:
        """Convolution with ``W`` (cout, cin, k, k): He-normal if a ReLU follows (after an
        optional BatchNorm), else Glorot-uniform (fans counted as Keras does: c * k * k)."""
        name = f"{prefix}.weight"
        if relu_next:
            w = self.he_normal(name, (cout, cin, k, k), fan_in=cin * k * k)
        else:
            w = self.glorot_uniform(name, (cout, cin, k, k), cin * k * k, cout * k * k)
        inputs = [x, w] + ([self.bias(f"{prefix}.bias", cout)] if bias else [])
        return self.node(
            "Conv",
            inputs,
            prefix,
            kernel_shape=[k, k],
            strides=[stride, stride],
            pads=[pad, pad, pad, pad],
        )

    def batchnorm(self, prefix: str, x: str, c: int, gain: float = 1.0) -> str:
        scale, shift = self.affine(prefix, c, gain)
        mean = 0.1 * self._rng(f"{prefix}.running_mean").standard_normal((c,))
        var = 1.0 + 0.1 * np.abs(self._rng(f"{prefix}.running_var").standard_normal((c,)))
        m = self._add(f"{prefix}.running_mean", _nonzero(mean.astype(np.float32), 1e-3))
        v = self._add(f"{prefix}.running_var", var.astype(np.float32))
        return self.node(
            "BatchNormalization",
            [x, scale, shift, m, v],
            prefix,
            epsilon=_BN_EPSILON,
            momentum=_BN_MOMENTUM,
        )

    def layernorm(self, prefix: str, x: str, c: int) -> str:
        scale, shift = self.affine(prefix, c)
        return self.node(
            "LayerNormalization", [x, scale, shift], prefix, axis=-1, epsilon=_LN_EPSILON
        )

    def maxpool(self, name: str, x: str, k: int, stride: int, pad: int = 0) -> str:
        return self.node(
            "MaxPool",
            [x],
            name,
            kernel_shape=[k, k],
            strides=[stride, stride],
            pads=[pad, pad, pad, pad],
        )

    def gemm(
        self, prefix: str, x: str, fin: int, fout: int, relu_next: bool, output: str | None = None
    ) -> str:
        """Dense layer ``x @ W.T + b`` with ``W`` (fout, fin): He-normal if a ReLU follows.

        The classifier head (``output`` = logits) is Glorot-uniform scaled by 0.1, so initial
        logits are O(1) and the loss starts near ln(classes): without it AlexNet's first loss
        is ~12 and SGD with momentum 0.9 can diverge in its first steps.
        """
        if relu_next:
            w = self.he_normal(f"{prefix}.weight", (fout, fin), fan_in=fin)
        else:
            w = self.glorot_uniform(f"{prefix}.weight", (fout, fin), fin, fout)
        if output == _OUTPUT:
            arr = numpy_helper.to_array(self.initializers[w]) * np.float32(0.1)
            self.initializers[w] = numpy_helper.from_array(arr, w)
        b = self.bias(f"{prefix}.bias", fout)
        return self.node("Gemm", [x, w, b], prefix, output=output, transB=1)

    def dense(self, prefix: str, x: str, fin: int, fout: int) -> str:
        """``x @ W + b`` on (..., fin) with ``W`` (fin, fout), Glorot-uniform."""
        w = self.glorot_uniform(f"{prefix}.weight", (fin, fout), fin, fout)
        b = self.bias(f"{prefix}.bias", fout)
        y = self.node("MatMul", [x, w], f"{prefix}.matmul")
        return self.node("Add", [y, b], f"{prefix}.add_bias")

    def model(
        self,
        network: str,
        inputs: Sequence[onnx.ValueInfoProto],
        classes: int,
        params: Mapping[str, Any],
    ) -> onnx.ModelProto:
        output = helper.make_tensor_value_info(_OUTPUT, TensorProto.FLOAT, [_BATCH_DIM, classes])
        graph = helper.make_graph(
            self.nodes, network, list(inputs), [output], list(self.initializers.values())
        )
        model = helper.make_model(
            graph,
            opset_imports=[helper.make_opsetid("", OPSET)],
            producer_name="dlsuite.zoo",
            doc_string=f"dlsuite zoo network {network} {json.dumps(dict(params), sort_keys=True)}",
        )
        model.ir_version = IR_VERSION
        helper.set_model_props(
            model,
            {
                "dlsuite.network": network,
                "dlsuite.params": json.dumps(dict(params), sort_keys=True),
                "dlsuite.seed": str(self.seed),
            },
        )
        return model


def _input_value_info(spec: InputSpec) -> onnx.ValueInfoProto:
    elem = TensorProto.INT64 if spec.kind == "int64" else TensorProto.FLOAT
    return helper.make_tensor_value_info(spec.name, elem, [_BATCH_DIM, *spec.shape])


# ----------------------------------------------------------------------------------------------
# The network contract
# ----------------------------------------------------------------------------------------------


class NetworkDef(ABC):
    """A framework-neutral network: its parameters, sizes, and the ONNX graph it builds.

    Subclasses set ``name``, ``summary`` and ``fields`` (architecture and size parameters,
    never the batch), and implement ``sizes``, ``input_spec`` and ``_graph``; ``_check``
    adds cross-field checks and ``_derived`` fills defaults that depend on other fields.
    """

    name: str
    summary: str
    fields: dict[str, Field]

    # -- parameters --------------------------------------------------------------------------
    @abstractmethod
    def sizes(self, size_set: str) -> list[SizeSpec]:
        """Parameter sets for ``size_set``: "quick" (tiny, seconds on a 2-core CPU) or "full"
        (the real network; each ``SizeSpec.source`` names where the configuration comes from)."""

    def _size_set(self, size_set: str) -> None:
        if size_set not in ("quick", "full"):
            raise ConfigError(f"unknown size set {size_set!r}; choose quick or full")

    def validate(self, params: Mapping[str, Any]) -> Params:
        """Check ``params`` and fill defaults; a ConfigError names ``<network>.<field>`` and
        the fix (unknown field, wrong type, non-positive value, cross-field constraints)."""
        out = validate_fields(self.name, self.fields, params, derived=self._derived)
        self._check(out)
        return out

    def _derived(self, params: Params) -> Params:
        """Defaults that depend on other fields (e.g. the Transformer's config)."""
        return params

    def _check(self, params: Params) -> None:
        """Cross-field checks; raise ConfigError naming the field."""
        return None

    # -- the graph ---------------------------------------------------------------------------
    @abstractmethod
    def input_spec(self, params: Mapping[str, Any]) -> InputSpec:
        """The graph input (shape without the batch dimension)."""

    def num_classes(self, params: Mapping[str, Any]) -> int:
        """The number of logits per example."""
        classes: int = self.validate(params)["classes"]
        return classes

    def build(self, params: Mapping[str, Any], seed: int = 0) -> onnx.ModelProto:
        """The ONNX model (opset 17) for ``params``: batch dimension symbolic ``"N"``, one
        graph input per :class:`InputSpec`, one output ``"logits"`` of shape (N, classes),
        initializers deterministic for ``seed``."""
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise ConfigError(f"{self.name}: seed must be a non-negative integer, got {seed!r}")
        p = self.validate(params)
        spec = self.input_spec(p)
        g = _Graph(seed)
        self._graph(g, p, spec.name)
        return g.model(self.name, [_input_value_info(spec)], p["classes"], p)

    @abstractmethod
    def _graph(self, g: _Graph, params: Params, x: str) -> None:
        """Append the nodes from input ``x`` to the output ``"logits"``."""


class ImageNetwork(NetworkDef):
    """A network on ``(3, resolution, resolution)`` images whose channels a ``width`` divides
    (AlexNet, the ResNets): the fields, the input and their checks."""

    #: every layer's channels are multiples of it: ``width`` must divide it
    width_base: int
    #: the channels ``width`` must divide, as the error message names them
    channels_text: str
    #: the smallest side the network's downsampling leaves non-empty, and the downsampling
    #: as the error message names it
    min_resolution: int
    downsampling_text: str

    def __init__(self) -> None:
        self.fields = {
            "resolution": Field(int, default=224),
            "classes": Field(int, default=1000),
            "width": Field(int, default=1),
        }

    def _check(self, params: Params) -> None:
        base = self.width_base
        if base % params["width"]:
            divisors = [d for d in range(1, base + 1) if base % d == 0]
            raise ConfigError(
                f"{self.name}.width: {params['width']} does not divide {self.channels_text}; "
                f"choose one of {divisors}"
            )
        if params["resolution"] < self.min_resolution:
            raise ConfigError(
                f"{self.name}.resolution: {params['resolution']} is too small for the "
                f"network's downsampling {self.downsampling_text}; set resolution >= "
                f"{self.min_resolution}"
            )

    def input_spec(self, params: Mapping[str, Any]) -> InputSpec:
        r = self.validate(params)["resolution"]
        return InputSpec("input", (3, r, r), "float")


# ----------------------------------------------------------------------------------------------
# MLP
# ----------------------------------------------------------------------------------------------


class MLP(NetworkDef):
    """Gemm + ReLU stack, then a Gemm to the classes."""

    def __init__(self) -> None:
        self.name = "mlp"
        self.summary = "multilayer perceptron: (Gemm + ReLU) x layers, Gemm to classes"
        self.fields = {
            "features": Field(int, default=64),
            "hidden": Field(int, default=128),
            "layers": Field(int, default=2),
            "classes": Field(int, default=10),
        }

    def sizes(self, size_set: str) -> list[SizeSpec]:
        self._size_set(size_set)
        if size_set == "quick":
            return [
                SizeSpec(
                    {"features": 64, "hidden": 128, "layers": 2, "classes": 10},
                    "quick: tiny MLP for scikit-learn digits (8x8 = 64 features, 10 classes)",
                )
            ]
        return [
            SizeSpec(
                {"features": 784, "hidden": 1024, "layers": 3, "classes": 10},
                "MNIST-style MLP (784-1024-1024-1024-10)",
            )
        ]

    def input_spec(self, params: Mapping[str, Any]) -> InputSpec:
        p = self.validate(params)
        return InputSpec("input", (p["features"],), "float")

    def _graph(self, g: _Graph, params: Params, x: str) -> None:
        width = params["features"]
        for i in range(1, params["layers"] + 1):
            x = g.gemm(f"fc{i}", x, width, params["hidden"], relu_next=True)
            x = g.node("Relu", [x], f"relu{i}")
            width = params["hidden"]
        g.gemm("head", x, width, params["classes"], relu_next=False, output=_OUTPUT)


# ----------------------------------------------------------------------------------------------
# AlexNet (Keras variant)
# ----------------------------------------------------------------------------------------------

# (out channels, kernel, stride, pad, max-pool 3x3/2 after it)
_ALEXNET_CONVS = (
    (96, 11, 4, 0, True),
    (256, 5, 1, 2, True),
    (384, 3, 1, 1, False),
    (384, 3, 1, 1, False),
    (256, 3, 1, 1, True),
)
_ALEXNET_DENSE = 4096
_ALEXNET_WIDTH_BASE = 32  # gcd(96, 256, 384, 4096): the width divisor must divide it


def _out(size: int, k: int, stride: int, pad: int) -> int:
    return (size + 2 * pad - k) // stride + 1


def _alexnet_spatial(resolution: int) -> int:
    """The side after the last pool; <= 0 when some conv or pool output would be empty."""
    s = resolution
    for _, k, stride, pad, pool in _ALEXNET_CONVS:
        if s + 2 * pad < k:
            return 0
        s = _out(s, k, stride, pad)
        if pool:
            if s < 3:
                return 0
            s = _out(s, 3, 2, 0)
    return s


def _alexnet_min_resolution() -> int:
    r = 1
    while _alexnet_spatial(r) < 1:
        r += 1
    return r


ALEXNET_MIN_RESOLUTION: int = _alexnet_min_resolution()


class AlexNet(ImageNetwork):
    """Keras-style AlexNet: 5 convolutions + ReLU, 3 max-pools, 3 dense layers with dropout."""

    width_base = _ALEXNET_WIDTH_BASE
    channels_text = "every layer's channels (96, 256, 384, 4096)"
    min_resolution = ALEXNET_MIN_RESOLUTION
    downsampling_text = "(conv 11x11/4 and three 3x3/2 max-pools)"

    def __init__(self) -> None:
        super().__init__()
        self.name = "alexnet"
        self.summary = "AlexNet (Keras variant): 5 conv + 3 max-pool, 2 x dense 4096 + dropout"

    def sizes(self, size_set: str) -> list[SizeSpec]:
        self._size_set(size_set)
        if size_set == "quick":
            return [
                SizeSpec(
                    {"resolution": ALEXNET_MIN_RESOLUTION, "classes": 10, "width": 8},
                    "quick: AlexNet at 1/8 width (channels 12-32-48-48-32, dense 512), "
                    f"{ALEXNET_MIN_RESOLUTION}x{ALEXNET_MIN_RESOLUTION}",
                )
            ]
        return [
            SizeSpec(
                {"resolution": 224, "classes": 1000, "width": 1},
                "AlexNet (Keras variant), ImageNet 224x224, 1000 classes",
            )
        ]

    def _graph(self, g: _Graph, params: Params, x: str) -> None:
        w = params["width"]
        cin, side = 3, params["resolution"]
        pools = 0
        for i, (c, k, stride, pad, pool) in enumerate(_ALEXNET_CONVS, start=1):
            cout = c // w
            x = g.conv(f"conv{i}", x, cin, cout, k, stride, pad, bias=True)
            x = g.node("Relu", [x], f"relu{i}")
            side = _out(side, k, stride, pad)
            if pool:
                pools += 1
                x = g.maxpool(f"pool{pools}", x, 3, 2)
                side = _out(side, 3, 2, 0)
            cin = cout
        x = g.node("Flatten", [x], "flatten", axis=1)
        dense = _ALEXNET_DENSE // w
        ratio = g.const("dropout_ratio", 0.5, np.float32)
        fin = cin * side * side
        for i in (1, 2):
            x = g.gemm(f"fc{i}", x, fin, dense, relu_next=True)
            x = g.node("Relu", [x], f"fc{i}.relu")
            x = g.node("Dropout", [x, ratio], f"fc{i}.dropout")
            fin = dense
        g.gemm("head", x, fin, params["classes"], relu_next=False, output=_OUTPUT)


# ----------------------------------------------------------------------------------------------
# ResNet v1.5 (torchvision)
# ----------------------------------------------------------------------------------------------

_RESNET_MIN_RESOLUTION = 32  # total downsampling: conv1 /2, max-pool /2, three stages /2
_RESNET_BASE = 64
# The last batch norm of every residual branch starts at this fraction of the others' scale, so
# each block starts near the identity (timm's zero_init_last, Goyal et al. 2017; not zero, so the
# logit checks still see every branch). At ~1 the quick bottleneck ResNets' gradients exploded
# at initialisation (ResNet-101: global norm 6e3-1.5e4, 10-12.5 at 0.1), the first SGD step
# blew the weights up and fp16 training overflowed after a machine-dependent number of steps
# (issue 20, docs/studies/mixed-precision-stability.md).
RESIDUAL_BN_GAIN = 0.1


class ResNet(ImageNetwork):
    """torchvision-style ResNet v1.5 (stride on the 3x3 convolution of a bottleneck)."""

    width_base = _RESNET_BASE
    channels_text = f"the base width {_RESNET_BASE}"
    min_resolution = _RESNET_MIN_RESOLUTION
    downsampling_text = "by 32"

    def __init__(self, depth: int, blocks: tuple[int, int, int, int], bottleneck: bool) -> None:
        super().__init__()
        self.name = f"resnet{depth}"
        self.depth = depth
        self.blocks = blocks
        self.bottleneck = bottleneck
        kind = "bottleneck" if bottleneck else "basic"
        self.summary = (
            f"ResNet-{depth} v1.5 (torchvision): {kind} blocks {list(blocks)}, "
            "BatchNorm, global average pool"
        )

    def sizes(self, size_set: str) -> list[SizeSpec]:
        self._size_set(size_set)
        if size_set == "quick":
            return [
                SizeSpec(
                    {"resolution": 32, "classes": 10, "width": 4},
                    f"quick: ResNet-{self.depth} at 1/4 width (16 base channels), 32x32",
                )
            ]
        return [
            SizeSpec(
                {"resolution": 224, "classes": 1000, "width": 1},
                f"ResNet-{self.depth} (torchvision), ImageNet 224x224, 1000 classes",
            )
        ]

    def _graph(self, g: _Graph, params: Params, x: str) -> None:
        base = _RESNET_BASE // params["width"]
        x = g.conv("conv1", x, 3, base, 7, stride=2, pad=3)
        x = g.batchnorm("bn1", x, base)
        x = g.node("Relu", [x], "relu")
        x = g.maxpool("maxpool", x, 3, 2, 1)
        cin = base
        for stage, n in enumerate(self.blocks, start=1):
            planes = base * 2 ** (stage - 1)
            for i in range(n):
                stride = 2 if stage > 1 and i == 0 else 1
                x, cin = self._block(g, f"layer{stage}.{i}", x, cin, planes, stride)
        x = g.node("GlobalAveragePool", [x], "avgpool")
        x = g.node("Flatten", [x], "flatten", axis=1)
        g.gemm("fc", x, cin, params["classes"], relu_next=False, output=_OUTPUT)

    def _block(
        self, g: _Graph, p: str, x: str, cin: int, planes: int, stride: int
    ) -> tuple[str, int]:
        if self.bottleneck:
            cout = planes * 4
            y = g.conv(f"{p}.conv1", x, cin, planes, 1)
            y = g.node("Relu", [g.batchnorm(f"{p}.bn1", y, planes)], f"{p}.relu1")
            y = g.conv(f"{p}.conv2", y, planes, planes, 3, stride=stride, pad=1)
            y = g.node("Relu", [g.batchnorm(f"{p}.bn2", y, planes)], f"{p}.relu2")
            # The last conv of a branch and the shortcut conv feed the residual Add, not a
            # ReLU: Glorot-uniform keeps the sum from doubling its variance block after block.
            y = g.conv(f"{p}.conv3", y, planes, cout, 1, relu_next=False)
            y = g.batchnorm(f"{p}.bn3", y, cout, gain=RESIDUAL_BN_GAIN)
        else:
            cout = planes
            y = g.conv(f"{p}.conv1", x, cin, planes, 3, stride=stride, pad=1)
            y = g.node("Relu", [g.batchnorm(f"{p}.bn1", y, planes)], f"{p}.relu1")
            y = g.conv(f"{p}.conv2", y, planes, planes, 3, pad=1, relu_next=False)
            y = g.batchnorm(f"{p}.bn2", y, planes, gain=RESIDUAL_BN_GAIN)
        shortcut = x
        if stride != 1 or cin != cout:
            shortcut = g.conv(f"{p}.downsample.0", x, cin, cout, 1, stride=stride, relu_next=False)
            shortcut = g.batchnorm(f"{p}.downsample.1", shortcut, cout)
        y = g.node("Add", [y, shortcut], f"{p}.add")
        return g.node("Relu", [y], f"{p}.relu"), cout


# ----------------------------------------------------------------------------------------------
# Transformer encoder (BERT-style)
# ----------------------------------------------------------------------------------------------

_TRANSFORMER_CONFIGS: dict[str, dict[str, int]] = {
    "small": {"layers": 2, "hidden": 128, "heads": 2, "ffn": 512, "vocab": 1000},
    "base": {"layers": 12, "hidden": 768, "heads": 12, "ffn": 3072, "vocab": 30522},  # BERT-base
}


class Transformer(NetworkDef):
    """BERT-style encoder classifier on int64 token ids; logits from the first token."""

    def __init__(self) -> None:
        self.name = "transformer"
        self.summary = (
            "BERT-style Transformer encoder: token + position embedding, L x (self-attention, "
            "GELU FFN, post-LayerNorm), first-token classifier"
        )
        # layers/hidden/heads/ffn/vocab default to the chosen config's values.
        self.fields = {
            "config": Field(str, choices=tuple(_TRANSFORMER_CONFIGS), default="base"),
            "seq": Field(int, default=128),
            "classes": Field(int, default=2),
            "vocab": Field(int),
            "layers": Field(int),
            "hidden": Field(int),
            "heads": Field(int),
            "ffn": Field(int),
        }

    def sizes(self, size_set: str) -> list[SizeSpec]:
        self._size_set(size_set)
        if size_set == "quick":
            return [
                SizeSpec(
                    {"config": "small", "seq": 32, "classes": 2},
                    "quick: small encoder (2 layers, hidden 128, 2 heads), sequence 32",
                )
            ]
        return [
            SizeSpec({"config": "base", "seq": 128, "classes": 2}, "BERT-base, sequence 128"),
            SizeSpec({"config": "base", "seq": 512, "classes": 2}, "BERT-base, sequence 512"),
            SizeSpec(
                {"config": "small", "seq": 128, "classes": 2},
                "small BERT-style encoder (2 layers, hidden 128, 2 heads), sequence 128",
            ),
        ]

    def _derived(self, params: Params) -> Params:
        return {**_TRANSFORMER_CONFIGS[params["config"]], **params}

    def _check(self, params: Params) -> None:
        if params["hidden"] % params["heads"]:
            raise ConfigError(
                f"transformer.heads: {params['heads']} heads do not divide hidden "
                f"{params['hidden']}; choose heads dividing hidden (head_dim = hidden / heads)"
            )

    def input_spec(self, params: Mapping[str, Any]) -> InputSpec:
        p = self.validate(params)
        return InputSpec("input_ids", (p["seq"],), "int64", high=p["vocab"])

    def _graph(self, g: _Graph, params: Params, x: str) -> None:
        seq, hidden, heads, ffn = params["seq"], params["hidden"], params["heads"], params["ffn"]
        vocab, head_dim = params["vocab"], params["hidden"] // params["heads"]
        emb = g.glorot_uniform("embeddings.word_embeddings.weight", (vocab, hidden), vocab, hidden)
        pos = g.glorot_uniform("embeddings.position_embeddings.weight", (seq, hidden), seq, hidden)
        h = g.node("Gather", [emb, x], "embeddings.word_embeddings", axis=0)
        h = g.node("Add", [h, pos], "embeddings.add_position")
        h = g.layernorm("embeddings.LayerNorm", h, hidden)

        split_shape = g.const("shape_heads", [0, 0, heads, head_dim], np.int64)
        merge_shape = g.const("shape_hidden", [0, 0, hidden], np.int64)
        scale = g.const("attention_scale", 1.0 / math.sqrt(head_dim), np.float32)
        sqrt2 = g.const("sqrt2", math.sqrt(2.0), np.float32)
        one = g.const("one", 1.0, np.float32)
        half = g.const("half", 0.5, np.float32)

        for i in range(params["layers"]):
            p = f"encoder.layer.{i}"
            a = f"{p}.attention.self"

            def heads_of(t: str, kind: str, perm: list[int], a: str = a) -> str:
                t = g.node("Reshape", [t, split_shape], f"{a}.{kind}.split_heads")
                return g.node("Transpose", [t], f"{a}.{kind}.transpose", perm=perm)

            q = heads_of(g.dense(f"{a}.query", h, hidden, hidden), "query", [0, 2, 1, 3])
            k = heads_of(g.dense(f"{a}.key", h, hidden, hidden), "key", [0, 2, 3, 1])  # K^T
            v = heads_of(g.dense(f"{a}.value", h, hidden, hidden), "value", [0, 2, 1, 3])
            s = g.node("MatMul", [q, k], f"{a}.scores")
            s = g.node("Mul", [s, scale], f"{a}.scale")
            s = g.node("Softmax", [s], f"{a}.softmax", axis=-1)
            c = g.node("MatMul", [s, v], f"{a}.context")
            c = g.node("Transpose", [c], f"{a}.context.transpose", perm=[0, 2, 1, 3])
            c = g.node("Reshape", [c, merge_shape], f"{a}.context.merge_heads")
            o = g.dense(f"{p}.attention.output.dense", c, hidden, hidden)
            o = g.node("Add", [o, h], f"{p}.attention.output.residual")
            h = g.layernorm(f"{p}.attention.output.LayerNorm", o, hidden)

            f = g.dense(f"{p}.intermediate.dense", h, hidden, ffn)
            e = g.node("Div", [f, sqrt2], f"{p}.intermediate.gelu.div")
            e = g.node("Erf", [e], f"{p}.intermediate.gelu.erf")
            e = g.node("Add", [e, one], f"{p}.intermediate.gelu.add")
            e = g.node("Mul", [f, e], f"{p}.intermediate.gelu.mul")
            f = g.node("Mul", [e, half], f"{p}.intermediate.gelu.half")
            f = g.dense(f"{p}.output.dense", f, ffn, hidden)
            f = g.node("Add", [f, h], f"{p}.output.residual")
            h = g.layernorm(f"{p}.output.LayerNorm", f, hidden)

        first = g.const("first_token", 0, np.int64)
        h = g.node("Gather", [h, first], "pool_first_token", axis=1)
        g.gemm("classifier", h, hidden, params["classes"], relu_next=False, output=_OUTPUT)


# ----------------------------------------------------------------------------------------------
# Registry and model checks
# ----------------------------------------------------------------------------------------------

NETWORKS: dict[str, NetworkDef] = {
    n.name: n
    for n in (
        MLP(),
        AlexNet(),
        ResNet(18, (2, 2, 2, 2), bottleneck=False),
        ResNet(50, (3, 4, 6, 3), bottleneck=True),
        ResNet(101, (3, 4, 23, 3), bottleneck=True),
        Transformer(),
    )
}


def get(name: str) -> NetworkDef:
    """The zoo network ``name``; a ConfigError lists the known names for an unknown one."""
    if name not in NETWORKS:
        raise ConfigError(f"unknown network {name!r}; choose one of: {', '.join(NETWORKS)}")
    return NETWORKS[name]


def network_names() -> list[str]:
    """The zoo's network names, in zoo order."""
    return list(NETWORKS)


def graph_ops(model: onnx.ModelProto) -> list[tuple[str, str]]:
    """``(op_type, node name)`` of every node of the main graph, in graph order."""
    return [(node.op_type, node.name) for node in model.graph.node]


def _check_structure(model: onnx.ModelProto) -> None:
    inputs = data_inputs(model.graph)
    if not inputs:
        raise ConfigError("the graph has no inputs; a network needs at least one data input")
    if not model.graph.output:
        raise ConfigError("the graph has no outputs; a network needs at least one output")
    for value in inputs:
        kind = value.type.WhichOneof("value")
        if kind != "tensor_type":
            raise ConfigError(f"input {value.name!r} is not a tensor ({kind}); use tensor inputs")
        tensor = value.type.tensor_type
        if not tensor.HasField("shape") or not tensor.shape.dim:
            raise ConfigError(
                f"input {value.name!r} has no shape; export it with a batch dimension first "
                "(symbolic, e.g. 'N', or a positive size)"
            )
        first = tensor.shape.dim[0]
        if first.HasField("dim_param") and first.dim_param:
            continue
        if first.HasField("dim_value") and first.dim_value > 0:
            continue
        raise ConfigError(
            f"input {value.name!r} has no usable batch dimension (first dim "
            f"{first.dim_value if first.HasField('dim_value') else 'unknown'}); export it with "
            "a symbolic (e.g. 'N') or positive first dimension"
        )


def _run_checker(model: onnx.ModelProto | str) -> None:
    try:
        onnx.checker.check_model(model)
    except (onnx.checker.ValidationError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(f"the ONNX checker rejects the model: {first}") from exc


def check_model(model: onnx.ModelProto) -> None:
    """Run ``onnx.checker`` and require every graph input to have a symbolic or positive first
    (batch) dimension; a ConfigError says what is wrong. Used for user-supplied files too."""
    _run_checker(model)
    _check_structure(model)


def _missing_external_data(path: str) -> list[str]:
    """The external data locations inside ``path``'s folder that its initializers name and that
    are not files there (a location outside the folder is refused whether it exists or not)."""
    from onnx.external_data_helper import ExternalDataInfo, uses_external_data

    folder = os.path.dirname(os.path.abspath(path))
    graph = onnx.load(path, load_external_data=False).graph
    names = {ExternalDataInfo(t).location for t in graph.initializer if uses_external_data(t)}
    inside = [
        n for n in names if os.path.normpath(os.path.join(folder, n)).startswith(folder + os.sep)
    ]
    return sorted(n for n in inside if not os.path.isfile(os.path.join(folder, n)))


#: the extra inputs of a transformer's export, found by name as onnxruntime's transformers
#: benchmark tool finds them (onnxruntime/python/tools/transformers/bert_test_data.py), bound to
#: what they hold for a batch without padding: (a part of the lower-case name, the value)
BOUND_INPUTS: tuple[tuple[str, str], ...] = (
    ("mask", "ones"),  # attention_mask, input_mask
    ("type_ids", "zeros"),  # token_type_ids, TF Hub's input_type_ids
    ("token_type", "zeros"),
    ("segment", "zeros"),  # segment_ids
    ("position", "positions"),  # position_ids
)


def _bound_role(name: str) -> str | None:
    return next((r for part, r in BOUND_INPUTS if part in name.lower()), None)


def parse_dims(text: str | None, where: str = "--model-dims") -> dict[str, int]:
    """``sequence=128,height=224`` as a mapping; a ConfigError naming ``where`` otherwise."""
    out: dict[str, int] = {}
    for item in [t.strip() for t in (text or "").split(",") if t.strip()]:
        name, eq, value = item.partition("=")
        if not eq or not name.strip() or not value.strip().isdigit() or int(value) < 1:
            raise ConfigError(
                f"{where}: {item!r} is not NAME=N (a dynamic dimension's name in the model and "
                "a positive size), e.g. sequence=128"
            )
        if name.strip() in out:
            raise ConfigError(
                f"{where}: {name.strip()!r} is given twice ({text!r}); give each dimension once"
            )
        out[name.strip()] = int(value)
    return out


#: the most bytes an ONNX model (one protobuf message) can hold
_PROTO_LIMIT = 2**31


def canonical_dims(dims: Mapping[str, int]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(dims.items()))


def fix_user_inputs(
    model: onnx.ModelProto, dims: Mapping[str, int], batch: int | None
) -> tuple[onnx.ModelProto, dict[str, str]]:
    """A user's model with one input to feed (the first whose name binds to nothing): its
    dynamic dimensions other than the batch (the first) set from ``dims`` (named as the file
    names them, e.g. ``sequence``), and every other input bound to a constant by its name (:data:`BOUND_INPUTS`: a transformer's
    attention mask to ones, token types to zeros, positions to 0..n-1) for ``batch`` samples
    (None: the file's fixed batch, else 1, to check the file; given, the model's batch is
    fixed to it where an input was bound). Returns the model (a copy when anything changed) and
    the bound inputs' values by name. A ConfigError names a dimension left dynamic, a name in
    ``dims`` the inputs do not have, and an input it cannot bind."""
    import copy

    inputs = data_inputs(model.graph)
    if not inputs:
        return model, {}
    # only checked (nothing to change) where no size is given and there is one input
    out = copy.deepcopy(model) if dims or len(inputs) > 1 else model
    # the input fed: the first whose name binds to nothing (an export may list its mask first)
    values = data_inputs(out.graph)
    fed = next((v for v in values if _bound_role(v.name) is None), values[0])
    extra = [v for v in values if v is not fed]
    named = {
        d.dim_param
        for value in (fed, *extra)
        for d in value.type.tensor_type.shape.dim[1:]
        if d.dim_param and not d.dim_value
    }
    unknown = sorted(set(dims) - named)
    if unknown:
        raise ConfigError(
            f"--model-dims: the model's inputs have no dynamic dimension {', '.join(unknown)} "
            f"(theirs: {', '.join(sorted(named)) or 'none'})"
        )
    for value in (fed, *extra):
        for i, d in enumerate(value.type.tensor_type.shape.dim):
            if i == 0 or d.HasField("dim_value") and d.dim_value > 0:
                continue
            if d.dim_param in dims:
                size = dims[d.dim_param]
                d.Clear()
                d.dim_value = size
                continue
            why = f"named {d.dim_param!r}" if d.dim_param else "unnamed"
            give = f"--model-dims {d.dim_param}=N" if d.dim_param else "a fixed size"
            raise ConfigError(
                f"--model: input {value.name!r}, dimension {i}, is dynamic ({why}); dlsuite "
                f"times fixed shapes: give its size with {give} (a config size's "
                f'dims = "{d.dim_param or "NAME"}=N"), or re-export the model with it fixed'
            )
    bound: dict[str, str] = {}
    n = batch
    if n is None:
        first = fed.type.tensor_type.shape.dim
        n = first[0].dim_value if first and first[0].dim_value > 0 else 1
    nodes = []
    for value in extra:
        role = _bound_role(value.name)
        t = value.type.tensor_type
        shape = [d.dim_value if d.dim_value > 0 else n for d in t.shape.dim]
        if role is None or not shape or not t.elem_type:
            raise ConfigError(
                f"--model: dlsuite feeds one input ({fed.name!r}) and binds the others by "
                f"name, and {value.name!r} names no value (an attention 'mask': ones; "
                "'type_ids', 'token_type', 'segment' ids: zeros; 'position' ids: 0..n-1); "
                "export the model with it as a constant"
            )
        dtype = helper.tensor_dtype_to_np_dtype(t.elem_type)
        size = math.prod(shape) * np.dtype(dtype).itemsize
        if size >= _PROTO_LIMIT:  # a bound input is a Constant inside the model
            given = ",".join(f"{k}={v}" for k, v in dims.items()) or "none"
            raise ConfigError(
                f"--model-dims: input {value.name!r} bound to {role} at shape {shape} would take "
                f"{size / 2**30:.3g} GiB, past the 2 GiB an ONNX model can hold (batch {n}, "
                f"--model-dims {given}); give smaller sizes"
            )
        if role == "positions":
            array = np.broadcast_to(np.arange(shape[-1]), shape).astype(dtype)
        else:
            array = (np.ones if role == "ones" else np.zeros)(shape, dtype)
        nodes.append(helper.make_node("Constant", [], [value.name], name=f"dlsuite_bound_{value.name}",
                                      value=numpy_helper.from_array(array)))  # fmt: skip
        bound[value.name] = role
        out.graph.input.remove(value)
    for node in reversed(nodes):
        out.graph.node.insert(0, node)
    if bound and batch is not None:  # bound for this batch: the model's batch is fixed now
        first = fed.type.tensor_type.shape.dim[0]
        first.Clear()
        first.dim_value = batch
    return (out, bound) if bound or dims else (model, bound)


#: float types a model may store its weights and activations in that dlsuite runs in float32:
#: the 16-bit ones exactly (every value is a float32), float64 rounded to nearest
_HALF_TYPES: dict[int, str] = {TensorProto.FLOAT16: "float16", TensorProto.BFLOAT16: "bfloat16"}
_OTHER_FLOATS: dict[int, str] = {**_HALF_TYPES, TensorProto.DOUBLE: "float64"}


def as_float32(model: onnx.ModelProto) -> tuple[onnx.ModelProto, list[str]]:
    """A model stored in float16 or bfloat16 (``model.half()`` before the export), or in
    float64 (``model.double()``), as the float32 model it computes in dlsuite: initializers,
    constants, value types and casts to such a float made float32 (exactly from 16 bits; from
    float64 rounded to nearest, and a value past float32's range to its largest, as an
    attention mask's float64 minimum, where a plain cast gives -inf and NaN logits). The
    adapters run float32 (``--dtype fp32``; fp16/bf16 are mixed precision on it, as for every
    network), so onnxruntime's reference is this model too, not the stored type's arithmetic.
    Returns the model (unchanged when every float is float32) and the stored types' names."""
    import copy

    def convert(m: onnx.ModelProto, apply: bool) -> set[str]:
        """The other float types ``m`` stores (made float32 in place with ``apply``)."""
        found: set[str] = set()

        def tensor(t: onnx.TensorProto) -> None:
            if t.data_type in _OTHER_FLOATS:
                found.add(_OTHER_FLOATS[t.data_type])
                if apply:
                    array = numpy_helper.to_array(t)
                    if array.dtype == np.float64:  # past float32's range: its largest, not inf
                        big = float(np.finfo(np.float32).max)
                        array = np.where(np.isfinite(array), np.clip(array, -big, big), array)
                    t.CopyFrom(numpy_helper.from_array(array.astype(np.float32), t.name))

        g = m.graph
        for t in g.initializer:
            tensor(t)
        for v in (*g.input, *g.output, *g.value_info):
            tt = v.type.tensor_type
            if v.type.HasField("tensor_type") and tt.elem_type in _OTHER_FLOATS:
                found.add(_OTHER_FLOATS[tt.elem_type])
                tt.elem_type = TensorProto.FLOAT if apply else tt.elem_type
        for node in g.node:
            for a in node.attribute:
                if a.type == onnx.AttributeProto.TENSOR:
                    tensor(a.t)
                elif node.op_type == "Cast" and a.name == "to" and a.i in _OTHER_FLOATS:
                    found.add(_OTHER_FLOATS[a.i])
                    a.i = TensorProto.FLOAT if apply else a.i
        return found

    if not convert(model, apply=False):  # the common case: no copy
        return model, []
    out = copy.deepcopy(model)
    return out, sorted(convert(out, apply=True))


class AsRun(NamedTuple):
    """A user's model as dlsuite runs it, and what was made of the file to run it."""

    model: onnx.ModelProto
    #: inputs other than the one fed, bound to constants by their names
    bound: dict[str, str]
    #: the 16-bit float type the file stores, run as float32 exactly (None: none)
    upcast_from: str | None
    #: "float64" where the file stores it, run rounded to float32 (None: none)
    rounded_from: str | None
    #: the BatchNormalization and Dropout nodes the file exports in training mode
    training_export: list[str]
    #: the outputs after the first and what only they need, taken out (None: one output)
    left_out: LeftOut | None


def as_run(model: onnx.ModelProto, dims: Mapping[str, int], batch: int | None) -> AsRun:
    """A user's model as dlsuite runs it (``--model``, ``dlsuite inspect``): its inputs fixed
    (:func:`fix_user_inputs`), made float32 (:func:`as_float32`), an export in training mode
    as its inference twin (``importer.inference_form``: dlsuite sets each node's mode by the
    step it runs), and a file with several outputs as the graph to its first
    (``importer.first_output_only``)."""
    fixed, bound = fix_user_inputs(model, dims, batch)
    ran, stored = as_float32(fixed)
    ran, moded = inference_form(ran)
    ran, left_out = first_output_only(ran)
    upcast = "/".join(t for t in stored if t != "float64") or None
    return AsRun(ran, bound, upcast, "float64" if "float64" in stored else None, moded, left_out)


def _parses_without_external_data(path: str) -> bool:
    """Whether ``path`` is a whole ONNX model that stores tensors in external data files."""
    from onnx.external_data_helper import uses_external_data

    try:
        graph = onnx.load(path, load_external_data=False).graph
    except (DecodeError, ValueError, OSError, RuntimeError):
        return False
    return any(uses_external_data(t) for t in graph.initializer)


def load_user_model(path: str, field: str = "--model") -> onnx.ModelProto:
    """Load a user's ``.onnx`` file (``--model``) with its external data.

    A ConfigError naming ``field`` (what the user typed the path after: ``--model``, ``--sizes
    from:``, nothing for ``dlsuite inspect``'s argument) and the path is raised for a missing file, a file that is
    not ONNX or is truncated, a graph without inputs or outputs, or one the checker rejects.
    Ops are not checked here: adapters report the ops they cannot run as skips.
    """
    where = f"{field} {path}" if field and not field.endswith(":") else f"{field}{path}"
    if not os.path.exists(path):
        raise ConfigError(f"{where}: no such file; pass the path of an .onnx file")
    if not os.path.isfile(path):
        raise ConfigError(f"{where}: not a file; pass the path of an .onnx file")
    try:
        model = onnx.load(path)
    except onnx.checker.ValidationError as exc:  # external data missing, or outside the folder
        missing = _missing_external_data(path)
        if missing:
            raise ConfigError(
                f"{where}: its external data file {missing[0]!r} is not there (the model names "
                f"{len(missing)} missing, looked for in {os.path.dirname(os.path.abspath(path))}); "
                "copy the data files the export wrote beside the .onnx file"
            ) from None
        raise ConfigError(
            f"{where}: its external data is refused ({exc}); keep every external data file "
            "in the model's folder (or below it)"
        ) from None
    except (DecodeError, ValueError, OSError, RuntimeError) as exc:
        if _parses_without_external_data(path):  # the .onnx is whole: its data file is not
            raise ConfigError(
                f"{where}: its external data cannot be read ({exc}); the .onnx file is whole, "
                "so a data file beside it is truncated or from another export: copy the data "
                "files the export wrote beside the .onnx file again"
            ) from None
        raise ConfigError(
            f"{where}: not an ONNX model or truncated (cannot parse it: {exc}); "
            "pass a complete .onnx file"
        ) from exc
    if model.ir_version <= 0 or not model.HasField("graph") or not model.opset_import:
        raise ConfigError(
            f"{where}: not an ONNX model or truncated (no IR version, graph or opset); "
            "pass a complete .onnx file"
        )
    try:
        _check_structure(model)
        # The checker reads the file itself so models over 2 GB (external data) work too.
        _run_checker(path)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from exc
    return model
