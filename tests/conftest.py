"""Test gates. `make test` runs everything this machine can run and says what it cannot:

* As root with apt, `make test` first installs the system packages the tests use for real
  (tests/system-deps.sh: Open MPI, Slurm and munge, Docker and debootstrap). Elsewhere the
  ``docker``, ``slurm``, ``mpi`` and ``root`` tests whose requirement is missing are deselected,
  one line each naming what is missing and the command that installs it;
  ``DLSUITE_REQUIRE_SYSTEM=1`` (CI sets it) makes a missing one fail the run instead.
* ``gpu`` tests need an NVIDIA GPU. Without one they are deselected with a one-line note;
  ``DLSUITE_REQUIRE_GPU=1`` (set on the GPU machine) makes a missing GPU fail the run.
* ``apptainer`` tests need apptainer (CI installs it with containers/install-apptainer.sh and
  sets ``DLSUITE_REQUIRE_APPTAINER=1``, which makes its absence fail the run). Elsewhere,
  without it, they are deselected with a one-line note.
* Everything else (PyTorch, the suite, the frameworks' environments, which the tests build) is
  a hard requirement: no skips.

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

#: module file -> xdist group (one worker runs the whole group)
XDIST_GROUPS = {
    "test_docker.py": "containers",  # the session's pytorch image, built once
    "test_apptainer.py": "containers",  # the same image, then a SIF of it
    "test_slurm.py": "slurm",  # one local cluster
    "test_reframe.py": "reframe",  # a module-scoped ReFrame session (and a cluster of its own)
    "test_network.py": "network-run",  # a module-scoped real run of the quick zoo
    "test_distributed.py": "distributed-run",
    "test_e2e_operator.py": "operator-run",
    "test_report.py": "report-run",
    "test_numpy_adapter.py": "numpy-adapter",
}


@pytest.fixture(autouse=True, scope="session")
def _tests_history_store(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Every `dlsuite run` of the tests appends to a history store of this session's own,
    never to the user's (DLSUITE_HISTORY; suite/history/)."""
    os.environ["DLSUITE_HISTORY"] = str(tmp_path_factory.mktemp("history") / "history.sqlite")


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


def _docker_usable() -> str:
    """Why the docker tests cannot run here ("" when they can): a daemon that answers, or
    dockerd and debootstrap installed and root to start it (tests/integration/containers.py)."""
    if (
        shutil.which("docker")
        and subprocess.run(["docker", "version"], capture_output=True, timeout=30).returncode == 0
    ):
        return "" if shutil.which("debootstrap") else "debootstrap is not installed"
    missing = [p for p in ("dockerd", "debootstrap") if shutil.which(p) is None]
    if missing:
        return f"{' and '.join(missing)} not installed"
    return "" if os.geteuid() == 0 else "no Docker daemon answers and starting dockerd needs root"


def _slurm_usable() -> str:
    missing = [p for p in ("slurmctld", "slurmd", "munged") if shutil.which(p) is None]
    if missing:
        return f"{', '.join(missing)} not installed"
    return "" if os.geteuid() == 0 else "the local test cluster needs root (munge, slurmd)"


#: marker -> (why its tests cannot run here, "" when they can; the packages that provide it)
SYSTEM = {
    "docker": (_docker_usable, "docker.io debootstrap"),
    "slurm": (_slurm_usable, "slurm-wlm munge"),
    "mpi": (lambda: "" if shutil.which("mpirun") else "mpirun not installed", "openmpi-bin"),
    "root": (
        lambda: (
            ""
            if os.geteuid() == 0
            else "not root (the test mounts a tmpfs, runs a step as nobody or makes cgroups)"
        ),
        "",
    ),
}
#: one line per deselected group, printed at the end (xdist workers hand theirs over)
_NOTES: list[str] = []


def _deselect(config: pytest.Config, items: list[pytest.Item], marker: str, note: str) -> None:
    marked = [i for i in items if i.get_closest_marker(marker)]
    if not marked:
        return
    config.hook.pytest_deselected(items=marked)
    items[:] = [i for i in items if not i.get_closest_marker(marker)]
    _NOTES.append(f"dlsuite: {len(marked)} {marker} test(s) deselected: {note}")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect, with one line each, what this machine cannot run; where a requirement says
    it must (CI), its absence fails the run instead."""
    require_system = os.environ.get("DLSUITE_REQUIRE_SYSTEM") == "1"
    for marker, (usable, packages) in SYSTEM.items():
        if not any(i.get_closest_marker(marker) for i in items):
            continue
        why = usable()
        if not why:
            continue
        if require_system:
            raise pytest.UsageError(
                f"DLSUITE_REQUIRE_SYSTEM=1 but the {marker} tests cannot run: {why}"
            )
        how = (
            f"`sudo bash tests/system-deps.sh` installs {packages} (`make test` runs it as root)"
            if packages
            else "run `make test` as root"
        )
        _deselect(config, items, marker, f"{why}; {how}; required with DLSUITE_REQUIRE_SYSTEM=1")
    if any(i.get_closest_marker("apptainer") for i in items) and not shutil.which("apptainer"):
        if os.environ.get("DLSUITE_REQUIRE_APPTAINER") == "1":
            raise pytest.UsageError("DLSUITE_REQUIRE_APPTAINER=1 but apptainer is not on PATH")
        _deselect(
            config, items, "apptainer",
            "apptainer is not installed here (on Debian 12: sudo bash "
            "containers/install-apptainer.sh, docs/guide/apptainer.md; CI installs it); required with "
            "DLSUITE_REQUIRE_APPTAINER=1",
        )  # fmt: skip
    if any(i.get_closest_marker("gpu") for i in items):
        ok, why = gpu_available()
        if not ok:
            if os.environ.get("DLSUITE_REQUIRE_GPU") == "1":
                raise pytest.UsageError(f"DLSUITE_REQUIRE_GPU=1 but no GPU: {why}")
            _deselect(
                config, items, "gpu",
                f"no NVIDIA GPU here ({why}); they run on a GPU machine with DLSUITE_REQUIRE_GPU=1",
            )  # fmt: skip


def pytest_sessionfinish(session: pytest.Session) -> None:
    """In an xdist worker: hand this worker's deselection notes to the controller."""
    output = getattr(session.config, "workeroutput", None)
    if output is not None:
        output["dlsuite_notes"] = list(_NOTES)


@pytest.hookimpl(optionalhook=True)  # an xdist hook: only called where xdist runs workers
def pytest_testnodedown(node: object, error: object) -> None:
    notes = getattr(node, "workeroutput", {}).get("dlsuite_notes")
    if notes and not _NOTES:  # every worker collects, and deselects, the same
        _NOTES.extend(notes)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for line in _NOTES:
        terminalreporter.write_line(line)
