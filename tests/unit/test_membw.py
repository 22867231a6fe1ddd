"""The measured memory bandwidth (suite/membw.py): the triad's values and size rules, its
cache, the record's device block, and the roofline's memory roof drawn from it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import tests.synthetic as S
from suite import membw
from suite.report import sections
from suite.report.document import Figure, Table
from suite.report.load import load_runs


def test_triad_measures_and_checks_its_values() -> None:
    bw = membw.triad(array_bytes=8 << 20, threads=2, passes=3)
    assert bw.gbps > 0.05 and bw.median_gbps <= bw.gbps
    assert bw.threads == 2 and bw.array_bytes == 8 << 20 and bw.passes == 3
    assert "2 threads" in bw.source and "values checked" in bw.source


def test_triad_fails_on_a_wrong_value(monkeypatch: pytest.MonkeyPatch) -> None:
    # a scalar 0.1 % off: every element is then wrong
    real_multiply = np.multiply

    def off_by_one_ulp(x, s, out):  # type: ignore[no-untyped-def]
        real_multiply(x, s * 1.001, out=out)

    monkeypatch.setattr(np, "multiply", off_by_one_ulp)
    with pytest.raises(RuntimeError, match="not 3.5"):
        membw.triad(array_bytes=4 << 20, threads=1, passes=1)


def test_array_size_follows_stream_and_the_memory_cap() -> None:
    size, why = membw.array_size(llc=260 << 20, available=20 << 30)
    assert size == 4 * (260 << 20) and "4x" in why
    size, why = membw.array_size(llc=260 << 20, available=4 << 30)
    assert size == int((4 << 30) * 0.25 / 3) and "capped" in why and "STREAM asks 4x" in why
    size, _ = membw.array_size(llc=0, available=20 << 30)  # cache size unknown
    assert size == 64 << 20


def test_cpu_bandwidth_is_cached_per_host_and_threads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    measured = []
    real_triad = membw.triad

    def small(threads: int | None = None, passes: int = 10) -> membw.Bandwidth:
        bw = real_triad(array_bytes=4 << 20, threads=threads, passes=2)
        measured.append(bw)
        return bw

    monkeypatch.setattr(membw, "triad", small)
    first = membw.cpu_bandwidth(threads=1)
    again = membw.cpu_bandwidth(threads=1)
    assert len(measured) == 1 and again == first  # the second came from the cache
    assert "load average" in first.source
    doc = json.loads((tmp_path / "dlsuite" / "membw.json").read_text())
    assert list(doc) == [membw.cache_key(1)]
    membw.cpu_bandwidth(threads=2)  # another thread count is another measurement
    assert (
        len(measured) == 2
        and len(json.loads((tmp_path / "dlsuite" / "membw.json").read_text())) == 2
    )
    membw.cpu_bandwidth(threads=1, refresh=True)
    assert len(measured) == 3
    extra = membw.device_extra()
    # device_extra uses every usable core: measured (or cached) and carried with its source
    assert extra["peak_bandwidth_gbps"] > 0 and "triad" in str(extra["peak_bandwidth_source"])


def test_device_extra_can_be_declared_or_switched_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DLSUITE_MEMBW", "off")
    assert membw.device_extra() == {"peak_bandwidth_source": "not measured: DLSUITE_MEMBW=off"}
    monkeypatch.setenv("DLSUITE_MEMBW", "20.5")
    assert membw.device_extra()["peak_bandwidth_gbps"] == 20.5
    monkeypatch.setenv("DLSUITE_MEMBW", "-3")
    assert "peak_bandwidth_gbps" not in membw.device_extra()


def _run(tmp_path: Path, bandwidth: float | None) -> Path:
    dev = dict(S.CPU)
    if bandwidth is not None:
        dev["peak_bandwidth_gbps"] = bandwidth
        dev["peak_bandwidth_source"] = "measured: STREAM-style triad (synthetic)"
    # a memory-bound softmax (0.25 FLOP/byte) and a compute-bound GEMM
    recs = [
        S.operator_record("softmax", {"n": 1}, flops=1e6, nbytes=4e6, time_s=1e-3, device=dev),
        S.operator_record("gemm", device=dev),
    ]
    return S.write_run(tmp_path / ("bw" if bandwidth else "nobw"), recs)


def test_roofline_draws_the_bandwidth_roof_of_a_cpu_record(tmp_path: Path) -> None:
    with_bw = sections.roofline_section(load_runs([_run(tmp_path, 10.0)]), lambda s: s)
    without = sections.roofline_section(load_runs([_run(tmp_path, None)]), lambda s: s)
    text_with = "\n".join(map(str, with_bw.blocks))
    text_without = "\n".join(map(str, without.blocks))
    assert "No memory-bandwidth peak is known" in text_without
    assert "No memory-bandwidth peak is known" not in text_with
    assert "Bandwidth source: measured: STREAM-style triad (synthetic)" in text_with
    # softmax: 1e6 FLOP in 1 ms = 1 GFLOP/s at 0.25 FLOP/byte; the memory roof there is
    # 10 GB/s x 0.25 = 2.5 GFLOP/s (the compute roof is 0.21 TFLOP/s): 40 % of the roof
    rows = [b for b in with_bw.blocks if isinstance(b, Table)][0].rows
    softmax = next(r for r in rows if r[1] == "softmax")
    assert softmax[-1] == "40.0%"
    softmax_nobw = next(
        r for r in [b for b in without.blocks if isinstance(b, Table)][0].rows if r[1] == "softmax"
    )
    assert softmax_nobw[-1] == f"{100 * 1e9 / 0.21e12:.1f}%"
    figures = [b for b in with_bw.blocks if isinstance(b, Figure)]
    figures_nobw = [b for b in without.blocks if isinstance(b, Figure)]
    assert figures and figures[0].png != figures_nobw[0].png  # the sloped roof is drawn
