"""GPU paths, run on an NVIDIA machine (DLSUITE_REQUIRE_GPU=1 there); deselected elsewhere."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import cli, records

pytestmark = [pytest.mark.gpu, pytest.mark.pytorch]


def test_quick_run_on_cuda(tmp_path: Path) -> None:
    out = tmp_path / "gpu"
    proc = cli(
        "run", "--quick", "--device", "cuda", "--dtype", "fp32,tf32,bf16,fp16", "--out", str(out)
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    recs = records(out)
    assert len(recs) == 32
    for r in recs:
        assert r["status"] == "ok", (r["task_id"], r.get("reason"))
        assert r["correctness"]["passed"], r["correctness"]
        assert r["device"]["kind"] == "gpu"
        assert r["provenance"]["versions"]["cuda"]
        # GPU energy is measured over at least 2 s (the energy counter's ~100 ms steps)
        assert r["measurement"]["min_time_s"] == 2.0
        assert r["telemetry"]["host"]["duration_s"] >= 2.0
        assert r["telemetry"]["gpu"]["devices"][0]["energy_j"] > 0
    gemm = [r for r in recs if r["benchmark"]["name"] == "gemm"]
    assert all(any(m["name"] == "percent_of_peak" for m in r["metrics"]) for r in gemm), (
        "no declared peak for this GPU"
    )


def test_cuda_timer_synchronises() -> None:
    import torch

    from suite.adapters.pytorch.adapter import PyTorchAdapter

    a = PyTorchAdapter()
    a.setup("cuda")
    x = torch.randn(4096, 4096, device="cuda")
    # 20 large matmuls take milliseconds on any GPU; an unsynchronised timer would read ~µs.
    t = a.time(lambda: x @ x, 20)
    flops = 20 * 2 * 4096**3
    assert flops / t / 1e12 < 2000, (
        f"{flops / t / 1e12:.0f} TFLOP/s is impossible: the timer did not wait"
    )


def test_network_quick_on_cuda(tmp_path: Path) -> None:
    out = tmp_path / "gpu-net"
    proc = cli(
        "run",
        "--level",
        "network",
        "--quick",
        "--device",
        "cuda",
        "--dtype",
        "fp32,bf16",
        "--benchmark",
        "train,infer",
        "--out",
        str(out),
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    recs = records(out)
    assert recs and all(r["status"] == "ok" and r["correctness"]["passed"] for r in recs)
    train = [r for r in recs if r["benchmark"]["name"] == "train"]
    assert all(any(m["name"] == "peak_memory" for m in r["metrics"]) for r in train)
