"""Per-framework environments: ``.venvs/<framework>-<hash>``, made from the same
``containers/<framework>/requirements.txt`` the framework's image uses.

The hash covers what decides the environment's content: the requirements file, the suite's own
runtime dependencies (pyproject.toml) and the Python version. An environment is created on
first use (a progress line, its pip log in ``<name>.log``), reused after, and only counts as
built once its marker file ``dlsuite-env.json`` is written; a half-built one (an interrupted or
failed build) is removed and built again. A lock file keeps two runs from building the same one.

Host side: nothing here imports a framework.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from suite.errors import ConfigError, SuiteError
from suite.provenance import SOURCE_ROOT, now_iso
from suite.settings import setting

MARKER = "dlsuite-env.json"
ENVS_VAR = str(setting("envs_dir").env)  # declared with the setting


class EnvBuildError(SuiteError):
    """An environment could not be built; the message names the package that failed."""

    exit_code = 1


def envs_root(configured: str | None = None) -> Path:
    """``--envs-dir`` / ``DLSUITE_ENVS_DIR``, else ``.venvs`` in the source tree (a checkout),
    else ``~/.cache/dlsuite/venvs`` (an installed suite)."""
    chosen = configured or os.environ.get(ENVS_VAR)
    if chosen:
        return Path(chosen).expanduser().resolve()
    if (SOURCE_ROOT / "pyproject.toml").exists():
        return SOURCE_ROOT / ".venvs"
    return Path.home() / ".cache" / "dlsuite" / "venvs"


RECIPES_VAR = "DLSUITE_CONTAINERS_DIR"


def recipes_root() -> Path:
    """``containers/`` of the source tree, or a site's own recipes (``DLSUITE_CONTAINERS_DIR``)."""
    chosen = os.environ.get(RECIPES_VAR)
    return Path(chosen).expanduser().resolve() if chosen else SOURCE_ROOT / "containers"


def recipe_frameworks() -> list[str]:
    """The frameworks with an environment recipe (``<recipes>/<framework>/requirements.txt``)."""
    root = recipes_root()
    if not root.is_dir():
        return []
    return sorted(p.parent.name for p in root.glob("*/requirements.txt"))


def requirements_file(framework: str) -> Path:
    if not re.fullmatch(r"[A-Za-z0-9][\w.-]*", framework):  # a folder's name, not a path
        raise ConfigError(
            f"framework {framework!r} is not a framework's name (frameworks with an environment "
            f"recipe: {', '.join(recipe_frameworks()) or 'none'})"
        )
    path = recipes_root() / framework / "requirements.txt"
    if not path.is_file():
        import difflib

        known = recipe_frameworks()
        close = difflib.get_close_matches(framework, known, n=1, cutoff=0.6)
        if close and not path.parent.is_dir():  # a misspelt name, not a recipe being written
            raise ConfigError(
                f"unknown framework {framework!r}; did you mean {close[0]}? (frameworks with an "
                f"environment recipe: {', '.join(known)})"
            )
        raise ConfigError(
            f"framework {framework!r}: there is no {path}, so the suite cannot make its "
            f"environment (frameworks with a recipe: {', '.join(known) or 'none'}); add one (see "
            "docs/guide/adding-a-framework.md) or install the framework here and use --backend local"
        )
    return path


#: Debian packages a framework needs beyond Python wheels, one per line (``#`` comments):
#: libraries a wheel links against (MXNet's libgomp1), tools it runs (tinygrad's CPU device
#: compiles with clang). The image installs them with apt; this host's environment uses the
#: host's, so :func:`ensure` says which are missing and ``tests/system-deps.sh`` installs them.
SYSTEM_PACKAGES = "system-packages.txt"


def system_packages(framework: str) -> tuple[str, ...]:
    """The Debian packages ``containers/<framework>/system-packages.txt`` declares."""
    path = recipes_root() / framework / SYSTEM_PACKAGES
    declared: list[str] = []
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            name = line.split("#", 1)[0].strip()
            if not name:
                continue
            if not re.fullmatch(r"[a-z0-9][a-z0-9+.-]+", name):
                raise ConfigError(f"{path}: {name!r} is not a Debian package name")
            declared.append(name)
    return tuple(dict.fromkeys(declared))


