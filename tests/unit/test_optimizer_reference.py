"""The suite's seeded gradients, the float64 reference run and its rounding bound, and the
documented-variant table (suite/optimizers)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from suite.dtypes import to_bf16
from suite.errors import ConfigError
from suite.optimizers import documented
from suite.optimizers.bounds import ReferenceRun, compare
from suite.optimizers.gradients import (
    flat_parameters,
    gradients,
    parameter_set,
    tensor_gradient,
)
from suite.optimizers.rules import Adam, make

F32 = np.float32

# -- gradients and parameter sets -----------------------------------------------------------------


def test_gradients_are_seeded_per_tensor_and_step_and_never_zero() -> None:
    shapes = {"a": (3, 4), "b": (1000,)}
    g1 = gradients(shapes, 1)
    assert all(np.array_equal(g1[k], gradients(shapes, 1)[k]) for k in shapes)
    # a tensor's gradient does not depend on the other tensors asked for with it
    assert np.array_equal(gradients({"b": (1000,)}, 1)["b"], g1["b"])
    assert not np.array_equal(gradients(shapes, 2)["b"], g1["b"])
    assert not np.array_equal(gradients(shapes, 1, seed=1)["b"], g1["b"])
    g = tensor_gradient("big", (200_000,), 3)
    assert g.dtype == np.float32 and np.all(g != 0)
    mags = np.abs(g.astype(np.float64))
    assert mags.min() >= 1e-7 * 0.999 and mags.max() <= 0.1 * 1.001
    # spread over the decades, both signs
    assert np.mean(mags < 1e-6) > 0.1 and np.mean(mags > 1e-2) > 0.1
    assert 0.45 < np.mean(g > 0) < 0.55
    with pytest.raises(ValueError):
        tensor_gradient("x", (2,), 0)


def test_parameter_sets() -> None:
    mlp = parameter_set("zoo:mlp:quick")
    assert mlp.count == 64 * 128 + 128 + 128 * 128 + 128 + 128 * 10 + 10
    assert mlp.shapes["fc1.weight"] == (128, 64)
    assert all(p.dtype == np.float32 and np.all(p != 0) for p in mlp.params.values())
    # same initial weights as the network level loads
    assert np.array_equal(
        parameter_set("zoo:mlp:quick").params["fc1.weight"], mlp.params["fc1.weight"]
    )
    res = parameter_set("zoo:resnet50:quick")
    assert not any(n.endswith(("running_mean", "running_var")) for n in res.params)
    assert "bn1.weight" in res.params and "fc.bias" in res.params
    flat = flat_parameters(1000)
    assert flat.count == 1000 and flat.source == "flat:1000"
    assert parameter_set("flat:1_000").count == 1000
    for bad in ("flat:x", "zoo:", "mlp", "flat:-3", "zoo:nonet"):
        with pytest.raises(ConfigError):
            parameter_set(bad)


# -- float32 implementations the way frameworks write them ----------------------------------------


def adam_torch_f32(p0, grads, lr, eps, b1=0.9, b2=0.999):  # type: ignore[no-untyped-def]
    """PyTorch's for-loop Adam in float32 (step size and bias corrections in double)."""
    p = {k: v.astype(F32) for k, v in p0.items()}
    m = {k: np.zeros_like(v) for k, v in p.items()}
    v = {k: np.zeros_like(x) for k, x in p.items()}
    for t, g in enumerate(grads, start=1):
        bc1, bc2 = 1 - b1**t, 1 - b2**t
        for k in p:
            m[k] = m[k] + (g[k] - m[k]) * F32(1 - b1)  # lerp
            v[k] = v[k] * F32(b2) + g[k] * g[k] * F32(1 - b2)
            denom = np.sqrt(v[k]) / F32(np.sqrt(bc2)) + F32(eps)
            p[k] = p[k] - F32(lr / bc1) * (m[k] / denom)
    return p


