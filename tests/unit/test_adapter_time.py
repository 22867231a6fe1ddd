"""``Adapter.time``, the loop every level's timing goes through: what it does with each call's
outputs. It is the suite's side of the comparison with a bare loop (benchmarks/validation/overhead.py),
so it must hold no output past the next call and call nothing between two calls that the
adapter does not need (docs/studies/overhead-cpu.md)."""

from __future__ import annotations

import gc
import weakref
from typing import Any

import numpy as np
import pytest

from suite.adapters.numpy.adapter import NumPyAdapter


class Out:
    """A call's result, weakly referenceable, numbered by the call that made it."""

    def __init__(self, i: int) -> None:
        self.i = i


def _calls(alive_at_call: list[int]) -> tuple[Any, list[weakref.ref[Out]]]:
    made: list[weakref.ref[Out]] = []

    def fn() -> Out:
        gc.collect()
        alive_at_call.append(sum(r() is not None for r in made))
        out = Out(len(made))
        made.append(weakref.ref(out))
        return out

    return fn, made


class Waiting(NumPyAdapter):
    waited: list[Any]

    def wait(self, outputs: Any) -> None:
        self.waited.append(outputs.i)


class Lazy(Waiting):
    """A lazy framework's adapter: its realize must see every call's outputs."""

    realized: list[int]

    def realize(self, outputs: Any) -> None:
        self.realized.append(outputs.i)


@pytest.mark.parametrize("cls", [Waiting, Lazy])
def test_no_output_outlives_the_next_call_and_the_last_is_waited_for(cls: type[Waiting]) -> None:
    adapter = cls()
    adapter.waited, adapter.realized = [], []  # type: ignore[attr-defined]
    alive: list[int] = []
    fn, made = _calls(alive)
    assert adapter.time(fn, 5) > 0
    assert alive == [0, 0, 0, 0, 0]  # each call's result was released before the next call
    assert adapter.waited == [4]  # the last call's outputs, once


def test_realize_sees_every_call_where_the_adapter_overrides_it() -> None:
    adapter = Lazy()
    adapter.waited, adapter.realized = [], []
    fn, _ = _calls([])
    adapter.time(fn, 4)
    assert adapter.realized == [0, 1, 2, 3]
    adapter.time(fn, 1)
    assert adapter.realized == [0, 1, 2, 3, 4]


def test_realize_is_not_called_where_it_does_nothing() -> None:
    """The default realize is a no-op; time() skips it, so nothing runs between two calls
    but the loop (a method call there read 0.2-0.4% slower on a CPU conv2d backward)."""
    adapter = NumPyAdapter()
    seen: list[Any] = []
    adapter.realize = seen.append  # type: ignore[method-assign]  # on the instance, not the class
    fn, _ = _calls([])
    adapter.time(fn, 3)
    assert seen == []


@pytest.mark.parametrize("n", [0, -1])
def test_fewer_than_one_call_is_refused(n: int) -> None:
    with pytest.raises(ValueError, match="at least 1"):
        NumPyAdapter().time(lambda: np.zeros(1), n)
