"""benchmarks/validation/overhead.py decides: a case's ratio interval (paired rounds, the control's spread
folded in) lies inside 0.98-1.02, excludes it, or the case is undecided with the machine's
noise named."""

from __future__ import annotations

import numpy as np

from benchmarks.validation import overhead


def rounds(ratio: float, spread: float, control: float, n: int, seed: int = 0):  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(seed)
    bare = 1e-4 * np.exp(rng.normal(0, 0.02, n))
    suite = bare * ratio * np.exp(rng.normal(0, spread, n))
    own = bare * np.exp(rng.normal(0, control, n))
    return list(suite), list(bare), list(own)


def test_a_quiet_unbiased_case_is_within() -> None:
    d = overhead.decide(*rounds(1.002, 0.003, 0.003, 8))
    assert d.verdict == "within" and 0.98 <= d.low <= d.ratio <= d.high <= 1.02


def test_a_clear_bias_is_over() -> None:
    d = overhead.decide(*rounds(1.06, 0.005, 0.005, 6))
    assert d.verdict == "over" and d.low > 1.02


def test_faster_than_bare_by_more_than_the_band_is_under() -> None:
    assert overhead.decide(*rounds(0.95, 0.004, 0.004, 6)).verdict == "under"


def test_a_noisy_control_keeps_the_case_undecided_and_names_the_noise() -> None:
    # the suite's own rounds agree, but the bare loop disagrees with itself by ~5%: a 2%
    # bias cannot be shown either way
    d = overhead.decide(*rounds(1.0, 0.003, 0.05, 6))
    assert d.verdict == "undecided"
    assert d.label.startswith("undecided: the machine's noise is ")
    assert 0.02 < d.noise < 0.12


def test_one_round_decides_nothing() -> None:
    assert overhead.decide([1.0], [1.0], [1.0]).verdict == "undecided"
