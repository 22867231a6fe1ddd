"""The installer (suite/envs.py): uv where it is, with pip's configuration passed on (uv reads
neither pip.conf nor ``PIP_*``: without them it would fetch another torch than the machine's
local CPU wheel), pip otherwise, and pip whenever pip's configuration cannot be read."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from suite import envs
from suite.errors import ConfigError

LISTING = """\
:env:.cert='/etc/ssl/certs/ca-certificates.crt'
:env:.find-links='/opt/wheels'
global.cert='/etc/ssl/certs/other.crt'
global.constraint='/etc/xdg/pip/constraints.txt'
global.extra-index-url='file:///opt/pypi/simple file:///opt/pypi-more/simple'
global.find-links='/opt/old-wheels'
user.index-url='https://mirror.example/simple'
"""


def test_pip_configuration_is_read_with_pips_precedence() -> None:
    settings = envs.parse_pip_config(LISTING)
    assert settings["find-links"] == "/opt/wheels"  # PIP_FIND_LINKS over the global file
    assert settings["cert"] == "/etc/ssl/certs/ca-certificates.crt"
    assert settings["index-url"] == "https://mirror.example/simple"
    assert settings["constraint"] == "/etc/xdg/pip/constraints.txt"


def test_pip_configuration_becomes_uvs_variables() -> None:
    env = envs.uv_environment(envs.parse_pip_config(LISTING))
    assert env == {
        "UV_INDEX_STRATEGY": "unsafe-best-match",  # pip's: the best version over every index
        "UV_FIND_LINKS": "/opt/wheels",
        "UV_DEFAULT_INDEX": "https://mirror.example/simple",
        "UV_INDEX": "file:///opt/pypi/simple file:///opt/pypi-more/simple",
        "UV_CONSTRAINT": "/etc/xdg/pip/constraints.txt",
        "SSL_CERT_FILE": "/etc/ssl/certs/ca-certificates.crt",
    }
    assert envs.uv_environment({"no-index": "true"})["UV_NO_INDEX"] == "1"


def test_without_pips_configuration_pip_installs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(envs, "pip_settings", lambda python: None)
    cmd, _ = envs.install_command("/e/bin/python", ["-e", "."], "/usr/bin/uv")
    assert cmd[:5] == ["/e/bin/python", "-m", "pip", "--disable-pip-version-check", "install"]


def test_installs_compile_nothing_themselves(monkeypatch: pytest.MonkeyPatch) -> None:
    """Bytecode is compile_environment's, in parallel and only where Python keeps none of its
    own (PYTHONDONTWRITEBYTECODE); pip compiles one file at a time, uv only when asked."""
    monkeypatch.setattr(envs, "pip_settings", lambda python: {})
    pip, _ = envs.install_command("/e/bin/python", ["x"], None)
    uv, _ = envs.install_command("/e/bin/python", ["x"], "/usr/bin/uv")
    assert "--no-compile" in pip and "--compile-bytecode" not in uv


def test_an_environment_is_compiled_where_python_keeps_no_bytecode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    venv = tmp_path / "v"
    envs.make_venv(venv, None)
    site = Path(subprocess.run(
        [str(venv / "bin" / "python"), "-c",
         "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip())  # fmt: skip
    (site / "probe_module.py").write_text("X = 1\n")
    monkeypatch.delenv("PYTHONDONTWRITEBYTECODE", raising=False)
    assert envs.compile_environment(venv / "bin" / "python") == 0.0
    assert not list(site.glob("__pycache__/probe_module*.pyc"))
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    assert envs.compile_environment(venv / "bin" / "python") > 0
    assert list(site.glob("__pycache__/probe_module*.pyc"))


def test_builds_run_at_the_lowest_cpu_priority(tmp_path: Path) -> None:
    """A framework's post-install build (Horovod's compile) and pip run niced, so a build in
    one test worker or beside a run does not take a measurement's cores."""
    hook = tmp_path / "post-install.sh"
    hook.write_text('echo "niceness $(nice)"\n')
    log = tmp_path / "build.log"
    log.write_text("")
    env = envs.Env("probe", tmp_path / "probe-0")
    envs._post_install(env, hook, log)
    assert f"niceness {envs.BUILD_NICENESS}" in log.read_text(), log.read_text()


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_a_build_leaves_the_cpu_to_a_worker_in_a_session_of_its_own() -> None:
    """What the builds' low priority is for, measured: a worker in a session of its own (as the
    suite's workers are) and a build, both busy on one CPU. Started by ``start_build`` the
    build got 1-1.5% of what the worker got (0.02 s of CPU against 1.96 in 2 s, on the 2-core
    VM with a ``make test`` beside it). Unniced in a session of its own it got as much (1.0
    against 1.0); niced in the test's session, 0-22% (0.36 against 1.64 beside that ``make
    test``, 0 beside three busy sessions more): Linux shares the CPU between sessions first
    (autogroups), and the share a nice value leaves depends on what else runs."""
    cpu = min(os.sched_getaffinity(0))
    spin = f"import os\nos.sched_setaffinity(0, {{{cpu}}})\nwhile True: pass"

    worker = subprocess.Popen([sys.executable, "-c", spin], start_new_session=True)
    build = envs.start_build([sys.executable, "-c", spin])
    try:
        time.sleep(0.5)  # both up and spinning
        w0, b0 = _cpu_s(worker.pid), _cpu_s(build.pid)
        time.sleep(2.0)
        build_over_worker = (_cpu_s(build.pid) - b0) / max(_cpu_s(worker.pid) - w0, 1e-9)
    finally:
        for proc in (worker, build):
            proc.kill()
            proc.wait()
    assert build_over_worker < 0.1, build_over_worker  # unniced in its own session: about 1


def test_the_installer_is_chosen_by_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(envs.INSTALLER_VAR, "pip")
    assert envs.find_uv() is None
    monkeypatch.setenv(envs.INSTALLER_VAR, "conda")
    with pytest.raises(ConfigError, match="DLSUITE_INSTALLER"):
        envs.find_uv()


def _resolved_torch(cmd: list[str], env: dict[str, str]) -> str:
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    text = out.stdout + out.stderr
    assert out.returncode == 0, text[-2000:]
    return next(ln.split("==", 1)[1].strip() for ln in text.splitlines() if "+ torch==" in ln)


def test_uv_resolves_the_same_torch_as_pip(tmp_path: Path) -> None:
    """The property that matters: through uv, the torch that pip would install (here the
    machine's local CPU wheel, found through pip's find-links), never another build. uv comes
    with the dev tools (pyproject.toml), so CI has it."""
    uv = envs.find_uv()
    assert uv, "uv is one of the dev tools (pip install -e '.[dev]')"
    venv = tmp_path / "v"
    envs.make_venv(venv, uv)
    python = str(venv / "bin" / "python")
    report = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--quiet", "--ignore-installed",
         "--report", "-", "torch==2.13.0"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    pip_torch = next(
        i["metadata"]["version"]
        for i in json.loads(report.stdout)["install"]
        if i["metadata"]["name"] == "torch"
    )
    cmd, env = envs.install_command(python, ["--dry-run", "torch==2.13.0"], uv)
    assert cmd[0] == uv
    assert _resolved_torch(cmd, env) == pip_torch
