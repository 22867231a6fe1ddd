"""The float64 reference run of a rule and the rounding bound a framework's parameters must meet.

The bound (per element, after K steps, in a working precision with unit roundoff ``u``:
2^-24 for fp32, 2^-8 for bf16, 2^-11 for fp16)::

    |p_framework - p_reference| <= u * sum_{k=1..K} ( s * |p_k| + C_k * A_k )

* ``s * |p_k|``: storing the parameter after step k rounds it (relative u), once, or twice
  (``s = 2``) where decoupled weight decay may be applied as a separate update
  (:meth:`Rule.param_roundings`). Over K steps these add up: the bound grows linearly in K
  (the typical error grows like sqrt(K)).
* ``A_k``: the rule's update evaluated on absolute values (:meth:`Rule.magnitude_step`:
  ``|g|``, ``|p|``, every moving average run on absolute values, denominators and trust
  ratios on values). It bounds each term the implementation adds or subtracts, so it also
  covers cancellation (a momentum buffer whose terms almost cancel has a small value but
  not a small rounding error).
* ``C_k = r + 2*min(k, H) + kappa + n_red``: ``r`` roundings of one element's update
  (:attr:`Rule.update_roundings`, 10: generous for any order of the same arithmetic);
  ``2*min(k, H)``: a state buffer rounded twice per step keeps that error for about
  ``H`` steps (``H`` = 1/(1-beta) of its longest moving average, K for Adagrad's running
  sum); ``kappa`` = sum of beta/(1-beta) over the decays used as ``1 - beta``, because an
  implementation that holds beta in fp32 (Keras, optax's bias correction) computes
  ``1 - beta`` and ``1 - beta^t`` with relative error ``kappa * u`` (999 for beta2 = 0.999);
  ``n_red``: the per-tensor norms of LAMB and LARS, ``2*(log2(n) + 2)`` roundings for a
  pairwise or blocked reduction over n elements (NumPy, XLA, PyTorch), ``n + 4`` for a
  sequential fp32 accumulation (MXNet 1.9's ``multi_sum_sq`` and ``norm``: measured 148 u
  at 16k elements, 7,000 u at 1M), which the reference run must be told
  (``ReferenceRun(reduction="sequential")``).

Underflow: each of those roundings may instead land in the subnormal range, where its error is
absolute, up to half the smallest subnormal ``eta`` (2^-25 in fp16, whose subnormals start
below 6.1e-5; 2^-134 in bf16, 2^-150 in fp32). The bound adds ``eta`` times the roundings
counted above (``sum_k (s + C_k)``), and the low-precision copy of fp32 master weights one
more ``eta``. Negligible in fp32 and bf16; in fp16 it is what a correct update needs: the
relative bound alone failed Keras' SGD on fp16 parameters at 1.7 (lr 0.01), in elements whose
update ``lr * g`` (1e-6) is subnormal in fp16, rounded to a multiple of 2^-24, and that moved
the parameter's own rounding across a midpoint.

This is a bound, not an estimate: a correct implementation stays below it (measured errors
are typically 10-100 times smaller), and a rule difference shows as errors of the size of the
update itself, orders of magnitude above it.

Low-precision parameters:

* with fp32 master weights (the framework updates an fp32 copy and rounds it to bf16/fp16
  for the model), the master copy is held to the fp32 bound, and the low-precision copy to
  ``u_lp * |p_ref| + fp32 bound`` (one rounding of the master);
* without master weights the same formula applies with the low-precision ``u`` for every
  term. With beta2 = 0.999, ``kappa * u`` is about 4 in bf16: the bound then exceeds the
  update itself, which is the honest statement that such an update is not meaningful in bf16.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field

import numpy as np

from suite.optimizers.rules import Params, Rule, State

#: unit roundoff (half the machine epsilon) per dtype name
UNIT_ROUNDOFF: dict[str, float] = {
    "fp64": 2.0**-53,
    "fp32": 2.0**-24,
    "tf32": 2.0**-24,  # tf32 affects matmuls only; an optimizer's arithmetic is fp32
    "bf16": 2.0**-8,
    "fp16": 2.0**-11,
}


#: half the smallest subnormal per dtype: a rounding's absolute error where its result
#: underflows (fp16's subnormals start below 6.1e-5, well inside a parameter set's range: a
#: parameter of 1e-6 in fp16 holds two significant bits, whatever its relative bound says)
UNDERFLOW: dict[str, float] = {
    "fp64": 2.0**-1075,
    "fp32": 2.0**-150,
    "tf32": 2.0**-150,
    "bf16": 2.0**-134,
    "fp16": 2.0**-25,
}


def _copy(params: Mapping[str, np.ndarray]) -> Params:
    return {k: np.array(v, dtype=np.float64) for k, v in params.items()}


@dataclass
class ReferenceRun:
    """A rule stepped in float64 from ``params0``, accumulating the terms of the bound.

    ``params0`` are the values the framework starts from (already rounded to its dtype);
    :meth:`step` takes the gradients the framework was given (also as it holds them).
    """

    rule: Rule
    params0: Mapping[str, np.ndarray]
    #: how the implementation reduces a norm (LAMB, LARS): "pairwise" or "sequential"
    reduction: str = "pairwise"
    t: int = 0
    params: Params = field(init=False)
    state: State = field(init=False)
    abs_state: State = field(init=False)
    sum_abs_params: Params = field(init=False)
    sum_update_bound: Params = field(init=False)
    #: per tensor, the roundings one element's value went through so far (each may underflow)
    sum_roundings: dict[str, float] = field(init=False)

    def __post_init__(self) -> None:
        self.params = _copy(self.params0)
        self.state = self.rule.init(self.params)
        self.abs_state = self.rule.init({k: np.abs(v) for k, v in self.params.items()})
        self.sum_abs_params = {k: np.zeros_like(v) for k, v in self.params.items()}
        self.sum_update_bound = {k: np.zeros_like(v) for k, v in self.params.items()}
        self.sum_roundings = dict.fromkeys(self.params, 0.0)

    def step(self, grads: Mapping[str, np.ndarray], lr: float | None = None) -> None:
        self.t += 1
        t = self.t
        mags, self.abs_state = self.rule.magnitude_step(
            self.params, grads, self.state, self.abs_state, t, lr
        )
        self.params, self.state = self.rule.step(self.params, grads, self.state, t, lr)
        horizon = self.rule.horizon()
        carried = 2.0 * min(float(t), horizon)
        base = self.rule.update_roundings + carried + self.rule.conditioning()
        stores = self.rule.param_roundings()
        for name, a in mags.items():
            c = base + self.rule.reduction_roundings(a.size, self.reduction)
            self.sum_update_bound[name] += c * a
            self.sum_abs_params[name] += stores * np.abs(self.params[name])
            self.sum_roundings[name] += c + stores

    def tolerance(self, dtype: str = "fp32") -> Params:
        """Per element: the largest error a correct implementation in ``dtype`` may have
        (relative roundings, and each rounding's absolute error where it underflows)."""
        u, eta = UNIT_ROUNDOFF[dtype], UNDERFLOW[dtype]
        return {
            k: u * (self.sum_abs_params[k] + self.sum_update_bound[k]) + eta * self.sum_roundings[k]
            for k in self.params
        }


@dataclass(frozen=True)
class Comparison:
    """How far a framework's parameters are from a reference after the same steps.

    * ``bound_ratio``: max over elements of error / tolerance; <= 1 passes.
    * ``max_rel_error``: max over elements of |error| / |p_ref| (the usual figure; dominated
      by the parameters' size).
    * ``update_rel_error``: ||p - p_ref|| / ||p_ref - p0|| over all tensors: how wrong the
      total update is, relative to its size (a rule difference is O(0.01..1) here).
    """

    bound_ratio: float
    max_rel_error: float
    update_rel_error: float
    worst_tensor: str
    worst_index: tuple[int, ...]
    nonfinite: int

    @property
    def passed(self) -> bool:
        return self.nonfinite == 0 and self.bound_ratio <= 1.0

    def to_dict(self) -> dict[str, object]:
        return {**asdict(self), "worst_index": list(self.worst_index), "passed": self.passed}


def compare(
    got: Mapping[str, np.ndarray],
    ref: ReferenceRun,
    dtype: str = "fp32",
    *,
    master_dtype: str | None = None,
) -> Comparison:
    """Compare a framework's parameters ``got`` with ``ref`` under the bound for ``dtype``.

    With ``master_dtype`` (e.g. ``"fp32"`` for fp32 master weights) ``got`` holds the
    low-precision parameters of ``dtype`` and the bound is one ``dtype`` rounding of the
    reference plus the ``master_dtype`` bound."""
    tol = ref.tolerance(master_dtype or dtype)
    u_lp = UNIT_ROUNDOFF[dtype] if master_dtype else 0.0
    eta_lp = UNDERFLOW[dtype] if master_dtype else 0.0
    worst: tuple[float, str, tuple[int, ...]] = (-1.0, "", (0,))
    max_rel = 0.0
    nonfinite = 0
    diff_sq = 0.0
    upd_sq = 0.0
    for name, p_ref in ref.params.items():
        p = np.asarray(got[name], dtype=np.float64)
        if p.shape != p_ref.shape:
            raise ValueError(f"{name}: shape {p.shape} against the reference's {p_ref.shape}")
        bad = ~np.isfinite(p)
        nonfinite += int(bad.sum())
        err = np.abs(p - p_ref)
        err[bad] = np.inf
        bound = tol[name] + u_lp * np.abs(p_ref) + eta_lp
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(bound > 0, err / bound, np.where(err > 0, np.inf, 0.0))
            rel = np.where(p_ref != 0, err / np.abs(p_ref), np.where(err > 0, np.inf, 0.0))
        i = int(np.argmax(ratio))
        if ratio.flat[i] > worst[0]:
            worst = (
                float(ratio.flat[i]),
                name,
                tuple(int(x) for x in np.unravel_index(i, p.shape)),
            )
        max_rel = max(max_rel, float(rel.max()) if rel.size else 0.0)
        finite = ~bad
        diff_sq += float(np.sum(err[finite] ** 2))
        upd_sq += float(np.sum((p_ref - np.asarray(ref.params0[name], dtype=np.float64)) ** 2))
    update_rel = math.sqrt(diff_sq / upd_sq) if upd_sq > 0 else (0.0 if diff_sq == 0 else math.inf)
    if nonfinite:
        update_rel = math.inf
    return Comparison(worst[0], max_rel, update_rel, worst[1], worst[2], nonfinite)
