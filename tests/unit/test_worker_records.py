"""The worker's records for what an adapter raises, run in this process with the NumPy
adapter's ``setup`` replaced (no framework, no subprocess)."""

from __future__ import annotations

from typing import Any

import pytest

from suite import worker
from suite.adapters.numpy.adapter import NumPyAdapter
from suite.config import resolve
from suite.errors import UnsupportedError
from suite.plan import build
from suite.results import validate_record


def _gemm_task() -> dict[str, Any]:
    cfg = resolve({"quick": True, "frameworks": ["numpy"], "benchmarks": ["gemm"],
                   "dtypes": ["fp32"], "backend": "local"}, env={})  # fmt: skip
    return build(cfg)[0].document(run_id="r", record_path="r.json", provenance={})


def _declines_without_a_reason(self: NumPyAdapter, device: str) -> Any:
    raise UnsupportedError("")


def test_an_unsupported_error_without_a_reason_says_where_it_was_raised(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``UnsupportedError("")`` gave "record failed schema validation: reason: '' should be
    non-empty" and no traceback; now a skipped record naming the raise, the traceback in the
    task's log (the worker's stderr)."""
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR"):  # the worker sets them
        monkeypatch.setenv(var, "0" if var != "MASTER_ADDR" else "127.0.0.1")
    monkeypatch.setattr(NumPyAdapter, "setup", _declines_without_a_reason)
    [record] = worker.run_task(_gemm_task())
    assert record["status"] == "skipped"
    assert record["reason"] == (
        "UnsupportedError with no reason, raised at tests/unit/test_worker_records.py:"
        f"{_declines_without_a_reason.__code__.co_firstlineno + 1} (_declines_without_a_reason)"
    )
    validate_record(record)
    assert 'raise UnsupportedError("")' in capsys.readouterr().err


@pytest.mark.pytorch
def test_an_allocation_pytorch_refuses_is_oom(monkeypatch: pytest.MonkeyPatch) -> None:
    """A GEMM too large for memory (400000 x 400000 fp32: its output alone is 640 GB) read
    ``failed`` with PyTorch's RuntimeError "DefaultCPUAllocator: can't allocate memory", while
    the same refusal from NumPy (a MemoryError) read ``oom``; both are now ``oom``."""
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR"):
        monkeypatch.setenv(var, {"WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1"}.get(var, "0"))
    cfg = resolve({"quick": True, "frameworks": ["pytorch"], "benchmarks": ["gemm"],
                   "dtypes": ["fp32"], "backend": "local", "device": "cpu"}, env={})  # fmt: skip
    doc = build(cfg)[0].document(run_id="r", record_path="r.json", provenance={})
    doc["params"] = {"m": 400_000, "n": 400_000, "k": 1}
    [record] = worker.run_task(doc)
    assert record["status"] == "oom", record
    assert "can't allocate memory" in record["error"]["message"]
    validate_record(record)


def test_an_operators_rate_is_its_work_over_its_median_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With an even sample count the flop and byte rates were the median of per-sample rates:
    on a busy machine a conv2d record read 10.4 ms and 0.0107 TFLOP/s, the rate of 5.4 ms.
    A record's rates are now its work over its own median time, for any count."""
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR"):
        monkeypatch.setenv(var, {"WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1"}.get(var, "0"))
    doc = _gemm_task()
    doc["params"] = {"m": 23, "n": 29, "k": 31}
    doc["measure"] = {"min_samples": 6, "max_samples": 6, "time_budget_s": 5.0,
                      "target_ci_rel": 1e-9, "min_sample_s": 1e-5}  # fmt: skip
    [record] = worker.run_task(doc)
    metrics = {m["name"]: m for m in record["metrics"]}
    assert metrics["time"]["n"] == 6
    median_time = metrics["time"]["median"]
    flops, nbytes = 2.0 * 23 * 29 * 31, 4.0 * (23 * 31 + 31 * 29 + 23 * 29)
    assert record["work"] == {**record["work"], "flops": flops, "bytes": nbytes}
    rate, bandwidth = metrics["flop_rate"], metrics["bandwidth"]
    assert rate["value"] == rate["median"] == pytest.approx(flops / median_time / 1e12, rel=1e-12)
    assert bandwidth["value"] == pytest.approx(nbytes / median_time / 1e9, rel=1e-12)
    assert rate["ci95"][0] <= rate["median"] <= rate["ci95"][1]
    validate_record(record)
