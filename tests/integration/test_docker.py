"""The docker backend for real: a Docker daemon (started here if none runs) builds the pytorch
CPU image from a Debian base bootstrapped from Debian's archive, offline from a wheelhouse
filled on this host, and `dlsuite run --backend docker` runs operator tasks in it as the
image's non-root user. CI runs these (.ci/run installs docker.io and debootstrap)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from suite import images
from suite.provenance import git_info
from tests.helpers import ROOT, cli, records
from tests.integration.containers import TAG, ensure_base, ensure_daemon, ensure_image, stop_daemon

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.pytorch]


@pytest.fixture(scope="session")
def docker_client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    client, lease = ensure_daemon(tmp_path_factory.mktemp("dockerd"))
    yield client
    stop_daemon(lease)


@pytest.fixture(scope="session")
def pytorch_image(docker_client: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    return ensure_image(docker_client, "pytorch", tmp_path_factory.mktemp("build"))


def test_image_labels_and_user(docker_client: Any, pytorch_image: images.BuildResult) -> None:
    info = images.image_info(docker_client, pytorch_image.ref)
    assert pytorch_image.ref == f"dlsuite/pytorch:{TAG}"
    labels = info["labels"]
    commit, dirty = git_info()
    assert labels["org.opencontainers.image.revision"] == f"{commit}{'-dirty' if dirty else ''}"
    assert labels["org.opencontainers.image.version"] == images.suite.__version__
    assert labels["org.opencontainers.image.base.name"] == images.LOCAL_BASE
    assert labels["dlsuite.frameworks"] == "torch==2.13.0"
    assert labels["dlsuite.framework"] == "pytorch" and labels["dlsuite.cuda"] == "none"
    assert labels[images.CONTEXT_LABEL].startswith("sha256:")
    assert info["user"] == "dlsuite"
    listed = {r["ref"]: r for r in images.list_images(docker_client)}
    assert listed[pytorch_image.ref]["frameworks"] == "torch==2.13.0"


def run_gemm(out: Path, *extra: str) -> Any:
    return cli(
        "run", "--level", "operator", "--framework", "pytorch", "--quick", "--backend", "docker",
        "--benchmark", "gemm", "--dtype", "fp32", "--out", str(out), *extra,
        env={"DLSUITE_IMAGE_TAG": TAG},
    )  # fmt: skip


def test_operator_run_in_the_image(
    docker_client: Any, pytorch_image: images.BuildResult, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    proc = run_gemm(out)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    recs = records(out)
    assert recs and all(r["benchmark"]["name"] == "gemm" for r in recs)
    for r in recs:
        assert r["status"] == "ok", (r["task_id"], r.get("reason"))
        assert r["correctness"]["passed"], r["correctness"]
        assert r["backend"]["kind"] == "docker"
        assert r["backend"]["image"] == pytorch_image.ref
        assert r["backend"]["image_digest"] == pytorch_image.image_id
        assert r["backend"]["python"] == images.IMAGE_PYTHON  # the image's interpreter
        assert r["framework"]["version"].startswith("2.13.0")
    # once the worker is gone, everything in the run directory is the caller's: root's worker
    # ran as the image's non-root user, and what it wrote was taken back (on the host that
    # uid is another user, who could otherwise rewrite root's records)
    written = list((out / "tasks").glob("*.records.jsonl"))
    assert written
    every = [out, *out.rglob("*")]
    assert {p.stat().st_uid for p in every} == {os.geteuid()}, [
        (str(p), p.stat().st_uid) for p in every if p.stat().st_uid != os.geteuid()
    ]
    # the docker helper's line is in the worker session's log (logs/<session>.log)
    logs = " ".join(p.read_text() for p in (out / "logs").glob("*.log"))
    assert "[dlsuite.docker] docker run --rm --network host" in logs
    # containers never run as root: root's worker as the image's user (no --user), a
    # user's as their own uid:gid
    as_user = f"--user {os.geteuid()}:{os.getegid()}"
    assert ("--user" not in logs) if os.geteuid() == 0 else (as_user in logs), logs[-2000:]
    assert not docker_client.containers.list(all=True, filters={"label": "dlsuite.task"})


def test_timeout_kills_the_container(
    docker_client: Any, pytorch_image: images.BuildResult, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    proc = run_gemm(out, "--timeout", "1")
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    recs = records(out)
    assert recs and {r["status"] for r in recs} == {"timeout"}
    assert {r["backend"]["image"] for r in recs} == {pytorch_image.ref}
    # killed while the daemon may still be creating the container (minutes on vfs): the
    # backend's detached reaper removes it once it exists
    worker = str(next((out / "sessions").glob("*.json")))  # the container's label names it
    deadline = time.monotonic() + 600
    while docker_client.containers.list(all=True, filters={"label": f"dlsuite.task={worker}"}):
        assert time.monotonic() < deadline, "the timed-out task's container was not removed"
        time.sleep(2)


def test_missing_image_fails_every_task_with_the_fix(tmp_path: Path, docker_client: Any) -> None:
    out = tmp_path / "run"
    proc = cli(
        "run", "--level", "operator", "--framework", "numpy", "--quick", "--backend", "docker",
        "--benchmark", "gemm", "--dtype", "fp32", "--out", str(out),
        env={"DLSUITE_IMAGE_TAG": "no-such-tag"},
    )  # fmt: skip
    assert proc.returncode == 1
    recs = records(out)
    assert recs and {r["status"] for r in recs} == {"failed"}
    assert "dlsuite images build --framework numpy" in recs[0]["reason"]
    # the image it looked for, as every record of the backend names its image (was null)
    assert {r["backend"]["image"] for r in recs} == {"dlsuite/numpy:no-such-tag"}


@pytest.fixture
def tagged_image(docker_client: Any) -> Iterator[str]:
    """A tiny image of its own repository, ``dlsuite-test-tags/numpy:one`` (one file, imported),
    removed after."""
    import io
    import tarfile

    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w") as tar:
        info = tarfile.TarInfo("hello.txt")
        info.size = 2
        tar.addfile(info, io.BytesIO(b"hi"))
    ref = "dlsuite-test-tags/numpy:one"
    docker_client.api.import_image_from_data(
        data.getvalue(), repository=ref.split(":")[0], tag="one"
    )
    try:
        yield ref
    finally:
        docker_client.images.remove(ref, force=True)


def test_a_missing_tag_names_the_tags_this_machine_has(
    docker_client: Any, tagged_image: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A wrong tag is the usual reason an image is missing: the message names the tags the
    machine has of that image and how to choose one (`--tag` for `images sif`, the variable
    for a run); before, only "not found; build it", with nothing that pointed at the tag."""
    from suite.backends.docker import DockerBackend

    with pytest.raises(images.ImageError) as sif_error:
        images.image_info(docker_client, "dlsuite-test-tags/numpy:two")
    assert str(sif_error.value) == (
        "image dlsuite-test-tags/numpy:two not found (this machine has "
        "dlsuite-test-tags/numpy:one: --tag one chooses it); build it: dlsuite images build "
        "--framework numpy --tag two"
    )
    monkeypatch.setenv("DLSUITE_IMAGE_REPO", "dlsuite-test-tags")
    monkeypatch.setenv("DLSUITE_IMAGE_TAG", "two")
    with pytest.raises(images.ImageError) as run_error:
        DockerBackend("numpy", gpus=False, client=docker_client)
    assert "image dlsuite-test-tags/numpy:two not found (this machine has " in str(run_error.value)
    assert "dlsuite-test-tags/numpy:one: DLSUITE_IMAGE_TAG=one chooses it)" in str(run_error.value)
    # no image of the repository at all: nothing to point at, only the build
    with pytest.raises(images.ImageError) as none_error:
        images.image_info(docker_client, "dlsuite-test-none/numpy:1.0-cuda")
    assert str(none_error.value) == (
        "image dlsuite-test-none/numpy:1.0-cuda not found; build it: dlsuite images build "
        "--framework numpy --tag 1.0 --variant cuda"
    )


