"""The metric abstraction and sample statistics.

A :class:`Metric` declares its name, unit and direction where it is defined. Sampled metrics
(time, rates) are summarised by :func:`summarise` into median, mean, min, max, p5, p95, IQR,
n and a distribution-free 95% confidence interval of the median.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np


def median_ci(
    samples: Sequence[float] | np.ndarray, confidence: float = 0.95
) -> tuple[float, float]:
    """Distribution-free confidence interval of the median from order statistics.

    The number of samples below the median is Binomial(n, 1/2); the interval is
    ``[x_(j), x_(k)]`` with the narrowest symmetric ranks whose coverage is at least
    ``confidence`` (Conover, *Practical Nonparametric Statistics*, 3.2): with 0-based ranks
    the interval ``[x_(j), x_(n-1-j)]`` covers the median with probability 1 - 2 P(B <= j).
    With too few samples for that coverage (n < 6 at 95%) it is the full range ``[min, max]``.
    """
    x = np.sort(np.asarray(samples, dtype=np.float64))
    if x.size == 0:
        raise ValueError("median_ci needs at least one sample")
    return _sorted_median_ci(x, confidence)


def _sorted_median_ci(x: np.ndarray, confidence: float) -> tuple[float, float]:
    """:func:`median_ci` of samples already sorted (at least one)."""
    n = x.size
    j = _median_ci_rank(n, confidence) if n > 1 else 0
    return float(x[j]), float(x[n - 1 - j])


def median_ci_rel_width(samples: Sequence[float]) -> float:
    """``summarise(samples).ci_rel_width`` (the 95% interval of the median over the median),
    exactly, without the other statistics: what ``measure()`` computes at each CI check,
    between two timed samples, where the work evicts the operator's data from the caches
    (docs/studies/overhead-cpu.md). One sort; the rank is cached per sample count."""
    x = np.sort(np.asarray(samples, dtype=np.float64))
    if x.size == 0:
        raise ValueError("median_ci_rel_width needs at least one sample")
    lo, hi = _sorted_median_ci(x, 0.95)
    return Summary.rel_width(lo, hi, float(np.median(x)))


@functools.lru_cache(maxsize=4096)
def _median_ci_rank(n: int, confidence: float) -> int:
    """The 0-based rank ``j`` of :func:`median_ci`'s interval ``[x_(j), x_(n-1-j)]``. Cached
    (a worker session's measurements ask for the same counts again): at 800 samples the sum
    below is about half of ``summarise``'s 0.3 ms."""
    # The interval misses the median only when j or fewer samples fall on one side:
    # coverage = 1 - 2 P(B <= j), B ~ Binomial(n, 1/2). Take the largest j with coverage >=
    # confidence; log-gamma keeps any n cheap and exact to double precision.
    log_half_n = n * math.log(0.5)
    alpha = 1.0 - confidence
    j = 0  # [min, max]: the widest interval, also returned when n is too small for `confidence`
    cdf = 0.0
    for cand in range(n // 2):
        cdf += math.exp(
            math.lgamma(n + 1) - math.lgamma(cand + 1) - math.lgamma(n - cand + 1) + log_half_n
        )  # now P(B <= cand)
        if 2.0 * cdf > alpha:
            break
        j = cand
    return j


@dataclass(frozen=True)
class Summary:
    """Statistics of a sample: what every sampled metric in a record carries."""

    median: float
    mean: float
    min: float
    max: float
    p5: float
    p95: float
    p99: float
    iqr: float
    n: int
    ci95: tuple[float, float]

    @property
    def ci_rel_width(self) -> float:
        """Width of the 95% CI of the median relative to the median (0.02 = 2%)."""
        return self.rel_width(*self.ci95, self.median)

    @staticmethod
    def rel_width(lo: float, hi: float, median: float) -> float:
        """``(hi - lo) / |median|``; infinite for a zero median."""
        if median == 0:
            return math.inf
        return (hi - lo) / abs(median)

    def to_dict(self) -> dict[str, Any]:
        return {
            "median": self.median,
            "mean": self.mean,
            "min": self.min,
            "max": self.max,
            "p5": self.p5,
            "p95": self.p95,
            "p99": self.p99,
            "iqr": self.iqr,
            "n": self.n,
            "ci95": [self.ci95[0], self.ci95[1]],
        }


def summarise(samples: Sequence[float] | np.ndarray) -> Summary:
    """Summarise samples; percentiles use linear interpolation (NumPy's default)."""
    x = np.asarray(samples, dtype=np.float64)
    if x.size == 0:
        raise ValueError("summarise needs at least one sample")
    if not np.all(np.isfinite(x)):
        raise ValueError("samples contain NaN or Inf")
    p5, q1, med, q3, p95, p99 = np.percentile(x, [5, 25, 50, 75, 95, 99])
    return Summary(
        median=float(med),
        mean=float(x.mean()),
        min=float(x.min()),
        max=float(x.max()),
        p5=float(p5),
        p95=float(p95),
        p99=float(p99),
        iqr=float(q3 - q1),
        n=int(x.size),
        ci95=median_ci(x),
    )


@dataclass(frozen=True)
class Metric:
    """An abstract measurement: a name, a unit and a direction.

    ``entry`` turns samples (or one value) into the JSON object a record holds.
    """

    name: str
    unit: str
    higher_is_better: bool
    description: str = field(default="", compare=False)

    def entry(
        self, samples: Sequence[float] | None = None, *, value: float | None = None
    ) -> dict[str, Any]:
        """A record's metric object: ``value`` is the headline (the median for samples)."""
        out: dict[str, Any] = {
            "name": self.name,
            "unit": self.unit,
            "higher_is_better": self.higher_is_better,
        }
        if samples is not None:
            s = summarise(samples)
            out["value"] = s.median
            out.update(s.to_dict())
        elif value is not None:
            if not math.isfinite(value):
                raise ValueError(f"metric {self.name}: value {value} is not finite")
            out["value"] = float(value)
        else:
            raise ValueError("Metric.entry needs samples or a value")
        return out
