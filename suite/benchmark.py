"""The benchmark contract, one for every level (operator, network, distributed, training).

A benchmark is a class: it declares its fields (:class:`~suite.params.Field`) and the adapter
words it uses, gives its size sets, checks parameters with the one declarative validation, and
runs itself in the worker (:meth:`Benchmark.run`) with a :class:`Context`, returning one
:class:`Result` (or one per point of a sweep). The record's level fields are built from a
Result in one place (:meth:`Result.fields`); the worker adds the rest (provenance, device,
telemetry). Framework-neutral: a benchmark computes with NumPy and the adapter's words, and
this module imports no framework.

Host side, the plan calls ``sizes``, ``validate``, ``check_world`` and ``label``; worker side,
the worker calls ``declined`` (what the adapter cannot run: a skipped record) and ``run``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any, ClassVar

from suite.adapters.base import Adapter, DeviceInfo
from suite.metrics import Check
from suite.params import Field, Params, SizeSpec, validate_fields

__all__ = ["Benchmark", "Context", "Field", "Params", "Result", "SizeSpec"]

#: adapter words that stand for a whole vocabulary of methods (suite/adapters/base.py)
VOCABULARIES = ("network", "distributed", "optimizer")


@dataclass
class Context:
    """What a benchmark runs with, in the worker: the task document (``task["params"]`` as
    given; ``params`` validated), the adapter after ``setup``, the device it described, and
    ``timed_region``, which the benchmark wraps around its sampling phase only (the worker's
    telemetry: warm-up, calibration and checks stay out of it)."""

    task: dict[str, Any]
    adapter: Adapter
    device: DeviceInfo
    params: Params
    timed_region: Callable[[], AbstractContextManager[Any]] = nullcontext
    #: a sweep calls it with each point's result as soon as that point is measured, so a
    #: task stopped later (its timeout) keeps the points it measured (the worker writes them
    #: aside; suite/worker.py); None: nobody keeps them early
    point_done: Callable[[Result], None] | None = None

    @property
    def dtype(self) -> str:
        dtype: str = self.task["dtype"]
        return dtype

    @property
    def seed(self) -> int:
        seed: int = self.task["seed"]
        return seed

    @property
    def measure(self) -> dict[str, Any]:
        """The task's measurement settings (``MeasureConfig`` fields)."""
        settings: dict[str, Any] = self.task.get("measure") or {}
        return settings


@dataclass
class Result:
    """A benchmark's result for one record: metric entries (``Metric.entry``), the
    correctness checks, how it was measured, the work done, and any section of its own
    (``sections``: e.g. a strategy's ``strategy`` section). ``params`` overrides the task's
    validated parameters for one point of a sweep."""

    metrics: list[dict[str, Any]]
    checks: list[Check]
    measurement: dict[str, Any] | None = None
    work: dict[str, Any] | None = None
    params: Params | None = None
    sections: dict[str, Any] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)

    @classmethod
    def from_fields(cls, fields: dict[str, Any]) -> Result:
        """The result whose :meth:`fields` are ``fields`` (a record's fields that crossed a
        process boundary: a coordinating rank's, published to the ranks that serve it)."""
        rest = dict(fields)
        correctness = rest.pop("correctness", {}) or {}
        return cls(
            metrics=rest.pop("metrics", []),
            checks=[Check.from_dict(c) for c in correctness.get("checks", [])],
            measurement=rest.pop("measurement", None),
            work=rest.pop("work", None),
            params=rest.pop("params", None),
            sections=rest,
        )

    def fields(self, params: Params) -> dict[str, Any]:
        """The record fields this result owns (the one place they are built)."""
        out: dict[str, Any] = {
            "params": self.params if self.params is not None else params,
            "metrics": self.metrics,
            "correctness": {"passed": self.passed, "checks": [c.to_dict() for c in self.checks]},
        }
        if self.measurement is not None:
            out["measurement"] = self.measurement
        if self.work is not None:
            out["work"] = self.work
        out.update(self.sections)
        return out


