"""The suite's optimizers by name: which rule family each is, the hyperparameters it takes, the
values every framework is given (the same nominal values everywhere), and the implementation
names adapters may declare.

A *suite optimizer* (``sgd``, ``momentum``, ``nesterov``, ``adam``, ``adamw``, ``amsgrad``,
``rmsprop``, ``adagrad``, ``lamb``, ``lars``) is one rule family of :mod:`.rules` with some
hyperparameters fixed by the name (``nesterov`` is SGD with ``nesterov = true``; ``sgd`` is SGD
without momentum). Its hyperparameters are the family's, less the fixed ones; every framework is
given the same values, the suite's defaults below unless the user sets them, so a difference
between two frameworks' records is a difference of rule, never of defaults (the frameworks'
own defaults differ: docs/studies/optimizer-differences.md, row 22).

Bad input is one :class:`~suite.errors.ConfigError` naming the field: an unknown optimizer, a
hyperparameter the optimizer has in no framework (``momentum`` on ``adam``), a fixed one
(``momentum = 0.5`` on ``sgd``), a value its rule refuses (a negative learning rate). A
hyperparameter the suite knows for the optimizer but a framework lacks is that framework's
declaration (:class:`suite.adapters.optimizer_words.OptimizerWords`): a skipped record.

NumPy-free, framework-free: importable anywhere.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from suite.errors import ConfigError
from suite.optimizers.rules import FAMILIES, Rule, make


@dataclass(frozen=True)
class Optimizer:
    """A suite optimizer: its rule family, the hyperparameters its name fixes, and the
    suite's values for the others."""

    name: str
    family: str
    summary: str
    #: hyperparameters the name fixes (not settable)
    fixed: dict[str, Any] = field(default_factory=dict)
    #: the suite's values (every framework gets them), over the family's defaults
    defaults: dict[str, Any] = field(default_factory=dict)
    #: hyperparameters that must stay strictly positive (``momentum`` is what the name means)
    positive: tuple[str, ...] = ()

    @property
    def hyperparameters(self) -> tuple[str, ...]:
        """The settable hyperparameters, in the family's order."""
        return tuple(k for k in FAMILIES[self.family].defaults if k not in self.fixed)

    def complete(self, hyper: Mapping[str, Any], where: str = "") -> dict[str, Any]:
        """``hyper`` checked and completed with the suite's values (fixed ones included).
        A ConfigError names ``<where>.<key>`` and the fix."""
        at = f"{where}." if where else ""
        if not isinstance(hyper, Mapping):
            raise ConfigError(f"{at}hyper: give a table of hyperparameters, got {hyper!r}")
        for key in hyper:
            if key in self.fixed:
                if hyper[key] == self.fixed[key]:
                    continue  # a completed set of hyperparameters, validated again
                raise ConfigError(
                    f"{at}hyper.{key}: {self.name} fixes {key} = {self.fixed[key]!r} "
                    f"({self.summary}); choose another optimizer to change it"
                )
            if key not in self.hyperparameters:
                raise ConfigError(
                    f"{at}hyper.{key}: {self.name} has no hyperparameter {key!r} in any "
                    f"framework; known: {', '.join(self.hyperparameters)}"
                )
        family_defaults = FAMILIES[self.family].defaults
        out = {
            k: (
                self.fixed[k]
                if k in self.fixed
                else hyper[k]
                if k in hyper
                else self.defaults.get(k, family_defaults[k])
            )
            for k in family_defaults
        }
        for key in self.positive:
            value = out[key]
            if isinstance(value, int | float) and not isinstance(value, bool) and value <= 0:
                raise ConfigError(
                    f"{at}hyper.{key}: {self.name} needs {key} > 0, got {value!r} "
                    f"(use {'sgd' if self.family == 'sgd' else 'another optimizer'} without it)"
                )
        try:
            rule = make(self.family, **out)  # the rule's own checks (ranges, lr > 0)
        except ConfigError as exc:
            raise ConfigError(f"{at}hyper: {exc}") from None
        return dict(rule.hyper)

    def rule(self, hyper: Mapping[str, Any], variant: Mapping[str, str] | None = None) -> Rule:
        """The rule of ``variant`` at the completed hyperparameters ``hyper``."""
        return make(self.family, variant, **dict(hyper))


