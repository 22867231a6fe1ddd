"""Correctness error against a float64 reference, with tolerances by dtype.

Errors are norm-wise, so an output element near zero does not blow the ratio up:

* ``max_rel`` = max|out - ref| / max|ref|   (infinity-norm relative error)
* ``l2_rel``  = ||out - ref||_2 / ||ref||_2

Any NaN or Inf in the output is an error of ``inf``: it never passes.

An output that is a sum whose terms cancel (batch norm's input gradient with two values per
channel is ~eps/var times its terms) is known only to within the rounding of its terms, not of
its value: a sum's rounding error scales with u times the size of its terms (their root sum
of squares, the roundings being independent), not with its value. For such an output the
reference also gives ``terms`` (per element, the size of the terms whose sum it is), and
both errors are relative to it instead of ``|ref|`` (per element, the larger of the two); the
check's ``detail`` then records the cancellation ``||terms|| / ||ref||``: how much less than
its dtype's tolerance the check resolves of the output's own size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Tolerance:
    max_rel: float
    l2_rel: float

    def scaled(self, factor: float) -> Tolerance:
        return Tolerance(self.max_rel * factor, self.l2_rel * factor)


# Unit roundoff: fp32 6e-8, tf32 4.9e-4 (10-bit mantissa), fp16 4.9e-4, bf16 3.9e-3.
# The reference is computed from the *same quantised inputs*, so these bound the arithmetic
# error of the operator (accumulation, fast math, output rounding), not input rounding.
TOLERANCES: dict[str, Tolerance] = {
    "fp64": Tolerance(max_rel=1e-10, l2_rel=1e-11),
    "fp32": Tolerance(max_rel=1e-4, l2_rel=1e-5),
    "tf32": Tolerance(max_rel=1e-2, l2_rel=2e-3),
    "fp16": Tolerance(max_rel=1e-2, l2_rel=2e-3),
    "bf16": Tolerance(max_rel=5e-2, l2_rel=1e-2),
}


#: Unit roundoff of the accumulator: fp16, bf16 and tf32 operators accumulate in fp32
#: (tensor cores, cuBLAS/cuDNN and oneDNN all do).
ACCUMULATOR_ROUNDOFF: dict[str, float] = {
    "fp64": 2.0**-53, "fp32": 2.0**-24, "tf32": 2.0**-24, "fp16": 2.0**-24, "bf16": 2.0**-24,
}  # fmt: skip
#: The constant of the probabilistic bound below (errors of a sum of K terms stay under
#: lambda * sqrt(K) * u with high probability; Higham & Mary, SIAM J. Sci. Comput. 2019).
ACCUMULATION_LAMBDA = 2.0


def tolerance_for(dtype: str, scale: float = 1.0, reduction_length: int = 1) -> Tolerance:
    """The tolerance for ``dtype``, optionally scaled (an operator known to be ill-conditioned),
    and never under the rounding error that a sum of ``reduction_length`` terms accumulates.

    The fixed fp32 bound (l2 1e-5, about 170 unit roundoffs) holds for sums of up to about
    7000 terms. Longer ones exceed it with no fault: a conv2d weight gradient at batch 32 on
    56x56 sums 100352 terms, and cuDNN's fp32 result was 1.6e-5 from float64 on an H100 (the
    probabilistic bound sqrt(K) u is 1.9e-5). So the l2 tolerance is at least
    ``ACCUMULATION_LAMBDA * sqrt(K) * u`` and the max tolerance ten times that (the fixed
    ratio of the two). For fp16, bf16 and tf32 the fixed bounds, set by the inputs' and the
    output's rounding, stay far larger."""
    try:
        tol = TOLERANCES[dtype].scaled(scale)
    except KeyError:
        raise ValueError(
            f"no tolerance defined for dtype {dtype!r}; known: {sorted(TOLERANCES)}"
        ) from None
    if reduction_length <= 1:
        return tol
    l2 = ACCUMULATION_LAMBDA * math.sqrt(reduction_length) * ACCUMULATOR_ROUNDOFF[dtype]
    return Tolerance(max(tol.max_rel, 10.0 * l2), max(tol.l2_rel, l2))


def relative_errors(
    out: np.ndarray, ref: np.ndarray, terms: np.ndarray | None = None
) -> dict[str, float]:
    """Norm-wise relative errors of ``out`` against ``ref`` (both converted to float64);
    with ``terms`` (the size of the terms each reference element sums, see the module's
    docstring) relative to ``max(|ref|, terms)`` instead of ``|ref|``."""
    o = np.asarray(out, dtype=np.float64)
    r = np.asarray(ref, dtype=np.float64)
    if o.shape != r.shape:
        raise ValueError(f"shape mismatch: output {o.shape} vs reference {r.shape}")
    scale = np.abs(r)
    if terms is not None:
        t = np.asarray(terms, dtype=np.float64)
        if t.shape != r.shape:
            raise ValueError(f"shape mismatch: terms {t.shape} vs reference {r.shape}")
        scale = np.maximum(scale, np.abs(t))
    if not np.all(np.isfinite(o)):
        return {
            "max_rel": math.inf,
            "l2_rel": math.inf,
            "nonfinite": int(np.size(o) - np.isfinite(o).sum()),
        }
    diff = o - r
    ref_max = float(np.max(scale)) if r.size else 0.0
    ref_l2 = float(np.linalg.norm(scale.ravel()))
    max_abs = float(np.max(np.abs(diff))) if diff.size else 0.0
    l2_abs = float(np.linalg.norm(diff.ravel()))
    return {
        "max_rel": max_abs / ref_max if ref_max > 0 else max_abs,
        "l2_rel": l2_abs / ref_l2 if ref_l2 > 0 else l2_abs,
        "nonfinite": 0,
    }


