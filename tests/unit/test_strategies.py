"""The strategies benchmark without any framework: definitions and options, the bytes each
strategy sends, pipeline cuts of zoo graphs (checked by evaluating the stages in NumPy), the
plan (--strategy, allreduce first, bad input), the host's comparison with the allreduce
baseline, and every adapter declaring every strategy one way or the other."""

from __future__ import annotations

import copy
import json
import math
from typing import Any

import numpy as np
import pytest

from suite import schemas
from suite import strategies as S
from suite.adapters import ADAPTERS
from suite.aggregate import StrategyBaselines, strategy_key
from suite.config import resolve
from suite.errors import ConfigError, SuiteError
from suite.onnx import zoo
from suite.onnx.numpy_eval import NumpyGraph
from suite.results import validate_record
from tests import synthetic


# -- definitions and options -------------------------------------------------------------------
def test_every_strategy_is_self_consistent() -> None:
    assert next(iter(S.STRATEGIES)) == S.BASELINE
    for name, s in S.STRATEGIES.items():
        assert s.name == name
        assert s.exchanged in ("gradients", "parameters", "activations")
        assert s.topology in ("collective", "parameter-server", "pipeline")
        # an exact strategy is synchronous; a synchronous one has no staleness
        assert not s.exact or s.synchronous, name
        assert (s.staleness == 0) == s.synchronous, name
        assert s.error_feedback <= (s.compression is not None), name
        assert S.validate_options(s, {}) == {k: o.default for k, o in s.options.items()}


@pytest.mark.parametrize(
    ("name", "options", "needle"),
    [
        ("powersgd", {"rank": 0}, "at least 1"),
        ("powersgd", {"start_iter": 1}, "at least 2"),
        ("powersgd", {"rank": 2.5}, "expected int"),
        ("local-sgd", {"every": 3}, "not an option of local-sgd"),
        ("pipeline", {"schedule": "zb"}, "not one of"),
        ("allreduce", {"rank": 1}, "its options: none"),
    ],
)
def test_bad_options_name_the_field(name: str, options: dict[str, Any], needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        S.validate_options(S.get(name), options)


def test_unknown_strategy_lists_them() -> None:
    with pytest.raises(ConfigError, match="ps-async"):
        S.get("ps-asynch")


# -- bytes per step ----------------------------------------------------------------------------
SHAPES = [(128, 64), (128,), (10, 128), (10,)]
ELEMS = 128 * 64 + 128 + 10 * 128 + 10


@pytest.mark.parametrize("world", [2, 3, 4, 8])
def test_bytes_follow_the_definitions(world: int) -> None:
    ring = 2 * (world - 1) / world * ELEMS * 4

    def sent(name: str, **opts: Any) -> dict[str, Any]:
        s = S.get(name)
        return S.sent_bytes_per_step(s, {**S.validate_options(s, {}), **opts}, SHAPES, world)

    assert sent("allreduce")["bytes"] == pytest.approx(ring)
    assert sent("fp16")["bytes"] == pytest.approx(ring / 2)
    assert sent("fp16")["uncompressed"] / sent("fp16")["bytes"] == pytest.approx(2.0)
    assert sent("local-sgd", period=4)["bytes"] == pytest.approx(ring / 4)
    assert sent("ps-sync")["bytes"] == ELEMS * 4  # one push, whatever the world size
    # 2 bits per element, packed in 32-bit words per tensor
    words = sum(math.ceil(math.prod(s) / 16) for s in SHAPES)
    assert sent("2bit")["bytes"] == words * 4
    assert sent("2bit")["uncompressed"] / sent("2bit")["bytes"] == pytest.approx(16, rel=0.01)


def test_a_framework_sends_a_strategy_as_another_defines() -> None:
    """MXNet's allreduce is a push to a kvstore server (``strategy_sent_as``): ps-sync's
    bytes, whatever the world size; a ring framework's are the ring's."""
    mxnet, torch = ADAPTERS.load("mxnet")(), ADAPTERS.load("pytorch")()
    opts = S.validate_options(S.get("allreduce"), {})
    got = mxnet.strategy_bytes("allreduce", opts, SHAPES, 4)
    assert got["bytes"] == got["uncompressed"] == ELEMS * 4
    assert got["model"].startswith("allreduce sent as ps-sync: one push of every gradient")
    ring = torch.strategy_bytes("allreduce", opts, SHAPES, 4)
    assert ring["bytes"] == pytest.approx(2 * 3 / 4 * ELEMS * 4)
    assert ring["model"].startswith("ring allreduce")
    two = S.validate_options(S.get("2bit"), {})  # what it does not declare is the definition
    assert mxnet.strategy_bytes("2bit", two, SHAPES, 4) == S.sent_bytes_per_step(
        S.get("2bit"), two, SHAPES, 4
    )


def test_powersgd_compresses_only_matrices_it_shrinks() -> None:
    # (n + m) r * 2 < n m: 128x64 at rank 2 -> 384 elements; a vector and a 2x2 stay whole
    assert S.powersgd_elements((128, 64), 2) == ((128 + 64) * 2, True)
    assert S.powersgd_elements((128,), 2) == (128, False)
    assert S.powersgd_elements((2, 2), 1) == (4, False)
    # a conv weight is viewed as (out channels, the rest)
    assert S.powersgd_elements((64, 32, 3, 3), 4) == ((64 + 288) * 4, True)
    s = S.get("powersgd")
    got = S.sent_bytes_per_step(s, {"rank": 2, "start_iter": 2}, SHAPES, 2)
    want = ((128 + 64) * 2 + 128 + (10 + 128) * 2 + 10) * 4
    assert got["bytes"] == want


def test_pipeline_bytes_are_the_cut_activations() -> None:
    got = S.sent_bytes_per_step(S.get("pipeline"), {}, SHAPES, 2, cut_elements=48 * 128)
    assert got["bytes"] == 48 * 128 * 4


# -- pipeline cuts -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("network", "params", "stages"),
    [
        ("mlp", {}, 2),
        ("mlp", {"layers": 3}, 4),
        ("resnet18", {"resolution": 32, "classes": 10, "width": 8}, 2),
        ("transformer", "quick", 2),
    ],
)
def test_stages_chain_to_the_whole_network(
    network: str, params: dict[str, Any] | str, stages: int
) -> None:
    net = zoo.get(network)
    arch = net.validate(net.sizes("quick")[0].params if params == "quick" else params)
    model = net.build(arch, seed=3)
    parts, cuts = S.split_stages(model, stages)
    assert len(parts) == stages and len(cuts) == stages - 1
    spec = net.input_spec(arch)
    rng = np.random.default_rng(0)
    if spec.kind == "int64":
        x: np.ndarray = rng.integers(0, spec.high, size=(3, *spec.shape))
    else:
        x = rng.standard_normal((3, *spec.shape))
    want = NumpyGraph(model)(x)
    value = x
    for part in parts:
        inits = {t.name for t in part.graph.initializer}
        assert len([i for i in part.graph.input if i.name not in inits]) == 1
        value = NumpyGraph(part)(value)
    np.testing.assert_allclose(value, want, rtol=1e-12, atol=1e-12)

    # every weight lands in exactly one stage (constants may be copied into several)
    def weights(m: Any) -> list[str]:
        return [i.name for i in m.graph.initializer if i.data_type == 1 and math.prod(i.dims) > 1]

    in_stages = [w for p in parts for w in weights(p)]
    assert len(in_stages) == len(set(in_stages))
    assert set(in_stages) == set(weights(model))
    sizes = [sum(math.prod(i.dims) for i in p.graph.initializer if i.data_type == 1) for p in parts]
    assert min(sizes) > 0, sizes
    for cut in cuts:
        assert S.value_elements_per_sample(model, cut) > 0


