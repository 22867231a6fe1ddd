"""ONNX graph -> a hybridized Gluon ``HybridBlock`` with the same initializer values (MXNet 1.9).

Imported only by the MXNet adapter's network words (so only inside a worker, after ``setup``
imported mxnet). One ``HybridBlock`` runs the ONNX graph node by node in ``hybrid_forward`` with
MXNet's own operators (``F`` is ``mx.sym`` once hybridized, so the graph becomes one cached
MXNet graph). Initializers are sorted as the other builders sort them: float tensors with more
than one element are trainable Gluon ``Parameter``s (BatchNormalization's mean and variance are
``grad_req="null"`` auxiliary states, updated in training mode); scalars are folded into the
graph as constants, integer tensors (shapes, indices) are read at build time.

Training: softmax cross-entropy (mean over the batch), ``autograd`` backward, and a
``gluon.Trainer("sgd", momentum, wd=0)`` step. MXNet's momentum SGD is ``m = mu*m - lr*g;
w += m``, PyTorch's ``v = mu*v + g; w -= lr*v``: the same weights for a constant learning rate
(``m = -lr*v``). BatchNorm conventions agree too: MXNet's ``momentum`` is the weight of the old
running value, as ONNX's is.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon
from onnx import ModelProto, NodeProto, numpy_helper, shape_inference

from suite.adapters.base import NetworkOptions
from suite.errors import UnsupportedError
from suite.levels.network.zoo import node_attributes

#: the ONNX ops this builder maps (the zoo's op set plus a few elementwise ones)
ONNX_OPS = frozenset(
    {
        "Add", "BatchNormalization", "Conv", "Div", "Dropout", "Erf", "Flatten", "Gather",
        "Gemm", "GlobalAveragePool", "Identity", "LayerNormalization", "MatMul", "MaxPool",
        "Mul", "Relu", "Reshape", "Sigmoid", "Softmax", "Sqrt", "Sub", "Tanh", "Transpose",
    }
)  # fmt: skip


_attrs = node_attributes


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


class _Const:
    """A constant initializer (scalar float, or an integer array read at build time)."""

    def __init__(self, value: np.ndarray) -> None:
        self.value = value

    @property
    def scalar(self) -> float | None:
        if self.value.dtype.kind == "f" and self.value.size == 1:
            return float(self.value.reshape(()))
        return None


class _Builder:
    """Turns each node into a closure ``(F, env) -> value`` after checking what it uses."""

    def __init__(self, model: ModelProto) -> None:
        self.model = model
        self.opset = next(
            (o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 17
        )
        try:
            inferred = shape_inference.infer_shapes(model).graph
            infos = [*inferred.value_info, *inferred.input, *inferred.output]
        except Exception:  # noqa: BLE001 - ranks are a hint; without them the default paths run
            infos = []
        self.ranks: dict[str, int] = {}
        for vi in infos:
            t = vi.type.tensor_type
            if t.HasField("shape"):
                self.ranks[vi.name] = len(t.shape.dim)

    def where(self, node: NodeProto) -> str:
        return f"{node.op_type} node {node.name or '?'}"


class OnnxBlock(gluon.HybridBlock):
    """Executes the ONNX graph with MXNet operators; parameters are registered under keys
    derived from their ONNX names (``param_keys`` maps one to the other)."""

    def __init__(self, model: ModelProto, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        graph = model.graph
        used = {name for node in graph.node for name in node.input if name}
        running = {
            n.input[i] for n in graph.node if n.op_type == "BatchNormalization" for i in (3, 4)
        }
        self.param_keys: dict[str, str] = {}  # ONNX name -> parameter attribute key
        self.trainable: list[str] = []  # ONNX names, in initializer order
        self.values: dict[str, np.ndarray] = {}
        self.consts: dict[str, _Const] = {}
        taken: set[str] = set()
        with self.name_scope():
            for init in graph.initializer:
                value = numpy_helper.to_array(init)
                if init.name not in used:
                    continue
                if value.dtype.kind != "f" or (value.size <= 1 and init.name not in running):
                    self.consts[init.name] = _Const(value)
                    continue
                key = re.sub(r"\W", "_", init.name)
                while key in taken or key.startswith("_"):
                    key = f"p{key}"
                taken.add(key)
                is_state = init.name in running
                param = self.params.get(
                    key,
                    shape=value.shape,
                    dtype="float32",
                    grad_req="null" if is_state else "write",
                    differentiable=not is_state,
                    init=mx.init.Zero(),
                )
                setattr(self, key, param)
                self.param_keys[init.name] = key
                self.values[init.name] = value.astype(np.float32)
                if not is_state:
                    self.trainable.append(init.name)
        known = {i.name for i in graph.initializer}
        inputs = [i.name for i in graph.input if i.name not in known]
        if len(inputs) != 1:
            raise UnsupportedError(
                f"mxnet: graphs with {len(inputs)} data inputs are not mapped (one expected)"
            )
        self.input_name = inputs[0]
        self.output_name = graph.output[0].name
        b = _Builder(model)
        self.steps: list[tuple[str, Callable[[Any, dict[str, Any]], Any]]] = []
        for node in graph.node:
            if node.op_type not in _OPS:
                raise UnsupportedError(
                    f"mxnet: unsupported op {node.op_type} in node {node.name or '?'}"
                )
            if len([o for o in node.output if o]) != 1:
                raise UnsupportedError(
                    f"mxnet: {b.where(node)} has several outputs; only one is mapped"
                )
            self.steps.append((node.output[0], _OPS[node.op_type](self, b, node, _attrs(node))))

    def load_values(self) -> None:
        """Copy the ONNX initializer values into the (initialized) parameters."""
        for name, key in self.param_keys.items():
            getattr(self, key).set_data(mx.nd.array(self.values[name], dtype="float32"))

    def hybrid_forward(self, F: Any, x: Any, **params: Any) -> Any:
        env: dict[str, Any] = {self.input_name: x}
        for name, key in self.param_keys.items():
            env[name] = params[key]
        for output, step in self.steps:
            env[output] = step(F, env)
        return env[self.output_name]

    # -- helpers used by the op builders ---------------------------------------------------
    def is_const(self, name: str) -> bool:
        return name in self.consts

    def scalar(self, name: str) -> float | None:
        c = self.consts.get(name)
        return c.scalar if c is not None else None

    def int_array(self, node: NodeProto, name: str) -> np.ndarray:
        c = self.consts.get(name)
        if c is None or c.value.dtype.kind not in "iu":
            raise UnsupportedError(
                f"mxnet: {node.op_type} node {node.name or '?'}: input {name!r} must be an "
                "integer initializer (computed shapes/indices are not mapped)"
            )
        return c.value

    def tensor(self, node: NodeProto, name: str) -> Callable[[dict[str, Any]], Any]:
        """A getter for a tensor input (a parameter or a computed value, never a constant)."""
        if name in self.consts:
            raise UnsupportedError(
                f"mxnet: {node.op_type} node {node.name or '?'}: constant input {name!r} is "
                "only mapped where a scalar or a shape is expected"
            )
        return lambda env: env[name]


# -- op builders: (block, builder, node, attrs) -> (F, env) -> value ---------------------------
Step = Callable[[Any, dict[str, Any]], Any]
OpBuilder = Callable[[OnnxBlock, _Builder, NodeProto, dict[str, Any]], Step]


def _binary(kind: str) -> OpBuilder:
    broadcast = {
        "Add": "broadcast_add",
        "Sub": "broadcast_sub",
        "Mul": "broadcast_mul",
        "Div": "broadcast_div",
    }[kind]
    with_scalar: dict[str, Callable[[Any, float], Any]] = {
        "Add": lambda t, c: t + c,
        "Sub": lambda t, c: t - c,
        "Mul": lambda t, c: t * c,
        "Div": lambda t, c: t / c,
    }
    scalar_first: dict[str, Callable[[float, Any], Any]] = {
        "Add": lambda c, t: c + t,
        "Sub": lambda c, t: c - t,
        "Mul": lambda c, t: c * t,
        "Div": lambda c, t: c / t,
    }

    def build(m: OnnxBlock, b: _Builder, node: NodeProto, a: dict[str, Any]) -> Step:
        left, right = node.input[0], node.input[1]
        cl, cr = m.scalar(left), m.scalar(right)
        if cl is not None and cr is not None:
            raise UnsupportedError(f"mxnet: {b.where(node)}: both inputs are constants")
        if cr is not None:
            get = m.tensor(node, left)
            return lambda F, env: with_scalar[kind](get(env), cr)
        if cl is not None:
            get = m.tensor(node, right)
            return lambda F, env: scalar_first[kind](cl, get(env))
        gl, gr = m.tensor(node, left), m.tensor(node, right)
        return lambda F, env: getattr(F, broadcast)(gl(env), gr(env))

    return build


def _unary(fn: Callable[[Any, Any], Any]) -> OpBuilder:
    def build(m: OnnxBlock, b: _Builder, node: NodeProto, a: dict[str, Any]) -> Step:
        get = m.tensor(node, node.input[0])
        return lambda F, env: fn(F, get(env))

    return build


def _matmul(m: OnnxBlock, b: _Builder, node: NodeProto, a: dict[str, Any]) -> Step:
    left, right = node.input[0], node.input[1]
    gl, gr = m.tensor(node, left), m.tensor(node, right)
    rank_r = len(m.values[right].shape) if right in m.values else b.ranks.get(right)
    rank_l = b.ranks.get(left)
    if rank_r == 2:  # (..., k) @ (k, n): dot contracts the last axis with the first
        return lambda F, env: F.dot(gl(env), gr(env))
    if rank_l is not None and rank_r is not None and (rank_l != rank_r or rank_l < 3):
        raise UnsupportedError(
            f"mxnet: {b.where(node)}: MatMul of ranks {rank_l} and {rank_r} is not mapped "
            "(2-D right operand, or equal-rank batched products)"
        )
    # batched (..., m, k) @ (..., k, n) with the same leading dimensions
    return lambda F, env: F.linalg.gemm2(gl(env), gr(env))


def _gemm(m: OnnxBlock, b: _Builder, node: NodeProto, a: dict[str, Any]) -> Step:
    gx, gw = m.tensor(node, node.input[0]), m.tensor(node, node.input[1])
    has_c = len(node.input) > 2 and bool(node.input[2])
    gc = m.tensor(node, node.input[2]) if has_c else None
    alpha, beta = float(a.get("alpha", 1.0)), float(a.get("beta", 1.0))
    trans_a, trans_b = bool(a.get("transA", 0)), bool(a.get("transB", 0))
    w = node.input[1]
    c_shape = m.values[node.input[2]].shape if has_c and node.input[2] in m.values else None
    if (
        trans_b
        and not trans_a
        and alpha == 1.0
        and beta == 1.0
        and w in m.values
        and c_shape == (m.values[w].shape[0],)
    ):
        units = int(m.values[w].shape[0])
        assert gc is not None
        return lambda F, env: F.FullyConnected(
            gx(env), gw(env), gc(env), num_hidden=units, flatten=False
        )

    def general(F: Any, env: dict[str, Any]) -> Any:
        y = F.dot(gx(env), gw(env), transpose_a=trans_a, transpose_b=trans_b)
        if alpha != 1.0:
            y = y * alpha
        if gc is not None:
            c = gc(env)
            y = F.broadcast_add(y, c * beta if beta != 1.0 else c)
        return y

    return general


def _conv(m: OnnxBlock, b: _Builder, node: NodeProto, a: dict[str, Any]) -> Step:
    w = node.input[1]
    if w not in m.values or len(m.values[w].shape) != 4:
        raise UnsupportedError(
            f"mxnet: {b.where(node)}: only 2-D convolutions with an initializer weight are mapped"
        )
    if _text(a.get("auto_pad", "NOTSET")) != "NOTSET":
        raise UnsupportedError(f"mxnet: {b.where(node)}: auto_pad is not mapped (give pads)")
    out_c, _, kh, kw = m.values[w].shape
    top, left, bottom, right = (int(p) for p in a.get("pads", (0, 0, 0, 0)))
    stride = tuple(int(s) for s in a.get("strides", (1, 1)))
    dilate = tuple(int(d) for d in a.get("dilations", (1, 1)))
    groups = int(a.get("group", 1))
    gx, gw = m.tensor(node, node.input[0]), m.tensor(node, w)
    has_b = len(node.input) > 2 and bool(node.input[2])
    gb = m.tensor(node, node.input[2]) if has_b else None
    symmetric = top == bottom and left == right
    pad = (top, left) if symmetric else (0, 0)
    pad_width = (0, 0, 0, 0, top, bottom, left, right)

    def conv(F: Any, env: dict[str, Any]) -> Any:
        x = gx(env)
        if not symmetric:
            x = F.pad(x, mode="constant", pad_width=pad_width, constant_value=0.0)
        args = [x, gw(env)] + ([gb(env)] if gb is not None else [])
        return F.Convolution(
            *args,
            kernel=(int(kh), int(kw)),
            stride=stride,
            dilate=dilate,
            pad=pad,
            num_filter=int(out_c),
            num_group=groups,
            no_bias=gb is None,
        )

    return conv


def _max_pool(m: OnnxBlock, b: _Builder, node: NodeProto, a: dict[str, Any]) -> Step:
    kernel = tuple(int(k) for k in a["kernel_shape"])
    if len(kernel) != 2:
        raise UnsupportedError(f"mxnet: {b.where(node)}: only 2-D pooling is mapped")
    if _text(a.get("auto_pad", "NOTSET")) != "NOTSET":
        raise UnsupportedError(f"mxnet: {b.where(node)}: auto_pad is not mapped (give pads)")
    if int(a.get("ceil_mode", 0)):
        raise UnsupportedError(f"mxnet: {b.where(node)}: ceil_mode=1 is not mapped")
    if any(int(d) != 1 for d in a.get("dilations", ())) or int(a.get("storage_order", 0)):
        raise UnsupportedError(f"mxnet: {b.where(node)}: dilations/storage_order not mapped")
    top, left, bottom, right = (int(p) for p in a.get("pads", (0, 0, 0, 0)))
    if top != bottom or left != right:
        raise UnsupportedError(f"mxnet: {b.where(node)}: asymmetric pads are not mapped")
    stride = tuple(int(s) for s in a.get("strides", (1, 1)))
    get = m.tensor(node, node.input[0])
    return lambda F, env: F.Pooling(
        get(env),
        kernel=kernel,
        stride=stride,
        pad=(top, left),
        pool_type="max",
        pooling_convention="valid",
    )


def _batch_norm(m: OnnxBlock, b: _Builder, node: NodeProto, a: dict[str, Any]) -> Step:
    if int(a.get("training_mode", 0)):
        raise UnsupportedError(f"mxnet: {b.where(node)}: training_mode=1 is not mapped")
    names = list(node.input)
    if any(n not in m.param_keys for n in names[1:5]):
        raise UnsupportedError(
            f"mxnet: {b.where(node)}: scale, bias, mean and var must be initializers"
        )
    getters = [m.tensor(node, n) for n in names[:5]]
    eps = float(a.get("epsilon", 1e-5))
    momentum = float(a.get("momentum", 0.9))
    # Training mode (autograd.record) uses the batch statistics and updates the running ones
    # (running = momentum * running + (1 - momentum) * batch); otherwise the running ones.
    return lambda F, env: F.BatchNorm(
        *(g(env) for g in getters),
        eps=eps,
        momentum=momentum,
        fix_gamma=False,
        use_global_stats=False,
    )


def _global_average_pool(m: OnnxBlock, b: _Builder, node: NodeProto, a: dict[str, Any]) -> Step:
    get = m.tensor(node, node.input[0])
    return lambda F, env: F.Pooling(get(env), kernel=(1, 1), global_pool=True, pool_type="avg")


def _flatten(m: OnnxBlock, b: _Builder, node: NodeProto, a: dict[str, Any]) -> Step:
    axis = int(a.get("axis", 1))
    get = m.tensor(node, node.input[0])
    if axis == 1:
        return lambda F, env: F.flatten(get(env))
    if axis == 0:
        return lambda F, env: F.reshape(get(env), shape=(1, -1))
    raise UnsupportedError(f"mxnet: {b.where(node)}: Flatten axis={axis} is not mapped")


def _reshape(m: OnnxBlock, b: _Builder, node: NodeProto, a: dict[str, Any]) -> Step:
    dims = tuple(int(d) for d in m.int_array(node, node.input[1]).reshape(-1))
    if int(a.get("allowzero", 0)) and 0 in dims:
        raise UnsupportedError(f"mxnet: {b.where(node)}: allowzero=1 with a 0 is not mapped")
    if any(d < -1 for d in dims):
        raise UnsupportedError(f"mxnet: {b.where(node)}: invalid shape {dims}")
    get = m.tensor(node, node.input[0])
    # MXNet's reshape codes 0 (copy the input's dimension) and -1 (infer) are ONNX's
    return lambda F, env: F.reshape(get(env), shape=dims)


def _transpose(m: OnnxBlock, b: _Builder, node: NodeProto, a: dict[str, Any]) -> Step:
    get = m.tensor(node, node.input[0])
    if "perm" not in a:
        return lambda F, env: F.transpose(get(env))  # reverses the axes, as ONNX
    perm = tuple(int(p) for p in a["perm"])
    return lambda F, env: F.transpose(get(env), axes=perm)


def _softmax(m: OnnxBlock, b: _Builder, node: NodeProto, a: dict[str, Any]) -> Step:
    axis = int(a.get("axis", -1 if b.opset >= 13 else 1))
    rank = b.ranks.get(node.input[0])
    if b.opset < 13 and not (rank is not None and axis in (-1, rank - 1)):
        raise UnsupportedError(
            f"mxnet: {b.where(node)}: opset {b.opset} Softmax (coerced to 2-D) is not mapped"
        )
    get = m.tensor(node, node.input[0])
    return lambda F, env: F.softmax(get(env), axis=axis)


def _layer_norm(m: OnnxBlock, b: _Builder, node: NodeProto, a: dict[str, Any]) -> Step:
    axis = int(a.get("axis", -1))
    rank = b.ranks.get(node.input[0])
    if axis != -1 and not (rank is not None and axis == rank - 1):
        raise UnsupportedError(
            f"mxnet: {b.where(node)}: LayerNormalization over more than the last axis"
        )
    if len(node.input) < 3 or not node.input[2]:
        raise UnsupportedError(f"mxnet: {b.where(node)}: LayerNormalization without a bias")
    if int(a.get("stash_type", 1)) != 1:
        raise UnsupportedError(f"mxnet: {b.where(node)}: stash_type other than float32")
    gx, gs, gb = (m.tensor(node, n) for n in node.input[:3])
    eps = float(a.get("epsilon", 1e-5))
    return lambda F, env: F.LayerNorm(gx(env), gs(env), gb(env), axis=-1, eps=eps)


def _gather(m: OnnxBlock, b: _Builder, node: NodeProto, a: dict[str, Any]) -> Step:
    axis = int(a.get("axis", 0))
    data, idx = node.input[0], node.input[1]
    get = m.tensor(node, data)
    if m.is_const(idx):
        value = m.int_array(node, idx)
        if value.ndim != 0 or int(value) < 0:
            raise UnsupportedError(
                f"mxnet: {b.where(node)}: constant indices are mapped only as one "
                "non-negative scalar"
            )
        i = int(value)
        if axis < 0:
            raise UnsupportedError(f"mxnet: {b.where(node)}: negative axis with a scalar index")
        return lambda F, env: F.squeeze(
            F.slice_axis(get(env), axis=axis, begin=i, end=i + 1), axis=axis
        )
    gi = m.tensor(node, idx)
    return lambda F, env: F.take(get(env), gi(env), axis=axis)


def _dropout(m: OnnxBlock, b: _Builder, node: NodeProto, a: dict[str, Any]) -> Step:
    if len(node.input) > 2 and node.input[2]:
        raise UnsupportedError(f"mxnet: {b.where(node)}: a training_mode input is not mapped")
    ratio = float(a.get("ratio", 0.5))
    if len(node.input) > 1 and node.input[1]:
        given = m.scalar(node.input[1])
        if given is None:
            raise UnsupportedError(f"mxnet: {b.where(node)}: ratio must be a scalar constant")
        ratio = given
    get = m.tensor(node, node.input[0])
    # active only in training mode (autograd.record); inverted dropout, as PyTorch
    return lambda F, env: F.Dropout(get(env), p=ratio)


_OPS: dict[str, OpBuilder] = {
    "Add": _binary("Add"),
    "Sub": _binary("Sub"),
    "Mul": _binary("Mul"),
    "Div": _binary("Div"),
    "MatMul": _matmul,
    "Gemm": _gemm,
    "Conv": _conv,
    "BatchNormalization": _batch_norm,
    "MaxPool": _max_pool,
    "GlobalAveragePool": _global_average_pool,
    "Relu": _unary(lambda F, x: F.relu(x)),
    "Sigmoid": _unary(lambda F, x: F.sigmoid(x)),
    "Tanh": _unary(lambda F, x: F.tanh(x)),
    "Sqrt": _unary(lambda F, x: F.sqrt(x)),
    "Erf": _unary(lambda F, x: F.erf(x)),
    "Identity": _unary(lambda F, x: F.identity(x)),
    "Softmax": _softmax,
    "LayerNormalization": _layer_norm,
    "Flatten": _flatten,
    "Reshape": _reshape,
    "Transpose": _transpose,
    "Gather": _gather,
    "Dropout": _dropout,
}
assert frozenset(_OPS) == ONNX_OPS


class DataParallel:
    """The gradient exchange of a data-parallel network: every gradient is pushed to the
    ``dist_sync`` kvstore (the server sums the workers' pushes) and pulled back, as
    ``gluon.Trainer`` does with ``update_on_kvstore=False``; the keys are the adapter's (unique
    across networks: a Trainer numbers its keys 0..P-1, so two Trainers on one kvstore collide).
    """

    on_server = False

    def __init__(self, holder: Any, keys: list[int], world: int) -> None:
        self.holder = holder  # .kv is the kvstore (None after dist_shutdown)
        self.keys = keys
        self.world = world

    def exchange(self, grads: list[Any]) -> None:
        kv = self.holder.kv
        if kv is None:
            raise RuntimeError("mxnet: data-parallel step after dist_shutdown")
        kv.push(self.keys, grads)
        kv.pull(self.keys, out=grads)


class MXNetNetwork:
    """A built network: the hybridized block, its Trainer, the loss, the optional exchange."""

    def __init__(self, model: ModelProto, ctx: Any, options: NetworkOptions) -> None:
        mx.random.seed(options.seed)  # dropout masks: reproducible per task
        self.ctx = ctx
        self.block = OnnxBlock(model)
        self.block.initialize(ctx=ctx)
        self.block.load_values()
        self.block.hybridize(static_alloc=True)
        self.trainable = [
            getattr(self.block, self.block.param_keys[n]) for n in self.block.trainable
        ]
        # wd=0: no weight decay (MXNet's SGD default is 0 too; said here so it stays so)
        self.trainer = gluon.Trainer(
            self.trainable,
            "sgd",
            {"learning_rate": options.lr, "momentum": options.momentum, "wd": 0.0},
            kvstore=None,
        )
        self.loss = gluon.loss.SoftmaxCrossEntropyLoss()
        self.parallel: Any = None  # DataParallel, or a server-side update (mxnet_strategies)

    def forward(self, x: Any) -> Any:
        """Inference mode (outside ``autograd.record``): dropout off, running statistics."""
        return self.block(x)

    def train_step(self, x: Any, y: Any, sync: bool = True) -> Any:
        labels = y.astype("float32")  # the loss's pick takes float indices (exact < 2**24)
        with autograd.record():  # training mode: dropout on, batch statistics
            loss = self.loss(self.block(x), labels).mean()
        loss.backward()
        world = 1
        if self.parallel is not None and self.parallel.on_server:
            if sync:  # the server's optimizer steps; the weights come back with the pull
                self.parallel.exchange(
                    [p.grad(self.ctx) for p in self.trainable],
                    [p.data(self.ctx) for p in self.trainable],
                )
                return loss
        elif self.parallel is not None:
            world = self.parallel.world
            if sync:
                self.parallel.exchange([p.grad(self.ctx) for p in self.trainable])
        # the gradient of the local mean loss, summed over the workers: rescale by 1/world so
        # the step uses the mean over the global batch (ignore_stale_grad: a parameter the
        # output does not depend on gets no gradient and no step, as in the other builders)
        self.trainer.step(world, ignore_stale_grad=True)
        return loss

    def parameters(self) -> dict[str, np.ndarray]:
        return {
            name: getattr(self.block, self.block.param_keys[name])
            .data(self.ctx)
            .asnumpy()
            .astype(np.float64)
            for name in self.block.trainable
        }
