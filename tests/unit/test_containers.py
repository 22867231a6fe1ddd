"""Images and the container backends, rendered and compared as text (no daemon, no apptainer):
the generated Dockerfiles and Apptainer.def files are in sync, the build arguments per variant,
the build context, the `docker run` / `apptainer exec` command lines per launcher."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from suite import envs, images
from suite.adapters import ADAPTERS
from suite.adapters.base import Adapter
from suite.backends.apptainer import ApptainerBackend
from suite.backends.container import InsideCommand
from suite.backends.docker import FORWARD_ENV, ContainerSpec, DockerBackend
from suite.backends.docker_run import parse
from suite.cli import main
from suite.config import resolve
from suite.errors import ConfigError
from suite.launchers import LAUNCHERS
from suite.provenance import SOURCE_ROOT, tree_commit

PY = images.IMAGE_PYTHON
FRAMEWORKS = ["horovod", "jax", "mxnet", "numpy", "pytorch", "tensorflow"]


# ----------------------------------------------------------------------- generated files


def test_every_framework_has_a_recipe_and_a_dockerfile() -> None:
    assert set(FRAMEWORKS) <= set(images.image_frameworks())
    for fw in images.image_frameworks():
        assert images.dockerfile_path(fw).is_file(), fw
        assert images.apptainer_def_path(fw).is_file(), fw


def test_dockerfiles_match_the_template() -> None:
    assert images.sync_dockerfiles(check=True) == []
    assert main(["images", "dockerfiles", "--check"]) == 0


def test_apptainer_defs_match_the_dockerfiles() -> None:
    assert images.sync_apptainer_defs(check=True) == []
    assert main(["images", "apptainer-def", "--check"]) == 0


def test_check_fails_on_a_stale_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    recipes = tmp_path / "containers"
    shutil.copytree(SOURCE_ROOT / "containers", recipes)
    monkeypatch.setenv("DLSUITE_CONTAINERS_DIR", str(recipes))
    (recipes / "pytorch" / "Apptainer.def").write_text("Bootstrap: docker\nFrom: edited\n")
    (recipes / "jax" / "Dockerfile").write_text("FROM edited\n")
    assert main(["images", "apptainer-def", "--check"]) == 1
    assert main(["images", "dockerfiles", "--check"]) == 1
    err = capsys.readouterr().err
    assert "pytorch/Apptainer.def: out of sync" in err and "jax/Dockerfile: out of sync" in err
    assert (recipes / "jax" / "Dockerfile").read_text() == "FROM edited\n"  # --check wrote nothing
    assert main(["images", "dockerfiles"]) == 0
    assert main(["images", "apptainer-def"]) == 0
    assert images.sync_dockerfiles(check=True) == images.sync_apptainer_defs(check=True) == []


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_dockerfile_per_framework(fw: str) -> None:
    text = images.dockerfile_path(fw).read_text()
    assert "ARG BASE_IMAGE=debian:bookworm-slim\nFROM ${BASE_IMAGE}\n" in text
    assert f"RUN bash /opt/dlsuite/src/containers/install.sh {fw}\nUSER dlsuite\n" in text
    assert f'LABEL dlsuite.framework="{fw}"' in text
    for label in (
        "org.opencontainers.image.revision",
        "org.opencontainers.image.version",
        "dlsuite.frameworks",
        "dlsuite.cuda",
    ):
        assert f"LABEL {label}=" in text
    assert f'ENTRYPOINT ["{PY}", "-m", "suite.worker"]' in text
    apt_for = {"horovod": "g++ make python3-dev", "mxnet": "libgomp1 libquadmath0 libstdc++6"}
    expected = apt_for.get(fw, "")
    apt = f'ARG APT_PACKAGES="{expected}"'
    assert apt in text


def _def_sections(text: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {"header": []}
    current = "header"
    for line in text.splitlines():
        if line.startswith("%"):
            current = line.split()[0]
            out[current] = []
        elif not line.startswith("#"):
            out[current].append(line)
    return out


def test_apptainer_def_is_buildable_text() -> None:
    text = images.apptainer_def_path("horovod").read_text()
    # Apptainer alone: from the suite's base SIF, not Docker Hub
    assert "Bootstrap: localimage\nFrom: {{ BASE_SIF }}\n" in text
    assert "Bootstrap: docker" not in text and "debian:bookworm-slim" not in text
    assert "%files\n. /opt/dlsuite/src\n" in text
    assert 'export APT_PACKAGES="{{ APT_PACKAGES }}"\n' in text  # install.sh must see it
    assert "\nAPT_PACKAGES=g++ make python3-dev\n" in text  # ... its default in %arguments
    assert '[ -z "{{ PIP_FIND_LINKS }}" ] || export PIP_FIND_LINKS="{{ PIP_FIND_LINKS }}"' in text
    assert "bash /opt/dlsuite/src/containers/install.sh horovod\n" in text
    assert "su -" not in text  # Docker's USER has no meaning in %post
    assert "dlsuite.framework horovod\n" in text  # Apptainer's `key value` labels
    assert "org.opencontainers.image.revision {{ DLSUITE_GIT_COMMIT }}\n" in text
    assert "${" not in text.split("%labels", 1)[1].split("%post", 1)[0]
    assert 'echo "dlsuite.variant ${DLSUITE_VARIANT:-cpu}" >>"$APPTAINER_LABELS"' in text
    assert f'exec {PY} -m suite.worker "$@"' in text


@pytest.mark.parametrize("fw", images.image_frameworks())
def test_apptainer_def_arguments_are_the_dockerfiles(fw: str) -> None:
    """Every Dockerfile build argument is an Apptainer build argument with the same default
    (BASE_IMAGE: BASE_SIF), and every {{ NAME }} the definition uses has one: Apptainer stops
    at an undefined one."""
    import re

    dockerfile = images.dockerfile_path(fw).read_text()
    docker_args = dict(re.findall(r"^ARG (\w+)(?:=(.*))?$", dockerfile, re.M))
    docker_args = {k: v.strip('"') for k, v in docker_args.items() if k != "BASE_IMAGE"}
    text = images.apptainer_def_path(fw).read_text()
    sections = _def_sections(text)
    arguments = dict(line.split("=", 1) for line in sections["%arguments"] if line.strip())
    assert arguments == {"BASE_SIF": images.BASE_SIF, **docker_args}
    used = set(re.findall(r"\{\{ (\w+) \}\}", text))
    assert used <= set(arguments) and "BASE_SIF" in used
    assert [x for x in sections["header"] if x.strip()] == [
        "Bootstrap: localimage", "From: {{ BASE_SIF }}",
    ]  # fmt: skip


def test_base_def_bootstraps_what_bootstrap_sh_does() -> None:
    """containers/base/Apptainer.def (debootstrap) holds the packages containers/base/
    bootstrap.sh puts in the Docker base, from the same suite; and it is in every context."""
    import re

    text = images.base_def_path().read_text()
    script = (SOURCE_ROOT / "containers" / "base" / "bootstrap.sh").read_text()
    include = re.search(r"--include=(\S+)", script)
    assert include is not None
    sections = _def_sections(text)
    header = dict(x.split(": ", 1) for x in sections["header"] if x.strip())
    assert header["Bootstrap"] == "debootstrap"
    assert header["Include"].split() == include.group(1).split(",")
    assert header["OSVersion"] == "{{ SUITE }}" and header["MirrorURL"] == "{{ MIRROR }}"
    assert "SUITE=bookworm" in sections["%arguments"]
    assert re.search(r"^suite=\$\{2:-bookworm\}", script, re.M)


def test_def_build_command() -> None:
    assert images.def_build_command(
        Path("/w/pytorch.sif"), Path("/w/c/containers/pytorch/Apptainer.def"),
        {"BASE_SIF": "/i/dlsuite-base.sif", "PIP_FIND_LINKS": "http://127.0.0.1:8000/"},
    ) == [
        "apptainer", "build", "--fakeroot", "--force",
        "--build-arg", "BASE_SIF=/i/dlsuite-base.sif",
        "--build-arg", "PIP_FIND_LINKS=http://127.0.0.1:8000/",
        "/w/pytorch.sif", "/w/c/containers/pytorch/Apptainer.def",
    ]  # fmt: skip


# ------------------------------------------------------------------------ build arguments


@pytest.fixture
def fixed_provenance(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(images, "git_info", lambda: ("abc123", False))
    monkeypatch.setattr(images, "now_iso", lambda: "2026-01-01T00:00:00.000+00:00")


COMMON = {
    "DLSUITE_VERSION": images.suite.__version__,
    "DLSUITE_GIT_COMMIT": "abc123",
    "DLSUITE_CREATED": "2026-01-01T00:00:00.000+00:00",
    "DLSUITE_UID": "1000",
}


@pytest.mark.parametrize(
    ("fw", "opts", "expected"),
    [
        pytest.param(
            "pytorch",
            images.BuildOptions(),
            {"BASE_IMAGE": "debian:bookworm-slim", "DLSUITE_FRAMEWORKS": "torch==2.13.0"},
            id="cpu-default",
        ),
        pytest.param(
            "pytorch",
            images.BuildOptions(
                base="nvidia/cuda:12.8.1-cudnn-runtime-ubuntu24.04",
                index_url="https://pypi.site.example/simple",
                extra_index_url="https://download.pytorch.org/whl/cu128",
                trusted_host="pypi.site.example",
                uid=4242,
            ),
            {
                "BASE_IMAGE": "nvidia/cuda:12.8.1-cudnn-runtime-ubuntu24.04",
                "DLSUITE_FRAMEWORKS": "torch==2.13.0",
                "DLSUITE_UID": "4242",
                "PIP_INDEX_URL": "https://pypi.site.example/simple",
                "PIP_EXTRA_INDEX_URL": "https://download.pytorch.org/whl/cu128",
                "PIP_TRUSTED_HOST": "pypi.site.example",
            },
            id="cuda-site-index",
        ),
        pytest.param(
            "tensorflow",
            images.BuildOptions(base=images.LOCAL_BASE, find_links="http://127.0.0.1:8000/"),
            {
                "BASE_IMAGE": "dlsuite/base:debian-bookworm",
                "DLSUITE_FRAMEWORKS": "tensorflow-cpu==2.21.0 keras==3.15.1",
                "PIP_NO_INDEX": "1",
                "PIP_FIND_LINKS": "http://127.0.0.1:8000/",
            },
            id="air-gapped-wheelhouse",
        ),
        pytest.param(
            "horovod",
            images.BuildOptions(),
            {
                "BASE_IMAGE": "debian:bookworm-slim",
                "DLSUITE_FRAMEWORKS": "torch==2.13.0 horovod==0.28.1",
            },
            id="horovod-post-install-version",
        ),
        pytest.param(
            "mxnet",
            images.BuildOptions(),
            {
                "BASE_IMAGE": "debian:bookworm-slim",
                "DLSUITE_FRAMEWORKS": "mxnet==1.9.1 numpy==1.23.5",
            },
            id="mxnet",
        ),
    ],
)
@pytest.mark.usefixtures("fixed_provenance")
def test_build_args(fw: str, opts: images.BuildOptions, expected: dict[str, str]) -> None:
    assert images.build_args(fw, opts) == {**COMMON, **expected}


def test_dirty_checkout_is_said_in_the_revision(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(images, "git_info", lambda: ("abc123", True))
    assert images.build_args("numpy", images.BuildOptions())["DLSUITE_GIT_COMMIT"] == "abc123-dirty"


def test_filling_a_wheelhouse_shows_each_command_as_it_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each pip command is shown whole and shell-quoted, so it can be rerun by hand (it was
    shown without its interpreter, "$ -m pip download ...", and with unquoted `>=` and `;`).
    A real pip, offline with an empty find-links, fails at once on the first command."""
    import shlex

    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(empty))
    said: list[str] = []
    with pytest.raises(images.ImageError, match="filling the wheelhouse"):
        images.prepare_wheelhouse("numpy", tmp_path / "wheelhouse", say=said.append)
    first = images.wheelhouse_commands("numpy", tmp_path / "wheelhouse")[0]
    assert said == ["$ " + shlex.join(first)]
    assert shlex.split(said[0][2:]) == first and first[0] == sys.executable


