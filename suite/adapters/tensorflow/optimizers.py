"""Keras 3's optimizers (``keras.optimizers``, TensorFlow backend) for the training level's
optimizer benchmark.

The declarations are plain data (read on the host, no TensorFlow import); :class:`KerasOptimizer`
(built in the worker) applies ``optimizer.apply_gradients`` to ``tf.Variable`` parameters, in
three ways: ``eager`` (op by op, as a custom training loop without ``tf.function`` runs it),
``function`` (traced into a graph by ``tf.function``: how ``Model.fit`` runs it on a CPU) and
``xla`` (``tf.function(jit_compile=True)``). Every Keras optimizer takes ``weight_decay`` (the
base class applies ``p -= p * wd * lr`` before the update: decoupled, whatever the optimizer);
Keras has no fp32 master copy for low-precision variables (mixed precision keeps the variables
in fp32), so bf16/fp16 parameters are stepped in their own dtype, moments included.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from suite.adapters.optimizer_words import DocumentedDifference, OptimizerHandle, OptimizerWords

_SGD = frozenset({"lr", "weight_decay"})
_ADAM = frozenset({"lr", "beta1", "beta2", "eps", "weight_decay"})


def make(keras: Any, optimizer: str, hyper: Mapping[str, Any]) -> Any:
    """The Keras optimizer for the suite's ``hyper``."""
    h = hyper
    ko = keras.optimizers
    wd = h.get("weight_decay") or None  # Keras: None means no weight decay
    if optimizer in ("sgd", "momentum", "nesterov"):
        return ko.SGD(
            learning_rate=h["lr"], momentum=h["momentum"], nesterov=h["nesterov"], weight_decay=wd
        )
    if optimizer in ("adam", "adamw", "amsgrad", "lamb"):
        adam = {"learning_rate": h["lr"], "beta_1": h["beta1"], "beta_2": h["beta2"],
                "epsilon": h["eps"]}  # fmt: skip
    if optimizer == "adamw":
        return ko.AdamW(weight_decay=h["weight_decay"], **adam)
    if optimizer in ("adam", "amsgrad"):
        return ko.Adam(amsgrad=optimizer == "amsgrad", weight_decay=wd, **adam)
    if optimizer == "lamb":
        return ko.Lamb(weight_decay=wd, **adam)
    if optimizer == "rmsprop":
        return ko.RMSprop(
            learning_rate=h["lr"],
            rho=h["rho"],
            momentum=h["momentum"],
            epsilon=h["eps"],
            centered=h["centered"],
            weight_decay=wd,
        )
    if optimizer == "adagrad":
        return ko.Adagrad(
            learning_rate=h["lr"],
            initial_accumulator_value=h["initial_accumulator"],
            epsilon=h["eps"],
            weight_decay=wd,
        )
    raise KeyError(optimizer)


class KerasOptimizer(OptimizerHandle):
    """A Keras optimizer over its own ``tf.Variable`` parameters (the optimizer words'
    handle)."""

    def __init__(
        self,
        tf: Any,
        keras: Any,
        device: str,
        dtype: Any,
        spec: Any,
        params: Mapping[str, np.ndarray],
    ) -> None:
        self.tf, self.device, self.dtype = tf, device, dtype
        self.names = list(spec.names)
        with tf.device(device):
            self.variables = [
                tf.Variable(
                    tf.cast(tf.constant(np.asarray(params[n], dtype=np.float32)), dtype),
                    name=n.replace(".", "_"),
                )
                for n in self.names
            ]
        self.optimizer = make(keras, spec.optimizer, spec.hyper)
        self.optimizer.build(self.variables)
        self.grads: list[Any] = []

        def apply(grads: list[Any]) -> Any:
            self.optimizer.apply_gradients(zip(grads, self.variables, strict=True))
            return self.optimizer.iterations

        if spec.implementation == "eager":
            self._apply = apply
        else:
            plain = tf.autograph.experimental.do_not_convert(apply)
            self._apply = tf.function(plain, jit_compile=spec.implementation == "xla")

    def set_gradients(self, grads: Mapping[str, np.ndarray]) -> None:
        tf = self.tf
        with tf.device(self.device):
            self.grads = [
                tf.cast(tf.constant(np.asarray(grads[n], dtype=np.float32)), self.dtype)
                for n in self.names
            ]

    def set_lr(self, lr: float) -> None:
        self.optimizer.learning_rate.assign(lr)

    def step(self) -> Any:
        with self.tf.device(self.device):
            return self._apply(self.grads)

    def parameters(self, master: bool = False) -> dict[str, np.ndarray]:
        return {
            n: np.asarray(self.tf.cast(v, self.tf.float32).numpy(), dtype=np.float64)
            for n, v in zip(self.names, self.variables, strict=True)
        }

    def state_bytes(self) -> int:
        total = 0
        for v in self.optimizer.variables:
            total += int(np.prod(v.shape)) * self.tf.as_dtype(str(v.dtype)).size
        return total


