"""Test gates. `make test` runs everything this machine can run and says what it cannot:

* ``gpu`` tests need an NVIDIA GPU visible to PyTorch. Without one they are deselected and the
  summary says so in one line; with ``DLSUITE_REQUIRE_GPU=1`` (set on the GPU machine) a
  missing GPU fails the run instead.
* ``apptainer`` tests need apptainer, which CI does not install (building it takes about 15
  minutes: /work/shared/tools/install-apptainer.sh). Without it they are deselected with a
  one-line note; ``DLSUITE_REQUIRE_APPTAINER=1`` makes its absence fail the run instead.
* Everything else CI is meant to have (PyTorch, the suite, a Docker daemon) is a hard
  requirement: no skips.

`make test` runs the tests in two pytest-xdist workers: most of them wait
on subprocesses (workers, environments, dockerd, Slurm) and one worker left a 2-core machine
half idle. Modules in :data:`XDIST_GROUPS` run whole in one worker: they share an expensive
module- or session-scoped fixture (a real run, a built image) or one external resource (the
local Slurm cluster). Workers collect and deselect; they hand their notes to the controller,
which prints them (``pytest_testnodedown``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import Any

import pytest

_DESELECTED: list[str] = []

#: module file -> xdist group (one worker runs the whole group)
XDIST_GROUPS = {
    "test_docker.py": "containers",  # the session's pytorch image, built once
    "test_apptainer.py": "containers",  # the same image, then a SIF of it
    "test_slurm.py": "slurm",  # one local cluster
    "test_network.py": "network-run",  # a module-scoped real run of the quick zoo
    "test_distributed.py": "distributed-run",
    "test_e2e_operator.py": "operator-run",
    "test_report.py": "report-run",
    "test_numpy_adapter.py": "numpy-adapter",
}


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


@pytest.hookimpl(optionalhook=True)  # an xdist hook: only called where xdist runs workers
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """xdist's load-scope scheduler with :data:`XDIST_GROUPS` as the scopes: a grouped module
    goes whole to one worker, every other test is its own unit. (xdist's ``loadgroup`` marks
    do not take effect under pytest 9.2, whose ``Item.nodeid`` no longer reads the ``_nodeid``
    that xdist rewrites: measured, a grouped module's tests landed on both workers.)"""
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0].rsplit("/", 1)[-1]
            return XDIST_GROUPS.get(module, nodeid)

    return GroupScheduling(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    _gate_apptainer(config, items)
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


_APPTAINER_DESELECTED: list[int] = []


def _gate_apptainer(config: pytest.Config, items: list[pytest.Item]) -> None:
    marked = [i for i in items if i.get_closest_marker("apptainer")]
    if not marked or shutil.which("apptainer"):
        return
    if os.environ.get("DLSUITE_REQUIRE_APPTAINER") == "1":
        raise pytest.UsageError("DLSUITE_REQUIRE_APPTAINER=1 but apptainer is not on PATH")
    config.hook.pytest_deselected(items=marked)
    items[:] = [i for i in items if not i.get_closest_marker("apptainer")]
    _APPTAINER_DESELECTED.append(len(marked))


def pytest_sessionfinish(session: pytest.Session) -> None:
    """In an xdist worker: hand this worker's deselection notes to the controller."""
    output = getattr(session.config, "workeroutput", None)
    if output is not None:
        output["dlsuite_notes"] = {
            "gpu": list(_DESELECTED),
            "apptainer": list(_APPTAINER_DESELECTED),
        }


@pytest.hookimpl(optionalhook=True)  # an xdist hook: only called where xdist runs workers
def pytest_testnodedown(node: object, error: object) -> None:
    notes = getattr(node, "workeroutput", {}).get("dlsuite_notes")
    if notes and not _DESELECTED and not _APPTAINER_DESELECTED:  # every worker says the same
        _DESELECTED.extend(notes["gpu"])
        _APPTAINER_DESELECTED.extend(notes["apptainer"])


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _APPTAINER_DESELECTED:
        terminalreporter.write_line(
            f"dlsuite: {_APPTAINER_DESELECTED[0]} apptainer test(s) deselected: apptainer is not "
            "installed here (CI has none); they run where it is, required with "
            "DLSUITE_REQUIRE_APPTAINER=1"
        )
    if _DESELECTED:
        why, n = _DESELECTED
        terminalreporter.write_line(
            f"dlsuite: {n} gpu test(s) deselected: no NVIDIA GPU here ({why}); "
            "they run on a GPU machine with DLSUITE_REQUIRE_GPU=1"
        )
