"""Energy metrics: GPU energy (NVML's total-energy counter over the timed region) per unit of
work. The worker computes them from its telemetry (``suite/telemetry``); lower is better."""

from __future__ import annotations

from suite.metrics.base import Metric

ENERGY_PER_SAMPLE = Metric(
    "energy_per_sample",
    "J/sample",
    higher_is_better=False,
    description="GPU energy over the timed region divided by the samples it processed",
)
ENERGY_PER_CALL = Metric(
    "energy_per_call",
    "J/call",
    higher_is_better=False,
    description="GPU energy over the timed region divided by the calls it made (operators, collectives)",
)
