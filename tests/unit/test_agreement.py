"""Cross-framework agreement arithmetic: the matrix, its allowances, the dropout removal."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from suite.levels.network import agreement as A
from suite.onnx import zoo


def test_without_dropout_removes_every_dropout_and_keeps_the_function() -> None:
    net = zoo.get("alexnet")
    arch = net.validate(net.sizes("quick")[0].params)
    model = net.build(arch, seed=1)
    assert any(n.op_type == "Dropout" for n in model.graph.node)
    plain = A.without_dropout(model)
    assert not any(n.op_type == "Dropout" for n in plain.graph.node)
    assert any(n.op_type == "Dropout" for n in model.graph.node)  # the original is untouched
    from suite.levels.network.run import ort_logits
    from suite.levels.network.workload import synthetic_batch

    spec = net.input_spec(arch)
    x, _ = synthetic_batch(spec, 2, 10, np.random.default_rng(0))
    np.testing.assert_allclose(ort_logits(plain, x, spec), ort_logits(model, x, spec), rtol=1e-6)


def test_max_rel_is_symmetric_and_catches_shape_and_nonfinite() -> None:
    a, b = np.array([1.0, 2.0, 4.0]), np.array([1.0, 2.0, 4.4])
    assert A.max_rel(a, b) == A.max_rel(b, a) == pytest.approx(0.4 / 4.4)
    assert A.max_rel(a, a) == 0.0
    assert A.max_rel(a, np.ones(2)) == float("inf")
    assert A.max_rel(a, np.array([1.0, np.nan, 4.0])) == float("inf")


def _step(w: np.ndarray, g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return w, (w - g).astype(np.float32).astype(np.float64)


def test_update_error_discounts_fp32_storage_and_exact_zero_gradients() -> None:
    rng = np.random.default_rng(0)
    w = (1.0 + 0.01 * rng.standard_normal(64)).astype(np.float32).astype(np.float64)
    g = 1e-4 * rng.standard_normal(64)
    big = rng.standard_normal(64).astype(np.float32).astype(np.float64)
    steps = {
        # a LayerNorm gain near 1 moved by 1e-4: fp32 storage alone is 1e-3 of the update
        "gain": (*_step(w, g), w, w - g),
        # the key bias: an exactly zero gradient in one framework, roundoff in the other
        "key.bias": (big, big, big, big + 1e-12),
        "weight": (*_step(big, 0.1 * big), big, big - 0.1 * big),
    }
    assert A.update_error(steps) < 1e-4
    # a real disagreement is not hidden: a 1% different gradient on the big weight
    steps["weight"] = (big, big - 0.1 * big, big, big - 0.101 * big)
    assert A.update_error(steps) == pytest.approx(0.01 / 1.01, rel=1e-3)


def _arrays(scale: float = 1.0) -> dict[str, np.ndarray]:
    w = np.linspace(-1, 1, 10)
    return {
        "logits": np.array([[1.0, 2.0]]) * scale,
        "ort_logits": np.array([[1.0, 2.0]]),
        "before/w": w,
        "after/w": w - 0.01 * scale,
    }


def test_matrix_pairs_every_framework_and_onnxruntime(tmp_path: Path) -> None:
    for name, scale in (("a", 1.0), ("b", 1.0), ("c", 1.01)):
        np.savez(tmp_path / f"{name}.npz", **_arrays(scale))
    arrays = A.load_point(tmp_path)
    m = A.matrix(arrays)
    assert m["frameworks"] == ["a", "b", "c", "onnxruntime"]
    assert set(m["pairs"]) == {
        "a|b",
        "a|c",
        "b|c",
        "a|onnxruntime",
        "b|onnxruntime",
        "c|onnxruntime",
    }
    assert m["pairs"]["a|b"]["logits"] == 0.0 and m["pairs"]["a|b"]["update"] == 0.0
    # less one fp32 ulp of the weights: the storage allowance
    assert m["pairs"]["a|c"]["update"] == pytest.approx(0.01 / 1.01, rel=1e-3)
    checks = {c.name: c for c in A.checks_of(m)}
    assert checks["logits.max_rel_error.a_vs_b"].passed
    assert not checks["update.max_rel_error.a_vs_c"].passed
    assert not checks["logits.max_rel_error.c_vs_onnxruntime"].passed


def test_matrix_record_is_valid_and_skips_with_one_framework(tmp_path: Path) -> None:
    from suite.results import validate_record

    params = {"network": "mlp", "batch": 4}
    point = tmp_path / "agreement" / A.point_key(params, 0)
    point.mkdir(parents=True)
    np.savez(point / "a.npz", **_arrays())
    info = {"params": params, "size_set": "quick", "source": "test", "frameworks": ["a", "b"]}
    (rec,) = A.matrix_records(tmp_path, {A.point_key(params, 0): info}, "run1", {})
    validate_record(rec)
    assert rec["status"] == "skipped" and "missing: b" in rec["reason"]
    np.savez(point / "b.npz", **_arrays())
    (rec,) = A.matrix_records(tmp_path, {A.point_key(params, 0): info}, "run1", {})
    validate_record(rec)
    assert rec["status"] == "ok" and rec["correctness"]["passed"]
    assert rec["framework"]["name"] == "a+b"


def test_a_parameter_only_one_framework_trained_fails_the_pair(tmp_path: Path) -> None:
    """Only the parameters both frameworks wrote were compared: a framework that held a bias
    constant (or trained one under another name) passed the pair on the rest."""
    both = _arrays()
    bias = np.full(3, 0.5)
    trains_bias = {**both, "before/head.bias": bias, "after/head.bias": bias - 0.02}
    np.savez(tmp_path / "held.npz", **both)
    np.savez(tmp_path / "trains.npz", **trains_bias)
    np.savez(tmp_path / "same.npz", **trains_bias)
    m = A.matrix(A.load_point(tmp_path))
    pair = m["pairs"]["held|trains"]
    assert pair["parameters_compared"] == 1.0 and pair["parameters_in_one_only"] == 1.0
    assert pair["weights"] == float("inf") and pair["update"] == float("inf")
    assert pair["logits"] == 0.0  # the logits alone cannot see it
    checks = {c.name: c for c in A.checks_of(m)}
    assert not checks["update.max_rel_error.held_vs_trains"].passed
    assert not checks["weights.max_rel_error.held_vs_trains"].passed
    # two frameworks that train the same tensors still agree
    assert m["pairs"]["same|trains"]["parameters_in_one_only"] == 0.0
    assert checks["update.max_rel_error.same_vs_trains"].passed
    # the record that says so is valid and can be written
    from suite.results import dumps, validate_record

    params = {"network": "mlp", "batch": 4}
    point = tmp_path / "run" / "agreement" / A.point_key(params, 0)
    point.mkdir(parents=True)
    np.savez(point / "held.npz", **both)
    np.savez(point / "trains.npz", **trains_bias)
    info = {
        "params": params,
        "size_set": "custom",
        "source": "test",
        "frameworks": ["held", "trains"],
    }
    (rec,) = A.matrix_records(tmp_path / "run", {A.point_key(params, 0): info}, "run1", {})
    validate_record(rec)  # raised ValueError (a metric of inf) at the end of the run before
    assert rec["status"] == "failed" and rec["error"]["type"] == "AgreementNotFinite"
    assert "update.max_rel_error.held_vs_trains" in rec["error"]["message"]
    assert not rec["correctness"]["passed"]
    written = dumps(rec)  # JSON has no infinity: the non-finite errors are null
    assert '"parameters_in_one_only":1.0' in written and '"update":null' in written
    # the report shows it with the pair marked FAIL (it showed only ok matrices)
    from suite.report.document import Table
    from suite.report.load import Run
    from suite.report.sections import agreement_section

    run = Run(path=tmp_path / "run", results=tmp_path / "run" / "results.jsonl", records=[rec])
    section = agreement_section([run], lambda name: name)
    (table,) = [b for b in section.blocks if isinstance(b, Table)]
    cells = {
        (row[0], name): cell
        for row in table.rows
        for name, cell in zip(table.headers, row, strict=True)
    }
    assert cells[("held", "trains")] == "0.0e+00 / inf FAIL"


def test_not_finite_names_the_checks_a_metric_cannot_hold() -> None:
    from suite import metrics as M

    finite = M.Check("logits.max_rel_error_vs_onnxruntime", 2e-7, 1e-3)
    nan_logits = M.Check("logits.l2_rel_error_vs_onnxruntime", float("inf"), 1e-4)
    assert A.not_finite([finite]) is None
    said = A.not_finite([finite, nan_logits])
    assert said is not None and "1 agreement error(s)" in said
    assert "logits.l2_rel_error_vs_onnxruntime" in said and "max_rel" not in said
