"""The optimizer vocabulary (mixed into :class:`~suite.adapters.base.Adapter`): each framework's
own optimizer objects, driven by the training level's ``optimizer`` benchmark.

Declarations (class attributes, readable on the host without importing the framework; an
adapter package keeps them in its ``optimizers.py``):

* ``optimizers``: suite optimizer name (:mod:`suite.optimizers.catalogue`) -> the framework's
  own class or mechanism, in one line (recorded with every result);
* ``unsupported_optimizers``: name -> why the framework has none (a skipped record). The
  conformance kit requires every suite optimizer in one of the two;
* ``optimizer_implementations``: implementation name (``catalogue.IMPLEMENTATIONS``) -> how
  the framework runs it; ``unsupported_implementations``: optimizer -> implementation -> why
  that one does not exist for it (PyTorch's RMSprop has no fused kernel);
* ``optimizer_hyperparameters``: optimizer -> the suite hyperparameters the framework's
  optimizer takes; any other must keep its neutral value (:func:`catalogue.is_neutral`), else
  the task is skipped naming it (Keras' SGD has no dampening);
* ``optimizer_dtypes``: dtype -> how the framework keeps parameters of that dtype (``"fp32"``
  alone when only fp32 runs); ``master_weights``: dtype -> the framework's fp32 master-weight
  mechanism where it has one (the low-precision parameters are then checked against one
  rounding of the fp32 reference);
* ``documented_differences``: optimizer -> a :class:`DocumentedDifference`: the framework's
  optimizer differs from the rule its own documentation states or cites, a difference the
  project has measured and published (docs/studies/optimizer-differences.md) with its upstream
  document. The benchmark still runs and the check still fails; when the implementation
  follows exactly the variant recorded as implemented (the framework folder's ``optimizers.toml``, its ``observed``),
  the check names the difference (``detail.documented_difference``), the summary shows
  "FAIL (documented difference: ...)" and the run's exit code counts it as known (like
  ``Adapter.known_bugs``; ``dlsuite run --strict`` counts it as a failure). Any other
  departure stays unexplained.

:meth:`optimizer_declined` decides from these alone, on the host (the runner skips such a task
before any environment is built) and again in the worker.

Words (worker side): ``optimizer_build(spec, params)`` makes the framework's optimizer over
tensors holding ``params`` (float arrays already rounded to ``spec.dtype``) and returns an
:class:`OptimizerHandle`, the one object an adapter writes for these words (an adapter package
keeps it in its ``optimizers.py``). The other words are written once, here: each passes the call
to the handle (``optimizer_step(handle)`` is ``handle.step()``), so the benchmark's calls stay
the adapter's words while a framework writes only its handle.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from suite.adapters.missing import missing_because
from suite.optimizers import catalogue


@dataclass(frozen=True)
class DocumentedDifference:
    """A framework optimizer's known difference from its own documentation: what (one
    sentence) and where it is documented upstream (the framework's page that states or cites
    the rule) and here."""

    what: str
    documented_in: str


@dataclass(frozen=True)
class OptimizerSpec:
    """What the benchmark asks an adapter to build: the suite optimizer, its complete
    hyperparameters (suite names), the implementation, the parameters' dtype and whether the
    framework's fp32 master weights are used."""

    optimizer: str
    hyper: dict[str, Any]
    implementation: str
    dtype: str = "fp32"
    master_weights: bool = False
    #: tensor names in the order the framework's optimizer gets them
    names: tuple[str, ...] = field(default_factory=tuple)


