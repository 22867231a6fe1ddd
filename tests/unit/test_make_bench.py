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


def test_framework_and_frameworks_are_one_setting_in_every_target() -> None:
    # the README spells it FRAMEWORK= for conformance, images and sif; bench read only
    # FRAMEWORKS= and ran PyTorch for `make bench FRAMEWORK=tensorflow`
    assert "--framework tensorflow " in run_line(make_n("bench", "FRAMEWORK=tensorflow"))
    assert "--framework jax,numpy " in run_line(make_n("bench", "FRAMEWORKS=jax,numpy"))
    assert "--framework mxnet " in run_line(make_n("bench", "FRAMEWORK=mxnet", "FRAMEWORKS=mxnet"))
    assert "--framework pytorch " in run_line(make_n("bench"))
    images = make_n("images", "FRAMEWORKS=jax")
    assert "images build --framework jax " in images.stdout, images.stdout
    conformance = make_n("conformance", "FRAMEWORKS=numpy,jax")
    assert "for fw in numpy jax;" in conformance.stdout, conformance.stdout
    explain = make_n("explain", "FRAMEWORK=jax")
    assert "--frameworks jax " in explain.stdout, explain.stdout


def test_framework_and_frameworks_that_disagree_stop_make() -> None:
    proc = make_n("bench", "FRAMEWORKS=jax", "FRAMEWORK=numpy")
    assert proc.returncode == 2
    assert "FRAMEWORKS=jax and FRAMEWORK=numpy disagree" in proc.stderr, proc.stderr
    assert "dlsuite run" not in proc.stdout


def test_world_reaches_a_comma_separated_level_list_with_distributed() -> None:
    line = run_line(make_n("bench", "LEVEL=operator,distributed", "WORLD=4"))
    assert "--level operator,distributed " in line and "--world-size 4" in line
    assert "--world-size" not in run_line(make_n("bench", "LEVEL=operator,network", "WORLD=4"))


def test_make_help_prints_the_opening_comment_block() -> None:
    proc = make_n("help")
    assert proc.returncode == 0, proc.stderr
    out = subprocess.run(["make", "-s", "help"], cwd=ROOT, capture_output=True, text=True).stdout
    assert out.splitlines()[1].startswith("  make bench "), out
    assert "make gpu-check" in out and "#" not in out.split("\n", 1)[1][:200]
    assert "PYTHON" not in out  # the block only, not the variables after it