def test_too_many_stages_is_a_skip_with_the_reason() -> None:
    from suite.errors import UnsupportedError

    net = zoo.get("mlp")
    model = net.build(net.validate({}), seed=0)  # three weight layers: at most 3 stages
    assert len(S.split_stages(model, 3)[0]) == 3
    with pytest.raises(UnsupportedError, match="2 places to cut it.*too few for 4 stages"):
        S.split_stages(model, 4)


def test_mlp_two_stages_cut_after_the_first_layer() -> None:
    net = zoo.get("mlp")
    model = net.build(net.validate({}), seed=0)
    parts, cuts = S.split_stages(model, 2)
    # fc1 (64x128) | fc2 (128x128) + head (128x10): the most even of the single-tensor cuts
    assert {i.name for i in parts[0].graph.initializer} == {"fc1.weight", "fc1.bias"}
    assert S.value_elements_per_sample(model, cuts[0]) == 128


# -- the plan ----------------------------------------------------------------------------------
@pytest.fixture
def adapters_available(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("pytorch", "mxnet"):
        monkeypatch.setattr(ADAPTERS.load(name), "available", classmethod(lambda cls: (True, "")))


def _plan(**cli: Any) -> list[Any]:
    from suite import plan

    base = {"quick": True, "level": ["distributed"], "benchmarks": ["strategies"]}
    return plan.build(resolve({**base, **cli}, env={}))


def test_plan_runs_allreduce_first_then_the_chosen(adapters_available: None) -> None:
    tasks = _plan(frameworks=["pytorch"], strategies=["powersgd", "pipeline"], world_size=2)
    assert [t.params["strategy"] for t in tasks] == ["allreduce", "powersgd", "pipeline"]
    assert {t.world_size for t in tasks} == {2}
    doc = tasks[1].document(run_id="r", record_path="/tmp/x", provenance={})
    schemas.validate("task", doc)
    assert doc["strategy"] == "powersgd" and doc["params"]["options"]["rank"] == 2
    assert len({t.task_id for t in tasks}) == 3


def test_plan_every_strategy_by_default(adapters_available: None) -> None:
    tasks = _plan(frameworks=["pytorch", "mxnet"], world_size=4)
    assert [t.params["strategy"] for t in tasks if t.framework == "pytorch"] == list(S.STRATEGIES)


@pytest.mark.parametrize(
    ("cli", "needle"),
    [
        ({"world_size": 1}, "at least 2 ranks"),
        ({"strategies": ["ps-asynch"]}, "--strategy 'ps-asynch'"),
    ],
)
def test_plan_bad_input_is_one_clear_error(
    adapters_available: None, cli: dict[str, Any], needle: str
) -> None:
    with pytest.raises(SuiteError, match=needle) as info:
        _plan(frameworks=["pytorch"], **cli)
    assert info.value.exit_code == 2


# -- the host's comparison with the allreduce baseline ----------------------------------------
def test_strategy_cost_against_the_baseline() -> None:
    base = synthetic.strategy_record("allreduce", throughput=5000.0, tta=1.0, steps=49, final=0.97)
    fp16 = synthetic.strategy_record("fp16", throughput=2500.0, tta=2.0, steps=49, final=0.98)
    other_world = synthetic.strategy_record("fp16", world_size=4)
    no_target = synthetic.strategy_record("ps-async", tta=None, steps=None, final=0.9)
    assert strategy_key(base) == strategy_key(fp16) != strategy_key(other_world)
    tracker = StrategyBaselines([base])
    for rec in (fp16, other_world, no_target):
        tracker.observe(rec)
        validate_record(rec)
    vs = fp16["strategy"]["vs_baseline"]
    assert vs["baseline_task_id"] == base["task_id"]
    assert vs["throughput_ratio"] == pytest.approx(0.5)
    assert vs["time_to_accuracy_ratio"] == pytest.approx(2.0)
    assert vs["steps_to_target_ratio"] == pytest.approx(1.0)
    assert vs["final_accuracy_delta"] == pytest.approx(0.01)
    assert vs["bytes_per_step_ratio"] == pytest.approx(0.5)
    assert other_world["strategy"]["vs_baseline"] is None
    assert "no successful allreduce" in other_world["strategy"]["baseline_unavailable"]
    assert no_target["strategy"]["vs_baseline"]["time_to_accuracy_ratio"] is None
    # a record compared before (read back on --resume) is left as it is
    before = copy.deepcopy(fp16)
    StrategyBaselines([synthetic.strategy_record("allreduce", throughput=1.0)]).observe(fp16)
    assert fp16 == before
    assert "vs_baseline" not in base["strategy"]


# -- declarations ------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ADAPTERS.names())
def test_every_adapter_declares_every_strategy(name: str) -> None:
    cls = ADAPTERS.load(name)
    if "distributed" not in cls.words:
        return  # the whole level is skipped for it, strategies included
    mapped, declined = set(cls.strategies), set(cls.unsupported_strategies)
    assert not mapped & declined, mapped & declined
    assert mapped | declined == set(S.STRATEGIES), set(S.STRATEGIES) ^ (mapped | declined)
    assert S.BASELINE in mapped, f"{name} must map the allreduce baseline"
    for strategy, text in [*cls.strategies.items(), *cls.unsupported_strategies.items()]:
        assert len(text) > 20 and "\n" not in text, (
            f"{name}: {strategy}: {text!r}: say in one line of more than 20 characters what "
            "the framework maps it to, or why it cannot (a record shows it as the reason)"
        )
    assert json.dumps(cls.strategies)  # plain data, readable on the host


def test_custom_sizes_get_their_baseline(adapters_available: None, tmp_path: Any) -> None:
    path = tmp_path / "strategies.toml"
    path.write_text(
        "[distributed.strategies]\n"
        'sizes = [{network = "mlp", batch = 48, strategy = "powersgd", options = {rank = 4}},\n'
        '         {network = "mlp", batch = 96, digits = {epochs = 2}}]\n',
        encoding="utf-8",
    )
    tasks = _plan(frameworks=["pytorch"], config=str(path), strategies=["fp16"], world_size=2)
    got = [(t.params["batch"], t.params["strategy"], t.params["options"]) for t in tasks]
    # the powersgd size gets its allreduce baseline added; the size without a strategy is
    # expanded (--strategy fp16, allreduce first); baselines run first
    assert got == [
        (48, "allreduce", {}), (96, "allreduce", {}), (48, "powersgd", {"rank": 4, "start_iter": 2}),
        (96, "fp16", {}),
    ]  # fmt: skip
    assert tasks[1].params["digits"]["epochs"] == 2
    path.write_text(
        '[distributed.strategies]\nsizes = [{network = "mlp", batch = 48, strategy = "local-sgd", '
        "options = {period = 0}}]\n",
        encoding="utf-8",
    )
    with pytest.raises(ConfigError, match=r"sizes\[0\].*period.*at least 1"):
        _plan(frameworks=["pytorch"], config=str(path), world_size=2)
