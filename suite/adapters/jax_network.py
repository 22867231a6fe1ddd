"""ONNX graph -> a pure JAX function over a parameter pytree, trained with optax under ``jit``.

Imported only by the JAX adapter's network words (so only inside a worker). The graph is
interpreted node by node *while it is traced*: each ONNX op is a ``jax.numpy``/``jax.lax``
function, so ``jax.jit`` compiles the whole network into one XLA program, and ``jax.grad``
differentiates it. The network's values are three pytrees keyed by ONNX initializer name:

* ``params``: float initializers with more than one element (trainable, the same values as the
  ONNX file: the layouts are ONNX's own, NCHW activations and OIHW kernels, so nothing is
  permuted);
* ``state``: BatchNormalization's running mean and variance (updated in training mode like
  ``nn.BatchNorm2d``: ONNX momentum m keeps m of the old value, the variance folded in is the
  unbiased one);
* constants: scalars and integer tensors (shapes, indices), kept as NumPy so shapes are static.

Training is softmax cross-entropy (in fp32) and ``optax.sgd(lr, momentum)``, whose trace
``v = momentum * v + g; p -= lr * v`` is ``torch.optim.SGD`` without dampening. Dropout masks
come from ``jax.random`` keyed by ``NetworkOptions.seed`` (one split per step). Mixed precision
(``amp``, bf16/fp16): parameters stay fp32; MatMul, Gemm and Conv compute in the low-precision
dtype (as autocast does), normalisations and softmax compute their statistics in fp32, the loss
is fp32; fp16 adds a dynamic loss scale (2**16, halved and the step skipped on a non-finite
gradient, doubled after 2000 good steps: ``torch.amp.GradScaler``'s defaults).

``channels_last`` and ``compile`` do not apply: XLA always compiles and chooses its own layouts.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax import lax
from onnx import ModelProto, NodeProto, numpy_helper

from suite.adapters.base import NetworkOptions
from suite.errors import UnsupportedError
from suite.levels.network.zoo import node_attributes

# fp16 dynamic loss scaling, as torch.amp.GradScaler's defaults
LOSS_SCALE_INIT = 2.0**16
LOSS_SCALE_GROWTH_INTERVAL = 2000


@dataclass
class _Ctx:
    """What an op may depend on besides its inputs (one per trace)."""

    training: bool
    key: Any  # jax.random key for dropout masks (None in inference)
    amp: Any  # the low-precision dtype of MatMul/Gemm/Conv under mixed precision, or None
    node_index: int = 0
    #: BatchNormalization running statistics written in training mode: name -> new value
    new_state: dict[str, Any] = field(default_factory=dict)


Op = Callable[[_Ctx, NodeProto, dict[str, Any], list[Any]], Any]


_attrs = node_attributes


def _low(ctx: _Ctx, *xs: Any) -> list[Any]:
    """Under mixed precision, the inputs of a matrix product cast to the low-precision dtype."""
    if ctx.amp is None:
        return list(xs)
    return [None if x is None else jnp.asarray(x).astype(ctx.amp) for x in xs]


def _stats_dtype(x: Any) -> Any:
    """Statistics (mean, variance, softmax sums) in fp32 for 16-bit inputs, as cuDNN does."""
    return jnp.float32 if x.dtype in (jnp.bfloat16, jnp.float16) else x.dtype


def _pads(a: dict[str, Any]) -> list[tuple[int, int]]:
    top, left, bottom, right = (int(p) for p in a.get("pads", (0, 0, 0, 0)))
    return [(top, bottom), (left, right)]


def _strides(a: dict[str, Any]) -> tuple[int, int]:
    sh, sw = a.get("strides", (1, 1))
    return int(sh), int(sw)


def _binary(fn: Callable[[Any, Any], Any]) -> Op:
    return lambda ctx, node, a, v: fn(v[0], v[1])


def _matmul(ctx: _Ctx, node: NodeProto, a: dict[str, Any], v: list[Any]) -> Any:
    x, w = _low(ctx, v[0], v[1])
    return jnp.matmul(x, w)


def _gemm(ctx: _Ctx, node: NodeProto, a: dict[str, Any], v: list[Any]) -> Any:
    """``alpha * A' @ B' + beta * C`` with A' = A or A^T (transA), B' likewise (transB)."""
    x, w, c = _low(ctx, v[0], v[1], v[2] if len(v) > 2 else None)
    if a.get("transA", 0):
        x = x.T
    if a.get("transB", 0):
        w = w.T
    alpha, beta = float(a.get("alpha", 1.0)), float(a.get("beta", 1.0))
    y = x @ w
    if alpha != 1.0:
        y = y * alpha
    if c is not None:
        y = y + (c if beta == 1.0 else beta * c)
    return y


def _conv(ctx: _Ctx, node: NodeProto, a: dict[str, Any], v: list[Any]) -> Any:
    x, w, b = _low(ctx, v[0], v[1], v[2] if len(v) > 2 else None)
    y = lax.conv_general_dilated(
        x,
        w,
        window_strides=_strides(a),
        padding=_pads(a),
        rhs_dilation=tuple(int(d) for d in a.get("dilations", (1, 1))),
        dimension_numbers=("NCHW", "OIHW", "NCHW"),
        feature_group_count=int(a.get("group", 1)),
    )
    return y if b is None else y + b.reshape(1, -1, 1, 1)


def _batch_norm(ctx: _Ctx, node: NodeProto, a: dict[str, Any], v: list[Any]) -> Any:
    """Training: batch statistics (biased variance) normalise; the running ones are updated as
    PyTorch does. Inference: the running statistics. Statistics in fp32 for 16-bit inputs."""
    x, scale, bias, running_mean, running_var = v
    eps = float(a.get("epsilon", 1e-5))
    xs = x.astype(_stats_dtype(x))
    channel = (1, -1, 1, 1)
    if ctx.training:
        mean = xs.mean(axis=(0, 2, 3))
        var = jnp.mean(jnp.square(xs - mean.reshape(channel)), axis=(0, 2, 3))
        m = float(a.get("momentum", 0.9))
        n = x.size // x.shape[1]
        stats = lax.stop_gradient((mean, var))
        ctx.new_state[node.input[3]] = m * running_mean + (1.0 - m) * stats[0].astype(
            running_mean.dtype
        )
        ctx.new_state[node.input[4]] = m * running_var + (1.0 - m) * (n / (n - 1)) * stats[
            1
        ].astype(running_var.dtype)
    else:
        mean, var = running_mean.astype(xs.dtype), running_var.astype(xs.dtype)
    rstd = lax.rsqrt(var + eps)
    y = (xs - mean.reshape(channel)) * (rstd * scale.astype(xs.dtype)).reshape(channel)
    y = y + bias.astype(xs.dtype).reshape(channel)
    return y.astype(x.dtype)


def _layer_norm(ctx: _Ctx, node: NodeProto, a: dict[str, Any], v: list[Any]) -> Any:
    x, scale = v[0], v[1]
    bias = v[2] if len(v) > 2 and v[2] is not None else None
    axis = int(a.get("axis", -1)) % x.ndim
    axes = tuple(range(axis, x.ndim))
    xs = x.astype(_stats_dtype(x))
    mean = xs.mean(axis=axes, keepdims=True)
    var = jnp.mean(jnp.square(xs - mean), axis=axes, keepdims=True)
    y = (xs - mean) * lax.rsqrt(var + float(a.get("epsilon", 1e-5))) * scale.astype(xs.dtype)
    if bias is not None:
        y = y + bias.astype(xs.dtype)
    return y.astype(x.dtype)


def _pool(kind: str) -> Op:
    def op(ctx: _Ctx, node: NodeProto, a: dict[str, Any], v: list[Any]) -> Any:
        x = v[0]
        kh, kw = (int(k) for k in a["kernel_shape"])
        window, strides = (1, 1, kh, kw), (1, 1, *_strides(a))
        padding = [(0, 0), (0, 0), *_pads(a)]
        if kind == "max":
            return lax.reduce_window(x, -jnp.inf, lax.max, window, strides, padding)
        total = lax.reduce_window(x, 0.0, lax.add, window, strides, padding)
        if a.get("count_include_pad", 0) or all(p == (0, 0) for p in padding):
            return total / (kh * kw)
        ones = jnp.ones(x.shape[2:], x.dtype)[None, None]
        count = lax.reduce_window(ones, 0.0, lax.add, window, strides, padding)
        return total / count

    return op


def _reshape(ctx: _Ctx, node: NodeProto, a: dict[str, Any], v: list[Any]) -> Any:
    x, shape = v
    dims = [int(d) for d in np.asarray(shape)]
    if not a.get("allowzero", 0):  # 0 copies the input's dimension
        dims = [x.shape[i] if d == 0 else d for i, d in enumerate(dims)]
    return x.reshape(dims)


def _flatten(ctx: _Ctx, node: NodeProto, a: dict[str, Any], v: list[Any]) -> Any:
    x = v[0]
    axis = int(a.get("axis", 1)) % max(x.ndim, 1)
    return x.reshape(math.prod(x.shape[:axis]), -1)


def _transpose(ctx: _Ctx, node: NodeProto, a: dict[str, Any], v: list[Any]) -> Any:
    x = v[0]
    return jnp.transpose(x, a.get("perm", tuple(range(x.ndim))[::-1]))


def _gather(ctx: _Ctx, node: NodeProto, a: dict[str, Any], v: list[Any]) -> Any:
    data, idx = v
    return jnp.take(data, jnp.asarray(idx), axis=int(a.get("axis", 0)))


def _softmax(ctx: _Ctx, node: NodeProto, a: dict[str, Any], v: list[Any]) -> Any:
    x = v[0]
    return jax.nn.softmax(x.astype(_stats_dtype(x)), axis=int(a.get("axis", -1))).astype(x.dtype)


def _dropout(ctx: _Ctx, node: NodeProto, a: dict[str, Any], v: list[Any]) -> Any:
    """Identity in inference; in training inverted dropout (zero with probability ``ratio``,
    scale the rest by 1 / (1 - ratio)), the mask from this step's key folded with the node."""
    x = v[0]
    ratio = float(np.asarray(v[1])) if len(v) > 1 and v[1] is not None else a.get("ratio", 0.5)
    if not ctx.training or ratio == 0.0:
        return x
    key = jax.random.fold_in(ctx.key, ctx.node_index)
    keep = jax.random.bernoulli(key, 1.0 - ratio, x.shape)
    return jnp.where(keep, x / (1.0 - ratio), jnp.zeros((), x.dtype)).astype(x.dtype)


