"""Framework images: ``containers/<framework>/Dockerfile`` generated from one template, built
through the Docker SDK, converted to ``Apptainer.def`` with spython and to SIF files through
``docker save`` + ``apptainer build``.

One template (``containers/Dockerfile.in``) and one install script (``containers/install.sh``)
serve every framework: the generated Dockerfiles differ only in the framework's name and the
system packages its recipe declares (``containers/<framework>/system-packages.txt``), and
``dlsuite images dockerfiles --check`` (run by the unit tests) fails when a generated file and
the template disagree.

Host side: imports no DL framework; ``docker`` and ``spython`` are imported only where used.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import http.server
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import suite
from suite import envs
from suite.errors import BackendError, ConfigError
from suite.provenance import SOURCE_ROOT, SOURCE_STAMP, git_info, now_iso, tree_commit

#: where the image keeps the suite; its interpreter runs the worker and in-image launchers
IMAGE_HOME = "/opt/dlsuite"
IMAGE_PYTHON = f"{IMAGE_HOME}/venv/bin/python"
DEFAULT_BASE = "debian:bookworm-slim"
#: the base ``dlsuite images base`` makes from Debian's archive (no registry needed)
LOCAL_BASE = "dlsuite/base:debian-bookworm"
#: what a recipe with a post-install.sh (a build from source, Horovod's) needs on top: a C++
#: toolchain, and Python.h (torch's and TensorFlow's headers include it)
BUILD_TOOLS = ("g++", "make", "python3-dev")
#: distributions whose pins the ``dlsuite.frameworks`` label lists, with the image's own
#: adapter's ``distribution`` (so a new framework's pin is listed without a line here)
FRAMEWORK_PACKAGES = (
    "torch", "tensorflow", "tensorflow-cpu", "keras", "mxnet", "jax", "jaxlib", "optax",
    "horovod", "numpy",
)  # fmt: skip
REPO_VAR, TAG_VAR, DIR_VAR = "DLSUITE_IMAGE_REPO", "DLSUITE_IMAGE_TAG", "DLSUITE_IMAGE_DIR"
GENERATED = "GENERATED from containers/Dockerfile.in"


class ImageError(BackendError):
    """An image cannot be built, found, saved or converted; the message says what to do.
    ``image``: the reference or SIF path it is about, where one is known (the failure records
    of a run whose image is missing name it as ``backend.image``)."""

    def __init__(self, message: str, image: str | None = None) -> None:
        super().__init__(message)
        self.image = image


# ------------------------------------------------------------------------------ names, paths


#: Docker's reference grammar (github.com/distribution/reference): a tag, and a repository
#: (lowercase path components, an optional registry host[:port] first). A name outside it
#: made the daemon answer "invalid reference format", which reached the user as a traceback.
_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
#: a registry host: dotted, with a port, or localhost (Docker reads any other first part as
#: a path component, which must be lowercase)
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
_HOST = rf"(?:{_LABEL}(?:\.{_LABEL})+(?::[0-9]+)?|{_LABEL}:[0-9]+|localhost)"
_REPOSITORY = re.compile(rf"(?:{_HOST}/)?{_COMPONENT}(?:/{_COMPONENT})*")


def check_tag(tag: str, what: str) -> str:
    """``tag`` when Docker takes it as an image tag, else the ConfigError naming ``what``."""
    if not _TAG.fullmatch(tag):
        raise ConfigError(
            f"{what} {tag!r}: not a Docker image tag (letters, digits, '_', '.' and '-', at "
            "most 128, not starting with '.' or '-'), e.g. 0.1.0 or site-2026"
        )
    return tag


def repository() -> str:
    repo = os.environ.get(REPO_VAR) or "dlsuite"
    if not _REPOSITORY.fullmatch(repo):
        raise ConfigError(
            f"{REPO_VAR} {repo!r}: not a Docker repository (lowercase letters, digits and "
            "'.', '_', '-' between them, '/' between parts, a registry host[:port] first), "
            "e.g. dlsuite or registry.example.org:5000/dlsuite"
        )
    return repo


def default_tag() -> str:
    tag = os.environ.get(TAG_VAR)
    return check_tag(tag, TAG_VAR) if tag else suite.__version__


def image_ref(framework: str, tag: str | None = None, variant: str | None = None) -> str:
    """``dlsuite/<framework>:<tag>`` (``DLSUITE_IMAGE_REPO``, ``DLSUITE_IMAGE_TAG``); a
    variant's image is tagged ``<tag>-<variant>`` (``dlsuite/pytorch:0.1.0-cuda``). A name
    Docker would refuse is a ConfigError naming the option (``tag``: ``--tag``) or variable."""
    what = "--tag" if tag else TAG_VAR
    tag = check_tag(tag, "--tag") if tag else default_tag()
    full = tag + (f"-{variant}" if variant else "")
    if variant and not _TAG.fullmatch(full):
        raise ConfigError(
            f"{what} {tag!r}: with the variant's '-{variant}' the tag is {len(full)} characters, "
            "more than Docker's 128; give a shorter tag"
        )
    return f"{repository()}/{framework}:{full}"


def image_dir(configured: str | None = None) -> Path:
    """Where SIF files, saved archives and build logs go: ``DLSUITE_IMAGE_DIR`` (a site
    profile's ``image_dir``), else ``~/.cache/dlsuite/images``."""
    chosen = configured or os.environ.get(DIR_VAR)
    return Path(chosen).expanduser().resolve() if chosen else default_image_dir()


def default_image_dir() -> Path:
    return Path.home() / ".cache" / "dlsuite" / "images"


def sif_path(framework: str, configured: str | None = None, variant: str | None = None) -> Path:
    """``<framework>.sif``, or ``<framework>-<variant>.sif`` (``pytorch-cuda.sif``), in the
    image directory."""
    return image_dir(configured) / sif_name(framework, variant)


def sif_name(framework: str, variant: str | None = None) -> str:
    return f"{framework}-{variant}.sif" if variant else f"{framework}.sif"


#: the GPU build of a recipe: ``containers/<framework>/requirements-cuda.txt``
CUDA = "cuda"


def requirements_path(framework: str, variant: str | None = None) -> Path:
    """The recipe's ``requirements.txt``, or a variant's ``requirements-<variant>.txt`` (what
    ``install.sh`` installs with ``DLSUITE_VARIANT``); one clear error when it has none."""
    if not variant:
        return envs.requirements_file(framework)
    path = envs.recipes_root() / framework / f"requirements-{variant}.txt"
    if not path.is_file():
        have = ", ".join(variants(framework)) or "none"
        raise ConfigError(
            f"--variant {variant}: the {framework} recipe has no {path.name} "
            f"(its variants: {have}); docs/guide/containers.md says which recipes have a GPU build"
        )
    return path


def variants(framework: str) -> list[str]:
    """The variants a recipe declares (``requirements-<variant>.txt`` beside its requirements)."""
    folder = envs.recipes_root() / framework
    return sorted(
        p.name[len("requirements-") : -len(".txt")] for p in folder.glob("requirements-*.txt")
    )


def image_frameworks() -> list[str]:
    """Frameworks with a recipe (``containers/<framework>/requirements.txt``)."""
    root = envs.recipes_root()
    return sorted(p.parent.name for p in root.glob("*/requirements.txt"))


def check_frameworks(names: list[str] | None) -> list[str]:
    known = image_frameworks()
    if not names or names == ["all"]:
        return known
    for name in names:
        if name not in known:
            raise ConfigError(
                f"--framework {name}: no image recipe (containers/{name}/requirements.txt); "
                f"choose from: {', '.join(known)}"
            )
    return list(names)


# --------------------------------------------------------------------- Dockerfiles, templates


def template_path() -> Path:
    return SOURCE_ROOT / "containers" / "Dockerfile.in"


def dockerfile_path(framework: str) -> Path:
    return envs.recipes_root() / framework / "Dockerfile"


def apptainer_def_path(framework: str) -> Path:
    return envs.recipes_root() / framework / "Apptainer.def"


def apt_packages(framework: str) -> tuple[str, ...]:
    """System packages the image installs: the recipe's ``system-packages.txt``
    (:func:`suite.envs.system_packages`: libraries a wheel links against that a slim base
    lacks, tools the framework runs), plus :data:`BUILD_TOOLS` for a recipe whose
    post-install.sh builds from source (Horovod's)."""
    tools = BUILD_TOOLS if envs.post_install_script(framework) else ()
    return tuple(dict.fromkeys([*envs.system_packages(framework), *tools]))


def render_dockerfile(framework: str) -> str:
    text = template_path().read_text()
    text = text.replace("@APT_PACKAGES@", " ".join(apt_packages(framework)))
    return text.replace("@FRAMEWORK@", framework)


def _sync(
    frameworks: list[str], target: Callable[[str], Path], render: Callable[[str], str], check: bool
) -> list[Path]:
    """Write ``render(fw)`` to ``target(fw)``; with ``check``, only list the files that differ."""
    stale = []
    for fw in frameworks:
        path, text = target(fw), render(fw)
        if not path.is_file() or path.read_text() != text:
            stale.append(path)
            if not check:
                path.write_text(text)
    return stale


def sync_dockerfiles(frameworks: list[str] | None = None, check: bool = False) -> list[Path]:
    return _sync(check_frameworks(frameworks), dockerfile_path, render_dockerfile, check)


def sync_apptainer_defs(frameworks: list[str] | None = None, check: bool = False) -> list[Path]:
    return _sync(check_frameworks(frameworks), apptainer_def_path, render_apptainer_def, check)


#: the base a generated Apptainer.def starts from (``Bootstrap: localimage``), made from Debian's
#: archive by ``containers/base/Apptainer.def`` (``Bootstrap: debootstrap``)
BASE_SIF = "dlsuite-base.sif"
#: Docker's own build arguments, which a definition file has no use for (its base is BASE_SIF)
DOCKER_ONLY_ARGS = ("BASE_IMAGE",)


def base_def_path() -> Path:
    """``containers/base/Apptainer.def``: the base SIF from Debian's archive (debootstrap)."""
    return SOURCE_ROOT / "containers" / "base" / "Apptainer.def"


def render_apptainer_def(framework: str) -> str:
    """``Apptainer.def`` from the framework's Dockerfile through spython's converter, made to
    build with ``apptainer build`` alone (no Docker daemon, no registry):

    * ``Bootstrap: localimage`` from ``{{ BASE_SIF }}`` (default ``dlsuite-base.sif``, made by
      ``containers/base/Apptainer.def`` from Debian's archive) instead of spython's
      ``Bootstrap: docker`` from Docker Hub;
    * the Dockerfile's build arguments become Apptainer's (``%arguments`` with the same
      defaults, ``{{ NAME }}`` where they are used, ``--build-arg NAME=VALUE`` to set one):
      exported in ``%post`` so install.sh sees them, those without a default (a site's
      ``PIP_*``) only when given; labels and ``%environment`` take their values;
    * a label with a shell default (``${CUDA_VERSION:-none}``) is written in ``%post`` to
      ``$APPTAINER_LABELS``, where the shell gives it its value as Docker's build does;
    * Docker's ``USER`` (spython: ``su - USER``) is dropped: Apptainer runs as the caller;
      the Dockerfile's comments are dropped from ``%post``."""
    try:
        from spython.main.parse.parsers import DockerParser
        from spython.main.parse.writers import SingularityWriter
    except ImportError:
        raise ImageError(
            "spython is not installed: pip install 'dlsuite[containers]' (or spython)"
        ) from None
    dockerfile = dockerfile_path(framework)
    if not dockerfile.is_file():
        raise ImageError(f"{dockerfile} is missing; run `dlsuite images dockerfiles` first")
    with _quiet_spython():
        body = SingularityWriter(DockerParser(str(dockerfile)).recipe).convert()
    text = dockerfile.read_text()
    defaults = {
        k: v.strip('"')
        for k, v in re.findall(r"^ARG (\w+)=(.*)$", text, re.M)
        if k not in DOCKER_ONLY_ARGS
    }
    optional = [k for k in re.findall(r"^ARG (\w+)\s*$", text, re.M) if k not in defaults]
    arguments = {"BASE_SIF": BASE_SIF, **defaults, **dict.fromkeys(optional, "")}

    def templated(value: str) -> str:
        return re.sub(
            r"\$\{(\w+)\}",
            lambda m: (
                "{{ BASE_SIF }}"
                if m.group(1) in DOCKER_ONLY_ARGS
                else f"{{{{ {m.group(1)} }}}}"
                if m.group(1) in arguments
                else m.group(0)
            ),
            value,
        )

    sections: dict[str, list[str]] = {}
    section = ""
    for line in body.splitlines():
        if line.startswith("%"):
            section = line.split()[0]
            sections.setdefault(section, [])
            continue
        if not section:
            continue  # spython's header: Bootstrap: docker, From:, Stage:
        sections[section].append(line)

    labels, post_labels = [], []
    for line in sections.get("%labels", []):
        m = re.match(r'^(\S+?)="?(.*?)"?$', line)
        if not m:
            continue
        if re.search(r"\$\{\w+:-", m.group(2)):
            post_labels.append(f'echo "{m.group(1)} {templated(m.group(2))}" >>"$APPTAINER_LABELS"')
        else:
            labels.append(f"{m.group(1)} {templated(m.group(2))}")

    post = [f'export {k}="{{{{ {k} }}}}"' for k in defaults]
    post += [f'[ -z "{{{{ {k} }}}}" ] || export {k}="{{{{ {k} }}}}"' for k in optional]
    for line in sections.get("%post", []):
        if line.startswith("#") or re.match(r"^su -\s+\S+\s*# USER", line):
            continue
        m = re.match(r"^([A-Za-z_]\w*)=(.*)$", line)
        if m and m.group(1) in DOCKER_ONLY_ARGS:
            continue
        if m and m.group(1) in defaults and m.group(2).strip('"') == defaults[m.group(1)]:
            continue  # an ARG's assignment: exported above from its build argument
        if m:
            line = "export " + line
        if line.strip() or (post and post[-1].strip()):
            post.append(line)
    post += post_labels

    header = [
        f"# GENERATED from containers/{framework}/Dockerfile by `dlsuite images apptainer-def`",
        "# (spython, then made to build with Apptainer alone). For sites with neither Docker nor",
        "# a registry; the suite's own path on a machine with Docker is `dlsuite images sif`",
        "# (docker save + apptainer build docker-archive://). In a context staged by",
        f"# `dlsuite images context --framework {framework} DIR` (or with `dlsuite images sif",
        f"# --framework {framework} --from-def`, which does these steps):",
        "#   cd DIR",
        f"#   apptainer build --fakeroot {BASE_SIF} containers/base/Apptainer.def  # debootstrap",
        f"#   apptainer build --fakeroot {framework}.sif containers/{framework}/Apptainer.def",
        "# Build arguments (--build-arg NAME=VALUE) are those of the Dockerfile, plus BASE_SIF (the",
        "# base SIF); a wheelhouse: PIP_NO_INDEX=1 PIP_FIND_LINKS=URL (docs/guide/containers.md).",
        "Bootstrap: localimage",
        "From: {{ BASE_SIF }}",
        "",
        "%arguments",
        *(f"{k}={v}" for k, v in arguments.items()),
    ]
    out = [*header]
    for name, lines in sections.items():
        if name == "%labels":
            lines = labels
        elif name == "%post":
            lines = post
        elif name == "%environment":  # a build argument's value, fixed at build time
            lines = [templated(x) for x in lines]
        while lines and not lines[-1].strip():
            lines = lines[:-1]
        out += [name, *lines]
    return "\n".join(out) + "\n"


@contextlib.contextmanager
def _quiet_spython() -> Iterator[None]:
    """spython logs each instruction and a warning per COPY source it cannot see from here
    (the build context is staged later): keep only its errors."""
    try:
        from spython.logger import bot
        from spython.logger.message import ERROR
    except ImportError:  # pragma: no cover
        yield
        return
    level = bot.level
    bot.level = ERROR
    try:
        yield
    finally:
        bot.level = level


# ------------------------------------------------------------------------ build arguments


def requirement_pins(framework: str, variant: str | None = None) -> dict[str, str]:
    """``name -> version`` of every ``name==version`` line of the framework's requirements
    (a variant's, with ``variant``)."""
    pins: dict[str, str] = {}
    for raw in requirements_path(framework, variant).read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        m = re.match(r"^([A-Za-z0-9_.\-]+)(?:\[[^\]]*\])?\s*==\s*([^\s;,]+)", line)
        if m:
            pins[m.group(1).lower()] = m.group(2)
    return pins


def framework_versions(framework: str, variant: str | None = None) -> str:
    """The ``dlsuite.frameworks`` label: the framework packages' pins (``torch==2.13.0``), plus
    the version a recipe's post-install.sh builds (its ``VERSION=``)."""
    pins = requirement_pins(framework, variant)
    listed = set(FRAMEWORK_PACKAGES)
    adapter = _adapter_distribution(framework)
    if adapter:
        listed.add(adapter)
    out = [f"{n}=={v}" for n, v in pins.items() if n in listed]
    for source in envs.post_install_sources(framework):  # e.g. horovod==0.28.1
        if source.split("==")[0] not in pins:
            out.append(source)
    return " ".join(out) or "none"


def _adapter_distribution(framework: str) -> str | None:
    """The distribution the framework's adapter records its version from (host side: loading
    an adapter class imports no framework); None for a recipe with no adapter of that name."""
    from suite.adapters import ADAPTERS

    try:
        return ADAPTERS.load(framework).distribution.lower()
    except ConfigError:
        return None


@dataclass(frozen=True)
class BuildOptions:
    """What varies between builds of one framework's image."""

    base: str = DEFAULT_BASE
    tag: str | None = None
    #: a URL pip finds the wheelhouse at (the builder serves a local directory over HTTP)
    find_links: str | None = None
    index_url: str | None = None
    extra_index_url: str | None = None
    trusted_host: str | None = None
    uid: int = 1000
    #: a recipe's variant (``cuda``: its requirements-cuda.txt), None for its requirements.txt
    variant: str | None = None


def build_args(framework: str, opts: BuildOptions) -> dict[str, str]:
    """The ``--build-arg`` values for one framework's image (rendered and tested as data)."""
    commit, dirty = git_info()
    args = {
        "BASE_IMAGE": opts.base,
        "DLSUITE_VERSION": suite.__version__,
        "DLSUITE_GIT_COMMIT": (commit or "unknown") + ("-dirty" if dirty else ""),
        "DLSUITE_FRAMEWORKS": framework_versions(framework, opts.variant),
        "DLSUITE_CREATED": now_iso(),
        "DLSUITE_UID": str(opts.uid),
    }
    if opts.variant:
        args["DLSUITE_VARIANT"] = opts.variant
    if opts.find_links:
        # air-gapped: the wheelhouse only; pip must not look for an index at all
        args.update(PIP_NO_INDEX="1", PIP_FIND_LINKS=opts.find_links)
    for key, value in (
        ("PIP_INDEX_URL", opts.index_url),
        ("PIP_EXTRA_INDEX_URL", opts.extra_index_url),
        ("PIP_TRUSTED_HOST", opts.trusted_host),
    ):
        if value:
            args[key] = value
    return args


# --------------------------------------------------------------------------- build context

#: what of the source tree goes into an image (as the root .dockerignore allows)
CONTEXT_FILES = ("pyproject.toml", "README.md")
CONTEXT_DIRS = ("suite", "metrics", "schemas")


def stage_context(framework: str, dest: Path, ca_bundle: Path | None = None) -> Path:
    """The build context of one framework's image in ``dest``: the suite's source, the shared
    install script, ``containers/<framework>/``, ``containers/ca/`` (an extra CA bundle) and
    ``containers/base/Apptainer.def`` (the base of a build with Apptainer alone)."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    dest.mkdir(parents=True, exist_ok=True)
    for name in CONTEXT_FILES:
        shutil.copy2(SOURCE_ROOT / name, dest / name)
    for name in CONTEXT_DIRS:
        shutil.copytree(SOURCE_ROOT / name, dest / name, ignore=ignore, dirs_exist_ok=True)
    recipes = envs.recipes_root()
    (dest / "containers" / "ca").mkdir(parents=True, exist_ok=True)
    (dest / "containers" / "base").mkdir(parents=True, exist_ok=True)
    shutil.copy2(SOURCE_ROOT / "containers" / "install.sh", dest / "containers" / "install.sh")
    # for a build with Apptainer alone in this context: the base its Apptainer.def starts from
    shutil.copy2(base_def_path(), dest / "containers" / "base" / "Apptainer.def")
    shutil.copytree(
        recipes / framework, dest / "containers" / framework, ignore=ignore, dirs_exist_ok=True
    )
    if ca_bundle is not None:
        if not ca_bundle.is_file():
            raise ConfigError(f"--ca-bundle {ca_bundle}: no such file")
        shutil.copy2(ca_bundle, dest / "containers" / "ca" / "site-ca-bundle.crt")
    return dest


# ---------------------------------------------------------------------------- wheelhouse


def wheelhouse_commands(
    framework: str,
    wheelhouse: Path,
    python_version: str | None = None,
    variant: str | None = None,
) -> list[list[str]]:
    """The ``pip download`` lines that fill a wheelhouse for one framework's image: its
    requirements, the suite's own dependencies under those pins, and the build backend the
    suite's install needs. Run on the host, so pip's configuration there (find-links with a
    local wheel, an index, a CA bundle) applies."""
    reqs = requirements_path(framework, variant)
    constraints = constraints_path(framework, wheelhouse, variant)
    target = []
    if python_version:
        # for an image whose Python differs from the host's (a CUDA base): wheels only
        target = ["--python-version", python_version, "--only-binary=:all:"]
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "download", "--quiet"]
    suite_deps = [ln for ln in envs._suite_requirements().splitlines() if ln.strip()]
    cmds = [
        [*pip, *target, "-d", str(wheelhouse), "-r", str(reqs)],
        [*pip, *target, "-d", str(wheelhouse), "-c", str(constraints), *suite_deps],
        [*pip, *target, "-d", str(wheelhouse), "setuptools>=77", "wheel"],
    ]
    sources = envs.post_install_sources(framework)
    if sources:  # what post-install.sh builds from source (Horovod): the sdist, whose
        # dependencies the recipe pins (so the first line fetched them, for any --python-version)
        cmds.append([*pip, "-d", str(wheelhouse), "--no-deps", "--no-binary", ":all:", *sources])
    return cmds


#: an extra on a requirement line (``jax[cuda12]==0.10.2``), which pip refuses in constraints
EXTRAS = re.compile(r"^([A-Za-z0-9_.\-]+)\[[^\]]*\]", re.M)


def constraints_text(requirements: str) -> str:
    """A requirements file's pins as constraints: pip takes no extras there ("Constraints
    cannot have extras"), so ``jax[cuda12]==0.10.2`` becomes ``jax==0.10.2`` (install.sh does
    the same with sed)."""
    return EXTRAS.sub(r"\1", requirements)


def constraints_path(framework: str, wheelhouse: Path, variant: str | None = None) -> Path:
    """The requirements file itself where it names no extras, else the copy without them that
    :func:`prepare_wheelhouse` writes beside the wheels (``.constraints/``)."""
    reqs = requirements_path(framework, variant)
    if constraints_text(reqs.read_text()) == reqs.read_text():
        return reqs
    return wheelhouse / ".constraints" / f"{framework}-{variant or 'cpu'}.txt"


def prepare_wheelhouse(
    framework: str,
    wheelhouse: Path,
    python_version: str | None = None,
    say: Callable[[str], None] = print,
    variant: str | None = None,
) -> None:
    wheelhouse.mkdir(parents=True, exist_ok=True)
    constraints = constraints_path(framework, wheelhouse, variant)
    reqs = requirements_path(framework, variant)
    if constraints != reqs:
        constraints.parent.mkdir(parents=True, exist_ok=True)
        constraints.write_text(constraints_text(reqs.read_text()))
    for cmd in wheelhouse_commands(framework, wheelhouse, python_version, variant):
        say("$ " + shlex.join(cmd))  # as it runs (it began "$ -m pip", without the interpreter)
        proc = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL)
        if proc.returncode != 0:
            raise ImageError(
                f"filling the wheelhouse {wheelhouse} for {framework} failed: "
                f"pip failed on {envs._failed_package(proc.stdout + proc.stderr)}"
            )


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
        pass


@contextlib.contextmanager
def serve_directory(path: Path) -> Iterator[str]:
    """Serve ``path`` over HTTP on the loopback while the block runs; yields the URL.

    A classic ``docker build`` cannot mount a host directory, and a COPY would keep every
    wheel in a layer of the image for good: with host networking the build reaches this
    server instead, and nothing of the wheelhouse stays in the image."""
    if not path.is_dir():
        raise ConfigError(f"--wheelhouse {path}: not a directory")
    handler = functools.partial(_QuietHandler, directory=str(path))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


# --------------------------------------------------------------------------------- Docker


def docker_client() -> Any:
    """A Docker SDK client, or one clear error (no SDK, no daemon)."""
    try:
        import docker
        import docker.errors
    except ImportError:
        raise ImageError(
            "the docker Python package is not installed: pip install 'dlsuite[containers]'"
        ) from None
    try:
        client = docker.from_env(timeout=600)
        client.ping()
    except docker.errors.DockerException as exc:
        host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
        if "Permission denied" in str(exc) or "PermissionError" in str(exc):
            raise ImageError(socket_refused(host)) from None
        raise ImageError(
            f"no Docker daemon answers at {host} ({str(exc).splitlines()[0][:160]}); start one "
            "(dockerd, or `systemctl start docker`) or set DOCKER_HOST"
        ) from None
    return client


def socket_refused(host: str) -> str:
    """What to do when the daemon's socket is there but not open to this user: the usual
    case of a user outside the ``docker`` group, whom "no daemon answers, start one" sent
    after a daemon that was running."""
    import grp
    import pwd

    try:
        user = pwd.getpwuid(os.getuid()).pw_name
    except KeyError:  # a uid without a passwd entry (a container's)
        user = str(os.getuid())
    path = host.removeprefix("unix://")
    try:
        st = os.stat(path)
    except OSError:  # a directory on the way that this user may not enter
        return (
            f"the Docker daemon's socket {path} is not reachable for user {user} (permission "
            "denied on the way to it); run as a user who may use Docker, set DOCKER_HOST to a "
            "socket of your own (rootless Docker), or use --backend apptainer"
        )
    try:
        group = grp.getgrgid(st.st_gid).gr_name
    except KeyError:
        group = str(st.st_gid)
    return (
        f"the Docker daemon at {host} does not let user {user} in (permission denied on its "
        f"socket, group {group}, mode {st.st_mode & 0o777:04o}): ask to be added to group "
        f"{group} (`sudo usermod -aG {group} {user}`, then log in again), set DOCKER_HOST to a "
        "socket of your own (rootless Docker), or use --backend apptainer"
    )


def ensure_base(client: Any, base: str, say: Callable[[str], None] = lambda s: None) -> None:
    """The base image of a build, on this machine or pulled now; where it is neither (no
    registry reachable, a misspelt name) one ConfigError naming ``--base`` and the local way,
    before any build. (Before, the build's first step failed with the registry's DNS error,
    and the default ``debian:bookworm-slim`` failed that way wherever no registry answers.)"""
    import docker.errors

    try:
        client.images.get(base)
        return
    except docker.errors.ImageNotFound:
        pass
    except docker.errors.APIError as exc:  # a reference the daemon refuses
        raise ConfigError(f"--base {base}: {_first_line(exc)}") from None
    say(f"{base} is not on this machine: pulling it")
    try:
        # the SDK splits the reference itself: a tag, none (latest), a registry's :port, or a
        # digest (name@sha256:..., which a split at the last ':' pulled as a tag of its hex)
        client.images.pull(base)
    except docker.errors.DockerException as exc:
        local = (
            f"`dlsuite images base` makes {LOCAL_BASE} from Debian's archive, then "
            f"--base {LOCAL_BASE}"
        )
        raise ConfigError(
            f"--base {base}{' (the default)' if base == DEFAULT_BASE else ''}: not on this "
            f"machine, and Docker cannot pull it ({_first_line(exc)}); check the name, or "
            f"where no registry is reachable: {local}"
        ) from None


def _first_line(exc: BaseException) -> str:
    """The daemon's own words (an APIError's ``explanation``, not the HTTP request), shortened."""
    text = str(getattr(exc, "explanation", None) or exc).strip()
    return (text.splitlines() or [type(exc).__name__])[0][:200]


def image_info(client: Any, ref: str) -> dict[str, Any]:
    """Id, repo digest, labels and size of a local image (ImageError when it is not there)."""
    import docker.errors

    try:
        img = client.images.get(ref)
    except docker.errors.ImageNotFound:
        repo, _, tag = ref.rpartition(":")
        build = f"--framework {repo.rpartition('/')[2]} --tag {tag}"
        if tag.endswith(f"-{CUDA}"):  # a variant's image: dlsuite/F:<tag>-cuda
            build = f"{build.removesuffix(f'-{CUDA}')} --variant {CUDA}"
        raise ImageError(
            f"image {ref} not found{tags_here(client, ref, '--tag')}; build it: dlsuite images "
            f"build {build}"
        ) from None
    attrs = img.attrs
    digests = attrs.get("RepoDigests") or []
    return {
        "ref": ref,
        "id": img.id,
        "digest": digests[0] if digests else None,
        "labels": (attrs.get("Config") or {}).get("Labels") or {},
        "size_mb": round(attrs.get("Size", 0) / 2**20, 1),
        "created": attrs.get("Created"),
        "user": (attrs.get("Config") or {}).get("User") or "",
    }


def other_tags(client: Any, ref: str) -> list[str]:
    """The tags this machine has of ``ref``'s repository (``dlsuite/pytorch``), but ``ref``'s."""
    import docker.errors

    repo = ref.rpartition(":")[0]
    try:
        found = client.images.list(name=repo)
    except docker.errors.DockerException:
        return []
    tags = {t.rpartition(":")[2] for img in found for t in img.tags if t.rpartition(":")[0] == repo}
    return sorted(tags - {ref.rpartition(":")[2]})


def tags_here(client: Any, ref: str, how: str) -> str:
    """`` (this machine has dlsuite/pytorch:test: --tag test chooses it)`` (``how``: the
    option, or the variable, that chooses a tag), for a message that ``ref`` is missing (a
    wrong tag is the usual cause); empty when there is none of the repository."""
    tags = other_tags(client, ref)
    if not tags:
        return ""
    repo = ref.rpartition(":")[0]
    shown = ", ".join(f"{repo}:{t}" for t in tags[:5]) + (", ..." if len(tags) > 5 else "")
    choose = f"{how} {tags[0]}" if how.startswith("-") else f"{how}={tags[0]}"
    return f" (this machine has {shown}: {choose} chooses {'it' if len(tags) == 1 else 'one'})"


@dataclass(frozen=True)
class BuildResult:
    framework: str
    ref: str
    image_id: str
    seconds: float
    size_mb: float
    log: Path


def build(
    framework: str,
    opts: BuildOptions,
    *,
    wheelhouse: Path | None = None,
    ca_bundle: Path | None = None,
    log_dir: Path | None = None,
    rebuild: bool = False,
    on_line: Callable[[str], None] = lambda s: None,
) -> BuildResult:
    """Build ``dlsuite/<framework>:<tag>`` through the Docker SDK, streaming every output line
    to ``on_line`` and to a log file. With ``wheelhouse`` pip installs from it alone.

    The image is labelled with a digest of what it is made from (the staged context and the
    build arguments but their time stamp, and whether a wheelhouse was used); an image of
    that digest under the same name is reused unless ``rebuild``."""
    client = docker_client()
    requirements_path(framework, opts.variant)  # a variant the recipe lacks: one clear error
    ensure_base(client, opts.base, on_line)
    ref = image_ref(framework, opts.tag, opts.variant)
    log_dir = log_dir or image_dir() / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"build-{framework}{'-' + opts.variant if opts.variant else ''}.log"
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix=f"dlsuite-context-{framework}-") as tmp:
        ctx = stage_context(framework, Path(tmp), ca_bundle)
        digest = context_digest(ctx, build_args(framework, opts), wheelhouse is not None)
        if not rebuild:
            try:
                found = image_info(client, ref)
            except ImageError:
                found = {}
            if found.get("labels", {}).get(CONTEXT_LABEL) == digest:
                on_line(f"{ref} is up to date ({CONTEXT_LABEL} {digest[:19]}): reused")
                return BuildResult(framework, ref, found["id"], 0.0, found["size_mb"], log_path)
        with contextlib.ExitStack() as stack:
            if wheelhouse is not None:
                url = stack.enter_context(serve_directory(wheelhouse))
                opts = _replace(opts, find_links=url)
            # a build argument, not the API's `labels`: those become one more instruction
            # after the big RUN, which copies the whole file system on vfs
            args = {**build_args(framework, opts), "DLSUITE_CONTEXT_DIGEST": digest}
            image_id = _stream_build(client, ctx, framework, ref, args, log_path, on_line)
    info = image_info(client, ref)
    return BuildResult(
        framework, ref, image_id, time.perf_counter() - t0, info["size_mb"], log_path
    )


CONTEXT_LABEL = "dlsuite.context-digest"


def context_digest(ctx: Path, args: dict[str, str], offline: bool) -> str:
    """``sha256:`` of every file of a staged context (path and bytes) and the build arguments
    that decide the content (not the time stamp, not the wheelhouse server's port)."""
    h = hashlib.sha256()
    for path in sorted(p for p in ctx.rglob("*") if p.is_file()):
        h.update(str(path.relative_to(ctx)).encode() + b"\0" + path.read_bytes() + b"\0")
    varying = ("DLSUITE_CREATED", "PIP_FIND_LINKS", "DLSUITE_CONTEXT_DIGEST")
    stable = {k: v for k, v in args.items() if k not in varying}
    h.update(json.dumps({**stable, "offline": offline}, sort_keys=True).encode())
    return "sha256:" + h.hexdigest()


def _replace(opts: BuildOptions, **changes: Any) -> BuildOptions:
    import dataclasses

    return dataclasses.replace(opts, **changes)


def _stream_build(
    client: Any,
    ctx: Path,
    framework: str,
    ref: str,
    args: dict[str, str],
    log_path: Path,
    on_line: Callable[[str], None],
) -> str:
    import docker.errors

    image_id = ""
    error = ""
    with log_path.open("w") as log:
        log.write(f"# {now_iso()} docker build -t {ref} -f containers/{framework}/Dockerfile\n")
        log.write(f"# build args: {json.dumps(args, sort_keys=True)}\n")
        try:
            stream = client.api.build(
                path=str(ctx),
                dockerfile=f"containers/{framework}/Dockerfile",
                tag=ref,
                buildargs=args,
                network_mode="host",  # the wheelhouse server and a site's index on the host
                rm=True,
                forcerm=True,
                pull=False,
                decode=True,
            )
            for chunk in stream:
                text = chunk.get("stream") or chunk.get("status") or ""
                if "error" in chunk:
                    error = str(chunk["error"]).strip()
                    text = error
                aux = chunk.get("aux") or {}
                if aux.get("ID"):
                    image_id = aux["ID"]
                for line in text.splitlines():
                    if line.strip():
                        log.write(line + "\n")
                        log.flush()
                        on_line(line)
        except docker.errors.APIError as exc:
            error = str(exc)
    if error:
        raise ImageError(f"building {ref} failed: {error[-400:]} (full log: {log_path})")
    if not image_id:
        image_id = client.images.get(ref).id
    return image_id


def import_base(tarball: Path, tag: str = LOCAL_BASE) -> str:
    """``docker import`` of a root file system tarball (containers/base/bootstrap.sh)."""
    client = docker_client()
    repo, _, version = tag.rpartition(":")
    if not repo:
        repo, version = tag, "latest"
    with tarball.open("rb") as fh:
        out = client.api.import_image_from_data(
            fh, repository=repo, tag=version, changes=['CMD ["/bin/bash"]']
        )
    status = json.loads(out.splitlines()[-1]) if isinstance(out, str) and out else {}
    image_id = status.get("status", "") if isinstance(status, dict) else ""
    return image_id or client.images.get(tag).id


#: a Debian mirror's URL, and a suite's name, as debootstrap and sources.list take them; they
#: are written into the base's sources.list, and in containers/base/Apptainer.def into its
#: %post script as text (Apptainer substitutes build arguments before the shell reads them),
#: so nothing a shell would read as syntax may pass (quotes, $, `, ;, &, |, spaces)
_MIRROR = re.compile(r"(?:https?|ftp|file)://[A-Za-z0-9._~:/?#@%+=,-]+")
_SUITE = re.compile(r"[a-z][a-z0-9-]*")


def check_mirror(mirror: str | None, suite_name: str = "bookworm") -> None:
    """One ConfigError naming ``--mirror`` or ``--suite`` for a value that is not a plain URL
    or suite name."""
    if mirror is not None and not _MIRROR.fullmatch(mirror):
        raise ConfigError(
            f"--mirror {mirror!r}: not a plain http(s)://, ftp:// or file:// URL (letters, "
            "digits and . _ ~ : / ? # @ % + = , - only), e.g. http://deb.debian.org/debian"
        )
    if not _SUITE.fullmatch(suite_name):
        raise ConfigError(
            f"--suite {suite_name!r}: not a Debian suite name (lowercase letters, digits, "
            "'-'), e.g. bookworm"
        )


def bootstrap_base(
    tarball: Path, suite_name: str = "bookworm", mirror: str | None = None
) -> subprocess.CompletedProcess[bytes]:
    check_mirror(mirror, suite_name)
    script = SOURCE_ROOT / "containers" / "base" / "bootstrap.sh"
    argv = ["bash", str(script), str(tarball), suite_name, *([mirror] if mirror else [])]
    return subprocess.run(argv, stdin=subprocess.DEVNULL)


def list_images(client: Any | None = None) -> list[dict[str, Any]]:
    """Every local image labelled ``dlsuite.framework``, newest first."""
    client = client or docker_client()
    rows = []
    for img in client.images.list(filters={"label": "dlsuite.framework"}):
        labels = img.labels or {}
        for ref in img.tags or ["<none>"]:
            rows.append(
                {
                    "ref": ref,
                    "id": img.id,
                    "framework": labels.get("dlsuite.framework"),
                    "frameworks": labels.get("dlsuite.frameworks"),
                    "cuda": labels.get("dlsuite.cuda"),
                    "variant": labels.get("dlsuite.variant") or "cpu",
                    "version": labels.get("org.opencontainers.image.version"),
                    "revision": labels.get("org.opencontainers.image.revision"),
                    "base": labels.get("org.opencontainers.image.base.name"),
                    "created": img.attrs.get("Created", "")[:19],
                    "size_mb": round(img.attrs.get("Size", 0) / 2**20, 1),
                }
            )
    return sorted(rows, key=lambda r: r["created"], reverse=True)


def sif_labels(apptainer: str, sif: Path) -> dict[str, str]:
    """The SIF's labels (the Docker image's, for a SIF made by `dlsuite images sif`); empty
    when apptainer cannot say (an old version, a file that is not a SIF)."""
    try:
        out = subprocess.run(
            [apptainer, "inspect", "--labels", "--json", str(sif)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        labels = json.loads(out.stdout)["data"]["attributes"]["labels"]
    except (OSError, subprocess.SubprocessError, ValueError, KeyError, TypeError):
        return {}
    return {str(k): str(v) for k, v in (labels or {}).items()}


def list_sifs(directory: Path) -> list[dict[str, Any]]:
    """Every ``*.sif`` in ``directory`` (what ``--backend apptainer`` runs), as
    :func:`list_images` lists Docker images: the labels where apptainer can read them (a
    file it cannot is listed with none), newest first."""
    apptainer = shutil.which("apptainer") or shutil.which("singularity")
    rows = []
    for sif in sorted(directory.glob("*.sif")) if directory.is_dir() else []:
        labels = sif_labels(apptainer, sif) if apptainer else {}
        st = sif.stat()
        rows.append(
            {
                "ref": str(sif),
                "id": "sif",
                "framework": labels.get("dlsuite.framework"),
                "frameworks": labels.get("dlsuite.frameworks"),
                "cuda": labels.get("dlsuite.cuda"),
                "variant": labels.get("dlsuite.variant") or ("" if not labels else "cpu"),
                "version": labels.get("org.opencontainers.image.version"),
                "revision": labels.get("org.opencontainers.image.revision"),
                "base": labels.get("org.opencontainers.image.base.name"),
                "created": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(st.st_mtime)),
                "size_mb": round(st.st_size / 2**20, 1),
            }
        )
    return sorted(rows, key=lambda r: r["created"], reverse=True)


def save(framework: str, tag: str | None, out: Path, variant: str | None = None) -> Path:
    """``docker save`` of one image into ``out`` (through the SDK), written atomically."""
    client = docker_client()
    ref = image_ref(framework, tag, variant)
    info = image_info(client, ref)
    image = client.images.get(info["id"])
    out.parent.mkdir(parents=True, exist_ok=True)
    part = out.with_suffix(out.suffix + ".part")
    with part.open("wb") as fh:
        for chunk in image.save(chunk_size=8 << 20, named=True):
            fh.write(chunk)
    os.replace(part, out)
    return out


def apptainer_binary() -> str:
    found = shutil.which("apptainer") or shutil.which("singularity")
    if not found:
        raise ImageError(
            "apptainer is not installed (your site's module, your distribution's package, or on "
            "Debian 12: sudo bash containers/install-apptainer.sh); docs/guide/apptainer.md says how"
        )
    return found


def sif_build_command(sif: Path, archive: Path, apptainer: str = "apptainer") -> list[str]:
    return [apptainer, "build", "--force", str(sif), f"docker-archive://{archive}"]


def build_sif(
    framework: str,
    tag: str | None = None,
    directory: Path | None = None,
    keep_archive: bool = False,
    on_line: Callable[[str], None] = lambda s: None,
    variant: str | None = None,
) -> Path:
    """SIF from the Docker image: ``docker save`` (SDK), then ``apptainer build
    F.sif docker-archive://F.tar``; the archive is removed unless ``keep_archive``. A variant's
    image (``dlsuite/F:<tag>-cuda``) becomes ``F-cuda.sif``."""
    apptainer = apptainer_binary()
    directory = directory or image_dir()
    name = sif_name(framework, variant)
    archive = directory / f"{name[:-4]}.docker.tar"
    on_line(f"docker save {image_ref(framework, tag, variant)} into {archive}")  # minutes, silent
    archive = save(framework, tag, archive, variant)
    sif = directory / name
    cmd = sif_build_command(sif, archive, apptainer)
    on_line("$ " + " ".join(cmd))
    proc = envs.start_build(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True
    )
    lines: list[str] = []
    for line in _build_output(proc):
        lines.append(line.rstrip())
        on_line(line.rstrip())
    rc = proc.wait()
    if not keep_archive:
        archive.unlink(missing_ok=True)
    if rc != 0:
        raise ImageError(f"apptainer build failed (exit {rc}): {' | '.join(lines[-3:])}")
    return sif


@functools.cache
def file_digest(path: Path, mtime_ns: int, size: int) -> str:
    """``sha256:<hex>`` of a file (cached per path, mtime and size)."""
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(8 << 20), b""):
            h.update(block)
    return "sha256:" + h.hexdigest()


def sif_digest(path: Path) -> str:
    st = path.stat()
    return file_digest(path, st.st_mtime_ns, st.st_size)


# ------------------------------------------------------------- checks run in a built SIF


@dataclass(frozen=True)
class SifCheck:
    """A task ``dlsuite images sif`` runs in a framework's SIF once it is built: ``dlsuite
    run`` arguments, to which the framework, ``--backend apptainer`` and ``--out`` are added."""

    name: str
    args: tuple[str, ...]


GEMM_FP32 = SifCheck(
    "operator gemm fp32",
    ("--level", "operator", "--benchmark", "gemm", "--dtype", "fp32", "--quick"),
)
ALLREDUCE_2 = SifCheck(
    "distributed allreduce, 2 ranks",
    ("--level", "distributed", "--benchmark", "allreduce", "--world-size", "2", "--quick"),
)
MLP_INFER = SifCheck(
    "network infer mlp fp32, batch 32",
    ("--level", "network", "--benchmark", "infer", "--network", "mlp", "--dtype", "fp32",
     "--batch", "32", "--quick"),
)  # fmt: skip
#: what each recipe's SIF is checked with (others: GEMM_FP32): a distributed runtime's recipe
#: (Horovod's) its collective on two ranks; TensorFlow a network too
SIF_CHECKS: dict[str, tuple[SifCheck, ...]] = {
    "horovod": (ALLREDUCE_2,),
    "horovod-tensorflow": (ALLREDUCE_2,),
    "tensorflow": (GEMM_FP32, MLP_INFER),
}
#: the unprivileged user root runs the checks as (created when missing), as clusters run
#: Apptainer: never as root
CHECK_USER = "dlsuite-check"


def sif_checks(framework: str, variant: str | None = None) -> tuple[SifCheck, ...]:
    """The checks of a framework's SIF; a CUDA variant's run on ``cuda``."""
    checks = SIF_CHECKS.get(framework, (GEMM_FP32,))
    if variant == CUDA:
        checks = tuple(SifCheck(f"{c.name} on cuda", (*c.args, "--device", "cuda")) for c in checks)
    return checks


@dataclass(frozen=True)
class RunAs:
    """The user a check runs as (its uid, primary gid and home)."""

    name: str
    uid: int
    gid: int
    home: str


def check_user(name: str | None = None, create: bool = True, say: Callable[[str], None] = print
               ) -> RunAs | None:  # fmt: skip
    """Whom the checks run as: None when this process is not root (it is an unprivileged
    user already, as on a cluster's login node); as root, ``name`` (default
    :data:`CHECK_USER`), created with ``useradd`` when missing and ``create``."""
    import pwd

    if os.geteuid() != 0:
        if name and name != pwd.getpwuid(os.geteuid()).pw_name:
            raise ConfigError(f"--user {name}: only root runs the checks as another user")
        return None
    name = name or CHECK_USER
    if name == "root":
        raise ConfigError("--user root: the checks run as an unprivileged user, as clusters do")
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        if not create:
            raise ConfigError(
                f"--user {name}: no such user; create it (useradd -m {name})"
            ) from None
        cmd = ["useradd", "--create-home", "--user-group", "--shell", "/bin/bash", name]
        say(f"creating the unprivileged user {name} to run the SIF checks as: {' '.join(cmd)}")
        proc = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL)
        if proc.returncode != 0:
            raise ImageError(f"useradd {name} failed: {proc.stderr.strip()[:200]}") from None
        entry = pwd.getpwnam(name)
    if entry.pw_uid == 0:
        raise ConfigError(f"--user {name}: uid 0 is root; name an unprivileged user")
    return RunAs(entry.pw_name, entry.pw_uid, entry.pw_gid, entry.pw_dir)


