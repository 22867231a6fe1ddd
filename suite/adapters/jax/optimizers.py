"""optax's optimizers for the training level's optimizer benchmark.

The declarations are plain data (read on the host, no JAX import); :class:`OptaxOptimizer`
(built in the worker) runs the optimizer's ``update`` and ``optax.apply_updates`` in one
``jax.jit`` (``jit``: how optax is used), over a dict of arrays. optax's optimizers take no
weight decay except ``adamw``, ``lamb`` and ``lars``; for the others the documented way is a
chain, ``optax.chain(optax.add_decayed_weights(wd), <optimizer>)``, which adds ``wd * p`` to
the gradient (L2), and that chain is what runs where the suite's ``weight_decay`` is set. The
learning rate is an injected hyperparameter (``optax.inject_hyperparams``), so a schedule
changes it without recompiling. optax keeps no fp32 master copy: bf16/fp16 parameters are
stepped in their own dtype (its moments follow the parameters' dtype).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from suite.adapters.optimizer_words import OptimizerHandle, OptimizerWords

_CHAIN = " (chained after optax.add_decayed_weights(weight_decay) where weight_decay is set)"
_ADAM = frozenset({"lr", "beta1", "beta2", "eps", "eps_root", "weight_decay"})


def make(optax: Any, optimizer: str, hyper: Mapping[str, Any], learning_rate: Any) -> Any:
    """The optax GradientTransformation for the suite's ``hyper`` at ``learning_rate``."""
    h = hyper
    wd = h["weight_decay"]

    def with_decay(inner: Any) -> Any:
        return optax.chain(optax.add_decayed_weights(wd), inner) if wd else inner

    if optimizer in ("sgd", "momentum", "nesterov"):
        return with_decay(
            optax.sgd(learning_rate, momentum=h["momentum"] or None, nesterov=h["nesterov"])
        )
    adam = {"b1": h.get("beta1"), "b2": h.get("beta2"), "eps": h["eps"]}
    if optimizer == "adam":
        return with_decay(optax.adam(learning_rate, eps_root=h["eps_root"], **adam))
    if optimizer == "adamw":
        return optax.adamw(learning_rate, eps_root=h["eps_root"], weight_decay=wd, **adam)
    if optimizer == "amsgrad":
        return with_decay(optax.amsgrad(learning_rate, eps_root=h["eps_root"], **adam))
    if optimizer == "lamb":
        return optax.lamb(learning_rate, weight_decay=wd, **adam)
    if optimizer == "rmsprop":
        return with_decay(
            optax.rmsprop(
                learning_rate,
                decay=h["rho"],
                eps=h["eps"],
                initial_scale=h["initial_scale"],
                centered=h["centered"],
                momentum=h["momentum"] or None,
            )
        )
    if optimizer == "adagrad":
        return with_decay(
            optax.adagrad(
                learning_rate, initial_accumulator_value=h["initial_accumulator"], eps=h["eps"]
            )
        )
    if optimizer == "lars":
        return optax.lars(
            learning_rate,
            weight_decay=wd,
            trust_coefficient=h["trust_coefficient"],
            eps=h["eps"],
            momentum=h["momentum"],
            nesterov=h["nesterov"],
        )
    raise KeyError(optimizer)