class Benchmark(ABC):
    """A framework-neutral benchmark of one level.

    Subclasses set ``level``, ``name``, ``summary``, ``fields`` and ``words`` (the adapter
    words :meth:`run` uses), and implement :meth:`sizes` and :meth:`run`. Parameters beyond
    ``fields`` are refused unless :meth:`validate_extra` is overridden (a network benchmark's
    architecture fields are its zoo network's); :meth:`check` adds cross-field checks."""

    level: ClassVar[str]
    name: ClassVar[str]
    summary: ClassVar[str]
    fields: ClassVar[dict[str, Field]] = {}
    #: the adapter words ``run`` uses; an adapter without them gets a skipped record
    words: ClassVar[frozenset[str]] = frozenset()
    #: size sets ``sizes`` knows
    size_sets: ClassVar[tuple[str, ...]] = ("quick", "full")
    #: accept parameters beyond ``fields`` (passed to ``validate_extra``)
    open_fields: ClassVar[bool] = False
    #: what one record of a sweep is called in what the runner says of it ("size")
    point_word: ClassVar[str] = "point"

    # -- parameters (host and worker) --------------------------------------------------------
    @abstractmethod
    def sizes(self, size_set: str) -> list[SizeSpec]:
        """Parameter sets for ``size_set`` (each says where it comes from)."""

    def validate(self, params: Mapping[str, Any]) -> Params:
        """``params`` checked and completed; a ConfigError names ``<name>.<field>`` and the
        fix. Declarative: the fields, then :meth:`validate_extra`, then :meth:`check`."""
        out = validate_fields(
            self.name, self.fields, params,
            extra=self.validate_extra if self.open_fields else None,
        )  # fmt: skip
        self.check(out)
        return out

    def validate_extra(self, params: Params, rest: Params) -> Params:
        """The parameters ``fields`` does not declare (only with ``open_fields``)."""
        return dict(rest)

    def check(self, params: Params) -> None:
        """Cross-field checks (e.g. a kernel larger than the padded input)."""
        return None

    def check_world(self, params: Params, world: int) -> None:
        """Checks that depend on the world size a task runs at (a batch that must split
        over the ranks); called when planning, a ConfigError naming the field."""
        return None

    def label(self, params: Params) -> str:
        return " ".join(f"{k}={v}" for k, v in params.items())

    def fit_world(self, params: Params, world: int) -> tuple[Params, str]:
        """One of the suite's own sizes made to run at ``world`` ranks (a batch that must split
        over them), and what changed ("" when nothing did). Called when planning, for the
        size sets only: a size the user gave is checked by :meth:`check_world`, never
        changed."""
        return params, ""

    def needs(self, params: Params) -> frozenset[str]:
        """The adapter words this parameter set uses."""
        return self.words

    def covers(self, params: Params, point: Params) -> bool:
        """Whether a task of ``params`` writes a record of ``point`` when it finishes. A task
        that did not finish (failed, timed out) writes one record with its own parameters;
        ``dlsuite compare`` pairs that record with each of the other run's records it covers.
        The default: a task writes one record, with its own parameters."""
        return params == point

    def remaining(self, params: Params, points: list[Params]) -> Params | None:
        """The parameters of what a task of ``params`` had still to measure when it stopped
        (a timeout) after writing the records of ``points`` (a sweep writes each point as it is
        measured: :attr:`Context.point_done`); None when nothing was left. The default: a task
        that writes one record, so any point written is the whole task."""
        return None if points else params

    # -- the worker --------------------------------------------------------------------------
    def declined(self, ctx: Context) -> str:
        """Why this adapter cannot run this task ("" when it can): a word it does not
        implement, a dtype its device cannot run (``supports``) or one of the words needed
        cannot (``supports_word``). The worker turns it into a skipped record."""
        missing = sorted(self.needs(ctx.params) - ctx.adapter.words)
        vocabularies = [w for w in missing if w in VOCABULARIES]
        if vocabularies:  # a whole vocabulary: the network or the distributed words
            return f"{ctx.adapter.name} does not implement the {vocabularies[0]} words" + (
                ctx.adapter.missing_because(vocabularies[:1])
            )
        if missing:
            return (
                f"{ctx.adapter.name} does not implement the word(s) {', '.join(missing)} "
                f"that {self.name} needs" + ctx.adapter.missing_because(missing)
            )
        ok, why = ctx.adapter.supports(ctx.dtype)
        if not ok:
            return why
        for word in sorted(self.needs(ctx.params)):  # a dtype only some words lack
            ok, why = ctx.adapter.supports_word(word, ctx.dtype)
            if not ok:
                return why
        return ""

    def host_declined(self, adapter_cls: type[Adapter], params: Params, dtype: str) -> str:
        """Why ``adapter_cls`` cannot run this task, known from its class alone on the host
        ("" when it may): the runner skips such a task before building an environment. The
        default knows nothing; a benchmark whose support is declared per parameter (the
        optimizer a framework lacks) overrides it."""
        return ""

    @abstractmethod
    def run(self, ctx: Context) -> Result | list[Result]:
        """Measure and check, in the worker. Raise ``UnsupportedError`` for a case the adapter
        declines that only running finds (a skipped record, with the reason)."""