_OPS: dict[str, Op] = {
    "Add": _binary(jnp.add),
    "Sub": _binary(jnp.subtract),
    "Mul": _binary(jnp.multiply),
    "Div": _binary(jnp.divide),
    "MatMul": _matmul,
    "Gemm": _gemm,
    "Conv": _conv,
    "BatchNormalization": _batch_norm,
    "LayerNormalization": _layer_norm,
    "MaxPool": _pool("max"),
    "AveragePool": _pool("avg"),
    "GlobalAveragePool": lambda ctx, n, a, v: v[0].mean(axis=(2, 3), keepdims=True),
    "Relu": lambda ctx, n, a, v: jax.nn.relu(v[0]),
    "Sigmoid": lambda ctx, n, a, v: jax.nn.sigmoid(v[0]),
    "Tanh": lambda ctx, n, a, v: jnp.tanh(v[0]),
    "Erf": lambda ctx, n, a, v: lax.erf(v[0]),
    "Sqrt": lambda ctx, n, a, v: jnp.sqrt(v[0]),
    "Identity": lambda ctx, n, a, v: v[0],
    "Flatten": _flatten,
    "Reshape": _reshape,
    "Transpose": _transpose,
    "Gather": _gather,
    "Softmax": _softmax,
    "Dropout": _dropout,
    "Concat": lambda ctx, n, a, v: jnp.concatenate(list(v), axis=int(a["axis"])),
}
#: the ONNX ops this builder maps (the zoo's op set plus a few common ones in user files); the
#: adapter repeats it as ``JaxAdapter.onnx_ops`` so that listing them imports no JAX
ONNX_OPS = frozenset(_OPS)