def as_user_kwargs(user: RunAs | None) -> dict[str, Any]:
    """``subprocess`` arguments that run a child as ``user`` (none for this process's own)."""
    if user is None:
        return {}
    return {"user": user.uid, "group": user.gid, "extra_groups": []}


def user_environment(user: RunAs | None, base: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment for a child run as ``user``: its own home and name, and none
    of the Apptainer or Python variables that would point it at root's files."""
    env = dict(os.environ if base is None else base)
    if user is None:
        return env
    for key in list(env):
        if key.startswith(("APPTAINER_", "SINGULARITY_", "XDG_")) or key in (
            "PYTHONPATH", "VIRTUAL_ENV", "DLSUITE_HISTORY", "TMPDIR",
        ):  # fmt: skip
            env.pop(key)
    env.update(HOME=user.home, USER=user.name, LOGNAME=user.name)
    return env


def readable_by(user: RunAs | None, path: Path) -> bool:
    """Whether ``user`` can read ``path`` (every directory above it included)."""
    if user is None:
        return os.access(path, os.R_OK)
    proc = subprocess.run(
        ["test", "-r", str(path)], stdin=subprocess.DEVNULL, **as_user_kwargs(user)
    )
    return proc.returncode == 0


#: where root puts a copy of a checkout its check user cannot read (a clone under /root, or in
#: the 0700 directory ``mktemp -d`` makes): the files git would commit, keyed by their content
CHECK_SOURCE_PREFIX = "/var/tmp/dlsuite-check-src-"
#: copies unused this long are removed when the next one is made
CHECK_SOURCE_KEEP_S = 7 * 86400


@functools.cache
def check_cwd(user: RunAs | None, root: Path = SOURCE_ROOT) -> Path:
    """Where a check's ``python -m suite`` starts: this checkout (``-m`` puts it first on
    ``sys.path``, so the checks run this suite's host side even with an interpreter that has
    only its dependencies); when ``user`` cannot read it, a copy of it under /var/tmp
    (check_source_copy); an installed suite starts in a neutral directory. Once per command:
    every check of a run starts in the same place."""
    if not (root / "pyproject.toml").is_file():
        return Path("/")
    if readable_by(user, root / "suite" / "__init__.py"):
        return root
    return check_source_copy(root)


def _source_files(root: Path) -> list[str]:
    """The checkout's files as git sees them (tracked and untracked, none it ignores); without
    git, every file but environments, caches and results."""
    if (root / ".git").exists():
        proc = subprocess.run(
            ["git", "-C", str(root), "ls-files", "-z", "--cached", "--others",
             "--exclude-standard"],
            capture_output=True, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        if proc.returncode == 0:
            names = sorted(set(proc.stdout.decode().split("\0")) - {""})
            return [n for n in names if os.path.lexists(root / n)]  # deleted, not yet committed
    skip = {".git", ".venv", ".venvs", "__pycache__", "results", ".mypy_cache", ".pytest_cache"}
    out = []
    for top, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in skip and not d.endswith(".egg-info"))
        out += [os.path.relpath(os.path.join(top, f), root) for f in sorted(files)]
    return out


def check_source_copy(root: Path = SOURCE_ROOT) -> Path:
    """A copy of the checkout at ``root`` every user can read, for a check user that cannot
    read the checkout itself. Made once per content (its files, their modes and links hashed),
    so a changed checkout gets a fresh copy; it carries the commit in SOURCE_STAMP, so the
    records still name it."""
    names = _source_files(root)
    h = hashlib.sha256()
    for name in names:
        path = root / name
        h.update(name.encode() + b"\0")
        if path.is_symlink():
            h.update(b"link:" + os.readlink(path).encode())
        else:
            h.update(b"x" if os.access(path, os.X_OK) else b"-")
            h.update(path.read_bytes())
        h.update(b"\0")
    commit, dirty = tree_commit(root)
    stamp = {"git_commit": commit, "git_dirty": dirty}
    h.update(json.dumps(stamp, sort_keys=True).encode())
    dest = Path(CHECK_SOURCE_PREFIX + h.hexdigest()[:12])
    with open(f"{dest}.lock", "w") as lock:  # two checks at once copy it once
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = dest / ".complete"
        if not done.is_file():
            shutil.rmtree(dest, ignore_errors=True)
            for name in names:
                src, dst = root / name, dest / name
                dst.parent.mkdir(parents=True, exist_ok=True)
                if src.is_symlink():
                    os.symlink(os.readlink(src), dst)
                else:
                    shutil.copyfile(src, dst)
                    os.chmod(dst, 0o755 if os.access(src, os.X_OK) else 0o644)
            (dest / SOURCE_STAMP).write_text(json.dumps(stamp, indent=2) + "\n")
            for top, dirs, _ in os.walk(dest):
                for d in dirs:
                    os.chmod(os.path.join(top, d), 0o755)
            os.chmod(dest, 0o755)
            done.touch()
            _prune_source_copies(keep=dest)
        os.utime(done)  # in use: not pruned
    return dest


def _prune_source_copies(keep: Path) -> None:
    """Remove the copies no check has used for CHECK_SOURCE_KEEP_S."""
    for old in Path(CHECK_SOURCE_PREFIX).parent.glob(Path(CHECK_SOURCE_PREFIX).name + "*"):
        if old == keep or old.suffix == ".lock" or not old.is_dir():
            continue
        try:
            stale = time.time() - (old / ".complete").stat().st_mtime > CHECK_SOURCE_KEEP_S
        except OSError:
            continue  # being made right now
        if stale:
            shutil.rmtree(old, ignore_errors=True)
            Path(f"{old}.lock").unlink(missing_ok=True)


def check_suite_runs_as(user: RunAs | None, python: str = sys.executable) -> None:
    """The suite must import as ``user`` with this interpreter (its virtual environment
    readable by it; the suite from check_cwd); one clear error when not."""
    if user is None:
        return
    try:
        proc = subprocess.run(
            [python, "-c", "import suite.cli"],
            capture_output=True, text=True, stdin=subprocess.DEVNULL, cwd=check_cwd(user),
            env=user_environment(user), **as_user_kwargs(user),
        )  # fmt: skip
        why = (proc.stderr.strip().splitlines() or ["(no output)"])[-1] if proc.returncode else ""
    except OSError as exc:  # the interpreter itself (or a directory above it) is root's
        why = f"{exc.strerror}: {os.path.realpath(python)}"
    if why:
        raise ImageError(
            f"the user {user.name} cannot run the suite with {python} ({why[:160]}): the "
            "interpreter and its environment must be readable by it, as on a cluster's shared "
            "file system; or name one that is with --python "
            "(one with the suite's dependencies: python3 -m venv DIR && DIR/bin/pip install "
            f"{SOURCE_ROOT})"
        )


#: where root keeps the interpreter it makes for the check user (a root's own, in /root, is
#: out of that user's reach): a virtual environment of the system's python3 with the suite's
#: dependencies, keyed by both
CHECK_VENV_PREFIX = "/var/tmp/dlsuite-check-venv-"


def check_interpreter(user: RunAs | None, say: Callable[[str], None] = print) -> str:
    """An interpreter ``user`` can run the suite's host side with: this one when it can (a
    cluster's shared file system, or a non-root caller); else a virtual environment of the
    system's ``python3`` under /var/tmp with the suite's dependencies (made once, with this
    host's pip configuration; the suite itself comes from the checkout the checks start in)."""
    try:
        check_suite_runs_as(user)
        return sys.executable
    except ImageError:
        if user is None:
            raise
    system = shutil.which("python3", path="/usr/bin:/bin")
    if system is None:
        raise ImageError(
            f"{user.name} cannot run {sys.executable} and there is no /usr/bin/python3 to make "
            "one it can: name one with --python"
        )
    deps = [d for d in envs._suite_requirements().splitlines() if d.strip()]
    key = hashlib.sha256("\n".join([os.path.realpath(system), *deps]).encode()).hexdigest()[:12]
    venv = Path(CHECK_VENV_PREFIX + key)
    python = venv / "bin" / "python"
    with open(f"{venv}.lock", "w") as lock:  # two checks at once make it once
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (venv / ".complete").is_file():
            say(f"{user.name} cannot run {sys.executable} (root's): making {venv} from {system}")
            shutil.rmtree(venv, ignore_errors=True)
            for cmd in ([system, "-m", "venv", str(venv)],
                        [str(python), "-m", "pip", "install", "--quiet", *deps]):  # fmt: skip
                proc = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL)
                if proc.returncode != 0:
                    last = (proc.stderr.strip().splitlines() or ["?"])[-1]
                    raise ImageError(
                        f"making {venv} failed ({last[:160]}; `python3 -m venv` needs the "
                        "python3-venv package): name an interpreter with --python"
                    )
            os.chmod(venv, 0o755)
            (venv / ".complete").touch()
    check_suite_runs_as(user, str(python))
    return str(python)


