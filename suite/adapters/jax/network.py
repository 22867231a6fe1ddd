"""ONNX graph -> a pure JAX function over a parameter pytree, trained with optax under ``jit``.

Imported only by the JAX adapter's network words (so only inside a worker). The importer
(suite/onnx/importer.py) reads the graph; its plan for the input's shape runs *while
it is traced*, each step a kernel of jax_kernels.py (``jax.numpy``/``jax.lax``), so ``jax.jit``
compiles the whole network into one XLA program and ``jax.grad`` differentiates it. The
network's values are three pytrees keyed by ONNX initializer name:

* ``params``: float initializers with more than one element (trainable, the same values as the
  ONNX file: the layouts are ONNX's own, NCHW activations and OIHW kernels, so nothing is
  permuted);
* ``state``: BatchNormalization's running mean and variance (updated in training mode like
  ``nn.BatchNorm2d``: ONNX momentum m keeps m of the old value, the variance folded in is the
  unbiased one);
* constants (the importer's: scalars, integer tensors, folded values), kept as NumPy so
  shapes stay static.

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

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from onnx import ModelProto

from suite.adapters.base import NetworkOptions
from suite.adapters.jax.kernels import KERNELS, Ctx
from suite.errors import UnsupportedError
from suite.onnx.importer import check_mapped, import_graph, kernel_call, run

# fp16 dynamic loss scaling, as torch.amp.GradScaler's defaults
LOSS_SCALE_INIT = 2.0**16
LOSS_SCALE_GROWTH_INTERVAL = 2000

#: the ONNX ops this builder maps; the adapter declares the same set as ``onnx_ops``
ONNX_OPS = frozenset(KERNELS)


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

        self.graph = import_graph(model)
        check_mapped(self.graph, ONNX_OPS, self.graph.input_shape(1), "jax")
        params = self.graph.params
        state = {k: v.astype(np.float32) for k, v in self.graph.state.items()}

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
        ctx = Ctx(training=training, key=key, amp=self.amp)
        plan = self.graph.plan(x.shape)
        out = run(plan, {**state, **params}, x, kernel_call(KERNELS, ctx), self._const,
                  cache_key=("jax", str(self.param_dtype)))  # fmt: skip
        return out, {**state, **ctx.new_state}

    def _const(self, value: np.ndarray) -> Any:
        """A folded constant: floats in the compute dtype (so they do not promote the
        activations), integers as int32 unless x64 is on; kept as NumPy so shapes stay static."""
        if value.dtype.kind == "f":
            return np.asarray(value, dtype=self.param_dtype)
        if value.dtype == np.int64 and not jax.config.jax_enable_x64:
            return value.astype(np.int32)
        return value

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
