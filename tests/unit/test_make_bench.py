"""What ``make bench`` passes to ``dlsuite run`` (``make -n``: the commands, nothing run)."""

from __future__ import annotations

import subprocess

from tests.helpers import ROOT


def make_n(*words: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["make", "-n", *words], cwd=ROOT, capture_output=True, text=True, timeout=60
    )


def run_line(proc: subprocess.CompletedProcess[str]) -> str:
    lines = [ln for ln in proc.stdout.splitlines() if "dlsuite run" in ln]
    assert len(lines) == 1, proc.stdout
    return lines[0]


def test_sizes_is_quick_or_full_and_full_is_said_explicitly() -> None:
    quick = make_n("bench", "LEVEL=network", "FRAMEWORKS=numpy")
    assert quick.returncode == 0, quick.stderr
    assert " --quick" in run_line(quick) and "--no-quick" not in run_line(quick)
    # full overrides a DLSUITE_QUICK=1 or `quick = true` the user has elsewhere
    full = make_n("bench", "SIZES=full", "FRAMEWORKS=numpy")
    assert full.returncode == 0, full.stderr
    assert " --no-quick" in run_line(full) and " --quick" not in run_line(full)


def test_a_misspelt_sizes_stops_make_before_anything_runs() -> None:
    for value in ("ful", "Quick", "quick full", ""):
        proc = make_n("bench", f"SIZES={value}")
        assert proc.returncode == 2, (value, proc.stdout)
        assert f"SIZES={value}: expected quick or full" in proc.stderr, proc.stderr
        assert "dlsuite run" not in proc.stdout and "suite.envs" not in proc.stdout
    # other targets do not read SIZES
    assert make_n("envs", "SIZES=ful").returncode == 0