OPTIMIZERS: dict[str, Optimizer] = {
    o.name: o
    for o in (
        Optimizer(
            "sgd",
            "sgd",
            "plain SGD, no momentum",
            fixed={"momentum": 0.0, "dampening": 0.0, "nesterov": False},
            defaults={"lr": 0.01},
        ),
        Optimizer(
            "momentum",
            "sgd",
            "SGD with (heavy-ball) momentum",
            fixed={"nesterov": False},
            defaults={"lr": 0.01, "momentum": 0.9},
            positive=("momentum",),
        ),
        Optimizer(
            "nesterov",
            "sgd",
            "SGD with Nesterov momentum",
            fixed={"nesterov": True, "dampening": 0.0},
            defaults={"lr": 0.01, "momentum": 0.9},
            positive=("momentum",),
        ),
        Optimizer(
            "adam",
            "adam",
            "Adam (weight_decay: each framework's own meaning of Adam's weight decay)",
            defaults={"lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8},
        ),
        Optimizer(
            "adamw",
            "adam",
            "AdamW: Adam with decoupled weight decay",
            defaults={"lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.01},
        ),
        Optimizer(
            "amsgrad",
            "adam",
            "AMSGrad: Adam with the maximum of the second moments",
            defaults={"lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8},
        ),
        Optimizer(
            "rmsprop",
            "rmsprop",
            "RMSprop (centred and with momentum where set)",
            defaults={"lr": 1e-3, "rho": 0.9, "eps": 1e-8},
        ),
        Optimizer(
            "adagrad",
            "adagrad",
            "Adagrad",
            defaults={"lr": 0.01, "eps": 1e-7, "initial_accumulator": 0.0},
        ),
        Optimizer(
            "lamb",
            "lamb",
            "LAMB: Adam's direction scaled by a per-tensor trust ratio",
            defaults={"lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "eps": 1e-6, "weight_decay": 0.01},
        ),
        Optimizer(
            "lars",
            "lars",
            "LARS: SGD with momentum and a per-tensor trust ratio",
            defaults={"lr": 0.1, "momentum": 0.9, "weight_decay": 1e-4, "trust_coefficient": 1e-3},
        ),
    )
}

#: every implementation name an adapter may declare (``OptimizerWords.optimizer_implementations``);
#: ``all`` (the benchmark's default) runs each one the adapter has for the optimizer
IMPLEMENTATIONS: dict[str, str] = {
    "forloop": "one kernel per tensor and operation (PyTorch foreach=False)",
    "foreach": "multi-tensor kernels, one per operation over every tensor (PyTorch foreach=True)",
    "fused": "one fused kernel per step over every tensor (PyTorch fused=True)",
    "eager": "the optimizer's update run op by op, as the framework dispatches it",
    "function": "the update traced into a graph without XLA (tf.function)",
    "xla": "the update compiled with XLA (tf.function(jit_compile=True))",
    "jit": "the update and its application compiled into one function by the framework's "
    "compiler (jax.jit: XLA)",
    "single": "one fused operator per tensor (MXNet's Updater, one index at a time)",
    "aggregated": "multi-tensor operators over groups of tensors (MXNet's Updater with lists: "
    "multi_sgd_mom_update, multi_lamb_update, ...)",
}
ALL = "all"


def get(name: str, where: str = "optimizer") -> Optimizer:
    """The suite optimizer ``name``; an unknown name is one ConfigError listing the known."""
    try:
        return OPTIMIZERS[name]
    except (KeyError, TypeError):
        raise ConfigError(
            f"{where}: {name!r} is not an optimizer; choose one of {', '.join(OPTIMIZERS)}"
        ) from None


def is_neutral(optimizer: Optimizer, key: str, value: Any) -> bool:
    """Whether ``value`` of hyperparameter ``key`` is what a framework without that
    hyperparameter does: the family's default (no dampening, no eps_root, no initial
    accumulator or scale, no lr decay, no trust-ratio bounds, no weight decay)."""
    return bool(value == FAMILIES[optimizer.family].defaults[key])