def _check_mapped(node: NodeProto, attrs: dict[str, Any]) -> None:
    """Attribute values the ops above do not implement: declared (skipped), never crashed."""
    where = f"{node.op_type} node {node.name or '?'}"
    if node.op_type not in _OPS:
        raise UnsupportedError(f"jax: unsupported op {node.op_type} in node {node.name or '?'}")
    if len([o for o in node.output if o]) != 1:
        raise UnsupportedError(f"jax: {where} has several outputs; only one is mapped")
    if node.op_type in ("Conv", "MaxPool", "AveragePool"):
        if attrs.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET"):
            raise UnsupportedError(f"jax: {where}: auto_pad is not mapped (give pads)")
        if len(attrs.get("kernel_shape", (1, 1))) != 2:
            raise UnsupportedError(f"jax: {where}: only 2-D windows are mapped")
    if node.op_type in ("MaxPool", "AveragePool"):
        if attrs.get("ceil_mode", 0):
            raise UnsupportedError(f"jax: {where}: ceil_mode=1 is not mapped")
        if any(d != 1 for d in attrs.get("dilations", ())):
            raise UnsupportedError(f"jax: {where}: pooling dilations are not mapped")
    if node.op_type == "Softmax" and "axis" not in attrs:
        # opset < 13 flattens around ``axis``; the zoo always names the axis
        pass


