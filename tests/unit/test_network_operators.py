"""The operators of a network's graph at its shapes (suite/onnx/operators.py) and the operator
level's sizes taken from them (``--sizes from:NETWORK``, suite/levels/operator/from_network.py):
counts against the architecture as written, the spelled-out GELU and attention patterns,
training against inference, deduplication, the plan and its errors."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from suite import plan
from suite.cli import main as cli_main
from suite.config import resolve
from suite.errors import ConfigError
from suite.levels import load_benchmark
from suite.levels.operator.from_network import networks, parse, size_specs
from suite.onnx import zoo
from suite.onnx.operators import graph_operators, load_model


def _ops(network: str, params: dict[str, Any], batch: int, training: bool = True) -> Any:
    return graph_operators(load_model(network, zoo.get(network).validate(params)), batch,
                           training=training)  # fmt: skip


def _uses(ops: Any) -> Counter[tuple[str, str | None]]:
    c: Counter[tuple[str, str | None]] = Counter()
    for u in ops.uses:
        c[(u.op, u.benchmark)] += u.count
    return c


QUICK18 = {"resolution": 32, "classes": 10, "width": 4}


def test_resnet18_every_layer_counted_once() -> None:
    ops = _ops("resnet18", QUICK18, 4)
    c = _uses(ops)
    # conv1 + 8 basic blocks x 2 + 3 downsample shortcuts = 20 convolutions, each with its BN
    assert c[("Conv", "conv2d")] == 20 and c[("BatchNormalization", "norm")] == 20
    assert c[("Relu", None)] == 17 and c[("Add", None)] == 8 and c[("Gemm", "gemm")] == 1
    assert c[("MaxPool", None)] == 1 and c[("GlobalAveragePool", None)] == 1
    conv1 = next(u for u in ops.uses if u.benchmark == "conv2d")
    assert conv1.params == {"batch": 4, "in_channels": 3, "height": 32, "width": 32,
                            "out_channels": 16, "kernel": 7, "stride": 2, "padding": 3}  # fmt: skip
    # its input is data: training needs only the weight's gradient
    assert conv1.backward and not conv1.input_grad
    assert conv1.task_params("backward")["input_grad"] is False
    assert all(u.input_grad for u in ops.uses if u.benchmark == "conv2d" and u is not conv1)
    # layer1's 3x3 convolution: one shape, four uses, deduplicated
    layer1 = next(u for u in ops.uses if u.benchmark == "conv2d" and u.params["height"] == 8
                  and u.params["in_channels"] == 16 and u.params["stride"] == 1)  # fmt: skip
    assert layer1.count == 4 and layer1.nodes[0] == "layer1.0.conv1"
    # the trainable values the optimizer's update moves, counted from the layers' shapes
    weights = 0
    for u in ops.benchmarked():
        p = u.params
        if u.benchmark == "conv2d":
            weights += u.count * p["out_channels"] * p["in_channels"] * p["kernel"] ** 2
        elif u.benchmark == "norm":
            weights += u.count * 2 * p["channels"]
        else:
            weights += u.count * (p["k"] * p["n"] + p["n"])  # the classifier and its bias
    assert ops.parameters == weights
    # every benchmarked use becomes one task per direction, deduplicated
    tasks = ops.tasks()
    assert len({(b, str(sorted(p.items()))) for b, p, _ in tasks}) == len(tasks)
    assert sum(1 for b, p, _ in tasks if p.get("direction") == "backward") == len(
        [u for u in ops.benchmarked() if u.backward]
    )


def test_inference_books_batch_norm_as_a_scale_and_shift() -> None:
    ops = _ops("resnet18", QUICK18, 4, training=False)
    c = _uses(ops)
    assert c[("BatchNormalization", None)] == 20 and c[("BatchNormalization", "norm")] == 0
    assert not any(u.backward for u in ops.uses)
    assert all(u.directions(False) == ["forward"] for u in ops.uses)


def test_resnet50_bottlenecks() -> None:
    c = _uses(_ops("resnet50", {}, 2))
    assert c[("Conv", "conv2d")] == 53 and c[("Relu", None)] == 49 and c[("Add", None)] == 16


def test_transformer_gelu_and_attention_are_recognised() -> None:
    params = {"config": "small", "seq": 32, "classes": 2}
    ops = _ops("transformer", params, 4)
    by_kind = Counter()
    for u in ops.uses:
        by_kind[(u.kind, u.benchmark)] += u.count
    layers = 2
    assert by_kind[("activation", "gelu")] == layers  # Div, Erf, Add, Mul, Mul as one GELU
    assert not any(u.op in ("Erf", "Div") for u in ops.uses)
    assert by_kind[("attention", "gemm")] == 2 * layers  # q k^T and p v, batched
    assert by_kind[("attention", "softmax")] == layers
    assert by_kind[("gemm", "gemm")] == 6 * layers + 1  # q, k, v, out, ffn up, down; classifier
    assert by_kind[("norm", "norm")] == 2 * layers + 1
    scores = next(u for u in ops.uses if u.kind == "attention" and u.benchmark == "gemm")
    # batch 4 x 2 heads, seq 32, head 64: the batched product's own fields
    assert scores.params == {"m": 32, "n": 32, "k": 64, "batch": 8}
    gelu = next(u for u in ops.uses if u.benchmark == "gelu")
    assert gelu.params == {"rows": 4 * 32, "cols": 512}
    for b, p, _ in ops.tasks():
        load_benchmark("operator", b).validate(p)  # every task is a valid operator size


def test_size_specs_from_a_zoo_network_and_its_fields() -> None:
    specs = size_specs("from:resnet18", "quick", None)
    assert set(specs) == {"conv2d", "norm", "gemm"}
    n = sum(len(v) for v in specs.values())
    assert n == len(graph_operators(networks("from:resnet18", "quick", None)[0].model, 4,
                                    training=True).tasks())  # fmt: skip
    src = specs["conv2d"][0].source
    assert src.startswith("from resnet18 (resolution 32, classes 10, width 4) b4: Conv")
    wide = size_specs("from:resnet18,resolution=64,width=2", "quick", [2])
    assert wide["conv2d"][0].params["height"] == 64 and wide["conv2d"][0].params["batch"] == 2
    assert wide["conv2d"][0].params["out_channels"] == 32


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("resnet18", "give from:NETWORK"),
        ("from:", "give from:NETWORK"),
        ("from:resnet18,width", "'width' is not field=value"),
        ("from:resnet51", "--sizes from:resnet51: unknown network 'resnet51'"),
        ("from:resnet18,width=3", "--sizes from:resnet18,width=3: resnet18.width"),
        ("from:/no/such/model.onnx", "--sizes from:/no/such/model.onnx"),
    ],
)
def test_bad_sizes_are_one_clear_error(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        networks(text, "quick", None)
    assert message in str(info.value)


def test_parse() -> None:
    assert parse("from:resnet18,resolution=224,width=4") == (
        "resnet18", {"resolution": 224, "width": 4},
    )  # fmt: skip
    assert parse("from:dir/My Model.onnx") == ("dir/My Model.onnx", {})


def test_plan_takes_the_operator_sizes_from_the_network(tmp_path: Path) -> None:
    cfg = resolve({"level": ["operator"], "operator_sizes": "from:resnet18", "quick": True,
                   "dtypes": ["fp32"], "frameworks": ["numpy"]}, env={})  # fmt: skip
    tasks = plan.build(cfg)
    assert {t.benchmark for t in tasks} == {"conv2d", "norm", "gemm"}
    assert all(t.size_set == "custom" and t.source.startswith("from resnet18") for t in tasks)
    assert len(tasks) == sum(len(v) for v in size_specs("from:resnet18", "quick", None).values())
    with pytest.raises(ConfigError, match="only the operator level"):
        plan.build(resolve({"level": ["network"], "operator_sizes": "from:resnet18"}, env={}))


def test_cli_refuses_bad_sizes_with_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    rc = cli_main(["run", "--level", "operator", "--sizes", "from:resnet51", "--dry-run"])
    assert rc == 2
    err = capsys.readouterr().err
    assert "--sizes from:resnet51" in err and "Traceback" not in err


def _transformers_like(path: Path) -> str:
    """Token ids and an attention mask, both (batch, sequence) and dynamic, as a transformers
    export has them; the mask is flattened and reshaped to the ids' shape (ALBERT's export
    does so), so a mask bound for another batch than the ids' cannot be planned."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("Gather", ["emb", "input_ids"], ["h"]),
        helper.make_node("Reshape", ["attention_mask", "flat"], ["m1"]),
        helper.make_node("Shape", ["input_ids"], ["ids_shape"]),
        helper.make_node("Reshape", ["m1", "ids_shape"], ["m2"]),
        helper.make_node("Cast", ["m2"], ["m3"], to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["m3", "axes2"], ["m4"]),
        helper.make_node("Mul", ["h", "m4"], ["hm"]),
        helper.make_node("MatMul", ["hm", "w"], ["p"], name="proj"),
        helper.make_node("ReduceMean", ["p"], ["logits"], axes=[1], keepdims=0),
    ]
    dims = ["batch", "sequence"]
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info(n, TensorProto.INT64, dims)
         for n in ("input_ids", "attention_mask")],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 3])],
        [numpy_helper.from_array(rng.standard_normal((10, 4)).astype(np.float32), "emb"),
         numpy_helper.from_array(rng.standard_normal((4, 3)).astype(np.float32), "w"),
         numpy_helper.from_array(np.array([-1], np.int64), "flat"),
         numpy_helper.from_array(np.array([2], np.int64), "axes2")],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return str(path)


