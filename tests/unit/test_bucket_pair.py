"""benchmarks/studies/bucket_pair.py: the paired ratio and its interval decide a real effect
and leave none undecided (the study itself needs two gloo ranks: docs/guide/projection.md)."""

from __future__ import annotations

import numpy as np

from benchmarks.studies.bucket_pair import paired_ratio


def test_a_paired_ratio_finds_a_shift_that_drift_would_hide() -> None:
    rng = np.random.default_rng(3)
    drift = np.exp(np.cumsum(rng.normal(0, 0.02, 300)))  # the machine slows and speeds up
    a = 0.10 * drift * np.exp(rng.normal(0, 0.01, 300))
    b = 0.09 * drift * np.exp(rng.normal(0, 0.01, 300))  # 10% faster in every pair
    s = paired_ratio(a, b)
    assert 0.88 < s["ratio"] < 0.92 and s["ci95"][1] < 1.0
    same = paired_ratio(a, a * np.exp(rng.normal(0, 0.01, 300)))
    assert same["ci95"][0] <= 1.0 <= same["ci95"][1]