@dataclass(frozen=True)
class Check:
    """One correctness check as a record holds it."""

    name: str
    error: float
    tolerance: float
    #: what explains the verdict beyond the error (e.g. the first training step whose loss
    #: was not finite); JSON values only, recorded when given
    detail: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        # Plain floats only: NumPy scalars are not JSON types.
        object.__setattr__(self, "error", float(self.error))
        object.__setattr__(self, "tolerance", float(self.tolerance))

    @property
    def passed(self) -> bool:
        return bool(math.isfinite(self.error) and self.error <= self.tolerance)

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> Check:
        """The check a record holds (``to_dict``'s output; a null error was not finite)."""
        error = doc.get("error")
        return cls(
            doc["name"],
            float("inf") if error is None else float(error),
            float(doc["tolerance"]),
            detail=doc.get("detail"),
        )

    def to_dict(self) -> dict[str, Any]:
        # JSON has no Infinity: a non-finite error is recorded as null and never passes.
        out: dict[str, Any] = {
            "name": self.name,
            "error": self.error if math.isfinite(self.error) else None,
            "tolerance": self.tolerance,
            "passed": self.passed,
        }
        if self.detail is not None:
            out["detail"] = dict(self.detail)
        return out


def compare(
    name: str,
    out: np.ndarray,
    ref: np.ndarray,
    tol: Tolerance,
    against: str = "fp64",
    terms: np.ndarray | None = None,
) -> list[Check]:
    """Both norm-wise checks of one output against its reference (``against`` names it);
    ``terms``: relative to the size of the terms each element sums (module docstring)."""
    err = relative_errors(out, ref, terms)
    if terms is None:
        return [
            Check(f"{name}.max_rel_error_vs_{against}", err["max_rel"], tol.max_rel),
            Check(f"{name}.l2_rel_error_vs_{against}", err["l2_rel"], tol.l2_rel),
        ]
    own = relative_errors(out, ref)
    ratio = cancellation(ref, terms)
    checks = []
    for kind, limit in (("max_rel", tol.max_rel), ("l2_rel", tol.l2_rel)):
        detail: dict[str, Any] = {"relative_to": "terms", "cancellation": ratio}
        error = capped_credit(err[kind], own[kind], limit)
        if error > limit and err[kind] <= limit:
            detail[NOT_DETERMINED] = not_determined(name, ratio, limit, err[kind])
        checks.append(Check(f"{name}.{kind}_error_vs_{against}", error, limit, detail=detail))
    return checks


#: the most a cancelling output's error may be relative to its own size, whatever the credit
#: its terms give: half of it (an output of zeros, or one half off, always fails)
OWN_SIZE_LIMIT = 0.5


#: a failed check's ``detail`` key: the output's terms cancel beyond what the dtype determines,
#: so it was not judged (declared, as a known bug is: the run does not fail but for --strict)
NOT_DETERMINED = "not_determined"


def not_determined(name: str, ratio: float | None, tolerance: float, of_terms: float) -> str:
    """Why a cancelling output was not judged: within the tolerance of its terms' size (what
    the dtype determines), more than half off its own size, which the tolerance cannot
    resolve."""
    fold = f" {ratio:.3g}-fold" if ratio is not None else ""
    return (
        f"{name}'s terms cancel{fold}, beyond the "
        f"{OWN_SIZE_LIMIT / tolerance:.3g}-fold this dtype's tolerance resolves: it is within "
        f"the tolerance of its terms' size ({of_terms:.2g}) but not determined to half its own "
        "size (an output of zeros would look the same)"
    )


def capped_credit(relative_to_terms: float, relative_to_own: float, tolerance: float) -> float:
    """The error judged against the terms' size, with the credit the terms give capped so
    that the check can still fail: relative to at most ``OWN_SIZE_LIMIT / tolerance`` times the
    output's own size. Without the cap an output whose terms cancel more than 1/tolerance-fold
    (layer norm's dx over 2 features in bf16: 750-fold against 1e-2) passed as zeros."""
    return max(relative_to_terms, relative_to_own * tolerance / OWN_SIZE_LIMIT)


def cancellation(ref: np.ndarray, terms: np.ndarray) -> float | None:
    """``||terms|| / ||ref||``: 1 where nothing cancels, about 1e5 for batch norm's input
    gradient with two values per channel; None where the reference is all zeros."""
    r = float(np.linalg.norm(np.asarray(ref, dtype=np.float64).ravel()))
    t = float(np.linalg.norm(np.maximum(np.abs(ref), np.abs(terms)).ravel()))
    return t / r if r > 0 else None
