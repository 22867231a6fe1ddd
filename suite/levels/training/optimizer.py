"""The ``optimizer`` benchmark: each framework's own optimizer objects, driven with the same
gradients for K steps, checked after every step against a float64 reference of the rule its
documentation states, then timed as the bandwidth-bound kernel it is.

Parameters (one record per implementation the framework has, ``implementation = "all"``):

* ``optimizer``: a suite optimizer (:mod:`suite.optimizers.catalogue`); ``hyper``: its
  hyperparameters in the suite's names, completed with the suite's values (the same in every
  framework);
* ``params``: the parameter set: ``zoo:<network>[:quick|full]`` (a zoo network's trainable
  tensors with the network level's initial values), ``<network>`` (its full size), or
  ``flat:<n>``;
* ``implementation``: ``all`` or one name (``forloop``, ``foreach``, ``fused``, ``xla``, ...);
* ``steps`` K, ``lr_schedule`` (``constant``, or ``halved`` from step K/2 + 1: what separates
  the learning rate inside a momentum buffer from outside it);
* ``gradients``: ``seeded`` (the suite's, identical in every framework:
  :mod:`suite.optimizers.gradients`) or ``network`` (the zoo network's own gradients on seeded
  synthetic batches, from the framework's backward pass through the network words).

The task's dtype is the parameters' dtype: fp32, or bf16/fp16 parameters (with the framework's
fp32 master weights where it offers them, else gradients, parameters and state all in it).

A record: the correctness check (the worst bound ratio over the K steps against the documented
variant: a framework that differs from its own documentation fails it, with the detail), which
variants the implementation follows and its distance from every other framework's variant, the
step time, parameters per second, the bytes the rule must move per step over the step time
against the device's measured memory bandwidth, the optimizer state's bytes per parameter and
peak memory.
"""

from __future__ import annotations

import os
import resource
from typing import Any, ClassVar

import numpy as np

from suite import metrics as M
from suite.adapters.base import Adapter
from suite.adapters.known_bugs import optimizer_key
from suite.adapters.optimizer_words import DocumentedDifference, OptimizerSpec
from suite.benchmark import Benchmark, Context, Field, Params, Result, SizeSpec
from suite.dtypes import ITEMSIZE, quantize
from suite.errors import ConfigError, UnsupportedError
from suite.levels.training.optimizer_check import Tracker
from suite.measure import MeasureConfig, measure, timer_check
from suite.optimizers import catalogue, documented
from suite.optimizers.gradients import (
    HIGH,
    LOW,
    ParameterSet,
    canonical_spec,
    gradients,
    parameter_set,
)

__all__ = ["OptimizerBenchmark"]

#: plain SGD's learning rate for the network gradients: gradient k is read back as
#: (p_{k-1} - p_k) / lr from the network words (momentum 0), as the network level's gradient
#: check does; 0.1 keeps the rounding of that difference below 1e-6 of a typical gradient
NETWORK_GRADIENT_LR = 0.1
PARAMETER_RATE = M.REGISTRY["parameter_rate"]
PERCENT_OF_PEAK_BANDWIDTH = M.REGISTRY["percent_of_peak_bandwidth"]
#: the schedule's factor from step K // 2 + 1 on
HALVED = 0.5
#: the parameter sets of the size sets
QUICK_PARAMS = "zoo:mlp:quick"
QUICK_SWEEP = "flat:1048576"
FULL_PARAMS = ("zoo:mlp:full", "zoo:resnet50:full", "zoo:transformer:quick")
FULL_SWEEP = tuple(f"flat:{1 << k}" for k in (16, 18, 20, 22, 24))
#: the cases that separate the frameworks' rules beyond the suite's values (the learning rate
#: changing under a momentum buffer; weight decay where frameworks give it different meanings)
DIFFERENCE_CASES: tuple[tuple[str, dict[str, Any], str], ...] = (
    ("momentum", {}, "halved"),
    ("nesterov", {}, "halved"),
    ("adam", {"weight_decay": 0.1}, "constant"),
    ("momentum", {"weight_decay": 0.01}, "constant"),
    ("rmsprop", {"momentum": 0.9, "centered": True}, "halved"),
    ("adagrad", {"weight_decay": 0.01}, "constant"),
    ("momentum", {"dampening": 0.5}, "constant"),
)
#: the quick set's cases beyond every optimizer at the suite's values
QUICK_DIFFERENCE_CASES = DIFFERENCE_CASES[:3]