def test_a_base_neither_here_nor_pullable_is_one_line_before_any_build(
    docker_client: Any, tmp_path: Path
) -> None:
    """`images build --base` naming an image this machine lacks and Docker cannot pull (a
    misspelt name; the default debian:bookworm-slim where no registry answers): exit 2, one
    line naming --base and the local way, no wheelhouse filled and no build started. (Before:
    the wheelhouse was filled, then the build's first step failed with the registry's DNS
    error, printed as literal `[red]...[/]`, exit 1.)"""
    wheelhouse = tmp_path / "wheelhouse"
    base = "dlsuite-test/no-such-base:1"
    proc = cli(
        "images", "build", "--framework", "numpy", "--base", base, "--tag", "no-such-base",
        "--wheelhouse", str(wheelhouse), "--prepare-wheelhouse", timeout=300,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    errors = [line for line in proc.stderr.splitlines() if "error" in line]
    assert len(errors) == 1, proc.stderr
    assert f"--base {base}: not on this machine, and Docker cannot pull it" in errors[0]
    assert f"--base {images.LOCAL_BASE}" in errors[0] and "[red]" not in proc.stderr
    assert not wheelhouse.exists()  # nothing was filled for a build that cannot start
    with pytest.raises(images.ImageError):
        images.image_info(docker_client, "dlsuite/numpy:no-such-base")


def install_sh_until_pip(client: Any, uid: str, before: str = "") -> str:
    """containers/install.sh numpy in the Debian base, with no index and no wheelhouse, so
    that it stops at its first pip install (seconds): what it did before that, and then
    ``id -u dlsuite`` and whether the base's user ``ubuntu`` is still there."""
    script = (
        f"{before} bash /opt/dlsuite/src/containers/install.sh numpy; echo install.sh rc=$?; "
        "echo dlsuite uid=$(id -u dlsuite); getent passwd ubuntu || echo no user ubuntu"
    )
    out = client.containers.run(
        images.LOCAL_BASE, ["bash", "-c", script], remove=True, stderr=True,
        environment={"DLSUITE_UID": uid, "PIP_NO_INDEX": "1"},
        volumes={str(ROOT): {"bind": "/opt/dlsuite/src", "mode": "ro"}},
    )  # fmt: skip
    return str(out.decode())


def test_install_sh_makes_the_user_first_and_takes_a_bases_uid_1000(
    docker_client: Any,
) -> None:
    """The image's user is made before pip runs, so a uid that cannot be had fails the build
    at once. Ubuntu 24.04 bases (NVIDIA's CUDA images, the docs' GPU example) have the user
    `ubuntu` at uid 1000, the default --uid: it gives way to `dlsuite`. (Before: useradd
    failed "UID 1000 is not unique" after the whole pip install, so such a base never built.)
    A system account at the uid (Debian's _apt, 42) or root is refused, before pip."""
    ensure_base(docker_client)
    out = install_sh_until_pip(docker_client, "1000", "useradd --uid 1000 -m ubuntu;")
    assert "the base's user ubuntu has uid 1000: removing it for dlsuite" in out, out
    assert "dlsuite uid=1000" in out and "no user ubuntu" in out, out
    assert out.index("removing it for dlsuite") < out.index("pip install -r"), out
    assert "install.sh rc=1" in out  # then pip, with no index, stopped it
    for uid, said in (("42", "uid 42 is the base image's system account '_apt'"),
                      ("0", "DLSUITE_UID '0': the image's user must be an unprivileged uid")):  # fmt: skip
        out = install_sh_until_pip(docker_client, uid)
        assert said in out and "install.sh rc=1" in out, out
        assert "pip install" not in out and "'dlsuite': no such user" in out, out


# -- Docker's word for memory: State.OOMKilled (suite/oom.py) ----------------------------------
HOG = "b = []\nwhile True:\n    x = bytearray(16 << 20); x[::4096] = b'x' * len(x[::4096]); b.append(x)"


def helper(doc: Path, *args: str) -> subprocess.Popen[bytes]:
    """The docker backend's helper on the Debian base image (python3 only), as the backend
    starts it, labelled with ``doc`` (the session document whose evidence file it writes)."""
    from suite.backends.docker import ContainerSpec

    spec = ContainerSpec(image=images.LOCAL_BASE, argv=list(args), workdir="/",
                         labels={"dlsuite.task": str(doc)}, memory="64m")  # fmt: skip
    return subprocess.Popen(
        spec.helper_argv(), env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip


def test_dockers_oom_kill_is_evidence_and_docker_kill_is_not(
    docker_client: Any, tmp_path: Path
) -> None:
    from suite.oom import KillWitness, read_notes

    ensure_base(docker_client)
    doc = tmp_path / "sessions" / "s1.json"
    doc.parent.mkdir()
    doc.write_text("{}")
    # over the container's memory limit: the kernel kills it in Docker's cgroup, Docker says so
    proc = helper(doc, "python3", "-c", HOG)
    out = proc.communicate(timeout=300)[0].decode()
    assert proc.returncode == -signal.SIGKILL, out  # ends as the container did
    notes = read_notes(doc)
    assert len(notes) == 1, out  # the helper says what it saw
    (note,) = notes
    assert note["source"] == "Docker" and "State.OOMKilled true" in note["detail"], note
    witness = KillWitness(doc)  # what the runner reads for the task that started before
    assert witness.verdict().oom
    # docker kill: also a SIGKILL, and no statement about memory
    witness.task_started()
    proc = helper(doc, "python3", "-c", "import time; time.sleep(300)")
    deadline = time.monotonic() + 300
    while not (found := docker_client.containers.list(filters={"label": f"dlsuite.task={doc}"})):
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.2)
    found[0].kill()
    out = proc.communicate(timeout=120)[0].decode()
    assert proc.returncode == -signal.SIGKILL, out
    assert len(read_notes(doc)) == 1  # nothing new
    verdict = witness.verdict()
    assert not verdict.oom, verdict


#: what makes an image of an older suite from the test image: its worker's task schema loses
#: a property this checkout's task documents always carry (as an older schema lacked one)
OLDER_SCHEMA = (
    "import json, pathlib, suite.schemas as s; "
    "p = pathlib.Path(s.__file__).parent / 'task.schema.json'; d = json.loads(p.read_text()); "
    "d['properties'].pop('provenance'); p.write_text(json.dumps(d))"
)


def older_suite_image(client: Any, base: str, tag: str, built_from: str) -> str:
    """``dlsuite/pytorch:<tag>``: ``base`` with an older task schema, labelled as built from
    ``built_from`` (removed by the caller)."""
    import io

    dockerfile = (
        f"FROM {base}\nUSER root\n"
        f'RUN ["{images.IMAGE_PYTHON}", "-c", "{OLDER_SCHEMA}"]\nUSER dlsuite\n'
        f'LABEL org.opencontainers.image.revision="{built_from}"\n'
    )
    ref = f"dlsuite/pytorch:{tag}"
    client.images.build(fileobj=io.BytesIO(dockerfile.encode()), tag=ref, rm=True)
    return ref


def check_an_older_suites_image_says_so(client: Any, base: str, out: Path) -> None:
    """The worker of an image of an older suite refuses this checkout's task document: its
    record says the image's suite is older than the task format and gives the command that
    rebuilds the image (was "worker exited with code 1 and wrote no record", the traceback
    only in the log), and the image's other tasks fail with the same reason without a worker
    (each started one, to fail the same way)."""
    commit, _ = git_info()
    older = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "HEAD~1"], capture_output=True, text=True
    ).stdout.strip()
    tag = "test-older-suite"
    ref = older_suite_image(client, base, tag, older or "0123456789ab")
    try:
        proc = cli(
            "run", "--level", "operator", "--framework", "pytorch", "--quick", "--backend",
            "docker", "--benchmark", "gemm,softmax", "--dtype", "fp32", "--no-history", "--out",
            str(out),
            env={"DLSUITE_IMAGE_TAG": tag},
        )  # fmt: skip
    finally:
        client.images.remove(ref, force=True)
    assert proc.returncode == 1, proc.stderr[-3000:]
    recs = records(out)
    assert recs and {r["status"] for r in recs} == {"failed"}
    relation = "is older than" if older and commit else "cannot read"
    for r in recs:
        assert r["reason"].startswith(f"the suite in {ref} (commit "), r["reason"]
        assert f") {relation} this checkout's task format" in r["reason"], r["reason"]
        assert f"rebuild it: `dlsuite images build --framework pytorch --tag {tag}`" in r["reason"]
        assert "provenance" in r["reason"]
    # the first worker refused its task; the second task was not started for the same refusal
    assert [r["error"]["type"] for r in recs] == ["WorkerDied", "ImageError"]
    assert "its worker refused the task document (" in recs[0]["reason"]
    assert (
        ": not started, a worker of the same suite refused its task document ("
        in (recs[1]["reason"])
    )
    assert {r["backend"]["image"] for r in recs} == {ref}
    assert len(list((out / "sessions").glob("*.json"))) == 1


def test_an_image_of_an_older_suite_says_so_with_the_command_to_rebuild_it(
    docker_client: Any, pytorch_image: images.BuildResult, tmp_path: Path
) -> None:
    check_an_older_suites_image_says_so(docker_client, pytorch_image.ref, tmp_path / "run")
