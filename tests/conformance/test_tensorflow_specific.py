"""TensorFlow-specific checks, beyond the conformance kit every adapter passes.

Runs only where the kit would run the TensorFlow adapter (``DLSUITE_CONFORMANCE`` names it, or
it is unset and TensorFlow imports here), e.g.
``DLSUITE_CONFORMANCE=tensorflow python -m pytest tests/conformance`` in TensorFlow's own
environment; elsewhere tests/conformance/conftest.py leaves the file out of the collection.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from suite.adapters import ADAPTERS
from suite.adapters.base import NetworkOptions
from suite.errors import AdapterError, UnsupportedError
from suite.levels import load_benchmark
from tests.conformance.test_adapters import FAST

#: the kit's conv2d-1 case (conv2d's second quick size: the backward one)
KIT_CONV2D_BACKWARD = load_benchmark("operator", "conv2d").sizes("quick")[1].params
assert KIT_CONV2D_BACKWARD["direction"] == "backward"


@pytest.fixture(scope="module")
def tf_adapter() -> Any:
    a = ADAPTERS.load("tensorflow")()
    a.setup("cpu")
    return a


def test_declared_onnx_ops_equal_the_kernel_table() -> None:
    from suite.adapters.tensorflow.adapter import TensorFlowAdapter
    from suite.adapters.tensorflow.kernels import KERNELS

    assert TensorFlowAdapter.onnx_ops == frozenset(KERNELS), sorted(
        TensorFlowAdapter.onnx_ops ^ frozenset(KERNELS)
    )


def test_importing_the_adapter_loads_no_framework() -> None:
    code = (
        "import sys, suite.adapters.tensorflow.adapter as m; m.TensorFlowAdapter.available(); "
        "print(sorted(k for k in ('tensorflow', 'keras') if k in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_tf32_is_refused_on_the_cpu_with_a_reason(tf_adapter: Any) -> None:
    ok, why = tf_adapter.supports("tf32")
    assert not ok and "GPU" in why
    assert all(tf_adapter.supports(d)[0] for d in ("fp64", "fp32", "bf16", "fp16"))


def test_copy_from_numpy_refills_only_what_an_immutable_tensor_holds(tf_adapter: Any) -> None:
    x = np.arange(6, dtype=np.float32)
    t = tf_adapter.from_numpy(x, "fp32")
    tf_adapter.copy_from_numpy(t, x)  # the values it holds: fine
    with pytest.raises(AdapterError, match="immutable"):
        tf_adapter.copy_from_numpy(t, x + 1)
    v = tf_adapter.tf.Variable(x)
    tf_adapter.copy_from_numpy(v, x + 1)
    np.testing.assert_array_equal(v.numpy(), x + 1)


def test_a_word_of_one_op_runs_eagerly_and_a_word_of_several_as_one_function(
    tf_adapter: Any,
) -> None:
    """A ``tf.function`` around one op adds only its call (130-220 us on a 2-core CPU, more
    than a 256^3 GEMM's whole kernel), so matmul, softmax and batch norm run eagerly, as a
    bare ``tf.matmul(a, b)`` loop does; the words composed of several ops stay one graph each.
    The record says which ran eagerly, and both kinds give the reference's gradient."""
    from suite.adapters.tensorflow.operators import EAGER_WORDS
    from suite.levels import execute

    info = tf_adapter.setup("cpu")
    assert info.extra["eager_operators"] == ["batch_norm", "matmul", "softmax"]
    graphs = {name for name, f in tf_adapter._ops.items() if hasattr(f, "get_concrete_function")}
    assert graphs == set(tf_adapter._ops) - EAGER_WORDS
    assert graphs >= {"conv2d", "layer_norm", "gelu", "attention"}
    for bench, params in (
        ("gemm", {"m": 32, "n": 16, "k": 8, "direction": "backward"}),
        ("softmax", {"rows": 16, "cols": 12, "direction": "backward"}),
        ("norm", {"kind": "batch", "batch": 4, "channels": 8, "height": 6, "width": 6,
                  "direction": "backward"}),
        ("norm", {"kind": "layer", "batch": 16, "channels": 12, "direction": "backward"}),
    ):  # fmt: skip
        task = {"benchmark": bench, "params": params, "dtype": "fp32", "seed": 1, "measure": FAST}
        out = execute(task, tf_adapter, info)
        assert out["correctness"]["passed"], (bench, out["correctness"])


def test_xla_compiles_the_operator_words() -> None:
    from suite.levels import execute

    a = ADAPTERS.load("tensorflow")()
    a.xla = True  # what the worker sets for --xla
    info = a.setup("cpu")
    assert info.extra["xla_operators"] is True and a.versions()["xla_operators"] == "on"
    assert info.extra["eager_operators"] == []  # every word compiled, the one-op words too
    assert all(hasattr(f, "get_concrete_function") for f in a._ops.values())
    x = a.from_numpy(np.ones((8, 8)), "fp32")
    hlo = a._ops["matmul"].experimental_get_compiler_ir(x, x)(stage="hlo")
    assert "dot(" in hlo  # an XLA computation, not a TensorFlow graph
    fast = {"warmup_iters": 1, "warmup_s": 0.0, "min_samples": 3, "max_samples": 3,
            "time_budget_s": 0.05, "min_sample_s": 0.0}  # fmt: skip
    for bench, params, dtype in (
        ("gemm", {"m": 32, "n": 16, "k": 8}, "fp32"),
        ("conv2d", {"batch": 2, "in_channels": 3, "height": 9, "width": 9, "out_channels": 4,
                    "kernel": 3, "stride": 2, "padding": 1, "direction": "backward"}, "fp32"),
        # what the CPU refusal of bf16 conv2d gradients advises (XLA accumulates in fp32)
        ("conv2d", KIT_CONV2D_BACKWARD, "bf16"),
    ):  # fmt: skip
        task = {"benchmark": bench, "params": params, "dtype": dtype, "seed": 1, "measure": fast}
        out = execute(task, a, info)
        assert out["correctness"]["passed"], (dtype, out["correctness"])


def test_bf16_conv2d_gradients_are_declared_where_tensorflows_own_kernels_run(
    tf_adapter: Any,
) -> None:
    """Where TensorFlow's bf16 convolution gradients are not oneDNN's (oneDNN off, as by default
    on an AVX2 AMD EPYC, or no bf16 path without AVX512) they run in Eigen kernels that keep
    partial sums in bf16, and the adapter declares them: a skip that names ``--xla``. The raw
    kernel is measured too, so the declaration is dropped once TensorFlow's kernel no longer
    needs it; where oneDNN serves bf16 the kit's size must pass instead."""
    from tensorflow.python.util import _pywrap_util_port, _pywrap_utils

    from suite import metrics as M
    from suite.dtypes import quantize
    from suite.levels import execute

    tf = tf_adapter.tf
    info = tf_adapter.setup("cpu")
    task = {"benchmark": "conv2d", "params": KIT_CONV2D_BACKWARD, "dtype": "bf16", "seed": 3,
            "measure": FAST}  # fmt: skip
    # asked of TensorFlow here, not of the adapter: oneDNN on, and a bf16 path on this CPU
    onednn_bf16 = _pywrap_util_port.IsMklEnabled() and (
        _pywrap_utils.IsDataTypeSupportedByOneDNNOnThisCPU(tf.bfloat16)
    )
    if onednn_bf16:
        out = execute(task, tf_adapter, info)
        assert out["correctness"]["passed"], out["correctness"]
        assert info.extra["onednn_bf16"] is True
        return
    with pytest.raises(UnsupportedError, match="--xla"):
        execute(task, tf_adapter, info)
    assert info.extra["onednn_bf16"] is False  # the record says which kernels ran

    bench = load_benchmark("operator", "conv2d")
    params = bench.validate(KIT_CONV2D_BACKWARD)
    inputs = {
        k: quantize(v, "bf16") for k, v in bench.inputs(params, np.random.default_rng(3)).items()
    }
    x, w, dy = (tf_adapter.from_numpy(inputs[k], "bf16") for k in ("x", "w", "dy"))
    with tf.GradientTape() as tape:  # the adapter's own tf.function, without vjp's refusal
        tape.watch([x, w])
        y = tf_adapter._ops["conv2d"](
            x, w, params["stride"], params["padding"], params.get("dilation", 1)
        )
    dw = tf_adapter.to_numpy(tape.gradient(y, w, output_gradients=dy))
    ref = bench.reference(params, inputs)["dw"]
    tol = M.tolerance_for("bf16", bench.tolerance_scale, bench.reduction_length(params, "dw"))
    error = M.relative_errors(dw, ref)["l2_rel"]
    rounding = M.relative_errors(quantize(ref, "bf16"), ref)["l2_rel"]  # fp32 accumulation's
    assert error > tol.l2_rel, (
        f"TensorFlow's bf16 conv2d weight gradient is now within tolerance ({error:.2e} <= "
        f"{tol.l2_rel:.0e}, rounding alone {rounding:.2e}): the declaration is no longer needed"
    )


def test_bf16_conv2d_gradients_are_declared_with_onednn_turned_off() -> None:
    """The declared branch on every CPU, whichever branch the machine takes by itself: with
    TF_ENABLE_ONEDNN_OPTS=0 (TensorFlow's own switch, read when it is imported: a fresh
    process) the Eigen kernels run, and the adapter must say so and name --xla. On a CPU where
    oneDNN serves bf16 (AVX-512) the test above takes the passing branch; on one where it does
    not (AVX2) both take this one, since no switch gives an AVX2 CPU a oneDNN bf16 path."""
    code = (
        "import json\n"
        "from suite.adapters import ADAPTERS\n"
        "from suite.errors import UnsupportedError\n"
        "from suite.levels import execute\n"
        "from tests.conformance.test_tensorflow_specific import KIT_CONV2D_BACKWARD, FAST\n"
        "a = ADAPTERS.load('tensorflow')(); info = a.setup('cpu')\n"
        "task = {'benchmark': 'conv2d', 'params': KIT_CONV2D_BACKWARD, 'dtype': 'bf16',\n"
        "        'seed': 3, 'measure': FAST}\n"
        "try:\n"
        "    execute(task, a, info); why = None\n"
        "except UnsupportedError as exc:\n"
        "    why = str(exc)\n"
        "print(json.dumps({'why': why, 'onednn': info.extra['onednn'],\n"
        "                  'onednn_bf16': info.extra['onednn_bf16']}))\n"
    )
    env = {**os.environ, "TF_ENABLE_ONEDNN_OPTS": "0", "TF_CPP_MIN_LOG_LEVEL": "2"}
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["onednn"] == "off (TF_ENABLE_ONEDNN_OPTS=0)" and out["onednn_bf16"] is False
    assert out["why"] is not None and "--xla" in out["why"]
    assert "TF_ENABLE_ONEDNN_OPTS=0 turns TensorFlow's oneDNN kernels off" in out["why"]


def test_keras_sgd_is_pytorch_sgd_with_momentum() -> None:
    """Keras: m = mu m - lr g; p += m. PyTorch: v = mu v + g; p -= lr v (v starts at g)."""
    import keras

    lr, mu = 0.1, 0.9
    grads = [np.array([1.0, -2.0]), np.array([0.5, 0.25]), np.array([-1.0, 3.0])]
    var = keras.Variable(np.array([1.0, 2.0], dtype=np.float32))
    opt = keras.optimizers.SGD(learning_rate=lr, momentum=mu)
    p, v = np.array([1.0, 2.0]), np.zeros(2)
    for i, g in enumerate(grads):
        opt.apply_gradients([(keras.ops.convert_to_tensor(g.astype(np.float32)), var)])
        v = g if i == 0 else mu * v + g
        p = p - lr * v
        np.testing.assert_allclose(np.asarray(var.numpy()), p, rtol=1e-6)


# -- the Keras model on small hand-made graphs (checked against onnxruntime) ------------------
def _model(
    nodes: list[onnx.NodeProto], inits: dict[str, np.ndarray], shape: tuple[int, ...], out: int
) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "t",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", *shape])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", out])],
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def _ort(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return np.asarray(sess.run(None, {"x": x.astype(np.float32)})[0], dtype=np.float64)


def _rand(rng: np.random.Generator, *shape: int, scale: float = 0.3) -> np.ndarray:
    return (scale * rng.standard_normal(shape)).astype(np.float32)


def _image_graph() -> onnx.ModelProto:
    """Conv 3x3/2 p1 on 12x12 (TF's SAME pads (0,1): explicit padding), BatchNorm (negative
    values), MaxPool 3x3/2 p1 on 6x6 (-inf padding), Conv 3x3/1 p1 (SAME), AveragePool
    3x3/1 p1 without the pad in the count (SAME), and a Flatten of a 3x3 map (ONNX's C,H,W
    order) into a Gemm."""
    rng = np.random.default_rng(0)
    inits = {
        "c1.w": _rand(rng, 4, 3, 3, 3), "c1.b": _rand(rng, 4),
        "bn.scale": 1 + _rand(rng, 4), "bn.bias": _rand(rng, 4),
        "bn.mean": _rand(rng, 4), "bn.var": 1 + np.abs(_rand(rng, 4)),
        "c2.w": _rand(rng, 4, 4, 3, 3), "fc.w": _rand(rng, 5, 36), "fc.b": _rand(rng, 5),
    }  # fmt: skip
    nodes = [
        helper.make_node("Conv", ["x", "c1.w", "c1.b"], ["c1"], name="c1", kernel_shape=[3, 3],
                         strides=[2, 2], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c1", "bn.scale", "bn.bias", "bn.mean", "bn.var"],
                         ["bn"], name="bn", epsilon=1e-5, momentum=0.9),
        helper.make_node("MaxPool", ["bn"], ["mp"], name="mp", kernel_shape=[3, 3],
                         strides=[2, 2], pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["mp", "c2.w"], ["c2"], name="c2", kernel_shape=[3, 3],
                         pads=[1, 1, 1, 1]),
        helper.make_node("AveragePool", ["c2"], ["ap"], name="ap", kernel_shape=[3, 3],
                         pads=[1, 1, 1, 1]),
        helper.make_node("Flatten", ["ap"], ["fl"], name="fl", axis=1),
        helper.make_node("Gemm", ["fl", "fc.w", "fc.b"], ["logits"], name="fc", transB=1),
    ]  # fmt: skip
    return _model(nodes, inits, (3, 12, 12), 5)


def _shape_graph() -> onnx.ModelProto:
    """Gemm, Sigmoid, Tanh, Concat, Reshape, Transpose, Softmax, Sqrt, Identity, Sub with a
    trainable vector, Div by a scalar, Mul with a trainable vector, MatMul + Add (a Dense)."""
    rng = np.random.default_rng(1)
    inits = {
        "g.w": _rand(rng, 8, 6), "g.b": _rand(rng, 8),
        "shape3": np.array([0, 4, 4], np.int64), "shape2": np.array([0, 16], np.int64),
        "sub.w": _rand(rng, 16), "two": np.array(2.0, np.float32), "mul.w": 1 + _rand(rng, 16),
        "out.w": _rand(rng, 16, 3), "out.b": _rand(rng, 3),
    }  # fmt: skip
    nodes = [
        helper.make_node("Gemm", ["x", "g.w", "g.b"], ["h"], name="g", transB=1),
        helper.make_node("Sigmoid", ["h"], ["s"], name="s"),
        helper.make_node("Tanh", ["h"], ["t"], name="t"),
        helper.make_node("Concat", ["s", "t"], ["c"], name="c", axis=1),
        helper.make_node("Reshape", ["c", "shape3"], ["r"], name="r"),
        helper.make_node("Transpose", ["r"], ["p"], name="p", perm=[0, 2, 1]),
        helper.make_node("Softmax", ["p"], ["sm"], name="sm", axis=-1),
        helper.make_node("Sqrt", ["sm"], ["q"], name="q"),
        helper.make_node("Reshape", ["q", "shape2"], ["f"], name="f"),
        helper.make_node("Identity", ["f"], ["i"], name="i"),
        helper.make_node("Sub", ["i", "sub.w"], ["d"], name="d"),
        helper.make_node("Div", ["d", "two"], ["e"], name="e"),
        helper.make_node("Mul", ["e", "mul.w"], ["m"], name="m"),
        helper.make_node("MatMul", ["m", "out.w"], ["mm"], name="mm"),
        helper.make_node("Add", ["mm", "out.b"], ["logits"], name="out"),
    ]
    return _model(nodes, inits, (6,), 3)


@pytest.mark.parametrize("make", [_image_graph, _shape_graph], ids=["image", "shapes"])
def test_builder_matches_onnxruntime_and_round_trips_the_weights(
    tf_adapter: Any, make: Any
) -> None:
    import keras

    model = make()
    shape = tuple(d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim[1:])
    x = np.random.default_rng(2).standard_normal((3, *shape)).astype(np.float32)
    net = tf_adapter.build_network(model, "fp32", NetworkOptions(lr=0.005))
    assert isinstance(net.model, keras.Model)
    got = tf_adapter.to_numpy(tf_adapter.forward(net, tf_adapter.from_numpy(x, "fp32")))
    ref = _ort(model, x)
    assert np.linalg.norm(got - ref) / np.linalg.norm(ref) < 1e-5, (got, ref)
    # the Keras weights hold exactly the ONNX initializers, in ONNX's layout
    params = tf_adapter.network_parameters(net)
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    trainable = {k for k, v in inits.items() if v.dtype.kind == "f" and v.size > 1
                 and k not in ("bn.mean", "bn.var")}  # fmt: skip
    assert set(params) == trainable
    for name in trainable:
        np.testing.assert_array_equal(params[name], inits[name].astype(np.float64))
    y = tf_adapter.labels_from_numpy(np.array([0, 1, 2]))
    losses = [float(tf_adapter.to_numpy(tf_adapter.train_step(net, tf_adapter.from_numpy(x, "fp32"), y)))
              for _ in range(5)]  # fmt: skip
    assert np.all(np.isfinite(losses)) and losses[-1] < losses[0], losses


def test_batch_norm_moving_statistics_follow_onnx_momentum(tf_adapter: Any) -> None:
    """running = momentum * running + (1 - momentum) * batch statistic (ONNX 0.9 = PyTorch 0.1),
    with the unbiased batch variance, as PyTorch (and every importer kernel) updates it."""
    rng = np.random.default_rng(3)
    inits = {"s": 1 + _rand(rng, 3), "b": _rand(rng, 3), "m": _rand(rng, 3),
             "v": 1 + np.abs(_rand(rng, 3)), "fc.w": _rand(rng, 2, 48), "fc.b": _rand(rng, 2)}  # fmt: skip
    nodes = [
        helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["bn"], name="bn",
                         epsilon=1e-5, momentum=0.9),
        helper.make_node("Flatten", ["bn"], ["fl"], name="fl"),
        helper.make_node("Gemm", ["fl", "fc.w", "fc.b"], ["logits"], name="fc", transB=1),
    ]  # fmt: skip
    model = _model(nodes, inits, (3, 4, 4), 2)
    x = (2.0 + rng.standard_normal((5, 3, 4, 4))).astype(np.float32)
    net = tf_adapter.build_network(model, "fp32", NetworkOptions(lr=0.01))
    tf_adapter.train_step(
        net, tf_adapter.from_numpy(x, "fp32"), tf_adapter.labels_from_numpy(np.arange(5) % 2)
    )
    mean = np.asarray(net.model.onnx_state["m"].numpy())
    var = np.asarray(net.model.onnx_state["v"].numpy())
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(mean, 0.9 * inits["m"] + 0.1 * x64.mean(axis=(0, 2, 3)), rtol=1e-5)
    np.testing.assert_allclose(
        var, 0.9 * inits["v"] + 0.1 * x64.var(axis=(0, 2, 3), ddof=1), rtol=1e-5
    )


