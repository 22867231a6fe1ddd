"""The network level settles fp16's dynamic loss scale before it measures (execute.py), and
counts the measured steps the scaler still skipped. A scripted adapter stands in for a
framework's scaler here; the conformance kit runs the real ones."""

from __future__ import annotations

import importlib
from typing import Any

import numpy as np

# the package exports the function `execute`, which hides the module of that name
E = importlib.import_module("suite.levels.network.run")


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


def test_one_skipped_step_is_allowed_in_a_short_measurement() -> None:
    """One skip is the scaler doing its job: in 8 measured steps (12.5%) it passes, two fail."""
    s = ScriptedScaler(fits=16.0)
    got = E._settle_loss_scale(s, None, s.step)  # type: ignore[arg-type]
    assert got is not None
    s.fits = 8.0
    for _ in range(8):
        s.step()
    check = E._skipped_steps_check(s, None, got, 8)  # type: ignore[arg-type]
    assert check.passed and check.error == 0.125 and check.tolerance == 0.125
    assert check.detail == {"skipped": 1, "measured_steps": 8, "scale_settled": 16.0,
                            "scale_after": 8.0}  # fmt: skip
    s.fits = 4.0
    s.step()
    assert not E._skipped_steps_check(s, None, got, 8).passed  # type: ignore[arg-type]


def test_no_loss_scale_no_settling() -> None:
    class NoScaler(ScriptedScaler):
        def loss_scale(self, net: Any) -> None:  # type: ignore[override]
            return None

    s = NoScaler(fits=1.0)
    assert E._settle_loss_scale(s, None, s.step) is None  # type: ignore[arg-type]
    assert s.steps == 0


def test_the_finite_loss_check_names_the_first_nonfinite_step() -> None:
    """A failure explains itself: which step (counted from the first training step, the
    loss-scale settling included) first had a non-finite loss, and the loss before it."""
    losses = np.array([2.3, 2.3, 1.2, 0.5, np.nan, np.inf, np.nan])
    check = E.finite_losses_check(losses, settle_steps=2)
    assert not check.passed and check.error == 3
    assert check.detail == {
        "steps": 7,
        "first_nonfinite_step": 4,
        "loss_scale_settle_steps": 2,
        "last_finite_loss": 0.5,
    }
    first = E.finite_losses_check(np.array([np.nan, 1.0]))
    assert first.detail is not None and first.detail["first_nonfinite_step"] == 0
    assert first.detail["last_finite_loss"] is None
    ok = E.finite_losses_check(np.array([2.3, 1.0, 0.4]))
    assert ok.passed and ok.error == 0
    assert ok.detail == {"steps": 3, "first_nonfinite_step": None}
