"""The operators of an ONNX graph at its own shapes, as the operator level measures them.

One walk of the importer's plan (the graph specialised to a batch: shapes inferred, constants
folded) maps every convolution, GEMM/linear layer, normalisation, softmax and activation to
the operator benchmark and the parameters that measure it, deduplicated with its use count,
and says whether training runs its backward (an input that carries a gradient). Everything
the operator level has no benchmark for (ReLU, residual adds, pooling, bias adds, layout
changes, an embedding lookup, the optimizer's update) is listed with the elements it must
read and write, so a step can be costed from the device's measured memory bandwidth
(:mod:`suite.report.decompose`), marked as an estimate. Two spelled-out patterns are
recognised: exact GELU written as ``x * 0.5 * (1 + erf(x / sqrt 2))`` (BERT's export) runs as
the ``gelu`` benchmark, and attention written as ``softmax(q k^T * s) v`` books its two
batched products and its softmax under the kind ``attention``.

Used by the plan (``--sizes from:NETWORK``) and by the report (the step decomposition), so it
imports onnx and NumPy only: no framework, no level.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx

from suite.errors import ConfigError
from suite.onnx import USER_MODEL
from suite.onnx.importer import ImportedGraph, Plan, Step
from suite.onnx.inspect import step_flops

#: the kinds a step is booked under, in the order a decomposition lists them
KINDS = ("conv", "gemm", "attention", "norm", "softmax", "activation", "memory")
KIND_TITLES = {
    "conv": "convolution",
    "gemm": "GEMM / linear",
    "attention": "attention (q k^T, softmax, p v)",
    "norm": "normalisation",
    "softmax": "softmax",
    "activation": "activation (GELU)",
    "memory": "memory-bound (no benchmark)",
    "product": "product (no benchmark)",
    "update": "optimizer update (no benchmark)",
}
#: ops that only relabel a buffer (a view in every framework): nothing moves
VIEWS = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout"})
UNARY = frozenset({
    "Relu", "LeakyRelu", "Sigmoid", "Tanh", "Erf", "Exp", "Log", "Neg", "Abs", "Sqrt", "Clip",
    "Cast", "Softplus", "HardSigmoid", "HardSwish", "Reciprocal", "Floor", "Ceil", "Elu", "Selu",
})  # fmt: skip
BINARY = frozenset({"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Sum", "Where"})
#: products: compute-bound, costed (where no benchmark maps them) at the device's peak rate
PRODUCTS = frozenset({"Conv", "ConvTranspose", "Gemm", "MatMul", "Einsum"})
_SQRT2 = math.sqrt(2.0)


@dataclass
class OpUse:
    """One operator at one set of shapes, and how many times the graph uses it.

    ``benchmark`` and ``params`` name the operator-level task that measures it (forward;
    :meth:`task_params` gives each direction's); an op without a benchmark has
    ``benchmark`` None and is costed from ``elements`` (read + written, forward and
    backward) and ``flops``. ``backward``: training runs its backward pass (an input carries
    a gradient); ``input_grad``: that pass also needs the gradient of its first input (not
    for a network's first layer, whose input is data)."""

    kind: str
    op: str
    benchmark: str | None
    params: dict[str, Any]
    shape: str
    count: int = 0
    nodes: list[str] = field(default_factory=list)
    backward: bool = False
    input_grad: bool = True
    elements: dict[str, float] = field(default_factory=dict)  # direction -> elements moved
    flops: dict[str, float] = field(default_factory=dict)  # direction -> FLOPs
    note: str = ""

    def key(self) -> tuple[Any, ...]:
        return (self.kind, self.op, self.benchmark, _frozen(self.params), self.shape,
                self.backward, self.input_grad)  # fmt: skip

    def task_params(self, direction: str) -> dict[str, Any]:
        """The operator task's parameters for ``direction`` ("forward" or "backward")."""
        if self.benchmark is None:
            raise ValueError(f"{self.op} {self.shape}: no operator benchmark measures it")
        if direction == "forward":
            return dict(self.params)
        out = {**self.params, "direction": "backward"}
        if self.benchmark == "conv2d" and not self.input_grad:
            out["input_grad"] = False
        return out

    def directions(self, training: bool) -> list[str]:
        return ["forward", "backward"] if training and self.backward else ["forward"]


def _frozen(value: Any) -> Any:
    if isinstance(value, Mapping):
        return tuple(sorted((k, _frozen(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_frozen(v) for v in value)
    return value


def _size(shape: Iterable[int] | None) -> int:
    return int(math.prod(shape)) if shape is not None else 0


def _dims(shape: Iterable[int] | None) -> str:
    return "x".join(str(d) for d in shape) if shape is not None else "?"


@dataclass
class GraphOperators:
    """The operators of one graph at one batch: benchmarked uses, the rest, and what a
    training step adds (the optimizer's update over ``parameters`` values)."""

    uses: list[OpUse]
    parameters: int
    input_shape: tuple[int, ...]
    output_shape: tuple[int, ...] | None
    training: bool
    notes: list[str] = field(default_factory=list)

    def benchmarked(self) -> list[OpUse]:
        return [u for u in self.uses if u.benchmark is not None]

    def estimated(self) -> list[OpUse]:
        return [u for u in self.uses if u.benchmark is None]

    def tasks(self) -> list[tuple[str, dict[str, Any], OpUse]]:
        """(benchmark, params, use) of every operator task this graph needs (both directions
        where training runs a backward), in order of first use, deduplicated."""
        seen: set[tuple[Any, ...]] = set()
        out = []
        for use in self.benchmarked():
            assert use.benchmark is not None
            for direction in use.directions(self.training):
                params = use.task_params(direction)
                key = (use.benchmark, _frozen(params))
                if key not in seen:
                    seen.add(key)
                    out.append((use.benchmark, params, use))
        return out


class _Walk:
    """One pass over a plan's steps, booking each as an :class:`OpUse`."""

    def __init__(self, graph: ImportedGraph, plan: Plan, training: bool) -> None:
        self.graph, self.plan, self.training = graph, plan, training
        self.weights = set(graph.params) | set(graph.state) | set(plan.constants)
        self.producer: dict[str, Step] = {o: s for s in plan.steps for o in s.outputs if o}
        self.consumers: dict[str, list[Step]] = {}
        for s in plan.steps:
            for name in s.inputs:
                if name:
                    self.consumers.setdefault(name, []).append(s)
        self.uses: dict[tuple[Any, ...], OpUse] = {}
        self.grouped: dict[str, str] = {}  # step name -> the pattern that took it
        self.notes: list[str] = []

    # -- helpers ------------------------------------------------------------------------------
    def _constant(self, name: str) -> np.ndarray | None:
        if name in self.plan.constants:
            return np.asarray(self.plan.constants[name])
        value = self.graph.constants.get(name)
        return None if value is None else np.asarray(value)

    def _scalar(self, name: str, want: float, rel: float = 1e-3) -> bool:
        c = self._constant(name)
        return c is not None and c.size == 1 and abs(float(c.ravel()[0]) - want) <= rel * abs(want)

    def _only_consumer(self, step: Step, op: str) -> Step | None:
        after = self.consumers.get(step.outputs[0], [])
        return after[0] if len(after) == 1 and after[0].op == op else None

    def _grad(self, step: Step, i: int = 0) -> bool:
        return bool(step.needs_grad[i]) if len(step.needs_grad) > i else False

    def _book(self, use: OpUse, step: Step) -> None:
        use.backward = self.training and any(step.needs_grad)
        key = use.key()
        held = self.uses.setdefault(key, use)
        held.count += 1
        held.nodes.append(step.name)

    # -- patterns -----------------------------------------------------------------------------
    def find_gelu(self) -> None:
        """``x / sqrt2 -> Erf -> + 1 -> * x -> * 0.5`` (or ``x * (1/sqrt2)``) as one GELU."""
        for erf in self.plan.steps:
            if erf.op != "Erf" or erf.inputs[0] not in self.producer:
                continue
            scale = self.producer[erf.inputs[0]]
            if scale.op not in ("Div", "Mul") or len(scale.inputs) != 2:
                continue
            x, c = scale.inputs
            if scale.op == "Div" and not self._scalar(c, _SQRT2):
                continue
            if scale.op == "Mul" and not (
                self._scalar(c, 1 / _SQRT2) or self._scalar(x, 1 / _SQRT2)
            ):
                continue
            if scale.op == "Mul" and self._scalar(x, 1 / _SQRT2):
                x = c
            add = self._only_consumer(erf, "Add")
            if add is None or not any(self._scalar(n, 1.0) for n in add.inputs):
                continue
            mul = self._only_consumer(add, "Mul")
            if mul is None or x not in mul.inputs:
                continue
            half = self._only_consumer(mul, "Mul")
            if half is None or not any(self._scalar(n, 0.5) for n in half.inputs):
                continue
            shape = scale.in_shapes[0] if scale.inputs[0] == x else scale.in_shapes[1]
            if shape is None or len(shape) < 1:
                continue
            for s in (scale, erf, add, mul, half):
                self.grouped[s.name] = "gelu"
            params = {"rows": _size(shape[:-1]), "cols": int(shape[-1])}
            use = OpUse("activation", "GELU (Div, Erf, Add, Mul, Mul)", "gelu", params,
                        _dims(shape), note="exact GELU spelled as 5 elementwise ops")  # fmt: skip
            self._book(use, scale)

    def attention_steps(self) -> set[str]:
        """The products of two activations (q k^T, p v) and the softmax between them."""
        names: set[str] = set()
        for s in self.plan.steps:
            if s.op == "MatMul" and len(s.inputs) == 2 and not (set(s.inputs) & self.weights):
                names.add(s.name)
        for s in self.plan.steps:
            if s.op == "Softmax" and any(
                c.name in names for c in self.consumers.get(s.outputs[0], [])
            ):
                names.add(s.name)
        return names

    # -- one step ------------------------------------------------------------------------------
    def step(self, s: Step, attention: set[str]) -> None:
        if s.name in self.grouped:
            return
        kind_of = "attention" if s.name in attention else None
        ins = s.in_shapes
        out = s.out_shapes[0] if s.out_shapes else None
        x = ins[0] if ins else None
        if s.op == "Conv" and x is not None and len(x) == 4 and ins[1] is not None:
            self.conv(s, x, ins[1])
            return
        if s.op in ("Gemm", "MatMul") and self.product(s, kind_of):
            return
        if s.op in PRODUCTS:
            self.estimated(s, out, "product")
            self.notes.append(f"{s.name}: a {s.op} at {_dims(x)} has no operator benchmark; "
                              "costed as an estimate")  # fmt: skip
            return
        if s.op == "BatchNormalization" and x is not None and len(x) in (2, 3, 4) and self.training:
            h = x[2] if len(x) > 2 else 1
            w = x[3] if len(x) > 3 else 1
            params = {"kind": "batch", "batch": x[0], "channels": x[1], "height": h, "width": w}
            if x[0] * h * w >= 2:
                self._book(OpUse("norm", s.op, "norm", params, _dims(x)), s)
                return
        if s.op == "LayerNormalization" and x is not None and s.attrs.get("axis") == len(x) - 1:
            params = {"kind": "layer", "batch": _size(x[:-1]), "channels": x[-1]}
            self._book(OpUse("norm", s.op, "norm", params, _dims(x)), s)
            return
        if s.op == "Softmax" and x is not None and s.attrs.get("axis") == len(x) - 1:
            params = {"rows": _size(x[:-1]), "cols": x[-1]}
            self._book(OpUse(kind_of or "softmax", s.op, "softmax", params, _dims(x)), s)
            return
        if (
            s.op == "Gelu"
            and x is not None
            and s.attrs.get("approximate", "none") in ("none", b"none")
        ):
            params = {"rows": _size(x[:-1]), "cols": x[-1]}
            self._book(OpUse("activation", s.op, "gelu", params, _dims(x)), s)
            return
        self.estimated(s, out, kind_of)

    def conv(self, s: Step, x: tuple[int, ...], w: tuple[int, ...]) -> None:
        a = s.attrs
        k, st, d, pads = a["kernel_shape"], a["strides"], a["dilations"], a["pads"]
        flat = [p for pair in pads for p in pair]
        square = k[0] == k[1] and st[0] == st[1] and d[0] == d[1] and len(set(flat)) == 1
        if not square:
            self.estimated(s, s.out_shapes[0], "product")
            # the importer pairs each axis' (begin, end); the note gives ONNX's own order
            onnx_pads = [pair[0] for pair in pads] + [pair[1] for pair in pads]
            self.notes.append(
                f"{s.name}: a {_dims(k)} convolution with strides {st}, dilations {d}, pads "
                f"{onnx_pads} has no conv2d benchmark (square kernels, one stride, dilation and "
                "padding); costed as an estimate"
            )
            return
        params = {
            "batch": x[0], "in_channels": x[1], "height": x[2], "width": x[3],
            "out_channels": w[0], "kernel": k[0], "stride": st[0], "padding": flat[0],
        }  # fmt: skip
        if a.get("group", 1) != 1:
            params["groups"] = int(a["group"])
        if d[0] != 1:
            params["dilation"] = int(d[0])
        use = OpUse("conv", s.op, "conv2d", params, f"{_dims(x)} * {_dims(w)}")
        use.input_grad = self._grad(s, 0)
        self._book(use, s)
        if len(s.inputs) > 2 and s.inputs[2]:
            self.bias(s)

    def product(self, s: Step, kind_of: str | None) -> bool:
        a, b = s.in_shapes[0], s.in_shapes[1] if len(s.in_shapes) > 1 else None
        if a is None or b is None:
            return False
        if s.op == "Gemm":
            m, k = (a[1], a[0]) if s.attrs.get("transA") else (a[0], a[1])
            n = b[0] if s.attrs.get("transB") else b[1]
            params: dict[str, Any] = {"m": m, "n": n, "k": k}
        elif len(b) == 2 and len(a) >= 2:  # activations times a weight
            params = {"m": _size(a[:-1]), "n": b[1], "k": b[0]}
        elif len(a) >= 3 and len(b) == len(a) and a[:-2] == b[:-2]:  # batched products
            params = {"m": a[-2], "n": b[-1], "k": a[-1]}
            if _size(a[:-2]) != 1:
                params["batch"] = _size(a[:-2])
        else:
            return False
        use = OpUse(kind_of or "gemm", s.op, "gemm", params, f"{_dims(a)} @ {_dims(b)}")
        use.input_grad = self._grad(s, 0)
        self._book(use, s)
        if s.op == "Gemm" and len(s.inputs) > 2 and s.inputs[2]:
            self.bias(s)
        return True

    def bias(self, s: Step) -> None:
        """A bias add folded into a Conv or Gemm: a memory-bound add of its own."""
        out = s.out_shapes[0]
        n = _size(out)
        use = OpUse("memory", f"{s.op} bias", None, {}, _dims(out),
                    elements={"forward": 2.0 * n, "backward": float(n)},
                    flops={"forward": float(n), "backward": float(n)},
                    note="the bias add of a Conv or Gemm (backward: the sum of dy)")  # fmt: skip
        self._book(use, s)

    def estimated(self, s: Step, out: tuple[int, ...] | None, kind_of: str | None) -> None:
        ins = [_size(shape) for shape in s.in_shapes if shape is not None]
        n_out = _size(out)
        grads = [_size(shape) for shape, g in zip(s.in_shapes, s.needs_grad, strict=False) if g]
        fwd, bwd, note = float(sum(ins) + n_out), float(sum(ins) + n_out), ""
        if s.op in VIEWS:
            fwd, bwd, note = 0.0, 0.0, "a view: no data moves"
        elif s.op in UNARY:
            fwd, bwd = float(ins[0] + n_out), 3.0 * n_out  # bwd: read dy and x (or y), write dx
        elif s.op in BINARY:
            operands = 2 if s.op in ("Mul", "Div", "Pow") else 1
            fwd = float(sum(ins) + n_out)
            bwd = float(n_out + operands * sum(grads))
        elif s.op in ("MaxPool", "GlobalMaxPool"):
            bwd = float(2 * n_out + ins[0])  # dy and the argmax read, dx written
        elif s.op == "Gather":
            fwd = bwd = 2.0 * n_out  # rows read and written; backward: a scatter-add
        elif s.op == "BatchNormalization":
            fwd, note = float(ins[0] + n_out), "inference: a per-channel scale and shift"
        kind = kind_of or "memory"
        if kind == "product":  # a product no benchmark maps: its FLOPs, costed at the peak rate
            f = float(step_flops(s))
            flops = {"forward": f, "backward": 2.0 * f}
        else:
            flops = {"forward": float(n_out), "backward": float(n_out)}
        shape = ", ".join(_dims(x) for x in s.in_shapes)
        use = OpUse(kind, s.op, None, {}, shape, elements={"forward": fwd, "backward": bwd},
                    flops=flops, note=note)  # fmt: skip
        self._book(use, s)

    def walk(self) -> list[OpUse]:
        self.find_gelu()
        attention = self.attention_steps()
        for s in self.plan.steps:
            self.step(s, attention)
        return list(self.uses.values())


def graph_operators(model: onnx.ModelProto, batch: int, *, training: bool) -> GraphOperators:
    """The operators of ``model`` fed ``batch`` samples (a fixed batch wins), booked for a
    training step (backward passes where an input carries a gradient, batch norm in training
    mode) or for inference (batch norm as its running-statistics scale and shift)."""
    graph = ImportedGraph(model)
    shape = graph.input_shape(batch)
    plan = graph.plan(shape)
    walk = _Walk(graph, plan, training)
    uses = walk.walk()
    parameters = sum(int(v.size) for v in graph.params.values())
    out = tuple(plan.output_shape) if plan.output_shape is not None else None
    return GraphOperators(uses, parameters, tuple(shape), out, training, walk.notes)


def describe(params: Mapping[str, Any]) -> str:
    return ", ".join(f"{k} {v}" for k, v in params.items())


def load_model(network: str, params: Mapping[str, Any], seed: int = 0) -> onnx.ModelProto:
    """The ONNX model of a network-level record's parameters: a zoo network's architecture
    (``params`` without the run's fields) or a user's file (``network = "onnx"``) as the
    record's run ran it (its ``dims``, its other inputs bound for its ``batch``)."""
    from suite.onnx import zoo

    if network == USER_MODEL:
        path = params.get("model")
        if not path:
            raise ConfigError("a user model's parameters name no 'model' file")
        batch = params.get("batch")
        return zoo.as_run(
            zoo.load_user_model(str(path)), zoo.parse_dims(params.get("dims")),
            int(batch) if batch else None,
        ).model  # fmt: skip
    net = zoo.get(network)
    arch = {k: v for k, v in params.items() if k in net.fields}
    return net.build(arch, seed=seed)
