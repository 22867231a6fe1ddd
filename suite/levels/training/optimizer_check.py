"""The optimizer benchmark's correctness: every implementation's parameters after every step
against the float64 reference of the variant its framework documents (the rounding bound of
:mod:`suite.optimizers.bounds`), and how far they are from the other frameworks' variants.

One :class:`Tracker` per task: the documented variant runs as a :class:`ReferenceRun` (its
bound is the yardstick), every other candidate variant (each framework's documented and
implemented variant of the same optimizer, from the framework folder's ``optimizers.toml``) as a plain float64 value
run, all stepped in lock-step with the framework's implementations. A candidate is *followed*
when the implementation stays within the documented run's bound of it at every step (the
bounds of two variants of one rule at the same hyperparameters differ by far less than the
factor of 10^2 or more that separates a followed variant from one that is not).

NumPy only (no framework).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from suite.optimizers.bounds import UNIT_ROUNDOFF, Comparison, ReferenceRun, compare
from suite.optimizers.documented import Entry
from suite.optimizers.rules import Params, Rule, State


@dataclass
class ValueRun:
    """A rule stepped in float64 without the bound's bookkeeping (a candidate variant)."""

    rule: Rule
    params0: Mapping[str, np.ndarray]
    t: int = 0
    params: Params = field(init=False)
    state: State = field(init=False)

    def __post_init__(self) -> None:
        self.params = {k: np.array(v, dtype=np.float64) for k, v in self.params0.items()}
        self.state = self.rule.init(self.params)

    def step(self, grads: Mapping[str, np.ndarray], lr: float) -> None:
        self.t += 1
        self.params, self.state = self.rule.step(self.params, grads, self.state, self.t, lr)


@dataclass
class Candidate:
    """A variant some framework documents or implements, and who."""

    rule: Rule
    implemented_by: list[str] = field(default_factory=list)
    documented_by: list[str] = field(default_factory=list)


def candidates(entries: list[Entry], hyper: Mapping[str, Any]) -> dict[str, Candidate]:
    """Variant name -> the candidate, over every framework's documented and implemented
    variant of one optimizer (``entries``: its optimizers.toml entries that are supported)."""
    out: dict[str, Candidate] = {}
    for e in entries:
        for label, rule in (
            ("implemented", e.observed_rule(**hyper)),
            ("documented", e.documented_rule(**hyper)),
        ):
            cand = out.setdefault(rule.name, Candidate(rule))
            who = cand.implemented_by if label == "implemented" else cand.documented_by
            if e.framework not in who:
                who.append(e.framework)
    return out


@dataclass
class Verdict:
    """One implementation's comparison with the documented variant, worst over the steps, and
    its largest bound ratio against every candidate."""

    worst: Comparison | None = None
    worst_step: int = 0
    #: the fp32 master copy against the fp32 bound (where the framework keeps one)
    master_worst: Comparison | None = None
    master_worst_step: int = 0
    against: dict[str, float] = field(default_factory=dict)
    final_update_error: dict[str, float] = field(default_factory=dict)

    def see(self, step: int, cmp: Comparison) -> None:
        if self.worst is None or not cmp.bound_ratio <= self.worst.bound_ratio:
            self.worst, self.worst_step = cmp, step


#: up to this many parameter elements over all candidate runs, every candidate gets a
#: bound of its own (a full :class:`ReferenceRun`: 3 + 2 x state buffers float64 arrays);
#: beyond it (a ResNet-50's 25.6M parameters) only the documented and the implemented
#: variant do, and the others are judged by the documented run's bound
EXACT_LIMIT = 1 << 24


