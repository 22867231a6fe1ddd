"""Test gates. `make test` runs everything this machine can run and says what it cannot:

* ``gpu`` tests need an NVIDIA GPU visible to PyTorch. Without one they are deselected and the
  summary says so in one line; with ``DLSUITE_REQUIRE_GPU=1`` (set on the GPU machine) a
  missing GPU fails the run instead.
* Everything else CI is meant to have (PyTorch, the suite) is a hard requirement: no skips.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

_DESELECTED: list[str] = []


def gpu_available() -> tuple[bool, str]:
    if shutil.which("nvidia-smi") is None:
        return False, "nvidia-smi not found"
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as exc:
        return False, f"nvidia-smi failed: {exc}"
    if out.returncode != 0 or "GPU" not in out.stdout:
        return False, "nvidia-smi lists no GPU"
    return True, ""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    ok, why = gpu_available()
    if ok:
        return
    gpu_items = [i for i in items if i.get_closest_marker("gpu")]
    if not gpu_items:
        return
    if os.environ.get("DLSUITE_REQUIRE_GPU") == "1":
        raise pytest.UsageError(f"DLSUITE_REQUIRE_GPU=1 but no GPU: {why}")
    _DESELECTED.append(why)
    config.hook.pytest_deselected(items=gpu_items)
    items[:] = [i for i in items if not i.get_closest_marker("gpu")]
    _DESELECTED.append(str(len(gpu_items)))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _DESELECTED:
        why, n = _DESELECTED
        terminalreporter.write_line(
            f"dlsuite: {n} gpu test(s) deselected: no NVIDIA GPU here ({why}); "
            "they run on a GPU machine with DLSUITE_REQUIRE_GPU=1"
        )