def missing_system_packages(framework: str) -> list[str] | None:
    """The declared system packages dpkg does not know as installed on this host; None where
    there is no dpkg to ask (not a Debian-based host: nothing can be said)."""
    wanted = system_packages(framework)
    dpkg = shutil.which("dpkg-query")
    if not wanted or dpkg is None:
        return [] if not wanted else None
    proc = subprocess.run(
        [dpkg, "-W", "-f=${Package} ${Status}\\n", *wanted],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    installed = {
        ln.split()[0].split(":")[0]
        for ln in proc.stdout.splitlines()
        if ln.endswith(" install ok installed")
    }
    return [p for p in wanted if p not in installed]


def system_packages_note(framework: str) -> str | None:
    """One line naming the declared system packages missing on this host and the command that
    installs them; None when none is missing (or the host has no dpkg to ask)."""
    missing = missing_system_packages(framework)
    if not missing:
        return None
    return (
        f"{framework} needs Debian packages that are not installed on this host: "
        f"{' '.join(missing)} ({recipes_root() / framework / SYSTEM_PACKAGES}); its environment "
        f"uses the host's libraries and tools: apt-get install {' '.join(missing)}"
    )


POST_INSTALL = "post-install.sh"


def post_install_script(framework: str) -> Path | None:
    """``containers/<framework>/post-install.sh``: a build step pip cannot do alone (run with
    the environment's python as its argument, after the requirements are installed)."""
    path = recipes_root() / framework / POST_INSTALL
    return path if path.is_file() else None


def post_install_sources(framework: str) -> list[str]:
    """The source distributions a recipe's post-install.sh builds, as pins (``horovod==0.28.1``):
    its ``VERSION=`` and the ``NAME==$VERSION`` it downloads. A wheelhouse for an air-gapped
    image build must hold them too (``dlsuite images build --prepare-wheelhouse``)."""
    hook = post_install_script(framework)
    if hook is None:
        return []
    text = hook.read_text()
    version = re.search(r"^VERSION=([0-9][\w.]*)", text, re.M)
    names = re.findall(r"([A-Za-z0-9_.\-]+)==\$\{?VERSION\b", text)
    if not version:
        return []
    return sorted({f"{n.lower()}=={version.group(1)}" for n in names})


def _suite_requirements() -> str:
    """The suite's runtime dependencies, as declared in pyproject.toml (one per line)."""
    text = (SOURCE_ROOT / "pyproject.toml").read_text() if _is_checkout() else ""
    match = re.search(r"^dependencies\s*=\s*\[(.*?)\]", text, re.S | re.M)
    if match:
        return "\n".join(re.findall(r'"([^"]+)"', match.group(1)))
    from importlib import metadata

    return "\n".join(sorted(metadata.requires("dlsuite") or []))


def _is_checkout() -> bool:
    return (SOURCE_ROOT / "pyproject.toml").is_file()


def env_hash(framework: str) -> str:
    h = hashlib.sha256()
    # what pip reads: comments and blank lines do not make a new environment
    lines = (
        ln.split("#", 1)[0].strip() for ln in requirements_file(framework).read_text().splitlines()
    )
    h.update("\n".join(ln for ln in lines if ln).encode())
    hook = post_install_script(framework)
    if hook is not None:  # a build step beyond pip (Horovod's patched source build)
        h.update(b"\0" + hook.read_bytes())
    h.update(b"\0" + _suite_requirements().encode())
    h.update(b"\0" + f"{sys.version_info.major}.{sys.version_info.minor}".encode())
    return h.hexdigest()[:12]


@dataclass(frozen=True)
class Env:
    framework: str
    path: Path

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def built(self) -> bool:
        return (self.path / MARKER).is_file() and self.python.exists()

    def info(self) -> dict[str, Any]:
        try:
            doc: dict[str, Any] = json.loads((self.path / MARKER).read_text())
            return doc
        except (OSError, ValueError):
            return {}


def env_for(framework: str, root: Path | None = None) -> Env:
    return Env(framework, (root or envs_root()) / f"{framework}-{env_hash(framework)}")


def _failed_package(log: str) -> str:
    """The package pip names in its error output (the clearest line), or the last error line."""
    patterns = (
        r"No matching distribution found for ([^\s;]+)",
        r"Could not find a version that satisfies the requirement ([^\s;]+)",
        r"Failed to build ([^\s]+)",
        r"Failed building wheel for ([^\s]+)",
        r"Cannot install ([^\s]+?)(?: and|,| because)",
        r"error: subprocess-exited-with-error.*?Running setup\.py .*? for ([^\s]+)",
        r"Building wheel for ([^\s]+) \(pyproject\.toml\): finished with status 'error'",
        # uv's words
        r"Because ([^\s]+) was not found in the package registry",
        r"Because there is no version of ([^\s]+?)(?: and|,| we)",
        r"Failed to (?:build|download|prepare distributions)[^`]*`([^`]+)`",
    )
    for pat in patterns:
        m = re.search(pat, log, re.S)
        if m:
            return m.group(1).rstrip(".,")
    errors = [ln.strip() for ln in log.splitlines() if ln.strip().startswith("ERROR")]
    return errors[-1] if errors else "(see the log)"


def _lock_file(path: Path) -> Any:
    """The lock file opened for appending, its folder (the environments' root) made first; an
    unusable root (not a directory, not writable) is the user's setting to fix: one line."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        return path.open("a")
    except OSError as exc:
        raise _unusable_root(path.parent, exc.strerror or str(exc)) from None


def _unusable_root(root: Path, why: str) -> ConfigError:
    return ConfigError(
        f"--envs-dir / {ENVS_VAR}: cannot keep environments in {root} ({why}); point "
        f"--envs-dir or {ENVS_VAR} at a directory you can write to (made if missing)"
    )


def check_buildable(framework: str, root: Path | None = None) -> None:
    """Before a run measures anything: where the framework's environment is not built yet,
    that it could be (the root can be made and written, ``DLSUITE_INSTALLER`` is valid).
    Nothing is written: the nearest folder that exists is asked."""
    root = root or envs_root()
    if env_for(framework, root).built:
        return
    find_uv()
    probe = root
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        raise _unusable_root(root, f"{probe} is not a directory")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise _unusable_root(root, f"{probe} is not writable")


@contextmanager
def _locked(path: Path, *, wait: bool = True) -> Iterator[bool]:
    """Hold the lock file ``path``; with ``wait=False`` yield False at once (and hold nothing)
    where another process holds it: an environment being built."""
    while True:
        with _lock_file(path) as fh:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                yield False
                return
            if not _still_named(fh, path):
                # `envs prune` removed the file while this process waited on it: a newcomer
                # would lock a new file of that name beside this one, so lock that one too
                fcntl.flock(fh, fcntl.LOCK_UN)
                continue
            try:
                yield True
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)
            return


def _still_named(fh: Any, path: Path) -> bool:
    """Whether ``path`` still names the open file ``fh`` (not removed, not replaced)."""
    try:
        here = path.stat()
    except FileNotFoundError:
        return False
    held = os.fstat(fh.fileno())
    return (here.st_dev, here.st_ino) == (held.st_dev, held.st_ino)


def _being_built(env: Env) -> bool:
    """Whether another process holds the environment's lock now (it builds it, or adds to it)."""
    lock = env.path.with_name(env.name + ".lock")
    try:
        fh = lock.open("r")
    except OSError:
        return False
    with fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(fh, fcntl.LOCK_UN)
    return False


#: frameworks whose missing system packages this process has already reported
_NOTED: set[str] = set()


def ensure(
    framework: str,
    root: Path | None = None,
    *,
    extra: tuple[str, ...] = (),
    say: Callable[[str], None] = lambda s: print(s, file=sys.stderr, flush=True),
) -> Env:
    """The framework's environment, built first if it is not there yet. ``extra`` packages
    (pytest for the conformance kit) are added to an existing one when missing."""
    env = env_for(framework, root)
    reqs = requirements_file(framework)
    if framework not in _NOTED:
        _NOTED.add(framework)
        note = system_packages_note(framework)
        if note:
            say(f"env {env.name}: warning: {note}")
    if env.built and all(has_distribution(env, p) for p in extra):
        # built (its marker is written last) with all it needs: used as it is, without the
        # lock, so a root others keep read-only (a site's shared environments) serves too
        return env
    lock = env.path.with_name(env.name + ".lock")
    if _being_built(env):  # (the wait can be minutes: say why nothing happens)
        say(f"env {env.name}: another process is building it (lock: {lock}); waiting for it")
    with _locked(lock):
        if not env.built:
            try:
                _build(env, reqs, say)
            except KeyboardInterrupt:
                say(
                    f"env {env.name}: interrupted; the half-built environment is built again "
                    "on its next use (dlsuite envs prune removes it)"
                )
                raise
        missing = [p for p in extra if not has_distribution(env, p)]
        if missing:
            say(f"env {env.name}: adding {', '.join(missing)}")
            _pip(env, ["install", *missing], env.path.with_name(env.name + ".log"), framework)
            compile_environment(env.python)
    return env


#: run by the environment's python: whether the requirement (``pytest``, ``pytest>=8``) is
#: installed there, read with the ``packaging`` that pip carries; an environment without pip
#: (one made by hand, a site's) still answers for a bare distribution's name
_HAS = """
import importlib.metadata as m, sys
try:
    from pip._vendor.packaging.requirements import Requirement
except ImportError:
    m.version(sys.argv[1])
    sys.exit(0)
r = Requirement(sys.argv[1])
sys.exit(0 if r.specifier.contains(m.version(r.name), prereleases=True) else 1)
"""


def has_distribution(env: Env, package: str) -> bool:
    """Whether the requirement ``package`` (a distribution's name, or ``pytest>=8``) is met
    in ``env``."""
    probe = subprocess.run(
        [str(env.python), "-c", _HAS, package], capture_output=True, stdin=subprocess.DEVNULL
    )
    return probe.returncode == 0


# -- the installer: uv where it is, pip otherwise ----------------------------------------------
#: ``DLSUITE_INSTALLER``: ``auto`` (uv when found, else pip), ``pip``, ``uv``
INSTALLER_VAR = "DLSUITE_INSTALLER"
#: pip's settings that decide *what* is installed, and the uv variables that say the same
#: (uv reads neither pip.conf nor PIP_*: without them it would fetch another torch than the
#: machine's local wheel, or miss a site's index)
_PIP_TO_UV = {
    "find-links": "UV_FIND_LINKS",
    "index-url": "UV_DEFAULT_INDEX",
    "extra-index-url": "UV_INDEX",
    "constraint": "UV_CONSTRAINT",
    "cert": "SSL_CERT_FILE",
    "no-index": "UV_NO_INDEX",
}


def find_uv() -> str | None:
    """uv, if this machine has it and ``DLSUITE_INSTALLER`` does not say pip: beside the
    running interpreter first (the dev tools' venv installs it), then on PATH."""
    choice = os.environ.get(INSTALLER_VAR, "auto").strip().lower() or "auto"
    if choice not in ("auto", "pip", "uv"):
        raise ConfigError(f"{INSTALLER_VAR}={choice!r}: expected auto, pip or uv")
    if choice == "pip":
        return None
    beside = Path(sys.executable).parent / "uv"
    found = str(beside) if beside.is_file() else shutil.which("uv")
    if found is None and choice == "uv":
        raise ConfigError(f"{INSTALLER_VAR}=uv but uv is not installed (pip install uv)")
    return found


def pip_settings(python: str) -> dict[str, str] | None:
    """What pip would use of its configuration (pip.conf files, then ``PIP_*`` variables, the
    later winning), as ``pip config list`` reports it: key -> value; asked of the target
    environment's pip, else this interpreter's. None when no pip answers: then nobody can
    say what pip would install, and uv must not guess (pip installs instead)."""
    for candidate in dict.fromkeys((python, sys.executable)):
        proc = subprocess.run(
            [candidate, "-m", "pip", "config", "list"], capture_output=True, text=True,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
        if proc.returncode == 0:
            return parse_pip_config(proc.stdout)
    return None


def parse_pip_config(listing: str) -> dict[str, str]:
    """``pip config list``'s lines (``global.find-links='/opt/wheels'``, ``:env:.cert=...``)
    as key -> value, an environment variable over a site, user or global file."""
    rank = {"global": 0, "user": 1, "site": 2, ":env:": 3}
    best: dict[str, tuple[int, str]] = {}
    for line in listing.splitlines():
        m = re.fullmatch(r"([^.]*)\.([\w-]+)='(.*)'", line.strip())
        if not m:
            continue
        scope, key, value = m.groups()
        level = rank.get(scope, 0)
        if key not in best or level >= best[key][0]:
            best[key] = (level, value)
    return {k: v for k, (_, v) in best.items()}


def uv_environment(settings: dict[str, str]) -> dict[str, str]:
    """pip's settings as uv's variables; uv then picks, as pip does, the best version over
    every index (uv's default is the first index that has the package)."""
    env = {"UV_INDEX_STRATEGY": "unsafe-best-match"}
    for key, var in _PIP_TO_UV.items():
        value = settings.get(key)
        if value is None:
            continue
        if key == "no-index":
            if value.lower() in ("1", "true", "yes", "on"):
                env[var] = "1"
            continue
        env[var] = " ".join(value.split())
    return env


def install_command(
    python: str, args: list[str], uv: str | None
) -> tuple[list[str], dict[str, str]]:
    """``pip install ARGS`` for the environment of ``python``: through uv when given (pip's
    settings passed on), else that environment's pip. Returns the command and its environment."""
    env = dict(os.environ)
    settings = pip_settings(python) if uv is not None else None
    if uv is None or settings is None:
        # bytecode: compile_environment, after the install (pip compiles one file at a time)
        return [python, "-m", "pip", "--disable-pip-version-check", "install", "--no-compile",
                *args], env  # fmt: skip
    env.update(uv_environment(settings))
    return [uv, "pip", "install", "--python", python, *args], env


def compile_at_install() -> bool:
    """Whether an environment's modules are compiled to bytecode once it is installed.
    Compiling all of torch's 2,300 modules was most of an install's time (80 of 96 s on 2
    cores at load 16, against 13 s without), and a run imports a fraction of them: Python
    compiles those on first import and keeps the .pyc. Where PYTHONDONTWRITEBYTECODE is set it
    keeps none, and every process importing a framework would compile it again (import torch
    took 15-22 s without .pyc files against 8 s with, at load 15): then the environment is
    compiled, in parallel (:func:`compile_environment`)."""
    return bool(os.environ.get("PYTHONDONTWRITEBYTECODE"))


def compile_environment(python: Path, site_packages: bool = True) -> float:
    """Compile the environment's site-packages (``site_packages``) and the checkout's suite
    (every process imports it from the checkout: about 150 modules, a second) on every core,
    where :func:`compile_at_install`; returns the seconds it took (0 when not done). What is
    compiled already is skipped."""
    if not compile_at_install():
        return 0.0
    t0 = time.perf_counter()
    paths = []
    if site_packages:
        paths = subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True, text=True, stdin=subprocess.DEVNULL,
        ).stdout.split()  # fmt: skip
    if _is_checkout():
        paths.append(str(SOURCE_ROOT / "suite"))
    run_build(
        [str(python), "-m", "compileall", "-q", "-j", "0", *paths],
        stdin=subprocess.DEVNULL, capture_output=True,
    )  # fmt: skip
    return time.perf_counter() - t0


def bootstrap_uv(python: Path, timeout_s: float = 120.0) -> str | None:
    """uv installed by pip into the new environment (a 17 MB wheel, seconds), so that uv
    installs the rest: on 2 cores pip took 4-6 minutes for torch and the suite's dependencies
    at load 15 where uv took 40 s. None (pip installs, as before) when pip cannot get it: an
    air-gapped machine without uv in its wheelhouse, a timeout."""
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(
            [str(python), "-m", "pip", "--disable-pip-version-check", "install", "--quiet",
             "uv"],
            stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout_s,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return None
    uv = python.parent / "uv"
    if proc.returncode != 0 or not uv.is_file():
        return None
    print(f"venv: uv installed by pip in {time.perf_counter() - t0:.1f} s", flush=True)
    return str(uv)


#: Environments (the venv, pip, a framework's post-install build, the bytecode) and SIFs are
#: built at the lowest CPU priority: where something is being measured on the same machine, a
#: build must not take its cores. (In a plain clone's ``make test``, one test worker compiled
#: Horovod, ``make -j2``, beside a PyTorch quick run in the other, and every task of the run
#: was 20-50x slower.) Where nothing else runs, the niceness changes nothing.
BUILD_NICENESS = 19


def start_build(cmd: list[str], **popen: Any) -> subprocess.Popen[Any]:
    """``cmd`` started at the lowest CPU priority: niced (:data:`BUILD_NICENESS`, through
    ``nice`` where there is one) in a session of its own, whose scheduling group is niced too.
    Linux (with ``CONFIG_SCHED_AUTOGROUP``, on by default) shares the CPU between sessions
    first, and the suite's workers start sessions of their own (a task's whole process group
    can be ended): a busy process at nice 19 in a test's session got 0-22% of one CPU beside a
    busy worker, depending on what else ran, against 1-1.5% when its session is niced as a
    whole (``/proc/PID/autogroup``, as here; tests/unit/test_installer.py). Where there are no
    autogroups, the nice value alone counts."""
    nice = shutil.which("nice")
    niced = [nice, "-n", str(BUILD_NICENESS), *cmd] if nice else cmd
    proc = subprocess.Popen(niced, start_new_session=True, **popen)
    with contextlib.suppress(OSError):
        Path(f"/proc/{proc.pid}/autogroup").write_text(f"{BUILD_NICENESS}\n")
    return proc


def end_build(proc: subprocess.Popen[Any]) -> None:
    """End a build started by :func:`start_build` with everything it started (its session's
    process group: Ctrl-C at the terminal no longer reaches it)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def run_build(
    cmd: list[str], *, check: bool = False, capture_output: bool = False, **popen: Any
) -> subprocess.CompletedProcess[Any]:
    """``subprocess.run`` of ``cmd`` through :func:`start_build`."""
    if capture_output:
        popen.update(stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    with start_build(cmd, **popen) as proc:
        try:
            out, err = proc.communicate()
        except BaseException:
            end_build(proc)
            raise
    if check and proc.returncode:
        raise subprocess.CalledProcessError(proc.returncode, cmd, out, err)
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def make_venv(path: Path, uv: str | None) -> None:
    """A virtual environment at ``path`` with pip in it (scripts and a post-install step use
    it), by uv (about a second) or by ``python -m venv``."""
    cmd = (
        [uv, "venv", "--seed", "--quiet", "--python", sys.executable, str(path)]
        if uv
        else [sys.executable, "-m", "venv", str(path)]
    )
    run_build(cmd, check=True, capture_output=True, stdin=subprocess.DEVNULL)


def _pip(env: Env, args: list[str], log: Path, framework: str) -> None:
    """``pip ARGS`` in the environment; an ``install`` through uv where it is (pip when uv
    fails: pip is the reference, uv only the faster way to the same packages)."""
    uv = find_uv() if args[:1] == ["install"] else None
    tries = [uv, None] if uv else [None]
    for installer in tries:
        if args[:1] == ["install"]:
            cmd, environ = install_command(str(env.python), args[1:], installer)
        else:
            cmd = [str(env.python), "-m", "pip", "--disable-pip-version-check", *args]
            environ = dict(os.environ)
        with log.open("a") as fh:
            fh.write(f"\n$ {' '.join(cmd)}\n")
            fh.flush()
            proc = run_build(
                cmd, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=environ
            )
        if proc.returncode == 0:
            return
    text = log.read_text(errors="replace")
    raise EnvBuildError(
        f"environment for {framework} could not be built: pip failed on "
        f"{_failed_package(text)} (full log: {log})"
    )


def _post_install(env: Env, hook: Path, log: Path) -> None:
    with log.open("a") as fh:
        fh.write(f"\n$ bash {hook} {env.python}\n")
        fh.flush()
        proc = run_build(
            ["bash", str(hook), str(env.python)],
            stdout=fh,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    if proc.returncode != 0:
        tail = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()][-1:]
        raise EnvBuildError(
            f"environment for {env.framework} could not be built: {hook.name} exited "
            f"{proc.returncode} ({tail[0].strip()[:200] if tail else 'no output'}; "
            f"full log: {log})"
        )


def _build(env: Env, reqs: Path, say: Callable[[str], None]) -> None:
    uv = find_uv()  # a wrong DLSUITE_INSTALLER is refused before anything is touched
    log = env.path.with_name(env.name + ".log")
    if env.path.exists():
        say(f"env {env.name}: removing a half-built environment")
        shutil.rmtree(env.path)
    log.write_text(f"# {now_iso()} building {env.path} from {reqs}\n")
    say(
        f"env {env.name}: creating the {env.framework} environment from "
        f"{reqs} (first use; log: {log})"
    )
    t0 = time.perf_counter()
    try:
        make_venv(env.path, uv)
        _pip(env, ["install", "--quiet", "-r", str(reqs)], log, env.framework)
        hook = post_install_script(env.framework)
        if hook is not None:
            say(f"env {env.name}: running {hook} (this can take minutes)")
            _post_install(env, hook, log)
        # The suite itself, with its own dependencies resolved against the framework's pins.
        # Environments are shared between checkouts (same hash, same content): the workers
        # put the running checkout first on PYTHONPATH, so this install only supplies the
        # dependencies and a `dlsuite` inside the environment.
        target = ["-e", str(SOURCE_ROOT)] if _is_checkout() else [_installed_requirement()]
        _pip(env, ["install", "--quiet", "-c", str(reqs), *target], log, env.framework)
        compile_environment(env.python)
        freeze = subprocess.run(
            [str(env.python), "-m", "pip", "freeze", "--exclude-editable"],
            capture_output=True,
            text=True,
        ).stdout.split()
    except subprocess.CalledProcessError as exc:
        raise EnvBuildError(
            f"environment for {env.framework} could not be created: "
            f"{(exc.stderr or b'').decode(errors='replace').strip()[-300:]}"
        ) from None
    marker = {
        "framework": env.framework,
        "hash": env.path.name.rsplit("-", 1)[1],
        "requirements": reqs.read_text(),
        "python": f"{sys.version_info.major}.{sys.version_info.minor}.{sys.version_info.micro}",
        "created_at": now_iso(),
        "build_s": round(time.perf_counter() - t0, 1),
        "packages": freeze,
    }
    (env.path / MARKER).write_text(json.dumps(marker, indent=2) + "\n")
    say(f"env {env.name}: ready in {marker['build_s']:.0f} s")


def _installed_requirement() -> str:
    from importlib import metadata

    return f"dlsuite=={metadata.version('dlsuite')}"


def list_envs(root: Path | None = None) -> list[dict[str, Any]]:
    """Every environment under the root, with whether it matches today's requirements."""
    root = root or envs_root()
    out: list[dict[str, Any]] = []
    if not root.is_dir():
        return out
    for path in sorted(p for p in root.iterdir() if _is_environment(p)):
        framework, _, digest = path.name.rpartition("-")
        env = Env(framework, path)
        try:
            current = env_hash(framework) == digest
        except ConfigError:
            current = False  # the framework's recipe is gone
        info = env.info()
        out.append(
            {
                "name": path.name,
                "framework": framework,
                "hash": digest,
                "path": str(path),
                "built": env.built,
                "building": not env.built and _being_built(env),
                "current": current,
                "created_at": info.get("created_at"),
                "python": info.get("python"),
                "size_mb": round(_size(path) / 2**20, 1),
            }
        )
    return out


def _is_environment(path: Path) -> bool:
    """Whether ``path`` is an environment this module made, built or not: named
    ``<framework>-<12 hex digits>`` and holding its marker or a venv's ``pyvenv.cfg``, or with
    the lock or log a build leaves beside it. Anything else in the root (a root set to a
    folder that holds other things) is neither listed nor ever pruned."""
    if path.is_symlink() or not path.is_dir():
        return False
    if not re.fullmatch(r"[A-Za-z0-9][\w.-]*-[0-9a-f]{12}", path.name):
        return False
    beside = (path.with_name(path.name + ".lock"), path.with_name(path.name + ".log"))
    inside = (path / MARKER, path / "pyvenv.cfg")
    return any(p.is_file() for p in (*inside, *beside))


def _size(path: Path) -> int:
    total = 0
    for dirpath, _, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(dirpath, f)).st_size
            except OSError:
                pass
    return total


def prune(
    root: Path | None = None,
    *,
    everything: bool = False,
    dry_run: bool = False,
    busy: list[str] | None = None,
) -> list[str]:
    """Remove environments that no longer match their requirements (or half-built ones);
    all of them with ``everything``. Returns the names removed; one another process holds
    the lock of (a build in progress, minutes) is left alone, its name added to ``busy``."""
    root = root or envs_root()
    removed = []
    for e in list_envs(root):
        if everything or not e["current"] or not e["built"]:
            if e["building"]:
                if busy is not None:
                    busy.append(e["name"])
                continue
            removed.append(e["name"])
            if dry_run:
                continue
            with _locked(Path(e["path"] + ".lock"), wait=False) as held:
                if not held:  # a build started since it was listed
                    removed.pop()
                    if busy is not None:
                        busy.append(e["name"])
                    continue
                if not everything and e["current"] and Env(e["framework"], Path(e["path"])).built:
                    removed.pop()  # it was being built, and now it is
                    continue
                shutil.rmtree(e["path"], ignore_errors=True)
                Path(e["path"] + ".log").unlink(missing_ok=True)
                # removed while held: a process waiting on it finds it gone and locks afresh
                # (_locked), so it and a newcomer never both build the environment
                Path(e["path"] + ".lock").unlink(missing_ok=True)
    return removed


def main(argv: list[str] | None = None) -> int:
    """``python -m suite.envs create FRAMEWORK [--with PKG ...]``: build (or reuse) the
    framework's environment and print its path, as ``dlsuite envs create`` does. This module
    needs only the standard library, so any Python 3.10+ with ``venv`` runs it from a checkout
    (``PYTHONPATH=<checkout>``) before the suite itself is installed anywhere: ``make
    conformance`` builds nothing but the framework's own environment."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m suite.envs")
    sub = parser.add_subparsers(dest="command", required=True)
    create = sub.add_parser("create", help="build (or reuse) a framework's environment")
    create.add_argument("framework")
    create.add_argument("--with", dest="extra", action="append", default=[], metavar="PKG")
    venv = sub.add_parser(
        "venv",
        help="make (or reuse) a virtual environment and install into it: uv where it is (with "
        "pip's configuration passed on), else pip",
    )
    venv.add_argument(
        "--lazy-bytecode", action="store_true",
        help="compile nothing after the install, also where PYTHONDONTWRITEBYTECODE is set",
    )  # fmt: skip
    venv.add_argument("path")
    venv.add_argument("install", nargs=argparse.REMAINDER, help="pip install's arguments")
    args = parser.parse_args(argv)
    try:
        if args.command == "venv":
            return venv_install(
                Path(args.path), [a for a in args.install if a != "--"],
                compile_now=not args.lazy_bytecode,
            )  # fmt: skip
        print(ensure(args.framework, extra=tuple(args.extra)).path)
    except SuiteError as exc:
        print(f"dlsuite: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:  # ensure said what was left behind
        return 130
    return 0


def venv_install(path: Path, args: list[str], compile_now: bool = True) -> int:
    """``python -m suite.envs venv [--lazy-bytecode] PATH ARGS``: the checkout's own
    environment (``make venv``, ``make bench``): made if missing, then ``pip install ARGS``
    (uv where it is, pip when there is no uv or uv fails), then compiled
    (:func:`compile_environment`): only the checkout when ``compile_now`` is off (``make
    bench``: its one run imports a fraction of what compiling everything costs). Says which step took how long:
    where a first run's time goes."""
    uv = find_uv()
    python = path / "bin" / "python"
    t0 = time.perf_counter()
    if not python.exists():
        make_venv(path, uv)
        print(f"venv: {path} made by {'uv' if uv else 'python -m venv'} in "
              f"{time.perf_counter() - t0:.1f} s", flush=True)  # fmt: skip
    if uv is None and os.environ.get(INSTALLER_VAR, "auto").strip().lower() in ("", "auto"):
        uv = bootstrap_uv(python)
    for installer in [uv, None] if uv else [None]:
        t1 = time.perf_counter()
        cmd, environ = install_command(str(python), args, installer)
        rc = subprocess.run(cmd, env=environ, stdin=subprocess.DEVNULL).returncode
        who = "uv" if installer else "pip"
        if rc == 0:
            print(f"venv: installed by {who} in {time.perf_counter() - t1:.1f} s", flush=True)
            took = compile_environment(python, site_packages=compile_now)
            if took:
                what = "the environment and the checkout" if compile_now else "the checkout"
                print(f"venv: {what} compiled to bytecode in {took:.1f} s "
                      "(PYTHONDONTWRITEBYTECODE is set: Python would keep none)", flush=True)  # fmt: skip
            return 0
        print(f"venv: {who} install failed (exit {rc})", file=sys.stderr, flush=True)
    return 1


if __name__ == "__main__":
    sys.exit(main())
