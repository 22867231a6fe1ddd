"""Issue 20 guarded in CI: mixed-precision training of the deepest zoo network (the quick
ResNet-101) holds every check of its record, for a few seeds and 1 and 2 threads, at a fixed
number of steps; and the same checks catch the zoo before the fix. The full sweep (every
network and framework, 20 seeds) is benchmarks/studies/mixed_precision_stability.py, whose output is
docs/studies/mixed-precision-stability.md; this runs that script, for PyTorch, at a smaller size."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import ROOT

SCRIPT = "benchmarks.studies.mixed_precision_stability"  # run as a module from ROOT
STEPS = "20"  # warm-up steps of a point; with the rest it trains 28-32 steps


def sweep(out: Path, *args: str) -> list[dict[str, Any]]:
    proc = subprocess.run(
        [sys.executable, "-m", SCRIPT, "--frameworks", "pytorch", "--networks", "resnet101",
         "--steps", STEPS, "--out", str(out), *args],
        capture_output=True, text=True, timeout=1800, cwd=ROOT,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "| pytorch | resnet101 |" in proc.stdout, proc.stdout[-3000:]
    return [json.loads(x) for x in (out / "points.jsonl").read_text().splitlines()]


@pytest.mark.pytorch
@pytest.mark.slow
def test_quick_resnet101_trains_stably_in_fp16_and_bf16(tmp_path: Path) -> None:
    points = sweep(tmp_path / "fp16", "--dtypes", "fp16", "--seeds", "3", "--threads", "1,2")
    points += sweep(tmp_path / "bf16", "--dtypes", "bf16", "--seeds", "1", "--threads", "1,2")
    assert len(points) == 8
    assert {(p["dtype"], p["threads"]) for p in points} == {
        (d, t) for d in ("fp16", "bf16") for t in (1, 2)
    }
    failed = [p for p in points if not p["passed"]]
    assert not failed, failed
    for p in points:
        assert p["status"] == "ok" and p["steps"] >= 28, p
        assert p["first_nonfinite_step"] is None and p["inference_check"]["error"] < 1.0, p
        # the threads asked for are the threads PyTorch ran with
        assert p["threads_seen"]["torch_threads"] == p["threads"], p


@pytest.mark.pytorch
@pytest.mark.slow
def test_the_checks_catch_the_zoo_before_the_fix(tmp_path: Path) -> None:
    """With every residual branch's last batch norm at scale ~1 (the zoo before issue 20)
    the same point fails: its weights blow up, the inference-mode loss with them."""
    (point,) = sweep(
        tmp_path / "before", "--dtypes", "fp16", "--seeds", "1", "--threads", "1",
        "--residual-gain", "1.0",
    )  # fmt: skip
    assert point["status"] == "ok" and not point["passed"], point
    names = {c["name"] for c in point["failed"]}
    assert "inference_loss.after_over_before_training" in names, point
    inference = point["inference_check"]
    assert inference["error"] is None or inference["error"] > 100, inference
    # the loss scale had to fall from 2**16 for a dozen steps before an update went through
    assert point["settle_steps"] >= 10, point
