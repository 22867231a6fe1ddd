"""The operator-benchmark contract (the :class:`~suite.benchmark.Benchmark` of the operator
level) and how every operator task runs: seeded inputs, a float64 reference, correctness
(outputs and finite-difference gradients), timing, and the FLOP and byte counts.
Framework-neutral: NumPy and the adapter words only."""

from __future__ import annotations

import functools
import json
import time
from abc import abstractmethod
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import numpy as np

from suite import metrics as M
from suite.adapters.base import Adapter, Tensor
from suite.benchmark import Benchmark, Context, Field, Params, Result, SizeSpec
from suite.dtypes import ITEMSIZE, quantize
from suite.levels.operator.grad import backward_build, is_backward
from suite.measure import MeasureConfig, measure, timer_check

__all__ = ["RANDOM_SIGN_TERMS_MAX_ELEMENTS", "Field", "OperatorBenchmark", "Params", "SizeSpec"]

#: the last parameter set's float64 inputs (OperatorBenchmark.seeded_inputs)
_INPUTS: dict[tuple[str, str, int], dict[str, np.ndarray]] = {}


def _own(x: np.ndarray) -> np.ndarray:
    """A writable array of the task's own (fp64's rounding returns the shared input itself)."""
    return x if x.flags.writeable else x.copy()


#: outputs with more elements than this get no ``reference_terms`` for sums of random signs
#: (GEMM, convolution): over N elements ||ref|| is within about sqrt(2/N) of ||terms|| (each
#: element's square has the terms' sum of squares as its mean), so the terms change nothing
#: there and would cost a second float64 product
RANDOM_SIGN_TERMS_MAX_ELEMENTS = 4096

#: what central differences with metrics.gradcheck's step h = 1e-4 can resolve: their error
#: is O(h^2) times the function's third derivative, about 1e-8 relative for a smooth
#: non-linear operator (softmax, GELU, attention); a linear one (GEMM, convolution) is exact.
#: The finite-difference check's tolerance is never below it (fp64's own is 1e-10).
FD_RESOLUTION = 1e-7