def test_amp_policies_train_and_keep_fp32_logits(tf_adapter: Any) -> None:
    from suite.onnx import zoo

    net_def = zoo.get("resnet18")
    arch = net_def.validate(net_def.sizes("quick")[0].params)
    model = net_def.build(arch, seed=1)
    x = np.random.default_rng(4).standard_normal((2, 3, 32, 32))
    y = tf_adapter.labels_from_numpy(np.array([1, 3]))
    for dtype, policy in (("bf16", "mixed_bfloat16"), ("fp16", "mixed_float16")):
        net = tf_adapter.build_network(model, dtype, NetworkOptions(amp=True))
        assert net.policy.name == policy
        xt = tf_adapter.from_numpy(x, "fp32")
        assert net.forward(xt).dtype.name == "float32"
        loss = float(tf_adapter.to_numpy(tf_adapter.train_step(net, xt, y)))
        assert np.isfinite(loss)
    assert type(net.optimizer).__name__ == "LossScaleOptimizer"


# -- distributed set-up (the collectives themselves run in test_distributed_kit.py) ------------
def test_tf_config_is_made_from_the_launcher_environment(
    tf_adapter: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    a = ADAPTERS.load("tensorflow")()
    a._rank, a._world = 1, 2
    monkeypatch.setenv("MASTER_ADDR", "10.0.0.7")
    monkeypatch.setenv("DLSUITE_RANK_PORTS", "4001,4002")
    assert a._tf_config() == {
        "cluster": {"worker": ["10.0.0.7:4001", "10.0.0.7:4002"]},
        "task": {"type": "worker", "index": 1},
    }
    monkeypatch.setenv("DLSUITE_RANK_PORTS", "4001")
    with pytest.raises(AdapterError, match="DLSUITE_RANK_PORTS"):
        a._tf_config()


def test_unknown_communication_backends_are_declared(tf_adapter: Any) -> None:
    for backend in ("gloo", "mpi", "nccl"):  # nccl: no GPU here
        with pytest.raises(UnsupportedError):
            tf_adapter.dist_init(backend)
