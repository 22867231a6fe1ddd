"""Every ONNX op an adapter declares (``onnx_ops``), run through its network words on a small
graph and checked against onnxruntime: the op's attributes that real exports use (groups,
dilations, asymmetric and ceil-mode padding, broadcasting, negative axes and indices, pad
modes, resize modes, ...). The corpus (test_corpus.py) runs whole models; this file reaches
the kernels no corpus model needs, so that what an adapter declares is what it runs.

Each graph reads ``x`` through a trainable weight (``x * x_scale``: a network with no parameter is
inference-only; ``x + x_shift`` for an adapter that declares no ``Mul``) and is checked in
inference mode. A case whose graph needs an op the adapter does not declare (the op under test,
a helper op of the case, or the scaffold where it declares neither ``Mul`` nor ``Add``) is
checked to be declined by the network level naming the first such op and its node, and is
reported as skipped with that reason; an adapter without the network words has every case
declined for that.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from suite.adapters import Adapter
from suite.adapters.base import NetworkOptions
from tests.conformance.test_adapters import (  # noqa: F401  (adapter: the kit's fixture)
    FAST,
    adapter,
    network_words_reason,
    skip_declared,
)

F, I64, BOOL = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
SHAPE = (2, 3, 6, 5)  # the default input (batch 2)


#: the ops a case may read its input through, in order of preference (the first the adapter
#: declares): ``x * x_scale`` or ``x + x_shift``, a trainable weight either way
SCAFFOLDS = ("Mul", "Add")


@dataclass
class Case:
    """A graph from ``x * x_scale`` (value "h") to "y"; ``ops`` are what it checks."""

    name: str
    ops: tuple[str, ...]
    nodes: list[onnx.NodeProto]
    inits: dict[str, np.ndarray] = field(default_factory=dict)
    shape: tuple[int, ...] = SHAPE
    opset: int = 17
    tolerance: float = 1e-5
    #: a variant an adapter may refuse (UnsupportedError naming the op's node, a skip at the
    #: level) instead of running it; the op's main cases must run
    optional: bool = False
    #: where onnxruntime lacks the variant, the same function in ops it runs (and their
    #: initializers): the reference is that graph's output
    same_as: tuple[list[onnx.NodeProto], dict[str, np.ndarray]] | None = None


def _n(op: str, ins: list[str], outs: list[str] | str = "y", **attrs: Any) -> onnx.NodeProto:
    return helper.make_node(op, ins, [outs] if isinstance(outs, str) else outs, **attrs)


def _i(*v: int) -> np.ndarray:
    return np.array(v, np.int64)


def _f(*v: float) -> np.ndarray:
    return np.array(v, np.float32)


def _r(*shape: int, seed: int = 0, scale: float = 0.5) -> np.ndarray:
    return (scale * np.random.default_rng(seed).standard_normal(shape)).astype(np.float32)


def _lrn_in_core_ops(
    size: int, channels: int, alpha: float, beta: float, bias: float
) -> tuple[list[onnx.NodeProto], dict[str, np.ndarray]]:
    """ONNX's LRN written out: the squares summed over the channels ``floor((size-1)/2)``
    below to ``ceil((size-1)/2)`` above by a 1x1 convolution with a band of ones, then
    ``h / (bias + alpha/size * sum) ** beta`` (onnxruntime runs LRN at odd sizes only)."""
    lo = (size - 1) // 2
    band = np.zeros((channels, channels, 1, 1), np.float32)
    for c in range(channels):
        band[c, max(0, c - lo) : min(channels, c + size - lo), 0, 0] = 1.0
    nodes = [_n("Mul", ["h", "h"], "sq"), _n("Conv", ["sq", "band"], "s"),
             _n("Mul", ["s", "k"], "ks"), _n("Add", ["ks", "bias"], "d"),
             _n("Pow", ["d", "beta"], "p"), _n("Div", ["h", "p"], "y")]  # fmt: skip
    return nodes, {"band": band, "k": _f(alpha / size), "bias": _f(bias), "beta": _f(beta)}


def _unary(op: str, **attrs: Any) -> Case:
    return Case(op, (op,), [_n(op, ["h"], **attrs)])


CASES: list[Case] = [
    *(
        _unary(op)
        for op in (
            "Abs",
            "Ceil",
            "Erf",
            "Exp",
            "Floor",
            "Identity",
            "Neg",
            "Relu",
            "Sigmoid",
            "Softplus",
            "Tanh",
            "Reciprocal",
        )
    ),  # fmt: skip
    Case("Log", ("Log", "Abs"), [_n("Abs", ["h"], "a"), _n("Log", ["a"])]),
    Case("Sqrt", ("Sqrt", "Abs"), [_n("Abs", ["h"], "a"), _n("Sqrt", ["a"])]),
    Case("Gelu", ("Gelu",), [_n("Gelu", ["h"])], opset=20),
    Case("Gelu-tanh", ("Gelu",), [_n("Gelu", ["h"], approximate="tanh")], opset=20),
    _unary("HardSigmoid", alpha=0.3, beta=0.4),
    _unary("HardSwish"),
    _unary("LeakyRelu", alpha=0.1),
    _unary("Elu", alpha=0.7),
    _unary("Selu"),
    Case("Selu-attributes", ("Selu",), [_n("Selu", ["h"], alpha=2.0, gamma=1.5)]),
    # a slope per channel (as PyTorch's nn.PReLU(C) exports from opset 7), and one for all
    Case("PRelu", ("PRelu",), [_n("PRelu", ["h", "s"])], {"s": _r(3, 1, 1, seed=61)}),
    Case("PRelu-shared", ("PRelu",), [_n("PRelu", ["h", "s"])], {"s": _f(0.25)}),
    Case("Clip", ("Clip",), [_n("Clip", ["h", "lo", "hi"])], {"lo": _f(-0.2), "hi": _f(0.3)}),
    Case("Clip-max-only", ("Clip",), [_n("Clip", ["h", "", "hi"])], {"hi": _f(0.1)}),
    Case(
        "Cast-int-float",
        ("Cast",),
        [_n("Mul", ["h", "ten"], "t"), _n("Cast", ["t"], "c", to=I64), _n("Cast", ["c"], to=F)],
        {"ten": _f(10.0)},
    ),  # fmt: skip
    *(
        Case(op, (op,), [_n(op, ["h", "b"])], {"b": _r(6, 5, seed=3) + 2.0})
        for op in ("Add", "Sub", "Mul", "Div")
    ),  # fmt: skip
    Case("Sub-scalar-first", ("Sub",), [_n("Sub", ["one", "h"])], {"one": _f(1.0)}),
    Case("Div-scalar", ("Div",), [_n("Div", ["h", "two"])], {"two": _f(2.0)}),
    Case("Pow-square", ("Pow",), [_n("Pow", ["h", "two"])], {"two": _f(2.0)}),
    Case(
        "Pow",
        ("Pow", "Abs"),
        [_n("Abs", ["h"], "a"), _n("Pow", ["a", "e"])],
        {"e": _r(5, seed=4) + 1.5},
    ),  # fmt: skip
    Case(
        "Max-Min-Sum",
        ("Max", "Min", "Sum"),
        [_n("Max", ["h", "b", "c"], "m"), _n("Min", ["m", "d"], "n"), _n("Sum", ["n", "h", "b"])],
        {"b": _r(5, seed=5), "c": _f(0.1), "d": _r(3, 1, 1, seed=6)},
    ),  # fmt: skip
    Case(
        "logic",
        ("Greater", "Less", "And", "Or", "Not", "Cast"),
        [
            _n("Greater", ["h", "zero"], "g"),
            _n("Less", ["h", "half"], "l"),
            _n("And", ["g", "l"], "a"),
            _n("Less", ["h", "minus"], "m"),
            _n("Not", ["m"], "nm"),
            _n("Or", ["a", "nm"], "o"),
            _n("Cast", ["o"], to=F),
        ],
        {"zero": _f(0.0), "half": _f(0.5), "minus": _f(-0.5)},
    ),  # fmt: skip
    Case(
        "Equal-Where",
        ("Equal", "Where", "Floor"),
        [_n("Floor", ["h"], "f"), _n("Equal", ["f", "zero"], "e"), _n("Where", ["e", "h", "b"])],
        {"zero": _f(0.0), "b": _r(5, seed=7)},
    ),  # fmt: skip
    Case(
        "IsNaN",
        ("IsNaN", "Sqrt", "Where"),
        [_n("Sqrt", ["h"], "s"), _n("IsNaN", ["s"], "n"), _n("Where", ["n", "zero", "s"])],
        {"zero": _f(0.0)},
    ),  # fmt: skip
    Case(
        "IsInf",
        ("IsInf", "Reciprocal", "Floor", "Sigmoid", "Cast"),
        [
            _n("Sigmoid", ["h"], "s"),
            _n("Floor", ["s"], "f"),
            _n("Reciprocal", ["f"], "r"),
            _n("IsInf", ["r"], "i"),
            _n("Cast", ["i"], to=F),
        ],
    ),  # fmt: skip
    # products
    Case("MatMul-2d-weight", ("MatMul",), [_n("MatMul", ["h", "b"])], {"b": _r(5, 4, seed=8)}),
    Case(
        "MatMul-batched",
        ("MatMul", "Transpose"),
        [_n("Transpose", ["h"], "t", perm=[0, 1, 3, 2]), _n("MatMul", ["h", "t"])],
    ),
    Case("MatMul-broadcast", ("MatMul",), [_n("MatMul", ["h", "b"])], {"b": _r(3, 5, 2, seed=9)}),
    Case("MatMul-vector", ("MatMul",), [_n("MatMul", ["h", "b"])], {"b": _r(5, seed=10)}),
    Case(
        "Gemm",
        ("Gemm",),
        [_n("Gemm", ["h", "b", "c"], transB=1)],
        {"b": _r(4, 7, seed=11), "c": _r(4, seed=12)},
        shape=(3, 7),
    ),  # fmt: skip
    Case(
        "Gemm-general",
        ("Gemm",),
        [_n("Gemm", ["h", "b", "c"], transA=1, alpha=0.5, beta=2.0)],
        {"b": _r(3, 4, seed=13), "c": _r(1, 4, seed=14)},
        shape=(3, 7),
    ),  # fmt: skip
    Case(
        "Einsum",
        ("Einsum",),
        [_n("Einsum", ["h", "b"], equation="bchw,wk->bkhc")],
        {"b": _r(5, 4, seed=15)},
    ),  # fmt: skip
    Case(
        "Einsum-attention",
        ("Einsum",),
        [_n("Einsum", ["h", "h"], equation="bchw,bcvw->bchv")],
    ),  # fmt: skip
    Case(
        "Einsum-reduce",
        ("Einsum",),
        [_n("Einsum", ["h"], equation="bchw->bw")],
    ),  # fmt: skip
    Case(
        "Einsum-implicit",
        ("Einsum",),
        [_n("Einsum", ["h", "b"], equation="bchw,wk")],
        {"b": _r(5, 4, seed=15)},
        optional=True,  # NumPy's kernel refuses an implicit output
    ),  # fmt: skip
    Case(
        "Conv",
        ("Conv",),
        [_n("Conv", ["h", "w", "b"], pads=[1, 0, 2, 1], strides=[2, 1])],
        {"w": _r(4, 3, 3, 2, seed=16), "b": _r(4, seed=17)},
    ),  # fmt: skip
    Case(
        "Conv-grouped-dilated",
        ("Conv",),
        [_n("Conv", ["h", "w"], group=3, dilations=[2, 1], pads=[2, 1, 2, 1])],
        {"w": _r(6, 1, 3, 3, seed=18)},
    ),  # fmt: skip
    Case(
        "Conv-groups",
        ("Conv",),
        [_n("Conv", ["h", "w", "b"], group=2, pads=[1, 1, 1, 1])],
        {"w": _r(4, 2, 3, 3, seed=19), "b": _r(4, seed=20)},
        shape=(2, 4, 6, 5),
    ),  # fmt: skip
    Case(
        "Conv-same-upper",
        ("Conv",),
        [_n("Conv", ["h", "w"], auto_pad="SAME_UPPER", strides=[2, 2])],
        {"w": _r(2, 3, 3, 3, seed=21)},
    ),  # fmt: skip
    Case(
        "Conv-1d",
        ("Conv",),
        [_n("Conv", ["h", "w"], pads=[1, 1])],
        {"w": _r(2, 4, 3, seed=22)},
        shape=(2, 4, 9),
        optional=True,
    ),  # fmt: skip
    Case(
        "ConvTranspose",
        ("ConvTranspose",),
        [
            _n(
                "ConvTranspose",
                ["h", "w", "b"],
                strides=[2, 2],
                pads=[1, 0, 1, 1],
                output_padding=[1, 0],
            )
        ],
        {"w": _r(3, 2, 3, 3, seed=23), "b": _r(2, seed=24)},
    ),  # fmt: skip
    # pooling
    Case(
        "MaxPool-ceil",
        ("MaxPool",),
        [_n("MaxPool", ["h"], kernel_shape=[3, 2], strides=[2, 2], pads=[1, 0, 1, 0], ceil_mode=1)],
    ),
    Case(
        "AveragePool-ceil",
        ("AveragePool",),
        [
            _n(
                "AveragePool",
                ["h"],
                kernel_shape=[3, 3],
                strides=[2, 2],
                pads=[1, 1, 1, 1],
                ceil_mode=1,
            )
        ],
    ),  # fmt: skip
    Case(
        "AveragePool-include-pad",
        ("AveragePool",),
        [
            _n(
                "AveragePool",
                ["h"],
                kernel_shape=[2, 3],
                strides=[1, 2],
                pads=[0, 1, 1, 1],
                count_include_pad=1,
            )
        ],
    ),  # fmt: skip
    _unary("GlobalAveragePool"),
    _unary("GlobalMaxPool"),
    # normalisation
    Case(
        "BatchNormalization",
        ("BatchNormalization",),
        [_n("BatchNormalization", ["h", "s", "b", "m", "v"], epsilon=1e-3)],
        {
            "s": _r(3, seed=25) + 1,
            "b": _r(3, seed=26),
            "m": _r(3, seed=27),
            "v": np.abs(_r(3, seed=28)) + 0.5,
        },
    ),  # fmt: skip
    Case(
        "InstanceNormalization",
        ("InstanceNormalization",),
        [_n("InstanceNormalization", ["h", "s", "b"])],
        {"s": _r(3, seed=29) + 1, "b": _r(3, seed=30)},
    ),
    # AlexNet's and GoogLeNet's (size 5, here wider than the 3 channels) with the
    # normalisation made visible (their alpha, 1e-4, changes nothing at this scale)
    Case("LRN", ("LRN",), [_n("LRN", ["h"], size=5, alpha=0.8, beta=0.75, bias=1.5)]),
    Case(
        "LRN-size-3", ("LRN",), [_n("LRN", ["h"], size=3, alpha=0.5, beta=0.6)], shape=(2, 6, 4, 3)
    ),
    # an even size: ONNX's window has one channel more above than below (MXNet's LRN refuses)
    Case(
        "LRN-even",
        ("LRN",),
        [_n("LRN", ["h"], size=2, alpha=0.5, beta=0.75, bias=1.2)],
        shape=(2, 6, 4, 3),
        optional=True,
        same_as=_lrn_in_core_ops(2, 6, alpha=0.5, beta=0.75, bias=1.2),
    ),
    Case(
        "LayerNormalization",
        ("LayerNormalization",),
        [_n("LayerNormalization", ["h", "s", "b"])],
        {"s": _r(5, seed=31) + 1, "b": _r(5, seed=32)},
    ),  # fmt: skip
    Case(
        "LayerNormalization-2-axes",
        ("LayerNormalization",),
        [_n("LayerNormalization", ["h", "s"], axis=-2, epsilon=1e-3)],
        {"s": _r(6, 5, seed=33)},
    ),
    _unary("Softmax", axis=1),
    _unary("LogSoftmax", axis=-1),
    # reductions
    *(
        Case(op, (op,), [_n(op, ["h", "axes"], keepdims=k)], {"axes": _i(1, -1)}, opset=18)
        for op, k in (
            ("ReduceMean", 1),
            ("ReduceSum", 0),
            ("ReduceMax", 1),
            ("ReduceMin", 0),
            ("ReduceProd", 1),
            ("ReduceSumSquare", 0),
            ("ReduceL2", 1),
        )
    ),  # fmt: skip
    Case("ReduceMean-opset13", ("ReduceMean",), [_n("ReduceMean", ["h"], axes=[2, 3])]),
    # layout
    Case(
        "Concat",
        ("Concat",),
        [_n("Concat", ["h", "b", "h"], axis=1)],
        {"b": _r(2, 1, 6, 5, seed=34)},
    ),
    Case(
        "Dropout",
        ("Dropout",),
        [_n("Dropout", ["h", "ratio"])],
        {"ratio": np.array(0.3, np.float32)},
    ),
    Case("Expand", ("Expand",), [_n("Expand", ["h", "s"])], {"s": _i(3, 1, 1, 1, 1)}),
    Case("Flatten", ("Flatten",), [_n("Flatten", ["h"], axis=2)]),
    Case("Gather", ("Gather",), [_n("Gather", ["h", "i"], axis=2)], {"i": _i(0, -1, 3)}),
    Case("Gather-scalar", ("Gather",), [_n("Gather", ["h", "i"], axis=1)], {"i": np.array(-2)}),
    Case(
        "Gather-embedding",
        ("Gather", "Cast", "Abs", "Floor"),
        [
            _n("Abs", ["h"], "a"),
            _n("Floor", ["a"], "f"),
            _n("Cast", ["f"], "c", to=I64),
            _n("Gather", ["table", "c"]),
        ],
        {"table": _r(10, 4, seed=35)},
    ),  # fmt: skip
    Case(
        "Pad-constant",
        ("Pad",),
        [_n("Pad", ["h", "p", "v"], mode="constant")],
        {"p": _i(0, 0, 2, 1, 0, 1, 1, 2), "v": _f(0.5)},
    ),  # fmt: skip
    # before opset 11 the pads and the value are attributes (PyTorch's ConstantPad2d, opset 6)
    Case(
        "Pad-opset-10",
        ("Pad",),
        [_n("Pad", ["h"], mode="constant", pads=[0, 0, 2, 1, 0, 1, 1, 2], value=2.0)],
        opset=10,
    ),  # fmt: skip
    *(
        Case(
            f"Pad-{mode}",
            ("Pad",),
            [_n("Pad", ["h", "p"], mode=mode)],
            {"p": _i(0, 0, 2, 1, 0, 1, 1, 2)},
            opset=19,
        )
        for mode in ("reflect", "edge", "wrap")
    ),  # fmt: skip
    Case("Reshape", ("Reshape",), [_n("Reshape", ["h", "s"])], {"s": _i(0, -1, 5)}),
    Case(
        "Resize-nearest",
        ("Resize",),
        [_n("Resize", ["h", "", "s"], mode="nearest")],
        {"s": _f(1, 1, 2, 1.5)},
        opset=18,
    ),  # fmt: skip
    Case(
        "Resize-linear",
        ("Resize",),
        [
            _n(
                "Resize",
                ["h", "", "", "sz"],
                mode="linear",
                coordinate_transformation_mode="align_corners",
            )
        ],
        {"sz": _i(2, 3, 9, 4)},
        opset=18,
    ),  # fmt: skip
    Case(
        "Slice",
        ("Slice",),
        [_n("Slice", ["h", "st", "en", "ax", "sp"])],
        {"st": _i(-1, 1), "en": _i(-100, 5), "ax": _i(2, 3), "sp": _i(-2, 2)},
    ),  # fmt: skip
    Case(
        "Split",
        ("Split",),
        [_n("Split", ["h", "sp"], ["a", "b"], axis=2), _n("Mul", ["a", "b"])],
        {"sp": _i(3, 3)},
    ),  # fmt: skip
    Case(
        "Split-unequal",
        ("Split", "Concat"),
        [_n("Split", ["h", "sp"], ["a", "b"], axis=-1), _n("Concat", ["b", "a"], axis=-1)],
        {"sp": _i(2, 3)},
    ),  # fmt: skip
    Case(
        "Squeeze-Unsqueeze",
        ("Squeeze", "Unsqueeze"),
        [_n("Unsqueeze", ["h", "a"], "u"), _n("Squeeze", ["u", "a"])],
        {"a": _i(-1)},
    ),
    Case("Tile", ("Tile",), [_n("Tile", ["h", "r"])], {"r": _i(1, 2, 1, 2)}),
    Case("Transpose", ("Transpose",), [_n("Transpose", ["h"], perm=[0, 2, 3, 1])]),
    Case(
        "Upsample",
        ("Upsample",),
        [_n("Upsample", ["h", "s"], mode="nearest")],
        {"s": _f(1, 1, 2, 2)},
        opset=9,
    ),  # fmt: skip
]


def _model(case: Case, scaffold: str = "Mul") -> tuple[onnx.ModelProto, np.ndarray]:
    """The case's graph, reading ``x`` through ``scaffold`` (one of :data:`SCAFFOLDS`), and
    its input."""
    rng = np.random.default_rng(zlib.crc32(case.name.encode()))
    noise = 0.5 * rng.standard_normal(case.shape[1:])
    if scaffold == "Mul":
        inits = {"x_scale": (1.0 + noise).astype(np.float32), **case.inits}
        nodes = [_n("Mul", ["x", "x_scale"], "h"), *case.nodes]
    else:
        inits = {"x_shift": noise.astype(np.float32), **case.inits}
        nodes = [_n("Add", ["x", "x_shift"], "h"), *case.nodes]
    graph = helper.make_graph(
        nodes, case.name,
        [helper.make_tensor_value_info("x", F, ["N", *case.shape[1:]])],
        [helper.make_tensor_value_info("y", F, None)],
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", case.opset)])
    model.ir_version = 8
    x = rng.standard_normal(case.shape).astype(np.float32)
    # the output's shape, as ONNX's shape inference gives it for this input
    typed = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    dims = next(v for v in typed.graph.output if v.name == "y").type.tensor_type.shape.dim
    model.graph.output[0].CopyFrom(helper.make_tensor_value_info(
        "y", F, ["N" if i == 0 and d.dim_param == "N" else d.dim_value for i, d in enumerate(dims)]
    ))  # fmt: skip
    onnx.checker.check_model(model, full_check=True)
    return model, x


def _declined_by_the_level(ad: Adapter, model: onnx.ModelProto, folder: Path) -> str:
    """What the network level says when asked to run ``model`` (an infer task, as the worker
    runs it); it must decline."""
    from suite.errors import UnsupportedError
    from suite.levels import execute as network_execute

    path = folder / "case.onnx"
    onnx.save(model, str(path))
    params = {"network": "onnx", "model": str(path), "batch": SHAPE[0], "lr": 0.01}
    task = {"benchmark": "infer", "params": params, "dtype": "fp32", "seed": 0, "measure": FAST}
    with pytest.raises(UnsupportedError) as raised:
        network_execute(task, ad, ad.setup("cpu"))
    return str(raised.value)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_declared_op_agrees_with_onnxruntime(adapter: Adapter, case: Case, tmp_path: Path) -> None:  # noqa: F811
    import onnxruntime as ort

    from suite.errors import UnsupportedError
    from suite.levels.network.run import first_unmapped, unmapped_reason

    if "network" not in adapter.words:
        reason = _declined_by_the_level(adapter, _model(case)[0], tmp_path)
        assert reason == network_words_reason(adapter), reason
        skip_declared(reason)
    scaffold = next((op for op in SCAFFOLDS if op in adapter.onnx_ops), SCAFFOLDS[0])
    model, x = _model(case, scaffold)
    missing = first_unmapped(model, adapter.onnx_ops, len(x))
    if missing is not None:  # an op of this graph the adapter does not declare
        reason = _declined_by_the_level(adapter, model, tmp_path)
        assert reason == unmapped_reason(missing, adapter.name), reason
        skip_declared(reason)
    same = model
    if case.same_as is not None:  # the same name: the same input and scaffold weights
        nodes, inits = case.same_as
        same = _model(replace(case, nodes=nodes, inits={**case.inits, **inits}), scaffold)[0]
    ref = ort.InferenceSession(same.SerializeToString(), providers=["CPUExecutionProvider"])
    want = ref.run(None, {"x": x})[0].astype(np.float64)
    adapter.setup("cpu")
    try:
        net = adapter.build_network(model, "fp32", NetworkOptions())
        got = adapter.to_numpy(adapter.forward(net, adapter.from_numpy(x, "fp32")))
    except UnsupportedError as exc:
        if case.optional and any(op in str(exc) for op in case.ops):
            skip_declared(str(exc))  # refused with the op's name: the level skips such a model
        raise
    got = got.astype(np.float64)
    assert got.shape == want.shape, (got.shape, want.shape)
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan), "NaN where onnxruntime has none, or not where it has"
    scale = max(float(np.abs(want[~nan]).max(initial=0.0)), 1.0)
    err = float(np.abs(np.where(nan, 0.0, got - want)).max(initial=0.0)) / scale
    assert err < case.tolerance, f"{case.name}: max error {err:.2e} (relative to {scale:.2f})"


def test_every_core_op_has_a_case() -> None:
    """Adding an op to CORE_OPS without a case here fails: each declared op is exercised."""
    from suite.onnx.ops import CORE_OPS

    covered: set[str] = set().union(*(c.ops for c in CASES))
    assert CORE_OPS <= covered, sorted(CORE_OPS - covered)


CONVERTED = Path(onnx.__file__).parent / "backend" / "test" / "data" / "pytorch-converted"
#: how many of those exports each of the suite's adapters runs (the rest it declines by
#: name: 1-D and 3-D windows where it maps 2-D only)
CONVERTED_RUN = {"pytorch": 82, "jax": 82, "mxnet": 80, "tensorflow": 68, "numpy": 58}


def test_pytorchs_first_exports_agree_with_the_outputs_onnx_stored(adapter: Adapter) -> None:  # noqa: F811
    """The 82 single-module exports of PyTorch's first ONNX converter (opsets 6-9) that ONNX
    ships with each one's input and output: every one the adapter declares the ops of gives
    that output or is declined by an UnsupportedError (a skip naming the node at the level).
    Found by them: a Pad before opset 11 padded zeros where it asks 2.0 (every adapter),
    PyTorch and MXNet could not build a network without weights, TensorFlow crashed on a
    convolution both strided and dilated; and a TensorFlow bug (TF_SPLIT_SWISH_FUSION: GLU
    wrong in TensorFlow 2.12, Horovod's environment), which must show where it is declared."""
    from suite.adapters.known_bugs import TF_SPLIT_SWISH_FUSION, tf_split_swish_fusion
    from suite.errors import UnsupportedError

    if "network" not in adapter.words:
        skip_declared(network_words_reason(adapter))
    cases = sorted(CONVERTED.glob("test_*"))
    assert len(cases) == 82, "onnx's pytorch-converted test data moved"
    ran, declined, wrong = [], [], []
    for case in cases:
        model = onnx.load(case / "model.onnx")
        x = numpy_helper.to_array(onnx.load_tensor(case / "test_data_set_0" / "input_0.pb"))
        want = numpy_helper.to_array(onnx.load_tensor(case / "test_data_set_0" / "output_0.pb"))
        if {n.op_type for n in model.graph.node} - adapter.onnx_ops - {"Constant"}:
            declined.append(case.name)
            continue
        try:
            net = adapter.build_network(model, "fp32", NetworkOptions())
            fed = (
                adapter.labels_from_numpy(x)
                if x.dtype.kind == "i"
                else adapter.from_numpy(x, "fp32")
            )
            got = np.asarray(adapter.to_numpy(adapter.forward(net, fed)), np.float64)
        except UnsupportedError:
            declined.append(case.name)
            continue
        scale = max(float(np.abs(want).max(initial=0.0)), 1.0)
        err = float(np.abs(got - want).max()) / scale if got.shape == want.shape else float("inf")
        if err < 1e-4:
            ran.append(case.name)
        else:
            wrong.append(f"{case.name} ({err:.1e})")
    # a framework's own bug, declared where it applies (and checked to still show there)
    bugged = {"test_GLU", "test_GLU_dim"} if tf_split_swish_fusion(adapter.versions()) else set()
    assert {w.split(" ")[0] for w in wrong} == bugged, (wrong, bugged and TF_SPLIT_SWISH_FUSION)
    ran += sorted(bugged)
    assert len(ran) >= CONVERTED_RUN.get(adapter.name, 0), (len(ran), declined)
    if "Pad" in adapter.onnx_ops:
        assert "test_ConstantPad2d" in ran
