"""The NumPy reference adapter: its hand-written gradients against central finite differences
(every operator word, the network builder's ops, whole zoo networks), its training semantics
against PyTorch's, and what it declares unsupported. The conformance kit
(tests/conformance/test_adapters.py) holds it to the rules every adapter follows; these tests
check what the kit cannot see from outside."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from suite.adapters.base import NetworkOptions
from suite.adapters.numpy.adapter import NumPyAdapter
from suite.adapters.numpy.network import NumPyNetwork, softmax_cross_entropy
from suite.adapters.numpy.vjp import conv2d, max_pool
from suite.errors import AdapterError, UnsupportedError
from suite.levels import benchmark_names, execute, load_benchmark
from suite.levels.network import workload as B
from suite.levels.network.run import ort_logits
from suite.levels.operator.attention import attention_ref
from suite.levels.operator.conv2d import conv2d_forward
from suite.levels.operator.gelu import gelu_ref
from suite.levels.operator.norm import batch_norm_ref, layer_norm_ref
from suite.levels.operator.softmax import softmax_ref
from suite.metrics import directional_gradcheck
from suite.onnx import zoo

FAST = {
    "warmup_iters": 1,
    "warmup_s": 0.0,
    "min_samples": 3,
    "max_samples": 3,
    "time_budget_s": 0.02,
    "min_sample_s": 0.0,
}
GRAD_TOL = 1e-6  # float64 gradients against central differences (error ~ h^2 = 1e-8)


@pytest.fixture(scope="module")
def adapter() -> NumPyAdapter:
    a = NumPyAdapter()
    a.setup("cpu")
    return a


# -- device, dtypes, tensors -----------------------------------------------------------------
def test_setup_selects_the_cpu_and_refuses_cuda() -> None:
    a = NumPyAdapter()
    info = a.setup("auto")
    assert info.kind == "cpu" and info.count == 1
    with pytest.raises(AdapterError, match="CPU only"):
        a.setup("cuda")
    with pytest.raises(AdapterError, match="unknown device"):
        a.setup("tpu")
    versions = a.versions()
    assert versions["numpy"] == np.__version__ and "scipy" in versions


def test_dtypes_declared(adapter: NumPyAdapter) -> None:
    assert adapter.supports("fp32") == (True, "") and adapter.supports("fp64") == (True, "")
    for dtype, why in (("tf32", "GPU"), ("bf16", "bfloat16"), ("fp16", "float16")):
        ok, reason = adapter.supports(dtype)
        assert not ok and why in reason
        with pytest.raises(UnsupportedError, match=why):
            adapter.from_numpy(np.ones(2), dtype)
    assert "distributed" not in adapter.words


def test_tensors_are_copies_in_the_task_dtype(adapter: NumPyAdapter) -> None:
    x = np.arange(6.0).reshape(2, 3)
    t = adapter.from_numpy(x, "fp32")
    x[0, 0] = 99.0
    assert t.dtype == np.float32 and t[0, 0] == 0.0
    back = adapter.to_numpy(t)
    back[0, 1] = 99.0
    assert back.dtype == np.float64 and t[0, 1] == 1.0
    adapter.copy_from_numpy(t, np.full((2, 3), 0.5))
    assert t.dtype == np.float32 and np.all(t == 0.5)
    assert adapter.labels_from_numpy(np.array([1, 2], dtype=np.int32)).dtype == np.int64


# -- operator words and their VJPs -----------------------------------------------------------
def _word_cases() -> list[Any]:
    """(case name, the word called on the adapter, its float64 reference, input shapes)."""
    conv = [
        ("conv2d-s2p1", lambda a, x, w: a.conv2d(x, w, stride=2, padding=1),
         lambda x, w: conv2d_forward(x, w, 2, 1), {"x": (2, 3, 7, 7), "w": (4, 3, 3, 3)}),
        ("conv2d-s1p0", lambda a, x, w: a.conv2d(x, w, stride=1, padding=0),
         lambda x, w: conv2d_forward(x, w, 1, 0), {"x": (2, 2, 6, 5), "w": (3, 2, 2, 3)}),
    ]  # fmt: skip
    cases = [
        ("matmul", lambda a, x, y: a.matmul(x, y), lambda x, y: x @ y, {"x": (4, 3), "y": (3, 5)}),
        *conv,
        ("batch_norm", lambda a, x, g, b: a.batch_norm(x, g, b, eps=1e-5),
         lambda x, g, b: batch_norm_ref(x, g, b, 1e-5), {"x": (3, 4, 3, 2), "g": (4,), "b": (4,)}),
        ("layer_norm", lambda a, x, g, b: a.layer_norm(x, g, b, eps=1e-5),
         lambda x, g, b: layer_norm_ref(x, g, b, 1e-5), {"x": (6, 8), "g": (8,), "b": (8,)}),
        ("softmax", lambda a, x: a.softmax(x), softmax_ref, {"x": (5, 7)}),
        ("gelu", lambda a, x: a.gelu(x), gelu_ref, {"x": (4, 6)}),
        ("attention", lambda a, q, k, v: a.attention(q, k, v, causal=False),
         lambda q, k, v: attention_ref(q, k, v, False), {"q": (2, 2, 5, 4), "k": (2, 2, 5, 4), "v": (2, 2, 5, 4)}),
        ("attention-causal", lambda a, q, k, v: a.attention(q, k, v, causal=True),
         lambda q, k, v: attention_ref(q, k, v, True), {"q": (2, 2, 5, 4), "k": (2, 2, 5, 4), "v": (2, 2, 5, 4)}),
    ]  # fmt: skip
    return [pytest.param(*case, id=case[0]) for case in cases]


@pytest.mark.parametrize(("word", "call", "ref", "shapes"), _word_cases())
def test_word_forward_and_vjp_match_float64_references(
    adapter: NumPyAdapter,
    word: str,
    call: Callable[..., Any],
    ref: Callable[..., np.ndarray],
    shapes: dict[str, tuple[int, ...]],
) -> None:
    rng = np.random.default_rng(0)
    inputs = {k: rng.standard_normal(s) + (1.0 if k == "g" else 0.0) for k, s in shapes.items()}
    want = ref(**inputs)
    primals = {k: adapter.from_numpy(v, "fp64") for k, v in inputs.items()}
    cot = rng.standard_normal(want.shape)
    backward = adapter.vjp(lambda **p: call(adapter, **p), primals, adapter.from_numpy(cot, "fp64"))
    np.testing.assert_allclose(call(adapter, **primals), want, rtol=1e-12, atol=1e-12)
    grads = dict(zip(primals, backward(), strict=True))  # in the order of the primals
    for name, x in inputs.items():

        def f(z: np.ndarray, name: str = name) -> np.ndarray:
            return ref(**{**inputs, name: z})

        err = directional_gradcheck(f, x, cot, grads[name], n_directions=3, h=1e-5, seed=1)
        assert err < GRAD_TOL, (word, name, err)
    again = backward()  # the timed callable: repeatable, same values
    for got, name in zip(again, primals, strict=True):
        np.testing.assert_array_equal(got, grads[name])


@pytest.mark.parametrize(("word", "call", "ref", "shapes"), _word_cases())
def test_words_compute_in_fp32(
    adapter: NumPyAdapter,
    word: str,
    call: Callable[..., Any],
    ref: Callable[..., np.ndarray],
    shapes: dict[str, tuple[int, ...]],
) -> None:
    """No silent promotion to float64 (it would make an fp32 timing measure fp64 work)."""
    rng = np.random.default_rng(0)
    primals = {k: adapter.from_numpy(rng.standard_normal(s), "fp32") for k, s in shapes.items()}
    out = call(adapter, **primals)
    assert out.dtype == np.float32, word
    grads = adapter.vjp(lambda **p: call(adapter, **p), primals, np.ones_like(out))()
    assert len(grads) == len(primals), word
    assert {g.dtype for g in grads} == {np.dtype(np.float32)}, word


def test_vjp_chains_words_and_sums_a_reused_input(adapter: NumPyAdapter) -> None:
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((4, 4)), rng.standard_normal((4, 3))
    cot = rng.standard_normal((4, 3))

    def fn(a: Any, b: Any) -> Any:  # a is used twice
        return adapter.softmax(adapter.matmul(adapter.gelu(adapter.matmul(a, a)), b))

    grads = dict(zip("ab", adapter.vjp(fn, {"a": a, "b": b}, cot)(), strict=True))
    for name, x in (("a", a), ("b", b)):

        def f(z: np.ndarray, name: str = name) -> np.ndarray:
            args = {"a": a, "b": b, name: z}
            return softmax_ref(gelu_ref(args["a"] @ args["a"]) @ args["b"])

        assert directional_gradcheck(f, x, cot, grads[name], h=1e-5) < GRAD_TOL, name


def test_vjp_refuses_a_result_no_word_produced(adapter: NumPyAdapter) -> None:
    """NumPy arithmetic outside the words is not on the tape: refused, not differentiated
    wrongly (zeros)."""
    a = np.ones((2, 2))
    with pytest.raises(ValueError, match="adapter word"):
        adapter.vjp(lambda a: adapter.matmul(a, a) * 2.0, {"a": a}, np.ones((2, 2)))


def test_kernels_with_asymmetric_pads_and_strides() -> None:
    """The network builder's general cases: Conv and MaxPool with ONNX pads (top, left,
    bottom, right) and different strides per axis."""
    rng = np.random.default_rng(5)
    x, w = rng.standard_normal((2, 3, 8, 7)), rng.standard_normal((2, 3, 3, 2))
    pads, strides = (1, 0, 2, 1), (2, 1)

    def conv_ref(x: np.ndarray, w: np.ndarray) -> np.ndarray:
        xp = np.pad(x, ((0, 0), (0, 0), (1, 2), (0, 1)))
        return conv2d_forward(xp, w, 1, 0)[:, :, ::2, :]

    y, backward = conv2d(x, w, strides=strides, pads=pads)
    np.testing.assert_allclose(y, conv_ref(x, w), rtol=1e-12, atol=1e-12)
    cot = rng.standard_normal(y.shape)
    dx, dw = backward(cot, (True, True))
    assert directional_gradcheck(lambda z: conv_ref(z, w), x, cot, dx, h=1e-5) < GRAD_TOL
    assert directional_gradcheck(lambda z: conv_ref(x, z), w, cot, dw, h=1e-5) < GRAD_TOL
    assert backward(cot, (False, True))[0] is None  # a gradient nobody needs is not computed

    def pool_ref(z: np.ndarray) -> np.ndarray:
        zp = np.pad(z, ((0, 0), (0, 0), (1, 2), (0, 1)), constant_values=-np.inf)
        win = np.lib.stride_tricks.sliding_window_view(zp, (3, 2), axis=(2, 3))[:, :, ::2, ::1]
        return win.max(axis=(-2, -1))

    y, backward = max_pool(x, kernel=(3, 2), strides=strides, pads=pads)
    np.testing.assert_array_equal(y, pool_ref(x))
    cot = rng.standard_normal(y.shape)
    (dx,) = backward(cot, (True,))
    assert directional_gradcheck(pool_ref, x, cot, dx, h=1e-6) < GRAD_TOL


def _op_cases() -> list[Any]:
    return [
        pytest.param(name, spec.params, id=f"{name}-{i}")
        for name in benchmark_names("operator")
        for i, spec in enumerate(load_benchmark("operator", name).sizes("quick"))
    ]


@pytest.mark.parametrize(("benchmark", "params"), _op_cases())
def test_operator_level_passes_in_fp64(
    adapter: NumPyAdapter, benchmark: str, params: dict[str, Any]
) -> None:
    info = adapter.setup("cpu")
    task = {"benchmark": benchmark, "params": params, "dtype": "fp64", "seed": 3, "measure": FAST}
    out = execute(task, adapter, info)
    assert out["correctness"]["passed"], out["correctness"]


# -- the network builder ---------------------------------------------------------------------
def _zoo_model(network: str, dropout: float | None = None) -> tuple[Any, Any, int]:
    net_def = zoo.get(network)
    arch = net_def.validate(net_def.sizes("quick")[0].params)
    model = net_def.build(arch, seed=5)
    if dropout is not None:
        for init in model.graph.initializer:
            if init.name == "const.dropout_ratio":
                ratio = np.asarray(dropout, dtype=np.float32)
                init.CopyFrom(numpy_helper.from_array(ratio, init.name))
    return model, net_def.input_spec(arch), net_def.num_classes(arch)


@pytest.mark.parametrize("network", ["mlp", "alexnet", "resnet18", "transformer"])
def test_network_gradients_match_finite_differences(network: str) -> None:
    """The first SGD step with lr 1 and no momentum is ``p - grad``: its gradient, for every
    trainable tensor, against central differences of the training-mode loss in float64.
    (Dropout off: a random mask is not a function of the weights.)"""
    model, spec, classes = _zoo_model(network, dropout=0.0)
    x, y = B.synthetic_batch(spec, 3, classes, np.random.default_rng(0))
    net = NumPyNetwork(model, np.float64, NetworkOptions(lr=1.0, momentum=0.0))
    before = {k: v.copy() for k, v in net.params.items()}
    net.train_step(x, y)

    def loss(name: str, z: np.ndarray) -> np.ndarray:
        net.params = {**before, name: z}
        try:
            return softmax_cross_entropy(net._run(x, training=True)[0], y)[0]
        finally:
            net.params = after

    after = net.params
    worst = {}
    for name in sorted(before):
        grad = before[name] - after[name]
        if np.max(np.abs(grad)) < 1e-12:
            # Zero in exact arithmetic (attention's key bias: softmax ignores a constant added
            # to a row of scores), so a relative error means nothing: the loss must not move.
            v = np.random.default_rng(2).standard_normal(grad.shape)
            slope = (
                loss(name, before[name] + 1e-6 * v) - loss(name, before[name] - 1e-6 * v)
            ) / 2e-6
            assert abs(slope) < 1e-8, (name, slope)
            continue
        worst[name] = directional_gradcheck(
            lambda z, name=name: loss(name, z), before[name], np.ones(()), grad,
            n_directions=1, h=1e-6, seed=2,
        )  # fmt: skip
    bad = {k: v for k, v in worst.items() if not v < GRAD_TOL}
    assert not bad, bad


def test_network_keeps_the_initializers_and_sorts_them() -> None:
    model, spec, _ = _zoo_model("resnet18")
    net = NumPyNetwork(model, np.float64, NetworkOptions())
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    params = net.parameters()
    assert params, "no trainable tensors"
    for name, value in params.items():
        assert value.dtype == np.float64
        np.testing.assert_array_equal(value, inits[name])
    running = {n for n in inits if n.endswith((".running_mean", ".running_var"))}
    assert running and not running & set(params) and running == set(net.state)
    assert net.parameters()["fc.weight"] is not net.params["fc.weight"]  # a copy
    x = np.random.default_rng(0).standard_normal((2, *spec.shape))
    np.testing.assert_allclose(net.forward(x), ort_logits(model, x, spec), rtol=1e-5, atol=1e-5)


def test_dropout_is_seeded_inverted_and_off_in_inference() -> None:
    model, spec, classes = _zoo_model("alexnet")
    x, y = B.synthetic_batch(spec, 2, classes, np.random.default_rng(0))

    def first_losses(seed: int) -> list[float]:
        net = NumPyNetwork(model, np.float32, NetworkOptions(lr=1e-3, seed=seed))
        return [float(net.train_step(x, y)) for _ in range(3)]

    assert first_losses(0) == first_losses(0)
    assert first_losses(0) != first_losses(1)
    net = NumPyNetwork(model, np.float32, NetworkOptions(seed=0))
    np.testing.assert_array_equal(net.forward(x), net.forward(x))  # inference: no mask

    from suite.adapters.numpy.kernels import KERNELS, Ctx
    from suite.onnx.importer import Step

    dropout = Step("Dropout", "d", 0, ("x",), ("y",), {"ratio": 0.25}, ((200, 100),), ((200, 100),))
    ones = np.ones((200, 100), dtype=np.float32)
    train = Ctx(True, np.random.default_rng(0), np.dtype(np.float32))
    out, backward = KERNELS["Dropout"](train, dropout, [ones])
    kept = out != 0
    assert abs(kept.mean() - 0.75) < 0.01 and np.allclose(out[kept], 1 / 0.75)
    np.testing.assert_array_equal(backward(ones, (True,))[0], out)
    infer = Ctx(False, np.random.default_rng(0), np.dtype(np.float32))
    same, _ = KERNELS["Dropout"](infer, dropout, [ones])
    assert same is ones


@pytest.mark.pytorch
@pytest.mark.parametrize(("network", "batch"), [("mlp", 16), ("resnet18", 16), ("transformer", 4)])
def test_training_follows_pytorch(network: str, batch: int) -> None:
    """Same weights, same batch, two SGD-with-momentum steps: the same losses, weight updates
    and BatchNorm running statistics as PyTorch (fp32 both). Two steps test the momentum
    buffer; more would test chaos: a ReLU input within fp32 rounding of zero flips in one
    framework and not the other, and deep BatchNorm on a small batch amplifies it (seen here:
    ResNet-18 at batch 4, 1e-4 apart after one step, 10% after three)."""
    from suite.adapters.pytorch.adapter import PyTorchAdapter

    model, spec, classes = _zoo_model(network)
    x, y = B.synthetic_batch(spec, batch, classes, np.random.default_rng(1))
    running = [i.name for i in model.graph.initializer if i.name.endswith(("_mean", "_var"))]
    runs = []
    for cls in (PyTorchAdapter, NumPyAdapter):
        a = cls()
        a.setup("cpu")
        net = a.build_network(model, "fp32", NetworkOptions(lr=0.01, momentum=0.9))
        xt = a.labels_from_numpy(x) if spec.kind == "int64" else a.from_numpy(x, "fp32")
        yt = a.labels_from_numpy(y)
        before = a.network_parameters(net)
        losses = [float(a.to_numpy(a.train_step(net, xt, yt))) for _ in range(2)]
        after = a.network_parameters(net)
        if cls is PyTorchAdapter:
            keys = net.module.keys
            state = {k: getattr(net.module, keys[k]).detach().double().numpy() for k in running}
        else:
            state = {k: net.state[k].astype(np.float64) for k in running}
        runs.append((losses, {k: after[k] - before[k] for k in after}, state))
    (losses_t, update_t, state_t), (losses_n, update_n, state_n) = runs
    np.testing.assert_allclose(losses_n, losses_t, rtol=1e-5)
    assert update_n.keys() == update_t.keys()
    for name, u in update_t.items():
        # (+ 1e-9: the attention key bias gets a gradient that is zero up to rounding)
        assert np.linalg.norm(update_n[name] - u) <= 1e-3 * np.linalg.norm(u) + 1e-9, name
    for name in running:
        diff = np.max(np.abs(state_n[name] - state_t[name]))
        assert diff <= 1e-5 * np.max(np.abs(state_t[name])), name


def test_unmapped_attributes_are_declared_not_crashed() -> None:
    """An op the builder knows with an attribute value it does not map: UnsupportedError
    (a skipped record) at build time, before any data flows."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4, 8, 8])
    conv = helper.make_node("Conv", ["x", "w"], ["y"], name="wide", dilations=[1, 1, 1])
    x3 = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4, 8, 8, 8])
    out3 = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4, 6, 6, 6])
    w3 = numpy_helper.from_array(np.ones((4, 4, 3, 3, 3), dtype=np.float32), "w")
    model = helper.make_model(helper.make_graph([conv], "g", [x3], [out3], [w3]))
    net = NumPyAdapter().build_network(model, "fp32", NetworkOptions())
    with pytest.raises(UnsupportedError, match="only 2-D windows are mapped"):
        net.forward(np.ones((1, 4, 8, 8, 8), np.float32))
    det = helper.make_node("Det", ["x"], ["y"], name="act")
    model = helper.make_model(
        helper.make_graph(
            [det], "g", [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])]
        )
    )
    with pytest.raises(UnsupportedError, match="unsupported op Det in node act"):
        NumPyAdapter().build_network(model, "fp32", NetworkOptions())


def test_a_missing_word_is_skipped_with_its_declared_reason() -> None:
    """``missing_words``: the skipped record says why a word is missing, not only that it is
    (an operator word here, a vocabulary for NumPy's own distributed words)."""

    class NoGelu(NumPyAdapter):
        words = NumPyAdapter.words - {"gelu"}
        missing_words = {"gelu": "myfw's erf is an approximation (a test's declaration)"}

    adapter = NoGelu()
    info = adapter.setup("cpu")
    spec = load_benchmark("operator", "gelu").sizes("quick")[0]
    task = {"benchmark": "gelu", "params": spec.params, "dtype": "fp32", "seed": 0, "measure": FAST}
    with pytest.raises(UnsupportedError) as raised:
        execute(task, adapter, info)
    why = str(raised.value)
    assert "does not implement the word(s) gelu" in why and why.endswith(
        ": myfw's erf is an approximation (a test's declaration)"
    ), why
    assert NumPyAdapter.strategy_declined("allreduce").endswith(
        ": NumPy has no distributed runtime, and the suite writes none of its own (a "
        "distributed word maps a framework's own runtime)"
    )
