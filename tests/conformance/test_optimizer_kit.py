"""Conformance, optimizer part: every adapter maps each suite optimizer to its framework's own
or declares it unsupported (with a reason), its declarations agree with the suite's vocabulary
and with what its folder's optimizers.toml records about its framework; and every
optimizer and implementation it declares runs, follows the variant optimizers.toml records as
implemented, and meets the bound of the documented rule unless optimizers.toml records that
the framework differs from its documentation.

The declaration tests read classes only (every registered adapter, importable here or not);
the running tests take the adapters the kit runs in this interpreter (DLSUITE_CONFORMANCE).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from suite.adapters import ADAPTERS
from suite.adapters.optimizer_words import OptimizerSpec
from suite.dtypes import DTYPES
from suite.errors import UnsupportedError
from suite.levels import execute, load_benchmark
from suite.optimizers import catalogue, documented
from tests.conformance.test_adapters import ADAPTER_NAMES, FAST, skip_declared


@pytest.mark.parametrize("name", ADAPTERS.names())
def test_every_optimizer_is_mapped_or_declared_unsupported(name: str) -> None:
    cls = ADAPTERS.load(name)
    mapped, declined = set(cls.optimizers), set(cls.unsupported_optimizers)
    if "training" not in cls.levels:  # Horovod: the level is declared, not the optimizers
        assert cls.levels_reason
        return
    if "optimizer" not in cls.words and not mapped and not declined:  # the guide's minimal one
        reason = cls.optimizer_declined(next(iter(catalogue.OPTIMIZERS)), {}, catalogue.ALL, "fp32")
        assert reason == f"{name} does not implement the optimizer words" + (
            cls.missing_because(["optimizer"])
        ), reason
        skip_declared(reason)
    assert mapped | declined == set(catalogue.OPTIMIZERS), name
    assert not mapped & declined, name
    for text in [*cls.optimizers.values(), *cls.unsupported_optimizers.values()]:
        assert text.strip() and "\n" not in text
    if mapped:
        assert "optimizer" in cls.words, f"{name} maps optimizers without the optimizer word"


@pytest.mark.parametrize("name", ADAPTERS.names())
def test_optimizer_declarations_use_the_suites_vocabulary(name: str) -> None:
    cls = ADAPTERS.load(name)
    assert set(cls.optimizer_implementations) <= set(catalogue.IMPLEMENTATIONS), name
    for optimizer, impls in cls.unsupported_implementations.items():
        assert optimizer in cls.optimizers, (name, optimizer)
        assert set(impls) <= set(cls.optimizer_implementations), (name, optimizer, impls)
        assert all(why.strip() for why in impls.values())
    for optimizer in cls.optimizers:
        assert cls.optimizer_implementations_for(optimizer), (name, optimizer)
        taken = cls.optimizer_hyperparameters.get(optimizer)
        assert taken is not None and "lr" in taken, (name, optimizer)
        assert taken <= set(catalogue.get(optimizer).hyperparameters), (name, optimizer, taken)
    assert set(cls.optimizer_dtypes) <= set(DTYPES), name
    assert set(cls.master_weights) <= set(cls.optimizer_dtypes) - {"fp32"}, name
    if cls.optimizers:
        assert "fp32" in cls.optimizer_dtypes, name


@pytest.mark.parametrize("name", [n for n in ADAPTERS.names() if n in documented.frameworks()])
def test_declarations_agree_with_what_optimizers_toml_records(name: str) -> None:
    """optimizers.toml is the research record of each framework's documentation: the adapter
    maps exactly the optimizers it records as existing, with the same hyperparameters."""
    cls = ADAPTERS.load(name)
    for optimizer in catalogue.OPTIMIZERS:
        entry = documented.entry(name, optimizer)
        assert entry.supported == (optimizer in cls.optimizers), (name, optimizer)
        if entry.supported:
            recorded = set(entry.hyper)
            assert set(cls.optimizer_hyperparameters[optimizer]) == recorded, (name, optimizer)


def _cases() -> list[Any]:
    out = []
    for name in ADAPTER_NAMES:
        cls = ADAPTERS.load(name)
        if "training" not in cls.levels:  # the level's reason, once
            out.append(pytest.param(name, "", None, id=f"{name}-level-declined"))
            continue
        for optimizer in catalogue.OPTIMIZERS:
            if optimizer not in cls.optimizers:
                out.append(pytest.param(name, optimizer, None, id=f"{name}-{optimizer}-declined"))
                continue
            for impl in cls.optimizer_implementations_for(optimizer):
                out.append(pytest.param(name, optimizer, impl, id=f"{name}-{optimizer}-{impl}"))
    return out


@pytest.mark.parametrize(("name", "optimizer", "implementation"), _cases())
def test_declared_optimizer_runs_and_meets_its_documented_rule(
    name: str, optimizer: str, implementation: str | None
) -> None:
    cls = ADAPTERS.load(name)
    if "training" not in cls.levels:  # Horovod: the level is declared, not its optimizers
        skip_declared(cls.levels_reason or f"{name} does not run the training level")
    adapter = cls()
    device = adapter.setup("cpu")
    params: dict[str, Any] = {"optimizer": optimizer, "steps": 4, "params": "zoo:mlp:quick"}
    if implementation is not None:
        params["implementation"] = implementation
    task = {"level": "training", "benchmark": "optimizer", "params": params, "dtype": "fp32",
            "seed": 0, "measure": FAST}  # fmt: skip
    if implementation is None:  # declared unsupported: skipped with the declared reason
        with pytest.raises(UnsupportedError) as err:
            execute(task, adapter, device)
        if optimizer in cls.unsupported_optimizers:
            assert str(err.value) == cls.unsupported_optimizers[optimizer]
            return
        assert "optimizer" not in cls.words, (name, optimizer, "mapped nor declared")
        assert str(err.value) == f"{name} does not implement the optimizer words" + (
            cls.missing_because(["optimizer"])
        )
        skip_declared(str(err.value))
    out = execute(task, adapter, device)
    assert isinstance(out, list) and len(out) == 1
    (rec,) = out
    sec = rec["optimizer"]
    assert rec["params"]["implementation"] == implementation
    assert sec["mechanism"] == cls.optimizers[optimizer]
    check = rec["correctness"]["checks"][0]
    assert check["name"] == "params_vs_documented_rule.bound_ratio"
    entry = documented.entry(name, optimizer)
    # what optimizers.toml records as implemented is what runs
    assert sec["implemented_variant"] in sec["follows"], (sec["follows"], check)
    if not entry.mismatches():
        assert check["passed"], check
    elif not check["passed"]:  # a recorded departure from the documentation, said so
        assert check["detail"]["differs_from_documentation"]
        # and named as the difference the adapter declares, where it declares one
        declared = cls.documented_differences.get(optimizer)
        if declared is not None:
            assert check["detail"]["documented_difference"] == declared.what
            assert check["detail"]["documented_in"] == declared.documented_in
    assert sec["state"]["bytes"] >= 0 and sec["traffic"]["bytes_per_step"] > 0
    names = {m["name"] for m in rec["metrics"]}
    assert {"time", "parameter_rate", "bandwidth"} <= names


def test_the_benchmark_is_registered_at_the_training_level() -> None:
    assert load_benchmark("training", "optimizer").level == "training"


@pytest.mark.parametrize("name", ADAPTER_NAMES)
def test_declared_master_weights_are_fp32_and_follow_the_rule(name: str) -> None:
    """A framework that declares fp32 master weights for a dtype keeps an fp32 copy that
    meets the fp32 bound, and low-precision parameters within one rounding of it (SGD with
    momentum, every implementation: the rule every framework has); one that declares none
    has its low-precision tasks skipped on the host, saying so."""
    cls = ADAPTERS.load(name)
    if "training" not in cls.levels or "momentum" not in cls.optimizers:
        return
    bench = load_benchmark("training", "optimizer")
    params = bench.validate({"optimizer": "momentum", "steps": 4})
    for dtype in ("bf16", "fp16"):
        if dtype not in cls.master_weights:  # no master weights, or not that dtype at all
            why = bench.host_declined(cls, params, dtype)
            assert "master weights" in why or f"not run {dtype}" in why, (name, dtype, why)
    adapter = cls()
    device = adapter.setup("cpu")
    for dtype in cls.master_weights:
        for implementation in cls.optimizer_implementations_for("momentum"):
            task = {
                "level": "training", "benchmark": "optimizer", "dtype": dtype, "seed": 0,
                "measure": FAST,
                "params": {"optimizer": "momentum", "steps": 4, "implementation": implementation},
            }  # fmt: skip
            (rec,) = execute(task, adapter, device)
            checks = {c["name"]: c for c in rec["correctness"]["checks"]}
            assert checks["params_vs_documented_rule.bound_ratio"]["passed"], checks
            assert checks["master_params_vs_documented_rule.bound_ratio"]["passed"], checks
            assert rec["optimizer"]["master_weights"] == adapter.master_weights[dtype]


@pytest.mark.parametrize("name", ADAPTER_NAMES)
def test_every_optimizer_word_takes_effect(name: str) -> None:
    """The words the benchmark drives between steps do what they say, checked on the words
    alone so that a failure names the adapter, not the framework: ``optimizer_set_lr`` changes
    the next step's learning rate (a handle that ignores it once passed the kit, and its records
    then failed with "follows none of the known variants", blaming the framework), the step
    applies the gradients ``optimizer_set_gradients`` placed, ``optimizer_parameters`` reads
    the stepped values, ``optimizer_state_bytes`` counts bytes."""
    cls = ADAPTERS.load(name)
    if "training" not in cls.levels:
        skip_declared(cls.levels_reason or f"{name} does not run the training level")
    if not cls.optimizers:
        skip_declared(cls.optimizer_declined("sgd", {}, catalogue.ALL, "fp32"))
    optimizer = "sgd" if "sgd" in cls.optimizers else next(iter(cls.optimizers))
    impl = cls.optimizer_implementations_for(optimizer)[0]
    adapter = cls()
    adapter.setup("cpu")
    rng = np.random.default_rng(7)
    params = {"w": rng.standard_normal((8, 4)).astype(np.float32).astype(np.float64),
              "b": rng.standard_normal(4).astype(np.float32).astype(np.float64)}  # fmt: skip
    grads = {k: rng.standard_normal(v.shape).astype(np.float32).astype(np.float64)
             for k, v in params.items()}  # fmt: skip
    opt = catalogue.get(optimizer)
    where = f"{name}'s {optimizer} ({impl}; suite/adapters/{name}/optimizers.py)"

    def stepped(built_lr: float, set_lr: float | None) -> dict[str, np.ndarray]:
        spec = OptimizerSpec(optimizer, opt.complete({"lr": built_lr}), impl, "fp32", False,
                             tuple(params))  # fmt: skip
        handle = adapter.optimizer_build(spec, params)
        if set_lr is not None:
            adapter.optimizer_set_lr(handle, set_lr)
        adapter.optimizer_set_gradients(handle, grads)
        adapter.wait(adapter.optimizer_step(handle))
        adapter.synchronize()
        state = adapter.optimizer_state_bytes(handle)
        assert isinstance(state, int) and state >= 0, f"{where}: optimizer_state_bytes {state!r}"
        return adapter.optimizer_parameters(handle)

    lr = 0.25
    built = stepped(lr, None)
    for k, v in params.items():
        assert built[k].shape == v.shape, f"{where}: optimizer_parameters[{k!r}] has another shape"
        assert not np.allclose(built[k], v), (
            f"{where}: a step with gradients set left {k!r} unchanged: the adapter's handle "
            "does not apply what optimizer_set_gradients placed (an adapter fault)"
        )
    changed = stepped(0.01, lr)
    for k in params:
        np.testing.assert_allclose(
            changed[k], built[k], rtol=1e-6, atol=1e-7,
            err_msg=f"{where}: optimizer_set_lr(handle, {lr}) did not set the next step's "
            "learning rate (built at 0.01, set to 0.25, the step differs from one built at "
            "0.25): the adapter's handle does not reach the framework's learning rate, an "
            "adapter fault, not the framework's",
        )  # fmt: skip
