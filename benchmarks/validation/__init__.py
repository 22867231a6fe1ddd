"""The suite against bare framework loops: each script times the suite's measurement and a loop
written by hand on the same inputs, in one process (or one set of ranks), and prints the two
side by side with their ratio and the suite's correctness check of the same run.

    python -m benchmarks.validation [--smoke] [--only overhead,allreduce_vs_bare]   # make validate
    python -m benchmarks.validation.overhead [--smoke] [...]                          # one of them

``--smoke``: tiny sizes and rounds, that each script runs end to end (CI runs it); its ratios
decide nothing. ``dlio_vs_suite`` needs DLIO in its own environment and ``gpu_check`` a lent
GPU (its CPU rehearsal, ``make gpu-check DEVICE=cpu``, is its own test): neither is in the
default set nor in CI's smoke.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

SMOKE_HELP = "tiny sizes and rounds: that the script runs end to end (CI); no verdict"


@dataclass(frozen=True)
class Validation:
    """One script: the page its figures are on, and whether `make validate` (and CI's smoke)
    runs it; ``why_not`` says why not where it does not."""

    doc: str
    claim: str
    why_not: str = ""


#: every validation script (a module of this package), in the order `make validate` runs them
VALIDATIONS: dict[str, Validation] = {
    "overhead": Validation(
        "docs/studies/overhead-cpu.md",
        "operator level: the suite's median within 0.98-1.02 of a bare loop",
    ),
    "resnet50_vs_bare": Validation(
        "docs/studies/resnet50-cpu.md",
        "network level: ResNet-50 training at >= 0.97 of a bare loop",
    ),
    "optimizer_vs_bare": Validation(
        "docs/reference/training-level.md",
        "training level: fused AdamW step within 0.97-1.03 of bare",
    ),
    "data_vs_bare": Validation(
        "docs/reference/training-level.md",
        "training level: the loader within 0.95-1.05 of a bare loader",
    ),
    "allreduce_vs_bare": Validation(
        "docs/studies/allreduce-cpu.md", "distributed level: allreduce busbw >= 0.95 of a bare loop"
    ),
    "cpu_peak_vs_probe": Validation(
        "docs/results/cpu-clock/README.md",
        "CPU peak: the suite's clock within 0.95-1.05 of a C probe's, FLOP/cycle within 0.85-1.15",
    ),
    "dlio_vs_suite": Validation(
        "docs/reference/training-level.md",
        "training level: the loader against DLIO's on the same tree",
        why_not="needs DLIO 2.0.0 in its own environment (--dlio; docs/reference/training-level.md)",
    ),
    "gpu_check": Validation(
        "docs/guide/gpu-check.md",
        "the acceptance run on a lent GPU: the GPU ratios, telemetry, feed, NCCL",
        why_not="needs a GPU (`make gpu-check`; its CPU rehearsal is tests/integration/"
        "test_gpu_check.py)",
    ),
}


def default_set() -> list[str]:
    """What `make validate` and CI's smoke run: every script that runs here."""
    return [name for name, v in VALIDATIONS.items() if not v.why_not]


#: modules of this package that are parts of a script above, not scripts of their own
HELPERS = ("bare_torch_ops", "gpu_check_report", "gpu_check_steps")


def judge(
    ratios: list[float], low: float, high: float, headline: float | None = None
) -> tuple[bool, str]:
    """The verdict on per-round ratios (suite / bare) against the target ``[low, high]``:
    met when their median is within it *and* at least half the rounds are. The median of an
    even count is the mean of the middle two, so rounds split by a change of the machine's
    load (1.52, 1.61, 0.47, 0.45: none within) can average into the target; such a run
    says nothing about the suite and is "inconclusive", not "met". ``headline``: the ratio
    that decides where a script computes another than the median of the rounds' (the ratio
    of the two sides' medians)."""
    if not ratios:
        return False, "no rounds"
    mid = statistics.median(ratios) if headline is None else headline
    inside = sum(low <= r <= high for r in ratios)
    if not low <= mid <= high:
        return False, f"NOT met ({mid:.3f}; {inside} of {len(ratios)} rounds within)"
    if 2 * inside < len(ratios):
        return False, (
            f"inconclusive: {mid:.3f} is within, but only {inside} of "
            f"{len(ratios)} rounds are (the rounds scatter from {min(ratios):.3f} to "
            f"{max(ratios):.3f}: rerun on a quieter machine or with more rounds)"
        )
    return True, f"met ({inside} of {len(ratios)} rounds within)"