def test_sizes_from_a_transformers_export_bind_its_mask_and_take_model_dims(
    tmp_path: Path,
) -> None:
    """``--sizes from:bert.onnx`` takes the file as ``--model`` runs it: its mask bound by name
    for each batch, its sequence sized by ``--model-dims``. It was refused ("exactly one
    input"), and ``--model-dims`` was refused without ``--model``; the report's walk of such a
    network record failed the same way."""
    path = _transformers_like(tmp_path / "bert.onnx")
    specs = size_specs(f"from:{path}", "quick", [2], "sequence=5")
    gemms = [s.params for s in specs["gemm"]]
    assert {"m": 10, "n": 3, "k": 4} in gemms, gemms
    with pytest.raises(ConfigError, match=r"--sizes from:.*dimension 1, is dynamic.*--model-dims"):
        networks(f"from:{path}", "quick", [2])
    cfg = resolve({"level": ["operator"], "operator_sizes": f"from:{path}", "batch": [2],
                   "model_dims": "sequence=5", "dtypes": ["fp32"], "frameworks": ["numpy"]},
                  env={})  # fmt: skip
    assert {t.benchmark for t in plan.build(cfg)} == {"gemm"}
    with pytest.raises(ConfigError, match="--model-dims: .*--sizes from:FILE.onnx"):
        resolve({"level": ["operator"], "operator_sizes": "from:resnet18",
                 "model_dims": "sequence=5"}, env={})  # fmt: skip
    # a network record of it, as the report walks it to take its step apart
    params = {"network": "onnx", "model": path, "dims": "sequence=5", "batch": 3}
    ops = graph_operators(load_model("onnx", params), 3, training=True)
    assert ops.input_shape == (3, 5)


def test_a_convolution_without_a_benchmark_is_named_with_onnx_pads() -> None:
    """A 1x3 convolution padded (0, 1) (ONNX pads [0, 1, 0, 1]: begins, then ends) was noted
    with "pads [0, 0, 1, 1]", the importer's (begin, end) pairs flattened, which reads in
    ONNX's order as padding only the bottom and the right."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.ones((4, 3, 1, 3), np.float32), "w")
    conv = helper.make_node("Conv", ["x", "w"], ["y"], name="wide", kernel_shape=[1, 3],
                            pads=[0, 1, 0, 1], strides=[1, 1])  # fmt: skip
    graph = helper.make_graph(
        [conv], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4, 6, 6])], [w],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    ops = graph_operators(model, 2, training=False)
    (note,) = [n for n in ops.notes if n.startswith("wide:")]
    assert "a 1x3 convolution with strides [1, 1], dilations [1, 1], pads [0, 1, 0, 1] " in note
    assert not ops.benchmarked()
