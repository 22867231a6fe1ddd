"""`make validate SMOKE=1` in CI: every validation script of the default set
(benchmarks/validation/: the suite against a bare PyTorch loop at the operator, network,
training and distributed levels; the CPU peak's clock and FLOP/cycle against a C probe) runs
end to end at tiny sizes, through the same runner as
`make validate`, and prints its suite/bare ratio; the suite's correctness check of each run
passes. The ratios at these sizes decide nothing: the claims are the full runs' (the pages each
script names). DLIO's comparison needs its own environment and the GPU check a GPU (its CPU
rehearsal is test_gpu_check.py): neither is in the default set."""

from __future__ import annotations

import subprocess
import sys

import pytest

from benchmarks.validation import VALIDATIONS, default_set
from benchmarks.validation.__main__ import RATIO
from tests.helpers import ROOT


def test_the_default_set_is_every_script_that_runs_here() -> None:
    assert set(default_set()) == {
        "overhead", "resnet50_vs_bare", "optimizer_vs_bare", "data_vs_bare", "allreduce_vs_bare",
        "cpu_peak_vs_probe",
    }  # fmt: skip
    assert all(VALIDATIONS[n].why_not for n in VALIDATIONS if n not in default_set())


@pytest.mark.pytorch
@pytest.mark.slow
def test_every_validation_script_runs_and_prints_its_ratio() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.validation", "--smoke"],
        cwd=ROOT, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    summary = proc.stdout.rsplit("== validation", 1)[-1].splitlines()
    for name in default_set():
        line = next((ln for ln in summary if ln.startswith(name + " ")), None)
        assert line is not None, (name, summary)
        assert " ok " in line and RATIO.search(line), line
    # each script's own table, not only the summary's line
    assert "suite vs bare PyTorch loop" in proc.stdout  # overhead
    assert "ResNet-50 training" in proc.stdout and "bare loop:" in proc.stdout
    assert "| bare torch.optim.AdamW(fused=True) |" in proc.stdout
    assert "| round | suite (samples/s, steady) |" in proc.stdout  # data_vs_bare
    assert "value check" in proc.stdout and "pass (0 wrong)" in proc.stdout  # allreduce
    assert "clock ratio suite/probe" in proc.stdout and "256-bit FMA" in proc.stdout  # cpu peak