class OptaxOptimizer(OptimizerHandle):
    """An optax optimizer, its state and its parameters (the optimizer words' handle)."""

    def __init__(
        self, jax: Any, device: Any, dtype: Any, spec: Any, params: Mapping[str, np.ndarray]
    ) -> None:
        import optax

        self.jax, self.jnp, self.device, self.dtype = jax, jax.numpy, device, dtype
        self.names = list(spec.names)
        self.params = {
            n: jax.device_put(np.asarray(params[n], dtype=np.float32), device).astype(dtype)
            for n in self.names
        }

        def factory(learning_rate: Any) -> Any:
            return make(optax, spec.optimizer, spec.hyper, learning_rate)

        self.optimizer = optax.inject_hyperparams(factory)(learning_rate=spec.hyper["lr"])
        self.state = jax.device_put(self.optimizer.init(self.params), device)
        self.grads: dict[str, Any] = {}

        def step(params: Any, state: Any, grads: Any) -> Any:
            updates, state = self.optimizer.update(grads, state, params)
            return optax.apply_updates(params, updates), state

        on_gpu = getattr(device, "platform", "cpu") != "cpu"
        # donating the old parameters and state lets XLA update them in place (GPUs); the CPU
        # backend ignores donation with a warning
        self._step = jax.jit(step, donate_argnums=(0, 1) if on_gpu else ())

    def set_gradients(self, grads: Mapping[str, np.ndarray]) -> None:
        self.grads = {
            n: self.jax.device_put(np.asarray(grads[n], dtype=np.float32), self.device).astype(
                self.dtype
            )
            for n in self.names
        }

    def set_lr(self, lr: float) -> None:
        current = self.state.hyperparams["learning_rate"]
        self.state.hyperparams["learning_rate"] = self.jax.device_put(
            self.jnp.asarray(lr, dtype=current.dtype), self.device
        )

    def step(self) -> Any:
        self.params, self.state = self._step(self.params, self.state, self.grads)
        return self.params

    def parameters(self, master: bool = False) -> dict[str, np.ndarray]:
        return {n: np.asarray(self.params[n], dtype=np.float64) for n in self.names}

    def state_bytes(self) -> int:
        return int(sum(getattr(x, "nbytes", 0) for x in self.jax.tree_util.tree_leaves(self.state)))


class OptaxOptimizerWords(OptimizerWords):
    """JAX's optimizer words, optax, jitted: the declarations (class
    attributes, read on the host without a framework import) and ``optimizer_build``."""

    jax: Any
    device: Any
    _dtypes: dict[str, Any]

    optimizers: ClassVar[dict[str, str]] = {
        "sgd": "optax.sgd(learning_rate)" + _CHAIN,
        "momentum": "optax.sgd(learning_rate, momentum)" + _CHAIN,
        "nesterov": "optax.sgd(learning_rate, momentum, nesterov=True)" + _CHAIN,
        "adam": "optax.adam(learning_rate, b1, b2, eps, eps_root)" + _CHAIN,
        "adamw": "optax.adamw(learning_rate, b1, b2, eps, eps_root, weight_decay)",
        "amsgrad": "optax.amsgrad(learning_rate, b1, b2, eps, eps_root)" + _CHAIN,
        "rmsprop": "optax.rmsprop(learning_rate, decay, eps, initial_scale, centered, momentum)"
        + _CHAIN,
        "adagrad": "optax.adagrad(learning_rate, initial_accumulator_value, eps)" + _CHAIN,
        "lamb": "optax.lamb(learning_rate, b1, b2, eps, weight_decay)",
        "lars": "optax.lars(learning_rate, weight_decay, trust_coefficient, eps, momentum, nesterov)",
    }
    unsupported_optimizers: ClassVar[dict[str, str]] = {}
    optimizer_implementations: ClassVar[dict[str, str]] = {
        "jit": "the optimizer's update and optax.apply_updates in one jax.jit (XLA)",
    }
    optimizer_hyperparameters: ClassVar[dict[str, frozenset[str]]] = {
        "sgd": frozenset({"lr", "weight_decay"}),
        "momentum": frozenset({"lr", "momentum", "weight_decay"}),
        "nesterov": frozenset({"lr", "momentum", "weight_decay"}),
        "adam": _ADAM,
        "adamw": _ADAM,
        "amsgrad": _ADAM,
        "rmsprop": frozenset(
            {"lr", "rho", "eps", "initial_scale", "centered", "momentum", "weight_decay"}
        ),
        "adagrad": frozenset({"lr", "initial_accumulator", "eps", "weight_decay"}),
        "lamb": frozenset({"lr", "beta1", "beta2", "eps", "weight_decay"}),
        "lars": frozenset(
            {"lr", "weight_decay", "trust_coefficient", "eps", "momentum", "nesterov"}
        ),
    }
    optimizer_dtypes: ClassVar[dict[str, str]] = {
        "fp32": "float32 parameters and state",
        "bf16": "bfloat16 parameters (optax keeps no fp32 master copy; its moments take the "
        "parameters' dtype)",
        "fp16": "float16 parameters (optax keeps no fp32 master copy; its moments take the "
        "parameters' dtype)",
    }

    def optimizer_build(self, spec: Any, params: Mapping[str, np.ndarray]) -> Any:
        return OptaxOptimizer(self.jax, self.device, self._dtypes[spec.dtype], spec, params)
