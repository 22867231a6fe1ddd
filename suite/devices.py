"""Declared peaks of NVIDIA GPUs, matched on the device name: a table, imported by the
adapters (each framework's device info) and by the report (the roofline's memory roof of
records written before the bandwidth was recorded). Imports no framework."""

from __future__ import annotations

# Dense peaks (TFLOP/s) from NVIDIA datasheets. tf32, bf16 and fp16 are tensor-core rates
# without sparsity. Unknown devices get no peak (and no % of peak). First match wins: the
# PCIe H100 before the SXM one.
GPU_PEAKS: tuple[tuple[str, dict[str, float]], ...] = (
    ("H200", {"fp32": 66.9, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4}),
    ("H100 PCIe", {"fp32": 51.2, "tf32": 378.0, "bf16": 756.0, "fp16": 756.0}),
    ("H100", {"fp32": 66.9, "tf32": 494.7, "bf16": 989.4, "fp16": 989.4}),
    ("A100", {"fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0}),
    ("L40S", {"fp32": 91.6, "tf32": 183.0, "bf16": 362.0, "fp16": 362.0}),
    ("A10", {"fp32": 31.2, "tf32": 62.5, "bf16": 125.0, "fp16": 125.0}),
    ("V100", {"fp32": 15.7, "fp16": 125.0}),
)

# Device-memory bandwidth (GB/s) from the same datasheets. A100 names both its 40 GB (1555)
# and 80 GB (2039) parts "A100-SXM4-..GB": the name's memory size decides.
GPU_BANDWIDTH_GBPS: tuple[tuple[str, float], ...] = (
    ("H200", 4800.0),
    ("H100 PCIe", 2000.0),
    ("H100 NVL", 3900.0),
    ("H100", 3350.0),
    ("A100-SXM4-80GB", 2039.0),
    ("A100 80GB PCIe", 1935.0),
    ("A100", 1555.0),
    ("L40S", 864.0),
    ("A10", 600.0),
    ("V100", 900.0),
)


def declared_gpu_peak(name: str) -> tuple[dict[str, float], str]:
    """The declared dense peaks of the GPU called ``name`` and where they come from."""
    for key, peaks in GPU_PEAKS:
        if key in name:
            return dict(peaks), f"declared: NVIDIA datasheet dense peak for {key}"
    return {}, f"unknown: no declared peak for {name!r}"


def declared_gpu_bandwidth(name: str) -> float | None:
    """The declared device-memory bandwidth (GB/s) of the GPU called ``name``; None if not
    in the table."""
    for key, gbps in GPU_BANDWIDTH_GBPS:
        if key in name:
            return gbps
    return None
