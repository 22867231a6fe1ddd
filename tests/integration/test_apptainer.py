"""The apptainer backend for real: the pytorch image (tests/integration/containers.py) saved with
the Docker SDK, converted with `apptainer build pytorch.sif docker-archive://...`, and
`dlsuite run --backend apptainer` runs an operator task in the SIF.

Marked ``apptainer``: CI has no apptainer (building it takes about 15 minutes), so there these
tests are deselected with a note (tests/conftest.py); they run where apptainer is installed."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from suite import images
from tests.helpers import cli, records
from tests.integration.containers import TAG, ensure_daemon, ensure_image, stop_daemon

pytestmark = [pytest.mark.apptainer, pytest.mark.docker, pytest.mark.slow, pytest.mark.pytorch]


@pytest.fixture(scope="module")
def pytorch_sif(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    client, started = ensure_daemon(tmp_path_factory.mktemp("dockerd"))
    try:
        ensure_image(client, "pytorch", tmp_path_factory.mktemp("build"))
        directory = tmp_path_factory.mktemp("images")
        yield images.build_sif("pytorch", TAG, directory)
    finally:
        stop_daemon(started)


def test_operator_run_in_the_sif(pytorch_sif: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = cli(
        "run", "--level", "operator", "--framework", "pytorch", "--quick",
        "--backend", "apptainer", "--benchmark", "gemm", "--dtype", "fp32", "--out", str(out),
        env={"DLSUITE_IMAGE_DIR": str(pytorch_sif.parent)},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    recs = records(out)
    assert recs
    for r in recs:
        assert r["status"] == "ok", (r["task_id"], r.get("reason"))
        assert r["correctness"]["passed"], r["correctness"]
        assert r["backend"]["kind"] == "apptainer"
        assert r["backend"]["image"] == str(pytorch_sif)
        assert r["backend"]["image_digest"] == images.sif_digest(pytorch_sif)
        assert r["backend"]["python"] == images.IMAGE_PYTHON
        assert r["framework"]["version"].startswith("2.13.0")


def test_sif_carries_the_image_labels(pytorch_sif: Path) -> None:
    import json
    import subprocess

    out = subprocess.run(
        [images.apptainer_binary(), "inspect", "--json", "--labels", str(pytorch_sif)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    doc: Any = json.loads(out)
    labels = doc["data"]["attributes"]["labels"]
    assert labels["dlsuite.framework"] == "pytorch"
    assert labels["dlsuite.frameworks"] == "torch==2.13.0"
