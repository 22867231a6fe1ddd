"""One ONNX importer for every framework: the graph is read, checked, specialised to the input
shape the task runs, folded and put in order here; an adapter supplies only **op kernels**
(functions on its own tensors, one per ONNX op) and its training plumbing.

What the importer owns, so that no adapter repeats it:

* **Initializers**: :class:`ImportedGraph` sorts them once. Float tensors with more than one
  element are trainable parameters, except BatchNormalization's running mean and variance
  (training state: updated in training mode, never differentiated); everything else (scalars,
  integer tensors: shapes, indices, masks) is a constant.
* **Shapes and constant folding**, per concrete input shape (:meth:`ImportedGraph.plan`). Every
  task runs a fixed batch, so the graph is specialised to it: the batch dimension of a
  dynamic-batch export becomes that number, ONNX's own shape inference
  (``onnx.shape_inference.infer_node_outputs``, node by node in topological order) gives every
  value a static shape, ``Shape``/``Size`` of a value with a static shape become constants, and
  every node whose inputs are all constants is evaluated once, on the host, by ONNX's reference
  implementation (``onnx.reference``). The shape arithmetic that exporters emit for a dynamic
  batch (``Shape -> Gather -> Unsqueeze -> Concat -> Reshape``, ``ConstantOfShape``, ``Range``,
  ``Expand`` of masks, ...) disappears, and a framework whose graphs need static shapes
  (Keras' functional models, MXNet's symbols) never sees a computed shape. A network called
  at another batch gets its own plan (cached per shape). Parameters are never folded: a node
  reading a trainable weight (a ``Transpose`` of a Linear weight in a dynamo export) stays, so
  the gradient reaches the weight under its own name.

  Why these and not a simplifier package (onnxsim, onnxslim, onnxoptimizer): they fold weight
  transposes into new anonymous initializers and fuse BatchNormalization into Conv (training
  would lose the batch statistics and the parameters' names), onnxoptimizer folds no shape
  arithmetic at all, and each is a compiled package that must match the ``onnx`` and NumPy
  pinned in every framework environment (MXNet's holds NumPy 1.23 and onnx 1.16). ONNX's own
  shape inference and reference evaluator are in the ``onnx`` package every environment has,
  are maintained with the op specification itself, and leave what is folded to this module's
  one rule (all inputs constant, no parameter among them).
* **Attributes and static inputs**, normalised (:class:`Step`): defaults filled in, negative
  axes resolved, inputs that later opsets turned from attributes into tensors (``axes``,
  ``pads``, ``split``, ``scales``, Clip's bounds, Dropout's ratio, ...) read as Python values,
  ``auto_pad`` and pooling's ``ceil_mode`` turned into explicit padding, Resize turned into
  per-axis index and weight tables. A kernel reads ``step.attrs`` and the static shapes
  ``step.in_shapes``/``step.out_shapes``; it never parses a NodeProto.
* **Order**: :func:`run` walks the plan's steps in topological order, resolving each input to
  a computed value, a constant (converted once per plan by the adapter) or a parameter.

A node whose op has no kernel in an adapter skips the model, naming the op and the node
(:meth:`ImportedGraph.first_unmapped`), as the network level always did.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import ModelProto, NodeProto, TensorProto, helper, numpy_helper, shape_inference

from suite.errors import ConfigError, UnsupportedError
from suite.onnx.ops import CORE_OPS

Shape = tuple[int, ...]

#: inputs that later opsets moved from attributes into tensors: the importer reads them as
#: constants (after folding) and hands them to kernels as attributes under these names
STATIC_INPUTS: dict[str, dict[int, str]] = {
    "Reshape": {1: "shape"},
    "Expand": {1: "shape"},
    "Squeeze": {1: "axes"},
    "Unsqueeze": {1: "axes"},
    "Slice": {1: "starts", 2: "ends", 3: "axes", 4: "steps"},
    "Split": {1: "split"},
    "Pad": {1: "pads", 2: "constant_value", 3: "axes"},
    "Resize": {1: "roi", 2: "scales", 3: "sizes"},
    "Upsample": {1: "scales"},
    "Clip": {1: "min", 2: "max"},
    "Dropout": {1: "ratio", 2: "training_mode"},
    "Tile": {1: "repeats"},
    "Trilu": {1: "k"},
    "CumSum": {1: "axis"},
    "TopK": {1: "k"},
    **{
        op: {1: "axes"}
        for op in (
            "ReduceMean",
            "ReduceSum",
            "ReduceMax",
            "ReduceMin",
            "ReduceProd",
            "ReduceL1",
            "ReduceL2",
            "ReduceSumSquare",
            "ReduceLogSumExp",
        )
    },  # fmt: skip
}
#: ops whose outputs are never folded even with constant inputs (their value is drawn anew)
NEVER_FOLD = frozenset({"RandomNormal", "RandomUniform", "RandomNormalLike",
                        "RandomUniformLike", "Multinomial", "Bernoulli", "Dropout"})  # fmt: skip
#: ops whose constants onnxruntime folds, not onnx's reference evaluator: its GatherElements
#: (onnx 1.23) gathers with ``np.choose``, which takes at most 32 values along the axis, and
#: past that fails or keeps one value per row; transformers' embeddings (BERT, ALBERT, ELECTRA)
#: gather their ``token_type_ids`` buffer of ``max_position_embeddings`` values so
ORT_FOLDS = frozenset({"GatherElements"})
#: BatchNormalization's running statistics: training state, not parameters
RUNNING_STATS = {"BatchNormalization": (3, 4)}
#: the ONNX element types fed as floats
FLOAT_TYPES = (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16, TensorProto.DOUBLE)


def node_attributes(node: NodeProto) -> dict[str, Any]:
    """An ONNX node's attributes as Python values (the one reader: the importer's planner and
    the NumPy evaluator, suite/onnx/numpy_eval.py, use it)."""
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


#: ops whose mode an export in training mode sets, and the outputs only that mode writes
TRAINING_MODE_OPS = ("BatchNormalization", "Dropout")


def _names_read(graph: onnx.GraphProto) -> set[str]:
    """Every value a node of ``graph`` or of its subgraphs (If, Loop, Scan bodies) reads, and
    the graph's outputs."""
    read = {o.name for o in graph.output}
    for node in graph.node:
        read.update(n for n in node.input if n)
        for a in node.attribute:
            for sub in (a.g, *a.graphs) if a.type in (a.GRAPH, a.GRAPHS) else ():
                read |= _names_read(sub)
    return read


