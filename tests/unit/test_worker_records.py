"""The worker's records for what an adapter raises, run in this process with the NumPy
adapter's ``setup`` replaced (no framework, no subprocess)."""

from __future__ import annotations

from typing import Any

import pytest

from suite import summary, worker
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


def test_an_xla_task_is_skipped_with_the_adapters_own_reason(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``--xla`` with JAX read "jax has no XLA compilation of operators", the opposite of the
    truth (JAX compiles every operator with XLA): the skip now says that --xla would measure
    the same run again. Frameworks with no XLA keep the first line; TensorFlow runs it."""
    from suite.adapters import ADAPTERS

    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR"):
        monkeypatch.setenv(var, "0" if var != "MASTER_ADDR" else "127.0.0.1")
    doc = _gemm_task()
    doc["xla"] = True
    [record] = worker.run_task(doc)
    assert record["status"] == "skipped"
    assert record["reason"] == "numpy has no XLA compilation of operators; run it without --xla"
    validate_record(record)
    jax = ADAPTERS.load("jax").xla_declined()
    assert "always compiles its operators with XLA" in jax and "no XLA" not in jax
    assert ADAPTERS.load("tensorflow").xla_declined() == ""
    monkeypatch.setattr(NumPyAdapter, "xla_reason", "numpy: a reason of its own")
    [record] = worker.run_task(doc)
    assert record["reason"] == "numpy: a reason of its own"


def _tiny_cnn(path: Any) -> str:
    """A conv, a pool and a dense head: an image network of this test's own."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(3)
    inits = [
        numpy_helper.from_array((0.3 * rng.standard_normal((4, 2, 3, 3))).astype("f4"), "cw"),
        numpy_helper.from_array((0.3 * rng.standard_normal((4, 3))).astype("f4"), "fw"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "cw"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("GlobalAveragePool", ["r"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", "fw"], ["logits"]),
    ]
    graph = helper.make_graph(
        nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 2, 6, 6])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["n", 3])], inits,
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path / "tiny.onnx"))
    return str(path / "tiny.onnx")


def test_a_network_option_the_adapter_does_not_apply_is_in_its_record(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """``--compile`` with MXNet, JAX or NumPy gave a record labelled "compiled" and
    ``channels_last: true`` for a network the adapter ran as it always does, nothing saying
    so; the record now names each option not applied and why (an image input here, so both;
    an MLP has no layout to choose, so only ``compile``)."""
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR"):
        monkeypatch.setenv(var, "0" if var != "MASTER_ADDR" else "127.0.0.1")
    cfg = resolve({"level": ["network"], "frameworks": ["numpy"], "benchmarks": ["infer"],
                   "dtypes": ["fp32"], "backend": "local", "quick": True, "compile": True,
                   "model": _tiny_cnn(tmp_path), "batch": [2]}, env={})  # fmt: skip
    doc = build(cfg)[0].document(run_id="r", record_path="r.json", provenance={})
    assert doc["params"]["compile"] is True and doc["params"]["channels_last"] is True
    [record] = worker.run_task(doc)
    assert record["status"] == "ok", record.get("reason") or record.get("error")
    validate_record(record)
    assert record["work"]["options_not_applied"] == NumPyAdapter.network_options_ignored
    doc["params"]["compile"] = False
    [record] = worker.run_task(doc)
    assert set(record["work"]["options_not_applied"]) == {"channels_last"}
    cfg = resolve({"level": ["network"], "frameworks": ["numpy"], "benchmarks": ["infer"],
                   "dtypes": ["fp32"], "backend": "local", "quick": True,
                   "networks": ["mlp"], "batch": [2]}, env={})  # fmt: skip
    doc = build(cfg)[0].document(run_id="r", record_path="r.json", provenance={})
    [record] = worker.run_task(doc)
    assert "options_not_applied" not in record["work"]
    assert summary.not_applied_note([record]) is None
    doc["params"]["compile"] = True
    [compiled] = worker.run_task(doc)
    assert set(compiled["work"]["options_not_applied"]) == {"compile"}
    # under the run's table and the report's: one line, each reason once
    note = summary.not_applied_note([record, compiled, compiled])
    assert note == (
        "not applied: 2 network record(s) asked for an option their framework does not apply, "
        "so they ran as it always does (work.options_not_applied): numpy: an interpreter, "
        "nothing is compiled"
    )


def test_a_users_model_gets_an_agreement_record(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """The worker's half of agreement on a user's file (its ``lr`` unset): logits against
    onnxruntime and the first SGD step against float64 NumPy, the arrays written for the
    host's matrix."""
    import numpy as np

    from suite.levels.network import agreement as A

    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR"):
        monkeypatch.setenv(var, "0" if var != "MASTER_ADDR" else "127.0.0.1")
    cfg = resolve({"level": ["network"], "frameworks": ["numpy"], "benchmarks": ["agreement"],
                   "dtypes": ["fp32"], "backend": "local", "quick": True,
                   "model": _tiny_cnn(tmp_path), "batch": [2]}, env={})  # fmt: skip
    (tmp_path / "tasks").mkdir()
    doc = build(cfg)[0].document(
        run_id="r", record_path=str(tmp_path / "tasks" / "a.json"), provenance={}
    )
    [record] = worker.run_task(doc)
    assert record["status"] == "ok", record.get("reason") or record.get("error")
    validate_record(record)
    checks = {c["name"]: c for c in record["correctness"]["checks"]}
    assert checks["logits.max_rel_error_vs_onnxruntime"]["passed"]
    assert checks["update.max_rel_error_vs_numpy_fp64"]["passed"]
    saved = np.load(record["work"]["artifact"])
    before, after = saved["before/cw"], saved["after/cw"]
    assert 0 < np.abs(after - before).max() < A.USER_MODEL_LR * 100  # one step, at its rate
