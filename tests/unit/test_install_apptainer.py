"""containers/install-apptainer.sh, the parts that change nothing: the non-root refusal, the
help, and the command it names on each distribution (an os-release file of that distribution,
FORCE=1 so that an Apptainer already installed here does not end the script first). Building
Apptainer takes minutes and root; docs/guide/apptainer.md records the run."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.helpers import NOBODY, ROOT, nobody_checkout

SCRIPT = ROOT / "containers" / "install-apptainer.sh"


def nobody_script() -> Path:
    """The script where that user can reach it (a copy where the checkout is 0700)."""
    return nobody_checkout() / SCRIPT.relative_to(ROOT)


def run(
    tmp_path: Path, *args: str, os_release: str | None = None, as_nobody: bool = False
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "FORCE": "1", "LOGDIR": str(tmp_path / "logs")}
    if os_release is not None:
        (tmp_path / "os-release").write_text(os_release)
        env["OS_RELEASE"] = str(tmp_path / "os-release")
    argv = ["bash", str(SCRIPT), *args]
    if as_nobody and os.geteuid() == 0:
        argv = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
                "bash", str(nobody_script()), *args]  # fmt: skip
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)


def test_refuses_a_user_who_is_not_root_in_one_line(tmp_path: Path) -> None:
    proc = run(tmp_path, as_nobody=True)
    assert proc.returncode == 1
    assert proc.stdout == ""
    script = nobody_script() if os.geteuid() == 0 else SCRIPT
    assert proc.stderr.splitlines() == [
        f"install-apptainer.sh: run it as root (sudo bash {script}); it installs system packages"
    ]
    assert not (tmp_path / "logs").exists()


def test_help_says_what_it_changes(tmp_path: Path) -> None:
    proc = run(tmp_path, "--help", as_nobody=True)
    assert proc.returncode == 0, proc.stderr
    assert "What it changes on the system" in proc.stdout
    assert "root default capabilities = file" in proc.stdout


@pytest.mark.skipif(os.geteuid() != 0, reason="the distribution cases come after the root check")
@pytest.mark.parametrize(
    ("os_release", "expected"),
    [
        ('ID=fedora\nPRETTY_NAME="Fedora Linux 41"\n', "install it with: dnf install -y apptainer"),
        (
            'ID="rocky"\nID_LIKE="rhel centos fedora"\n',
            "install it with: dnf install -y epel-release && dnf install -y apptainer",
        ),
        (
            'ID=arch\nPRETTY_NAME="Arch Linux"\n',
            "no recipe for Arch Linux (it covers Debian 12 and 13, Ubuntu, Fedora, RHEL",
        ),
        (
            'ID=debian\nVERSION_CODENAME=bullseye\nPRETTY_NAME="Debian GNU/Linux 11 (bullseye)"\n',
            "no recipe for Debian GNU/Linux 11 (bullseye)",
        ),
    ],
)
def test_names_the_distribution_command_and_runs_nothing(
    tmp_path: Path, os_release: str, expected: str
) -> None:
    proc = run(tmp_path, os_release=os_release)
    assert proc.returncode == 1
    assert proc.stdout == ""
    assert len(proc.stderr.splitlines()) == 1 and expected in proc.stderr, proc.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="the distribution cases come after the root check")
def test_ubuntu_gets_the_ppa_or_its_own_package(tmp_path: Path) -> None:
    proc = run(tmp_path, os_release="ID=ubuntu\nID_LIKE=debian\nVERSION_CODENAME=noble\n")
    assert proc.returncode == 1
    # the PPA, unless this machine's apt knows an `apptainer` package (then that one)
    assert (
        "add-apt-repository -y ppa:apptainer/ppa && apt-get install -y apptainer" in proc.stderr
        or "install it with: apt-get install -y apptainer   (or rerun" in proc.stderr
    ), proc.stderr