def canonical_params(spec: str, where: str) -> str:
    """``spec`` as ``zoo:<network>:<quick|full>`` or ``flat:<n>`` (a bare zoo network name
    means its full size), checked without building anything."""
    canonical = canonical_spec(spec, where, bare=True)
    kind, _, rest = canonical.partition(":")
    if kind == "zoo":
        from suite.onnx import zoo  # (onnx only for a zoo network)

        try:
            zoo.get(rest.partition(":")[0])
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from None
    return canonical


class OptimizerBenchmark(Benchmark):
    """See the module docstring."""

    level: ClassVar[str] = "training"
    name: ClassVar[str] = "optimizer"
    summary: ClassVar[str] = (
        "each framework's optimizers (every implementation) against a float64 reference of "
        "their documented rule: which variant they follow, step time, % of memory bandwidth"
    )
    words: ClassVar[frozenset[str]] = frozenset({"optimizer"})
    fields: ClassVar[dict[str, Field]] = {
        "optimizer": Field(str, choices=tuple(catalogue.OPTIMIZERS)),
        "hyper": Field(dict, default=None, nullable=True),
        "params": Field(str, default=QUICK_PARAMS),
        "implementation": Field(
            str, default=catalogue.ALL, choices=(catalogue.ALL, *catalogue.IMPLEMENTATIONS)
        ),
        "steps": Field(int, default=10, below=10_001),
        "lr_schedule": Field(str, default="constant", choices=("constant", "halved")),
        "gradients": Field(str, default="seeded", choices=("seeded", "network")),
        # bf16/fp16: "auto" steps an fp32 master copy where the framework offers one (and
        # skips the task where it does not); "none" steps the low-precision parameters,
        # gradients and state as they are
        "master_weights": Field(str, default="auto", choices=("auto", "none")),
    }

    # -- parameters (host and worker) --------------------------------------------------------
    def sizes(self, size_set: str) -> list[SizeSpec]:
        every = [
            SizeSpec({"optimizer": o, "params": QUICK_PARAMS}, f"{o} at the suite's values")
            for o in catalogue.OPTIMIZERS
        ]
        cases = QUICK_DIFFERENCE_CASES if size_set == "quick" else DIFFERENCE_CASES
        differences = [
            SizeSpec(
                {"optimizer": o, "params": QUICK_PARAMS, "hyper": h, "lr_schedule": s},
                f"{o} {h or ''} lr {s}: a case that separates the frameworks' rules".replace(
                    "  ", " "
                ),
            )
            for o, h, s in cases
        ]
        if size_set == "quick":
            sweep = [
                SizeSpec(
                    {"optimizer": "adamw", "params": QUICK_SWEEP, "steps": 5},
                    "a second parameter count for the step-time curve",
                )
            ]
            return every + differences + sweep
        sized = [
            SizeSpec({"optimizer": o, "params": p, "steps": 5}, f"{o} on {p}")
            for p in FULL_PARAMS
            for o in catalogue.OPTIMIZERS
        ]
        sweep = [
            SizeSpec({"optimizer": o, "params": p, "steps": 5}, f"{o} step time against size")
            for p in FULL_SWEEP
            for o in ("momentum", "adamw")
        ]
        return every + differences + sized + sweep

    def validate(self, params: Any) -> Params:
        out = super().validate(params)
        opt = catalogue.get(out["optimizer"], f"{self.name}.optimizer")
        out["hyper"] = opt.complete(out["hyper"] or {}, where=self.name)
        out["params"] = canonical_params(out["params"], f"{self.name}.params")
        if out["lr_schedule"] == "halved" and out["steps"] < 2:
            # halved from step K // 2 + 1: at K = 1 that is the first step, so the rate never
            # changes under a buffer, which is what the schedule is there to show
            raise ConfigError(
                f"{self.name}.lr_schedule: 'halved' halves the learning rate from step "
                f"steps // 2 + 1, which at steps = {out['steps']} is the first: every step runs "
                "at half the rate and nothing changes; set steps = 2 or more"
            )
        if out["gradients"] == "network" and not out["params"].startswith("zoo:"):
            raise ConfigError(
                f"{self.name}.gradients: 'network' takes the gradients of a zoo network's "
                f"backward pass; set params to zoo:<network>[:quick|full], not {out['params']!r}"
            )
        return out

    def label(self, p: Params) -> str:
        suite_values = catalogue.get(p["optimizer"]).complete({})
        changed = [
            f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}"
            for k, v in p["hyper"].items()
            if v != suite_values.get(k)
        ]
        extra = [p["implementation"]] if p["implementation"] != catalogue.ALL else []
        if p["lr_schedule"] != "constant":
            extra.append(f"lr {p['lr_schedule']}")
        if p["gradients"] != "seeded":
            extra.append(f"{p['gradients']} gradients")
        return " ".join([p["optimizer"], p["params"], f"K={p['steps']}", *changed, *extra])

    def needs(self, params: Params) -> frozenset[str]:
        return self.words | ({"network"} if params["gradients"] == "network" else frozenset())

    # -- what an adapter declares --------------------------------------------------------------
    def host_declined(self, adapter_cls: type[Adapter], params: Params, dtype: str) -> str:
        why = adapter_cls.optimizer_declined(
            params["optimizer"], params["hyper"], params["implementation"], dtype
        )
        if why:
            return why
        if dtype != "fp32" and params["master_weights"] == "auto":
            if dtype not in adapter_cls.master_weights:
                return (
                    f"{adapter_cls.name} offers no fp32 master weights for {dtype} parameters "
                    f"(its optimizers hold {adapter_cls.optimizer_dtypes[dtype]}); set "
                    "master_weights = 'none' to step them as they are"
                )
        if params["gradients"] == "network" and "network" not in adapter_cls.words:
            return (
                f"{adapter_cls.name} does not implement the network words that network "
                "gradients are taken with; use gradients = 'seeded'"
                + adapter_cls.missing_because(["network"])
            )
        try:
            entry = documented.entry(adapter_cls.name, params["optimizer"])
        except ConfigError:
            return (
                f"{adapter_cls.name}: suite/adapters/{adapter_cls.name}/optimizers.toml has no entry for its "
                f"{params['optimizer']!r}, so there is no documented rule to check it against"
            )
        if not entry.supported:
            return entry.unsupported
        return ""

    def declined(self, ctx: Context) -> str:
        missing = sorted(self.needs(ctx.params) - ctx.adapter.words)
        if "network" in missing:
            return f"{ctx.adapter.name} does not implement the network words" + (
                ctx.adapter.missing_because(["network"])
            )
        return self.host_declined(type(ctx.adapter), ctx.params, ctx.dtype)

    # -- the worker --------------------------------------------------------------------------
    def run(self, ctx: Context) -> list[Result]:
        adapter, p, dtype = ctx.adapter, ctx.params, ctx.dtype
        opt = catalogue.get(p["optimizer"])
        entry = documented.entry(adapter.name, p["optimizer"])
        entries = [
            e
            for (_fw, name), e in documented.load().items()
            if name == p["optimizer"] and e.supported
        ]
        wanted = (
            adapter.optimizer_implementations_for(p["optimizer"])
            if p["implementation"] == catalogue.ALL
            else [p["implementation"]]
        )
        not_run = {
            impl: why
            for impl, why in adapter.unsupported_implementations.get(p["optimizer"], {}).items()
            if p["implementation"] == catalogue.ALL
        }
        for impl in list(wanted):  # what only the device tells (PyTorch's fused Adagrad)
            why = adapter.optimizer_unavailable(p["optimizer"], impl)
            if why:
                wanted.remove(impl)
                not_run[impl] = why
                if p["implementation"] != catalogue.ALL or not wanted:
                    raise UnsupportedError(why)
        master = dtype != "fp32" and p["master_weights"] == "auto"
        ps = parameter_set(p["params"], seed=ctx.seed)
        names = tuple(ps.params)
        params0 = {n: quantize(v, dtype) for n, v in ps.params.items()}
        hyper = dict(p["hyper"])
        tracker = Tracker(entry, entries, hyper, params0, dtype, master)
        grads_source = _gradient_source(ctx, ps, dtype)

        rss_before = _rss_bytes()
        adapter.reset_peak_memory()
        handles = {
            impl: adapter.optimizer_build(
                OptimizerSpec(p["optimizer"], hyper, impl, dtype, master, names), params0
            )
            for impl in wanted
        }
        lr0 = hyper["lr"]
        for k in range(1, p["steps"] + 1):
            lr = lr0 * (HALVED if p["lr_schedule"] == "halved" and k > p["steps"] // 2 else 1.0)
            g = grads_source(k)
            tracker.step(g, lr)
            for impl, h in handles.items():
                adapter.optimizer_set_lr(h, lr)
                adapter.optimizer_set_gradients(h, g)
                adapter.optimizer_step(h)
                adapter.synchronize()
                tracker.observe(impl, adapter.optimizer_parameters(h))
                if master:
                    tracker.observe_master(impl, adapter.optimizer_parameters(h, master=True))
        for impl, h in handles.items():
            tracker.finish(impl, adapter.optimizer_parameters(h))

        results = []
        for impl in wanted:
            h = handles.pop(impl)
            results.append(
                self._result(
                    ctx, h, impl, opt, entry, tracker, ps, hyper, master, not_run, rss_before
                )  # fmt: skip
            )
            del h
        return results

    def _result(
        self,
        ctx: Context,
        h: Any,
        impl: str,
        opt: catalogue.Optimizer,
        entry: documented.Entry,
        tracker: Tracker,
        ps: ParameterSet,
        hyper: dict[str, Any],
        master: bool,
        not_run: dict[str, str],
        rss_before: int,
    ) -> Result:
        adapter, p, dtype = ctx.adapter, ctx.params, ctx.dtype
        verdict = tracker.verdicts[impl]
        worst = verdict.worst
        assert worst is not None
        follows = tracker.follows(impl)
        doc_rule = tracker.documented.rule
        observed = entry.observed_rule(**hyper).name
        checks = [
            M.Check(
                "params_vs_documented_rule.bound_ratio",
                worst.bound_ratio,
                1.0,
                detail=_detail(
                    tracker,
                    entry,
                    impl,
                    follows,
                    observed,
                    adapter.documented_differences.get(entry.optimizer),
                ),  # fmt: skip
            )
        ]

        detail = checks[0].detail or {}
        if not worst.passed and "documented_difference" not in detail:
            # a framework bug its adapter declares (an upstream issue) names itself, instead of
            # "this may be the adapter's fault"
            bug = adapter.known_bug(optimizer_key(opt.family, impl, dtype))
            if bug:
                detail["known_bug"] = bug
                detail["differs_from_documentation"] = f"a known bug of {entry.framework}: {bug}"
        if verdict.master_worst is not None:
            mw = verdict.master_worst
            checks.append(
                M.Check(
                    "master_params_vs_documented_rule.bound_ratio",
                    mw.bound_ratio,
                    1.0,
                    detail={"worst_step": verdict.master_worst_step, **mw.to_dict()},
                )
            )
        cfg = MeasureConfig(**ctx.measure)

        def step() -> Any:
            return adapter.optimizer_step(h)

        def time_n(n: int) -> float:
            return adapter.time(step, n)

        m = measure(time_n, cfg, region=ctx.timed_region)
        timer = timer_check(time_n, step, lambda _out: adapter.optimizer_parameters(h), m.inner)
        if timer is not None:
            checks.append(timer)

        count = ps.count
        rule = tracker.documented.rule
        itemsize = ITEMSIZE[dtype]
        state_itemsize = 4 if master else itemsize
        read, written = rule.traffic().bytes_per_param(
            itemsize, itemsize, state_itemsize, 4 if master else None
        )
        step_bytes = float(count * (read + written))
        entries = [
            M.TIME.entry(m.samples),
            M.rate_entry(PARAMETER_RATE, m.samples, count, 1e6),
            M.rate_entry(M.BANDWIDTH, m.samples, step_bytes, 1e9),
        ]
        peak_bw, peak_source = peak_bandwidth(ctx)
        if peak_bw:
            entries.append(
                PERCENT_OF_PEAK_BANDWIDTH.entry(
                    value=M.percent_of_peak(entries[2]["median"], float(peak_bw))
                )
            )
        device_peak = adapter.peak_memory_bytes()
        if device_peak is not None:
            entries.append(M.PEAK_MEMORY.entry(value=device_peak / 1e6))
        state_bytes = int(adapter.optimizer_state_bytes(h))
        memory: dict[str, Any] = {
            "peak_bytes": device_peak,
            "peak_source": "the device allocator's peak since the optimizers were built"
            if device_peak is not None
            else None,
            "process_peak_rss_bytes": _peak_rss_bytes(),
            "rss_growth_bytes": max(0, _rss_bytes() - rss_before),
            "note": "process_peak_rss_bytes is the worker process's high-water mark (the "
            "framework's runtime and earlier tasks of a worker session included); "
            "rss_growth_bytes the resident memory added since before the optimizers were "
            "built (every implementation of this task, its parameters, gradients and state)",
        }
        section = {
            "name": opt.name,
            "family": opt.family,
            "mechanism": adapter.optimizers[opt.name],
            "implementation": impl,
            "implementation_mechanism": adapter.optimizer_implementations.get(impl, ""),
            "hyper": hyper,
            "lr_schedule": p["lr_schedule"],
            "steps": p["steps"],
            "dtype": dtype,
            "master_weights": adapter.master_weights.get(dtype) if master else None,
            "parameters": {
                "set": p["params"],
                "source": ps.source,
                "count": count,
                "tensors": len(ps.params),
            },
            "gradients": self._gradients_section(ctx),
            "documented": {
                "variant": doc_rule.name,
                "flags": dict(entry.documented),
                "basis": dict(entry.basis),
                "api": entry.api,
                "doc": entry.doc,
                "recorded_mismatches": {k: list(v) for k, v in entry.mismatches().items()},
            },
            "implemented_variant": observed,
            "follows": follows,
            "variants": tracker.variants_section(impl),
            "state": {
                "bytes": state_bytes,
                "bytes_per_param": state_bytes / count,
                "rule_bytes_per_param": rule.state_bytes_per_param(
                    state_itemsize, 4 if master else 0
                ),
                "buffers": list(rule.state_buffers()),
            },
            "traffic": {
                "bytes_read_per_param": read,
                "bytes_written_per_param": written,
                "bytes_per_step": step_bytes,
                "reads": list(rule.traffic().reads),
                "writes": list(rule.traffic().writes),
            },
            "memory": memory,
            "peak_bandwidth_gbps": peak_bw,
            "peak_bandwidth_source": peak_source,
            "not_run": dict(not_run),
        }
        return Result(
            metrics=entries,
            checks=checks,
            measurement=m.to_dict(cfg),
            work={
                "parameters": count,
                "bytes": step_bytes,
                "peak_bandwidth_gbps": peak_bw,
            },
            params={**p, "implementation": impl},
            sections={"optimizer": section},
        )

    def _gradients_section(self, ctx: Context) -> dict[str, Any]:
        p = ctx.params
        if p["gradients"] == "seeded":
            return {
                "mode": "seeded",
                "seed": ctx.seed,
                "magnitudes": [LOW, HIGH],
                "how": "sign * 10**U(log10 low, log10 high) per element, from "
                "default_rng([seed, crc32(tensor name), step]): identical in every framework",
            }
        network, size_set = p["params"].split(":")[1:]
        return {
            "mode": "network",
            "network": network,
            "size_set": size_set,
            "batch": _network_batch(network, size_set),
            "how": "softmax cross-entropy on seeded synthetic batches, the framework's own "
            f"backward pass, read back from K plain SGD steps at lr {NETWORK_GRADIENT_LR} "
            "(momentum 0) as (p_before - p_after) / lr",
        }


#: a GPU's bandwidth measured through the framework, once per process and device
_MEASURED: dict[tuple[str, str], tuple[float | None, str]] = {}


def peak_bandwidth(ctx: Context) -> tuple[float | None, str]:
    """The memory bandwidth the step's bytes are held against, and where it comes from: on a
    CPU the host's STREAM triad the worker put in the device block (suite/membw.py); on a GPU
    the triad through the framework (``Adapter.memory_bandwidth``, measured once per process),
    else the device block's datasheet value."""
    extra = ctx.device.extra
    declared = extra.get("peak_bandwidth_gbps")
    source = str(extra.get("peak_bandwidth_source") or "")
    if ctx.device.kind != "gpu":
        return (float(declared) if declared else None), source
    key = (ctx.adapter.name, ctx.device.name)
    if key not in _MEASURED:
        try:
            bw = ctx.adapter.memory_bandwidth()
        except Exception as exc:  # noqa: BLE001 - fall back to the datasheet, saying why
            bw, why = None, f"{type(exc).__name__}: {exc}"
        else:
            why = "the adapter measures none"
        if bw is not None:
            _MEASURED[key] = (float(bw.gbps), str(bw.source))
        elif declared:
            _MEASURED[key] = (float(declared), f"declared (datasheet); not measured: {why}")
        else:
            _MEASURED[key] = (None, f"not known: not measured ({why}) and no datasheet value")
    return _MEASURED[key]


def _detail(
    tracker: Tracker,
    entry: documented.Entry,
    impl: str,
    follows: list[str],
    observed: str,
    declared: DocumentedDifference | None = None,
) -> dict[str, Any]:
    """The check's detail; a failure of an implementation that follows exactly the variant
    recorded as implemented (``observed``), where the adapter declares that difference from
    the documentation, names it (``documented_difference``, ``documented_in``)."""
    v = tracker.verdicts[impl]
    worst = v.worst
    assert worst is not None
    doc = tracker.documented_name
    out: dict[str, Any] = {
        "documented_variant": doc,
        "basis": dict(entry.basis),
        "worst_step": v.worst_step,
        **worst.to_dict(),
        "follows": follows,
    }
    if not worst.passed:
        if worst.nonfinite:
            out["differs_from_documentation"] = (
                f"{worst.nonfinite} parameter values are not finite after step "
                f"{v.worst_step} ({worst.worst_tensor}): the update overflowed or divided by "
                f"zero in {tracker.dtype}" + ("" if tracker.master else " (no master weights)")
            )
        elif follows:
            nearest = min(follows, key=lambda name: len(_flag_difference(doc, name)))
            flags = _flag_difference(doc, nearest)
            bases = {f: entry.basis.get(f, "implementation") for f in flags}
            out["differs_from_documentation"] = (
                f"{entry.framework}'s {entry.optimizer} follows {nearest}, not the documented "
                f"{doc}: " + ", ".join(f"{f} (documented by {b})" for f, b in bases.items())
            )
            if declared is not None and observed in follows:
                out["documented_difference"] = declared.what
                out["documented_in"] = declared.documented_in
        else:
            out["differs_from_documentation"] = (
                f"{entry.framework}'s {entry.optimizer} follows none of the known variants "
                f"(documented: {doc}; recorded as implemented: {observed}); this may be the "
                "adapter's fault, not the framework's: an optimizer word its handle does not "
                "pass on (a learning rate set_lr ignores, gradients set_gradients does not "
                "place) gives this too; run the conformance kit's optimizer part"
            )
    return out


def _flag_difference(a: str, b: str) -> list[str]:
    def flags(name: str) -> dict[str, str]:
        inside = name.partition("[")[2].rstrip("]")
        return dict(kv.split("=", 1) for kv in inside.split(",") if "=" in kv)

    fa, fb = flags(a), flags(b)
    return sorted(k for k in fa if fa[k] != fb.get(k))


def _network_batch(network: str, size_set: str) -> int:
    from suite.levels.network.workload import TRAIN_BATCHES

    return int(TRAIN_BATCHES[size_set].get(network, [4])[0])


def _gradient_source(ctx: Context, ps: ParameterSet, dtype: str) -> Any:
    """Step k -> that step's gradients, rounded to ``dtype`` (float64 arrays)."""
    p = ctx.params
    if p["gradients"] == "seeded":

        def seeded(k: int) -> dict[str, np.ndarray]:
            return {n: quantize(g, dtype) for n, g in gradients(ps.shapes, k, ctx.seed).items()}

        return seeded
    return _network_gradients(ctx, ps, dtype)


def _network_gradients(ctx: Context, ps: ParameterSet, dtype: str) -> Any:
    """The zoo network's gradients: one plain SGD step per call on a seeded synthetic batch,
    through the adapter's network words, read back as (before - after) / lr."""
    from suite.adapters.base import NetworkOptions
    from suite.levels.network import workload as W
    from suite.onnx import zoo

    adapter = ctx.adapter
    network, size_set = ctx.params["params"].split(":")[1:]
    net_def = zoo.get(network)
    arch = net_def.sizes(size_set)[0].params
    model = net_def.build(arch, seed=ctx.seed)
    spec, classes = net_def.input_spec(arch), net_def.num_classes(arch)
    net = adapter.build_network(
        model,
        "fp32",
        NetworkOptions(lr=NETWORK_GRADIENT_LR, momentum=0.0, channels_last=False, seed=ctx.seed),
    )
    batch = _network_batch(network, size_set)
    rng = np.random.default_rng([ctx.seed, 0x6772_6164])  # "grad"
    missing = sorted(set(ps.params) - set(adapter.network_parameters(net)))
    if missing:
        raise UnsupportedError(
            f"{adapter.name}'s network words do not return the zoo tensors {missing[:3]} "
            "(network_parameters), so their gradients cannot be read back"
        )

    def from_network(k: int) -> dict[str, np.ndarray]:
        x, y = W.synthetic_batch(spec, batch, classes, rng)
        xt = adapter.labels_from_numpy(x) if spec.kind == "int64" else adapter.from_numpy(x, "fp32")
        before = adapter.network_parameters(net)
        adapter.train_step(net, xt, adapter.labels_from_numpy(y))
        after = adapter.network_parameters(net)
        out = {}
        for name in ps.params:
            g = ((before[name] - after[name]) / NETWORK_GRADIENT_LR).astype(np.float32)
            if not np.all(np.isfinite(g)):
                raise FloatingPointError(
                    f"{network}'s gradient of {name} at step {k} is not finite (the network "
                    f"diverged at lr {NETWORK_GRADIENT_LR})"
                )
            out[name] = quantize(g, dtype)
        return out

    return from_network


def _rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _peak_rss_bytes() -> int:
    # ru_maxrss is in KiB on Linux
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024