def test_wheelhouse_commands(tmp_path: Path) -> None:
    reqs = str(images.envs.requirements_file("pytorch"))
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "download", "--quiet"]
    cmds = images.wheelhouse_commands("pytorch", tmp_path)
    assert cmds[0] == [*pip, "-d", str(tmp_path), "-r", reqs]
    assert cmds[1][: len(pip) + 4] == [*pip, "-d", str(tmp_path), "-c", reqs]
    assert "onnxruntime>=1.16" in cmds[1] and "jsonschema>=4.18" in cmds[1]
    assert cmds[2] == [*pip, "-d", str(tmp_path), "setuptools>=77", "wheel"]
    cuda = images.wheelhouse_commands("pytorch", tmp_path, python_version="3.12")
    assert cuda[0] == [*pip, "--python-version", "3.12", "--only-binary=:all:", "-d",
                       str(tmp_path), "-r", reqs]  # fmt: skip
    assert len(cmds) == 3  # pytorch builds nothing from source


def test_wheelhouse_holds_what_post_install_builds(tmp_path: Path) -> None:
    # Horovod's post-install.sh downloads its sdist: an air-gapped build finds it only if the
    # wheelhouse holds it too
    for framework in ("horovod", "horovod-tensorflow"):
        assert images.envs.post_install_sources(framework) == ["horovod==0.28.1"]
        last = images.wheelhouse_commands(framework, tmp_path)[-1]
        assert last[-4:] == ["--no-deps", "--no-binary", ":all:", "horovod==0.28.1"]
        # ... so the recipe pins what Horovod's setup.py asks for beyond the suite (cffi)
        pins = images.requirement_pins(framework)
        assert {"cffi", "pycparser", "cloudpickle", "psutil", "pyyaml", "packaging"} <= set(pins)
        assert "horovod==0.28.1" in images.framework_versions(framework).split()
    assert images.envs.post_install_sources("pytorch") == []


# ------------------------------------------------------------------------ CUDA variants

#: the packages a recipe's CUDA build replaces (the framework's CPU wheel by its GPU one)
CUDA_REPLACES = {"tensorflow": {"tensorflow-cpu": "tensorflow"}}


@pytest.mark.parametrize("framework", ["pytorch", "jax", "tensorflow"])
def test_cuda_variant_pins_what_the_cpu_recipe_pins(framework: str) -> None:
    """requirements-cuda.txt differs from requirements.txt only in the framework's GPU build:
    every package pinned at the same version (TensorFlow: tensorflow for tensorflow-cpu)."""
    assert images.variants(framework) == [images.CUDA]
    cpu = images.requirement_pins(framework)
    cuda = images.requirement_pins(framework, images.CUDA)
    renamed = CUDA_REPLACES.get(framework, {})
    assert {renamed.get(k, k): v for k, v in cpu.items()} == cuda
    text = images.requirements_path(framework, images.CUDA).read_text()
    label = {"pytorch": "torch==2.13.0", "jax": "jax==0.10.2 jaxlib==0.10.2 optax==0.2.8",
             "tensorflow": "tensorflow==2.21.0 keras==3.15.1"}  # fmt: skip
    assert images.framework_versions(framework, images.CUDA) == label[framework]
    if framework == "pytorch":  # off a local CPU wheel of the same version
        assert "torch==2.13.0,!=2.13.0+cpu" in text.splitlines()


def test_cuda_variant_build_args_tag_and_sif(tmp_path: Path) -> None:
    opts = images.BuildOptions(variant=images.CUDA)
    args = images.build_args("pytorch", opts)
    assert args["DLSUITE_VARIANT"] == "cuda" and args["DLSUITE_FRAMEWORKS"] == "torch==2.13.0"
    assert "DLSUITE_VARIANT" not in images.build_args("pytorch", images.BuildOptions())
    assert images.image_ref("pytorch", "0.1.0", images.CUDA) == "dlsuite/pytorch:0.1.0-cuda"
    assert images.sif_name("pytorch", images.CUDA) == "pytorch-cuda.sif"
    cmds = images.wheelhouse_commands("jax", tmp_path, variant=images.CUDA)
    assert cmds[0][-1] == str(images.requirements_path("jax", images.CUDA))
    assert cmds[0][-1].endswith("containers/jax/requirements-cuda.txt")
    checks = images.sif_checks("pytorch", images.CUDA)
    assert checks[0].args[-2:] == ("--device", "cuda")