def inference_form(model: ModelProto) -> tuple[ModelProto, list[str]]:
    """A model exported in training mode (``torch.onnx.export(...,
    training=TrainingMode.TRAINING)``) as the network every other export is: its
    BatchNormalization and Dropout nodes without ``training_mode`` and without the outputs only
    that mode writes (the updated running statistics, the saved mean and variance, Dropout's
    mask), where nothing reads them. dlsuite runs every network in both modes anyway: the
    training step with batch statistics and dropout (what ``training_mode=1`` says), inference
    and the check against onnxruntime with the running statistics and no dropout, so the
    training-mode export and its inference twin are one network to it. A node whose extra
    outputs the graph reads is left as it is (the plan refuses it, naming the node). Returns
    the model (the same object when no node changes) and the names of the nodes that were in
    training mode (a Dropout's unread mask alone is dropped without counting: an inference
    export may write one)."""
    import copy

    consts = {i.name: i for i in model.graph.initializer}
    consts.update({n.output[0]: n.attribute[0].t for n in model.graph.node
                   if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value"})  # fmt: skip

    def training(node: NodeProto) -> bool:
        if node.op_type == "BatchNormalization":  # its optional outputs exist in training only
            return any(a.name == "training_mode" and a.i for a in node.attribute) or any(
                o for o in node.output[1:]
            )
        if len(node.input) < 3 or not node.input[2]:
            return False
        mode = consts.get(node.input[2])  # a computed mode counts as training
        return mode is None or bool(numpy_helper.to_array(mode).reshape(-1)[:1].all())

    def changes(node: NodeProto, read: set[str]) -> bool:
        if node.op_type not in TRAINING_MODE_OPS or node.domain not in ("", "ai.onnx"):
            return False
        extra = [o for o in node.output[1:] if o]
        return bool(extra or training(node)) and not any(o in read for o in extra)

    read = _names_read(model.graph)
    if not any(changes(n, read) for n in model.graph.node):  # the common case: no copy
        return model, []
    out = copy.deepcopy(model)
    changed, dropped = [], set()
    for index, node in enumerate(out.graph.node):
        if not changes(node, read):
            continue
        if training(node):
            changed.append(node.name or f"#{index}")
        del node.output[1:]
        kept = [a for a in node.attribute if a.name != "training_mode"]
        del node.attribute[:]
        node.attribute.extend(kept)
        if node.op_type == "Dropout" and len(node.input) > 2:
            dropped.add(node.input[2])
            ratio = node.input[1]
            del node.input[1:]
            if ratio:
                node.input.append(ratio)
    # the Constant or initializer that held a Dropout's training_mode, where it fed nothing else
    unread = dropped - _names_read(out.graph)
    for node in [n for n in out.graph.node if n.op_type == "Constant" and n.output[0] in unread]:
        out.graph.node.remove(node)
    for init in [i for i in out.graph.initializer if i.name in unread]:
        out.graph.initializer.remove(init)
    return out, changed


#: ops whose folding fails with a ValueError when a size the file holds (a Reshape's target,
#: an Expand's shape) does not fit the inputs' sizes
_SHAPED_BY_THE_FILE = frozenset({"Reshape", "Expand", "Tile", "Split", "Slice"})


@dataclass(frozen=True)
class LeftOut:
    """What :func:`first_output_only` took out of a model with several outputs."""

    outputs: list[str]
    nodes: int
    #: the trainable values (float initializers of more than one element) only they read
    trainable_values: int


def first_output_only(model: ModelProto) -> tuple[ModelProto, LeftOut | None]:
    """A model with several outputs (an auxiliary head beside the logits: GoogLeNet's and
    Inception's in training mode) as the graph from its input to its first output, the one
    dlsuite trains and checks. The other outputs, the nodes only they need and the
    initializers only those read are taken out, so no framework computes a head that gets no
    loss or holds parameters no gradient reaches (PyTorch's DDP refuses those: "Expected to
    have finished reduction in the prior iteration"). Returns the model (the same object with
    one output) and what was left out (None then)."""
    import copy

    graph = model.graph
    if len(graph.output) < 2:
        return model, None
    needed = {graph.output[0].name}
    keep = [False] * len(graph.node)
    for index in range(len(graph.node) - 1, -1, -1):  # ONNX orders nodes topologically
        node = graph.node[index]
        if any(o in needed for o in node.output if o):
            keep[index] = True
            needed.update(n for n in node.input if n)
            for a in node.attribute:  # a subgraph's reads of the outer graph
                for sub in (a.g, *a.graphs) if a.type in (a.GRAPH, a.GRAPHS) else ():
                    needed |= _names_read(sub)
    out = copy.deepcopy(model)
    g = out.graph
    kept = [n for n, k in zip(g.node, keep, strict=True) if k]
    del g.node[:]
    g.node.extend(kept)
    others = [o.name for o in g.output[1:]]
    del g.output[1:]
    dropped = [i for i in g.initializer if i.name not in needed]
    for init in dropped:
        g.initializer.remove(init)
    running = {  # batch norms' running statistics: state, not trainable
        n.input[i]
        for n, k in zip(graph.node, keep, strict=True)
        if not k
        for i in RUNNING_STATS.get(n.op_type, ())
        if len(n.input) > i
    }
    trainable = sum(
        math.prod(i.dims)
        for i in dropped
        if i.data_type in FLOAT_TYPES and math.prod(i.dims) > 1 and i.name not in running
    )
    return out, LeftOut(others, keep.count(False), int(trainable))


@dataclass(frozen=True)
class Step:
    """One node of a plan, normalised for kernels."""

    op: str
    name: str  # the node's name (or "#index" when it has none), for messages
    index: int  # position in the original graph
    #: value names of the tensor inputs, "" for an absent optional input (static inputs are
    #: left out: they are in ``attrs``)
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attrs: dict[str, Any]
    in_shapes: tuple[Shape | None, ...]
    out_shapes: tuple[Shape | None, ...]
    #: which inputs carry a gradient from a trainable parameter (filled by the plan)
    needs_grad: tuple[bool, ...] = ()

    @property
    def op_type(self) -> str:  # the NodeProto spelling, for messages shared with the level
        return self.op

    def where(self) -> str:
        return f"{self.op} node {self.name}"

    def out_shape(self, i: int = 0) -> Shape:
        shape = self.out_shapes[i]
        if shape is None:
            raise UnsupportedError(f"{self.where()}: its output shape is not known statically")
        return shape


@dataclass
class Plan:
    """The graph specialised to one input shape: steps in order, the constants they read."""

    input_name: str
    input_shape: Shape
    steps: list[Step]
    #: constant tensors read by steps as tensor inputs (folded values, constant initializers)
    constants: dict[str, np.ndarray]
    output_name: str
    output_shape: Shape | None
    #: the constants converted by an adapter (``run`` fills it once per adapter and plan)
    converted: dict[Hashable, dict[str, Any]] = field(default_factory=dict)


def data_inputs(graph: onnx.GraphProto) -> list[onnx.ValueInfoProto]:
    """The graph's inputs that no initializer fills (models before IR 4 list every initializer
    among the inputs)."""
    inits = {i.name for i in graph.initializer}
    return [i for i in graph.input if i.name not in inits]


def the_input(graph: onnx.GraphProto) -> onnx.ValueInfoProto:
    """The graph's one input that no initializer fills; a ConfigError naming them otherwise."""
    inputs = data_inputs(graph)
    if len(inputs) != 1:
        names = ", ".join(i.name for i in inputs[:4]) + (", ..." if len(inputs) > 4 else "")
        raise ConfigError(
            f"the graph has {len(inputs)} inputs ({names}); dlsuite feeds models with exactly "
            "one input: give the others values (initializers) or export them as constants"
        )
    return inputs[0]


def _dims(vi_type: onnx.TypeProto) -> list[int | None] | None:
    t = vi_type.tensor_type
    if not t.HasField("shape"):
        return None
    return [
        d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None for d in t.shape.dim
    ]


#: who writes the ops of a domain other than ONNX's standard one
_DOMAIN_HINTS = {
    "com.microsoft": " (onnxruntime's contrib ops)",
    "ai.onnx.ml": " (ONNX's classical machine-learning ops)",
    "ai.onnx.preview.training": " (ONNX's training preview)",
}


class ImportedGraph:
    """A checked ONNX model, its initializers sorted, its plans per input shape."""

    def __init__(self, model: ModelProto) -> None:
        try:
            onnx.checker.check_model(model)
        except onnx.checker.ValidationError as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ConfigError(f"the ONNX model does not pass onnx.checker: {first}") from exc
        #: the BatchNormalization and Dropout nodes an export in training mode set to it
        #: (:func:`inference_form`)
        self.training_export: list[str]
        model, self.training_export = inference_form(model)
        #: the outputs after the first, and what only they need (:func:`first_output_only`)
        self.left_out: LeftOut | None
        model, self.left_out = first_output_only(model)
        self.model = model
        graph = model.graph
        self.opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)
        inits = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
        self.nodes = _private_running_stats(list(graph.node), inits)
        running = {
            n.input[i]
            for n in self.nodes
            for i in RUNNING_STATS.get(n.op_type, ())
            if len(n.input) > i
        }
        static_uses = {
            n.input[i]
            for n in self.nodes
            for i in STATIC_INPUTS.get(n.op_type, {})
            if len(n.input) > i and n.input[i]
        }
        #: trainable: float tensors with more than one element (not running statistics, not
        #: read where a static value is expected)
        self.params: dict[str, np.ndarray] = {}
        #: BatchNormalization running statistics
        self.state: dict[str, np.ndarray] = {}
        #: everything else
        self.constants: dict[str, np.ndarray] = {}
        used = {name for n in self.nodes for name in n.input if name}
        for name, value in inits.items():
            if name not in used:  # read by no node (or replaced by a private copy above)
                continue
            if value.dtype.kind == "f" and name in running:
                self.state[name] = value
            elif value.dtype.kind == "f" and value.size > 1 and name not in static_uses:
                self.params[name] = value
            else:
                self.constants[name] = value
        fed = the_input(graph)
        self.input_name = fed.name
        self.input_type = fed.type.tensor_type.elem_type
        self.input_dims = _dims(fed.type) or []
        self.output_name = graph.output[0].name
        self._plans: dict[Shape, Plan] = {}

    # -- the input --------------------------------------------------------------------------
    @property
    def fixed_batch(self) -> int | None:
        """The batch the model was exported with, or None when its batch is dynamic."""
        return self.input_dims[0] if self.input_dims and self.input_dims[0] else None

    @property
    def float_input(self) -> bool:
        return self.input_type in FLOAT_TYPES

    def input_shape(self, batch: int) -> Shape:
        """The input's shape for ``batch`` samples (a fixed batch wins; other dimensions must
        be static)."""
        rest = self.input_dims[1:]
        if any(d is None for d in rest):
            raise ConfigError(
                f"input {self.input_name!r} has shape {self.input_dims}; every dimension except "
                "the batch must be a fixed positive size"
            )
        return (self.fixed_batch or batch, *(int(d) for d in rest if d is not None))

    # -- plans ------------------------------------------------------------------------------
    def plan(self, input_shape: Iterable[int]) -> Plan:
        """The plan for inputs of this shape (made once per shape)."""
        shape = tuple(int(d) for d in input_shape)
        if shape not in self._plans:
            self._plans[shape] = _Planner(self, shape).make()
        return self._plans[shape]

    def first_unmapped(self, ops: frozenset[str], input_shape: Iterable[int]) -> Step | None:
        """The first step, in order, whose op is not in ``ops`` (after folding); None when an
        adapter with these kernels runs the whole graph."""
        return next((s for s in self.plan(input_shape).steps if s.op not in ops), None)


def _private_running_stats(nodes: list[NodeProto], inits: dict[str, np.ndarray]) -> list[NodeProto]:
    """Give every BatchNormalization its own running statistics.

    Exporters deduplicate equal initializers: a fresh network's running variances (ones) and
    the batch norms' scales (ones) become one tensor, read through ``Identity`` nodes. Training
    would then differentiate a running statistic, or one batch norm's statistics would update
    another's. A batch norm whose statistic is shared or read through Identity gets a private
    copy (``<node output>::running_mean``/``_var``) of the value; ``inits`` gains them, the
    returned nodes read them. Statistics a batch norm reads alone keep their names."""
    identity = {n.output[0]: n.input[0] for n in nodes if n.op_type == "Identity" and n.input}
    uses: dict[str, int] = {}
    for n in nodes:
        for name in n.input:
            uses[name] = uses.get(name, 0) + 1
    out = []
    for node in nodes:
        stats = RUNNING_STATS.get(node.op_type, ())
        if stats:
            copy = NodeProto()
            copy.CopyFrom(node)
            for i in stats:
                name = node.input[i] if len(node.input) > i else ""
                if name in inits and uses[name] == 1:
                    continue  # its own already: the name is kept
                while name in identity and name not in inits:
                    name = identity[name]
                if name not in inits:
                    continue  # computed statistics: the plan refuses them if training needs them
                private = f"{node.output[0]}::{'running_mean' if i == 3 else 'running_var'}"
                inits[private] = np.array(inits[name], copy=True)
                copy.input[i] = private
            node = copy
        out.append(node)
    return out


_GRAPHS: dict[int, tuple[ModelProto, ImportedGraph]] = {}


def import_graph(model: ModelProto) -> ImportedGraph:
    """The :class:`ImportedGraph` of ``model``, shared by the level's checks and the adapter's
    builder within a worker (the few most recent models are kept; plans are made once)."""
    held = _GRAPHS.get(id(model))
    if held is not None and held[0] is model:
        return held[1]
    graph = ImportedGraph(model)
    if len(_GRAPHS) >= 4:
        _GRAPHS.pop(next(iter(_GRAPHS)))
    _GRAPHS[id(model)] = (model, graph)
    return graph


# -- planning ------------------------------------------------------------------------------
class _Planner:
    def __init__(self, graph: ImportedGraph, input_shape: Shape) -> None:
        self.g = graph
        self.input_shape = input_shape
        dims = graph.input_dims
        if dims and len(dims) != len(input_shape):
            raise ConfigError(
                f"input {graph.input_name!r} has rank {len(dims)}; fed a rank-{len(input_shape)} batch"
            )
        for i, (want, got) in enumerate(zip(dims, input_shape, strict=False)):
            if want is not None and want != got:
                raise ConfigError(
                    f"input {graph.input_name!r} has a fixed size {want} in dimension {i}; "
                    f"fed {got} (shape {list(input_shape)})"
                )
        #: value -> constant (host) value
        self.const: dict[str, np.ndarray] = dict(graph.constants)
        #: value -> static shape (None: unknown)
        self.shapes: dict[str, Shape | None] = {}
        self.types: dict[str, onnx.TypeProto] = {}
        for name, value in {**graph.params, **graph.state, **graph.constants}.items():
            self._set_type(name, value.dtype, value.shape)
        self._set_type(
            graph.input_name, helper.tensor_dtype_to_np_dtype(graph.input_type), input_shape
        )
        self.opsets = {o.domain or "": o.version for o in graph.model.opset_import}
        self.grad: set[str] = set(graph.params)
        #: every value some node or the graph's output reads
        self.read = {n for node in graph.nodes for n in node.input if n} | {graph.output_name}

    def _set_type(self, name: str, dtype: Any, shape: Iterable[int] | None) -> None:
        elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
        dims = None if shape is None else list(shape)
        self.types[name] = helper.make_tensor_type_proto(elem, dims)
        self.shapes[name] = None if shape is None else tuple(int(d) for d in shape)

    def _infer(self, node: NodeProto) -> list[tuple[Shape | None, onnx.TypeProto | None]]:
        """Output shapes by ONNX's shape inference for this node, given its inputs' types and
        the constant ones' values."""
        try:
            schema = onnx.defs.get_schema(node.op_type, self.opsets.get(node.domain or "", 1),
                                          node.domain or "")  # fmt: skip
            types = {n: self.types[n] for n in node.input if n and n in self.types}
            if "" in node.input:  # an absent optional input: onnx 1.16 (MXNet's) wants a type
                types[""] = helper.make_tensor_type_proto(TensorProto.FLOAT, None)
            data = {n: numpy_helper.from_array(self.const[n], n)
                    for n in node.input if n and n in self.const}  # fmt: skip
            out = shape_inference.infer_node_outputs(schema, node, types, data)
        except Exception:  # noqa: BLE001 - an op inference cannot type leaves its shape unknown
            return [(None, None) for _ in node.output]
        result: list[tuple[Shape | None, onnx.TypeProto | None]] = []
        for name in node.output:
            tp = out.get(name)
            dims = _dims(tp) if tp is not None else None
            shape = tuple(d for d in dims) if dims is not None and None not in dims else None
            result.append((shape, tp))  # type: ignore[arg-type]
        return result

    def _resize_shape(self, node: NodeProto) -> Shape | None:
        """Resize's output shape from constant sizes or scales, where ONNX's inference has
        none: onnx 1.16 (MXNet's environment) refuses ``sizes`` after an absent ``scales``."""
        x = self.shapes.get(node.input[0])
        sizes = node.input[3] if len(node.input) > 3 else ""
        scales = node.input[2] if len(node.input) > 2 else ""
        if x is None or node_attributes(node).get("axes") is not None:
            return None
        if sizes and sizes in self.const:
            return tuple(int(d) for d in self.const[sizes].reshape(-1))
        if scales and scales in self.const and self.const[scales].size == len(x):
            factors = self.const[scales].reshape(-1)
            return tuple(int(math.floor(d * float(f))) for d, f in zip(x, factors, strict=True))
        return None

    def _fold(self, node: NodeProto) -> list[np.ndarray]:
        """The node's outputs from its constant inputs, by ONNX's reference evaluator at the
        graph's opsets. The node goes in a one-node model: a bare node is evaluated at the
        newest opset whatever ``opsets`` says (onnx 1.23: an opset-9 Unsqueeze with its
        ``axes`` attribute is run as Unsqueeze-13 and refused)."""
        from onnx.reference import ReferenceEvaluator

        feeds = {n: self.const[n] for n in node.input if n}
        graph = helper.make_graph(
            [node], "fold",
            [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
             for n, v in feeds.items()],
            [helper.make_empty_tensor_value_info(o) for o in node.output if o],
        )  # fmt: skip
        opsets = {"": 1, **self.opsets}
        model = helper.make_model(
            graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets.items()]
        )
        try:
            if node.op_type in ORT_FOLDS:
                raise NotImplementedError(f"{node.op_type}: folded by onnxruntime")
            values = iter(ReferenceEvaluator(model).run(None, feeds))
        except (NotImplementedError, RuntimeError):
            # the reference evaluator lacks some ops' older versions (onnx 1.23: DequantizeLinear
            # before 19, which onnxruntime's QDQ quantisation writes at opset 13); onnxruntime
            # runs every version
            import onnxruntime as ort

            model.ir_version = self.g.model.ir_version  # the user's file's, which ORT reads
            session = ort.InferenceSession(
                model.SerializeToString(), providers=["CPUExecutionProvider"]
            )
            values = iter(session.run(None, feeds))
        return [np.asarray(next(values)) if o else np.zeros(0) for o in node.output]

    def make(self) -> Plan:
        steps: list[Step] = []
        try:
            return self._make(steps)
        except UnsupportedError as exc:
            # an op no adapter maps leaves its outputs' shapes unknown where ONNX's inference
            # gives none (an LSTM's), and a later node fails on that: the op is the reason
            first = next((s for s in steps if s.op not in CORE_OPS and s.where() not in str(exc)
                          and any(o and shape is None
                                  for o, shape in zip(s.outputs, s.out_shapes, strict=True))),
                         None)  # fmt: skip
            if first is None:
                raise
            raise UnsupportedError(
                f"{unsupported_op(first.op, first.name)}: no adapter maps it, and the plan "
                f"stopped after it ({exc})"
            ) from exc

    def _make(self, steps: list[Step]) -> Plan:
        used_consts: set[str] = set()
        for index, node in enumerate(self.g.nodes):
            name = node.name or f"#{index}"
            ins = [n for n in node.input if n]
            if node.op_type == "Constant":
                (value,) = self._fold(node)
                self.const[node.output[0]] = value
                self._set_type(node.output[0], value.dtype, value.shape)
                continue
            if node.op_type in ("Shape", "Size") and self.shapes.get(node.input[0]) is not None:
                shape = self.shapes[node.input[0]]
                assert shape is not None
                a = node_attributes(node)
                if node.op_type == "Size":
                    value = np.array(math.prod(shape), np.int64)
                else:
                    start, end = a.get("start", 0), a.get("end", len(shape))
                    value = np.array(shape[start:end], np.int64)
                self.const[node.output[0]] = value
                self._set_type(node.output[0], value.dtype, value.shape)
                continue
            foldable = (
                node.op_type not in NEVER_FOLD
                and node.domain in ("", "ai.onnx")
                and all(n in self.const for n in ins)
                and not any(n in self.grad for n in ins)
            )
            if foldable:
                try:
                    values = self._fold(node)
                except Exception as exc:  # noqa: BLE001 - named in the message
                    what = (
                        f"{node.op_type} node {name}: folding its constant inputs failed "
                        f"({type(exc).__name__}: {str(exc)[:200]})"
                    )
                    if node.op_type in _SHAPED_BY_THE_FILE and isinstance(exc, ValueError):
                        # the same cause as a Reshape's own (_norm_shape_only): one message,
                        # one error the plan refuses (exit 2), not a skip per framework
                        raise FixedSizeError(f"{what}: {TRACED_SIZE}") from exc
                    raise UnsupportedError(what) from exc
                for out, value in zip(node.output, values, strict=False):
                    if out:
                        self.const[out] = value
                        self._set_type(out, value.dtype, value.shape)
                continue
            if node.domain not in ("", "ai.onnx"):
                raise UnsupportedError(
                    f"{node.op_type} node {name}: an op of domain {node.domain!r}"
                    f"{_DOMAIN_HINTS.get(node.domain, '')}, not of ONNX's standard set "
                    "(ai.onnx), the only one dlsuite's adapters map; export the model without it "
                    "(onnxruntime's graph optimisations and QOperator quantisation write "
                    "com.microsoft ops: keep the model from before them)"
                )
            inferred = self._infer(node)
            if node.op_type == "Resize" and inferred[0][0] is None:
                inferred[0] = (self._resize_shape(node), inferred[0][1])
            for out, (shape, tp) in zip(node.output, inferred, strict=True):
                if not out:
                    continue
                self.shapes[out] = shape
                if tp is not None:
                    self.types[out] = tp
            steps.append(self._step(node, index, name))
            used_consts.update(n for n in steps[-1].inputs if n in self.const)
            if any(n in self.grad for n in steps[-1].inputs):
                self.grad.update(o for o in node.output if o)
        out_name = self.g.output_name
        if out_name in self.const:
            raise UnsupportedError("the graph's output is a constant (it does not read its input)")
        return Plan(self.g.input_name, self.input_shape, steps, {n: self.const[n] for n in used_consts}, out_name,
                    self.shapes.get(out_name))  # fmt: skip

    def _read_outputs(self, node: NodeProto) -> tuple[str, ...]:
        """The node's outputs, an optional one that nothing reads left out (``""``, as ONNX
        writes an omitted output): Caffe2's exports name Dropout's mask, which no node uses,
        and a kernel need not make what no one reads."""
        try:
            schema = onnx.defs.get_schema(node.op_type, self.opsets.get(node.domain or "", 1),
                                          node.domain or "")  # fmt: skip
        except Exception:  # noqa: BLE001 - an op ONNX does not know keeps every output
            return tuple(node.output)
        optional = onnx.defs.OpSchema.FormalParameterOption.Optional
        kinds = [p.option for p in schema.outputs]
        outputs = [
            "" if i and i < len(kinds) and kinds[i] == optional and o not in self.read else o
            for i, o in enumerate(node.output)
        ]
        while len(outputs) > 1 and not outputs[-1]:
            outputs.pop()
        return tuple(outputs)

    def _step(self, node: NodeProto, index: int, name: str) -> Step:
        op = node.op_type
        attrs = node_attributes(node)
        static = STATIC_INPUTS.get(op, {})
        if op == "Pad" and self.opsets.get("", 1) < 11:
            static = {}
        tensor_inputs: list[str] = []
        for i, n in enumerate(node.input):
            if i in static:
                if not n:
                    continue
                if n not in self.const:
                    raise UnsupportedError(
                        f"{op} node {name}: input {i} ({static[i]}) is computed from the data; "
                        "only constant values are mapped there"
                    )
                attrs[static[i]] = self.const[n]
            else:
                tensor_inputs.append(n)
        while tensor_inputs and not tensor_inputs[-1]:
            tensor_inputs.pop()
        in_shapes = tuple(self.shapes.get(n) if n else None for n in tensor_inputs)
        outputs = self._read_outputs(node)
        out_shapes = tuple(self.shapes.get(n) if n else None for n in outputs)
        step = Step(op, name, index, tuple(tensor_inputs), outputs, attrs, in_shapes,
                    out_shapes,
                    tuple(n in self.grad for n in tensor_inputs))  # fmt: skip
        normalise = _NORMALISE.get(op)
        if normalise is not None:
            normalise(step, self.opsets.get("", 1))
        return step


