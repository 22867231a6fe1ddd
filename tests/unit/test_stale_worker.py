"""A worker whose suite is older than the checkout's task format (an image built from an older
commit) refuses the task document and dies without a record. The record's reason then names
the image's suite and the exact command that rebuilds it, not only "worker exited with code 1
and wrote no record". The refusal here is this checkout's real worker refusing a document with
a key its schema does not know, which is what an older worker does with a newer document.
(With a real image built from an older schema: tests/integration/test_docker.py.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from suite.backends.apptainer import ApptainerBackend
from suite.backends.local import LocalBackend
from suite.runner import say_the_worker_cannot_read_its_task, worker_refused_its_task
from tests.helpers import ROOT


def refused_output(tmp_path: Path, session: bool) -> str:
    """The real worker's output for a task document from a 'newer' suite (an unknown key)."""
    task = {
        "schema_version": "1", "task_id": "operator-gemm-numpy-fp32-0123456789", "run_id": "r",
        "level": "operator", "benchmark": "gemm", "params": {}, "framework": "numpy",
        "dtype": "fp32", "device": "cpu", "backend": "local", "world_size": 1, "seed": 0,
        "measure": {}, "timeout_s": 60, "record_path": str(tmp_path / "rec.jsonl"),
        "from_a_newer_suite": True,
    }  # fmt: skip
    path = tmp_path / "task.json"
    path.write_text(json.dumps(task))
    if session:
        doc = {
            "schema_version": "1",
            "session_id": "s1",
            "progress_dir": str(tmp_path),
            "tasks": [str(path)],
        }
        path = tmp_path / "session.json"
        path.write_text(json.dumps(doc))
    done = subprocess.run(
        [sys.executable, "-m", "suite.worker", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 1 and "Traceback" in done.stderr
    return done.stdout + done.stderr


def died() -> dict[str, Any]:
    message = "worker exited with code 1 and wrote no record"
    return {"reason": message, "error": {"type": "WorkerDied", "message": message}}


@pytest.mark.parametrize("session", [False, True])
def test_the_workers_refusal_is_read_from_its_output(tmp_path: Path, session: bool) -> None:
    said = worker_refused_its_task(refused_output(tmp_path, session))
    assert said is not None and "from_a_newer_suite" in said


def test_a_crash_that_is_not_a_refusal_is_left_as_it_was(tmp_path: Path) -> None:
    log = tmp_path / "worker.log"
    log.write_text(
        'Traceback (most recent call last):\n  File "x.py", line 1, in run\n'
        "    schemas.validate(\"record\", rec)\nsuite.errors.SchemaError: status: 'x' is not one of\n"
    )
    rec = died()
    backend = LocalBackend()
    say_the_worker_cannot_read_its_task([rec], backend, [log])
    assert rec["reason"] == "worker exited with code 1 and wrote no record"
    assert backend.refused_task is None


def test_the_record_says_why_and_how_to_bring_the_worker_up_to_date(tmp_path: Path) -> None:
    log = tmp_path / "worker.log"
    log.write_text(refused_output(tmp_path, session=True))
    rec, ok = died(), {"reason": None, "status": "ok"}
    backend = LocalBackend()
    assert backend.refused_task is None
    say_the_worker_cannot_read_its_task([rec, ok], backend, [tmp_path / "no", log])
    assert rec["reason"].startswith(
        "the worker's suite cannot read this checkout's task format; reinstall the suite where "
        "the worker runs, from this checkout: its worker refused the task document ("
    )
    assert "from_a_newer_suite" in rec["reason"]
    assert rec["error"]["message"].startswith(rec["reason"] + "\nworker exited with code 1")
    assert ok == {"reason": None, "status": "ok"}
    # the backend's other tasks are recorded with this, none started again
    assert str(backend.refused_task).startswith(
        "the worker's suite cannot read this checkout's task format; reinstall the suite where "
        "the worker runs, from this checkout: not started, a worker of the same suite refused "
        "its task document ("
    )


def older_commit() -> str | None:
    done = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "HEAD~1"], capture_output=True, text=True
    )
    return done.stdout.strip() if done.returncode == 0 else None


@pytest.mark.parametrize(
    ("name", "rebuild"),
    [
        ("pytorch.sif", "dlsuite images build --framework pytorch && dlsuite images sif "
         "--framework pytorch --dir '{d}'"),
        ("pytorch-cuda.sif", "dlsuite images build --framework pytorch --variant cuda && "
         "dlsuite images sif --framework pytorch --variant cuda --dir '{d}'"),
        ("mine.sif", "dlsuite images build --framework pytorch && dlsuite images sif "
         "--framework pytorch --dir '{d}' && mv '{d}/pytorch.sif' '{d}/mine.sif'"),
    ],
)  # fmt: skip
def test_an_apptainer_sif_gets_the_command_that_remakes_it_where_it_is(
    tmp_path: Path, name: str, rebuild: str
) -> None:
    folder = tmp_path / "my images"
    folder.mkdir()
    sif = folder / name
    sif.write_bytes(b"SIF")  # not a SIF apptainer can read: no labels, no commit
    backend = ApptainerBackend("pytorch", gpus=False, sif=sif, apptainer="apptainer")
    assert backend.rebuild == rebuild.format(d=folder)
    assert backend.stale_worker_hint() == (
        f"the suite in {sif} (its commit unlabelled) cannot read this checkout's task format; "
        f"rebuild it: `{rebuild.format(d=folder)}`"
    )
    older = older_commit()
    if older is None:
        pytest.skip("this checkout has no git history to take an older commit from")
    backend.built_from = older
    assert backend.stale_worker_hint().startswith(  # type: ignore[union-attr]
        f"the suite in {sif} (commit {older[:12]}) is older than this checkout's task format"
    )