class OperatorBenchmark(Benchmark):
    """A framework-neutral operator benchmark.

    Subclasses declare ``name``, ``fields`` and ``words`` (the adapter words ``build`` uses),
    the ``quick`` and ``full`` sizes, and implement inputs, reference, build, flops, bytes.
    """

    level: ClassVar[str] = "operator"
    name: ClassVar[str]
    summary: ClassVar[str]
    fields: ClassVar[dict[str, Field]]
    words: ClassVar[frozenset[str]]
    #: the input holding the cotangent (output gradient) of a backward benchmark
    cotangent: ClassVar[str] = "dy"
    #: multiplies the dtype tolerance (operators known to be ill-conditioned)
    tolerance_scale: ClassVar[float] = 1.0

    # -- parameters --------------------------------------------------------------------------
    @abstractmethod
    def sizes(self, size_set: str) -> list[SizeSpec]:
        """Parameter sets for ``size_set`` ("quick" or "full")."""

    def reduction_length(self, params: Params, output: str) -> int:
        """The longest sum that one element of ``output`` accumulates (a GEMM's k): its
        tolerance grows with it (``metrics.tolerance_for``). 1: no long sum."""
        return 1

    def check(self, params: Params) -> None:
        """Cross-field checks (e.g. a kernel larger than the padded input)."""
        return None

    # -- data --------------------------------------------------------------------------------
    @abstractmethod
    def inputs(self, params: Params, rng: np.random.Generator) -> dict[str, np.ndarray]:
        """Seeded float64 inputs (never zeros), before rounding to the task dtype."""

    @abstractmethod
    def reference(self, params: Params, x: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Float64 outputs computed with NumPy from the (already quantised) inputs."""

    def reference_terms(self, params: Params, x: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """For an output that is a sum whose terms can cancel: per element, the size of those
        terms (their root sum of squares; float64, the output's shape). Its checks are then
        relative to it, not to the output's value (``metrics.correctness``): a result that
        rounding of its terms alone can change is not judged against its own tiny size.
        Default: none."""
        return {}

    @abstractmethod
    def build(
        self, adapter: Adapter, params: Params, t: Mapping[str, Tensor]
    ) -> Callable[[], dict[str, Tensor]]:
        """The timed callable: native work only, returning the outputs to check."""

    def call_build(
        self,
        adapter: Adapter,
        params: Params,
        t: Mapping[str, Tensor],
        op: Callable[..., Tensor],
        inputs: tuple[str, ...],
        output: str,
        **options: Any,
    ) -> Callable[[], dict[str, Tensor]]:
        """``build`` of an operator that is one call ``op(*inputs, **options)``: forward, the
        timed callable returns ``{output: ...}``; backward, it returns the gradients
        ``grad_pairs`` of that call through ``adapter.vjp`` with the cotangent."""
        if is_backward(params):

            def forward(**primals: Tensor) -> Tensor:
                return op(*(primals[name] for name in inputs), **options)

            return backward_build(adapter, forward, t, self.grad_pairs(params), self.cotangent)
        args = [t[name] for name in inputs]
        if not options:
            return lambda: {output: op(*args)}
        return lambda: {output: op(*args, **options)}

    def needs(self, params: Params) -> frozenset[str]:
        """The adapter words this parameter set uses (``words`` plus e.g. ``vjp`` for backward)."""
        return self.words | ({"vjp"} if self.grad_pairs(params) else frozenset())

    def gradcheck_params(self, params: Params) -> Params:
        """A small parameter set of the same kind for the finite-difference gradient check
        (gradients are checked on small shapes; the task's own size is checked
        against the analytic float64 reference)."""
        return params

    def grad_pairs(self, params: Params) -> dict[str, str]:
        """For a backward benchmark: output name -> the input it is the gradient of."""
        return {}

    def forward_fn(self, params: Params) -> Callable[..., np.ndarray] | None:
        """For a backward benchmark: the float64 forward ``f(**inputs)`` whose vector-Jacobian
        products the outputs are, for the central-finite-difference gradient check."""
        return None

    # -- work --------------------------------------------------------------------------------
    @abstractmethod
    def flops(self, params: Params) -> float:
        """Floating-point operations of one call (FMA = 2)."""

    @abstractmethod
    def bytes_moved(self, params: Params, itemsize: int) -> float:
        """Fewest bytes one call must move: each input read once, each output written once."""

    # -- the worker --------------------------------------------------------------------------
    def run(self, ctx: Context) -> Result:
        """Inputs, reference, correctness (a separate run from the timing, as Deep500 does),
        timing, metrics."""
        adapter, params, dtype = ctx.adapter, ctx.params, ctx.dtype
        clock = time.perf_counter
        t0 = clock()
        # Inputs: seeded, generated once outside any timed region, rounded to the dtype; the
        # reference sees exactly the values the framework sees.
        inputs = {
            k: _own(quantize(v, dtype)) for k, v in self.seeded_inputs(params, ctx.seed).items()
        }
        fn = self.build(adapter, params, self._tensors(adapter, params, inputs, dtype))
        t_inputs = clock()

        outputs = fn()
        adapter.synchronize()
        got = {k: adapter.to_numpy(v) for k, v in outputs.items()}
        reference = self.reference(params, inputs)
        terms = self.reference_terms(params, inputs)
        tol = M.tolerance_for(dtype, self.tolerance_scale)
        checks: list[M.Check] = []
        for name, ref in reference.items():
            length = self.reduction_length(params, name)
            checks.extend(
                M.compare(
                    name,
                    got[name],
                    ref,
                    M.tolerance_for(dtype, self.tolerance_scale, length),
                    terms=terms.get(name),
                )
            )
        checks.extend(self._gradchecks(adapter, params, dtype, ctx.seed, tol))
        # Nothing of the correctness run stays alive while the timing runs, as nothing does
        # around a bare loop: its outputs would pin buffers the allocator could reuse.
        del outputs, got, reference, terms

        t_checked = clock()
        cfg = MeasureConfig(**ctx.measure)
        timer: list[M.Check | None] = []
        timer_s: list[float] = []

        def check_the_timer(inner: int) -> None:
            """The timer check, run as part of the warm-up (``measure``'s prelude): it calls
            the operator timed and materialised, work a warm-up does anyway."""
            t = clock()
            timer.append(
                timer_check(lambda n: adapter.time(fn, n), fn,
                            lambda out: [adapter.to_numpy(v) for v in out.values()], inner,
                            ready=lambda out: {k: adapter.from_numpy(adapter.to_numpy(v), dtype)
                                               for k, v in out.items()})
            )  # fmt: skip
            timer_s.append(clock() - t)

        m = measure(
            lambda n: adapter.time(fn, n), cfg, region=ctx.timed_region, prelude=check_the_timer
        )
        if timer and timer[0] is not None:
            checks.append(timer[0])
        phases = {
            "inputs": t_inputs - t0,
            "correctness": t_checked - t_inputs,
            "warmup": m.warmup_s - sum(timer_s),  # without the timer check it includes
            "calibration": m.calibration_s,
            "sampling": m.elapsed_s,
            "timer_check": sum(timer_s),
        }

        flops = self.flops(params)
        nbytes = self.bytes_moved(params, ITEMSIZE[dtype])
        entries = [
            M.TIME.entry(m.samples),
            M.rate_entry(M.FLOP_RATE, m.samples, flops, 1e12),
            M.rate_entry(M.BANDWIDTH, m.samples, nbytes, 1e9),
        ]
        peak = ctx.device.peak_tflops.get(dtype)
        if peak:
            median_rate = entries[1]["median"]
            entries.append(M.PERCENT_OF_PEAK.entry(value=M.percent_of_peak(median_rate, peak)))
        return Result(
            metrics=entries,
            checks=checks,
            measurement={**m.to_dict(cfg), "phases_s": phases},
            work={
                "flops": flops,
                "bytes": nbytes,
                "arithmetic_intensity": flops / nbytes if nbytes else None,
                "peak_tflops": peak,
            },
        )

    def seeded_inputs(self, params: Params, seed: int) -> dict[str, np.ndarray]:
        """:meth:`inputs` from ``default_rng(seed)``, made once per worker for a parameter set
        and seed (read-only) and shared by the tasks of a session that differ only in dtype
        (the quick level times each operator in fp32, bf16 and fp16: the same float64 values,
        each rounded to its dtype)."""
        key = (self.name, json.dumps(params, sort_keys=True, default=str), seed)
        hit = _INPUTS.get(key)
        if hit is None:
            hit = self.inputs(params, np.random.default_rng(seed))
            for v in hit.values():
                v.setflags(write=False)
            _INPUTS.clear()  # one parameter set at a time: a sweep's next point replaces it
            _INPUTS[key] = hit
        return hit

    def _tensors(
        self, adapter: Adapter, params: Params, inputs: dict[str, np.ndarray], dtype: str
    ) -> dict[str, Any]:
        wants_grad = set(self.grad_pairs(params).values())
        return {
            k: adapter.from_numpy(v, dtype, requires_grad=k in wants_grad)
            for k, v in inputs.items()
        }

    def _gradchecks(
        self, adapter: Adapter, params: Params, dtype: str, seed: int, tol: M.Tolerance
    ) -> list[M.Check]:
        """Central finite differences of the float64 forward against the adapter's backward,
        on a small parameter set of the same kind (directional: <grad, v> against
        d/dt <dy, f(x+tv)>)."""
        pairs = self.grad_pairs(params)
        forward = self.forward_fn(params)
        if not pairs or forward is None:
            return []
        small = self.validate(self.gradcheck_params(params))
        rng = np.random.default_rng(seed + 1)
        inputs = {k: quantize(v, dtype) for k, v in self.inputs(small, rng).items()}
        outputs = self.build(adapter, small, self._tensors(adapter, small, inputs, dtype))()
        adapter.synchronize()
        got = {k: adapter.to_numpy(v) for k, v in outputs.items()}
        forward = self.forward_fn(small)
        assert forward is not None
        cot = inputs[self.cotangent]
        primals = {k: v for k, v in inputs.items() if k != self.cotangent}
        terms = self.reference_terms(small, inputs)
        checks = []
        for out_name, in_name in pairs.items():

            def f(z: np.ndarray, in_name: str = in_name) -> np.ndarray:
                return forward(**{**primals, in_name: z})

            limit = max(tol.max_rel, FD_RESOLUTION)
            fd = functools.partial(M.directional_gradcheck, f, primals[in_name], cot,
                                   got[out_name], n_directions=3, seed=seed,
                                   terms=terms.get(out_name))  # fmt: skip
            err = fd(tolerance=limit)
            detail = None
            if err > limit and out_name in terms and (of_terms := fd()) <= limit:
                detail = {
                    M.correctness.NOT_DETERMINED: M.correctness.not_determined(
                        out_name, None, limit, of_terms
                    )
                }
            checks.append(
                M.Check(f"{out_name}.central_fd_directional_rel_error", err, limit, detail=detail)
            )
        return checks