class KerasOptimizerWords(OptimizerWords):
    """TensorFlow's optimizer words, ``keras.optimizers``, three ways: the declarations (class
    attributes, read on the host without a framework import) and ``optimizer_build``."""

    tf: Any
    keras: Any
    device_name: str
    _dtypes: dict[str, Any]

    optimizers: ClassVar[dict[str, str]] = {
        "sgd": "keras.optimizers.SGD(learning_rate, weight_decay)",
        "momentum": "keras.optimizers.SGD(learning_rate, momentum, weight_decay)",
        "nesterov": "keras.optimizers.SGD(learning_rate, momentum, nesterov=True, weight_decay)",
        "adam": "keras.optimizers.Adam(learning_rate, beta_1, beta_2, epsilon, weight_decay)",
        "adamw": "keras.optimizers.AdamW(learning_rate, weight_decay, beta_1, beta_2, epsilon)",
        "amsgrad": "keras.optimizers.Adam(learning_rate, beta_1, beta_2, epsilon, amsgrad=True, "
        "weight_decay)",
        "rmsprop": "keras.optimizers.RMSprop(learning_rate, rho, momentum, epsilon, centered, "
        "weight_decay)",
        "adagrad": "keras.optimizers.Adagrad(learning_rate, initial_accumulator_value, epsilon, "
        "weight_decay)",
        "lamb": "keras.optimizers.Lamb(learning_rate, beta_1, beta_2, epsilon, weight_decay)",
    }
    unsupported_optimizers: ClassVar[dict[str, str]] = {
        "lars": "Keras 3 has no LARS (the TF Model Garden's tfm.optimization has one)",
    }
    #: Keras' optimizers that differ from the paper their documentation cites (measured:
    #: docs/studies/optimizer-differences.md, rows 4 and 15)
    documented_differences: ClassVar[dict[str, DocumentedDifference]] = {
        "adamw": DocumentedDifference(
            "Keras AdamW decays by lr*wd*p, not the cited paper's wd*p",
            "https://keras.io/api/optimizers/adamw/; docs/studies/optimizer-differences.md row 4",
        ),
        "lamb": DocumentedDifference(
            "Keras Lamb decays outside the trust ratio, not inside as the cited paper",
            "https://keras.io/api/optimizers/lamb/; docs/studies/optimizer-differences.md row 15",
        ),
    }
    optimizer_implementations: ClassVar[dict[str, str]] = {
        "eager": "optimizer.apply_gradients run eagerly, op by op",
        "function": "optimizer.apply_gradients in a tf.function (a graph, no XLA: Model.fit's "
        "default on a CPU)",
        "xla": "optimizer.apply_gradients in a tf.function(jit_compile=True)",
    }
    optimizer_hyperparameters: ClassVar[dict[str, frozenset[str]]] = {
        "sgd": _SGD,
        "momentum": _SGD | {"momentum"},
        "nesterov": _SGD | {"momentum"},
        "adam": _ADAM,
        "adamw": _ADAM,
        "amsgrad": _ADAM,
        "rmsprop": frozenset({"lr", "rho", "momentum", "eps", "centered", "weight_decay"}),
        "adagrad": frozenset({"lr", "initial_accumulator", "eps", "weight_decay"}),
        "lamb": _ADAM,
    }
    optimizer_dtypes: ClassVar[dict[str, str]] = {
        "fp32": "float32 variables and slots",
        "bf16": "bfloat16 variables and slots (Keras keeps no fp32 master copy)",
        "fp16": "float16 variables and slots (Keras keeps no fp32 master copy)",
    }

    def optimizer_build(self, spec: Any, params: Mapping[str, np.ndarray]) -> Any:
        return KerasOptimizer(
            self.tf, self.keras, self.device_name, self._dtypes[spec.dtype], spec, params
        )
