"""Declared peaks of NVIDIA GPUs, matched on the device name: a table, imported by the
adapters (each framework's device info) and by the report (the roofline's memory roof of
records written before the bandwidth was recorded); and whether this host shows a GPU at all
(:func:`no_gpu_here`, for the plan). Imports no framework."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

#: where the kernel's device nodes are (a GPU's driver makes its nodes here)
DEV = Path("/dev")
#: an NVIDIA Jetson's integrated GPU (no /dev/nvidia0): JetPack 5's node, JetPack 6's folder
TEGRA_NAMES = ("nvhost-ctrl-gpu", "nvgpu")

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


def no_gpu_here(env: Mapping[str, str] | None = None) -> str | None:
    """Why this host has no GPU a framework could take for ``--device cuda``, or None when it
    shows one (or may: only a host without any trace of one is said to have none). A GPU is
    shown by its driver's device nodes (NVIDIA's ``/dev/nvidia<N>``, AMD ROCm's ``/dev/kfd``,
    which PyTorch's "cuda" device runs on too, WSL's ``/dev/dxg``, an NVIDIA Jetson's integrated
    GPU: ``/dev/nvhost-ctrl-gpu`` up to JetPack 5, ``/dev/nvgpu/`` from JetPack 6, without a
    ``/dev/nvidia0`` or an ``nvidia-smi`` that lists it) or by ``nvidia-smi -L``;
    ``CUDA_VISIBLE_DEVICES`` set empty (or ``-1``) hides every one."""
    env = os.environ if env is None else env
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1"):
        return f"CUDA_VISIBLE_DEVICES={visible!r} hides every GPU from the frameworks"
    nodes = [
        *DEV.glob("nvidia[0-9]*"),
        DEV / "kfd",
        DEV / "dxg",
        *(DEV / name for name in TEGRA_NAMES),
    ]
    if any(node.exists() for node in nodes):
        return None
    smi = shutil.which("nvidia-smi")
    if smi is not None:
        try:
            out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.SubprocessError):
            out = None
        if out is not None and out.returncode == 0 and "GPU" in out.stdout:
            return None
    return (
        f"this machine shows no GPU (no {DEV}/nvidia<N>, {DEV}/kfd, {DEV}/dxg or Jetson device"
        + (", and nvidia-smi -L lists none)" if smi else ", no nvidia-smi)")
    )