def adam_keras_f32(p0, grads, lr, eps, b1=0.9, b2=0.999):  # type: ignore[no-untyped-def]
    """Keras's Adam in float32: betas cast to float32 before the powers (epsilon hat)."""
    p = {k: v.astype(F32) for k, v in p0.items()}
    m = {k: np.zeros_like(v) for k, v in p.items()}
    v = {k: np.zeros_like(x) for k, x in p.items()}
    for t, g in enumerate(grads, start=1):
        b1p, b2p = F32(b1) ** F32(t), F32(b2) ** F32(t)
        alpha = F32(lr) * np.sqrt(F32(1) - b2p) / (F32(1) - b1p)
        for k in p:
            m[k] = m[k] + (g[k] - m[k]) * F32(1 - b1)
            v[k] = v[k] + (g[k] * g[k] - v[k]) * F32(1 - b2)
            p[k] = p[k] - (m[k] * alpha) / (np.sqrt(v[k]) + F32(eps))
    return p


@pytest.fixture(scope="module")
def mlp_run():  # type: ignore[no-untyped-def]
    ps = parameter_set("zoo:mlp:quick")
    grads = [gradients(ps.shapes, k) for k in range(1, 31)]
    return ps, grads


def reference(rule, ps, grads):  # type: ignore[no-untyped-def]
    ref = ReferenceRun(rule, ps.params)
    for g in grads:
        ref.step(g)
    return ref


def test_bound_accepts_float32_implementations_and_separates_the_variants(mlp_run) -> None:  # type: ignore[no-untyped-def]
    ps, grads = mlp_run
    rule = make("adam", lr=1e-3, eps=1e-8)
    outside = reference(rule, ps, grads)
    hat = reference(rule.with_variant(epsilon="hat"), ps, grads)
    torch_like = adam_torch_f32(ps.params, grads, 1e-3, 1e-8)
    keras_like = adam_keras_f32(ps.params, grads, 1e-3, 1e-8)
    a, b = compare(torch_like, outside), compare(keras_like, hat)
    assert a.passed and b.passed, (a, b)
    assert a.bound_ratio < 0.5 and b.bound_ratio < 0.5  # well inside: the bound is not tight
    assert a.update_rel_error < 1e-4
    wrong1, wrong2 = compare(torch_like, hat), compare(keras_like, outside)
    assert not wrong1.passed and not wrong2.passed
    assert wrong1.bound_ratio > 100 and wrong1.update_rel_error > 1e-2


def test_bound_without_the_hyperparameter_term_would_reject_keras(mlp_run) -> None:  # type: ignore[no-untyped-def]
    """Keras holds beta in float32: its 1 - beta2**t is off by ~1e-5 relative at t = 1, which
    the bound's kappa term (beta/(1 - beta), Rule.conditioning) is there to allow; PyTorch
    computes it in double and passes without it."""

    class NoKappa(Adam):
        def conditioning(self) -> float:
            return 0.0

    ps, grads = mlp_run
    keras_like = adam_keras_f32(ps.params, grads[:3], 1e-3, 1e-8)
    torch_like = adam_torch_f32(ps.params, grads[:3], 1e-3, 1e-8)
    hat = make("adam", {"epsilon": "hat"}, lr=1e-3, eps=1e-8)
    assert compare(keras_like, reference(hat, ps, grads[:3])).passed
    strict = NoKappa({"epsilon": "hat"}, lr=1e-3, eps=1e-8)
    assert not compare(keras_like, reference(strict, ps, grads[:3])).passed
    strict_outside = NoKappa(lr=1e-3, eps=1e-8)
    assert compare(torch_like, reference(strict_outside, ps, grads[:3])).passed


