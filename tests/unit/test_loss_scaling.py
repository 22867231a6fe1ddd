"""The network level settles fp16's dynamic loss scale before it measures (execute.py), and
counts the measured steps the scaler still skipped. A scripted adapter stands in for a
framework's scaler here; the conformance kit runs the real ones."""

from __future__ import annotations

import importlib
from typing import Any

# the package exports the function `execute`, which hides the module of that name
E = importlib.import_module("suite.levels.network.execute")


class ScriptedScaler:
    """A loss scaler whose steps overflow while the scale is above ``fits`` (halved each time,
    as torch.amp.GradScaler and the JAX and Keras scalers do)."""

    def __init__(self, fits: float, initial: float = 2.0**16) -> None:
        self.scale, self.fits, self.steps, self.skipped = initial, fits, 0, 0

    def loss_scale(self, net: Any) -> float:
        return self.scale

    def to_numpy(self, t: Any) -> Any:
        return t

    def step(self) -> float:
        self.steps += 1
        if self.scale > self.fits:
            self.scale /= 2
            self.skipped += 1
        return 1.0


def test_settles_after_the_overflowing_steps() -> None:
    s = ScriptedScaler(fits=16.0)
    got = E._settle_loss_scale(s, None, s.step)  # type: ignore[arg-type]
    assert got is not None
    # 65536 -> 16 is 12 halvings (12 skipped steps), then two steps that keep the scale
    assert got == {"initial": 65536.0, "settled": 16.0, "settle_steps": 14, "settled_ok": True}
    assert s.skipped == 12


def test_never_settling_is_reported_and_fails_the_check() -> None:
    s = ScriptedScaler(fits=0.0)  # every step overflows, as a network with a NaN forward does
    got = E._settle_loss_scale(s, None, s.step)  # type: ignore[arg-type]
    assert got is not None and got["settled_ok"] is False
    assert got["settle_steps"] == E.LOSS_SCALE_SETTLE_MAX_STEPS
    for _ in range(10):  # the measured steps: all skipped
        s.step()
    check = E._skipped_steps_check(s, None, got, 10)  # type: ignore[arg-type]
    assert got["skipped_measured_steps"] == 10
    assert check.error == 1.0 and not check.passed


def test_skipped_share_of_measured_steps() -> None:
    s = ScriptedScaler(fits=16.0)
    got = E._settle_loss_scale(s, None, s.step)  # type: ignore[arg-type]
    assert got is not None
    s.fits = 8.0  # one more overflow during the measurement: 1 step in 20 skipped
    for _ in range(20):
        s.step()
    check = E._skipped_steps_check(s, None, got, 20)  # type: ignore[arg-type]
    assert got["skipped_measured_steps"] == 1 and check.error == 0.05 and check.passed
    s.fits = 2.0  # two more in 10: over the 10% tolerance
    for _ in range(10):
        s.step()
    assert not E._skipped_steps_check(s, None, got, 10).passed  # type: ignore[arg-type]


def test_no_loss_scale_no_settling() -> None:
    class NoScaler(ScriptedScaler):
        def loss_scale(self, net: Any) -> None:  # type: ignore[override]
            return None

    s = NoScaler(fits=1.0)
    assert E._settle_loss_scale(s, None, s.step) is None  # type: ignore[arg-type]
    assert s.steps == 0
