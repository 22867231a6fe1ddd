"""Levels: families of benchmarks. Each level package exposes ``BENCHMARKS``, a registry of
:class:`~suite.benchmark.Benchmark` classes (imported on first use); a benchmark runs itself
in the worker. No framework is imported here."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any, cast

from suite.adapters.base import Adapter, DeviceInfo
from suite.benchmark import Benchmark, Context
from suite.errors import ConfigError, UnsupportedError
from suite.registry import Registry

#: level name -> the package whose ``BENCHMARKS`` lists its benchmarks
LEVELS: dict[str, str] = {
    "operator": "suite.levels.operator",
    "network": "suite.levels.network",
    "distributed": "suite.levels.distributed",
    "training": "suite.levels.training",
}


def benchmarks(level: str) -> Registry[type[Benchmark]]:
    """The registry of ``level``'s benchmarks; an unknown level is one clear error."""
    if level not in LEVELS:
        raise ConfigError(f"unknown level {level!r}; choose one of: {', '.join(LEVELS)} or all")
    module = importlib.import_module(LEVELS[level])
    return cast(Registry[type[Benchmark]], module.BENCHMARKS)


def load_benchmark(level: str, name: str) -> Benchmark:
    """An instance of the benchmark ``name`` of ``level``."""
    return benchmarks(level).load(name)()


def task_covers(benchmark: dict[str, Any], params: dict[str, Any]) -> bool:
    """Whether the task of a record's ``benchmark`` section (a record of a task that did not
    finish carries the task's own parameters) writes, when it finishes, a record whose
    parameters include ``params`` (a collective's sweep covers each of its sizes:
    :meth:`~suite.benchmark.Benchmark.covers`). False for a benchmark this version lacks."""
    if not params:
        return False
    try:
        bench = load_benchmark(benchmark["level"], benchmark["name"])
    except ConfigError:
        return False
    return bench.covers(benchmark["params"], params)


def benchmark_names(level: str) -> list[str]:
    return benchmarks(level).names()


def level_of(benchmark: str) -> str:
    """The level a benchmark name belongs to (names are unique across levels)."""
    for level in LEVELS:
        if benchmark in benchmark_names(level):
            return level
    raise ConfigError(f"unknown benchmark {benchmark!r}")


def execute(
    task: dict[str, Any],
    adapter: Adapter,
    device: DeviceInfo,
    timed_region: Callable[[], AbstractContextManager[Any]] = nullcontext,
    point_done: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any] | list[dict[str, Any]]:
    """Run ``task`` in this process as the worker does: its benchmark validates the
    parameters, says what the adapter cannot run (an ``UnsupportedError``), and runs. Returns
    the record fields the benchmark owns: one dict, or a list for a sweep, whose points
    ``point_done`` also receives one by one as they are measured."""
    level = task.get("level") or level_of(task["benchmark"])
    bench = load_benchmark(level, task["benchmark"])
    params = bench.validate(task["params"])
    ctx = Context(task, adapter, device, params, timed_region=timed_region)
    if point_done is not None:
        ctx.point_done = lambda result: point_done(result.fields(params))
    declined = bench.declined(ctx)
    if declined:
        raise UnsupportedError(declined)
    result = bench.run(ctx)
    if isinstance(result, list):
        return [one.fields(params) for one in result]
    return result.fields(params)
