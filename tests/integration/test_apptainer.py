"""The apptainer backend for real, run the way clusters run Apptainer: as an unprivileged user
(never root), from a SIF made of the pytorch image (tests/integration/containers.py: saved with
the Docker SDK, `apptainer build pytorch.sif docker-archive://...`).

* `dlsuite images sif --check-only` runs the SIF's check (operator gemm fp32) with `--backend
  apptainer` as that user: records ok, correct, naming the SIF's digest, written by its uid;
* on a local two-node Slurm cluster, `--backend apptainer --launcher srun --nodes 2`: srun
  starts one container per rank, one rank on each node; the records name the job, both nodes
  and the SIF's digest.

Marked ``apptainer``: where apptainer is not installed these tests are deselected with a note
(tests/conftest.py); `DLSUITE_REQUIRE_APPTAINER=1` (CI) makes its absence fail the run.

The user is ``dlsuite-check`` (created when missing; as a non-root caller, that caller). It
needs an interpreter it can run with the suite's dependencies: this one when it can (a
cluster's shared file system), else a virtual environment of the system's python3 made once
under /var/tmp (a root's pyenv under /root is out of its reach): images.check_interpreter.
It runs the suite from this checkout, or from a copy under /var/tmp where it cannot read the
checkout (one under /root, or in the 0700 directory `mktemp -d` makes): images.check_cwd.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from suite import images
from tests.helpers import cli, records
from tests.integration.containers import TAG, ensure_daemon, ensure_image, stop_daemon
from tests.integration.test_slurm import cluster  # noqa: F401 - the local two-node cluster

pytestmark = [pytest.mark.apptainer, pytest.mark.docker, pytest.mark.slow, pytest.mark.pytorch]


@pytest.fixture(scope="module")
def user() -> images.RunAs | None:
    return images.check_user()


@pytest.fixture(scope="module")
def user_python(user: images.RunAs | None) -> str:
    """An interpreter the check user can run (images.check_interpreter: this one, or one made
    for it from the system's python3)."""
    return images.check_interpreter(user)


@pytest.fixture(scope="module")
def pytorch_sif(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The pytorch SIF in a directory every user can read (pytest's own are root's only)."""
    client, lease = ensure_daemon(tmp_path_factory.mktemp("dockerd"))
    directory = Path(tempfile.mkdtemp(prefix="dlsuite-test-sif-", dir="/tmp"))
    os.chmod(directory, 0o755)
    try:
        ensure_image(client, "pytorch", tmp_path_factory.mktemp("build"))
        with pytest.MonkeyPatch.context() as mp:
            # mksquashfs compresses on every core; the tests run one xdist worker per core, and
            # the other worker's timing tests read a starved process beside it (a PyTorch fp16
            # batch norm's timer check read 52.7 after 35.7 s of rounds that take 0.3 s).
            # zstd at level 3, not Apptainer's gzip: mksquashfs on one processor here took 13 s
            # against 146 (a 490 MB SIF against 477; zstd's own default, level 15, took 226 s),
            # and the SIF runs as root and unpacked for the unprivileged user alike
            # (docs/guide/apptainer.md); users' SIFs keep gzip, which every kernel reads
            mp.setenv("APPTAINER_MKSQUASHFS_ARGS", "-processors 1 -comp zstd -Xcompression-level 3")
            sif = images.build_sif("pytorch", TAG, directory)
        yield sif
    finally:
        stop_daemon(lease)
        shutil.rmtree(directory, ignore_errors=True)


def user_dir(user: images.RunAs | None, name: str) -> Path:
    """A directory under /tmp the check user owns (its runs write there)."""
    path = Path(tempfile.mkdtemp(prefix=f"dlsuite-test-{name}-", dir="/tmp"))
    os.chmod(path, 0o755)
    if user is not None:
        os.chown(path, user.uid, user.gid)
    return path


def test_sif_check_as_an_unprivileged_user(
    pytorch_sif: Path, user: images.RunAs | None, user_python: str
) -> None:
    out = user_dir(user, "sif-check")
    try:
        proc = cli(
            "images", "sif", "--framework", "pytorch", "--tag", TAG, "--dir",
            str(pytorch_sif.parent), "--check-only", "--check-out", str(out),
            "--python", user_python, timeout=900,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        summary = json.loads((out / "sif-summary.json").read_text())
        (row,) = summary["frameworks"]
        assert row["digest"] == images.sif_digest(pytorch_sif)
        assert [c["check"] for c in row["checks"]] == ["operator gemm fp32"]
        assert row["checks"][0]["passed"], row["checks"]
        run = out / "pytorch" / "check0"
        if user is not None:  # written by the unprivileged user, not root
            assert summary["user"] == user.name and summary["uid"] == user.uid != 0
            assert (run / "results.jsonl").stat().st_uid == user.uid
        recs = records(run)
        assert len(recs) == 1
        for r in recs:
            assert r["status"] == "ok", (r["task_id"], r.get("reason"))
            assert r["correctness"]["passed"], r["correctness"]
            assert r["dtype"] == "fp32" and r["benchmark"]["name"] == "gemm"
            assert r["backend"]["kind"] == "apptainer"
            assert r["backend"]["image"] == str(pytorch_sif)
            assert r["backend"]["image_digest"] == images.sif_digest(pytorch_sif)
            assert r["backend"]["python"] == images.IMAGE_PYTHON
            assert r["framework"]["version"].startswith("2.13.0")
    finally:
        shutil.rmtree(out, ignore_errors=True)


@pytest.mark.slurm
def test_two_nodes_one_container_per_rank(
    pytorch_sif: Path,
    user: images.RunAs | None,
    user_python: str,
    cluster: dict[str, str],  # noqa: F811 - the fixture imported above
) -> None:
    """`--backend apptainer --launcher srun --nodes 2`, as Slurm sites run Apptainer: the job
    runs the suite on node1, srun starts one `apptainer exec` per rank, rank 0 on node1 and
    rank 1 on node2, and the records name the job, both nodes and the SIF's digest."""
    out = user_dir(user, "srun")
    run_dir = out / "run"
    env = images.user_environment(user)
    env.update(cluster, DLSUITE_IMAGE_DIR=str(pytorch_sif.parent))
    try:
        proc = subprocess.run(
            [user_python, "-m", "suite", "run", "--site", "local", "--backend", "apptainer",
             "--launcher", "srun", "--nodes", "2", "--world-size", "2", "--level",
             "distributed", "--framework", "pytorch", "--benchmark", "allreduce", "--quick",
             "--out", str(run_dir)],
            capture_output=True, text=True, timeout=900, env=env,
            cwd=images.check_cwd(user), **images.as_user_kwargs(user),
        )  # fmt: skip
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        recs = records(run_dir)
        assert recs and {r["status"] for r in recs} == {"ok"}
        jobs: Any = json.loads((run_dir / "slurm" / "jobs.json").read_text())
        (sub,) = jobs["submissions"]
        for r in recs:
            assert r["correctness"]["passed"], r["correctness"]
            assert r["backend"]["kind"] == "apptainer"
            assert r["backend"]["image_digest"] == images.sif_digest(pytorch_sif)
            s = r["scheduler"]
            assert s["array_job_id"] == sub["job_id"] and s["nodelist"] == "node[1-2]"
            d = r["distributed"]
            assert d["launcher"] == "srun" and d["world_size"] == 2
            assert [(x["rank"], x["node"]) for x in d["ranks"]] == [(0, "node1"), (1, "node2")]
        script = (run_dir / "slurm" / "s1" / "job.sbatch").read_text()
        assert "#SBATCH --nodes=2\n" in script
        # one container per rank: each rank's `apptainer exec` unpacked the SIF for itself
        # (no squashfuse for a user here: docs/guide/apptainer.md)
        logs = "".join(p.read_text() for p in (run_dir / "slurm" / "s1").glob("part-*/logs/*"))
        assert logs.count("Converting SIF file to temporary sandbox") == 2, logs[-2000:]
        if user is not None:
            assert (run_dir / "results.jsonl").stat().st_uid == user.uid
    finally:
        shutil.rmtree(out, ignore_errors=True)


def test_sif_carries_the_image_labels(pytorch_sif: Path) -> None:
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
    assert labels["dlsuite.variant"] == "cpu"


@pytest.mark.parametrize(
    ("task", "before"),
    [
        (["--level", "operator", "--benchmark", "gemm", "--dtype", "fp32"],
         "(worker exited with code 255 and wrote no record)"),
        (["--level", "distributed", "--benchmark", "allreduce", "--world-size", "2"],
         "(rank(s) [0, 1] wrote no record: the launcher exited with code 255"),
    ],
    ids=["one-rank", "two-ranks"],
)  # fmt: skip
def test_a_sif_apptainer_cannot_open_says_so_in_the_reason(
    task: list[str], before: str, tmp_path: Path
) -> None:
    """A SIF Apptainer cannot mount (a copy cut short, a file that is no image): each task's
    record names Apptainer's own `FATAL:` line, which the run's table shows. Before, the
    reason was only "worker exited with code 255 and wrote no record", or for two ranks
    "... (a rank crashed or was killed)"; the cause was in the log alone. Needs no Docker and
    no built image."""
    sif_dir = tmp_path / "images"
    sif_dir.mkdir()
    (sif_dir / "numpy.sif").write_bytes(b"not a SIF, a file cut short\n" * 100)
    out = tmp_path / "run"
    proc = cli(
        "run", *task, "--quick", "--framework", "numpy", "--backend", "apptainer",
        "--out", str(out), "--no-history",
        env={"DLSUITE_IMAGE_DIR": str(sif_dir)}, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr[-2000:]
    (rec,) = records(out)
    assert rec["status"] == "failed", rec
    assert rec["reason"].startswith("apptainer could not start the worker: FATAL: "), rec["reason"]
    assert "image format not recognized" in rec["reason"], rec["reason"]
    assert before in rec["reason"], rec["reason"]
    assert "apptainer could not start the worker" in proc.stdout


def test_images_list_shows_the_sifs_also_where_docker_is_not(tmp_path: Path) -> None:
    """A cluster's login node has SIFs and no Docker: `images list` lists the SIFs of the
    image directory with their labels (a file Apptainer cannot read, with none), and says in
    one note that Docker is not there. Before, it stopped with "no Docker daemon answers ...;
    start one" (exit 2) and listed no SIF anywhere."""
    sandbox = tmp_path / "sandbox"
    (sandbox / ".singularity.d").mkdir(parents=True)
    labels = {"dlsuite.framework": "numpy", "dlsuite.frameworks": "numpy==2.0",
              "dlsuite.variant": "cpu", "org.opencontainers.image.revision": "abc123"}  # fmt: skip
    (sandbox / ".singularity.d" / "labels.json").write_text(json.dumps(labels))
    sifs = tmp_path / "sifs"
    sifs.mkdir()
    subprocess.run(
        [images.apptainer_binary(), "build", str(sifs / "numpy.sif"), str(sandbox)],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    (sifs / "jax.sif").write_bytes(b"cut short")
    env = {"DOCKER_HOST": f"unix://{tmp_path}/no-daemon.sock", "DLSUITE_IMAGE_DIR": str(sifs)}
    proc = cli("images", "list", "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    rows = {r["ref"]: r for r in json.loads(proc.stdout)}
    assert set(rows) == {str(sifs / "numpy.sif"), str(sifs / "jax.sif")}
    numpy = rows[str(sifs / "numpy.sif")]
    assert (numpy["id"], numpy["framework"], numpy["frameworks"]) == ("sif", "numpy", "numpy==2.0")
    assert numpy["revision"] == "abc123" and numpy["variant"] == "cpu"
    assert rows[str(sifs / "jax.sif")]["framework"] is None
    (note,) = proc.stderr.strip().splitlines()
    assert "no Docker daemon answers" in note and note.endswith(f"the SIFs in {sifs} only")


def tiny_sif(directory: Path, name: str, sleep_s: float) -> Path:
    """A SIF of a few files (sh, sleep and their libraries) whose "interpreter" at the image's
    path only sleeps and exits 3: a worker that starts, lives a while, writes no record."""
    root = Path(tempfile.mkdtemp(prefix="dlsuite-test-rootfs-"))
    try:
        for binary in ("/bin/dash", "/bin/sleep"):
            libs = subprocess.run(["ldd", binary], capture_output=True, text=True).stdout
            for path in [binary, *(w for w in libs.split() if w.startswith("/"))]:
                (root / path.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(path, root / path.lstrip("/"))
        (root / "bin" / "sh").symlink_to("dash")
        (root / "tmp").mkdir()
        python = root / images.IMAGE_PYTHON.lstrip("/")
        python.parent.mkdir(parents=True)
        python.write_text(f"#!/bin/sh\nsleep {sleep_s}\nexit 3\n")
        python.chmod(0o755)
        sif = directory / name
        subprocess.run(
            [shutil.which("apptainer") or "apptainer", "build", "-F", str(sif), str(root)],
            check=True, capture_output=True, timeout=300,
        )  # fmt: skip
        return sif
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_a_worker_start_that_unpacks_the_sif_says_so_once(
    user: images.RunAs | None, user_python: str
) -> None:
    """As a user who cannot mount SIFs (no squashfuse, as here), Apptainer unpacks the SIF at
    each worker's start: a minute or more for a framework's image, and nothing on the screen
    where the output is not a terminal. The run says so in one line, once for the run's
    sessions of that SIF (two here: the first task's failure ends its session). Where the SIF
    is mounted instead, it says nothing. Needs no Docker and no built image."""
    sif_dir = user_dir(user, "unpack-sif")
    run_dir = user_dir(user, "unpack-run") / "run"
    try:
        sif = tiny_sif(sif_dir, "numpy.sif", sleep_s=2)
        env = images.user_environment(user)
        env.update(DLSUITE_IMAGE_DIR=str(sif_dir), PYTHONPATH=str(images.check_cwd(user)))
        proc = subprocess.run(
            [user_python, "-m", "suite", "run", "--backend", "apptainer", "--framework",
             "numpy", "--level", "operator", "--benchmark", "gemm,softmax", "--quick",
             "--dtype", "fp32", "--device", "cpu", "--no-history", "--out", str(run_dir)],
            capture_output=True, text=True, timeout=600, env=env,
            cwd=images.check_cwd(user), **images.as_user_kwargs(user),
        )  # fmt: skip
        assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
        recs = records(run_dir)
        assert len(recs) == 2 and {r["status"] for r in recs} == {"failed"}
        assert {r["worker"]["session_id"] for r in recs} == {
            p.stem for p in (run_dir / "sessions").glob("*.json")
        }
        assert len({r["worker"]["session_id"] for r in recs}) == 2
        logs = "".join(p.read_text() for p in (run_dir / "logs").glob("s*.log"))
        said = [line for line in proc.stderr.splitlines() if line.startswith("apptainer: ")]
        if "Converting SIF file to temporary sandbox" in logs:
            assert said == [
                "apptainer: this user cannot mount SIFs here, so each worker's start first "
                f"unpacks numpy.sif ({sif.stat().st_size / 2**20:.0f} MB) into a temporary "
                "sandbox in $TMPDIR (docs/guide/apptainer.md); for a framework's image that "
                "takes a minute or more"
            ], proc.stderr
        else:
            assert said == [], proc.stderr
    finally:
        shutil.rmtree(sif_dir, ignore_errors=True)
        shutil.rmtree(run_dir.parent, ignore_errors=True)