# -- normalisation of attributes ------------------------------------------------------------
def _ints(v: Any) -> list[int]:
    return [int(x) for x in np.asarray(v).reshape(-1)]


def _axes(axes: Iterable[int], rank: int) -> list[int]:
    return sorted(int(a) % rank for a in axes)


def _need(step: Step, i: int = 0) -> Shape:
    shape = step.in_shapes[i] if i < len(step.in_shapes) else None
    if shape is None:
        raise UnsupportedError(f"{step.where()}: input {i} has no static shape")
    return shape


def _norm_window(step: Step, opset: int, kernel: Shape | None = None) -> None:
    """Conv/pool geometry: kernel, strides, dilations, explicit (begin, end) pads per spatial
    axis, auto_pad resolved with the static input shape."""
    a = step.attrs
    x = _need(step)
    spatial = x[2:]
    k = tuple(kernel if kernel is not None else _ints(a["kernel_shape"]))
    n = len(k)
    strides = _ints(a.get("strides", [1] * n))
    dil = _ints(a.get("dilations", [1] * n))
    pads = _ints(a.get("pads", [0] * (2 * n)))
    auto = a.get("auto_pad", b"NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else str(auto)
    begin, end = pads[:n], pads[n:]
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        for i in range(n):
            out = -(-spatial[i] // strides[i])
            total = max(0, (out - 1) * strides[i] + (k[i] - 1) * dil[i] + 1 - spatial[i])
            small, big = total // 2, total - total // 2
            begin[i], end[i] = (small, big) if auto == "SAME_UPPER" else (big, small)
    elif auto == "VALID":
        begin, end = [0] * n, [0] * n
    a.update(kernel_shape=list(k), strides=strides, dilations=dil,
             pads=list(zip(begin, end, strict=True)), auto_pad="NOTSET")  # fmt: skip


def _norm_conv(step: Step, opset: int) -> None:
    w = _need(step, 1)
    _norm_window(step, opset, tuple(w[2:]))
    step.attrs["group"] = int(step.attrs.get("group", 1))


def _norm_conv_transpose(step: Step, opset: int) -> None:
    a = step.attrs
    w = _need(step, 1)
    x = _need(step)
    n = len(w) - 2
    k = tuple(w[2:])
    strides = _ints(a.get("strides", [1] * n))
    dil = _ints(a.get("dilations", [1] * n))
    out_pad = _ints(a.get("output_padding", [0] * n))
    out = step.out_shape()[2:]
    # with the output size known, pads follow: total = s*(in-1) + outpad + (k-1)*d + 1 - out
    pads = _ints(a.get("pads", [0] * (2 * n)))
    begin, end = pads[:n], pads[n:]
    auto = a.get("auto_pad", b"NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else str(auto)
    if "output_shape" in a or auto != "NOTSET":
        for i in range(n):
            total = strides[i] * (x[2 + i] - 1) + out_pad[i] + (k[i] - 1) * dil[i] + 1 - out[i]
            small, big = total // 2, total - total // 2
            begin[i], end[i] = (big, small) if auto == "SAME_LOWER" else (small, big)
    a.update(kernel_shape=list(k), strides=strides, dilations=dil, output_padding=out_pad,
             pads=list(zip(begin, end, strict=True)), group=int(a.get("group", 1)))  # fmt: skip


def _norm_pool(step: Step, opset: int) -> None:
    """Explicit pads; ``ceil_mode`` becomes extra padding at the end of each axis (never read
    by max pooling: it pads with -inf; for average pooling ``divisor`` counts only the cells
    that ONNX counts)."""
    _norm_window(step, opset)
    a = step.attrs
    x = _need(step)
    out = step.out_shape()[2:]
    k, s, d = a["kernel_shape"], a["strides"], a["dilations"]
    pads = [list(p) for p in a["pads"]]
    for i, (lo, hi) in enumerate(pads):
        need = (out[i] - 1) * s[i] + (k[i] - 1) * d[i] + 1 - (x[2 + i] + lo + hi)
        pads[i][1] = hi + max(0, need)
    a["ceil_pads"] = [tuple(p) for p in pads]
    explicit = a["pads"]
    if step.op == "AveragePool":
        include = bool(a.get("count_include_pad", 0))
        ones = np.ones(x[2:], np.float64)
        if include:  # explicit pads count, the ceil extension does not
            ones = np.pad(ones, explicit, constant_values=1.0)
            extra = [(0, p[1] - e[1]) for p, e in zip(a["ceil_pads"], explicit, strict=True)]
        else:
            extra = list(a["ceil_pads"])
        ones = np.pad(ones, extra)
        divisor = _window_sum(ones, k, s, d)
        a["divisor"] = divisor.reshape((1, 1, *divisor.shape))
        a["uniform_divisor"] = (
            float(divisor.flat[0]) if np.all(divisor == divisor.flat[0]) else None
        )


def _window_sum(x: np.ndarray, k: list[int], s: list[int], d: list[int]) -> np.ndarray:
    out_shape = [(x.shape[i] - (k[i] - 1) * d[i] - 1) // s[i] + 1 for i in range(len(k))]
    total = np.zeros(out_shape)
    for offset in np.ndindex(*k):
        idx = tuple(
            slice(o * d[i], o * d[i] + s[i] * (out_shape[i] - 1) + 1, s[i])
            for i, o in enumerate(offset)
        )
        total += x[idx]
    return total


def _norm_reduce(step: Step, opset: int) -> None:
    a = step.attrs
    rank = len(_need(step))
    axes = a.get("axes")
    if axes is None or np.asarray(axes).size == 0:
        axes = [] if a.get("noop_with_empty_axes", 0) else list(range(rank))
    a["axes"] = _axes(_ints(axes), rank)
    a["keepdims"] = bool(a.get("keepdims", 1))


def _norm_axis(default: int) -> Callable[[Step, int], None]:
    def norm(step: Step, opset: int) -> None:
        shape = step.in_shapes[0]
        axis = int(step.attrs.get("axis", default))
        if shape is not None:
            axis %= max(len(shape), 1)
        step.attrs["axis"] = axis

    return norm


def _norm_softmax(step: Step, opset: int) -> None:
    """Before opset 13 (Log)Softmax normalises the input flattened from ``axis`` on: that is a
    softmax over one axis where at most one of those axes is longer than 1 (Caffe2's
    classifiers: ``[N, 1000, 1, 1]`` from axis 1), and is refused otherwise."""
    shape = _need(step)
    rank = len(shape)
    axis = int(step.attrs.get("axis", -1 if opset >= 13 else 1)) % rank
    if opset < 13:
        long = [i for i in range(axis, rank) if shape[i] > 1]
        if len(long) > 1:
            raise UnsupportedError(
                f"{step.where()}: opset {opset} {step.op} flattens from axis {axis}; re-export at opset 13 or later"
            )
        axis = long[0] if long else axis
    step.attrs["axis"] = axis


class FixedSizeError(UnsupportedError):
    """A size the file holds as a constant that the input it is run at contradicts: a property
    of the file and the sizes asked for, not of a framework (the plan refuses it, exit 2)."""


#: why a size in the file disagrees with the input's, and the fix: one text for every op
TRACED_SIZE = (
    "a size the file holds as a constant, written when the model was exported at other input "
    "sizes (its batch, its --model-dims); run it at those, or export it with those dimensions "
    "dynamic"
)


def _norm_shape_only(step: Step, opset: int) -> None:
    """Reshape, Flatten, Squeeze, Unsqueeze: the output shape is static, kernels reshape to it.
    A shape whose values cannot hold the input's is refused here, by name: a size the exporter
    wrote into the file as a constant (the sequence length it traced) that the input given
    (``--model-dims``) disagrees with; every framework failed on it with its own message."""
    shape = step.out_shape()
    given = step.in_shapes[0] if step.in_shapes else None
    if given is not None and math.prod(given) != math.prod(shape):
        raise FixedSizeError(
            f"{step.where()}: reshapes {tuple(given)} ({math.prod(given):,} values) to "
            f"{tuple(shape)} ({math.prod(shape):,}), {TRACED_SIZE}"
        )
    step.attrs["shape"] = shape


def _norm_expand(step: Step, opset: int) -> None:
    step.attrs["shape"] = step.out_shape()


def _norm_transpose(step: Step, opset: int) -> None:
    rank = len(_need(step))
    step.attrs["perm"] = _ints(step.attrs.get("perm", list(range(rank))[::-1]))


def _norm_slice(step: Step, opset: int) -> None:
    """Per-axis Python slices (start, stop, step) for every axis, clamped as ONNX says."""
    a = step.attrs
    shape = _need(step)
    rank = len(shape)
    starts, ends = _ints(a["starts"]), _ints(a["ends"])
    axes = _ints(a["axes"]) if a.get("axes") is not None else list(range(len(starts)))
    steps = _ints(a["steps"]) if a.get("steps") is not None else [1] * len(starts)
    slices: list[tuple[int, int | None, int]] = [(0, None, 1)] * rank
    for st, en, ax, sp in zip(starts, ends, axes, steps, strict=True):
        ax %= rank
        dim = shape[ax]
        st = st + dim if st < 0 else st
        en = en + dim if en < 0 else en
        if sp > 0:
            st, en = min(max(st, 0), dim), min(max(en, 0), dim)
            slices[ax] = (st, en, sp)
        else:
            st, en = min(max(st, 0), dim - 1), min(max(en, -1), dim - 1)
            slices[ax] = (st, None if en < 0 else en, sp)
    a["slices"] = slices


def _norm_split(step: Step, opset: int) -> None:
    a = step.attrs
    axis = int(a.get("axis", 0)) % len(_need(step))
    sizes = [step.out_shape(i)[axis] for i in range(len(step.outputs))]
    a["axis"], a["split"] = axis, sizes


def _norm_pad(step: Step, opset: int) -> None:
    a = step.attrs
    rank = len(_need(step))
    pads = _ints(a["pads"] if "pads" in a else a["paddings"])  # opset 1 named them paddings
    axes = _ints(a["axes"]) if a.get("axes") is not None else list(range(rank))
    n = len(axes)
    per_axis = [(0, 0)] * rank
    for i, ax in enumerate(axes):
        per_axis[ax % rank] = (pads[i], pads[i + n])
    if any(p < 0 for pair in per_axis for p in pair):
        raise UnsupportedError(f"{step.where()}: negative pads (cropping) are not mapped")
    mode = a.get("mode", b"constant")
    a["mode"] = mode.decode() if isinstance(mode, bytes) else str(mode)
    cv = a.get("constant_value", a.get("value"))  # an input from opset 11, before an attribute
    a["constant_value"] = (
        float(np.asarray(cv).reshape(-1)[0]) if cv is not None and np.size(cv) else 0.0
    )
    a["pads"] = per_axis


def _norm_clip(step: Step, opset: int) -> None:
    a = step.attrs
    for key in ("min", "max"):
        v = a.get(key)
        a[key] = None if v is None else float(np.asarray(v).reshape(()))


def _norm_dropout(step: Step, opset: int) -> None:
    a = step.attrs
    a["ratio"] = float(np.asarray(a.get("ratio", 0.5)).reshape(()))
    if len([o for o in step.outputs if o]) > 1:  # an unread one is gone (inference_form)
        raise UnsupportedError(f"{step.where()}: the mask output, read by the graph, is not mapped")


def _norm_gemm(step: Step, opset: int) -> None:
    a = step.attrs
    a.update(alpha=float(a.get("alpha", 1.0)), beta=float(a.get("beta", 1.0)),
             transA=bool(a.get("transA", 0)), transB=bool(a.get("transB", 0)))  # fmt: skip


def _norm_batchnorm(step: Step, opset: int) -> None:
    a = step.attrs
    a.update(epsilon=float(a.get("epsilon", 1e-5)), momentum=float(a.get("momentum", 0.9)))
    if len([o for o in step.outputs if o]) > 1:  # unread ones are gone (inference_form)
        raise UnsupportedError(
            f"{step.where()}: training_mode=1 with its running statistics read by the graph is "
            "not mapped (dlsuite keeps each batch norm's running statistics itself)"
            if a.get("training_mode", 0)
            else f"{step.where()}: the mean and variance outputs, read by the graph, are not mapped"
        )
    if not a.get("spatial", 1):  # opsets 1-8
        raise UnsupportedError(
            f"{step.where()}: spatial=0 (statistics per activation, not per channel) is not mapped"
        )


def _norm_layernorm(step: Step, opset: int) -> None:
    a = step.attrs
    rank = len(_need(step))
    a["axis"] = int(a.get("axis", -1)) % rank
    a["epsilon"] = float(a.get("epsilon", 1e-5))
    if len([o for o in step.outputs if o]) > 1:
        raise UnsupportedError(f"{step.where()}: the mean/inv-std outputs are not mapped")


def _norm_cast(step: Step, opset: int) -> None:
    to = int(step.attrs["to"])
    step.attrs["dtype"] = np.dtype(helper.tensor_dtype_to_np_dtype(to)).name


def _norm_resize(step: Step, opset: int) -> None:
    """Resize (and Upsample) as per-axis tables: for each axis whose size changes, the source
    indices (``nearest``) or the two source indices and their weights (``linear``), computed
    here with the ONNX coordinate transformation. Kernels gather and blend along each axis."""
    a = step.attrs
    x = _need(step)
    out = step.out_shape()
    mode = a.get("mode", b"nearest")
    mode = mode.decode() if isinstance(mode, bytes) else str(mode)
    ctm = a.get(
        "coordinate_transformation_mode", b"half_pixel" if step.op == "Resize" else b"asymmetric"
    )
    ctm = ctm.decode() if isinstance(ctm, bytes) else str(ctm)
    nearest = a.get("nearest_mode", b"round_prefer_floor")
    nearest = nearest.decode() if isinstance(nearest, bytes) else str(nearest)
    if step.op == "Upsample" or opset < 11:  # Resize-10 is Upsample's: neither attribute yet,
        ctm, nearest = "asymmetric", "floor"  # the source index x / scale, rounded down
    if mode not in ("nearest", "linear"):
        raise UnsupportedError(f"{step.where()}: mode {mode!r} is not mapped (nearest, linear)")
    if (
        a.get("antialias", 0)
        and mode == "linear"
        and any(o < i for o, i in zip(out, x, strict=True))
    ):
        raise UnsupportedError(f"{step.where()}: antialiased downsampling is not mapped")
    scales_given = a.get("scales")
    tables: list[tuple[int, Any]] = []
    for axis, (n_in, n_out) in enumerate(zip(x, out, strict=True)):
        if n_in == n_out and ctm != "tf_crop_and_resize":
            continue
        if scales_given is not None and np.size(scales_given) == len(x):
            scale = float(np.asarray(scales_given).reshape(-1)[axis])
        else:
            scale = n_out / n_in
        o = np.arange(n_out, dtype=np.float64)
        if ctm == "half_pixel":
            src = (o + 0.5) / scale - 0.5
        elif ctm == "pytorch_half_pixel":
            src = (o + 0.5) / scale - 0.5 if n_out > 1 else np.zeros_like(o)
        elif ctm == "align_corners":
            src = o * (n_in - 1) / (n_out - 1) if n_out > 1 else np.zeros_like(o)
        elif ctm == "asymmetric":
            src = o / scale
        elif ctm == "half_pixel_symmetric":
            adj = n_out / (scale * n_in)
            center = n_in / 2 * (1 - adj)
            src = center + (o + 0.5) / scale - 0.5
        else:
            raise UnsupportedError(
                f"{step.where()}: coordinate_transformation_mode {ctm!r} is not mapped"
            )
        if mode == "nearest":
            if nearest == "round_prefer_floor":
                idx = np.where(src - np.floor(src) == 0.5, np.floor(src), np.round(src))
            elif nearest == "round_prefer_ceil":
                idx = np.where(src - np.floor(src) == 0.5, np.ceil(src), np.round(src))
            elif nearest == "floor":
                idx = np.floor(src)
            else:
                idx = np.ceil(src)
            tables.append((axis, np.clip(idx, 0, n_in - 1).astype(np.int64)))
        else:
            src = np.clip(src, 0, n_in - 1)
            lo = np.floor(src).astype(np.int64)
            hi = np.minimum(lo + 1, n_in - 1)
            w_hi = src - lo
            tables.append((axis, (lo, hi, 1.0 - w_hi, w_hi)))
    a["mode"], a["tables"] = mode, tables


def _norm_concat(step: Step, opset: int) -> None:
    shape = next((s for s in step.in_shapes if s is not None), None)
    axis = int(step.attrs["axis"])
    step.attrs["axis"] = axis % len(shape) if shape is not None else axis


def _norm_einsum(step: Step, opset: int) -> None:
    eq = step.attrs["equation"]
    step.attrs["equation"] = (eq.decode() if isinstance(eq, bytes) else str(eq)).replace(" ", "")


def _norm_instancenorm(step: Step, opset: int) -> None:
    step.attrs["epsilon"] = float(step.attrs.get("epsilon", 1e-5))


def _norm_legacy_broadcast(step: Step, opset: int) -> None:
    """Before opset 7 a binary op broadcast its second input only with ``broadcast=1``, aligned
    at ``axis`` (Caffe2's ``Add(x, bias, broadcast=1, axis=1)``), not at the trailing axes as
    NumPy does: where the two differ the node is refused (onnxruntime runs neither)."""
    a = step.attrs
    if opset >= 7 or not a.get("broadcast") or len(step.in_shapes) != 2:
        return
    ra, b = len(_need(step, 0)), _need(step, 1)
    rb = len(b)
    axis = int(a.get("axis", ra - rb)) % max(ra, 1)
    if axis != ra - rb and any(d != 1 for d in b):  # a scalar or ones broadcast either way
        raise UnsupportedError(
            f"{step.where()}: opset {opset} broadcast of a rank-{rb} input from axis {axis} "
            f"(aligned at the front, NumPy aligns at the back); re-export at opset 7 or later"
        )


def _norm_lrn(step: Step, opset: int) -> None:
    """LRN: ``y = x / (bias + alpha / size * s) ** beta``, ``s`` the sum of the squares over
    ``size`` channels, ``lo`` = floor((size-1)/2) before the channel and ``hi`` after it
    (ONNX's definition; Caffe's, AlexNet's and GoogLeNet's at an odd size)."""
    a = step.attrs
    if len(_need(step)) < 3:
        raise UnsupportedError(f"{step.where()}: LRN needs (N, C, D1, ...) input")
    size = int(a["size"])
    if size < 1:
        raise UnsupportedError(f"{step.where()}: LRN size {size} (at least 1)")
    lo = (size - 1) // 2
    a.update(alpha=float(a.get("alpha", 1e-4)), beta=float(a.get("beta", 0.75)),
             bias=float(a.get("bias", 1.0)), size=size, lo=lo, hi=size - 1 - lo)  # fmt: skip


def _norm_gather(step: Step, opset: int) -> None:
    shape = _need(step)
    step.attrs["axis"] = int(step.attrs.get("axis", 0)) % len(shape)


def _norm_hard_sigmoid(step: Step, opset: int) -> None:
    a = step.attrs
    a["alpha"], a["beta"] = float(a.get("alpha", 0.2)), float(a.get("beta", 0.5))


def _norm_gelu(step: Step, opset: int) -> None:
    approx = step.attrs.get("approximate", b"none")
    step.attrs["approximate"] = approx.decode() if isinstance(approx, bytes) else str(approx)


def _norm_leaky(step: Step, opset: int) -> None:
    step.attrs["alpha"] = float(step.attrs.get("alpha", 0.01))


def _norm_elu(step: Step, opset: int) -> None:
    """Elu, and Selu (``gamma * elu(x, alpha)``, its defaults the paper's constants)."""
    a = step.attrs
    if step.op == "Selu":
        a.update(alpha=float(a.get("alpha", 1.67326319217681884765625)),
                 gamma=float(a.get("gamma", 1.05070102214813232421875)))  # fmt: skip
    else:
        a.update(alpha=float(a.get("alpha", 1.0)), gamma=1.0)


def _norm_prelu(step: Step, opset: int) -> None:
    """PRelu's slope in the shape it broadcasts in (``slope_shape``): before opset 7 a slope of
    C values is per channel (axis 1), from opset 7 NumPy's rule (aligned at the back)."""
    x, slope = _need(step, 0), _need(step, 1)
    per_channel = opset < 7 and len(slope) == 1 and len(x) > 2 and slope[0] == x[1] > 1
    step.attrs["slope_shape"] = (x[1],) + (1,) * (len(x) - 2) if per_channel else tuple(slope)


_NORMALISE: dict[str, Callable[[Step, int], None]] = {
    "Conv": _norm_conv,
    "ConvTranspose": _norm_conv_transpose,
    "MaxPool": _norm_pool,
    "AveragePool": _norm_pool,
    "Reshape": _norm_shape_only,
    "Flatten": _norm_shape_only,
    "Squeeze": _norm_shape_only,
    "Unsqueeze": _norm_shape_only,
    "Expand": _norm_expand,
    "Transpose": _norm_transpose,
    "Slice": _norm_slice,
    "Split": _norm_split,
    "Pad": _norm_pad,
    "Clip": _norm_clip,
    "Dropout": _norm_dropout,
    "Gemm": _norm_gemm,
    "BatchNormalization": _norm_batchnorm,
    "LayerNormalization": _norm_layernorm,
    "InstanceNormalization": _norm_instancenorm,
    "LRN": _norm_lrn,
    **dict.fromkeys(
        ("Add", "Sub", "Mul", "Div", "Pow", "And", "Or", "Equal", "Greater", "Less"),
        _norm_legacy_broadcast,
    ),  # fmt: skip
    "Cast": _norm_cast,
    "Resize": _norm_resize,
    "Upsample": _norm_resize,
    "Concat": _norm_concat,
    "Einsum": _norm_einsum,
    "Softmax": _norm_softmax,
    "LogSoftmax": _norm_softmax,
    "Gather": _norm_gather,
    "HardSigmoid": _norm_hard_sigmoid,
    "Gelu": _norm_gelu,
    "LeakyRelu": _norm_leaky,
    "Elu": _norm_elu,
    "Selu": _norm_elu,
    "PRelu": _norm_prelu,
    "CumSum": _norm_axis(0),
    "ArgMax": _norm_axis(0),
    **{op: _norm_reduce for op in STATIC_INPUTS if op.startswith("Reduce")},
}


# -- running a plan ------------------------------------------------------------------------
Kernel = Callable[[Any, Step, list[Any]], Any]


def run(
    plan: Plan,
    values: Mapping[str, Any],
    x: Any,
    call: Callable[[Step, list[Any]], Any],
    convert: Callable[[np.ndarray], Any],
    cache_key: Hashable = 0,
) -> Any:
    """Walk ``plan`` in order. ``values`` holds the parameters and training state (framework
    tensors, by ONNX name), ``x`` is the input; ``call(step, args)`` runs one step (an
    adapter's kernel: one output, or a tuple for several); ``convert`` makes a framework
    constant of a folded value, once per plan and ``cache_key``. Returns the graph's output."""
    consts = plan.converted.get(cache_key)
    if consts is None:
        consts = {name: convert(v) for name, v in plan.constants.items()}
        plan.converted[cache_key] = consts
    env: dict[str, Any] = dict(consts)
    env.update(values)
    env[plan.input_name] = x
    for step in plan.steps:
        args = [env[n] if n else None for n in step.inputs]
        out = call(step, args)
        if len(step.outputs) == 1:
            env[step.outputs[0]] = out
        else:
            for name, v in zip(step.outputs, out, strict=False):
                if name:
                    env[name] = v
    return env[plan.output_name]


def kernel_call(kernels: Mapping[str, Kernel], ctx: Any) -> Callable[[Step, list[Any]], Any]:
    """The plain ``call`` of :func:`run`: the adapter's kernel for the step's op."""

    def call(step: Step, args: list[Any]) -> Any:
        return kernels[step.op](ctx, step, args)

    return call


#: ONNX's ops of quantised models: QDQ exports (onnxruntime's ``quantize_static`` with
#: ``QuantFormat.QDQ``, PyTorch's quantised exports) and QOperator/integer ones
QUANTIZED_OPS = frozenset({
    "QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "QLinearConv",
    "QLinearMatMul", "MatMulInteger", "ConvInteger",
})  # fmt: skip


def unsupported_op(op: str, node: str, who: str | None = None) -> str:
    """The skip reason for a node whose op an adapter has no kernel for; an op of a quantised
    model says what it is and what to give instead (its weights' DequantizeLinear fold into
    float constants at import; its activations' quantisation is what no adapter runs)."""
    text = f"unsupported op {op} in node {node}" + (f" ({who})" if who else "")
    if op == "CumSum" and any(word in node.lower() for word in ("position", "embeddings")):
        text += (
            ": position ids computed from the token ids (transformers' RoBERTa, XLM-R, ...); "
            "export the model with position_ids as an input, which dlsuite binds to 0..n-1"
        )
    if op in QUANTIZED_OPS:
        text += (
            ": a quantised export (its activations quantised); dlsuite's adapters run float networks "
            "(fp32, tf32, bf16, fp16), so give the float model it was quantised from"
        )
    return text


def check_mapped(
    graph: ImportedGraph, ops: frozenset[str], input_shape: Iterable[int], who: str
) -> None:
    """Raise the skip reason when ``ops`` lacks a kernel the plan needs."""
    step = graph.first_unmapped(ops, input_shape)
    if step is not None:
        raise UnsupportedError(unsupported_op(step.op, step.name, who))
