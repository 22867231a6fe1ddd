"""A measured value with its interval, and the arithmetic the explanation across levels does
with them (sums, differences, ratios, shares).

The intervals of a sum or a difference are the sums of the bounds (a conservative bound, not
a confidence interval of the sum: the parts were measured separately, their errors are not
known to cancel); a ratio's runs from the lowest numerator over the highest denominator to the
other extreme. A value with no interval (an estimate from a model, or a metric recorded without
one) has lo = hi = value and says so through ``exact``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from suite.summary import fmt_seconds


@dataclass(frozen=True)
class Iv:
    """``value`` within [``lo``, ``hi``]."""

    value: float
    lo: float
    hi: float

    @classmethod
    def exact(cls, value: float) -> Iv:
        return cls(value, value, value)

    @classmethod
    def of_metric(cls, m: dict[str, Any]) -> Iv:
        """A record's metric: its median and the 95% CI of the median (the value alone when
        the metric has no CI)."""
        v = float(m["median"] if "median" in m else m["value"])
        lo, hi = m.get("ci95") or (v, v)
        return cls(v, min(float(lo), v), max(float(hi), v))

    @property
    def has_width(self) -> bool:
        return self.hi > self.lo

    def __add__(self, other: Iv) -> Iv:
        return Iv(self.value + other.value, self.lo + other.lo, self.hi + other.hi)

    def __sub__(self, other: Iv) -> Iv:
        return Iv(self.value - other.value, self.lo - other.hi, self.hi - other.lo)

    def scale(self, c: float) -> Iv:
        a, b = self.lo * c, self.hi * c
        return Iv(self.value * c, min(a, b), max(a, b))

    def over(self, other: Iv) -> Iv:
        """self / other, the denominator positive (a numerator below zero, a negative
        remainder's share, keeps its value inside its interval: the extremes are taken over
        the four combinations of bounds)."""
        if other.lo <= 0 or other.value <= 0:
            raise ValueError("a ratio's denominator must be positive")
        ends = [a / b for a in (self.lo, self.hi) for b in (other.lo, other.hi)]
        return Iv(self.value / other.value, min(ends), max(ends))

    def contains(self, x: float) -> bool:
        return self.lo <= x <= self.hi

    def overlaps(self, other: Iv) -> bool:
        return self.lo <= other.hi and other.lo <= self.hi


def total(parts: Iterable[Iv]) -> Iv:
    out = Iv.exact(0.0)
    for p in parts:
        out = out + p
    return out


def geomean(ratios: list[Iv]) -> Iv:
    """The geometric mean of ratios, bound by bound."""
    if not ratios:
        raise ValueError("no ratios")

    def gm(xs: list[float]) -> float:
        return math.exp(sum(math.log(x) for x in xs) / len(xs))

    return Iv(gm([r.value for r in ratios]), gm([r.lo for r in ratios]), gm([r.hi for r in ratios]))


# -- text --------------------------------------------------------------------------------------
def fmt_time(iv: Iv) -> str:
    """``12.3 ms [11.9, 12.8 ms]``; ``12.3 ms`` alone without an interval."""
    if not iv.has_width:
        return fmt_seconds(iv.value)
    return f"{fmt_seconds(iv.value)} [{fmt_seconds(iv.lo)}, {fmt_seconds(iv.hi)}]"


def fmt_ratio(iv: Iv) -> str:
    return f"{iv.value:.2f}x [{iv.lo:.2f}, {iv.hi:.2f}]" if iv.has_width else f"{iv.value:.2f}x"


def fmt_share(iv: Iv) -> str:
    """A share in percent with its interval (``41% [35, 47]``)."""
    if not iv.has_width:
        return f"{100 * iv.value:.0f}%"
    return f"{100 * iv.value:.0f}% [{100 * iv.lo:.0f}, {100 * iv.hi:.0f}]"
