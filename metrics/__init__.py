"""Framework-neutral metrics: what is measured, its unit, its direction, how samples summarise.

Importing this package loads no deep-learning framework; it needs only NumPy.
"""

from suite.metrics.base import Metric, Summary, median_ci, median_ci_rel_width, summarise
from suite.metrics.correctness import (
    TOLERANCES,
    Check,
    Tolerance,
    compare,
    relative_errors,
    tolerance_for,
)
from suite.metrics.energy import ENERGY_PER_CALL, ENERGY_PER_SAMPLE
from suite.metrics.gradcheck import directional_gradcheck, numeric_gradient
from suite.metrics.performance import (
    BANDWIDTH,
    EPOCHS_TO_TARGET,
    FLOP_RATE,
    LATENCY,
    PEAK_MEMORY,
    PERCENT_OF_PEAK,
    REGISTRY,
    STEP_TIME,
    THROUGHPUT,
    TIME,
    TIME_TO_ACCURACY,
    mlperf_mean,
    percent_of_peak,
    rate_entry,
    rates,
)

__all__ = [
    "BANDWIDTH",
    "ENERGY_PER_CALL",
    "ENERGY_PER_SAMPLE",
    "EPOCHS_TO_TARGET",
    "LATENCY",
    "PEAK_MEMORY",
    "STEP_TIME",
    "TIME_TO_ACCURACY",
    "mlperf_mean",
    "FLOP_RATE",
    "PERCENT_OF_PEAK",
    "REGISTRY",
    "THROUGHPUT",
    "TIME",
    "TOLERANCES",
    "Check",
    "Metric",
    "Summary",
    "Tolerance",
    "compare",
    "directional_gradcheck",
    "median_ci",
    "median_ci_rel_width",
    "numeric_gradient",
    "percent_of_peak",
    "rate_entry",
    "rates",
    "relative_errors",
    "summarise",
    "tolerance_for",
]