class Tracker:
    """The documented run and the candidate runs of one task, stepped in lock-step with the
    framework's implementations (:meth:`step`, then :meth:`observe` per implementation)."""

    def __init__(
        self,
        entry: Entry,
        entries: list[Entry],
        hyper: Mapping[str, Any],
        params0: Mapping[str, np.ndarray],
        dtype: str,
        master: bool,
    ) -> None:
        self.entry = entry
        self.dtype = dtype
        self.master = master
        self.documented = ReferenceRun(
            entry.documented_rule(**hyper), params0, reduction=entry.reduction
        )
        self.candidates = candidates(entries, hyper)
        count = sum(int(np.size(v)) for v in params0.values())
        self.exact = count * len(self.candidates) <= EXACT_LIMIT
        implemented = entry.observed_rule(**hyper).name
        self.runs: dict[str, ReferenceRun | ValueRun] = {}
        for name, c in self.candidates.items():
            if name == self.documented.rule.name:
                continue
            if self.exact or name == implemented:
                self.runs[name] = ReferenceRun(c.rule, params0, reduction=entry.reduction)
            else:
                self.runs[name] = ValueRun(c.rule, params0)
        self.verdicts: dict[str, Verdict] = {}

    @property
    def documented_name(self) -> str:
        return self.documented.rule.name

    def step(self, grads: Mapping[str, np.ndarray], lr: float) -> None:
        self.documented.step(grads, lr)
        for run in self.runs.values():
            run.step(grads, lr)

    def _master(self) -> str | None:
        return "fp32" if self.master else None

    def observe(self, implementation: str, got: Mapping[str, np.ndarray]) -> Comparison:
        """Compare ``got`` (an implementation's parameters after the current step) with the
        documented run and every candidate; returns the documented comparison."""
        v = self.verdicts.setdefault(implementation, Verdict())
        cmp = compare(got, self.documented, self.dtype, master_dtype=self._master())
        v.see(self.documented.t, cmp)
        v.against[self.documented_name] = max(
            v.against.get(self.documented_name, 0.0), cmp.bound_ratio
        )
        tol = self.documented.tolerance("fp32" if self.master else self.dtype)
        u_lp = UNIT_ROUNDOFF[self.dtype] if self.master else 0.0
        for name, run in self.runs.items():
            if isinstance(run, ReferenceRun):
                ratio = compare(got, run, self.dtype, master_dtype=self._master()).bound_ratio
            else:
                ratio = _bound_ratio(got, run.params, tol, u_lp)
            v.against[name] = max(v.against.get(name, 0.0), ratio)
        return cmp

    def observe_master(self, implementation: str, master: Mapping[str, np.ndarray]) -> None:
        """Compare the framework's fp32 master copy with the documented run (fp32 bound)."""
        v = self.verdicts.setdefault(implementation, Verdict())
        cmp = compare(master, self.documented, "fp32")
        if v.master_worst is None or not cmp.bound_ratio <= v.master_worst.bound_ratio:
            v.master_worst, v.master_worst_step = cmp, self.documented.t

    def finish(self, implementation: str, got: Mapping[str, np.ndarray]) -> None:
        """After the last step: the relative error of the whole update against every
        candidate (``||p - p_variant|| / ||p_variant - p0||``)."""
        v = self.verdicts[implementation]
        v.final_update_error[self.documented_name] = _update_error(
            got, self.documented.params, self.documented.params0
        )
        for name, run in self.runs.items():
            v.final_update_error[name] = _update_error(got, run.params, run.params0)

    def follows(self, implementation: str) -> list[str]:
        """The candidate variants ``implementation`` stayed within the bound of at every step."""
        v = self.verdicts[implementation]
        return [name for name, ratio in v.against.items() if ratio <= 1.0]

    def variants_section(self, implementation: str) -> list[dict[str, Any]]:
        """Per candidate variant: who implements and documents it, the largest bound ratio
        over the steps, and the final update's relative error against it."""
        v = self.verdicts[implementation]
        out = []
        for name in [self.documented_name, *self.runs]:
            cand = self.candidates.get(name)
            out.append(
                {
                    "variant": name,
                    "implemented_by": list(cand.implemented_by) if cand else [],
                    "documented_by": list(cand.documented_by) if cand else [],
                    "bound_ratio": _finite(v.against.get(name, math.inf)),
                    "update_rel_error": _finite(v.final_update_error.get(name, math.inf)),
                    "within_bound": v.against.get(name, math.inf) <= 1.0,
                    "bound": "its own"
                    if name == self.documented_name or isinstance(self.runs.get(name), ReferenceRun)
                    else "the documented variant's (a large parameter set: see EXACT_LIMIT)",
                }
            )
        return out


def _finite(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def _bound_ratio(got: Mapping[str, np.ndarray], target: Params, tol: Params, u_lp: float) -> float:
    worst = 0.0
    for name, p_ref in target.items():
        p = np.asarray(got[name], dtype=np.float64)
        err = np.abs(p - p_ref)
        if not np.all(np.isfinite(p)):
            return math.inf
        bound = tol[name] + u_lp * np.abs(p_ref)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(bound > 0, err / bound, np.where(err > 0, np.inf, 0.0))
        if ratio.size:
            worst = max(worst, float(ratio.max()))
    return worst


def _update_error(
    got: Mapping[str, np.ndarray], target: Params, params0: Mapping[str, np.ndarray]
) -> float:
    diff = upd = 0.0
    for name, p_ref in target.items():
        p = np.asarray(got[name], dtype=np.float64)
        if not np.all(np.isfinite(p)):
            return math.inf
        diff += float(np.sum((p - p_ref) ** 2))
        upd += float(np.sum((p_ref - np.asarray(params0[name], dtype=np.float64)) ** 2))
    if upd == 0:
        return 0.0 if diff == 0 else math.inf
    return math.sqrt(diff / upd)