def test_constraints_carry_no_extras(tmp_path: Path) -> None:
    """pip refuses extras in a constraints file ("Constraints cannot have extras", found
    building the jax and tensorflow CUDA images): the wheelhouse and install.sh constrain
    with the pins alone, and the two strip extras alike from every recipe's files."""
    assert images.constraints_text("jax[cuda12]==0.10.2\njaxlib==0.10.2\n") == (
        "jax==0.10.2\njaxlib==0.10.2\n"
    )
    install = (SOURCE_ROOT / "containers" / "install.sh").read_text()
    sed = next(x for x in install.splitlines() if x.startswith("sed -E"))
    expr = sed.split("'")[1]
    for reqs in sorted((SOURCE_ROOT / "containers").glob("*/requirements*.txt")):
        out = subprocess.run(["sed", "-E", expr, str(reqs)], capture_output=True, text=True)
        assert out.stdout == images.constraints_text(reqs.read_text()), reqs
        assert "[" not in "".join(x.split("#")[0] for x in out.stdout.splitlines()), reqs
    cmds = images.wheelhouse_commands("jax", tmp_path, variant=images.CUDA)
    constraints = tmp_path / ".constraints" / "jax-cuda.txt"
    assert cmds[1][cmds[1].index("-c") + 1] == str(constraints)
    cpu = images.wheelhouse_commands("jax", tmp_path)  # no extras: the file itself
    assert cpu[1][cpu[1].index("-c") + 1] == str(images.requirements_path("jax"))


def test_a_variant_the_recipe_lacks_is_one_clear_error() -> None:
    with pytest.raises(ConfigError, match=r"--variant cuda: the horovod recipe has no "
                       r"requirements-cuda.txt \(its variants: none\)"):  # fmt: skip
        images.requirements_path("horovod", images.CUDA)
    with pytest.raises(ConfigError, match="its variants: cuda"):
        images.requirements_path("pytorch", "rocm")


def _install_user_step(
    tmp_path: Path, uid: int, passwd: list[str]
) -> subprocess.CompletedProcess[str]:
    """Step 0 of containers/install.sh (the image's user) against a base whose passwd is
    ``passwd``: getent, useradd, userdel and id are stubs that print what they are asked."""
    text = (SOURCE_ROOT / "containers" / "install.sh").read_text()
    step = text[text.index("# 0. ") : text.index("# 1. ")]
    (tmp_path / "passwd").write_text("".join(line + "\n" for line in passwd))
    stubs = (
        "set -euo pipefail\n"
        f"uid={uid}\nPASSWD={tmp_path / 'passwd'}\n"
        'say() { echo "[say] $*"; }\n'
        "getent() { local line; line=$(awk -F: -v k=\"$2\" '$1 == k || $3 == k {print; exit}' "
        '"$PASSWD"); [[ -n $line ]] || return 2; echo "$line"; }\n'
        'userdel() { echo "userdel $*"; }\nuseradd() { echo "useradd $*"; }\n'
    )
    return subprocess.run(["bash", "-c", stubs + step], capture_output=True, text=True)


def test_install_sh_gives_a_login_users_uid_to_dlsuite_and_never_a_system_accounts(
    tmp_path: Path,
) -> None:
    """Ubuntu's `ubuntu` at 1000 gives way; a system account never does: below 1000, and
    `nobody` at 65534 above the login range (its uid passed `uid < 1000`, and --uid 65534
    deleted `nobody` from the image)."""
    base = ["root:x:0:0::/root:/bin/bash", "daemon:x:1:1::/:/bin/false",
            "ubuntu:x:1000:1000::/home/ubuntu:/bin/bash",
            "nobody:x:65534:65534::/nonexistent:/usr/sbin/nologin"]  # fmt: skip
    res = _install_user_step(tmp_path, 1000, base)
    assert res.returncode == 0, res.stderr
    assert "userdel --remove ubuntu" in res.stdout and "useradd --uid 1000" in res.stdout
    res = _install_user_step(tmp_path, 1234, base)
    assert (
        res.returncode == 0 and "userdel" not in res.stdout and "useradd --uid 1234" in res.stdout
    )
    for uid, holder in ((1, "daemon"), (65534, "nobody")):
        res = _install_user_step(tmp_path, uid, base)
        assert res.returncode == 1 and "userdel" not in res.stdout, (uid, res.stdout)
        assert f"uid {uid} is the base image's system account '{holder}'" in res.stderr


def test_the_dockerfile_passes_the_variant_to_install_sh() -> None:
    text = images.render_dockerfile("pytorch")
    assert "ARG DLSUITE_VARIANT=\n" in text
    assert 'LABEL dlsuite.variant="${DLSUITE_VARIANT:-cpu}"' in text
    install = (SOURCE_ROOT / "containers" / "install.sh").read_text()
    assert "reqs=$recipe/requirements${DLSUITE_VARIANT:+-$DLSUITE_VARIANT}.txt" in install


class _NewFrameworkAdapter(Adapter):
    """A registered adapter whose distribution no list in the suite names."""

    name = "newfw"
    module = "dlsuite_newfw"
    distribution = "dlsuite-newfw"

    def setup(self, device: str) -> Any:
        raise NotImplementedError

    def from_numpy(self, x: Any, dtype: str, *, requires_grad: bool = False) -> Any:
        raise NotImplementedError

    def to_numpy(self, t: Any) -> Any:
        raise NotImplementedError


def test_the_frameworks_label_lists_a_new_adapters_own_pin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The image's ``dlsuite.frameworks`` label holds the adapter's distribution's pin without a
    line in images.FRAMEWORK_PACKAGES (it read "none" for a new framework)."""
    recipes = tmp_path / "containers"
    (recipes / "newfw").mkdir(parents=True)
    (recipes / "newfw" / "requirements.txt").write_text("dlsuite-newfw==1.2.3\nrich==13.0.0\n")
    monkeypatch.setenv("DLSUITE_CONTAINERS_DIR", str(recipes))
    ADAPTERS.names()  # entry points scanned before the registry is patched
    monkeypatch.setattr(
        ADAPTERS, "_targets", {**ADAPTERS._targets, "newfw": f"{__name__}:_NewFrameworkAdapter"}
    )
    monkeypatch.setattr(ADAPTERS, "_loaded", dict(ADAPTERS._loaded))
    assert images.framework_versions("newfw") == "dlsuite-newfw==1.2.3"
    (recipes / "other").mkdir()  # a recipe with no adapter: only the known framework packages
    (recipes / "other" / "requirements.txt").write_text("dlsuite-newfw==1.2.3\n")
    assert images.framework_versions("other") == "none"


# ----------------------------------------------------------------------- system packages


def _recipe(tmp_path: Path, packages: str) -> Path:
    recipes = tmp_path / "containers"
    (recipes / "newfw").mkdir(parents=True)
    (recipes / "newfw" / "requirements.txt").write_text("numpy==2.4.6\n")
    (recipes / "newfw" / "system-packages.txt").write_text(packages)
    return recipes


def test_declared_system_packages_missing_here_are_named_with_the_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The image installs a recipe's system packages; this host's environment uses the host's,
    so a missing one is named with the apt-get line (tinygrad's CPU device needs clang)."""
    assert shutil.which("dpkg-query"), "this test needs a Debian host (dpkg-query)"
    recipes = _recipe(tmp_path, "# a comment\ndpkg  # always installed\ndlsuite-no-such-pkg\n")
    monkeypatch.setenv("DLSUITE_CONTAINERS_DIR", str(recipes))
    assert envs.system_packages("newfw") == ("dpkg", "dlsuite-no-such-pkg")
    assert images.apt_packages("newfw") == ("dpkg", "dlsuite-no-such-pkg")  # the image's
    assert envs.missing_system_packages("newfw") == ["dlsuite-no-such-pkg"]
    note = envs.system_packages_note("newfw")
    assert note is not None and note.endswith("apt-get install dlsuite-no-such-pkg"), note
    assert str(recipes / "newfw" / "system-packages.txt") in note
    # a built environment: ensure() says it once per process, before anything else
    root = tmp_path / "envs"
    env = envs.env_for("newfw", root)
    (env.path / "bin").mkdir(parents=True)
    (env.path / "bin" / "python").symlink_to(sys.executable)
    (env.path / envs.MARKER).write_text("{}")
    monkeypatch.setattr(envs, "_NOTED", set())
    said: list[str] = []
    assert envs.ensure("newfw", root, say=said.append) == env
    envs.ensure("newfw", root, say=said.append)
    assert said == [f"env {env.name}: warning: {note}"]
    # nothing missing: nothing said
    (recipes / "newfw" / "system-packages.txt").write_text("dpkg\n")
    assert (
        envs.missing_system_packages("newfw") == [] and envs.system_packages_note("newfw") is None
    )