def softmax_cross_entropy(logits: Any, labels: Any) -> Any:
    """Mean softmax cross-entropy over the batch, in fp32."""
    logp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    return -jnp.mean(jnp.take_along_axis(logp, labels[:, None].astype(jnp.int32), axis=-1))


class JaxNetwork:
    """A built network: the pytrees (params, optimizer state, BN state), the compiled steps.

    The pytrees live on one device (``device``); the adapter's data-parallel wrapper turns
    them into replicated global arrays for one shard_map'ed step and back (see jax_adapter.py).
    """

    def __init__(
        self, model: ModelProto, dtype: str, options: NetworkOptions, device: Any, donate: bool
    ) -> None:
        graph = model.graph
        self.options = options
        self.device = device
        dtypes = {"fp32": jnp.float32, "bf16": jnp.bfloat16, "fp16": jnp.float16}
        if jax.config.jax_enable_x64:
            dtypes["fp64"] = jnp.float64
        if dtype not in dtypes:
            raise UnsupportedError(f"jax: the network words have no dtype {dtype!r}")
        # mixed precision keeps fp32 parameters; otherwise the parameters are in ``dtype``
        self.amp = dtypes[dtype] if options.amp and dtype in ("bf16", "fp16") else None
        self.param_dtype = jnp.float32 if self.amp is not None else dtypes[dtype]
        self.loss_scaling = self.amp is jnp.float16

        nodes = list(graph.node)
        running = {n.input[i] for n in nodes if n.op_type == "BatchNormalization" for i in (3, 4)}
        params: dict[str, np.ndarray] = {}
        state: dict[str, np.ndarray] = {}
        self.consts: dict[str, Any] = {}
        for init in graph.initializer:
            value = numpy_helper.to_array(init)
            if value.dtype.kind != "f":
                self.consts[init.name] = value
            elif init.name in running:
                state[init.name] = value.astype(np.float32)
            elif value.size > 1:
                params[init.name] = value
            else:  # a scalar: in the compute dtype, so it does not promote the activations
                self.consts[init.name] = jnp.asarray(value, self.param_dtype)
        known = {i.name for i in graph.initializer}
        self.input_name = next(i.name for i in graph.input if i.name not in known)
        self.output_name = graph.output[0].name
        self.nodes = [(node, _attrs(node)) for node in nodes]
        for node, attrs in self.nodes:
            _check_mapped(node, attrs)

        put = lambda v, dt: jax.device_put(jnp.asarray(v, dt), device)  # noqa: E731
        self.params = {k: put(v, self.param_dtype) for k, v in params.items()}
        self.state: dict[str, Any] = {k: put(v, jnp.float32) for k, v in state.items()}
        self.optimizer = optax.sgd(options.lr, momentum=options.momentum)
        self.opt_state = self.optimizer.init(self.params)
        self.key = jax.device_put(jax.random.key(options.seed), device)
        self.scaler = (
            {
                "scale": put(LOSS_SCALE_INIT, jnp.float32),
                "good_steps": put(0, jnp.int32),
            }
            if self.loss_scaling
            else {}
        )
        donate_args = (0, 1, 2, 3) if donate else ()
        self._forward = jax.jit(self._infer)
        self._step = jax.jit(self.local_step, donate_argnums=donate_args)
        #: set by the adapter's data_parallel: the step with the gradient exchange
        self.dp_step: Callable[..., Any] | None = None
        self._no_sync_step: Any = None

    # -- the pure functions ------------------------------------------------------------------
    def apply(
        self, params: dict[str, Any], state: dict[str, Any], x: Any, training: bool, key: Any
    ) -> tuple[Any, dict[str, Any]]:
        """The graph's output and (in training) the updated BatchNormalization statistics."""
        if jnp.issubdtype(x.dtype, jnp.floating):  # token ids stay integers
            x = x.astype(self.param_dtype)
        ctx = _Ctx(training=training, key=key, amp=self.amp)
        env: dict[str, Any] = {**self.consts, **state, **params, self.input_name: x}
        for i, (node, attrs) in enumerate(self.nodes):
            ctx.node_index = i
            args = [env[name] if name else None for name in node.input]
            env[node.output[0]] = _OPS[node.op_type](ctx, node, attrs, args)
        return env[self.output_name], {**state, **ctx.new_state}

    def _infer(self, params: dict[str, Any], state: dict[str, Any], x: Any) -> Any:
        return self.apply(params, state, x, False, None)[0]

    def gradients(
        self,
        params: dict[str, Any],
        state: dict[str, Any],
        scaler: dict[str, Any],
        x: Any,
        y: Any,
        key: Any,
    ) -> tuple[Any, Any, dict[str, Any]]:
        """(loss, gradients, new BN state) of one training-mode forward on this batch. Under
        fp16 loss scaling the loss is scaled before ``grad`` and the gradients unscaled."""

        def loss_fn(p: dict[str, Any]) -> tuple[Any, tuple[Any, dict[str, Any]]]:
            logits, new_state = self.apply(p, state, x, True, key)
            loss = softmax_cross_entropy(logits, y)
            scaled = loss * scaler["scale"] if self.loss_scaling else loss
            return scaled, (loss, new_state)

        grads, (loss, new_state) = jax.grad(loss_fn, has_aux=True)(params)
        if self.loss_scaling:
            grads = jax.tree.map(lambda g: g / scaler["scale"], grads)
        return loss, grads, new_state

    def apply_update(
        self, params: dict[str, Any], opt_state: Any, scaler: dict[str, Any], grads: Any
    ) -> tuple[dict[str, Any], Any, dict[str, Any]]:
        """One optax SGD-momentum update; under fp16 loss scaling, skipped (and the scale
        halved) when a gradient is not finite, the scale doubled after enough good steps."""
        updates, new_opt = self.optimizer.update(grads, opt_state, params)
        new_params = optax.apply_updates(params, updates)
        if not self.loss_scaling:
            return new_params, new_opt, scaler
        finite = jnp.all(
            jnp.array([jnp.all(jnp.isfinite(g)) for g in jax.tree.leaves(grads)], dtype=bool)
        )
        keep = lambda new, old: jax.tree.map(  # noqa: E731
            lambda n, o: jnp.where(finite, n, o), new, old
        )
        good = jnp.where(finite, scaler["good_steps"] + 1, 0)
        grow = good >= LOSS_SCALE_GROWTH_INTERVAL
        scale = jnp.where(finite, jnp.where(grow, scaler["scale"] * 2.0, scaler["scale"]),
                          scaler["scale"] * 0.5)  # fmt: skip
        new_scaler = {"scale": scale, "good_steps": jnp.where(grow, 0, good)}
        return keep(new_params, params), keep(new_opt, opt_state), new_scaler

    def local_step(
        self,
        params: dict[str, Any],
        opt_state: Any,
        state: dict[str, Any],
        scaler: dict[str, Any],
        x: Any,
        y: Any,
        key: Any,
    ) -> tuple[Any, ...]:
        """One training step on this process's batch, no communication."""
        key, sub = jax.random.split(key)
        loss, grads, new_state = self.gradients(params, state, scaler, x, y, sub)
        params, opt_state, scaler = self.apply_update(params, opt_state, scaler, grads)
        return params, opt_state, new_state, scaler, key, loss

    # -- the network words -------------------------------------------------------------------
    def forward(self, x: Any) -> Any:
        """Inference-mode logits: dropout off, BatchNorm with the running statistics."""
        return self._forward(self.params, self.state, x)

    def train_step(self, x: Any, y: Any, *, sync: bool = True) -> Any:
        """One step (data-parallel when wrapped and ``sync``); returns the loss, not waited on."""
        args = (self.params, self.opt_state, self.state, self.scaler, x, y, self.key)
        step: Callable[..., Any] = self._step
        if self.dp_step is not None and sync:
            if self._no_sync_step is None:
                # The step without the exchange is compiled here, with the data-parallel warm-up,
                # so that timing it (the communication share) does not time its compilation.
                self._no_sync_step = self._step.lower(*args).compile()
            step = self.dp_step
        elif self.dp_step is not None and self._no_sync_step is not None:
            step = self._no_sync_step
        self.params, self.opt_state, self.state, self.scaler, self.key, loss = step(*args)
        return loss

    def parameters(self) -> dict[str, np.ndarray]:
        """The trainable values as float64 copies, keyed by ONNX initializer name."""
        return {k: np.asarray(v, dtype=np.float64) for k, v in self.params.items()}
