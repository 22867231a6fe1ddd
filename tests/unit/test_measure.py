"""suite.measure.measure with a fake timed callable and a fake clock: deterministic, no sleeping."""

from __future__ import annotations

import math
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest

import suite.measure
from suite import schemas
from suite.measure import MeasureConfig, Measurement, measure


class FakeDevice:
    """``time_n`` whose calls each take ``per_call()`` seconds of a fake clock."""

    def __init__(self, per_call: Callable[[], float]) -> None:
        self.now = 1000.0
        self.per_call = per_call
        self.calls: list[int] = []
        self.durations: list[float] = []

    def perf_counter(self) -> float:
        return self.now

    def time_n(self, n: int) -> float:
        self.calls.append(n)
        dt = sum(self.per_call() for _ in range(n)) if n <= 64 else n * self.per_call()
        self.now += dt
        self.durations.append(dt)
        return dt


Factory = Callable[[Callable[[], float]], FakeDevice]


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Factory:
    def make(per_call: Callable[[], float]) -> FakeDevice:
        dev = FakeDevice(per_call)
        monkeypatch.setattr(
            suite.measure, "time", types.SimpleNamespace(perf_counter=dev.perf_counter)
        )
        return dev

    return make


def _noisy(seed: int, base: float = 1e-4, sigma: float = 0.5) -> Callable[[], float]:
    rng = np.random.default_rng(seed)
    return lambda: float(base * rng.lognormal(0.0, sigma))


def _cfg(**kw: float) -> MeasureConfig:
    base: dict[str, float] = {
        "warmup_iters": 3,
        "warmup_s": 0.0,
        "min_samples": 10,
        "max_samples": 1000,
        "time_budget_s": 100.0,
        "target_ci_rel": 0.02,
        "min_sample_s": 0.002,
    }
    base.update(kw)
    return MeasureConfig(**base)  # type: ignore[arg-type]


