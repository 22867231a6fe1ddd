"""The operator-benchmark contract. Framework-neutral: NumPy and the adapter words only."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from suite.adapters.base import Adapter, Tensor
from suite.errors import ConfigError

Params = dict[str, Any]


@dataclass(frozen=True)
class SizeSpec:
    """One parameter set and the network it is taken from."""

    params: Params
    source: str


@dataclass(frozen=True)
class Field:
    """A benchmark parameter: its type, whether it must be positive, or its allowed values."""

    type: type
    positive: bool = True
    choices: tuple[Any, ...] | None = None
    default: Any = None


class OperatorBenchmark(ABC):
    """A framework-neutral operator benchmark.

    Subclasses declare ``name``, ``fields`` and ``words`` (the adapter words ``build`` uses),
    the ``quick`` and ``full`` sizes, and implement inputs, reference, build, flops, bytes.
    """

    level: ClassVar[str] = "operator"
    name: ClassVar[str]
    summary: ClassVar[str]
    fields: ClassVar[dict[str, Field]]
    words: ClassVar[frozenset[str]]
    #: the input holding the cotangent (output gradient) of a backward benchmark
    cotangent: ClassVar[str] = "dy"
    #: multiplies the dtype tolerance (operators known to be ill-conditioned)
    tolerance_scale: ClassVar[float] = 1.0

    # -- parameters --------------------------------------------------------------------------
    @abstractmethod
    def sizes(self, size_set: str) -> list[SizeSpec]:
        """Parameter sets for ``size_set`` ("quick" or "full")."""

    def reduction_length(self, params: Params, output: str) -> int:
        """The longest sum that one element of ``output`` accumulates (a GEMM's k): its
        tolerance grows with it (``metrics.tolerance_for``). 1: no long sum."""
        return 1

    def validate(self, params: Mapping[str, Any]) -> Params:
        """Check and complete ``params``; a ConfigError names the bad field and the fix."""
        unknown = set(params) - set(self.fields)
        if unknown:
            raise ConfigError(
                f"{self.name}: unknown parameter {sorted(unknown)[0]!r}; "
                f"known: {', '.join(self.fields)}"
            )
        out: Params = {}
        for key, spec in self.fields.items():
            if key not in params:
                if spec.default is None:
                    raise ConfigError(
                        f"{self.name}: parameter {key!r} is missing; set {key} = <{spec.type.__name__}>"
                    )
                out[key] = spec.default
                continue
            value = params[key]
            if spec.type is int and (isinstance(value, bool) or not isinstance(value, int)):
                raise ConfigError(f"{self.name}.{key}: expected an integer, got {value!r}")
            if spec.type is bool and not isinstance(value, bool):
                raise ConfigError(f"{self.name}.{key}: expected true or false, got {value!r}")
            if spec.type is str and not isinstance(value, str):
                raise ConfigError(f"{self.name}.{key}: expected a string, got {value!r}")
            if spec.choices is not None and value not in spec.choices:
                raise ConfigError(
                    f"{self.name}.{key}: {value!r} is not one of {list(spec.choices)}"
                )
            if spec.type is int and spec.positive and value <= 0:
                raise ConfigError(f"{self.name}.{key}: must be a positive integer, got {value}")
            if spec.type is int and not spec.positive and value < 0:
                raise ConfigError(f"{self.name}.{key}: must be >= 0, got {value}")
            out[key] = value
        self.check(out)
        return out

    def check(self, params: Params) -> None:
        """Cross-field checks (e.g. a kernel larger than the padded input)."""
        return None

    def label(self, params: Params) -> str:
        return " ".join(f"{k}={v}" for k, v in params.items())

    # -- data --------------------------------------------------------------------------------
    @abstractmethod
    def inputs(self, params: Params, rng: np.random.Generator) -> dict[str, np.ndarray]:
        """Seeded float64 inputs (never zeros), before rounding to the task dtype."""

    @abstractmethod
    def reference(self, params: Params, x: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Float64 outputs computed with NumPy from the (already quantised) inputs."""

    @abstractmethod
    def build(
        self, adapter: Adapter, params: Params, t: Mapping[str, Tensor]
    ) -> Callable[[], dict[str, Tensor]]:
        """The timed callable: native work only, returning the outputs to check."""

    def needs(self, params: Params) -> frozenset[str]:
        """The adapter words this parameter set uses (``words`` plus e.g. ``vjp`` for backward)."""
        return self.words | ({"vjp"} if self.grad_pairs(params) else frozenset())

    def gradcheck_params(self, params: Params) -> Params:
        """A small parameter set of the same kind for the finite-difference gradient check
        (DESIGN: gradients are checked on small shapes; the task's own size is checked
        against the analytic float64 reference)."""
        return params

    def grad_pairs(self, params: Params) -> dict[str, str]:
        """For a backward benchmark: output name -> the input it is the gradient of."""
        return {}

    def forward_fn(self, params: Params) -> Callable[..., np.ndarray] | None:
        """For a backward benchmark: the float64 forward ``f(**inputs)`` whose vector-Jacobian
        products the outputs are, for the central-finite-difference gradient check."""
        return None

    # -- work --------------------------------------------------------------------------------
    @abstractmethod
    def flops(self, params: Params) -> float:
        """Floating-point operations of one call (FMA = 2)."""

    @abstractmethod
    def bytes_moved(self, params: Params, itemsize: int) -> float:
        """Fewest bytes one call must move: each input read once, each output written once."""