def test_system_packages_cannot_be_checked_without_dpkg(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DLSUITE_CONTAINERS_DIR", str(_recipe(tmp_path, "clang\n")))
    monkeypatch.setenv("PATH", str(tmp_path))  # no dpkg-query: not a Debian host
    assert envs.missing_system_packages("newfw") is None
    assert envs.system_packages_note("newfw") is None


def test_a_bad_system_package_name_names_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DLSUITE_CONTAINERS_DIR", str(_recipe(tmp_path, "clang; rm -rf /\n")))
    with pytest.raises(
        ConfigError, match=r"system-packages\.txt: 'clang; rm -rf /' is not a Debian"
    ):
        envs.system_packages("newfw")


def test_system_deps_installs_what_every_recipe_declares(tmp_path: Path) -> None:
    """tests/system-deps.sh (make test as root, CI) installs the recipes' system packages too,
    so the kit in a new framework's environment finds them with no line added there."""
    assert shutil.which("dpkg-query"), "this test needs a Debian host (dpkg-query)"
    (tmp_path / "tests").mkdir()
    shutil.copy(SOURCE_ROOT / "tests" / "system-deps.sh", tmp_path / "tests")
    _recipe(tmp_path, "dpkg\ndlsuite-no-such-pkg  # a comment\n")
    proc = subprocess.run(
        ["bash", str(tmp_path / "tests" / "system-deps.sh"), "--dry-run"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    missing = proc.stdout.strip().removeprefix("missing:").split()
    assert "dlsuite-no-such-pkg" in missing and "dpkg" not in missing, proc.stdout


def test_stage_context(tmp_path: Path) -> None:
    ca = tmp_path / "site.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    ctx = images.stage_context("pytorch", tmp_path / "ctx", ca)
    for rel in (
        "pyproject.toml",
        "README.md",
        "suite/worker.py",
        "metrics/__init__.py",
        "schemas/result.schema.json",
        "containers/install.sh",
        "containers/pytorch/requirements.txt",
        "containers/pytorch/Dockerfile",
        "containers/ca/site-ca-bundle.crt",
    ):
        assert (ctx / rel).is_file(), rel
    assert not (ctx / "containers" / "tensorflow").exists()
    assert not list(ctx.rglob("__pycache__"))
    digest = images.context_digest(ctx, {"A": "1", "DLSUITE_CREATED": "now"}, True)
    later = images.context_digest(ctx, {"A": "1", "DLSUITE_CREATED": "later"}, True)
    assert digest == later != images.context_digest(ctx, {"A": "2"}, True)


def test_wheelhouse_is_served_over_http(tmp_path: Path) -> None:
    import urllib.request

    (tmp_path / "x-1.0-py3-none-any.whl").write_bytes(b"wheel")
    with images.serve_directory(tmp_path) as url:
        assert url.startswith("http://127.0.0.1:")
        listing = urllib.request.urlopen(url).read().decode()
        assert "x-1.0-py3-none-any.whl" in listing


# --------------------------------------------------------------------------- docker backend


class FakeImage:
    id = "sha256:" + "1" * 64
    attrs: dict[str, Any] = {
        "RepoDigests": [],
        "Size": 2**30,
        "Created": "2026-01-01T00:00:00Z",
        "Config": {"User": "dlsuite", "Labels": {"dlsuite.uid": "1000"}},
    }


class FakeClient:
    class images:  # noqa: N801 - the SDK's attribute name
        @staticmethod
        def get(ref: str) -> FakeImage:
            return FakeImage()


def task_file(tmp_path: Path, params: dict[str, Any] | None = None) -> Path:
    run = tmp_path / "run dir"  # a space: one argument all the same
    (run / "tasks").mkdir(parents=True)
    task = run / "tasks" / "t1.json"
    task.write_text(json.dumps({"params": params or {}}))
    return task


def docker_backend(uid: int = 0, gpus: bool = False) -> DockerBackend:
    return DockerBackend("pytorch", gpus=gpus, client=FakeClient(), uid=uid, gid=uid)


def test_docker_command_as_root(tmp_path: Path) -> None:
    task = task_file(tmp_path)
    run = str(task.parent.parent)
    b = docker_backend(uid=0)
    ref = images.image_ref("pytorch")
    assert b.image == ref and b.image_digest == FakeImage.id
    assert b.command(task) == [
        sys.executable, "-m", "suite.backends.docker_run",
        "--network", "host", "--ipc", "host", "--workdir", "/opt/dlsuite",
        "--mount", f"{run}:{run}:rw",
        "--label", f"dlsuite.task={task}",
        ref, "--", PY, "-m", "suite.worker", str(task),
    ]  # fmt: skip
    spec = b.spec(InsideCommand(b.worker(task), task))
    assert spec.docker_run({}) == [
        "docker", "run", "--rm", "--network", "host", "--ipc", "host",
        "--volume", f"{run}:{run}:rw", "--workdir", "/opt/dlsuite",
        "--label", f"dlsuite.task={task}",
        "--entrypoint", PY, ref, "-m", "suite.worker", str(task),
    ]  # fmt: skip


@pytest.mark.skipif(os.geteuid() != 0, reason="handing folders to another uid needs root")
def test_root_run_directory_is_handed_to_the_image_user_and_taken_back(tmp_path: Path) -> None:
    # root's worker runs as the image's non-root user, which must write its records, events
    # and output; once it is gone, all of it is root's again (on the host uid 1000 is
    # whoever has it, who could otherwise rewrite root's records)
    task = task_file(tmp_path)
    run = task.parent.parent
    for sub in ("sessions", "logs"):
        (run / sub).mkdir()
    b = docker_backend(uid=0)
    b.hand_over(task)
    assert {(run / s).stat().st_uid for s in ("tasks", "sessions", "logs")} == {1000}
    assert task.stat().st_uid == 0  # root's own files stay root's
    written = run / "tasks" / "t1.records.jsonl"  # as the worker in the image writes it
    written.write_text("{}\n")
    os.chown(written, 1000, 1000)
    nested = run / "logs" / "sub"
    nested.mkdir()
    os.chown(nested, 1000, 1000)
    b.take_back(task)
    every = [run, *run.rglob("*")]
    assert {(p.stat().st_uid, p.stat().st_gid) for p in every} == {(0, 0)}
    # a caller who is not root: nothing handed, nothing taken
    user = docker_backend(uid=1234)
    assert user.handed(task) == []


def test_docker_command_as_a_user_with_gpus_and_a_model(tmp_path: Path) -> None:
    model = tmp_path / "my.onnx"
    model.write_bytes(b"onnx")
    task = task_file(tmp_path, {"model": str(model), "batch": 4})
    run = str(task.parent.parent)
    b = docker_backend(uid=1234, gpus=True)
    spec = b.spec(InsideCommand(b.worker(task), task))
    assert spec.user == "1234:1234"
    assert spec.mounts == [(run, run, False), (str(model), str(model), True)]
    assert spec.docker_run({}) == [
        "docker", "run", "--rm", "--network", "host", "--ipc", "host", "--user", "1234:1234",
        "--volume", f"{run}:{run}:rw", "--volume", f"{model}:{model}:ro",
        "--workdir", "/opt/dlsuite", "--env", "HOME=/tmp", "--gpus", "all",
        "--label", f"dlsuite.task={task}",
        "--entrypoint", PY, b.image, "-m", "suite.worker", str(task),
    ]  # fmt: skip
    kwargs = spec.sdk_kwargs({})
    assert kwargs["user"] == "1234:1234" and kwargs["environment"] == {"HOME": "/tmp"}
    assert kwargs["entrypoint"] == [PY] and kwargs["command"] == ["-m", "suite.worker", str(task)]
    assert kwargs["network_mode"] == "host" and kwargs["ipc_mode"] == "host"
    assert [(m["Source"], m["Target"], m["ReadOnly"]) for m in kwargs["mounts"]] == spec.mounts
    (req,) = kwargs["device_requests"]
    assert req["Count"] == -1 and req["Capabilities"] == [["gpu"]]


def test_helper_arguments_round_trip(tmp_path: Path) -> None:
    task = task_file(tmp_path)
    b = docker_backend(uid=1000, gpus=True)
    spec = b.spec(
        InsideCommand([PY, "-c", "print('a, b')"], task, {"DLSUITE_RANK_PORTS": "1,2"}, True)
    )
    assert parse(spec.helper_argv()[3:]) == spec


def test_docker_torchrun_runs_inside_one_container(tmp_path: Path) -> None:
    task = task_file(tmp_path)
    b = docker_backend()
    argv, env = b.launch_command(task, LAUNCHERS.load("torchrun")(), world_size=2)
    spec = parse(argv[3:])
    assert argv[:3] == [sys.executable, "-m", "suite.backends.docker_run"]
    assert spec.argv[:3] == [PY, "-m", "torch.distributed.run"]
    assert spec.argv[-3:] == ["-m", "suite.worker", str(task)]
    assert spec.env["DLSUITE_RANKS_FROM"] == "torchrun" and "MASTER_PORT" in spec.env
    assert spec.forward_env == ()
    assert env["PYTHONPATH"].split(":")[0] == str(SOURCE_ROOT)  # the helper is host code


def test_docker_srun_starts_one_container_per_rank(tmp_path: Path) -> None:
    task = task_file(tmp_path)
    b = docker_backend()
    argv, env = b.launch_command(task, LAUNCHERS.load("srun")(), world_size=4, nodes=2)
    assert argv[:5] == ["srun", "--ntasks=4", "--nodes=2", "--kill-on-bad-exit=1", "--export=ALL"]
    spec = parse(argv[5 + 3 :])
    assert spec.argv == [PY, "-m", "suite.worker", str(task)]
    assert spec.forward_env == FORWARD_ENV
    assert env["DLSUITE_RANKS_FROM"] == "srun"
    inside = spec.environment({"SLURM_PROCID": "3", "SLURM_NTASKS": "4", "HOME": "/root",
                               "MASTER_ADDR": "node1", "PYTHONPATH": "/host"})  # fmt: skip
    assert inside == {"SLURM_PROCID": "3", "SLURM_NTASKS": "4", "MASTER_ADDR": "node1"}


def test_docker_forwards_a_host_launchers_own_rank_variables(tmp_path: Path) -> None:
    # a launcher that starts one container per rank and declares variables no pattern covers
    # (MVAPICH's): they reach each container, with no list in the docker backend to extend
    from suite.launchers.mpirun import Mpirun

    class Mvapich(Mpirun):
        name = "mvapich"
        rank_variables = ("MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE", "MV2_COMM_WORLD_LOCAL_RANK")

    task = task_file(tmp_path)
    argv, _ = docker_backend().launch_command(task, Mvapich(), world_size=2)
    spec = parse(argv[argv.index("suite.backends.docker_run") + 1 :])
    assert spec.forward_env == (*FORWARD_ENV, *Mvapich.rank_variables)
    inside = spec.environment({"MV2_COMM_WORLD_RANK": "1", "MV2_COMM_WORLD_SIZE": "2", "X": "y"})
    assert inside == {"MV2_COMM_WORLD_RANK": "1", "MV2_COMM_WORLD_SIZE": "2"}


# ------------------------------------------------------------------------ apptainer backend


@pytest.fixture
def sif(tmp_path: Path) -> Path:
    path = tmp_path / "images" / "pytorch.sif"
    path.parent.mkdir()
    path.write_bytes(b"SIF")
    return path


def test_apptainer_command(tmp_path: Path, sif: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DLSUITE_IMAGE_DIR", str(sif.parent))
    task = task_file(tmp_path)
    run = str(task.parent.parent)
    b = ApptainerBackend("pytorch", gpus=False, apptainer="apptainer")
    assert b.image == str(sif) and b.image_digest == images.sif_digest(sif)
    assert b.command(task) == [
        "apptainer", "exec", "--pwd", "/opt/dlsuite", "--bind", run, str(sif),
        PY, "-m", "suite.worker", str(task),
    ]  # fmt: skip
    gpu = ApptainerBackend("pytorch", gpus=True, sif=sif, apptainer="/opt/apptainer/bin/apptainer")
    assert gpu.command(task)[:3] == ["/opt/apptainer/bin/apptainer", "exec", "--nv"]


@pytest.mark.parametrize(
    ("devices", "host_gpu", "nv"),
    [
        (["cuda"], False, True),  # a CUDA task gets the GPUs, whatever this host has
        (["cuda"], True, True),
        (["auto"], True, True),  # auto: when the host has one
        (["auto"], False, False),
        (["cpu"], True, False),  # a CPU task never
        ([None], True, True),  # a document without a device is auto
        (["cpu", "cuda"], False, True),  # a session with one CUDA task
        (["cpu", "cpu"], True, False),
    ],
)
def test_apptainer_nv_on_cuda_tasks(
    tmp_path: Path, sif: Path, devices: list[str | None], host_gpu: bool, nv: bool
) -> None:
    run = tmp_path / "run"
    (run / "tasks").mkdir(parents=True)
    paths = []
    for i, device in enumerate(devices):
        doc: dict[str, Any] = {"params": {}, **({"device": device} if device else {})}
        paths.append(run / "tasks" / f"t{i}.json")
        paths[-1].write_text(json.dumps(doc))
    task = paths[0]
    if len(paths) > 1:  # a worker session's document lists its tasks
        task = run / "tasks" / "session.json"
        task.write_text(json.dumps({"tasks": [str(p) for p in paths]}))
    b = ApptainerBackend("pytorch", gpus=host_gpu, sif=sif, apptainer="apptainer")
    expected = ["apptainer", "exec", *(["--nv"] if nv else []), "--pwd", "/opt/dlsuite",
                "--bind", str(run), str(sif), PY, "-m", "suite.worker", str(task)]  # fmt: skip
    assert b.command(task) == expected
    argv, _ = b.launch_command(task, LAUNCHERS.load("srun")(), world_size=2, nodes=2)
    assert argv[: argv.index("apptainer")] == [
        "srun", "--ntasks=2", "--nodes=2", "--kill-on-bad-exit=1", "--export=ALL",
    ]  # fmt: skip
    assert argv[argv.index("apptainer") :] == expected  # one container per rank, same line


def test_apptainer_environment(tmp_path: Path, sif: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "checkout"))
    monkeypatch.setenv("VIRTUAL_ENV", str(tmp_path / "checkout" / ".venv"))
    monkeypatch.setenv("SLURM_PROCID", "1")
    task = task_file(tmp_path)
    b = ApptainerBackend("pytorch", gpus=False, sif=sif, apptainer="apptainer")
    argv, env = b.launch_command(task, LAUNCHERS.load("spawn")(), world_size=2)
    assert argv[:7] == ["apptainer", "exec", "--pwd", "/opt/dlsuite", "--bind",
                        str(task.parent.parent), str(sif)]  # fmt: skip
    assert argv[7:] == [PY, "-m", "suite.launchers.spawn", "--nproc", "2", "--",
                        PY, "-m", "suite.worker", str(task)]  # fmt: skip
    assert "PYTHONPATH" not in env and "VIRTUAL_ENV" not in env
    assert env["SLURM_PROCID"] == "1"  # the host's variables reach the container
    assert env["APPTAINERENV_PYTHONNOUSERSITE"] == "1"
    assert env["APPTAINERENV_DLSUITE_RANKS_FROM"] == "spawn"
    assert len(env["APPTAINERENV_DLSUITE_RANK_PORTS"].split(",")) == 2  # commas survive


def test_apptainer_srun_and_a_read_only_model(tmp_path: Path, sif: Path) -> None:
    model = tmp_path / "m.onnx"
    model.write_bytes(b"onnx")
    task = task_file(tmp_path, {"model": str(model)})
    run = str(task.parent.parent)
    b = ApptainerBackend("pytorch", gpus=True, sif=sif, apptainer="apptainer")
    argv, env = b.launch_command(task, LAUNCHERS.load("srun")(), world_size=2)
    assert argv == [
        "srun", "--ntasks=2", "--nodes=1", "--kill-on-bad-exit=1", "--export=ALL",
        "apptainer", "exec", "--nv", "--pwd", "/opt/dlsuite",
        "--bind", f"{run},{model}:{model}:ro", str(sif), PY, "-m", "suite.worker", str(task),
    ]  # fmt: skip
    assert env["DLSUITE_RANKS_FROM"] == "srun"  # srun passes it on to every rank


@pytest.mark.parametrize(
    ("device", "cuda_sif", "chosen"),
    [("cuda", True, "pytorch-cuda.sif"), ("cpu", True, "pytorch.sif"),
     ("cuda", False, "pytorch.sif"), ("auto", True, "pytorch.sif")],  # no GPU here: auto is cpu
)  # fmt: skip
def test_apptainer_takes_the_cuda_sif_for_cuda_runs(
    tmp_path: Path, sif: Path, monkeypatch: pytest.MonkeyPatch, device: str, cuda_sif: bool,
    chosen: str,
) -> None:  # fmt: skip
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "apptainer").write_text("#!/bin/sh\nexit 1\n")  # found on PATH; inspects nothing
    (bin_dir / "apptainer").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("DLSUITE_IMAGE_DIR", str(sif.parent))
    monkeypatch.setattr("suite.backends.apptainer.gpus_present", lambda: False)
    if cuda_sif:
        (sif.parent / "pytorch-cuda.sif").write_bytes(b"SIF cuda")
    b = ApptainerBackend.create("pytorch", resolve({"device": device}, env={}))
    assert isinstance(b, ApptainerBackend) and b.sif == sif.parent / chosen


def test_missing_images_say_how_to_make_them(tmp_path: Path) -> None:
    with pytest.raises(images.ImageError, match="dlsuite images sif --framework jax") as sif:
        ApptainerBackend("jax", sif=tmp_path / "jax.sif", apptainer="apptainer")
    assert sif.value.image == str(tmp_path / "jax.sif")  # its failure records name it

    class NoImage(FakeClient):
        class images:  # noqa: N801
            @staticmethod
            def get(ref: str) -> FakeImage:
                import docker.errors

                raise docker.errors.ImageNotFound(ref)

            @staticmethod
            def list(name: str) -> list[FakeImage]:
                return []  # no other tag of it either

    with pytest.raises(images.ImageError, match="dlsuite images build --framework jax") as ref:
        DockerBackend("jax", client=NoImage())
    assert ref.value.image == images.image_ref("jax")


@pytest.mark.parametrize(
    ("argv", "env", "said"),
    [
        (["images", "build", "--framework", "pytorch", "--tag", "bad:tag"], {}, "--tag 'bad:tag'"),
        (["images", "sif", "--framework", "pytorch", "--tag", ".x", "--no-check"], {},
         "--tag '.x'"),
        (["run", "--quick", "--framework", "numpy", "--backend", "docker"],
         {"DLSUITE_IMAGE_TAG": "Bad:tag"}, "DLSUITE_IMAGE_TAG 'Bad:tag'"),
        (["images", "build", "--framework", "numpy"], {"DLSUITE_IMAGE_REPO": "My/Repo"},
         "DLSUITE_IMAGE_REPO 'My/Repo'"),
    ],
)  # fmt: skip
def test_an_image_name_docker_refuses_is_one_error_before_anything(
    argv: list[str],
    env: dict[str, str],
    said: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A tag or repository outside Docker's reference grammar: exit 2 with one line naming the
    option or variable, before a daemon is asked or a run directory made (before, the daemon's
    "invalid reference format" came back as a traceback, from `images build` and from a run)."""
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-daemon.sock")  # none is asked
    out = tmp_path / "run"
    extra = ["--out", str(out), "--no-history"] if argv[0] == "run" else []
    assert main([*argv, *extra]) == 2
    err = capsys.readouterr().err
    assert said in err and "Traceback" not in err and "no Docker daemon" not in err
    assert len(err.strip().splitlines()) == 1, err
    assert not out.exists()


def test_the_docker_helper_that_cannot_create_the_container_is_named_in_the_reason(
    tmp_path: Path,
) -> None:
    """The docker helper started when no daemon answers (it stopped, or DOCKER_HOST points
    nowhere): its own line is what the runner puts first in the reason of a worker that wrote
    no record (before: only "worker exited with code 125 and wrote no record"). The real
    helper, run as the backend runs it."""
    from suite.backends.docker import helper_failure

    proc = subprocess.run(
        [sys.executable, "-m", "suite.backends.docker_run", "dlsuite/numpy:x", "--", "true"],
        capture_output=True, text=True, timeout=120, cwd=SOURCE_ROOT,
        env={**os.environ, "DOCKER_HOST": f"unix://{tmp_path}/no-daemon.sock"},
    )  # fmt: skip
    assert proc.returncode == 125
    said = helper_failure(proc.stdout + proc.stderr)
    assert said is not None and said.startswith(
        f"cannot create the container: no Docker daemon answers at unix://{tmp_path}/"
    ), said
    assert helper_failure(proc.stdout) is None  # the docker run line alone says nothing


def test_images_build_without_a_daemon_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """No daemon answers: one line naming DOCKER_HOST and the fix, exit 2, once for every
    framework asked for (before: a `building ...` line, then per framework the message in
    literal `[red]...[/]`, exit 1)."""
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-daemon.sock")
    assert main(["images", "build", "--framework", "numpy,jax"]) == 2
    captured = capsys.readouterr()
    lines = (captured.out + captured.err).strip().splitlines()
    assert len(lines) == 1 and "[red]" not in lines[0], lines
    assert f"no Docker daemon answers at unix://{tmp_path}/no-daemon.sock" in lines[0]
    assert "start one (dockerd" in lines[0]


def test_a_daemon_socket_the_user_may_not_open_is_not_a_missing_daemon(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A daemon listens but its socket is not open to the user (one outside the `docker`
    group, the usual case on a shared machine): one line naming the socket's group and the
    fix. Before, it said "no Docker daemon answers ...; start one (dockerd ...)", sending the
    user after a daemon that was running. A real socket, and a real process of another user
    (nobody, where the tests run as root; else the owner of a socket of mode 0000)."""
    import socket

    import docker  # noqa: F401 - loaded now: the child below may not read the interpreter

    sock_dir = Path(tempfile.mkdtemp(prefix="dlsuite-sock-"))
    server = socket.socket(socket.AF_UNIX)
    try:
        os.chmod(sock_dir, 0o755)
        path = sock_dir / "docker.sock"
        server.bind(str(path))
        server.listen(1)
        as_root = os.geteuid() == 0
        os.chmod(path, 0o660 if as_root else 0)
        monkeypatch.setenv("DOCKER_HOST", f"unix://{path}")
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: another user, asks for a client, writes what it was told
            said = "connected"
            try:
                if as_root:
                    os.setgid(65534)
                    os.setgroups([])
                    os.setuid(65534)
                images.docker_client()
            except images.ImageError as exc:
                said = str(exc)
            except BaseException as exc:  # noqa: BLE001 - reported to the parent
                said = f"{type(exc).__name__}: {exc}"
            os.write(write, said.encode())
            os._exit(0)
        os.close(write)
        with os.fdopen(read) as fh:
            said = fh.read()
        os.waitpid(pid, 0)
    finally:
        server.close()
        shutil.rmtree(sock_dir, ignore_errors=True)
    import grp

    group = grp.getgrgid(os.getgid()).gr_name
    assert "no Docker daemon answers" not in said and len(said.splitlines()) == 1, said
    assert f"the Docker daemon at unix://{path} does not let user" in said, said
    assert f"permission denied on its socket, group {group}, mode " in said, said
    assert f"sudo usermod -aG {group} " in said and "--backend apptainer" in said, said


def test_images_sif_without_a_daemon_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`images sif` makes every SIF from a Docker image: no daemon is one line naming
    DOCKER_HOST and the fix, exit 2, before any check user or directory is made (before: per
    framework the message, then a table of the same cut short, exit 1)."""
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-daemon.sock")
    sifs = tmp_path / "sifs"
    assert main(["images", "sif", "--framework", "numpy,jax", "--dir", str(sifs)]) == 2
    captured = capsys.readouterr()
    lines = (captured.out + captured.err).strip().splitlines()
    assert len(lines) == 1, lines
    assert f"no Docker daemon answers at unix://{tmp_path}/no-daemon.sock" in lines[0]
    assert not sifs.exists()


def test_images_sif_check_only_without_the_sif_is_one_line_and_makes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`images sif --check-only` for a SIF that is not there: one line naming it and the build
    command (and the frameworks whose SIFs are there), exit 2, before the check directory is
    made (before: the directory and its summary were made and chowned, then exit 1)."""
    sifs = tmp_path / "my sifs"
    sifs.mkdir()
    (sifs / "jax.sif").write_bytes(b"")
    check_out = tmp_path / "checks"
    argv = ["images", "sif", "--framework", "mxnet,jax", "--dir", str(sifs), "--check-only"]
    assert main([*argv, "--check-out", str(check_out)]) == 2
    captured = capsys.readouterr()
    lines = (captured.out + captured.err).strip().splitlines()
    assert lines == [
        f"dlsuite: error: --check-only: no SIF for mxnet in {sifs}; build it: dlsuite images sif "
        f"--framework mxnet --dir '{sifs}' (or check those there: --framework jax)"
    ]
    assert not check_out.exists()
    assert sorted(p.name for p in sifs.iterdir()) == ["jax.sif"]


def test_images_list_without_docker_or_sifs_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`images list` with no Docker daemon and no SIF in the image directory: one line
    naming both, exit 2 (with SIFs there it lists them: tests/integration/test_apptainer.py)."""
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-daemon.sock")
    monkeypatch.setenv("DLSUITE_IMAGE_DIR", str(tmp_path / "sifs"))
    assert main(["images", "list"]) == 2
    captured = capsys.readouterr()
    lines = (captured.out + captured.err).strip().splitlines()
    assert len(lines) == 1, lines
    assert "no Docker daemon answers" in lines[0]
    assert lines[0].endswith(f"and no SIF in {tmp_path / 'sifs'} either (the image directory: "
                             "DLSUITE_IMAGE_DIR, else ~/.cache/dlsuite/images)")  # fmt: skip


@pytest.mark.parametrize("uid", ["0", "-5"])
def test_a_root_or_negative_image_uid_is_one_line_before_the_build(
    uid: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`images build --uid 0` would make the image's user root (or fail useradd after minutes
    of pip, as it did): refused at once, naming --uid, before a daemon is asked."""
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-daemon.sock")
    assert main(["images", "build", "--framework", "numpy", f"--uid={uid}"]) == 2
    err = capsys.readouterr().err
    assert f"--uid {uid}: the image's user `dlsuite` must be unprivileged" in err
    assert "no Docker daemon" not in err


@pytest.mark.parametrize(
    "argv",
    [
        ["images", "sif", "--framework", "numpy", "--from-def", "--no-check"],
        ["images", "base"],
    ],
)
def test_a_mirror_that_is_not_a_plain_url_never_reaches_a_shell(
    argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--mirror becomes text in containers/base/Apptainer.def's %post (`echo "deb {{ MIRROR }}
    ..."`: Apptainer substitutes it before the shell reads it) and in the base's sources.list:
    a value with shell syntax is one line naming --mirror, exit 2, before anything is built
    (before, --from-def ran the build with it)."""
    evil = f'http://deb.debian.org/debian"; touch {tmp_path}/owned; echo "'
    out = ["--dir", str(tmp_path)] if argv[1] == "sif" else ["--tarball", str(tmp_path / "b.tar")]
    assert main([*argv, *out, "--mirror", evil]) == 2
    err = capsys.readouterr().err
    assert "--mirror 'http://deb.debian.org/debian\"; touch" in err, err
    assert "not a plain http(s)://, ftp:// or file:// URL" in err
    assert not (tmp_path / "owned").exists() and not (tmp_path / "dlsuite-base.sif").exists()
    with pytest.raises(ConfigError, match="--suite 'bookworm main': not a Debian suite"):
        images.check_mirror("http://deb.debian.org/debian", "bookworm main")
    images.check_mirror("http://mirror.example.org:8080/debian/", "trixie")  # plain: taken


def test_image_names_docker_takes(monkeypatch: pytest.MonkeyPatch) -> None:
    assert images.image_ref("pytorch", "0.1.0", "cuda") == "dlsuite/pytorch:0.1.0-cuda"
    for tag in ("test", "site_2026.1", "a" * 128):
        assert images.check_tag(tag, "--tag") == tag
    for tag in ("a" * 129, ".x", "a b", "1:2"):
        with pytest.raises(ConfigError, match="not a Docker image tag"):
            images.check_tag(tag, "--tag")
    # a tag Docker takes alone, over 128 with the variant's suffix
    assert images.image_ref("pytorch", "a" * 123, "cuda").endswith("a" * 123 + "-cuda")
    with pytest.raises(
        ConfigError, match=r"--tag 'a{124}': with the variant's '-cuda' the tag is 129"
    ):
        images.image_ref("pytorch", "a" * 124, "cuda")
    for repo in ("dlsuite", "registry.example.org:5000/dl-suite", "localhost:5000/a/b",
                 "ghcr.io/site/dl__suite"):  # fmt: skip
        monkeypatch.setenv("DLSUITE_IMAGE_REPO", repo)
        assert images.image_ref("numpy", "t") == f"{repo}/numpy:t"


@pytest.mark.parametrize(
    ("backend", "where", "said"),
    [
        ("apptainer", "a,b", "','"),
        ("apptainer", "c:d", "':'"),
        ("docker", "c:d", "':'"),
    ],
)
def test_a_run_directory_a_container_cannot_bind_is_one_line_before_the_run(
    backend: str,
    where: str,
    said: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """--out with a ',' (Apptainer's bind separator) or ':' (the bind's field separator, in
    docker's --volume and Apptainer's --bind): exit 2, one line naming --out, no run directory.
    (Before, every task failed "worker exited with code 255 and wrote no record"; the cause,
    Apptainer's or Docker's, was only in the task's log.)"""
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-daemon.sock")
    monkeypatch.setenv("DLSUITE_IMAGE_DIR", str(tmp_path))
    out = tmp_path / where / "run"
    argv = ["run", "--quick", "--framework", "numpy", "--benchmark", "gemm", "--dtype", "fp32"]
    assert main([*argv, "--backend", backend, "--out", str(out), "--no-history"]) == 2
    err = capsys.readouterr().err
    assert f"--out {out}: --backend {backend} binds it into the container" in err, err
    assert f"cannot hold {said}" in err and len(err.strip().splitlines()) == 1
    assert not out.exists()
    # the same directory is no problem for the backends that bind nothing
    from suite.backends.container import check_bindable
    from suite.config import resolve
    from suite.plan import build

    check_bindable(out, build(resolve({"frameworks": ["numpy"], "backend": "venv"}, env={})))


def test_sif_build_command(tmp_path: Path) -> None:
    assert images.sif_build_command(tmp_path / "p.sif", tmp_path / "p.tar") == [
        "apptainer", "build", "--force", str(tmp_path / "p.sif"),
        f"docker-archive://{tmp_path / 'p.tar'}",
    ]  # fmt: skip


@pytest.mark.parametrize("kind", ["docker", "apptainer"])
def test_config_accepts_the_container_backends(kind: str) -> None:
    assert resolve({"backend": kind}, env={}).backend == kind


def test_reaper_command(tmp_path: Path) -> None:
    task = task_file(tmp_path)
    assert docker_backend().reaper_argv(task) == [
        sys.executable, "-m", "suite.backends.docker_run", "--reap", str(task), "--within", "900",
    ]  # fmt: skip


def test_container_spec_is_plain_data() -> None:
    spec = ContainerSpec(image="i", argv=["a"])
    assert spec.helper_argv("py")[-3:] == ["i", "--", "a"]


# ------------------------------------------------------------------------ SIF checks


def test_sif_checks_per_recipe() -> None:
    names = {fw: [c.name for c in images.sif_checks(fw)] for fw in images.image_frameworks()}
    assert names["tensorflow"] == ["operator gemm fp32", "network infer mlp fp32, batch 32"]
    assert names["horovod"] == names["horovod-tensorflow"] == ["distributed allreduce, 2 ranks"]
    for fw in ("pytorch", "jax", "mxnet", "numpy"):
        assert names[fw] == ["operator gemm fp32"]
    cmd = images.check_command("jax", images.GEMM_FP32, Path("/o/jax/check0"), python="/py")
    assert cmd == ["/py", "-m", "suite", "run", "--level", "operator", "--benchmark", "gemm",
                   "--dtype", "fp32", "--quick", "--framework", "jax", "--backend", "apptainer",
                   "--out", "/o/jax/check0"]  # fmt: skip


def test_user_environment_keeps_roots_paths_out() -> None:
    user = images.RunAs("u", 1234, 1234, "/home/u")
    root = "/" + "root"  # root's home (a literal would read as a path outside the repository)
    env = images.user_environment(user, {
        "PATH": "/usr/bin", "HOME": root, "PYTHONPATH": f"{root}/x", "VIRTUAL_ENV": f"{root}/v",
        "APPTAINER_CACHEDIR": f"{root}/.a", "XDG_CACHE_HOME": f"{root}/.c", "SLURM_CONF": "/s",
    })  # fmt: skip
    assert env == {"PATH": "/usr/bin", "HOME": "/home/u", "USER": "u", "LOGNAME": "u",
                   "SLURM_CONF": "/s"}  # fmt: skip
    assert images.user_environment(None, {"HOME": root}) == {"HOME": root}


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(cwd), *args], capture_output=True, text=True,
                          check=True).stdout.strip()  # fmt: skip


def test_a_checkout_the_check_user_cannot_read_is_copied_for_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checkout in a 0700 directory (``mktemp -d`` makes one; a clone under /root is one):
    the check user runs the suite from a copy under /var/tmp it can read, holding the files git
    would commit (untracked ones too, not the ignored ones), their links and modes, and the
    commit they came from; a changed checkout gets a new copy. (Before it, both Apptainer tests
    errored in such a clone: No module named 'suite'.)"""
    copies = Path(tempfile.mkdtemp(prefix="dlsuite-test-copies-", dir="/tmp"))
    os.chmod(copies, 0o755)
    monkeypatch.setattr(images, "CHECK_SOURCE_PREFIX", str(copies / "src-"))
    co = tmp_path / "private" / "co"  # pytest's own directories are this user's alone
    (co / "suite").mkdir(parents=True)
    (co / "schemas").mkdir()
    os.chmod(tmp_path / "private", 0o700)
    (co / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    (co / "suite" / "__init__.py").write_text("WHERE = 'copy'\n")
    (co / "suite" / "run.sh").write_text("#!/bin/sh\n")
    (co / "suite" / "run.sh").chmod(0o700)
    (co / "schemas" / "a.json").write_text("{}\n")
    (co / "suite" / "schemas").symlink_to("../schemas")
    (co / ".gitignore").write_text(".venv/\n*.log\n")
    _git(tmp_path, "init", "-q", str(co))
    _git(co, "add", "-A")
    _git(co, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x")
    (co / "notes.txt").write_text("untracked, not ignored\n")
    (co / ".venv").mkdir()
    (co / ".venv" / "python").write_text("ignored\n")
    (co / "build.log").write_text("ignored\n")
    user = images.check_user(say=lambda s: None)
    try:
        where = images.check_cwd(user, co)
        if user is None:  # not root: this user reads its own checkout, which needs no copy
            assert where == co
            where = images.check_source_copy(co)
        assert where.parent == copies and where.name.startswith("src-")
        files = sorted(
            str(p.relative_to(where)) for p in where.rglob("*") if p.is_symlink() or not p.is_dir()
        )
        assert files == sorted([".complete", images.SOURCE_STAMP, ".gitignore", "notes.txt",
                                "pyproject.toml", "schemas/a.json", "suite/__init__.py",
                                "suite/run.sh", "suite/schemas"])  # fmt: skip
        assert os.readlink(where / "suite" / "schemas") == "../schemas"
        assert (where / "suite" / "run.sh").stat().st_mode & 0o777 == 0o755
        assert (where / "suite" / "__init__.py").stat().st_mode & 0o777 == 0o644
        assert tree_commit(where) == (_git(co, "rev-parse", "HEAD"), False)
        if user is not None:  # as that user: the copy imports, the checkout does not
            for cwd, ok in ((where, True), (co, False)):
                proc = subprocess.run(
                    ["/usr/bin/python3", "-c", "import suite; print(suite.WHERE)"],
                    capture_output=True, text=True, cwd="/", env={"PYTHONPATH": str(cwd)},
                    **images.as_user_kwargs(user),
                )  # fmt: skip
                assert (proc.returncode == 0) is ok, (cwd, proc.stderr[-500:])
        assert images.check_source_copy(co) == where  # the same files: the same copy
        (co / "suite" / "__init__.py").write_text("WHERE = 'changed'\n")
        changed = images.check_source_copy(co)
        assert changed != where
        assert (changed / "suite" / "__init__.py").read_text() == "WHERE = 'changed'\n"
    finally:
        shutil.rmtree(copies, ignore_errors=True)


FAKE_RUN = """#!/bin/sh
# stands in for `python -m suite run ... --out DIR`: writes $FAKE_RECORDS to DIR/results.jsonl
while [ $# -gt 0 ]; do [ "$1" = --out ] && out=$2; shift; done
mkdir -p "$out"
[ -n "$FAKE_RECORDS" ] && printf '%s\\n' "$FAKE_RECORDS" >"$out/results.jsonl"
exit "${FAKE_EXIT:-0}"
"""


@pytest.mark.parametrize(
    ("recs", "exit_code", "passed", "problem"),
    [
        ([("ok", True, "sif")], 0, True, None),
        ([("ok", True, "sif"), ("ok", True, "other")], 0, False, "image_digest sha256:other"),
        ([("ok", False, "sif")], 0, False, None),  # ran, but incorrect
        ([("failed", False, "sif")], 1, False, "t0: failed"),
        ([], 1, False, "no records"),
    ],
)
def test_a_sif_check_is_judged_by_its_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    recs: list[tuple[str, bool, str]], exit_code: int, passed: bool, problem: str | None,
) -> None:  # fmt: skip
    sif = tmp_path / "images" / "numpy.sif"
    sif.parent.mkdir()
    sif.write_bytes(b"SIF")
    digest = images.sif_digest(sif)
    fake = tmp_path / "fake-python"
    fake.write_text(FAKE_RUN)
    fake.chmod(0o755)
    lines = [
        json.dumps({"task_id": f"t{i}", "status": status, "correctness": {"passed": correct},
                    "backend": {"image_digest": digest if which == "sif" else f"sha256:{which}"}})
        for i, (status, correct, which) in enumerate(recs)
    ]  # fmt: skip
    monkeypatch.setenv("FAKE_RECORDS", "\n".join(lines))
    monkeypatch.setenv("FAKE_EXIT", str(exit_code))
    result = images.run_sif_check(
        "numpy", sif, images.GEMM_FP32, tmp_path / "out" / "check0", None, python=str(fake)
    )
    assert result.passed is passed
    assert (result.records, result.returncode) == (len(recs), exit_code)
    if problem:
        assert any(problem in p for p in result.problems or []), result.problems
    assert (tmp_path / "out" / "check0.log").is_file()


def test_the_apptainer_log_starts_with_the_command_line(tmp_path: Path, sif: Path) -> None:
    """As the docker backend's: the worker's log starts with what to rerun by hand."""
    import shlex

    fake = tmp_path / "bin" / "apptainer"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho the container ran\n")
    fake.chmod(0o755)
    task = task_file(tmp_path, {})
    doc = json.loads(task.read_text())
    task.write_text(json.dumps({**doc, "device": "cuda"}))
    b = ApptainerBackend("pytorch", gpus=False, sif=sif, apptainer=str(fake))
    log = tmp_path / "worker.log"
    b.start(task, log, LAUNCHERS.load("single")()).wait()
    first, second = log.read_text().splitlines()
    assert first == "[dlsuite.apptainer] " + shlex.join(b.command(task))
    assert f"{fake} exec --nv --pwd /opt/dlsuite" in first  # a CUDA task
    assert second == "the container ran"


class _LateOOM:
    """A container as the SDK sees it, whose daemon sets ``State.OOMKilled`` only on the
    ``late``-th read: containerd 1.6 can send the OOM event after the exit event."""

    def __init__(self, late: int | None) -> None:
        self.late, self.reads, self.attrs = late, 0, {"State": {"OOMKilled": False}}

    def reload(self) -> None:
        self.reads += 1
        self.attrs = {"State": {"OOMKilled": self.late is not None and self.reads >= self.late}}


def test_a_sigkilled_containers_late_oom_statement_is_waited_for() -> None:
    from suite.backends.docker_run import _oom

    late = _LateOOM(late=4)
    assert _oom(late, wait_s=2.0) and late.reads == 4
    assert not _oom(_LateOOM(late=4), wait_s=0.0)  # another exit code: read once
    never = _LateOOM(late=None)
    start = time.monotonic()
    assert not _oom(never, wait_s=0.3)
    assert 0.3 <= time.monotonic() - start < 2.0 and never.reads > 1


@pytest.mark.parametrize(
    ("base", "pulled"),
    [
        ("debian:bookworm-slim", "debian:bookworm-slim"),
        ("debian", "debian:latest"),
        ("localhost:5000/site/base", "localhost:5000/site/base:latest"),
        ("registry.example.org:5000/base:v2", "registry.example.org:5000/base:v2"),
        # a base pinned by digest: it was pulled as the repository 'debian@sha256' at the tag
        # of the digest's hex ("manifest unknown": 'Docker cannot pull it')
        ("debian@sha256:" + "ab" * 32, "debian@sha256:" + "ab" * 32),
    ],
)
def test_a_base_not_on_the_machine_is_pulled_by_the_reference_given(base: str, pulled: str) -> None:
    import docker.errors
    from docker.utils import parse_repository_tag

    asked: list[str] = []

    class Images:
        @staticmethod
        def get(ref: str) -> None:
            raise docker.errors.ImageNotFound(ref)

        @staticmethod
        def pull(repository: str, tag: str | None = None, **_: Any) -> None:
            # as the SDK's ImageCollection.pull resolves what it asks the daemon for
            repo, image_tag = parse_repository_tag(repository)
            tag = tag or image_tag or "latest"
            asked.append(f"{repo}{'@' if tag.startswith('sha256:') else ':'}{tag}")

    class Client:
        images = Images

    images.ensure_base(Client(), base)
    assert asked == [pulled]
