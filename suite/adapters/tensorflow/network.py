"""ONNX graph -> a Keras model with the same initializer values, run by the shared importer.

Imported only by the TensorFlow adapter's network words (so only inside a worker). The importer
(suite/onnx/importer.py) reads the graph, sorts its initializers and plans it for the
input's shape; :class:`OnnxModel` (a ``keras.Model``) holds the trainable initializers as Keras
weights (in ONNX's layout: kernels permute them where TensorFlow's differs) and
BatchNormalization's running statistics as non-trainable ones (assigned in training mode, never
differentiated), and its ``call`` runs the plan with the kernels of tensorflow_kernels.py
inside the ``tf.function`` (XLA with ``compile``) of the training or inference step. On the CPU
image activations are kept channels-last between the ops that allow it (tensorflow_kernels.py).

Mixed precision (``amp``: bf16 or fp16, Keras' ``mixed_*`` policies): the weights stay fp32,
every activation, weight read and folded constant is in the compute dtype, normalisations keep
fp32 statistics, the logits are fp32; fp16 adds Keras' dynamic loss scale.

Written for Keras 3 (TensorFlow >= 2.16); it also runs on tf.keras 2.12 (TensorFlow 2.12.1, the
Horovod-over-TensorFlow environment: Horovod 0.28.1 builds against TensorFlow <= 2.12), where the
few Keras-3-only calls (``keras.DTypePolicy``, the optimizer's ``scale_loss``) have their Keras 2
equivalents (see ``KERAS3``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from contextlib import nullcontext
from typing import Any

import keras
import numpy as np
import tensorflow as tf
from onnx import ModelProto

from suite.adapters.base import NetworkOptions
from suite.adapters.tensorflow.kernels import KERNELS, Ctx, layout_call, onnx_value
from suite.onnx.importer import check_mapped, import_graph, kernel_call, run

#: Keras 3, or tf.keras 2 (TensorFlow 2.12). Its optimizers are taken from ``tf.keras``
#: (``keras.optimizers.SGD`` of the keras 2 package is the legacy optimizer, without ``build``).
KERAS3 = int(keras.__version__.split(".")[0]) >= 3
if KERAS3:
    DTypePolicy: Any = keras.DTypePolicy
    SGD: Any = keras.optimizers.SGD
    LossScaleOptimizer: Any = keras.optimizers.LossScaleOptimizer
else:
    DTypePolicy = tf.keras.mixed_precision.Policy
    SGD = tf.keras.optimizers.SGD
    LossScaleOptimizer = tf.keras.mixed_precision.LossScaleOptimizer

#: the ONNX ops this builder maps; the adapter declares the same set as ``onnx_ops``
ONNX_OPS = frozenset(KERNELS)


class OnnxModel(keras.Model):
    """The imported graph as a Keras model: its weights by ONNX name, its plan per input shape."""

    def __init__(self, model: ModelProto, compute: str, channels_last: bool, seed: int) -> None:
        super().__init__(name=re.sub(r"[^A-Za-z0-9_]", "_", model.graph.name or "onnx"))
        self.onnx_graph = import_graph(model)
        check_mapped(self.onnx_graph, ONNX_OPS, self.onnx_graph.input_shape(1), "tensorflow")
        self.compute_tf = tf.as_dtype(compute)
        self.onnx_channels_last = channels_last
        self.dropout_seed = seed
        #: trainable initializers and BatchNormalization running statistics, by ONNX name
        self.onnx_params = {n: self._weight(n, v, True) for n, v in self.onnx_graph.params.items()}
        self.onnx_state = {n: self._weight(n, v, False) for n, v in self.onnx_graph.state.items()}
        self.built = True

    def _weight(self, name: str, value: np.ndarray, trainable: bool) -> Any:
        var = self.add_weight(name=re.sub(r"[^A-Za-z0-9_.\-]", "_", name), shape=value.shape,
                              dtype="float32", initializer="zeros", trainable=trainable)  # fmt: skip
        var.assign(value.astype(np.float32))
        return var

    def _const(self, value: np.ndarray) -> Any:
        """A folded constant: floats in the compute dtype (TensorFlow does not promote)."""
        return value.astype(self.compute_tf.as_numpy_dtype) if value.dtype.kind == "f" else value

    def call(self, x: Any, training: bool = False) -> Any:
        if x.dtype.is_floating:  # token ids stay integers
            x = tf.cast(x, self.compute_tf)
        ctx = Ctx(bool(training), self.compute_tf, self.dropout_seed, state=dict(self.onnx_state))
        values = {n: tf.cast(v, self.compute_tf) for n, v in self.onnx_params.items()}
        values.update(self.onnx_state)
        step = layout_call(KERNELS, ctx) if self.onnx_channels_last else kernel_call(KERNELS, ctx)
        plan = self.onnx_graph.plan(tuple(int(d) for d in x.shape))
        out = run(
            plan, values, x, step, self._const, cache_key=("tensorflow", self.compute_tf.name)
        )
        return tf.cast(onnx_value(out), tf.float32)  # fp32 logits (the loss is fp32)


def build_keras(model: ModelProto, policy: Any, channels_last: bool, seed: int) -> OnnxModel:
    """The Keras model of ``model`` with its initializers loaded."""
    return OnnxModel(model, policy.compute_dtype, channels_last, seed)


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
        self.model = build_keras(model, self.policy, channels_last, options.seed)
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
            self.model = build_keras(self.proto, self.policy, self.channels_last, self.options.seed)
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
            from suite.adapters.tensorflow.strategies import PSSteps

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
        return {
            name: np.asarray(var.numpy(), dtype=np.float64)
            for name, var in self.model.onnx_params.items()
        }


def param_count(net: KerasNetwork) -> int:
    return int(sum(np.prod(v.shape) for v in net.model.trainable_variables))
