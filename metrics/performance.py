"""Performance metrics: time, throughput, FLOP rate, % of peak, memory bandwidth."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from suite.metrics.base import Metric
from suite.metrics.energy import ENERGY_PER_CALL, ENERGY_PER_SAMPLE

TIME = Metric(
    "time", "s", higher_is_better=False, description="wall time of one call, device-synchronised"
)
THROUGHPUT = Metric(
    "throughput", "samples/s", higher_is_better=True, description="samples processed per second"
)
FLOP_RATE = Metric(
    "flop_rate",
    "TFLOP/s",
    higher_is_better=True,
    description="floating-point operations per second",
)
PERCENT_OF_PEAK = Metric(
    "percent_of_peak",
    "%",
    higher_is_better=True,
    description="FLOP rate over the device's peak for the dtype",
)
BANDWIDTH = Metric(
    "bandwidth",
    "GB/s",
    higher_is_better=True,
    description="minimum bytes moved (inputs read once, outputs written once) per second",
)
PERCENT_OF_PEAK_BANDWIDTH = Metric(
    "percent_of_peak_bandwidth",
    "%",
    higher_is_better=True,
    description="bytes moved per second over the device's measured memory bandwidth",
)
PARAMETER_RATE = Metric(
    "parameter_rate",
    "Mparam/s",
    higher_is_better=True,
    description="parameters an optimizer step updates per second",
)

STEP_TIME = Metric(
    "step_time",
    "s",
    higher_is_better=False,
    description="one training step (forward, backward, update), device-synchronised",
)
LATENCY = Metric(
    "latency", "s", higher_is_better=False, description="one inference batch, device-synchronised"
)
PEAK_MEMORY = Metric(
    "peak_memory",
    "MB",
    higher_is_better=False,
    description="peak device memory allocated during the task",
)
TIME_TO_ACCURACY = Metric(
    "time_to_accuracy",
    "s",
    higher_is_better=False,
    description="wall time to reach the target test accuracy (digits: the MLPerf mean of the runs, "
    "fastest and slowest dropped; strategies: training time of one run)",
)
EPOCHS_TO_TARGET = Metric(
    "epochs_to_target",
    "epochs",
    higher_is_better=False,
    description="epochs until the target test accuracy was reached",
)

ALGBW = Metric("algbw", "GB/s", higher_is_better=True, description="message bytes over time")
BUSBW = Metric(
    "busbw",
    "GB/s",
    higher_is_better=True,
    description="algbw times nccl-tests' bus factor for the collective",
)
COMM_SHARE = Metric(
    "comm_share",
    "%",
    higher_is_better=False,
    description="share of the step spent on gradient exchange (1 - no-sync/sync)",
)
THROUGHPUT_PER_RANK = Metric(
    "throughput_per_rank",
    "samples/s",
    higher_is_better=True,
    description="samples per second on one rank",
)
SCALING_EFFICIENCY = Metric(
    "scaling_efficiency",
    "%",
    higher_is_better=True,
    description="throughput at N ranks over N x throughput at 1 rank, same run",
)

BYTES_PER_STEP = Metric(
    "bytes_per_step",
    "B",
    higher_is_better=False,
    description="bytes one rank sends per training step (strategies: the record says how counted)",
)
COMPRESSION_RATIO = Metric(
    "compression_ratio",
    "x",
    higher_is_better=True,
    description="bytes the uncompressed exchange would send over the bytes sent",
)
FINAL_ACCURACY = Metric(
    "final_accuracy",
    "fraction",
    higher_is_better=True,
    description="test accuracy after the fixed training budget",
)
STEPS_TO_TARGET = Metric(
    "steps_to_target",
    "steps",
    higher_is_better=False,
    description="training steps until the target test accuracy was reached",
)
DISTANCE_FROM_SYNC = Metric(
    "distance_from_sync",
    "ratio",
    higher_is_better=False,
    description="l2 distance of the weights from one process on the same global batches, relative",
)

AGREEMENT_ERROR = Metric(
    "agreement_error",
    "ratio",
    higher_is_better=False,
    description="cross-framework agreement: the largest max-relative error (logits, update)",
)

# the training level's input pipeline (suite/levels/training/pipeline.py)
READ_RATE = Metric(
    "read_rate", "MB/s", higher_is_better=True,
    description="input pipeline: the format's bytes delivered per second (samples/s x bytes a sample)",
)  # fmt: skip
BATCH_TIME = Metric(
    "batch_time", "s", higher_is_better=False,
    description="input pipeline: time between two batches' arrivals in the measured epoch",
)  # fmt: skip
TIME_TO_FIRST_BATCH = Metric(
    "time_to_first_batch", "s", higher_is_better=False,
    description="input pipeline: from creating the epoch's iterator to its first batch (first epoch)",
)  # fmt: skip
PIPELINE_CPU_CORES = Metric(
    "pipeline_cpu_cores", "cores", higher_is_better=False,
    description="input pipeline: CPU seconds of the task's process tree over the epoch's wall time",
)  # fmt: skip
STORAGE_READ = Metric(
    "storage_read", "MB", higher_is_better=False,
    description="input pipeline: bytes of the dataset the task's processes took from storage in "
    "the measured epoch (their reads, at most what the page cache shows of the dataset's files)",
)  # fmt: skip
FEEDING_CAPACITY = Metric(
    "feeding_capacity", "accelerators", higher_is_better=True,
    description="accelerators at a measured consumption rate the pipeline keeps >= 90% busy",
)  # fmt: skip
INPUT_BOUND_SHARE = Metric(
    "input_bound_share", "%", higher_is_better=False,
    description="end to end: share of the training step time spent waiting for input",
)  # fmt: skip

REGISTRY: dict[str, Metric] = {
    m.name: m
    for m in (
        TIME,
        THROUGHPUT,
        FLOP_RATE,
        PERCENT_OF_PEAK,
        BANDWIDTH,
        PERCENT_OF_PEAK_BANDWIDTH,
        PARAMETER_RATE,
        STEP_TIME,
        LATENCY,
        PEAK_MEMORY,
        TIME_TO_ACCURACY,
        EPOCHS_TO_TARGET,
        ALGBW,
        BUSBW,
        COMM_SHARE,
        THROUGHPUT_PER_RANK,
        SCALING_EFFICIENCY,
        AGREEMENT_ERROR,
        BYTES_PER_STEP,
        COMPRESSION_RATIO,
        FINAL_ACCURACY,
        STEPS_TO_TARGET,
        DISTANCE_FROM_SYNC,
        ENERGY_PER_SAMPLE,
        ENERGY_PER_CALL,
        READ_RATE,
        BATCH_TIME,
        TIME_TO_FIRST_BATCH,
        PIPELINE_CPU_CORES,
        STORAGE_READ,
        FEEDING_CAPACITY,
        INPUT_BOUND_SHARE,
    )
}


def rates(times_s: Sequence[float], work: float, scale: float = 1.0) -> list[float]:
    """Per-sample rates ``work / time / scale`` (e.g. scale=1e12 for TFLOP/s, 1e9 for GB/s).

    Rates are summarised per sample: ``w/t`` is monotone, so the rates' CI is the time CI
    mapped (and for an odd sample count the median rate is ``w`` over the median time; a
    record's headline rate is that for every count: :func:`rate_entry`).
    """
    t = np.asarray(times_s, dtype=np.float64)
    if np.any(t <= 0):
        raise ValueError("times must be positive")
    return list(work / t / scale)


def rate_entry(
    metric: Metric, times_s: Sequence[float], work: float, scale: float = 1.0
) -> dict[str, Any]:
    """``metric.entry`` of the per-sample :func:`rates`, with its headline (``value`` and
    ``median``) ``work`` over the median time: for an even sample count the median of the
    rates (the mean of the middle two) is not the rate of the median time (the mean of the
    middle two times), and on a noisy machine the two were 2x apart (a conv2d at 10.4 ms
    median reported at the rate of 5.4 ms), so a record's rate disagreed with its own time."""
    entry = metric.entry(rates(times_s, work, scale))
    entry["value"] = entry["median"] = work / float(np.median(times_s)) / scale
    return entry


def percent_of_peak(rate: float, peak: float) -> float:
    """``100 * rate / peak``; both in the same unit."""
    if peak <= 0:
        raise ValueError("peak must be positive")
    return 100.0 * rate / peak


def mlperf_mean(samples: Sequence[float]) -> float:
    """MLPerf's summary of repeated time-to-train runs: drop the fastest and the slowest run,
    average the rest (needs at least 3 runs)."""
    x = sorted(float(v) for v in samples)
    if len(x) < 3:
        raise ValueError(f"the MLPerf rule needs at least 3 runs, got {len(x)}")
    middle = x[1:-1]
    return sum(middle) / len(middle)
