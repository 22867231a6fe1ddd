"""The declared GPU peaks and bandwidths (suite/devices.py) and the report's use of them."""

from __future__ import annotations

import pytest

from suite.devices import declared_gpu_bandwidth, declared_gpu_peak
from suite.report.sections import _peak_bandwidth_gbps


@pytest.mark.parametrize(
    ("name", "tflops_bf16", "gbps"),
    [
        ("NVIDIA H100 80GB HBM3", 989.4, 3350.0),  # the SXM part, as the lent H100 names it
        ("NVIDIA H100 PCIe", 756.0, 2000.0),
        ("NVIDIA H200", 989.4, 4800.0),
        ("NVIDIA A100-SXM4-80GB", 312.0, 2039.0),
        ("NVIDIA A100-SXM4-40GB", 312.0, 1555.0),
    ],
)
def test_declared_peaks_by_name(name: str, tflops_bf16: float, gbps: float) -> None:
    peaks, source = declared_gpu_peak(name)
    assert peaks["bf16"] == tflops_bf16 and source.startswith("declared: NVIDIA datasheet")
    assert declared_gpu_bandwidth(name) == gbps


def test_unknown_gpu_has_no_peak() -> None:
    assert declared_gpu_peak("Some GPU") == ({}, "unknown: no declared peak for 'Some GPU'")
    assert declared_gpu_bandwidth("Some GPU") is None


def test_report_bandwidth_from_the_record_else_declared_by_name() -> None:
    rec = {"device": {"kind": "gpu", "name": "NVIDIA H100 80GB HBM3", "peak_bandwidth_gbps": 3000}}
    assert _peak_bandwidth_gbps(rec) == 3000.0  # the record's own value wins
    del rec["device"]["peak_bandwidth_gbps"]
    assert _peak_bandwidth_gbps(rec) == 3350.0  # a record from before it was written
    assert _peak_bandwidth_gbps({"device": {"kind": "cpu", "name": "x86_64"}}) is None
