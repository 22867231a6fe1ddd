"""The parameter sets an optimizer is driven over and the seeded gradients it is given.

A *parameter set* is either a zoo network's trainable tensors with their initial values (the
same seeded initializers every framework loads at the network level:
:mod:`suite.onnx.zoo`) or one flat tensor of a given size. Gradients are generated
by the suite, identical in every framework's environment: step ``k`` of tensor ``name`` comes
from ``numpy.random.default_rng([seed, crc32(name), k])``, so a tensor's gradients depend on
nothing else (not on the other tensors, not on the order they are asked for).

Gradient values are ``sign * 10**u`` with ``u`` uniform in ``[log10(low), log10(high)]`` and a
random sign: never zero, and spread over several decades on purpose, so that the small
gradients where epsilon's placement matters (``sqrt(v)`` near ``eps``) are present in every
tensor. They are float32 (exactly representable in the frameworks' fp32 tensors); for a bf16
or fp16 run, :func:`suite.dtypes.quantize` gives the values those tensors hold.

NumPy and onnx only (the zoo's graphs): importable on the host and in every environment.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from suite.errors import ConfigError

#: the default gradient magnitude range (see the module docstring)
LOW, HIGH = 1e-7, 1e-1


@dataclass(frozen=True)
class ParameterSet:
    """Named tensors with their initial values (float32) and where they come from."""

    source: str
    params: dict[str, np.ndarray]

    @property
    def count(self) -> int:
        """The number of scalar parameters."""
        return sum(int(p.size) for p in self.params.values())

    @property
    def shapes(self) -> dict[str, tuple[int, ...]]:
        return {name: tuple(p.shape) for name, p in self.params.items()}


def _trainable(name: str) -> bool:
    # the zoo's conventions: constants start with "const.", BatchNorm statistics end in
    # ".running_mean" / ".running_var" (suite/onnx/zoo.py)
    return not name.startswith("const.") and not name.endswith((".running_mean", ".running_var"))


def zoo_parameters(network: str, size_set: str = "quick", seed: int = 0) -> ParameterSet:
    """The trainable tensors of zoo network ``network`` at its first ``size_set`` size, with
    the initial values the network level loads (float32, seeded by ``seed``)."""
    from onnx import numpy_helper

    from suite.onnx import zoo

    net = zoo.get(network)
    spec = net.sizes(size_set)[0]
    model = net.build(spec.params, seed=seed)
    params: dict[str, np.ndarray] = {}
    for init in model.graph.initializer:
        if not _trainable(init.name):
            continue
        arr = numpy_helper.to_array(init)
        if arr.dtype != np.float32:
            continue
        params[init.name] = np.array(arr, dtype=np.float32)
    return ParameterSet(f"zoo:{network}:{size_set} ({spec.source})", params)


def flat_parameters(size: int, seed: int = 0) -> ParameterSet:
    """One tensor ``"flat"`` of ``size`` elements, values 0.05 * normal (never zero)."""
    if isinstance(size, bool) or not isinstance(size, int) or size <= 0:
        raise ConfigError(f"parameter set size: must be a positive integer, got {size!r}")
    rng = np.random.default_rng([seed, zlib.crc32(b"flat"), 0xFFFFFFFF])
    p = rng.standard_normal(size, dtype=np.float32) * np.float32(0.05)
    p[p == 0] = np.float32(1e-4)
    return ParameterSet(f"flat:{size}", {"flat": p})


def canonical_spec(spec: Any, where: str, *, bare: bool = False) -> str:
    """``spec`` as ``flat:<size>`` or ``zoo:<network>:<quick|full>``, its syntax checked (the
    network is not looked up); ``zoo:<network>`` is the quick set, and with ``bare`` a network
    name alone means its full size."""
    usage = "zoo:<network>[:quick|full] (mlp, resnet50, transformer, ...) or flat:<size>"
    if not isinstance(spec, str) or not spec:
        raise ConfigError(f"{where}: give {usage}, got {spec!r}")
    kind, _, rest = spec.partition(":")
    if kind == "flat":
        try:
            size = int(rest.replace("_", ""))
        except ValueError:
            raise ConfigError(f"{where}: {spec!r}: flat:<size>, e.g. flat:1048576") from None
        if not 0 < size <= 1 << 31:
            raise ConfigError(f"{where}: {spec!r}: the size must be from 1 to 2^31")
        return f"flat:{size}"
    if kind == "zoo" and rest:
        network, _, size_set = rest.partition(":")
    elif bare and kind == spec:
        network, size_set = spec, "full"
    else:
        raise ConfigError(f"{where}: {spec!r}: use {usage}")
    size_set = size_set or "quick"
    if size_set not in ("quick", "full"):
        raise ConfigError(f"{where}: {spec!r}: the zoo size set is quick or full")
    return f"zoo:{network}:{size_set}"


def parameter_set(spec: str, seed: int = 0) -> ParameterSet:
    """``zoo:<network>[:quick|full]`` (e.g. ``zoo:resnet50:full``) or ``flat:<size>``."""
    kind, _, rest = canonical_spec(spec, "parameter set").partition(":")
    if kind == "flat":
        return flat_parameters(int(rest), seed)
    network, _, size_set = rest.partition(":")
    return zoo_parameters(network, size_set, seed)


def tensor_gradient(
    name: str,
    shape: tuple[int, ...],
    step: int,
    seed: int = 0,
    low: float = LOW,
    high: float = HIGH,
) -> np.ndarray:
    """The float32 gradient of tensor ``name`` at step ``step`` (from 1)."""
    if step < 1:
        raise ValueError(f"steps count from 1, got {step}")
    if not (0 < low <= high and math.isfinite(high)):
        raise ConfigError(f"gradient range: need 0 < low <= high, got {low!r}, {high!r}")
    rng = np.random.default_rng([seed, zlib.crc32(name.encode()), step])
    exponent = rng.uniform(math.log10(low), math.log10(high), size=shape)
    sign = np.where(rng.random(shape) < 0.5, -1.0, 1.0)
    return (sign * 10.0**exponent).astype(np.float32)


def gradients(
    shapes: Mapping[str, tuple[int, ...]],
    step: int,
    seed: int = 0,
    low: float = LOW,
    high: float = HIGH,
) -> dict[str, np.ndarray]:
    """Step ``step``'s gradients for every tensor of ``shapes``."""
    return {
        name: tensor_gradient(name, tuple(shape), step, seed, low, high)
        for name, shape in shapes.items()
    }
