"""Operator references against independent formulas, and the Benchmark contract of each operator."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from scipy.signal import correlate2d

from suite.errors import ConfigError, SuiteError
from suite.levels import benchmark_names, load_benchmark
from suite.levels.operator.attention import attention_ref
from suite.levels.operator.norm import EPS, batch_norm_ref, layer_norm_ref
from suite.levels.operator.softmax import softmax_ref
from suite.metrics import numeric_gradient
from suite.reference_ops import conv2d_backward, conv2d_forward, out_size

from suite.levels.operator.gelu import gelu_ref  # isort: skip

OPERATORS = ["gemm", "conv2d", "norm", "softmax", "gelu", "attention"]

# -- gemm --------------------------------------------------------------------------------------


def test_gemm_reference_vs_triple_loop() -> None:
    bench = load_benchmark("operator", "gemm")
    p = {"m": 3, "n": 2, "k": 4}
    x = bench.inputs(p, np.random.default_rng(0))
    a, b = x["a"], x["b"]
    c = np.zeros((3, 2))
    for i in range(3):
        for j in range(2):
            c[i, j] = math.fsum(a[i, t] * b[t, j] for t in range(4))
    out = bench.reference(p, x)
    assert set(out) == {"c"}
    np.testing.assert_allclose(out["c"], c, rtol=1e-13, atol=1e-13)


# -- conv2d ------------------------------------------------------------------------------------


def _naive_conv(x: np.ndarray, w: np.ndarray, stride: int, padding: int) -> np.ndarray:
    n, c, h, wd = x.shape
    o, _, r, s = w.shape
    oh = (h + 2 * padding - r) // stride + 1
    ow = (wd + 2 * padding - s) // stride + 1
    y = np.zeros((n, o, oh, ow))
    for b in range(n):
        for k in range(o):
            for i in range(oh):
                for j in range(ow):
                    acc = 0.0
                    for ch in range(c):
                        for di in range(r):
                            for dj in range(s):
                                hi = i * stride + di - padding
                                wj = j * stride + dj - padding
                                if 0 <= hi < h and 0 <= wj < wd:
                                    acc += x[b, ch, hi, wj] * w[k, ch, di, dj]
                    y[b, k, i, j] = acc
    return y


# (batch, channels, height, width, out_channels, kernel, stride, padding)
CONV_CONFIGS = [
    (1, 1, 4, 4, 1, 1, 1, 0),
    (2, 3, 5, 5, 2, 3, 1, 1),
    (1, 2, 6, 7, 3, 3, 2, 0),  # stride 2 with a remainder, non-square input
    (2, 2, 7, 6, 2, 3, 2, 1),
    (1, 2, 5, 5, 2, 7, 2, 3),  # 7x7/2 pad 3, as ResNet conv1
    (1, 3, 5, 4, 2, 1, 2, 0),  # 1x1/2
    (1, 1, 3, 3, 2, 3, 1, 3),  # padding larger than the output border
]


@pytest.mark.parametrize(("n", "c", "h", "wd", "o", "k", "stride", "pad"), CONV_CONFIGS)
def test_conv2d_forward_vs_naive_loops(
    n: int, c: int, h: int, wd: int, o: int, k: int, stride: int, pad: int
) -> None:
    rng = np.random.default_rng(h * 100 + k * 10 + stride)
    x = rng.standard_normal((n, c, h, wd))
    w = rng.standard_normal((o, c, k, k))
    y = conv2d_forward(x, w, stride, pad)
    expected = _naive_conv(x, w, stride, pad)
    assert y.shape == expected.shape
    assert y.shape[2:] == (out_size(h, k, stride, pad), out_size(wd, k, stride, pad))
    np.testing.assert_allclose(y, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(("pad", "k"), [(0, 3), (1, 3), (2, 5), (0, 1)])
def test_conv2d_forward_stride1_vs_scipy_correlate(pad: int, k: int) -> None:
    rng = np.random.default_rng(pad + 10 * k)
    x = rng.standard_normal((2, 3, 6, 5))
    w = rng.standard_normal((4, 3, k, k))
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    expected = np.stack(
        [
            np.stack(
                [
                    sum(correlate2d(xp[b, ch], w[o, ch], mode="valid") for ch in range(3))
                    for o in range(4)
                ]
            )
            for b in range(2)
        ]
    )
    np.testing.assert_allclose(conv2d_forward(x, w, 1, pad), expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(
    ("n", "c", "h", "wd", "o", "k", "stride", "pad"),
    [
        (1, 2, 4, 4, 2, 3, 1, 1),
        (2, 1, 5, 6, 2, 3, 2, 0),
        (1, 2, 5, 5, 1, 3, 2, 1),
        (1, 1, 4, 4, 2, 1, 1, 0),
        (1, 1, 5, 5, 1, 7, 2, 3),
    ],
)
def test_conv2d_backward_vs_numeric_gradient(
    n: int, c: int, h: int, wd: int, o: int, k: int, stride: int, pad: int
) -> None:
    rng = np.random.default_rng(7 * h + k + stride)
    x = rng.standard_normal((n, c, h, wd))
    w = rng.standard_normal((o, c, k, k))
    dy = rng.standard_normal((n, o, out_size(h, k, stride, pad), out_size(wd, k, stride, pad)))
    dx, dw = conv2d_backward(x, w, dy, stride, pad)
    assert dx.shape == x.shape and dw.shape == w.shape
    ndx = numeric_gradient(lambda z: float(np.sum(dy * conv2d_forward(z, w, stride, pad))), x)
    ndw = numeric_gradient(lambda z: float(np.sum(dy * conv2d_forward(x, z, stride, pad))), w)
    np.testing.assert_allclose(dx, ndx, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(dw, ndw, rtol=1e-6, atol=1e-7)


def test_conv2d_backward_benchmark_outputs_match_numeric_gradient() -> None:
    bench = load_benchmark("operator", "conv2d")
    p = bench.validate(
        {
            "batch": 1,
            "in_channels": 2,
            "height": 5,
            "width": 5,
            "out_channels": 2,
            "kernel": 3,
            "stride": 2,
            "padding": 1,
            "direction": "backward",
        }
    )
    x = bench.inputs(p, np.random.default_rng(0))
    out = bench.reference(p, x)
    assert set(out) == {"dx", "dw"}
    assert bench.grad_pairs(p) == {"dx": "x", "dw": "w"}
    fwd = bench.forward_fn(p)
    assert fwd is not None
    ndx = numeric_gradient(lambda z: float(np.sum(x["dy"] * fwd(x=z, w=x["w"]))), x["x"])
    np.testing.assert_allclose(out["dx"], ndx, rtol=1e-6, atol=1e-7)
    fwd_params = {**p, "direction": "forward"}
    assert bench.forward_fn(fwd_params) is None and bench.grad_pairs(fwd_params) == {}


# -- norm --------------------------------------------------------------------------------------


def test_batch_norm_ref_vs_per_channel_loop() -> None:
    rng = np.random.default_rng(5)
    x = 0.5 + 2.0 * rng.standard_normal((3, 4, 2, 3))
    gamma = rng.standard_normal(4)
    beta = rng.standard_normal(4)
    expected = np.empty_like(x)
    for ch in range(4):
        vals = [float(v) for v in x[:, ch].ravel()]
        mean = math.fsum(vals) / len(vals)
        var = math.fsum((v - mean) ** 2 for v in vals) / len(vals)  # biased
        expected[:, ch] = (x[:, ch] - mean) / math.sqrt(var + EPS) * gamma[ch] + beta[ch]
    np.testing.assert_allclose(batch_norm_ref(x, gamma, beta), expected, rtol=1e-12, atol=1e-12)


def test_batch_norm_ref_normalises_each_channel() -> None:
    rng = np.random.default_rng(6)
    x = 3.0 + 5.0 * rng.standard_normal((4, 3, 5, 5))
    y = batch_norm_ref(x, np.ones(3), np.zeros(3), eps=0.0)
    np.testing.assert_allclose(y.mean(axis=(0, 2, 3)), 0.0, atol=1e-12)
    np.testing.assert_allclose(y.var(axis=(0, 2, 3)), 1.0, rtol=1e-12)


def test_layer_norm_ref_vs_per_row_formula() -> None:
    rng = np.random.default_rng(8)
    x = 0.5 + 2.0 * rng.standard_normal((5, 7))
    gamma = rng.standard_normal(7)
    beta = rng.standard_normal(7)
    expected = np.empty_like(x)
    for i in range(5):
        row = [float(v) for v in x[i]]
        mean = math.fsum(row) / 7
        var = math.fsum((v - mean) ** 2 for v in row) / 7
        for j in range(7):
            expected[i, j] = (row[j] - mean) / math.sqrt(var + EPS) * gamma[j] + beta[j]
    np.testing.assert_allclose(layer_norm_ref(x, gamma, beta), expected, rtol=1e-12, atol=1e-12)


# -- softmax -----------------------------------------------------------------------------------


def test_softmax_ref_vs_log_sum_exp() -> None:
    rng = np.random.default_rng(9)
    x = 3.0 * rng.standard_normal((4, 6))
    expected = np.empty_like(x)
    for i in range(4):
        row = [float(v) for v in x[i]]
        mx = max(row)
        lse = mx + math.log(math.fsum(math.exp(v - mx) for v in row))
        expected[i] = [math.exp(v - lse) for v in row]
    y = softmax_ref(x)
    np.testing.assert_allclose(y, expected, rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(y.sum(axis=-1), 1.0, rtol=1e-14)


def test_softmax_ref_shift_invariant_and_stable() -> None:
    rng = np.random.default_rng(10)
    x = rng.standard_normal((3, 5))
    shift = np.array([[1000.0], [-1000.0], [7.5]])
    np.testing.assert_allclose(softmax_ref(x + shift), softmax_ref(x), rtol=1e-10, atol=1e-15)
    big = softmax_ref(np.array([[1000.0, 1000.0, -1000.0]]))
    assert np.all(np.isfinite(big))
    np.testing.assert_allclose(big, [[0.5, 0.5, 0.0]], atol=1e-15)


# -- gelu --------------------------------------------------------------------------------------


def test_gelu_ref_vs_math_erf() -> None:
    xs = np.array([-6.0, -3.0, -1.5, -0.3, 0.0, 1e-4, 0.7, 1.0, 2.5, 8.0])
    expected = np.array([0.5 * v * (1.0 + math.erf(v / math.sqrt(2.0))) for v in xs])
    np.testing.assert_allclose(gelu_ref(xs), expected, rtol=1e-14, atol=1e-300)
    assert gelu_ref(np.array([0.0]))[0] == 0.0
    # gelu(1) = Phi(1) = 0.841344746...
    assert gelu_ref(np.array([1.0]))[0] == pytest.approx(0.8413447460685429, rel=1e-14)


def test_gelu_ref_matrix_elementwise() -> None:
    rng = np.random.default_rng(11)
    x = 2.0 * rng.standard_normal((3, 4))
    y = gelu_ref(x)
    for idx in np.ndindex(x.shape):
        v = float(x[idx])
        assert y[idx] == pytest.approx(0.5 * v * (1 + math.erf(v / math.sqrt(2))), rel=1e-13)


# -- attention ---------------------------------------------------------------------------------


def _attention_loop(q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool) -> np.ndarray:
    b_, h_, s_, d_ = q.shape
    out = np.zeros_like(q)
    for b in range(b_):
        for h in range(h_):
            for i in range(s_):
                js = range(i + 1) if causal else range(s_)
                scores = [float(q[b, h, i] @ k[b, h, j]) / math.sqrt(d_) for j in js]
                mx = max(scores)
                e = [math.exp(sc - mx) for sc in scores]
                total = math.fsum(e)
                for jj, j in enumerate(js):
                    out[b, h, i] += e[jj] / total * v[b, h, j]
    return out


@pytest.mark.parametrize("causal", [False, True])
def test_attention_ref_vs_loop(causal: bool) -> None:
    rng = np.random.default_rng(12)
    q, k, v = (rng.standard_normal((2, 3, 5, 4)) for _ in range(3))
    np.testing.assert_allclose(
        attention_ref(q, k, v, causal), _attention_loop(q, k, v, causal), rtol=1e-12, atol=1e-12
    )


def test_attention_causal_ignores_future_positions() -> None:
    rng = np.random.default_rng(13)
    q, k, v = (rng.standard_normal((1, 2, 6, 3)) for _ in range(3))
    base = attention_ref(q, k, v, True)
    k2, v2 = k.copy(), v.copy()
    k2[:, :, 4:] += 10.0 * rng.standard_normal((1, 2, 2, 3))
    v2[:, :, 4:] += 10.0
    changed = attention_ref(q, k2, v2, True)
    np.testing.assert_array_equal(changed[:, :, :4], base[:, :, :4])
    assert not np.allclose(changed[:, :, 4:], base[:, :, 4:])
    # row 0 attends only to position 0
    np.testing.assert_allclose(base[:, :, 0], v[:, :, 0], rtol=1e-14)
    # non-causal differs
    assert not np.allclose(attention_ref(q, k, v, False), base)


# -- Benchmark classes -------------------------------------------------------------------------

TINY: dict[str, list[dict[str, Any]]] = {
    "gemm": [{"m": 3, "n": 5, "k": 7}],
    "conv2d": [
        {
            "batch": 2,
            "in_channels": 3,
            "height": 8,
            "width": 8,
            "out_channels": 4,
            "kernel": 3,
            "stride": 2,
            "padding": 1,
            "direction": d,
        }
        for d in ("forward", "backward")
    ],
    "norm": [
        {"kind": "batch", "batch": 2, "channels": 3, "height": 4, "width": 5},
        {"kind": "layer", "batch": 6, "channels": 8, "height": 1, "width": 1},
    ],
    "softmax": [{"rows": 4, "cols": 9}],
    "gelu": [{"rows": 3, "cols": 11}],
    "attention": [
        {"batch": 2, "heads": 3, "seq": 5, "head_dim": 4, "causal": c} for c in (False, True)
    ],
}

CASES = [(name, p) for name, ps in TINY.items() for p in ps]
CASE_IDS = [f"{n}-{i}" for n, ps in TINY.items() for i in range(len(ps))]


def _shapes(name: str, p: dict[str, Any]) -> tuple[dict[str, tuple[int, ...]], dict[str, Any]]:
    """Expected input and output shapes, written out per operator."""
    if name == "gemm":
        return {"a": (p["m"], p["k"]), "b": (p["k"], p["n"])}, {"c": (p["m"], p["n"])}
    if name == "conv2d":
        oh = (p["height"] + 2 * p["padding"] - p["kernel"]) // p["stride"] + 1
        ow = (p["width"] + 2 * p["padding"] - p["kernel"]) // p["stride"] + 1
        xs = (p["batch"], p["in_channels"], p["height"], p["width"])
        ws = (p["out_channels"], p["in_channels"], p["kernel"], p["kernel"])
        ys = (p["batch"], p["out_channels"], oh, ow)
        if p["direction"] == "forward":
            return {"x": xs, "w": ws}, {"y": ys}
        return {"x": xs, "w": ws, "dy": ys}, {"dx": xs, "dw": ws}
    if name == "norm":
        ns: tuple[int, ...] = (p["batch"], p["channels"])
        if p["kind"] == "batch":
            ns = (*ns, p["height"], p["width"])
        c = (p["channels"],)
        return {"x": ns, "gamma": c, "beta": c}, {"y": ns}
    if name in ("softmax", "gelu"):
        return {"x": (p["rows"], p["cols"])}, {"y": (p["rows"], p["cols"])}
    if name == "attention":
        s = (p["batch"], p["heads"], p["seq"], p["head_dim"])
        return {"q": s, "k": s, "v": s}, {"o": s}
    raise AssertionError(name)


def test_registry_lists_the_six_operators() -> None:
    assert sorted(benchmark_names("operator")) == sorted(OPERATORS)
    for name in OPERATORS:
        assert load_benchmark("operator", name).name == name
    with pytest.raises(ConfigError, match="nope"):
        load_benchmark("operator", "nope")


@pytest.mark.parametrize(("name", "params"), CASES, ids=CASE_IDS)
def test_inputs_seeded_nonzero_finite_and_shaped(name: str, params: dict[str, Any]) -> None:
    bench = load_benchmark("operator", name)
    p = bench.validate(params)
    a = bench.inputs(p, np.random.default_rng(42))
    b = bench.inputs(p, np.random.default_rng(42))
    c = bench.inputs(p, np.random.default_rng(43))
    in_shapes, out_shapes = _shapes(name, p)
    assert set(a) == set(in_shapes)
    for key, shape in in_shapes.items():
        assert a[key].shape == shape, key
        assert a[key].dtype == np.float64
        assert np.all(np.isfinite(a[key])), key
        assert np.all(a[key] != 0), key
        np.testing.assert_array_equal(a[key], b[key])
        assert not np.array_equal(a[key], c[key]), key
    out = bench.reference(p, a)
    assert set(out) == set(out_shapes)
    for key, shape in out_shapes.items():
        assert out[key].shape == shape, key
        assert out[key].dtype == np.float64
        assert np.all(np.isfinite(out[key])), key


WORK: list[tuple[str, dict[str, Any], Callable[[int], float], float]] = [
    # (benchmark, params, bytes(itemsize), flops)
    ("gemm", TINY["gemm"][0], lambda i: i * (3 * 7 + 7 * 5 + 3 * 5), 2.0 * 3 * 5 * 7),
    # conv 2x3x8x8, 4 filters 3x3/2 p1: output 2x4x4x4
    (
        "conv2d",
        TINY["conv2d"][0],
        lambda i: i * (2 * 3 * 64 + 4 * 3 * 9 + 2 * 4 * 16),
        2.0 * 2 * 4 * 4 * 4 * 3 * 3 * 3,
    ),
    (
        "conv2d",
        TINY["conv2d"][1],
        lambda i: i * (2 * 4 * 16 + 2 * (2 * 3 * 64) + 2 * (4 * 3 * 9)),
        2.0 * (2.0 * 2 * 4 * 4 * 4 * 3 * 3 * 3),
    ),
    ("norm", TINY["norm"][0], lambda i: i * (2 * 120 + 2 * 3), 8.0 * 120),
    ("norm", TINY["norm"][1], lambda i: i * (2 * 48 + 2 * 8), 8.0 * 48),
    ("softmax", TINY["softmax"][0], lambda i: i * 2 * 36, 5.0 * 36),
    ("gelu", TINY["gelu"][0], lambda i: i * 2 * 33, 8.0 * 33),
    ("attention", TINY["attention"][0], lambda i: i * 4 * 120, 4.0 * 2 * 3 * 5 * 5 * 4),
    ("attention", TINY["attention"][1], lambda i: i * 4 * 120, 4.0 * 2 * 3 * 5 * 5 * 4 / 2),
]


@pytest.mark.parametrize(("name", "params", "nbytes", "flops"), WORK)
def test_flops_and_bytes_by_hand(
    name: str, params: dict[str, Any], nbytes: Callable[[int], float], flops: float
) -> None:
    bench = load_benchmark("operator", name)
    p = bench.validate(params)
    assert bench.flops(p) == pytest.approx(flops, rel=1e-15)
    assert type(bench.flops(p)) is float
    for itemsize in (2, 4):
        assert bench.bytes_moved(p, itemsize) == pytest.approx(nbytes(itemsize), rel=1e-15)
        assert type(bench.bytes_moved(p, itemsize)) is float


def test_conv_backward_is_twice_forward_and_causal_is_half() -> None:
    conv = load_benchmark("operator", "conv2d")
    fwd, bwd = (conv.validate(p) for p in TINY["conv2d"])
    assert conv.flops(bwd) == 2 * conv.flops(fwd)
    att = load_benchmark("operator", "attention")
    full, causal = (att.validate(p) for p in TINY["attention"])
    assert att.flops(causal) == att.flops(full) / 2


@pytest.mark.parametrize("name", OPERATORS)
def test_every_size_validates_and_full_sizes_name_their_network(name: str) -> None:
    bench = load_benchmark("operator", name)
    quick = bench.sizes("quick")
    full = bench.sizes("full")
    assert quick and full
    for spec in quick + full:
        out = bench.validate(spec.params)
        assert out.items() >= spec.params.items()
        assert bench.label(out)
    for spec in quick:
        assert spec.source.startswith("quick")
    for spec in full:
        assert isinstance(spec.source, str) and spec.source.strip()
        assert not spec.source.lower().startswith("quick"), spec.source
    # no duplicate parameter sets within a size set
    for specs in (quick, full):
        keys = [tuple(sorted(bench.validate(s.params).items())) for s in specs]
        assert len(keys) == len(set(keys))


def test_quick_sizes_cover_both_conv_directions_and_norm_kinds() -> None:
    conv = load_benchmark("operator", "conv2d")
    for size_set in ("quick", "full"):
        dirs = [s.params["direction"] for s in conv.sizes(size_set)]
        assert dirs.count("forward") == dirs.count("backward") > 0
    kinds = {s.params["kind"] for s in load_benchmark("operator", "norm").sizes("quick")}
    assert kinds == {"batch", "layer"}


# -- validate ----------------------------------------------------------------------------------

REJECTS: list[tuple[str, dict[str, Any], str]] = [
    ("gemm", {"m": 0, "n": 4, "k": 4}, "m"),
    ("gemm", {"m": 4, "n": -3, "k": 4}, "n"),
    ("gemm", {"m": 4, "n": 4, "k": True}, "k"),  # bool is not an int here
    ("gemm", {"m": 4.0, "n": 4, "k": 4}, "m"),
    ("gemm", {"m": "4", "n": 4, "k": 4}, "m"),
    ("gemm", {"m": 4, "n": 4}, "k"),  # missing
    ("gemm", {"m": 4, "n": 4, "k": 4, "batches": 2}, "batches"),  # unknown
    ("conv2d", {**TINY["conv2d"][0], "padding": -1}, "padding"),
    ("conv2d", {**TINY["conv2d"][0], "stride": 0}, "stride"),
    ("conv2d", {**TINY["conv2d"][0], "direction": "sideways"}, "direction"),
    ("conv2d", {**TINY["conv2d"][0], "direction": 1}, "direction"),
    ("conv2d", {**TINY["conv2d"][0], "kernel": 11, "padding": 0}, "kernel"),
    ("conv2d", {**TINY["conv2d"][0], "dilations": 2}, "dilations"),  # unknown (ONNX's name)
    ("conv2d", {**TINY["conv2d"][0], "groups": 3}, "groups"),  # divides no channel count
    ("norm", {"kind": "group", "batch": 2, "channels": 3}, "kind"),
    ("norm", {"kind": "layer", "batch": 2, "channels": 3, "height": 2}, "height"),
    ("norm", {"kind": "batch", "batch": 1, "channels": 3}, "batch"),
    ("softmax", {"rows": 4, "cols": False}, "cols"),
    ("gelu", {"rows": -1, "cols": 4}, "rows"),
    ("attention", {**TINY["attention"][0], "causal": 1}, "causal"),
    ("attention", {**TINY["attention"][0], "head_dim": 0}, "head_dim"),
    ("attention", {**TINY["attention"][0], "causal": "yes"}, "causal"),
]


@pytest.mark.parametrize(("name", "params", "field"), REJECTS)
def test_validate_rejects_with_config_error_naming_field(
    name: str, params: dict[str, Any], field: str
) -> None:
    bench = load_benchmark("operator", name)
    with pytest.raises(ConfigError) as info:
        bench.validate(params)
    assert isinstance(info.value, SuiteError)
    assert field in str(info.value)


def test_validate_fills_defaults_without_mutating_input() -> None:
    conv = load_benchmark("operator", "conv2d")
    given = {
        "batch": 1,
        "in_channels": 2,
        "height": 5,
        "width": 5,
        "out_channels": 2,
        "kernel": 3,
    }
    before = dict(given)
    out = conv.validate(given)
    assert given == before
    assert (out["stride"], out["padding"], out["direction"]) == (1, 0, "forward")
    att = load_benchmark("operator", "attention")
    assert att.validate({"batch": 1, "heads": 1, "seq": 2, "head_dim": 2})["causal"] is False
    norm = load_benchmark("operator", "norm")
    out = norm.validate({"kind": "layer", "batch": 2, "channels": 3})
    assert (out["height"], out["width"]) == (1, 1)


def test_validate_accepts_zero_padding_and_kernel_equal_to_padded_input() -> None:
    conv = load_benchmark("operator", "conv2d")
    p = {**TINY["conv2d"][0], "height": 3, "width": 3, "kernel": 5, "padding": 1}
    out = conv.validate(p)
    assert out["padding"] == 1
    x = conv.inputs(out, np.random.default_rng(0))
    assert conv.reference(out, x)["y"].shape == (2, 4, 1, 1)
