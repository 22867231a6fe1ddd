"""suite.dtypes: quantisation to each dtype, bf16 rounding checked against exact arithmetic."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from suite.dtypes import DTYPES, ITEMSIZE, check_dtype, quantize, to_bf16
from suite.errors import ConfigError


def _wide_range(n: int = 4000, seed: int = 0) -> np.ndarray:
    """Random values of both signs over many binades (normal float32 range, no overflow)."""
    rng = np.random.default_rng(seed)
    mant = rng.uniform(1.0, 2.0, size=n)
    exp = rng.integers(-100, 100, size=n)
    sign = rng.choice([-1.0, 1.0], size=n)
    return sign * np.ldexp(mant, exp)


def _bf16_exact(v: float) -> float:
    """Round a float32-representable value to bfloat16 (8 significant bits), ties to even,
    with exact rational arithmetic: independent of the bit tricks in to_bf16."""
    if v == 0.0:
        return v
    _, e = math.frexp(v)  # |v| = m 2^e with 0.5 <= m < 1: leading bit is 2^(e-1)
    # 7 explicit mantissa bits after the leading one; below 2^-126 (subnormal) a fixed spacing
    spacing = Fraction(2) ** (max(e - 1, -126) - 7)
    q = round(Fraction(v) / spacing)  # Python rounds a Fraction half to even
    return float(q * spacing)


# -- fp64 / fp32 / tf32 / fp16 -----------------------------------------------------------------


def test_fp64_is_identity() -> None:
    x = _wide_range()
    np.testing.assert_array_equal(quantize(x, "fp64"), x)
    assert quantize(x, "fp64").dtype == np.float64


@pytest.mark.parametrize("dtype", ["fp32", "tf32"])
def test_fp32_and_tf32_equal_float32_round_trip(dtype: str) -> None:
    x = _wide_range()
    q = quantize(x, dtype)
    assert q.dtype == np.float64 and q.shape == x.shape
    np.testing.assert_array_equal(q, x.astype(np.float32).astype(np.float64))
    assert not np.array_equal(q, x)  # rounding actually happened


def test_fp16_equals_float16_round_trip() -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((7, 9)) * 100.0
    q = quantize(x, "fp16")
    assert q.dtype == np.float64 and q.shape == x.shape
    np.testing.assert_array_equal(q, x.astype(np.float16).astype(np.float64))
    # fp16 has 10 explicit mantissa bits: relative error <= 2^-11 in the normal range
    assert np.max(np.abs(q - x) / np.abs(x)) <= 2.0**-11


def test_quantize_is_idempotent() -> None:
    x = _wide_range(500) * 1e-30  # keeps fp16 from overflowing: most go to 0 there, fine
    x = np.concatenate([x, np.random.default_rng(2).standard_normal(500)])
    for dtype in ("fp64", *DTYPES):
        q = quantize(x, dtype)
        np.testing.assert_array_equal(quantize(q, dtype), q)


def test_quantize_unknown_dtype() -> None:
    with pytest.raises(ValueError, match="fp8"):
        quantize(np.ones(3), "fp8")


def test_check_dtype_and_itemsize() -> None:
    for d in DTYPES:
        assert check_dtype(d) == d
    assert check_dtype("fp64") == "fp64"
    with pytest.raises(ConfigError, match="int8"):
        check_dtype("int8")
    assert ITEMSIZE == {"fp64": 8, "fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2}


# -- bf16 --------------------------------------------------------------------------------------

U = 2.0**-8  # half the bf16 spacing at 1.0 (spacing is 2^-7)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (1.0, 1.0),
        (1.0 + 2.0**-7, 1.0 + 2.0**-7),  # exactly representable
        (1.0 + U, 1.0),  # tie between 1 (even) and 1 + 2^-7 (odd): to even, down
        (1.0 + 3 * U, 1.0 + 2.0**-6),  # tie between 1 + 2^-7 (odd) and 1 + 2^-6 (even): up
        (1.0 + U + 2.0**-20, 1.0 + 2.0**-7),  # just above the tie: up
        (1.0 + U - 2.0**-20, 1.0),  # just below the tie: down
        (1.0 + 2.0**-9, 1.0),
        (2.0 - 2.0**-9, 2.0),  # rounds up into the next binade
        (-(1.0 + 3 * U), -(1.0 + 2.0**-6)),  # symmetric for negatives
        (3.0, 3.0),
        (0.1, 0.10009765625),  # 0x3DCD
        (1.0 / 3.0, 0.333984375),  # 0x3EAB
        (65504.0, 65536.0),
        (0.0, 0.0),
    ],
)
def test_bf16_known_values(value: float, expected: float) -> None:
    got = quantize(np.array([value]), "bf16")[0]
    assert got == expected, (value, got, expected)


def test_bf16_negative_zero_and_infinities() -> None:
    q = to_bf16(np.array([-0.0, np.inf, -np.inf]))
    assert q[0] == 0.0 and math.copysign(1.0, q[0]) == -1.0
    assert q[1] == np.inf and q[2] == -np.inf


def test_bf16_matches_exact_rational_rounding() -> None:
    # Start from float32 values so there is no float64 -> float32 double rounding to model.
    x = _wide_range(3000, seed=5).astype(np.float32).astype(np.float64)
    # plus exact ties and near-ties around random bf16 values
    base = quantize(_wide_range(300, seed=6), "bf16")
    _, e = np.frexp(base)
    half = np.ldexp(1.0, e - 9)  # half the spacing at base
    x = np.concatenate([x, base + half, base - half, base + 1.5 * half, base + 0.5 * half])
    x = x.astype(np.float32).astype(np.float64)
    q = quantize(x, "bf16")
    expected = np.array([_bf16_exact(float(v)) for v in x])
    mismatch = np.flatnonzero(q != expected)
    assert mismatch.size == 0, [(x[i], q[i], expected[i]) for i in mismatch[:5]]


def test_bf16_result_is_exactly_representable() -> None:
    x = _wide_range(seed=7)
    q = quantize(x, "bf16")
    f32 = q.astype(np.float32)
    np.testing.assert_array_equal(f32.astype(np.float64), q)  # exact in float32
    assert np.all((f32.view(np.uint32) & 0xFFFF) == 0)  # and low 16 bits clear
    assert q.dtype == np.float64 and q.shape == x.shape


def test_bf16_relative_error_bound() -> None:
    x = np.concatenate([_wide_range(seed=8), np.random.default_rng(9).standard_normal(4000)])
    q = quantize(x, "bf16")
    rel = np.abs(q - x) / np.abs(x)
    assert np.max(rel) <= 2.0**-8
    assert np.max(rel) > 2.0**-10  # it really rounds to 8 bits, not to float32


def test_bf16_preserves_shape_and_accepts_float32() -> None:
    q = to_bf16(np.arange(24.0).reshape(2, 3, 4) + 0.001)
    assert q.shape == (2, 3, 4)
    np.testing.assert_array_equal(to_bf16(np.array([1.0, 2.0], np.float32)), [1.0, 2.0])


def test_bf16_nan_stays_nan_whatever_its_payload() -> None:
    # NaN bit patterns with low mantissa bits set must not round into Inf or (-)0.
    patterns = np.array([0x7FC00000, 0x7F800001, 0x7FFFFFFF, 0xFFFFFFFF, 0xFF800001], np.uint32)
    q = to_bf16(patterns.view(np.float32))
    assert np.all(np.isnan(q)), q


def test_bf16_every_kind_of_float32_bit_pattern() -> None:
    """Random float32 bit patterns (subnormals, the largest finite values, infinities, NaNs):
    a finite result is the exact rounding, values past bf16's largest round to infinity with
    their sign, NaN stays NaN; the input is left as it was (to_bf16 rounds a copy in place)."""
    bits = np.random.default_rng(10).integers(0, 2**32, 20000, dtype=np.uint64).astype(np.uint32)
    bits = np.concatenate([bits, np.array([0x00000001, 0x807FFFFF, 0x7F7FFFFF, 0xFF7FFFFF,
                                           0x7F7F7FFF, 0x7F7F8000, 0x7F800000], np.uint32)])  # fmt: skip
    x = bits.view(np.float32)
    before = x.copy()
    q = to_bf16(x)
    np.testing.assert_array_equal(x.view(np.uint32), before.view(np.uint32))
    bf16_max = float(np.array([0x7F7F0000], np.uint32).view(np.float32)[0])
    with np.errstate(invalid="ignore"):  # signalling NaNs among the patterns
        wide = x.astype(np.float64)
    # The PyTorch adapter's setup (run in-process by other tests) flushes denormals for the whole
    # process: float32 subnormals then read as zero in any cast, the reference's included
    flushed = float(np.array([1], np.uint32).view(np.float32).astype(np.float64)[0]) == 0.0
    keep = ((bits & 0x7F800000) != 0) | (not flushed) | ((bits & 0x7FFFFFFF) == 0)
    assert keep.dtype == bool and keep.sum() > 19000, keep.sum()
    for v, got in zip(wide[keep], q[keep], strict=True):
        if np.isnan(v):
            assert np.isnan(got)
        elif abs(v) >= bf16_max + 2.0 ** (127 - 8):  # at or past the tie with 2**128
            assert got == math.copysign(np.inf, v), (v, got)
        else:
            assert got == _bf16_exact(float(v)), (v, got)