class OptimizerWords:
    """The optimizer vocabulary. See the module docstring."""

    optimizers: ClassVar[dict[str, str]] = {}
    unsupported_optimizers: ClassVar[dict[str, str]] = {}
    optimizer_implementations: ClassVar[dict[str, str]] = {}
    unsupported_implementations: ClassVar[dict[str, dict[str, str]]] = {}
    optimizer_hyperparameters: ClassVar[dict[str, frozenset[str]]] = {}
    optimizer_dtypes: ClassVar[dict[str, str]] = {}
    master_weights: ClassVar[dict[str, str]] = {}
    documented_differences: ClassVar[dict[str, DocumentedDifference]] = {}

    # -- host side: declarations only ------------------------------------------------------
    @classmethod
    def optimizer_implementations_for(cls, optimizer: str) -> list[str]:
        """The implementations this adapter runs ``optimizer`` with, in declaration order."""
        missing = cls.unsupported_implementations.get(optimizer, {})
        return [i for i in cls.optimizer_implementations if i not in missing]

    @classmethod
    def optimizer_declined(
        cls, optimizer: str, hyper: Mapping[str, Any], implementation: str, dtype: str
    ) -> str:
        """Why this adapter does not run ``optimizer`` with ``hyper`` (completed, suite names)
        as ``implementation`` (a name, or ``all``) in ``dtype``; "" when it does. Reads only
        the class's declarations."""
        who = getattr(cls, "name", "?")
        if optimizer in cls.unsupported_optimizers:
            return cls.unsupported_optimizers[optimizer]
        if "optimizer" not in getattr(cls, "words", frozenset({"optimizer"})):
            return f"{who} does not implement the optimizer words" + missing_because(
                cls, ["optimizer"]
            )
        if optimizer not in cls.optimizers:
            return f"{who} declares no mapping of the optimizer {optimizer!r}"
        if implementation != catalogue.ALL:
            why = cls.unsupported_implementations.get(optimizer, {}).get(implementation)
            if why:
                return why
            if implementation not in cls.optimizer_implementations:
                have = ", ".join(cls.optimizer_implementations) or "none"
                return (
                    f"{who} has no {implementation!r} implementation of its optimizers "
                    f"(it has: {have})"
                )
        elif not cls.optimizer_implementations_for(optimizer):
            return f"{who} declares no implementation of {optimizer!r}"
        spec = catalogue.get(optimizer)
        taken = cls.optimizer_hyperparameters.get(optimizer, frozenset())
        for key, value in hyper.items():
            if key in taken or key in spec.fixed or catalogue.is_neutral(spec, key, value):
                continue
            return (
                f"{who}: {cls.optimizers[optimizer]} has no hyperparameter for the suite's "
                f"{key!r} (here {value!r}); it runs only at {key} = "
                f"{catalogue.FAMILIES[spec.family].defaults[key]!r}"
            )
        if dtype not in cls.optimizer_dtypes:
            have = ", ".join(cls.optimizer_dtypes) or "none"
            return f"{who}'s optimizers do not run {dtype} parameters here (they run: {have})"
        return ""

    # -- worker side ---------------------------------------------------------------------------
    def optimizer_unavailable(self, optimizer: str, implementation: str) -> str:
        """Why ``implementation`` of ``optimizer`` does not run on the device ``setup``
        selected ("" when it does): what the class cannot know on the host (PyTorch's fused
        Adagrad runs on CPUs only). The benchmark leaves it out of ``all`` with the reason, or
        skips a task that names it."""
        return ""

    def optimizer_build(
        self, spec: OptimizerSpec, params: Mapping[str, np.ndarray]
    ) -> OptimizerHandle:
        """The framework's optimizer for ``spec`` over new tensors holding ``params``: the one
        optimizer word an adapter implements."""
        raise NotImplementedError(f"{getattr(self, 'name', '?')} has no optimizer words")

    # The words the benchmark calls on a built optimizer, written once: each is the handle's
    # method of the same meaning (see :class:`OptimizerHandle`). An adapter overrides them only
    # where a word needs more than its handle (none of the suite's do).
    def optimizer_set_gradients(
        self, handle: OptimizerHandle, grads: Mapping[str, np.ndarray]
    ) -> None:
        handle.set_gradients(grads)

    def optimizer_set_lr(self, handle: OptimizerHandle, lr: float) -> None:
        handle.set_lr(lr)

    def optimizer_step(self, handle: OptimizerHandle) -> Any:
        return handle.step()

    def optimizer_parameters(
        self, handle: OptimizerHandle, master: bool = False
    ) -> dict[str, np.ndarray]:
        return handle.parameters(master)

    def optimizer_state_bytes(self, handle: OptimizerHandle) -> int:
        return int(handle.state_bytes())


class OptimizerHandle(ABC):
    """A framework's optimizer over its own parameter tensors: what ``optimizer_build``
    returns and every other optimizer word drives. One per framework, in its package's
    ``optimizers.py`` (``TorchOptimizer``, ``KerasOptimizer``, ``OptaxOptimizer``,
    ``MXNetOptimizer``)."""

    @abstractmethod
    def set_gradients(self, grads: Mapping[str, np.ndarray]) -> None:
        """Place one step's gradients (already rounded to the parameters' dtype) on the
        device, where the next :meth:`step` finds them (outside any timed region)."""

    @abstractmethod
    def set_lr(self, lr: float) -> None:
        """The learning rate of the next steps, through the framework's own schedule
        mechanism (a param group's ``lr``, a Keras learning-rate variable, optax's injected
        hyperparameter). The conformance kit checks that it takes effect."""

    @abstractmethod
    def step(self) -> Any:
        """One step with the gradients set (the timed call); returns what the adapter's
        ``wait`` must wait for (None where the step is synchronous or ``synchronize``
        suffices)."""

    @abstractmethod
    def parameters(self, master: bool = False) -> dict[str, np.ndarray]:
        """The parameters as float64 host arrays, keyed by tensor name; with ``master`` the
        framework's fp32 master copy (asked only where ``spec.master_weights``)."""

    @abstractmethod
    def state_bytes(self) -> int:
        """Bytes of optimizer state the framework holds for the parameters (moment buffers,
        step counters, master weights), as it allocated them."""