def test_bf16_parameters_with_fp32_master_weights(mlp_run) -> None:  # type: ignore[no-untyped-def]
    ps, grads = mlp_run
    rule = make("adam", lr=1e-3, eps=1e-8)
    p0 = {k: to_bf16(v).astype(F32) for k, v in ps.params.items()}  # what the model starts from
    g = [{k: to_bf16(x).astype(F32) for k, x in gk.items()} for gk in grads[:10]]
    master = adam_torch_f32(p0, g, 1e-3, 1e-8)
    model = {k: to_bf16(v) for k, v in master.items()}  # the bf16 copy
    ref = ReferenceRun(rule, p0)
    for gk in g:
        ref.step(gk)
    assert compare(master, ref, "fp32").passed
    assert compare(model, ref, "bf16", master_dtype="fp32").passed
    assert not compare(model, ref, "fp32").passed  # the bf16 rounding is far above fp32's bound
    off = {k: v.copy() for k, v in model.items()}
    name = "fc2.weight"
    off[name].flat[7] = off[name].flat[7] * (1 + 4 * 2.0**-8)  # four bf16 ulps away
    bad = compare(off, ref, "bf16", master_dtype="fp32")
    assert not bad.passed and bad.worst_tensor == name


def test_nonfinite_values_fail(mlp_run) -> None:  # type: ignore[no-untyped-def]
    ps, grads = mlp_run
    ref = reference(make("sgd", lr=0.01), ps, grads[:2])
    got = {k: v.astype(F32) for k, v in ref.params.items()}
    assert compare(got, ref).passed
    got["head.bias"][0] = np.nan
    c = compare(got, ref)
    assert not c.passed and c.nonfinite == 1 and c.worst_tensor == "head.bias"


def test_sequential_reduction_widens_the_trust_ratio_bound() -> None:
    ps = flat_parameters(1 << 16)
    g = [gradients(ps.shapes, 1)]
    rule = make("lars", lr=0.1, momentum=0.9, weight_decay=1e-4)
    pair, seq = ReferenceRun(rule, ps.params), ReferenceRun(rule, ps.params, reduction="sequential")
    pair.step(g[0])
    seq.step(g[0])
    assert np.all(seq.tolerance()["flat"] > pair.tolerance()["flat"])


# -- what each framework documents ----------------------------------------------------------------


def test_documented_table_loads_complete_and_consistent() -> None:
    entries = documented.load()
    assert set(entries) == {(f, o) for f in documented.frameworks() for o in documented.OPTIMIZERS}
    for e in entries.values():
        if not e.supported:
            continue
        rule = e.observed_rule()
        assert rule.family == e.family
        assert e.documented_rule().name  # a valid variant
    # the documentation/implementation disagreements found in the frameworks this repository
    # ships (docs/studies/optimizer-differences.md); a framework added in its own folder records its own
    # in its optimizers.toml, which this test does not need to know
    shipped = {"pytorch", "tensorflow", "mxnet", "jax", "horovod", "numpy"}
    mismatched = {k for k, e in entries.items() if e.mismatches() and k[0] in shipped}
    assert mismatched == {
        ("tensorflow", "adamw"),
        ("tensorflow", "lamb"),
        ("mxnet", "nesterov"),
        ("mxnet", "adam"),
    }
    assert entries[("mxnet", "adam")].mismatches() == {"bias_correction": ("swapped", "on")}
    assert entries[("pytorch", "adam")].observed == {
        "epsilon": "outside",
        "bias_correction": "on",
        "amsgrad": "off",
        "weight_decay": "l2",
    }
    assert entries[("tensorflow", "adam")].observed["epsilon"] == "hat"
    assert entries[("mxnet", "lars")].reduction == "sequential"
    assert not entries[("pytorch", "lamb")].supported
    with pytest.raises(ConfigError, match="adamx"):
        documented.entry("pytorch", "adamx")


def test_documented_table_rejects_bad_entries(tmp_path: Path) -> None:
    path = tmp_path / "optimizers.toml"
    path.write_text(
        '[pytorch.adam]\nfamily = "adam"\ndocumented = { epsilon = "inside" }\n'
        'basis = { epsilon = "formula" }\nobserved = {}\ndoc = "x"\nquote = "y"\n'
    )
    with pytest.raises(ConfigError, match="epsilon = 'inside' is not a adam variant"):
        documented.load.__wrapped__(path)
    path.write_text('[caffe.adam]\nfamily = "adam"\n')
    with pytest.raises(ConfigError, match="unknown framework 'caffe'"):
        documented.load.__wrapped__(path)