@dataclass
class CheckResult:
    """One check's outcome, from its records."""

    framework: str
    check: str
    out: Path
    returncode: int
    seconds: float
    records: int = 0
    ok: int = 0
    correct: int = 0
    #: records naming the SIF's sha256 as ``backend.image_digest``
    digest_named: int = 0
    problems: list[str] | None = None

    @property
    def passed(self) -> bool:
        return (
            self.returncode == 0
            and self.records > 0
            and self.ok == self.correct == self.digest_named == self.records
        )


def check_command(framework: str, check: SifCheck, out: Path, python: str = sys.executable
                  ) -> list[str]:  # fmt: skip
    return [python, "-m", "suite", "run", *check.args, "--framework", framework,
            "--backend", "apptainer", "--out", str(out)]  # fmt: skip


def run_sif_check(
    framework: str,
    sif: Path,
    check: SifCheck,
    out: Path,
    user: RunAs | None,
    on_line: Callable[[str], None] = lambda s: None,
    python: str = sys.executable,
) -> CheckResult:
    """Run ``check`` in ``sif`` with ``--backend apptainer`` as ``user`` into ``out`` (made
    and handed to that user), and judge its records: every one ok, correct, and naming the
    SIF's digest."""
    out.parent.mkdir(parents=True, exist_ok=True)
    if user is not None:
        os.chown(out.parent, user.uid, user.gid)
    env = user_environment(user)
    env[DIR_VAR] = str(sif.parent)
    cmd = check_command(framework, check, out, python)
    on_line("$ " + " ".join(cmd))
    t0 = time.perf_counter()
    with (out.parent / f"{out.name}.log").open("w") as log:
        if user is not None:
            os.fchown(log.fileno(), user.uid, user.gid)
        proc = subprocess.run(
            cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
            cwd=check_cwd(user), **as_user_kwargs(user),
        )  # fmt: skip
    result = CheckResult(framework, check.name, out, proc.returncode, time.perf_counter() - t0)
    digest = sif_digest(sif)
    problems = []
    path = out / "results.jsonl"
    recs = (
        [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
        if path.is_file()
        else []
    )
    for rec in recs:
        result.records += 1
        result.ok += rec.get("status") == "ok"
        result.correct += bool((rec.get("correctness") or {}).get("passed"))
        named = (rec.get("backend") or {}).get("image_digest")
        result.digest_named += named == digest
        if rec.get("status") != "ok":
            problems.append(f"{rec.get('task_id')}: {rec.get('status')} {rec.get('reason', '')}")
        elif named != digest:
            problems.append(f"{rec.get('task_id')}: image_digest {named}, the SIF is {digest}")
    if not recs:
        problems.append(
            f"no records in {path} (exit {proc.returncode}; log {out.parent / out.name}.log)"
        )
    result.problems = problems[:5]
    return result


# ------------------------------------------------------ SIFs from definition files alone


def user_readable(path: Path, user: RunAs | None, workdir: Path, say: Callable[[str], None]
                  ) -> Path:  # fmt: skip
    """``path`` when ``user`` can read it; else a hard link to it (a copy across file
    systems) in ``workdir``, readable by that user: a root's image directory (~/.cache under
    /root) is not. Same bytes, so the same digest."""
    if readable_by(user, path):
        return path
    linked = workdir / path.name
    linked.parent.mkdir(parents=True, exist_ok=True)
    linked.unlink(missing_ok=True)
    try:
        os.link(path, linked)
        how = "linked"
    except OSError:
        shutil.copy2(path, linked)
        how = "copied"
    os.chmod(linked, 0o644)
    os.chmod(linked.parent, 0o755)
    say(f"{user.name if user else 'this user'} cannot read {path}: {how} it to {linked}")
    return linked


def def_build_command(
    sif: Path, definition: Path, arguments: dict[str, str], apptainer: str = "apptainer"
) -> list[str]:
    """``apptainer build --fakeroot --force [--build-arg K=V ...] SIF DEF``: as a user, with
    Apptainer's fakeroot (how cluster users build; root's build of a ``%post`` fails where
    the capability bounding set lacks CAP_SYS_RESOURCE, docs/guide/apptainer.md)."""
    cmd = [apptainer, "build", "--fakeroot", "--force"]
    for key, value in arguments.items():
        cmd += ["--build-arg", f"{key}={value}"]
    return [*cmd, str(sif), str(definition)]


def _build_output(proc: subprocess.Popen[str]) -> Iterator[str]:
    """The lines of a build started by :func:`suite.envs.start_build`; the build, with all it
    started, is ended if the reader stops early (Ctrl-C: it runs in a session of its own)."""
    assert proc.stdout is not None
    try:
        yield from proc.stdout
    except BaseException:
        envs.end_build(proc)
        raise


def _run_build(
    cmd: list[str], cwd: Path, user: RunAs | None, log_path: Path, on_line: Callable[[str], None]
) -> None:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("w") as log:
        log.write(f"# {now_iso()} (cwd {cwd}, as {user.name if user else 'this user'})\n")
        log.write("$ " + " ".join(cmd) + "\n")
        on_line("$ " + " ".join(cmd))
        proc = envs.start_build(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            text=True, cwd=cwd, env=user_environment(user), **as_user_kwargs(user),
        )  # fmt: skip
        tail: list[str] = []
        for line in _build_output(proc):
            log.write(line)
            tail = [*tail[-19:], line.rstrip()]
            if line.startswith(("INFO:", "FATAL:", "ERROR", "WARNING:", "[dlsuite")):
                on_line(line.rstrip())
        rc = proc.wait()
    if rc != 0:
        last = " | ".join(x for x in tail[-3:] if x.strip())
        raise ImageError(f"apptainer build failed (exit {rc}): {last[-400:]} (log: {log_path})")


def _build_dir(user: RunAs | None) -> Path:
    """A fresh directory the building user owns, outside root's home (the user must reach it)."""
    work = Path(tempfile.mkdtemp(prefix="dlsuite-sif-build-", dir="/tmp"))
    os.chmod(work, 0o755)
    if user is not None:
        os.chown(work, user.uid, user.gid)
    return work


def build_base_sif(
    sif: Path,
    user: RunAs | None,
    suite_name: str = "bookworm",
    mirror: str | None = None,
    on_line: Callable[[str], None] = lambda s: None,
) -> Path:
    """``dlsuite-base.sif`` from ``containers/base/Apptainer.def`` (debootstrap from Debian's
    archive), built by ``user`` (this user when None) with ``--fakeroot``."""
    check_mirror(mirror, suite_name)
    apptainer = apptainer_binary()
    if shutil.which("debootstrap") is None:
        raise ImageError("Bootstrap: debootstrap needs debootstrap: apt-get install debootstrap")
    work = _build_dir(user)
    try:
        shutil.copy2(base_def_path(), work / "Apptainer.def")
        arguments = {"SUITE": suite_name, **({"MIRROR": mirror} if mirror else {})}
        cmd = def_build_command(work / sif.name, work / "Apptainer.def", arguments, apptainer)
        _run_build(cmd, work, user, image_dir() / "logs" / "build-sif-base.log", on_line)
        _keep(work / sif.name, sif)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return sif


def build_sif_from_def(
    framework: str,
    opts: BuildOptions,
    directory: Path,
    base_sif: Path,
    user: RunAs | None,
    wheelhouse: Path | None = None,
    ca_bundle: Path | None = None,
    on_line: Callable[[str], None] = lambda s: None,
) -> Path:
    """``<framework>.sif`` from ``containers/<framework>/Apptainer.def`` with ``apptainer build``
    alone: the context staged as for Docker, ``Bootstrap: localimage`` from ``base_sif``, the
    Docker build's arguments as ``--build-arg`` (the labels' values; with ``wheelhouse``, pip
    installs from it alone, served on the loopback as for Docker), built by ``user`` (this
    user when None) with ``--fakeroot``. No Docker daemon, no registry."""
    apptainer = apptainer_binary()
    requirements_path(framework, opts.variant)
    work = _build_dir(user)
    name = sif_name(framework, opts.variant)
    try:
        ctx = stage_context(framework, work / "context", ca_bundle)
        os.chmod(ctx, 0o755)
        base = user_readable(base_sif, user, work / "base", on_line)
        with contextlib.ExitStack() as stack:
            if wheelhouse is not None:
                opts = _replace(opts, find_links=stack.enter_context(serve_directory(wheelhouse)))
            arguments = {
                k: v for k, v in build_args(framework, opts).items() if k not in DOCKER_ONLY_ARGS
            }
            arguments["DLSUITE_CONTEXT_DIGEST"] = context_digest(
                ctx, arguments, wheelhouse is not None
            )
            arguments["BASE_SIF"] = str(base)
            definition = ctx / "containers" / framework / "Apptainer.def"
            cmd = def_build_command(work / name, definition, arguments, apptainer)
            log = image_dir() / "logs" / f"build-sif-def-{name[:-4]}.log"
            _run_build(cmd, ctx, user, log, on_line)
        _keep(work / name, directory / name)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return directory / name


def _keep(built: Path, dest: Path) -> None:
    """Move a SIF the building user made into ``dest``, owned by this process's user."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(built, dest)
    if os.geteuid() == 0:
        os.chown(dest, 0, 0)
