"""The operator level's round-4 additions, framework-free: grouped and dilated convolution, the
backward (vector-Jacobian product) of every operator, and parameters added since earlier
records that keep those records' identity (``Field(implicit=True)``)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from suite import metrics as M
from suite.errors import ConfigError
from suite.levels import load_benchmark
from suite.reference_ops import conv2d_backward, conv2d_forward, out_size

BACKWARD: list[tuple[str, dict[str, Any]]] = [
    ("conv2d", {"batch": 2, "in_channels": 4, "height": 7, "width": 6, "out_channels": 6,
                "kernel": 3, "stride": 2, "padding": 2, "groups": 2, "dilation": 2,
                "direction": "backward"}),
    ("conv2d", {"batch": 2, "in_channels": 3, "height": 8, "width": 8, "out_channels": 4,
                "kernel": 3, "stride": 1, "padding": 1, "direction": "backward",
                "input_grad": False}),
    ("gemm", {"m": 3, "n": 5, "k": 4, "direction": "backward"}),
    ("gemm", {"m": 3, "n": 5, "k": 4, "batch": 2, "direction": "backward"}),
    ("norm", {"kind": "batch", "batch": 2, "channels": 3, "height": 2, "width": 3,
              "direction": "backward"}),
    ("norm", {"kind": "layer", "batch": 5, "channels": 6, "direction": "backward"}),
    ("softmax", {"rows": 4, "cols": 7, "direction": "backward"}),
    ("gelu", {"rows": 3, "cols": 5, "direction": "backward"}),
    ("attention", {"batch": 1, "heads": 2, "seq": 4, "head_dim": 3, "causal": False,
                   "direction": "backward"}),
    ("attention", {"batch": 1, "heads": 2, "seq": 4, "head_dim": 3, "causal": True,
                   "direction": "backward"}),
]  # fmt: skip


@pytest.mark.parametrize(("name", "params"), BACKWARD, ids=lambda v: str(v)[:40])
def test_backward_reference_is_the_vjp_of_the_forward(name: str, params: dict[str, Any]) -> None:
    """Each backward benchmark's float64 reference against central differences of its own
    float64 forward, in three random directions per gradient."""
    bench = load_benchmark("operator", name)
    p = bench.validate(params)
    x = bench.inputs(p, np.random.default_rng(5))
    ref = bench.reference(p, x)
    forward = bench.forward_fn(p)
    assert forward is not None
    cot = x[bench.cotangent]
    pairs = bench.grad_pairs(p)
    assert set(ref) == set(pairs)
    primals = {k: v for k, v in x.items() if k != bench.cotangent}
    for out, wrt in pairs.items():

        def f(z: np.ndarray, wrt: str = wrt) -> np.ndarray:
            return forward(**{**primals, wrt: z})

        err = M.directional_gradcheck(f, primals[wrt], cot, ref[out], n_directions=3, seed=1)
        assert err < 1e-7, (name, out, err)
    assert bench.flops(p) > 0 and bench.bytes_moved(p, 4) > 0


def _conv_loop(x: np.ndarray, w: np.ndarray, s: int, p: int, d: int, g: int) -> np.ndarray:
    """A grouped, dilated convolution written as its definition, one output at a time."""
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p)))
    oh, ow = out_size(h, kh, s, p, d), out_size(wd, kw, s, p, d)
    y = np.zeros((n, o, oh, ow))
    per = o // g
    for b in range(n):
        for oc in range(o):
            grp = oc // per
            for i in range(oh):
                for j in range(ow):
                    acc = 0.0
                    for ic in range(cg):
                        for a in range(kh):
                            for bb in range(kw):
                                acc += (
                                    xp[b, grp * cg + ic, i * s + a * d, j * s + bb * d]
                                    * w[oc, ic, a, bb]
                                )
                    y[b, oc, i, j] = acc
    return y


@pytest.mark.parametrize(("stride", "padding", "dilation", "groups"),
                         [(1, 0, 1, 1), (2, 1, 1, 3), (1, 2, 2, 1), (2, 2, 3, 3), (1, 1, 1, 6)])  # fmt: skip
def test_grouped_dilated_convolution_reference(
    stride: int, padding: int, dilation: int, groups: int
) -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 6, 9, 8))
    w = rng.standard_normal((6, 6 // groups, 3, 3))
    y = conv2d_forward(x, w, stride, padding, dilation, groups)
    np.testing.assert_allclose(y, _conv_loop(x, w, stride, padding, dilation, groups), atol=1e-12)
    dy = rng.standard_normal(y.shape)
    dx, dw = conv2d_backward(x, w, dy, stride, padding, dilation, groups)
    for wrt, grad in (("x", dx), ("w", dw)):

        def f(z: np.ndarray, wrt: str = wrt) -> np.ndarray:
            args = {"x": x, "w": w, wrt: z}
            return conv2d_forward(args["x"], args["w"], stride, padding, dilation, groups)

        base = x if wrt == "x" else w
        assert M.directional_gradcheck(f, base, dy, grad, seed=2) < 1e-9


def test_fields_added_later_keep_earlier_records_identity() -> None:
    """A plain convolution, a forward GEMM, ... validate to exactly the parameters records of
    earlier versions hold: the new fields at their defaults are left out (and an explicit
    default is too), so task ids and comparisons across versions still match."""
    conv = load_benchmark("operator", "conv2d")
    plain = {"batch": 2, "in_channels": 3, "height": 8, "width": 8, "out_channels": 4,
             "kernel": 3, "stride": 1, "padding": 1, "direction": "forward"}  # fmt: skip
    assert conv.validate(plain) == plain
    assert conv.validate({**plain, "groups": 1, "dilation": 1}) == plain
    assert conv.validate({**plain, "in_channels": 4, "groups": 2})["groups"] == 2
    gemm = load_benchmark("operator", "gemm")
    assert gemm.validate({"m": 2, "n": 3, "k": 4}) == {"m": 2, "n": 3, "k": 4}
    assert gemm.validate({"m": 2, "n": 3, "k": 4, "direction": "forward", "batch": 1}) == {
        "m": 2, "n": 3, "k": 4,
    }  # fmt: skip
    for name, params in (("softmax", {"rows": 2, "cols": 3}), ("gelu", {"rows": 2, "cols": 3})):
        assert load_benchmark("operator", name).validate(params) == params


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"groups": 3}, "groups"),  # divides neither 4 nor 6
        ({"dilation": 4}, "kernel"),  # spans 9 > 8 + 2*0
        ({"input_grad": False}, "input_grad"),  # a forward has no input gradient
    ],
)
def test_conv_new_fields_are_checked(params: dict[str, Any], field: str) -> None:
    base = {"batch": 1, "in_channels": 4, "height": 8, "width": 8, "out_channels": 6,
            "kernel": 3, "padding": 0}  # fmt: skip
    with pytest.raises(ConfigError, match=f"conv2d.{field}"):
        load_benchmark("operator", "conv2d").validate({**base, **params})


def test_weight_only_backward_moves_and_computes_less() -> None:
    conv = load_benchmark("operator", "conv2d")
    both = conv.validate({**BACKWARD[1][1], "input_grad": True})
    weight = conv.validate(BACKWARD[1][1])
    assert conv.flops(weight) == conv.flops(both) / 2
    assert conv.bytes_moved(weight, 4) < conv.bytes_moved(both, 4)
    assert conv.grad_pairs(weight) == {"dw": "w"}
    assert "bwd(dw)" in conv.label(weight)
