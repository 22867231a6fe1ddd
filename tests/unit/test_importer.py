"""The ONNX importer (suite/onnx/importer.py) on small hand-made graphs, checked
against onnxruntime through the NumPy kernels: folding of a dynamic batch's shape arithmetic,
the fixed batch, initializer sorting, normalised attributes (ceil-mode pooling, auto_pad,
Resize, Slice with negative steps, Pad) and the skip reasons."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from suite.adapters.base import NetworkOptions
from suite.adapters.numpy.network import NumPyNetwork
from suite.errors import ConfigError, UnsupportedError
from suite.onnx.importer import TRACED_SIZE, ImportedGraph
from suite.onnx.ops import CORE_OPS


def _model(nodes: list[Any], inits: dict[str, np.ndarray], in_shape: list[Any],
            out_shape: list[Any], opset: int = 17, in_type: int = TensorProto.FLOAT) -> onnx.ModelProto:  # fmt: skip
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info("x", in_type, in_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)],
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def _agree(model: onnx.ModelProto, x: np.ndarray, tol: float = 1e-5) -> np.ndarray:
    ref = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    got = NumPyNetwork(model, np.float64, NetworkOptions()).forward(x)
    assert got.shape == ref.shape
    np.testing.assert_allclose(got, ref, rtol=tol, atol=tol)
    return got


def _dynamic_flatten() -> onnx.ModelProto:
    """The shape arithmetic torch.onnx emits for x.view(x.size(0), -1) with a dynamic batch."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
        helper.make_node("Unsqueeze", ["n", "axes0"], ["n1"]),
        helper.make_node("Concat", ["n1", "minus1"], ["shape"], axis=0),
        helper.make_node("Reshape", ["x", "shape"], ["flat"]),
        helper.make_node("MatMul", ["flat", "w"], ["y"]),
    ]
    inits = {"zero": np.array(0, np.int64), "axes0": np.array([0], np.int64),
             "minus1": np.array([-1], np.int64),
             "w": np.random.default_rng(0).standard_normal((12, 5)).astype(np.float32)}  # fmt: skip
    return _model(nodes, inits, ["batch", 3, 4], ["batch", 5])


def test_a_dynamic_batchs_shape_arithmetic_folds_away_for_the_batch_run() -> None:
    model = _dynamic_flatten()
    graph = ImportedGraph(model)
    plan = graph.plan((7, 3, 4))
    assert [s.op for s in plan.steps] == ["Reshape", "MatMul"]
    assert plan.steps[0].attrs["shape"] == (7, 12)
    assert set(graph.params) == {"w"} and not graph.state
    assert graph.fixed_batch is None
    for batch in (1, 7):  # one plan per batch, each agreeing with onnxruntime
        _agree(
            model, np.random.default_rng(batch).standard_normal((batch, 3, 4)).astype(np.float32)
        )
    assert set(graph._plans) == {(7, 3, 4)}  # the network's own graph made the others


def test_a_fixed_batch_is_read_and_another_batch_is_refused() -> None:
    nodes = [helper.make_node("Relu", ["x"], ["y"])]
    graph = ImportedGraph(_model(nodes, {}, [1, 4], [1, 4]))
    assert graph.fixed_batch == 1 and graph.input_shape(32) == (1, 4)
    with pytest.raises(ConfigError, match="fixed size 1 in dimension 0; fed 4"):
        graph.plan((4, 4))


def test_initializers_are_sorted_into_parameters_state_and_constants() -> None:
    c = 3
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["h"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["h", "g", "b", "m", "v"], ["h2"]),
        helper.make_node("Mul", ["h2", "half"], ["h3"]),
        helper.make_node("Reshape", ["h3", "shape"], ["y"]),
    ]
    rng = np.random.default_rng(1)
    inits = {"w": rng.standard_normal((c, 2, 3, 3)).astype(np.float32),
             "g": np.ones(c, np.float32), "b": np.zeros(c, np.float32),
             "m": rng.standard_normal(c).astype(np.float32), "v": np.ones(c, np.float32),
             "half": np.array(0.5, np.float32), "shape": np.array([0, -1], np.int64)}  # fmt: skip
    model = _model(nodes, inits, ["n", 2, 4, 4], ["n", c * 16])
    graph = ImportedGraph(model)
    assert set(graph.params) == {"w", "g", "b"}
    assert set(graph.state) == {"m", "v"}
    assert set(graph.constants) == {"half", "shape"}
    plan = graph.plan((2, 2, 4, 4))
    assert [s.needs_grad for s in plan.steps][:2] == [
        (False, True),
        (True, True, True, False, False),
    ]
    _agree(model, rng.standard_normal((2, 2, 4, 4)).astype(np.float32))


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
@pytest.mark.parametrize("include", [0, 1])
def test_ceil_mode_pooling_with_padding_agrees_with_onnxruntime(op: str, include: int) -> None:
    extra = {"count_include_pad": include} if op == "AveragePool" else {}
    nodes = [helper.make_node(op, ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2],
                              pads=[1, 0, 1, 0], ceil_mode=1, **extra)]  # fmt: skip
    model = _model(nodes, {}, [2, 3, 8, 9], list("nchw"))
    x = np.random.default_rng(2).standard_normal((2, 3, 8, 9)).astype(np.float32)
    _agree(model, x)


def test_auto_pad_same_and_grouped_dilated_convolution() -> None:
    rng = np.random.default_rng(3)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], auto_pad="SAME_UPPER", group=2,
                              strides=[2, 1]),
             helper.make_node("Conv", ["c", "w"], ["y"], pads=[2, 1, 1, 0], group=2,
                              dilations=[2, 1])]  # fmt: skip
    model = _model(nodes, {"w": rng.standard_normal((4, 2, 3, 3)).astype(np.float32)},
                   [1, 4, 9, 7], list("nchw"))  # fmt: skip
    _agree(model, rng.standard_normal((1, 4, 9, 7)).astype(np.float32))


@pytest.mark.parametrize("mode,ctm", [("nearest", "asymmetric"), ("linear", "half_pixel"),
                                      ("linear", "align_corners"), ("nearest", "half_pixel")])  # fmt: skip
def test_resize_tables_agree_with_onnxruntime(mode: str, ctm: str) -> None:
    nodes = [helper.make_node("Resize", ["x", "", "scales"], ["y"], mode=mode,
                              coordinate_transformation_mode=ctm)]  # fmt: skip
    scales = np.array([1, 1, 2.0, 1.5], np.float32)
    model = _model(nodes, {"scales": scales}, [1, 2, 5, 4], list("nchw"))
    _agree(model, np.random.default_rng(4).standard_normal((1, 2, 5, 4)).astype(np.float32))


def test_slice_with_negative_steps_pad_and_split() -> None:
    nodes = [
        helper.make_node("Slice", ["x", "st", "en", "ax", "sp"], ["s"]),
        helper.make_node("Pad", ["s", "pads"], ["p"], mode="reflect"),
        helper.make_node("Split", ["p", "sizes"], ["a", "b"], axis=1),
        helper.make_node("Sub", ["a", "b"], ["y"]),
    ]
    inits = {"st": np.array([-1, 0], np.int64), "en": np.array([-100, 100], np.int64),
             "ax": np.array([1, 2], np.int64), "sp": np.array([-1, 2], np.int64),
             "pads": np.array([0, 1, 0, 0, 0, 0], np.int64),
             "sizes": np.array([3, 3], np.int64)}  # fmt: skip
    model = _model(nodes, inits, [2, 5, 6], list("abc"))
    _agree(model, np.random.default_rng(5).standard_normal((2, 5, 6)).astype(np.float32))


def test_a_shape_computed_from_the_data_is_a_skip_naming_the_node() -> None:
    nodes = [
        helper.make_node("ReduceMax", ["x"], ["m"], keepdims=0),
        helper.make_node("Cast", ["m"], ["mi"], to=TensorProto.INT64),
        helper.make_node("Reshape", ["mi", "one"], ["k"]),
        helper.make_node("Expand", ["x", "k"], ["y"], name="grow"),
    ]
    model = _model(nodes, {"one": np.array([1], np.int64)}, [3], ["a"])
    with pytest.raises(
        UnsupportedError, match="Expand node grow: input 1 \\(shape\\) is computed from the data"
    ):
        ImportedGraph(model).plan((3,))


def test_an_op_without_a_kernel_is_named_with_its_node() -> None:
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Det", ["r"], ["y"], name="d0"),
    ]
    graph = ImportedGraph(_model(nodes, {}, [2, 3, 3], ["a"]))
    step = graph.first_unmapped(CORE_OPS, (2, 3, 3))
    assert step is not None and (step.op_type, step.name) == ("Det", "d0")


