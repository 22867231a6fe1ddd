"""Run one operator task inside the worker: inputs, reference, correctness, timing, metrics."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import numpy as np

from suite import metrics as M
from suite.adapters.base import Adapter, DeviceInfo
from suite.dtypes import ITEMSIZE, quantize
from suite.errors import UnsupportedError
from suite.measure import MeasureConfig, measure, timer_check


def execute(
    task: dict[str, Any],
    adapter: Adapter,
    device: DeviceInfo,
    timed_region: Callable[[], AbstractContextManager[Any]] = nullcontext,
) -> dict[str, Any]:
    """Returns the record fields this level owns: metrics, correctness, measurement, work.

    ``timed_region`` wraps the sampling phase of the timing loop only (the worker's telemetry:
    warm-up and calibration stay out of it).
    """
    from suite.levels import load_benchmark

    bench = load_benchmark("operator", task["benchmark"])
    params = bench.validate(task["params"])
    dtype = task["dtype"]

    missing = sorted(bench.needs(params) - adapter.words)
    if missing:
        raise UnsupportedError(
            f"{adapter.name} does not implement the word(s) {', '.join(missing)} "
            f"that {bench.name} needs"
        )
    ok, why = adapter.supports(dtype)
    if not ok:
        raise UnsupportedError(why)

    # Inputs: seeded, generated once outside any timed region, rounded to the dtype; the
    # reference sees exactly the values the framework sees.
    rng = np.random.default_rng(task["seed"])
    inputs = {k: quantize(v, dtype) for k, v in bench.inputs(params, rng).items()}
    fn = bench.build(adapter, params, _tensors(adapter, bench, params, inputs, dtype))

    # Correctness (a separate run from the timing, as Deep500 does).
    outputs = fn()
    adapter.synchronize()
    got = {k: adapter.to_numpy(v) for k, v in outputs.items()}
    reference = bench.reference(params, inputs)
    tol = M.tolerance_for(dtype, bench.tolerance_scale)
    checks: list[M.Check] = []
    for name, ref in reference.items():
        length = bench.reduction_length(params, name)
        checks.extend(
            M.compare(name, got[name], ref, M.tolerance_for(dtype, bench.tolerance_scale, length))
        )
    checks.extend(_gradchecks(bench, adapter, params, dtype, task["seed"], tol))

    # Timing.
    cfg = MeasureConfig(**task["measure"])
    m = measure(lambda n: adapter.time(fn, n), cfg, region=timed_region)
    timer = timer_check(lambda n: adapter.time(fn, n), fn,
                        lambda out: [adapter.to_numpy(v) for v in out.values()], m.inner,
                        ready=lambda out: {k: adapter.from_numpy(adapter.to_numpy(v), dtype)
                                           for k, v in out.items()})  # fmt: skip
    if timer is not None:
        checks.append(timer)

    flops = bench.flops(params)
    nbytes = bench.bytes_moved(params, ITEMSIZE[dtype])
    entries = [
        M.TIME.entry(m.samples),
        M.FLOP_RATE.entry(M.rates(m.samples, flops, 1e12)),
        M.BANDWIDTH.entry(M.rates(m.samples, nbytes, 1e9)),
    ]
    peak = device.peak_tflops.get(dtype)
    if peak:
        median_rate = entries[1]["median"]
        entries.append(M.PERCENT_OF_PEAK.entry(value=M.percent_of_peak(median_rate, peak)))

    return {
        "params": params,
        "metrics": entries,
        "correctness": {
            "passed": all(c.passed for c in checks),
            "checks": [c.to_dict() for c in checks],
        },
        "measurement": m.to_dict(cfg),
        "work": {
            "flops": flops,
            "bytes": nbytes,
            "arithmetic_intensity": flops / nbytes if nbytes else None,
            "peak_tflops": peak,
        },
    }


def _tensors(
    adapter: Adapter, bench: Any, params: dict[str, Any], inputs: dict[str, np.ndarray], dtype: str
) -> dict[str, Any]:
    wants_grad = set(bench.grad_pairs(params).values())
    return {
        k: adapter.from_numpy(v, dtype, requires_grad=k in wants_grad) for k, v in inputs.items()
    }


def _gradchecks(
    bench: Any, adapter: Adapter, params: dict[str, Any], dtype: str, seed: int, tol: M.Tolerance
) -> list[M.Check]:
    """Central finite differences of the float64 forward against the adapter's backward, on a
    small parameter set of the same kind (directional: <grad, v> against d/dt <dy, f(x+tv)>)."""
    pairs = bench.grad_pairs(params)
    forward = bench.forward_fn(params)
    if not pairs or forward is None:
        return []
    small = bench.validate(bench.gradcheck_params(params))
    rng = np.random.default_rng(seed + 1)
    inputs = {k: quantize(v, dtype) for k, v in bench.inputs(small, rng).items()}
    outputs = bench.build(adapter, small, _tensors(adapter, bench, small, inputs, dtype))()
    adapter.synchronize()
    got = {k: adapter.to_numpy(v) for k, v in outputs.items()}
    forward = bench.forward_fn(small)
    cot = inputs[bench.cotangent]
    primals = {k: v for k, v in inputs.items() if k != bench.cotangent}
    checks = []
    for out_name, in_name in pairs.items():

        def f(z: np.ndarray, in_name: str = in_name) -> np.ndarray:
            return forward(**{**primals, in_name: z})

        err = M.directional_gradcheck(
            f, primals[in_name], cot, got[out_name], n_directions=3, seed=seed
        )
        checks.append(M.Check(f"{out_name}.central_fd_directional_rel_error", err, tol.max_rel))
    return checks