def _sampling_calls(cfg: MeasureConfig, m: Measurement) -> list[tuple[int, bool]]:
    """The sampling phase's calls as (n, is a sample): ``inner`` per sample, and one untimed
    re-warm call (n=1) after each CI check (at ``min_samples``, then every ~5% more samples
    but at least every ``CHECK_MIN_STEP``) that did not end the sampling."""
    calls, next_check = [], cfg.min_samples
    for n in range(1, len(m.samples) + 1):
        calls.append((m.inner, True))
        if n >= next_check:
            next_check = n + max(suite.measure.CHECK_MIN_STEP, n // 20)
            if n < len(m.samples):
                calls.append((1, False))
    return calls


def _check_bookkeeping(dev: FakeDevice, m: Measurement, cfg: MeasureConfig | None = None) -> None:
    # every call is accounted for: warm-up (n=1), calibration, then samples at n = inner with
    # a re-warm call (n=1) after each CI check that did not stop the sampling
    sampling = _sampling_calls(cfg or _cfg(), m)
    before = m.warmup_iters + len(m.calibration)
    assert len(dev.calls) == before + len(sampling)
    assert dev.calls[: m.warmup_iters] == [1] * m.warmup_iters
    assert [n for n, _ in m.calibration] == dev.calls[m.warmup_iters : before]
    assert dev.calls[before:] == [n for n, _ in sampling]
    assert m.rewarm_calls == len(sampling) - len(m.samples)
    assert m.sampled_calls == len(m.samples) * m.inner + m.rewarm_calls
    assert m.calls == sum(dev.calls)
    # each sample is its own call's time per call, never a re-warm call's
    timed = [d for (_, sample), d in zip(sampling, dev.durations[before:], strict=True) if sample]
    assert m.samples == pytest.approx([d / m.inner for d in timed], rel=1e-12)


def test_constant_durations_stop_at_min_samples_with_ci_met(fake: Factory) -> None:
    dev = fake(lambda: 1e-4)
    cfg = _cfg(min_samples=10)
    m = measure(dev.time_n, cfg)
    assert m.stop_reason == "ci_target_met"
    assert len(m.samples) == 10  # not before min_samples, and right at it
    assert m.samples == pytest.approx([1e-4] * 10, rel=1e-12)  # per-call times
    assert m.ci_rel_width == pytest.approx(0.0, abs=1e-12)
    assert m.warmup_iters == 3
    # calibrated: one sample lasts at least min_sample_s
    assert m.inner * 1e-4 >= cfg.min_sample_s
    assert m.calibration[-1][1] >= cfg.min_sample_s
    assert all(t < cfg.min_sample_s for _, t in m.calibration[:-1])
    _check_bookkeeping(dev, m)


def test_min_time_keeps_sampling_after_the_ci_target_is_met(fake: Factory) -> None:
    # constant durations meet the CI target at 10 samples; min_time_s = 2 s holds it off
    dev = fake(lambda: 1e-4)
    start = dev.now
    m = measure(dev.time_n, _cfg(min_samples=10, min_time_s=2.0))
    assert m.stop_reason == "ci_target_met"
    assert m.elapsed_s >= 2.0 and dev.now - start >= 2.0  # the sampling phase alone
    # ... and stops at the first check after it: checks come every ~5% more samples
    assert len(m.samples) > 10 and m.elapsed_s < 2.0 * 1.05 + 0.01
    assert m.to_dict(_cfg(min_time_s=2.0))["min_time_s"] == 2.0
    _check_bookkeeping(dev, m)
    # it raises a shorter time budget (--quick's 1 s on a GPU); max_samples still stops it
    for per_call in (lambda: 1e-4, _noisy(3)):
        m = measure(fake(per_call).time_n, _cfg(min_time_s=2.0, time_budget_s=1.0))
        assert m.stop_reason == "time_budget" and 2.0 <= m.elapsed_s < 2.1
    capped = measure(fake(lambda: 1e-4).time_n, _cfg(min_time_s=50.0, max_samples=100))
    assert capped.stop_reason == "max_samples"


def test_region_wraps_the_sampling_phase_only(fake: Factory) -> None:
    dev = fake(lambda: 1e-4)
    seen: dict[str, Any] = {}

    @contextmanager
    def region() -> Iterator[None]:
        seen["calls_at_entry"], seen["t0"] = len(dev.calls), dev.now
        yield
        seen["calls_at_exit"], seen["t1"] = len(dev.calls), dev.now

    m = measure(dev.time_n, _cfg(warmup_s=0.5), region=region)
    # entered after warm-up and calibration, left after the last sample
    assert seen["calls_at_entry"] == m.warmup_iters + len(m.calibration)
    assert seen["calls_at_exit"] == len(dev.calls)
    assert seen["t1"] - seen["t0"] == pytest.approx(m.elapsed_s)
    assert m.sampled_calls == len(m.samples) * m.inner < m.calls
    assert m.to_dict(_cfg())["sampled_calls"] == m.sampled_calls


@pytest.mark.parametrize("per_call", [1e-7, 3e-5, 1e-3, 0.01])
def test_calibration_reaches_min_sample_s(fake: Factory, per_call: float) -> None:
    dev = fake(lambda: per_call)
    cfg = _cfg(min_sample_s=0.002, min_samples=3)
    m = measure(dev.time_n, cfg)
    assert m.inner >= 1
    assert m.inner * per_call >= cfg.min_sample_s * (1 - 1e-12)
    inners = [n for n, _ in m.calibration]
    assert inners[0] == 1
    assert inners == sorted(inners) and len(set(inners)) == len(inners)  # strictly growing
    if per_call >= cfg.min_sample_s:
        assert m.inner == 1 and len(m.calibration) == 1
    else:
        # not wildly over-calibrated: within 2x of the need, after the 1.2 safety margin
        assert m.inner * per_call <= 2.4 * cfg.min_sample_s
    _check_bookkeeping(dev, m)


def test_calibration_capped_by_max_inner(fake: Factory) -> None:
    dev = fake(lambda: 1e-9)
    cfg = MeasureConfig(warmup_iters=1, warmup_s=0.0, min_samples=3, max_inner=64)
    m = measure(dev.time_n, cfg)
    assert m.inner == 64
    assert m.calibration[-1][0] == 64
    assert max(dev.calls) == 64


def test_noisy_with_small_budget_stops_on_time_budget(fake: Factory) -> None:
    dev = fake(_noisy(1))
    cfg = _cfg(time_budget_s=0.05, target_ci_rel=1e-6, min_samples=5)
    m = measure(dev.time_n, cfg)
    assert m.stop_reason == "time_budget"
    assert 3 <= len(m.samples) < cfg.max_samples
    # it stops at the first sample that crosses the budget; the sampling phase's time is its
    # samples' and its re-warm calls' (one after each CI check), all on the clock
    phase = dev.durations[m.warmup_iters + len(m.calibration) :]
    assert sum(phase) >= cfg.time_budget_s
    assert sum(phase[:-1]) < cfg.time_budget_s
    assert m.elapsed_s == pytest.approx(sum(phase), rel=1e-9)
    assert m.rewarm_calls > 0
    assert math.isfinite(m.ci_rel_width) and m.ci_rel_width > cfg.target_ci_rel
    _check_bookkeeping(dev, m, cfg)


def test_time_budget_never_stops_before_three_samples(fake: Factory) -> None:
    dev = fake(lambda: 0.5)  # each sample alone overruns the budget
    cfg = _cfg(time_budget_s=0.01, min_samples=10)
    m = measure(dev.time_n, cfg)
    assert m.stop_reason == "time_budget"
    assert len(m.samples) == 3


def test_max_samples_respected(fake: Factory) -> None:
    dev = fake(_noisy(2))
    cfg = _cfg(max_samples=15, min_samples=5, target_ci_rel=1e-6, time_budget_s=1e9)
    m = measure(dev.time_n, cfg)
    assert m.stop_reason == "max_samples"
    assert len(m.samples) == 15
    # CI checks at 5 and 13 (CHECK_MIN_STEP = 8 apart): a re-warm call after each
    assert suite.measure.CHECK_MIN_STEP == 8
    assert m.rewarm_calls == 2
    _check_bookkeeping(dev, m, cfg)


def test_ci_target_met_on_mildly_noisy_data(fake: Factory) -> None:
    dev = fake(_noisy(3, sigma=0.01))
    cfg = _cfg(target_ci_rel=0.02, min_samples=10)
    m = measure(dev.time_n, cfg)
    assert m.stop_reason == "ci_target_met"
    assert m.ci_rel_width <= cfg.target_ci_rel
    assert len(m.samples) >= cfg.min_samples


def test_warmup_runs_at_least_warmup_iters(fake: Factory) -> None:
    dev = fake(lambda: 1e-4)
    m = measure(dev.time_n, _cfg(warmup_iters=7, warmup_s=0.0, min_samples=3))
    assert m.warmup_iters == 7
    _check_bookkeeping(dev, m)


def test_warmup_also_lasts_warmup_s(fake: Factory) -> None:
    dev = fake(lambda: 1e-3)
    m = measure(dev.time_n, _cfg(warmup_iters=2, warmup_s=0.05, min_samples=3))
    # 0.05 s of 1 ms calls: about 50 of them, never fewer than warmup_iters
    assert 49 <= m.warmup_iters <= 51
    _check_bookkeeping(dev, m)


def test_measurement_to_dict_validates_in_a_record(fake: Factory) -> None:
    dev = fake(lambda: 1e-4)
    cfg = _cfg()
    d = measure(dev.time_n, cfg).to_dict(cfg)
    assert d["inner_repeats"] >= 1 and d["samples"] == 10
    assert d["stop_reason"] == "ci_target_met"
    assert d["target_ci_rel"] == cfg.target_ci_rel and d["time_budget_s"] == cfg.time_budget_s
    # validate it as the measurement of an otherwise minimal record
    from tests.unit.test_schemas import ok_record

    rec = ok_record()
    rec["measurement"] = d
    schemas.validate("result", rec)


def test_measurement_to_dict_infinite_ci_is_null() -> None:
    m = Measurement(
        samples=[1.0],
        inner=1,
        warmup_iters=0,
        stop_reason="max_samples",
        elapsed_s=1.0,
        ci_rel_width=math.inf,
    )
    assert m.to_dict(MeasureConfig())["ci_rel_width"] is None


def test_real_clock_with_instant_fake_stops_at_max_samples() -> None:
    # The real clock: a fake time_n returning noisy durations instantly, no warm-up time.
    rng = np.random.default_rng(4)
    calls = 0

    def time_n(n: int) -> float:
        nonlocal calls
        calls += 1
        return float(n * 1e-2 * rng.lognormal(0.0, 0.5))

    cfg = MeasureConfig(
        warmup_iters=1,
        warmup_s=0.0,
        min_samples=5,
        max_samples=200,
        time_budget_s=1e9,
        target_ci_rel=1e-9,
    )
    m = measure(time_n, cfg)
    assert m.stop_reason == "max_samples"
    assert len(m.samples) == 200
    assert m.inner == 1  # 10 ms calls already exceed min_sample_s
    assert m.rewarm_calls == len(_sampling_calls(cfg, m)) - 200 > 0
    assert calls == 1 + 1 + 200 + m.rewarm_calls


# -- the run-time timer check -----------------------------------------------------------------
def _gemm_record(adapter_cls: type) -> dict[str, Any]:
    from suite.levels import execute

    adapter = adapter_cls()
    info = adapter.setup("cpu")
    task = {
        "benchmark": "gemm", "params": {"m": 512, "n": 512, "k": 512}, "dtype": "fp32",
        "seed": 0, "measure": {"warmup_iters": 1, "min_samples": 5, "time_budget_s": 0.3},
    }  # fmt: skip
    result: dict[str, Any] = execute(task, adapter, info)
    return result


def test_a_timer_that_does_not_wait_fails_the_record() -> None:
    """What the kit catches, `dlsuite run` catches too: a time() that reports the launch of
    asynchronous work, not the work, fails its record's timer check."""
    import time as clock

    from suite.adapters.numpy.adapter import NumPyAdapter
    from suite.measure import TIMER_CHECK_MAX_RATIO

    class LaunchOnly(NumPyAdapter):
        def time(self, fn: Any, n: int) -> float:  # returns before "the device" is done
            t0 = clock.perf_counter()
            for _ in range(n):
                fn()
            return (clock.perf_counter() - t0) / 200  # as a GPU launch of ms of work

    # the honest timer passes (about 1x on a quiet machine; 7x was seen in CI's oversubscribed
    # run, where a multithreaded BLAS's spinning threads slow the materialised side), the
    # lying one reads its factor on top of whatever the honest one reads
    honest = _gemm_record(NumPyAdapter)
    (check,) = [c for c in honest["correctness"]["checks"] if c["name"].startswith("timer_")]
    assert check["passed"], check
    lying = _gemm_record(LaunchOnly)
    (check,) = [c for c in lying["correctness"]["checks"] if c["name"].startswith("timer_")]
    assert not check["passed"] and check["error"] > TIMER_CHECK_MAX_RATIO, check
    assert not lying["correctness"]["passed"]


def test_timer_check_declines_calls_too_short_to_tell() -> None:
    from suite.measure import timer_check

    assert timer_check(lambda n: 1e-6 * n, lambda: None, lambda out: None) is None


def test_timer_check_stays_in_its_budget_when_a_copy_costs_as_much_as_the_call() -> None:
    """k comes from one call and its copy, never from their difference: where copying a ready
    output again costs more than the first call and copy together (tinygrad's fp16 to_numpy
    runs a cast kernel; under load the difference went negative), the check ran 1000-call
    sides instead of about 20 ms (340 s each for one tinygrad attention case)."""
    import time as clock

    from suite.measure import TIMER_CHECK_BUDGET_S, TIMER_CHECK_ROUNDS, timer_check

    calls = 0
    copied: set[int] = set()

    def fn() -> object:
        nonlocal calls
        calls += 1
        clock.sleep(0.001)
        return object()

    def to_host(out: object) -> None:
        clock.sleep(0.004 if id(out) in copied else 0.001)  # a second copy is the slow one
        copied.add(id(out))

    def time_n(n: int) -> float:
        t0 = clock.perf_counter()
        for _ in range(n):
            fn()
        return clock.perf_counter() - t0

    t0 = clock.perf_counter()
    timer_check(time_n, fn, to_host)
    elapsed = clock.perf_counter() - t0
    # at most ceil(budget / 2 ms) calls a side, two sides, three pairs, three rounds, plus one
    per_side = math.ceil(TIMER_CHECK_BUDGET_S / 0.002)
    assert calls <= 1 + TIMER_CHECK_ROUNDS * 3 * 2 * per_side, calls
    assert elapsed < 15, elapsed


def test_timer_check_catches_a_lazy_timer_whose_copy_does_not_keep_the_work() -> None:
    """A lazy framework whose copy to the host computes the output without keeping it
    (tinygrad's ``Tensor.numpy()``): copying the output again repeats the work, so the copies
    alone must copy a computed tensor (``ready``), or the difference is zero and a time() that
    skips the work was not seen (a tinygrad adapter without realize: 5 of 6 records had no
    timer check, the sixth passed)."""
    import time as clock

    from suite.measure import TIMER_CHECK_MAX_RATIO, timer_check

    class Lazy:
        def compute(self) -> float:
            clock.sleep(0.002)  # the work, done again on every copy
            return 1.0

    class Computed:
        def compute(self) -> float:
            return 1.0  # the copy alone

    def to_host(out: Lazy | Computed) -> float:
        return out.compute()

    def skips_the_work(n: int) -> float:  # a time() without realize: builds graphs only
        t0 = clock.perf_counter()
        for _ in range(n):
            Lazy()
        return clock.perf_counter() - t0 + 1e-7 * n

    def honest(n: int) -> float:
        t0 = clock.perf_counter()
        for _ in range(n):
            Lazy().compute()
        return clock.perf_counter() - t0

    check = timer_check(skips_the_work, Lazy, to_host, ready=lambda out: Computed())
    assert check is not None and not check.passed and check.error > 5 * TIMER_CHECK_MAX_RATIO
    check = timer_check(honest, Lazy, to_host, ready=lambda out: Computed())
    assert check is not None and check.passed, check
    # without ready: the copies alone repeat the work, and nothing is seen
    assert timer_check(skips_the_work, Lazy, to_host) is None


def test_timer_check_is_not_fooled_by_a_delay_during_the_copies() -> None:
    """A delay only ever adds time, so each side's minimum is its least disturbed reading;
    the minimum of the pairs' differences was not: a pair whose copies-alone phase was
    preempted had a small difference, the minimum took it, and a timer reporting a fiftieth
    of the work read about 1x on a loaded machine. Here one copies-alone phase in each round
    is delayed by almost the whole work."""
    import time as clock

    from suite.measure import TIMER_CHECK_MAX_RATIO, timer_check

    call_s = 1e-3
    phases = {"copies": 0}

    class Done:  # an output the check's ``ready`` marks as computed
        pass

    def fn() -> object:
        clock.sleep(call_s)
        return object()

    def to_host(out: object) -> None:
        if isinstance(out, Done) and out.delay:  # type: ignore[attr-defined]
            out.delay = False  # type: ignore[attr-defined]
            clock.sleep(0.95 * out.k * call_s)  # type: ignore[attr-defined]

    def ready(out: object) -> Done:
        phases["copies"] += 1
        done = Done()
        done.delay = phases["copies"] % 3 == 2  # type: ignore[attr-defined]
        done.k = k_seen[-1] if k_seen else 1  # type: ignore[attr-defined]
        return done

    k_seen: list[int] = []

    def lying_time(k: int) -> float:  # reports a two-hundredth of the work
        k_seen.append(k)
        return k * call_s / 200

    check = timer_check(lying_time, fn, to_host, ready=ready)
    assert check is not None
    assert not check.passed and check.error > TIMER_CHECK_MAX_RATIO, check


class _Computed:
    """An output the timer check's ``ready`` marks as computed: its copy costs nothing."""


def _call_and_timer(
    call_s: float, lies: bool
) -> tuple[Callable[[], object], Callable[[int], float]]:
    """A call sleeping ``call_s`` and a timer of ``k`` calls that reports all of them, or a
    two-hundredth (``lies``)."""
    import time as clock

    def fn() -> object:
        clock.sleep(call_s)
        return object()

    def time_n(k: int) -> float:
        t0 = clock.perf_counter()
        for _ in range(k):
            fn()
        return (clock.perf_counter() - t0) / (200 if lies else 1)

    return fn, time_n


@pytest.mark.parametrize("lies", [False, True])
def test_timer_check_confirms_a_failure_before_the_verdict(lies: bool) -> None:
    """Every materialised reading of the first rounds delayed, as when the process is starved
    (in CI, beside an Apptainer build and the framework kits, an honest PyTorch batch norm read
    52.7 after three rounds): the honest timer passes once a pair runs undisturbed; the one
    reporting a two-hundredth of the work still fails after the same confirmation."""
    import time as clock

    from suite.measure import (
        TIMER_CHECK_CLEAR_RATIO,
        TIMER_CHECK_MAX_RATIO,
        TIMER_CHECK_ROUNDS,
        timer_check,
    )  # fmt: skip

    call_s = 1e-3
    readings = {"materialised": 0}
    starved_readings = 1 + 3 * TIMER_CHECK_ROUNDS  # k's own reading, then three pairs a round

    fn, time_n = _call_and_timer(call_s, lies)

    def to_host(out: object) -> None:
        if not isinstance(out, _Computed) and readings["materialised"] < starved_readings:
            clock.sleep(50 * call_s)  # the process waits for a core

    def ready(out: object) -> _Computed:
        readings["materialised"] += 1
        return _Computed()

    check = timer_check(time_n, fn, to_host, ready=ready)
    assert check is not None
    assert readings["materialised"] > starved_readings  # it measured past the starved rounds
    if lies:
        assert not check.passed and check.error > TIMER_CHECK_MAX_RATIO, check
    else:
        assert check.passed and check.error <= TIMER_CHECK_CLEAR_RATIO, check


@pytest.mark.parametrize("case", ["honest_starved", "honest_wait_unknown", "lying_starved"])
def test_timer_check_waits_out_a_starved_process(
    case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every materialised reading delayed for longer than the confirmation lasts, the thread
    waiting for a CPU through each (the run delay ``cpu_wait`` reads): the honest timer passes
    because the confirmation goes on while the least reading was starved; where the wait is not
    known, the same delays fail it after TIMER_CHECK_CONFIRM_S, as before; a timer reporting a
    two-hundredth of the work fails after TIMER_CHECK_STARVED_S, its detail saying starved."""
    import time as clock

    from suite.measure import TIMER_CHECK_MAX_RATIO, TIMER_CHECK_STARVED_SHARE, timer_check
    from suite.summary import starved_suffix

    monkeypatch.setattr(suite.measure, "TIMER_CHECK_CONFIRM_S", 0.3)
    monkeypatch.setattr(suite.measure, "TIMER_CHECK_STARVED_S", 2.0)
    call_s = 1e-3  # a reading: one call, then 60 of it waiting (k = 1; three rounds 0.6 s)
    starved_for = 1.4  # past the rounds and the confirmation, inside the starved one
    starved_until = clock.perf_counter() + starved_for
    waited = [0.0]

    fn, time_n = _call_and_timer(call_s, lies=case == "lying_starved")

    def to_host(out: object) -> None:
        if not isinstance(out, _Computed) and (
            case == "lying_starved" or clock.perf_counter() < starved_until
        ):
            clock.sleep(60 * call_s)  # the process waits for a core ...
            waited[0] += 60 * call_s  # ... and the scheduler counts it

    def wait() -> float | None:  # the thread's run delay, unknown in one case
        return None if case == "honest_wait_unknown" else waited[0]

    t0 = clock.perf_counter()
    check = timer_check(time_n, fn, to_host, ready=lambda out: _Computed(), cpu_wait=wait)
    took = clock.perf_counter() - t0
    assert check is not None
    if case == "honest_starved":
        assert check.passed and check.detail is None, check
        assert took > starved_for  # it measured past the starvation
    elif case == "honest_wait_unknown":
        assert not check.passed and took < starved_for, (check, took)
        assert check.detail is not None and "cpu_wait_share" not in check.detail
    else:
        assert not check.passed and check.error > TIMER_CHECK_MAX_RATIO and took >= 2.0, check
        assert check.detail is not None
        assert check.detail["cpu_wait_share"] > TIMER_CHECK_STARVED_SHARE
        assert "starved: waited for a CPU" in starved_suffix(check.to_dict())


def test_thread_cpu_wait_is_the_time_a_runnable_thread_waited_for_a_cpu() -> None:
    """The run delay the timer check reads: this thread and a busy process pinned to one CPU
    share it, so the thread waits for it about half the time; asleep, it does not wait at all.
    (Linux, as CI: elsewhere the reader says None and the check confirms as before.)"""
    import os
    import subprocess
    import sys
    import time as clock

    from suite.measure import thread_cpu_wait_s

    assert sys.platform == "linux" and thread_cpu_wait_s() is not None
    w0 = thread_cpu_wait_s()
    clock.sleep(0.3)
    assert thread_cpu_wait_s() - w0 < 0.05  # asleep is not runnable
    cpu = min(os.sched_getaffinity(0))
    mine = os.sched_getaffinity(0)
    spin = f"import os, time\nos.sched_setaffinity(0, {{{cpu}}})\nt = time.time()\nwhile time.time() - t < 5: pass"
    busy = subprocess.Popen([sys.executable, "-c", spin])
    try:
        os.sched_setaffinity(0, {cpu})
        clock.sleep(0.5)  # the busy process is up and spinning
        w0, t0 = thread_cpu_wait_s(), clock.perf_counter()
        while clock.perf_counter() - t0 < 1.0:
            pass
        share = (thread_cpu_wait_s() - w0) / (clock.perf_counter() - t0)
    finally:
        os.sched_setaffinity(0, mine)
        busy.kill()
        busy.wait()
    assert 0.25 < share < 0.9, share  # about half: two runnable threads on one CPU


def test_a_prelude_is_warm_up_and_sees_the_calibrated_inner(fake: Factory) -> None:
    """The timer check runs as part of the warm-up (``prelude``): after calibration, with its
    calls per sample; its time counts towards ``warmup_s`` (the first warm-up is then only
    ``warmup_iters`` calls), and plain calls follow it before the first sample."""
    dev = fake(lambda: 1e-4)
    seen: list[tuple[int, int]] = []

    def prelude(inner: int) -> None:
        seen.append((inner, len(dev.calls)))
        dev.now += 0.3  # a check lasting longer than the warm-up's floor

    cfg = _cfg(warmup_iters=3, warmup_s=0.2, min_samples=3)
    m = measure(dev.time_n, cfg, prelude=prelude)
    ((inner, calls_before),) = seen
    # 3 warm-up calls, then calibration: 1 call (0.1 ms), 24 calls (2.4 ms >= 2 ms)
    assert (inner, calls_before) == (24, 5)
    assert dev.calls[:3] == [1, 1, 1]  # no 0.2 s of warm-up before calibration
    # after the prelude: a calibration sample at the calibrated inner (it re-warms), no
    # more warm-up (the prelude's 0.3 s covered warmup_s), then the samples
    after = dev.calls[calls_before:]
    assert after[0] == inner and all(n == inner for n in after[1:])
    assert [n for n, _ in m.calibration] == [1, 24, 24]
    assert m.warmup_iters == 3
    assert m.warmup_s >= 0.3  # the prelude is warm-up time


def test_a_short_prelude_is_topped_up_to_warmup_s(fake: Factory) -> None:
    dev = fake(lambda: 1e-3)
    m = measure(dev.time_n, _cfg(warmup_iters=2, warmup_s=0.05, min_samples=3),
                prelude=lambda inner: None)  # fmt: skip
    # 2 calls, calibration (~3 ms) and its check after the prelude, then calls until 50 ms
    # of warm-up in all
    assert 40 <= m.warmup_iters <= 50
    assert m.warmup_s + m.calibration_s >= 0.05


def test_a_prelude_is_refused_with_joint_decisions(fake: Factory) -> None:
    dev = fake(lambda: 1e-4)
    with pytest.raises(ValueError, match="prelude"):
        measure(dev.time_n, _cfg(), agree=lambda v: v, prelude=lambda inner: None)