def test_an_op_no_adapter_maps_is_the_reason_when_a_later_node_cannot_be_planned() -> None:
    """An LSTM (no adapter maps it) leaves its output's shape unknown here (the absent
    ``sequence_lens``), and the Squeeze torch.onnx writes after it cannot be planned: the
    reason given was the Squeeze's shape, which tells the user nothing they can change."""
    rng = np.random.default_rng(0)
    inits = {"W": rng.standard_normal((1, 16, 3)).astype(np.float32),
             "R": rng.standard_normal((1, 16, 4)).astype(np.float32),
             "h0": np.zeros((1, 2, 4), np.float32), "axes": np.array([1], np.int64)}  # fmt: skip
    nodes = [
        helper.make_node(
            "LSTM", ["x", "W", "R", "", "", "h0", "h0"], ["Y"], hidden_size=4, name="lstm"
        ),  # fmt: skip
        helper.make_node("Squeeze", ["Y", "axes"], ["y"], name="sq"),
    ]
    model = _model(nodes, inits, [5, "n", 3], [5, "n", 4])
    with pytest.raises(UnsupportedError) as info:
        ImportedGraph(model).plan((5, 2, 3))
    assert str(info.value).startswith("unsupported op LSTM in node lstm: no adapter maps it"), info


def test_a_robertas_position_ids_from_its_tokens_are_a_skip_saying_how_to_export_it() -> None:
    """RoBERTa (XLM-R, CamemBERT, ...) computes its position ids from the token ids with a
    CumSum no adapter maps; exported with ``position_ids`` as an input it runs (bound to
    0..n-1), and the skip says so. Another op in an embedding gets no such advice."""
    from suite.onnx.importer import unsupported_op

    text = unsupported_op("CumSum", "/roberta/embeddings/CumSum", "pytorch")
    assert text.startswith("unsupported op CumSum in node /roberta/embeddings/CumSum (pytorch): ")
    assert "export the model with position_ids as an input" in text
    assert unsupported_op("Det", "/roberta/embeddings/Det") == (
        "unsupported op Det in node /roberta/embeddings/Det"
    )
    assert "position_ids" not in unsupported_op("CumSum", "/head/CumSum")


def test_numpy_training_through_the_importer_matches_finite_differences() -> None:
    """The NumPy kernels' VJPs for a graph of the corpus' ops (HardSwish, grouped conv, LRN,
    PRelu with its slope trained, Selu, ceil pooling, LayerNormalization, Gemm): one SGD step's update against central differences."""
    from suite.adapters.numpy.network import softmax_cross_entropy

    rng = np.random.default_rng(6)
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], group=2),
        helper.make_node("HardSwish", ["c"], ["h"]),
        # an even size: one channel more above than below, so the VJP's window is swapped
        helper.make_node("LRN", ["h"], ["n"], size=2, alpha=0.6, beta=0.75, bias=1.5),
        helper.make_node("PRelu", ["n", "slope"], ["pr"]),
        helper.make_node("Selu", ["pr"], ["se"], alpha=1.2, gamma=0.9),
        helper.make_node(
            "AveragePool", ["se"], ["p"], kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1
        ),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("LayerNormalization", ["f", "g", "b"], ["l"]),
        helper.make_node("Gemm", ["l", "fc"], ["y"], transB=1),
    ]
    inits = {"w": rng.standard_normal((4, 1, 3, 3)).astype(np.float32),
             "g": rng.uniform(0.5, 1.5, 36).astype(np.float32), "b": rng.standard_normal(36).astype(np.float32),
             "fc": rng.standard_normal((3, 36)).astype(np.float32),
             "slope": rng.uniform(0.1, 0.4, (4, 1, 1)).astype(np.float32)}  # fmt: skip
    model = _model(nodes, inits, ["n", 2, 5, 5], ["n", 3])
    x = rng.standard_normal((4, 2, 5, 5))
    labels = np.array([0, 1, 2, 1])
    net = NumPyNetwork(model, np.float64, NetworkOptions(lr=1.0, momentum=0.0))
    before = net.parameters()
    net.train_step(x, labels)
    after = net.parameters()

    def loss(params: dict[str, np.ndarray]) -> float:
        probe = NumPyNetwork(model, np.float64, NetworkOptions())
        probe.params = {k: v.copy() for k, v in params.items()}
        return float(softmax_cross_entropy(probe.forward(x), labels)[0])

    for name in before:
        grad = before[name] - after[name]
        direction = rng.standard_normal(before[name].shape)
        h = 1e-5
        plus = loss({**before, name: before[name] + h * direction})
        minus = loss({**before, name: before[name] - h * direction})
        fd = (plus - minus) / (2 * h)
        assert abs(fd - float((grad * direction).sum())) <= 1e-6 * max(1.0, abs(fd)), name


def test_a_deduplicated_running_statistic_becomes_each_batch_norms_own() -> None:
    """torch.onnx deduplicates equal initializers: a fresh network's batch-norm scale (ones)
    and running variance (ones) become one tensor read through Identity. The scale stays a
    parameter, the running variance is a private, untrained copy."""
    c = 2
    nodes = [
        helper.make_node("Identity", ["ones"], ["ones_again"]),
        helper.make_node(
            "BatchNormalization", ["x", "ones", "zeros", "zeros", "ones_again"], ["y"]
        ),
    ]
    inits = {"ones": np.ones(c, np.float32), "zeros": np.zeros(c, np.float32)}
    model = _model(nodes, inits, ["n", c, 3, 3], ["n", c, 3, 3])
    graph = ImportedGraph(model)
    assert set(graph.params) == {"ones", "zeros"}
    assert set(graph.state) == {"y::running_mean", "y::running_var"}  # private copies
    net = NumPyNetwork(model, np.float64, NetworkOptions(lr=0.1))
    x = np.random.default_rng(7).standard_normal((4, c, 3, 3)) * 3 + 1
    net.train_step(x, np.array([0, 1, 0, 1]))
    assert not np.allclose(net.state["y::running_var"], 1.0)  # updated from the batch
    _agree(model, x.astype(np.float32))


def test_a_fixed_batch_model_runs_at_its_batch_and_refuses_another(tmp_path: Any) -> None:
    """--model with a batch-1 export: the plan's batch is 1 (quick or not), and --batch 4 is
    a ConfigError (exit 2) naming the fixed batch and the fix."""
    from suite.levels.network.benchmarks import Infer

    nodes = [helper.make_node("Gemm", ["x", "w"], ["y"])]
    w = np.random.default_rng(8).standard_normal((4, 3)).astype(np.float32)
    path = tmp_path / "b1.onnx"
    onnx.save(_model(nodes, {"w": w}, [1, 4], [1, 3]), str(path))
    sizes = Infer().user_sizes(str(path), None, "quick")
    assert [s.params["batch"] for s in sizes] == [1]
    assert [s.params["batch"] for s in Infer().user_sizes(str(path), [1], "full")] == [1]
    with pytest.raises(ConfigError, match="--batch: b1.onnx has a fixed batch of 1"):
        Infer().user_sizes(str(path), [4], "quick")


