"""The backward direction shared by the operator benchmarks: a ``direction`` field, the size
sets' forward and backward pairs, and the timed callable of a backward benchmark (the adapter's
``vjp`` of its forward word: only the backward pass is timed, as conv2d's has always been)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from suite.adapters.base import Adapter, Tensor
from suite.params import Field, Params, SizeSpec, value

#: forward (the default, left out of a record's parameters: records of earlier versions, which
#: had no backward, keep their identity) or backward
DIRECTION = Field(str, choices=("forward", "backward"), default="forward", implicit=True)


def is_backward(params: Params) -> bool:
    return bool(value({"direction": DIRECTION}, params, "direction") == "backward")


def directions(specs: Sequence[SizeSpec]) -> list[SizeSpec]:
    """Each size forward, then backward."""
    return [
        SizeSpec({**s.params, "direction": d} if d == "backward" else dict(s.params), s.source)
        for s in specs
        for d in ("forward", "backward")
    ]


def backward_build(
    adapter: Adapter,
    forward: Callable[..., Tensor],
    t: Mapping[str, Tensor],
    grads: Mapping[str, str],
    cotangent: str,
) -> Callable[[], dict[str, Tensor]]:
    """The timed callable of a backward benchmark: ``forward(**primals)`` recorded once by
    ``adapter.vjp``, each call computing the gradients ``grads`` (output name -> the input it
    is the gradient of; the other inputs but the cotangent are held constant)."""
    wanted = list(grads.items())
    primals = {name: t[name] for _, name in wanted}
    constants = {k: v for k, v in t.items() if k not in primals and k != cotangent}

    def fn(**args: Tensor) -> Tensor:
        return forward(**constants, **args)

    backward = adapter.vjp(fn, primals, t[cotangent])
    outputs = [out for out, _ in wanted]

    def run() -> dict[str, Tensor]:
        return dict(zip(outputs, backward(), strict=True))  # in the order of the primals

    return run