def test_inspect_of_a_dynamic_sequence_names_the_file_and_model_dims(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """`dlsuite inspect bert.onnx` without `--model-dims`: one line (exit 2) naming the file
    and the flag to give, not the `--model` the user did not type."""
    from suite.cli import main

    path = tmp_path / "bert.onnx"
    onnx.save(_hf_like(["attention_mask"]), str(path))
    assert main(["inspect", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"dlsuite: error: {path}: input 'input_ids', dimension 1, is dynamic")
    assert "--model-dims sequence=N" in err and "--model:" not in err and "\n" not in err
    assert main(["inspect", str(path), "--model-dims", "sequence=8"]) == 0
    assert "attention_mask = ones" in capsys.readouterr().out


def test_model_dims_too_large_or_given_twice_are_one_line(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--model-dims sequence=99999999999` on a file with an attention mask to bind: a
    traceback (NumPy could not allocate the 745 GiB mask); `sequence=8,sequence=9`: the 9 taken
    silently. Each is one line, exit 2, naming the flag."""
    from suite.cli import main

    path = tmp_path / "bert.onnx"
    onnx.save(_hf_like(["attention_mask"]), str(path))
    assert main(["inspect", str(path), "--model-dims", "sequence=99999999999"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("dlsuite: error: --model-dims: input 'attention_mask' bound to ones")
    assert "745 GiB" in err and "sequence=99999999999" in err and "\n" not in err
    assert main(["inspect", str(path), "--model-dims", "sequence=8,sequence=9"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        "dlsuite: error: --model-dims: 'sequence' is given twice ('sequence=8,sequence=9'); "
        "give each dimension once"
    )


def test_inspect_of_a_graph_with_an_if_says_what_it_does_not_count() -> None:
    """A model whose weights are read inside an If's branches: inspect printed "output y None",
    "0 trainable values (inference-only: nothing to train)" and "0 GFLOP", as if the model
    had no weights and did no work; it now says the shape is unknown and what it left out."""
    from suite.onnx.inspect import inspect_model, render

    w = np.random.default_rng(7).standard_normal((6, 4)).astype(np.float32)
    out = [helper.make_tensor_value_info("t", TensorProto.FLOAT, ["n", 4])]  # branch: any batch
    then = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["t"])], "then", [], out)
    neg = [helper.make_node("MatMul", ["x", "w"], ["e"]), helper.make_node("Neg", ["e"], ["t"])]
    other = helper.make_graph(neg, "else", [], out)
    nodes = [
        helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
        helper.make_node("Constant", [], ["zero"], value=numpy_helper.from_array(np.float32(0))),
        helper.make_node("Greater", ["s", "zero"], ["c"]),
        helper.make_node("If", ["c"], ["y"], name="branch", then_branch=then, else_branch=other),
    ]
    model = _model(nodes, {"w": w}, [1, 6], [1, 4])
    text = render(inspect_model(model, {"numpy": (True, frozenset(CORE_OPS))}))
    assert "output  y shape unknown (an op before it gives no shape)" in text
    assert "None" not in text and "inference-only" not in text
    assert "GFLOP per sample (Conv, MatMul, Gemm, Einsum) (not counting the bodies of If)" in text
    assert "skips: unsupported op If in node branch" in text


def test_a_size_the_export_traced_names_the_cause(tmp_path: Any) -> None:
    """A TorchScript export of nn.TransformerEncoder with a padding mask and dynamic_axes keeps
    the sequence it was traced at in a Reshape of the mask: at another --model-dims size the
    folding failed with only NumPy's "cannot reshape array of size 9 into shape (1,8,1)". The
    message now says a size in the file disagrees and what to do."""
    from suite.onnx.inspect import inspect_model

    emb = np.random.default_rng(8).standard_normal((10, 4)).astype(np.float32)
    nodes = [
        helper.make_node("Gather", ["emb", "input_ids"], ["h"]),
        helper.make_node("Cast", ["attention_mask"], ["m"], to=TensorProto.FLOAT),
        helper.make_node("Reshape", ["m", "traced"], ["m3"], name="mask_view"),
        helper.make_node("Mul", ["h", "m3"], ["hm"]),
        helper.make_node("ReduceMean", ["hm", "axis"], ["y"], keepdims=0),
    ]
    ins = [helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", "seq"])
           for n in ("input_ids", "attention_mask")]  # fmt: skip
    inits = [numpy_helper.from_array(emb, "emb"),
             numpy_helper.from_array(np.array([1, 8, 1], np.int64), "traced"),
             numpy_helper.from_array(np.array([1], np.int64), "axis")]  # fmt: skip
    out = [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])]
    model = helper.make_model(helper.make_graph(nodes, "g", ins, out, inits),
                              opset_imports=[helper.make_opsetid("", 18)])  # fmt: skip
    ops = {"numpy": (True, frozenset(CORE_OPS))}
    assert inspect_model(model, ops, {"seq": 8})["plan_error"] is None
    error = inspect_model(model, ops, {"seq": 9})["plan_error"]
    assert error.startswith("Reshape node mask_view: folding its constant inputs failed (ValueE")
    # the same words as a Reshape the plan itself refuses (one cause, one message), and the
    # same error: the plan refuses it (exit 2) instead of each framework skipping it
    assert error.endswith(f": {TRACED_SIZE}") and "--model-dims" in error
    from suite.errors import ConfigError
    from suite.levels.network.workload import refuse_fixed_sizes

    path = tmp_path / "traced.onnx"
    path.write_bytes(model.SerializeToString())
    refuse_fixed_sizes(str(path), "seq=8", 1)  # the size it was exported at: planned
    with pytest.raises(ConfigError, match="folding its constant inputs failed"):
        refuse_fixed_sizes(str(path), "seq=9", 1)


def test_inspect_says_when_train_will_skip_the_model(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """A model whose first output is not (batch, classes >= 2) infers but does not train; inspect
    said "runs" for every framework, and `dlsuite run` then skipped every train record."""
    from suite.cli import main

    w = np.random.default_rng(5).standard_normal((4, 3)).astype(np.float32)
    path = tmp_path / "sum.onnx"
    nodes = [helper.make_node("Gemm", ["x", "w"], ["z"]),
             helper.make_node("ReduceSum", ["z"], ["y"], keepdims=0)]  # fmt: skip
    onnx.save(_model(nodes, {"w": w}, ["n", 4], ["n"]), str(path))
    assert main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert "train   skipped in every framework: training needs a (batch, classes) logits" in out
    assert "numpy                runs infer only" in out
    one = tmp_path / "one.onnx"
    onnx.save(_model([helper.make_node("Gemm", ["x", "w"], ["y"])], {"w": w[:, :1]}, ["n", 4],
                     ["n", 1]), str(one))  # fmt: skip
    assert main(["inspect", str(one), "--json"]) == 0
    assert "(batch, 1)" in json.loads(capsys.readouterr().out)["train_skips"]
    ok = tmp_path / "ok.onnx"
    onnx.save(_model([helper.make_node("Gemm", ["x", "w"], ["y"])], {"w": w}, ["n", 4], ["n", 3]),
              str(ok))  # fmt: skip
    assert main(["inspect", str(ok)]) == 0
    out = capsys.readouterr().out
    assert "train " not in out and "numpy                runs\n" in out


def test_a_classes_dimension_the_file_names_is_inferred(tmp_path: Any) -> None:
    """An output declared (batch, "c") whose inputs fix c: train was skipped as "not 2-D"
    (the class count read from the declaration only); shape inference gives c, so it trains,
    its labels drawn over the c classes."""
    from suite.levels.network.workload import UserFile, untrainable_output

    w = np.random.default_rng(6).standard_normal((4, 5)).astype(np.float32)
    path = tmp_path / "named.onnx"
    onnx.save(_model([helper.make_node("MatMul", ["x", "w"], ["y"])], {"w": w}, ["n", 4],
                     ["n", "c"]), str(path))  # fmt: skip
    work = UserFile.read(str(path), None).at(4)
    assert work.classes == 5 and untrainable_output(work.classes) is None


def test_inspect_names_ops_coverage_parameters_and_flops_without_a_framework(tmp_path: Any) -> None:
    import subprocess
    import sys

    w = np.ones((4, 3), np.float32)
    path = tmp_path / "m.onnx"
    onnx.save(
        _model([helper.make_node("Gemm", ["x", "w"], ["y"])], {"w": w}, ["n", 4], ["n", 3]),
        str(path),
    )
    code = (
        "import sys; from suite.cli import main; rc = main(['inspect', sys.argv[1]]);"
        "heavy = [m for m in ('torch', 'tensorflow', 'jax', 'mxnet') if m in sys.modules];"
        "assert not heavy, heavy; sys.exit(rc)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "(dynamic batch)" in out and "12 trainable values" in out
    assert "2.4e-08 GFLOP per sample" in out  # 2 * 4 * 3
    assert "pytorch              runs" in out and "numpy                runs" in out
    onnx.save(
        _model([helper.make_node("Det", ["x"], ["y"], name="odd")], {}, [2, 3, 3], [2]), str(path)
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=300
    )
    assert (
        "skips: unsupported op Det in node odd" in proc.stdout and "inference-only" in proc.stdout
    )


def test_inspect_of_a_graph_it_cannot_plan_says_so_instead_of_zeros() -> None:
    """A batch norm in training mode whose updated running mean the graph reads is not mapped
    (dlsuite keeps the running statistics itself): inspect once said "189 nodes, 0 after
    folding", "0 GFLOP" and listed every op as folded for a graph it could not plan."""
    from suite.onnx.inspect import inspect_model, render

    c = 4
    stats = {k: np.ones(c, np.float32) for k in ("g", "b", "m", "v")}
    nodes = [
        helper.make_node("BatchNormalization", ["x", "g", "b", "m", "v"], ["z", "rm", "rv"],
                         name="bn0", training_mode=1),
        helper.make_node("Mul", ["z", "rm"], ["y"]),  # reads the updated running mean
    ]  # fmt: skip
    model = _model(nodes, stats, ["n", c, 4, 4], ["n", c, 4, 4], opset=15)
    info = inspect_model(model, {"numpy": (True, frozenset(CORE_OPS))})
    text = render(info)
    assert "training_mode" in info["plan_error"] and "bn0" in info["plan_error"]
    assert "not planned" in text and "FLOPs   unknown" in text, text
    assert "output  y shape unknown (not planned)" in text and "None" not in text, text
    assert "0 after folding" not in text and "folded" not in text, text
    assert "ops     BatchNormalization, Mul" in text, text
    assert not info["training_export"]  # its outputs are read: left as it is


def _training_export(c: int = 3) -> tuple[onnx.ModelProto, onnx.ModelProto, dict[str, Any]]:
    """A batch norm and a dropout as torch.onnx.export(training=TrainingMode.TRAINING) writes
    them (training_mode=1 and the updated running statistics; Dropout's training_mode from a
    Constant and its mask, both outputs read by nothing), and the same network as an
    inference export writes it."""
    rng = np.random.default_rng(11)
    inits = {"g": rng.uniform(0.5, 1.5, c).astype(np.float32),
             "b": rng.standard_normal(c).astype(np.float32),
             "m": rng.standard_normal(c).astype(np.float32),
             "v": rng.uniform(0.5, 2.0, c).astype(np.float32),
             "fc": rng.standard_normal((5, c * 16)).astype(np.float32)}  # fmt: skip
    ratio = helper.make_node("Constant", [], ["ratio"], value=numpy_helper.from_array(
        np.array(0.25, np.float32)))  # fmt: skip
    tail = [helper.make_node("Relu", ["z"], ["r"], name="relu"),
            helper.make_node("Flatten", ["d"], ["f"], name="flat"),
            helper.make_node("Gemm", ["f", "fc"], ["y"], transB=1, name="head")]  # fmt: skip
    training = _model([
        helper.make_node("BatchNormalization", ["x", "g", "b", "m", "v"], ["z", "rm", "rv"],
                         name="bn", momentum=0.9, training_mode=1),
        tail[0], ratio,
        helper.make_node("Constant", [], ["mode"], value=numpy_helper.from_array(np.array(True))),
        helper.make_node("Dropout", ["r", "ratio", "mode"], ["d", "mask"], name="drop"),
        *tail[1:]], inits, ["n", c, 4, 4], ["n", 5], opset=15)  # fmt: skip
    inference = _model([
        helper.make_node("BatchNormalization", ["x", "g", "b", "m", "v"], ["z"], name="bn",
                         momentum=0.9),
        tail[0], ratio,
        helper.make_node("Dropout", ["r", "ratio"], ["d"], name="drop"),
        *tail[1:]], inits, ["n", c, 4, 4], ["n", 5], opset=15)  # fmt: skip
    return training, inference, inits


def test_an_export_in_training_mode_is_its_inference_twin() -> None:
    """torch.onnx.export(training=TrainingMode.TRAINING) marks batch norms and dropouts
    training_mode=1 (a user's MobileNetV3 so exported was refused). dlsuite sets each node's
    mode by the step it runs, so the file is the inference export's network: the same nodes
    without the mode and the outputs nothing reads, the same logits in onnxruntime, the same
    first update (dropout masks drawn alike) and the same running statistics after it."""
    from suite.onnx.importer import inference_form

    training, inference, inits = _training_export()
    same, changed = inference_form(inference)
    assert same is inference and changed == []  # nothing to do: no copy
    twin, changed = inference_form(training)
    assert changed == ["bn", "drop"]
    onnx.checker.check_model(twin, full_check=True)
    assert [n.op_type for n in twin.graph.node] == [n.op_type for n in inference.graph.node]
    for got, want in zip(twin.graph.node, inference.graph.node, strict=True):
        assert list(got.input) == list(want.input) and list(got.output) == list(want.output)
        assert {a.name for a in got.attribute} == {a.name for a in want.attribute}, got.name
    assert any(a.name == "training_mode" for a in training.graph.node[0].attribute)  # a copy
    x = np.random.default_rng(12).standard_normal((6, 3, 4, 4)) * 2 + 0.5
    _agree(twin, x.astype(np.float32))
    assert ImportedGraph(training).training_export == ["bn", "drop"]
    labels = np.array([0, 1, 2, 3, 4, 0])
    nets = [
        NumPyNetwork(m, np.float64, NetworkOptions(lr=0.1, seed=3)) for m in (training, inference)
    ]
    losses = [float(net.train_step(x, labels)) for net in nets]
    assert losses[0] == losses[1]
    for name, value in nets[1].parameters().items():
        np.testing.assert_array_equal(nets[0].parameters()[name], value)
    np.testing.assert_array_equal(nets[0].state["m"], nets[1].state["m"])
    assert not np.allclose(nets[0].state["m"], inits["m"])  # updated from the batch


def test_inspect_says_a_model_was_exported_in_training_mode() -> None:
    from suite.onnx.inspect import inspect_model, render

    training, _, _ = _training_export()
    info = inspect_model(training, {"numpy": (True, frozenset(CORE_OPS))})
    assert info["plan_error"] is None and info["training_export"] == ["bn", "drop"]
    text = render(info)
    assert "mode    exported in training mode (2 BatchNormalization/Dropout nodes)" in text, text
    assert "numpy" in text and "runs" in text, text


def test_a_kernel_table_refuses_an_op_entered_twice_naming_both_kernels() -> None:
    from suite.onnx.kernels import KernelTable

    table = KernelTable()

    @table.op("Relu", "Identity")
    def first(ctx: Any, step: Any, v: list[Any]) -> Any:
        return v[0]

    with pytest.raises(ValueError, match="'Relu': first and second"):

        @table.op("Relu")
        def second(ctx: Any, step: Any, v: list[Any]) -> Any:
            return v[0]

    with pytest.raises(ValueError, match="both decorated and in the table: Identity"):
        table.with_shared({"Identity": first})
    own = {op: first for op in ("Reshape", "Resize", "Mul", "ReduceSum", "Sqrt")}
    whole = table.with_shared(own)
    assert whole["Relu"] is first and whole["Flatten"] is first and "ReduceL2" in whole


def test_a_cast_to_a_type_the_framework_lacks_names_the_node_and_the_type() -> None:
    """``cast_target``: the framework's dtype for a Cast's ``to``, or one refusal naming both."""
    from suite.onnx.kernels import cast_target

    nodes = [
        helper.make_node("Cast", ["x"], ["c"], to=TensorProto.UINT16, name="c0"),
        helper.make_node("Cast", ["c"], ["y"], to=TensorProto.FLOAT, name="c1"),
    ]
    steps = ImportedGraph(_model(nodes, {}, [2, 3], [2, 3])).plan((2, 3)).steps
    to16, to32 = (s for s in steps if s.op == "Cast")
    table = {"float32": "f32"}  # a framework's own dtype objects, by NumPy name
    assert cast_target(table, to32, "fw") == "f32"
    with pytest.raises(UnsupportedError, match=r"^fw: .*c0.*: Cast to uint16 is not mapped"):
        cast_target(table, to16, "fw")


def test_an_opset_9_caffe2_style_export_folds_and_runs() -> None:
    """What Caffe2's exports (the ONNX model zoo's AlexNet, SqueezeNet, GoogLeNet, VGG-19,
    DenseNet-121 at opset 9) hold and the importer refused: an Unsqueeze of a constant with its
    opset-9 ``axes`` attribute (folding ran it as Unsqueeze-13), a Dropout naming its mask
    output that nothing reads, a Softmax from axis 1 of ``[N, C, 1, 1]`` (opset 9 flattens
    from the axis: one axis longer than 1, so a softmax over it)."""
    rng = np.random.default_rng(3)
    w = numpy_helper.from_array(rng.standard_normal(4).astype(np.float32))
    nodes = [
        helper.make_node("Constant", [], ["w"], value=w),
        helper.make_node("Unsqueeze", ["w"], ["w4"], axes=[0, 2, 3]),
        helper.make_node("Mul", ["x", "w4"], ["xw"]),
        helper.make_node("Dropout", ["xw"], ["d", "mask"], ratio=0.5),
        helper.make_node("Softmax", ["d"], ["y"], axis=1),
    ]
    inits: dict[str, np.ndarray] = {}
    model = _model(nodes, inits, ["n", 4, 1, 1], ["n", 4, 1, 1], opset=9)
    got = _agree(model, rng.standard_normal((3, 4, 1, 1)).astype(np.float32))
    np.testing.assert_allclose(got.sum(axis=1), 1.0, rtol=1e-12)
    # a mask some node reads is still refused by name, not dropped
    read = [*nodes[:4], helper.make_node("Softmax", ["d"], ["y"], axis=1),
            helper.make_node("Identity", ["mask"], ["m2"])]  # fmt: skip
    with pytest.raises(UnsupportedError, match="mask output"):
        ImportedGraph(_model(read, inits, ["n", 4, 1, 1], ["n", 4, 1, 1], opset=9)).plan(
            (2, 4, 1, 1)
        )
    # a softmax over two axes longer than 1 flattened together has no single-axis mapping
    flat = [*nodes[:4], helper.make_node("Softmax", ["d"], ["y"], axis=1)]
    with pytest.raises(UnsupportedError, match="flattens from axis 1"):
        ImportedGraph(_model(flat, inits, ["n", 4, 3, 1], ["n", 4, 3, 1], opset=9)).plan(
            (2, 4, 3, 1)
        )


LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"


@pytest.mark.parametrize("name", sorted(p.stem for p in LIGHT.glob("light_*.onnx")))
def test_the_onnx_packages_own_zoo_models_plan(name: str) -> None:
    """The nine networks ONNX ships for its own backend tests (Caffe2's exports of the model
    zoo at opset 9, weights replaced by ConstantOfShape: models this project did not write):
    every one plans at its batch of 1 and needs no op beyond the core set (AlexNet, ZFNet and
    GoogLeNet need LRN)."""
    from suite.onnx.inspect import inspect_model

    assert len(list(LIGHT.glob("light_*.onnx"))) == 9, "onnx's light models moved"
    info = inspect_model(onnx.load(LIGHT / f"{name}.onnx"), {"numpy": (True, frozenset(CORE_OPS))})
    assert not info["plan_error"], info["plan_error"]
    assert info["frameworks"]["numpy"]["runs"], info["frameworks"]["numpy"]
    # their weights are ConstantOfShape outputs: constants, which training would not touch
    assert info["computed_weights"] > 0 and info["computed_weight_values"] > 10**5, info


def test_infer_of_an_inference_only_model_needs_no_learning_rate(tmp_path: Any) -> None:
    """`infer` of a user's model whose weights are constants and whose output is not
    (batch, classes) (SqueezeNet's [N, 1000, 1, 1]) ran the training's learning-rate search
    first and failed ("no learning rate ... made this network's loss fall"); it times the
    forward pass and checks it against onnxruntime, and `train` says why it cannot run."""
    from suite.adapters.numpy.adapter import NumPyAdapter
    from suite.levels import execute
    from suite.levels.network.benchmarks import Infer, Train

    w = numpy_helper.from_array(
        np.random.default_rng(9).standard_normal((5, 3, 1, 1)).astype(np.float32)
    )
    nodes = [helper.make_node("Constant", [], ["w"], value=w), helper.make_node("Conv", ["x", "w"], ["c"]),
             helper.make_node("Softmax", ["c"], ["y"], axis=1)]  # fmt: skip
    path = tmp_path / "constant_weights.onnx"
    onnx.save(_model(nodes, {}, [1, 3, 4, 4], [1, 5, 4, 4]), str(path))
    adapter = NumPyAdapter()
    info = adapter.setup("cpu")
    measure = {"warmup_iters": 1, "min_samples": 3, "max_samples": 3, "time_budget_s": 0.2}
    (size,) = Infer().user_sizes(str(path), None, "quick")
    assert size.params.get("lr") is None
    task = {
        "benchmark": "infer",
        "params": size.params,
        "dtype": "fp32",
        "seed": 0,
        "measure": measure,
    }
    result = execute(task, adapter, info)
    checks = {c["name"]: c["passed"] for c in result["correctness"]["checks"]}
    assert result["correctness"]["passed"] and checks["logits.max_rel_error_vs_onnxruntime"], checks
    assert result["metrics"][0]["name"] == "latency" and result["metrics"][0]["n"] == 3
    (train,) = Train().user_sizes(str(path), None, "quick")
    task = {**task, "benchmark": "train", "params": train.params}
    with pytest.raises(UnsupportedError, match="logits output"):
        execute(task, adapter, info)


def test_a_single_logit_output_is_a_skip_saying_why_not_a_failed_learning_rate_search(
    tmp_path: Any,
) -> None:
    """A (batch, 1) output (a regression, a single-logit binary head): softmax cross-entropy
    over one class is 0 whatever the weights, so `train` failed its learning-rate search ("no
    learning rate ... made this network's loss fall", every loss 0.0) and asked for a rate no
    rate could help; it is skipped naming the output, and `infer` runs it."""
    from suite.adapters.numpy.adapter import NumPyAdapter
    from suite.levels import execute
    from suite.levels.network.benchmarks import Infer, Train

    rng = np.random.default_rng(3)
    inits = {"w": rng.standard_normal((6, 1)).astype(np.float32),
             "b": rng.standard_normal(1).astype(np.float32)}  # fmt: skip
    path = tmp_path / "regressor.onnx"
    onnx.save(_model([helper.make_node("Gemm", ["x", "w", "b"], ["y"])], inits, ["n", 6],
                     ["n", 1]), str(path))  # fmt: skip
    adapter = NumPyAdapter()
    info = adapter.setup("cpu")
    measure = {"warmup_iters": 1, "min_samples": 3, "max_samples": 3, "time_budget_s": 0.2}
    (train,) = Train().user_sizes(str(path), [2], "quick")
    task = {"benchmark": "train", "params": train.params, "dtype": "fp32", "seed": 0,
            "measure": measure}  # fmt: skip
    with pytest.raises(UnsupportedError, match=r"2 classes or more; .* \(batch, 1\)"):
        execute(task, adapter, info)
    (infer,) = Infer().user_sizes(str(path), [2], "quick")
    result = execute({**task, "benchmark": "infer", "params": infer.params}, adapter, info)
    assert result["correctness"]["passed"]


@pytest.mark.parametrize("mode", ["nearest", "linear"])
@pytest.mark.parametrize(("op", "opset"), [("Resize", 10), ("Upsample", 9), ("Upsample", 7)])
def test_resize_before_opset_11_is_upsamples_rule(op: str, opset: int, mode: str) -> None:
    """Resize-10 and Upsample had no coordinate or rounding attributes: the source index is
    x / scale, rounded down for nearest. Resize-10 was read with Resize-11's defaults
    (half-pixel, round-half-down), and Upsample's nearest rounded: wrong at a scale of 1.5."""
    scales = [1.0, 1.0, 2.0, 1.5]
    if opset == 7:
        nodes, inits = [helper.make_node(op, ["x"], ["y"], mode=mode, scales=scales)], {}
    else:
        nodes = [helper.make_node(op, ["x", "s"], ["y"], mode=mode)]
        inits = {"s": np.array(scales, np.float32)}
    model = _model(nodes, inits, ["n", 2, 3, 4], ["n", 2, 6, 6], opset=opset)
    _agree(model, np.random.default_rng(11).standard_normal((2, 2, 3, 4)).astype(np.float32))


def test_a_legacy_broadcast_from_the_front_is_refused_not_aligned_at_the_back() -> None:
    """Opset 6's ``Add(x, b, broadcast=1, axis=1)`` adds a per-channel ``b`` of [C]; NumPy's
    rule would add it along the last axis, silently wrong where W equals C. Refused by name;
    the same node aligned at the back (axis 3) is NumPy's rule and plans."""
    b = {"b": np.arange(4, dtype=np.float32)}

    def model(axis: int) -> onnx.ModelProto:
        node = helper.make_node("Add", ["x", "b"], ["y"], broadcast=1, axis=axis, name="bias")
        return _model([node], b, ["n", 4, 3, 4], ["n", 4, 3, 4], opset=6)

    with pytest.raises(
        UnsupportedError, match="bias.*opset 6 broadcast of a rank-1 input from axis 1"
    ):
        ImportedGraph(model(1)).plan((2, 4, 3, 4))
    assert ImportedGraph(model(3)).plan((2, 4, 3, 4)).steps[0].op == "Add"


def test_a_batch_norm_with_statistics_per_activation_is_refused_by_name() -> None:
    """Opset 7's ``spatial=0`` keeps a statistic per activation ([C, H, W]); the kernels
    normalise per channel and crashed on the shapes ("operands could not be broadcast")."""
    stats = {k: np.ones((4, 5, 6), np.float32) for k in ("s", "b", "m", "v")}
    bn = helper.make_node(
        "BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], spatial=0, name="bn"
    )
    model = _model([bn], stats, ["n", 4, 5, 6], ["n", 4, 5, 6], opset=7)
    with pytest.raises(UnsupportedError, match="bn: spatial=0"):
        ImportedGraph(model).plan((2, 4, 5, 6))


def test_a_model_ending_in_softmax_trains_on_the_softmaxs_input(tmp_path: Any) -> None:
    """A model exported for serving ends in a Softmax (Keras' applications, Caffe2's zoo);
    the training loss is softmax cross-entropy, which on probabilities applies the softmax
    twice: every loss near ln(classes) and gradients squashed (a Keras DenseNet-121 export
    barely trained: loss 2.30 to 2.28 in 21 steps; on its logits 2.30 to 1.89). The train task uses
    the Softmax's input and says so in the record."""
    from suite.adapters.numpy.adapter import NumPyAdapter
    from suite.levels import execute
    from suite.levels.network.benchmarks import Train

    w = (4.0 * np.random.default_rng(12).standard_normal((6, 5))).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["logits"]),
             helper.make_node("Softmax", ["logits"], ["y"], axis=-1, name="predictions")]  # fmt: skip
    path = tmp_path / "serving.onnx"
    onnx.save(_model(nodes, {"w": w}, ["n", 6], ["n", 5]), str(path))
    adapter = NumPyAdapter()
    info = adapter.setup("cpu")
    (size,) = Train().user_sizes(str(path), [16], "quick")
    measure = {"warmup_iters": 1, "min_samples": 5, "max_samples": 5, "time_budget_s": 0.2}
    task = {
        "benchmark": "train",
        "params": size.params,
        "dtype": "fp32",
        "seed": 0,
        "measure": measure,
    }
    result = execute(task, adapter, info)
    work = result["work"]
    assert work["trained_without_final_softmax"] == "predictions"
    # on the logits (spread by the large weights) the loss is far from ln(5) = 1.61, on the
    # probabilities it could not be (each near 0.2 after the second softmax)
    assert abs(work["loss_first_step"] - np.log(5)) > 0.5, work["loss_first_step"]
    assert result["correctness"]["passed"], result["correctness"]


def test_weights_stored_quantised_fold_where_onnxs_reference_has_no_such_version() -> None:
    """onnxruntime's QDQ quantisation stores weights as int8 behind an opset-13
    DequantizeLinear, a version onnx's reference evaluator does not implement (1.23: 19 on):
    the constant folds all the same (by onnxruntime), to the dequantised weight."""
    rng = np.random.default_rng(0)
    q = rng.integers(-127, 128, size=(6, 5)).astype(np.int8)
    inits = {"wq": q, "scale": np.array(0.02, np.float32), "zp": np.array(3, np.int8)}
    nodes = [
        helper.make_node("DequantizeLinear", ["wq", "scale", "zp"], ["w"], name="dq"),
        helper.make_node("MatMul", ["x", "w"], ["y"], name="mm"),
    ]
    model = _model(nodes, inits, ["n", 6], ["n", 5], opset=13)
    plan = ImportedGraph(model).plan((2, 6))
    assert [s.op for s in plan.steps] == ["MatMul"]
    w = (q.astype(np.float64) - 3) * 0.02
    np.testing.assert_allclose(plan.constants["w"], w, rtol=1e-6)
    # (not against onnxruntime's session: its QDQ fusion quantises the input as well)
    x = rng.standard_normal((2, 6))
    got = NumPyNetwork(model, np.float64, NetworkOptions()).forward(x)
    np.testing.assert_allclose(got, x @ w, rtol=1e-6)


def test_a_gather_of_a_buffer_longer_than_32_folds_to_the_values_it_gathers() -> None:
    """transformers' BERT, ALBERT and ELECTRA exports gather their ``token_type_ids`` buffer
    (``max_position_embeddings`` long) at the sequence's positions with a GatherElements of
    constants. onnx's reference evaluator fails on it past 32 values (its ``np.choose``), and
    every such model with a 512-long buffer was refused ("folding its constant inputs
    failed"); it folds, to the values gathered."""
    buffer = (np.arange(64, dtype=np.int64) * 7 % 5).reshape(1, 64)
    positions = np.array([[3, 40, 63, 0, 17]], np.int64)
    nodes = [
        helper.make_node("GatherElements", ["buffer", "positions"], ["g"], axis=1, name="ge"),
        helper.make_node("Cast", ["g"], ["gf"], to=TensorProto.FLOAT),
        helper.make_node("Add", ["x", "gf"], ["y"], name="add"),
    ]
    model = _model(nodes, {"buffer": buffer, "positions": positions}, ["n", 5], ["n", 5])
    plan = ImportedGraph(model).plan((2, 5))
    assert [s.op for s in plan.steps] == ["Add"]
    np.testing.assert_array_equal(
        plan.constants["gf"], np.take_along_axis(buffer, positions, axis=1).astype(np.float32)
    )
    _agree(model, np.random.default_rng(0).standard_normal((2, 5)).astype(np.float32))


def test_an_op_of_another_domain_is_refused_naming_it_not_mapped_by_its_name() -> None:
    """A com.microsoft op (onnxruntime's optimiser writes them: Gelu, FusedConv, QLinearAdd)
    is never run by the standard op of the same name: it is refused naming its domain."""
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
        helper.make_node("Gelu", ["h"], ["y"], name="ms_gelu", domain="com.microsoft"),
    ]
    inits = {"w": np.ones((4, 3), np.float32)}
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3])],
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
    )  # fmt: skip
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    )
    model.ir_version = 8
    with pytest.raises(
        UnsupportedError, match="Gelu node ms_gelu: an op of domain 'com.microsoft'"
    ):
        ImportedGraph(model).plan((2, 4))


def test_a_model_stored_in_float16_runs_as_the_float32_model_it_holds(tmp_path: Any) -> None:
    """``model.half()`` before the export: weights, constants, the input and a Cast in float16.
    as_float32 makes every one float32 exactly; onnxruntime accepts the result and the NumPy
    network computes what it computes, where the 16-bit file fed float32 is refused."""
    from suite.onnx.inspect import inspect_model, render
    from suite.onnx.zoo import as_float32

    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 3)).astype(np.float16)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"]),
        helper.make_node(
            "Constant", [], ["two"], value=numpy_helper.from_array(np.array(2.0, np.float16))
        ),
        helper.make_node("Mul", ["h", "two"], ["h2"]),
        helper.make_node("Cast", ["h2"], ["y"], to=TensorProto.FLOAT16),
    ]
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT16, ["n", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, ["n", 3])],
        [numpy_helper.from_array(w, "w")],
    )  # fmt: skip
    half = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    half.ir_version = 8
    onnx.checker.check_model(half)
    model, stored = as_float32(half)
    assert stored == ["float16"]
    assert as_float32(model) == (model, [])  # nothing 16-bit left
    assert half.graph.input[0].type.tensor_type.elem_type == TensorProto.FLOAT16  # a copy
    x = rng.standard_normal((2, 4)).astype(np.float32)
    got = _agree(model, x, tol=1e-6)
    np.testing.assert_allclose(got, x.astype(np.float64) @ w.astype(np.float64) * 2, rtol=1e-6)
    with pytest.raises(Exception, match="Unexpected input data type"):
        ort.InferenceSession(half.SerializeToString()).run(None, {"x": x})
    text = render(inspect_model(half, {}))
    assert "input   x ['batch', 4] float16" in text and "stored  in float16" in text
    # --model FILE: the network level's workload is the float32 model, and says so
    from suite.levels.network.benchmarks import Train
    from suite.levels.network.workload import USER_MODEL

    onnx.save(half, str(tmp_path / "half.onnx"))
    p = Train().validate({"network": USER_MODEL, "model": str(tmp_path / "half.onnx"), "batch": 2})
    work = Train().workload(p, seed=0)
    assert (
        work.upcast_from == "float16" and work.model.graph.input[0].type.tensor_type.elem_type == 1
    )


def _hf_like(extra: list[str]) -> onnx.ModelProto:
    """Token ids [batch, seq] through an embedding; ``extra`` inputs of the same shape, each
    added in (as a transformer adds its mask, token type and position terms)."""
    emb = np.random.default_rng(0).standard_normal((10, 4)).astype(np.float32)
    nodes = [helper.make_node("Gather", ["emb", "input_ids"], ["h0"])]
    for i, name in enumerate(extra):
        nodes += [
            helper.make_node("Cast", [name], [f"c{i}"], to=TensorProto.FLOAT),
            helper.make_node("Unsqueeze", [f"c{i}", "axes"], [f"u{i}"]),
            helper.make_node("Add", [f"h{i}", f"u{i}"], [f"h{i + 1}"]),
        ]
    nodes.append(helper.make_node("ReduceMean", [f"h{len(extra)}"], ["y"], axes=[1], keepdims=0))
    seq = ["batch", "sequence"]
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info(n, TensorProto.INT64, seq) for n in ["input_ids", *extra]],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])],
        [numpy_helper.from_array(emb, "emb"), numpy_helper.from_array(np.array([2]), "axes")],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def test_a_transformers_extra_inputs_are_bound_by_name_and_its_sequence_sized() -> None:
    """``attention_mask`` ones, ``token_type_ids`` zeros, ``position_ids`` 0..n-1: the bound
    model computes what onnxruntime computes on the file fed those values, at the batch it was
    bound for; a dimension left dynamic, a name the file lacks and an input with no rule are
    refused naming them."""
    from suite.onnx.zoo import fix_user_inputs, parse_dims

    extra = ["attention_mask", "token_type_ids", "position_ids"]
    model = _hf_like(extra)
    bound, names = fix_user_inputs(model, parse_dims("sequence=5"), batch=3)
    assert names == {
        "attention_mask": "ones",
        "token_type_ids": "zeros",
        "position_ids": "positions",
    }
    ids = np.random.default_rng(1).integers(0, 10, size=(3, 5))
    feeds = {"input_ids": ids, "attention_mask": np.ones((3, 5), np.int64),
             "token_type_ids": np.zeros((3, 5), np.int64),
             "position_ids": np.tile(np.arange(5), (3, 1))}  # fmt: skip
    ref = ort.InferenceSession(model.SerializeToString()).run(None, feeds)[0]
    got = NumPyNetwork(bound, np.float64, NetworkOptions()).forward(ids)
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-6)
    assert ImportedGraph(bound).fixed_batch == 3
    # the ids the level draws span the embedding's 10 rows
    from suite.levels.network.workload import model_input_spec

    assert model_input_spec(bound)[0].high == 10
    with pytest.raises(ConfigError, match="dimension 1, is dynamic .*--model-dims sequence=N"):
        fix_user_inputs(model, {}, batch=3)
    with pytest.raises(ConfigError, match="no dynamic dimension seq .theirs: sequence"):
        fix_user_inputs(model, parse_dims("seq=5"), batch=3)
    with pytest.raises(ConfigError, match="feeds one input .'input_ids'. .* 'lengths' names no"):
        fix_user_inputs(_hf_like(["lengths"]), {"sequence": 5}, batch=3)
    # a mask listed first (TF Hub's names): the ids are still what is fed
    reordered = _hf_like(["input_mask", "input_type_ids"])
    inputs = list(reordered.graph.input)
    del reordered.graph.input[:]
    reordered.graph.input.extend([inputs[1], inputs[0], inputs[2]])
    bound2, names2 = fix_user_inputs(reordered, {"sequence": 5}, batch=3)
    assert names2 == {"input_mask": "ones", "input_type_ids": "zeros"}
    assert [i.name for i in bound2.graph.input] == ["input_ids"]
    with pytest.raises(ConfigError, match="'sequence=0' is not NAME=N"):
        parse_dims("sequence=0")


def test_a_file_with_several_outputs_runs_to_its_first() -> None:
    """A file with two outputs (an auxiliary head beside the logits) is the graph to its first
    output, which dlsuite trains and checks: the head's nodes and the parameters only it reads
    are left out (PyTorch's DDP refuses parameters no gradient reaches: GoogLeNet exported in
    training mode failed at 2 ranks so), and inspect says what was."""
    from suite.onnx.importer import first_output_only
    from suite.onnx.inspect import inspect_model, render

    rng = np.random.default_rng(13)
    inits = {"wa": rng.standard_normal((4, 8)).astype(np.float32),
             "wb": rng.standard_normal((3, 8)).astype(np.float32),
             "wc": rng.standard_normal((5, 3)).astype(np.float32)}  # fmt: skip
    nodes = [helper.make_node("Gemm", ["x", "wb"], ["h"], transB=1),
             helper.make_node("Gemm", ["x", "wa"], ["y"], transB=1),
             helper.make_node("Gemm", ["h", "wc"], ["aux"], transB=1)]  # fmt: skip
    model = _model(nodes, inits, ["n", 8], ["n", 4])
    model.graph.output.append(helper.make_tensor_value_info("aux", TensorProto.FLOAT, ["n", 5]))
    first, left = first_output_only(model)
    assert left is not None and left.outputs == ["aux"] and left.nodes == 2
    assert left.trainable_values == 24 + 15
    assert [n.output[0] for n in first.graph.node] == ["y"]
    assert [i.name for i in first.graph.initializer] == ["wa"]
    onnx.checker.check_model(first, full_check=True)
    graph = ImportedGraph(model)
    assert set(graph.params) == {"wa"} and graph.left_out == left
    x = rng.standard_normal((3, 8)).astype(np.float32)
    np.testing.assert_allclose(
        _agree(first, x), x.astype(np.float64) @ inits["wa"].T.astype(np.float64), rtol=1e-5
    )
    info = inspect_model(model, {"numpy": (True, frozenset(CORE_OPS))})
    assert info["outputs_left_out"] == ["aux"] and info["parameters"] == 32
    text = render(info)
    assert "also    aux: not run (dlsuite runs the graph to its first output, y" in text, text
    assert "2 nodes and 39 trainable values only they need are left out" in text, text
    single = _model(nodes[1:2], {"wa": inits["wa"]}, ["n", 8], ["n", 4])
    assert first_output_only(single) == (single, None)
    assert "also" not in render(inspect_model(single, {"numpy": (True, frozenset(CORE_OPS))}))


def test_a_dropout_mask_nothing_reads_is_dropped_without_calling_it_training() -> None:
    """A Dropout whose training_mode is a constant false, with a mask output nothing reads (an
    inference export may write one), runs: the mask is dropped, and the node is not counted as
    exported in training mode."""
    from suite.onnx.importer import inference_form

    nodes = [
        helper.make_node("Constant", [], ["off"], value=numpy_helper.from_array(np.array(False))),
        helper.make_node("Dropout", ["x", "", "off"], ["y", "mask"], name="drop"),
    ]
    model = _model(nodes, {}, ["n", 4], ["n", 4], opset=15)
    twin, moded = inference_form(model)
    assert moded == [] and twin is not model
    assert [list(n.output) for n in twin.graph.node] == [["y"]]  # the Constant went with it
    graph = ImportedGraph(model)
    assert graph.training_export == [] and graph.plan((2, 4)).steps[0].op == "Dropout"


def test_a_quantised_export_folds_its_weights_and_names_its_activations_quantisation() -> None:
    """A QDQ export (what onnxruntime's quantize_static writes): each weight an int8
    initializer behind a DequantizeLinear, which folds into a float constant at import; the
    activations' QuantizeLinear/DequantizeLinear pairs are what no adapter runs, and the skip
    reason says so and what to give instead."""
    from suite.onnx.importer import import_graph, unsupported_op
    from suite.onnx.inspect import inspect_model

    inits = {
        "w_q": np.arange(-6, 6, dtype=np.int8).reshape(4, 3),
        "w_scale": np.array(0.05, np.float32),
        "zero": np.array(0, np.int8),
        "x_scale": np.array(0.02, np.float32),
    }
    nodes = [
        helper.make_node("DequantizeLinear", ["w_q", "w_scale", "zero"], ["w"], name="w_dq"),
        helper.make_node("QuantizeLinear", ["x", "x_scale", "zero"], ["x_q"], name="x_quant"),
        helper.make_node("DequantizeLinear", ["x_q", "x_scale", "zero"], ["x_f"], name="x_dq"),
        helper.make_node("Gemm", ["x_f", "w"], ["y"], name="fc"),
    ]
    model = _model(nodes, inits, ["n", 4], ["n", 3], opset=13)
    graph = import_graph(model)
    step = graph.first_unmapped(frozenset({"Gemm", "DequantizeLinear"}), graph.input_shape(2))
    assert step is not None and (step.op, step.name) == ("QuantizeLinear", "x_quant")
    # the weight's DequantizeLinear folded: no step of the plan is it
    ops = [s.op for s in graph.plan(graph.input_shape(2)).steps]
    assert ops == ["QuantizeLinear", "DequantizeLinear", "Gemm"], ops
    info = inspect_model(model, {"numpy": (True, frozenset({"Gemm", "DequantizeLinear"}))})
    why = info["frameworks"]["numpy"]["why"]
    assert why.startswith("unsupported op QuantizeLinear in node x_quant: a quantised export")
    assert "give the float model it was quantised from" in why
    # an op of a float network keeps the plain reason
    assert unsupported_op("Det", "odd", "numpy") == "unsupported op Det in node odd (numpy)"


@pytest.mark.parametrize(("elem", "high"), [(TensorProto.UINT8, 256), (TensorProto.INT32, 2)])
def test_an_integer_input_is_fed_to_onnxruntime_in_its_own_type(elem: int, high: int) -> None:
    """An image model that takes 8-bit pixels (casting and scaling them itself) and one that
    takes int32 values: onnxruntime refuses int64 for either ("Unexpected input data type"),
    which failed every record of such a file; the pixels are drawn over 0-255, the frameworks
    take them as int64, and the logits agree with onnxruntime's."""
    from suite.levels.network.run import ort_logits
    from suite.levels.network.workload import model_input_spec, synthetic_batch

    w = np.random.default_rng(2).standard_normal((4, 3)).astype(np.float32)
    nodes = [
        helper.make_node("Cast", ["x"], ["xf"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["xf", "scale"], ["xs"]),
        helper.make_node("Gemm", ["xs", "w"], ["y"]),
    ]
    inits = {"w": w, "scale": np.array(1 / 255, np.float32)}
    model = _model(nodes, inits, ["n", 4], ["n", 3], in_type=elem)
    spec, classes = model_input_spec(model)
    assert (spec.kind, spec.high, classes) == ("int64", high, 3)
    x, _ = synthetic_batch(spec, 64, classes, np.random.default_rng(0))
    assert x.min() >= 0 and x.max() == high - 1  # 256 values drawn: the range's top reached
    got = NumPyNetwork(model, np.float64, NetworkOptions()).forward(x.astype(np.int64))
    np.testing.assert_allclose(got, ort_logits(model, x, spec), rtol=1e-6, atol=1e-6)


def test_a_model_stored_in_float64_runs_rounded_to_float32(tmp_path: Any) -> None:
    """``model.double()`` before the export: onnxruntime refused the float32 data every
    framework computes on, failing every record; the model runs rounded to float32, the record
    and ``dlsuite inspect`` say so, and the logits agree with onnxruntime's on that model."""
    from suite.levels.network.benchmarks import Infer
    from suite.levels.network.run import ort_logits
    from suite.levels.network.workload import USER_MODEL
    from suite.onnx.inspect import inspect_model, render

    w = np.random.default_rng(3).standard_normal((4, 3))
    model = _model([helper.make_node("Gemm", ["x", "w"], ["y"])], {"w": w}, ["n", 4], ["n", 3],
                   in_type=TensorProto.DOUBLE)  # fmt: skip
    model.graph.output[0].type.tensor_type.elem_type = TensorProto.DOUBLE
    onnx.checker.check_model(model)
    path = tmp_path / "double.onnx"
    onnx.save(model, str(path))
    p = Infer().validate({"network": USER_MODEL, "model": str(path), "batch": 2})
    work = Infer().workload(p, seed=0)
    assert (work.rounded_from, work.upcast_from) == ("float64", None)
    assert work.said()["model_rounded_from"] == "float64"
    assert work.model.graph.initializer[0].data_type == TensorProto.FLOAT
    x = np.random.default_rng(4).standard_normal((2, 4))
    got = NumPyNetwork(work.model, np.float64, NetworkOptions()).forward(x.astype(np.float32))
    np.testing.assert_allclose(got, ort_logits(work.model, x, work.input), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got, x.astype(np.float32) @ w.astype(np.float32), rtol=1e-6)
    text = render(inspect_model(model, {}))
    assert "stored  in float64: dlsuite runs the model in float32" in text
    # a mask's float64 minimum becomes float32's, not -inf (which gave NaN logits)
    from suite.onnx.zoo import as_float32

    mask = helper.make_node(
        "Constant", [], ["m"], value=numpy_helper.from_array(np.array(np.finfo(np.float64).min))
    )
    masked = _model([mask, helper.make_node("Add", ["x", "m"], ["y"])], {}, ["n", 3], ["n", 3],
                    in_type=TensorProto.DOUBLE)  # fmt: skip
    masked.graph.output[0].type.tensor_type.elem_type = TensorProto.DOUBLE
    ran, stored = as_float32(masked)
    assert stored == ["float64"]
    value = numpy_helper.to_array(ran.graph.node[0].attribute[0].t)
    assert value.dtype == np.float32 and value == np.finfo(np.float32).min


def test_a_reshape_to_a_size_fixed_at_export_is_refused_by_name_at_other_dims() -> None:
    """A legacy torch.onnx export writes the traced sequence length into an attention's
    Reshape as a constant; at another --model-dims every framework failed on its own message
    (onnxruntime's "input_shape_size == requested_shape_size was false", PyTorch's "shape
    '[10, 8, 8]' is invalid for input of size 768"). The plan names the node, both sizes and
    the fix; at the size it was exported at it runs and agrees with onnxruntime."""
    from suite.onnx.inspect import inspect_model, render
    from suite.onnx.zoo import as_run

    w = np.random.default_rng(3).standard_normal((8, 2)).astype(np.float32)
    nodes = [
        helper.make_node("Reshape", ["x", "fixed"], ["r"], name="heads"),
        helper.make_node("MatMul", ["r", "w"], ["y"]),
    ]
    model = _model(nodes, {"fixed": np.array([0, 3, 8], np.int64), "w": w},
                   ["batch", "seq", 4], ["batch", 3, 2])  # fmt: skip
    x = np.random.default_rng(4).standard_normal((2, 6, 4)).astype(np.float32)
    _agree(as_run(model, {"seq": 6}, None).model, x)
    with pytest.raises(UnsupportedError) as err:
        ImportedGraph(model).plan((2, 5, 4))
    assert str(err.value).startswith(
        "Reshape node heads: reshapes (2, 5, 4) (40 values) to (2, 3, 8) (48), a size the "
        "file holds as a constant"
    ), err.value
    assert "--model-dims" in str(err.value)
    info = inspect_model(as_run(model, {"seq": 5}, None).model,
                         {"numpy": (True, frozenset(CORE_OPS))})  # fmt: skip
    assert not info["frameworks"]["numpy"]["runs"]
    assert "cannot run: Reshape node heads: reshapes (1, 5, 4)" in render(info)
    ran = inspect_model(as_run(model, {"seq": 6}, None).model,
                        {"numpy": (True, frozenset(CORE_OPS))})  # fmt: skip
    assert ran["frameworks"]["numpy"]["runs"] and ran["output"]["shape_at_batch"] == [1, 3, 2]


def test_a_user_model_planned_at_sizes_its_file_fixed_otherwise_is_a_config_error(
    tmp_path: Any,
) -> None:
    """`dlsuite run --model m.onnx --model-dims seq=5` on a file whose Reshape fixed seq=6:
    one ConfigError at planning (exit 2) naming the flag, the sizes and the node; every
    task used to be a failed record with the framework's own message."""
    from suite.levels.network.benchmarks import Infer, Train

    w = np.random.default_rng(5).standard_normal((8, 2)).astype(np.float32)
    nodes = [
        helper.make_node("Reshape", ["x", "fixed"], ["r"], name="heads"),
        helper.make_node("MatMul", ["r", "w"], ["y"]),
    ]
    path = tmp_path / "traced.onnx"
    onnx.save(_model(nodes, {"fixed": np.array([0, 3, 8], np.int64), "w": w},
                     ["batch", "seq", 4], ["batch", 3, 2]), str(path))  # fmt: skip
    with pytest.raises(ConfigError) as err:
        Train().user_sizes(str(path), [2], "quick", "seq=5")
    assert str(err.value).startswith(
        "--model traced.onnx at batch 2, --model-dims seq=5: Reshape node heads: reshapes "
        "(2, 5, 4) (40 values) to (2, 3, 8) (48)"
    ), err.value
    sizes = Infer().user_sizes(str(path), [1, 2], "quick", "seq=6")
    assert [s.params["batch"] for s in sizes] == [1, 2]
    # the operator level's --sizes from:FILE.onnx takes the same file's shapes: the same refusal
    from suite.levels.operator.from_network import size_specs

    with pytest.raises(ConfigError) as err:
        size_specs(f"from:{path}", "quick", [2], "seq=5")
    assert str(err.value).startswith(
        f"--sizes from:{path} at batch 2, --model-dims seq=5: Reshape node heads: reshapes"
    ), err.value
    assert "gemm" in size_specs(f"from:{path}", "quick", [2], "seq=6")


def test_inspects_model_dims_help_speaks_of_its_own_argument(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`dlsuite inspect --help` spoke of "--model's (or --sizes from:FILE.onnx's)" dimensions,
    flags inspect does not have."""
    from suite.cli import main

    with pytest.raises(SystemExit):
        main(["inspect", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "the sizes of MODEL.onnx's dynamic input dimensions" in out, out
    assert "--model's" not in out and "--sizes" not in out
