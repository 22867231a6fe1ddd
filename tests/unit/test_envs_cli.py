"""``dlsuite envs`` as a first-time user meets it: where ``--envs-dir`` may go, a misspelt
framework, an environments folder that cannot be used, a wrong ``DLSUITE_INSTALLER``. Each is
one line and exit code 2, with nothing built or left behind. (The builds themselves:
tests/integration/test_envs.py.)"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from suite import envs
from tests.helpers import ROOT, cli, records


def fake_built(root: Path, framework: str) -> envs.Env:
    """A built-looking environment (marker and interpreter) under ``root``, as list sees it."""
    env = envs.env_for(framework, root)
    (env.path / "bin").mkdir(parents=True)
    (env.path / "bin" / "python").symlink_to(shutil.which("python3") or "/usr/bin/python3")
    (env.path / envs.MARKER).write_text(json.dumps({"created_at": "2026-02-03T04:05:06"}))
    return env


def test_envs_dir_is_taken_before_and_after_the_subcommand(tmp_path: Path) -> None:
    mine, other = tmp_path / "mine", tmp_path / "other"
    env = fake_built(mine, "numpy")
    other.mkdir()
    after = cli("envs", "list", "--json", "--envs-dir", str(mine))
    assert after.returncode == 0, after.stderr
    doc = json.loads(after.stdout)
    assert doc["root"] == str(mine)
    assert [(e["name"], e["built"], e["current"]) for e in doc["environments"]] == [
        (env.name, True, True)
    ]
    before = json.loads(cli("envs", "--envs-dir", str(mine), "list", "--json").stdout)
    assert before == doc
    missing = cli("envs", "list", "--envs-dir", str(tmp_path / "mnie"))
    assert missing.returncode == 0
    assert f"{tmp_path / 'mnie'} does not exist (yet)" in missing.stderr, missing.stderr
    assert "does not exist" not in cli("envs", "list", "--envs-dir", str(other)).stderr
    # the variable is the layer below either flag
    via_env = cli("envs", "list", "--json", env={"DLSUITE_ENVS_DIR": str(other)})
    assert json.loads(via_env.stdout) == {"root": str(other), "environments": []}
    flag = cli(
        "envs", "list", "--json", "--envs-dir", str(mine), env={"DLSUITE_ENVS_DIR": str(other)}
    )
    assert json.loads(flag.stdout)["root"] == str(mine)
    dry = cli("envs", "prune", "--all", "--dry-run", "--envs-dir", str(mine))
    assert dry.returncode == 0 and env.name in dry.stdout and str(mine) in dry.stdout
    assert env.built  # a dry run removes nothing


def test_a_misspelt_framework_is_refused_before_anything_is_built(tmp_path: Path) -> None:
    root = tmp_path / "envs"
    proc = cli("envs", "create", "numpy,pytorhc", "--envs-dir", str(root))
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "unknown framework 'pytorhc'; did you mean pytorch?" in proc.stderr, proc.stderr
    assert "numpy" in proc.stderr.split("recipe:", 1)[1]  # the names that do exist
    assert not root.exists()  # numpy, first in the list, was not built first
    # a name close to none still names the file it would need
    proc = cli("envs", "create", "quux", "--envs-dir", str(root))
    assert proc.returncode == 2
    assert "containers/quux/requirements.txt" in proc.stderr and "did you mean" not in proc.stderr
    # a path is no name (numpy/../pytorch built the pytorch recipe, its marker saying
    # framework 'numpy/../pytorch'), and no name at all is not a successful build of nothing
    for bad, said in (("numpy/../pytorch", "is not a framework's name"),
                      (",", "no framework named"), ("", "no framework named")):  # fmt: skip
        proc = cli("envs", "create", bad, "--envs-dir", str(root))
        assert proc.returncode == 2, (bad, proc.stderr)
        assert said in proc.stderr, proc.stderr
    assert not root.exists() and not (tmp_path / "numpy").exists()


def test_an_unusable_envs_dir_is_one_line_naming_the_setting(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder\n")
    for where in (["--envs-dir", str(blocker / "envs")], []):
        env = {} if where else {"DLSUITE_ENVS_DIR": str(blocker / "envs")}
        proc = cli("envs", "create", "numpy", *where, env=env)
        assert proc.returncode == 2, proc.stderr
        assert "Traceback" not in proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("dlsuite: error: --envs-dir / "), lines
        assert "DLSUITE_ENVS_DIR" in lines[0] and str(blocker / "envs") in lines[0]
    assert blocker.read_text() == "not a folder\n"


def test_a_wrong_installer_is_refused_before_the_build_starts(tmp_path: Path) -> None:
    root = tmp_path / "envs"
    proc = cli(
        "envs", "create", "numpy", "--envs-dir", str(root), env={"DLSUITE_INSTALLER": "ppi"}
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert "DLSUITE_INSTALLER='ppi': expected auto, pip or uv" in proc.stderr
    assert "creating the numpy environment" not in proc.stderr
    # no half-built environment and no build log: only the (empty) lock file
    assert [p.name for p in root.iterdir()] == [envs.env_for("numpy", root).name + ".lock"]


def read_only_view(
    source: Path, view: Path, command: list[str]
) -> subprocess.CompletedProcess[str]:
    """``command`` run where ``view`` is ``source`` mounted read-only (a mount namespace of its
    own, through ``unshare``, so nothing outside the command sees the mount)."""
    unshare = shutil.which("unshare")
    probe = subprocess.run(
        [unshare or "unshare", "-r", "-m", "true"], capture_output=True, text=True
    ) if unshare else None  # fmt: skip
    if probe is None or probe.returncode != 0:
        pytest.skip("a read-only mount needs `unshare -r -m` (util-linux, user namespaces)")
    view.mkdir()
    script = 'mount --bind -o ro "$1" "$2" && shift 2 && exec "$@"'
    return subprocess.run(
        [unshare, "-r", "-m", "sh", "-c", script, "sh", str(source), str(view), *command],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip


def test_a_built_environment_on_a_read_only_root_is_used(tmp_path: Path) -> None:
    """A site's shared environments, read-only for users: a built one runs its workers (the
    build lock, a file to write, is not needed to use it)."""
    shared, view = tmp_path / "shared", tmp_path / "view"
    env = fake_built(shared, "numpy")  # its python: this interpreter, which has NumPy
    out = tmp_path / "run"
    suite = [sys.executable, "-m", "suite"]
    proc = read_only_view(shared, view, [
        *suite, "run", "--framework", "numpy", "--backend", "venv", "--benchmark", "gelu",
        "--dtype", "fp32", "--quick", "--envs-dir", str(view), "--out", str(out), "--no-history",
    ])  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    (rec,) = records(out)
    assert rec["status"] == "ok", rec.get("reason")
    assert rec["backend"]["kind"] == "venv"
    assert sorted(p.name for p in shared.iterdir()) == [env.name]  # no lock file was made
    # what does need to write there says so in one line
    proc = read_only_view(shared, tmp_path / "view2", [
        *suite, "envs", "create", "numpy", "--with", "dlsuite-no-such-package",
        "--envs-dir", str(tmp_path / "view2"),
    ])  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert "Read-only file system" in proc.stderr and "Traceback" not in proc.stderr


def test_prune_touches_only_the_environments_in_a_root_that_holds_other_things(
    tmp_path: Path,
) -> None:
    """--envs-dir set to a folder with other things in it (the home folder, a shared cache):
    list and prune --all see only the environments, built or half-built."""
    root = tmp_path / "home"
    keep = {
        "projects/thesis/ch1.tex": "precious\n",
        "data/digits.csv": "1,2\n",
        "my-code-2024/main.py": "print(1)\n",
        "numpy-0123456789ab/notes.txt": "named like one, made by the user\n",
        "wheelhouse.lock": "",  # a file, not a folder
    }
    for rel, text in keep.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    built = fake_built(root, "numpy")
    half = envs.env_for("pytorch", root)  # an interrupted build: its folder and its lock
    (half.path / "lib").mkdir(parents=True)
    half.path.with_name(half.name + ".lock").touch()
    listed = json.loads(cli("envs", "list", "--json", "--envs-dir", str(root)).stdout)
    assert [(e["name"], e["built"]) for e in listed["environments"]] == sorted(
        [(built.name, True), (half.name, False)]
    )
    proc = cli("envs", "prune", "--all", "--envs-dir", str(root))
    assert proc.returncode == 0, proc.stderr
    assert f"removed 2 environment(s) in {root}" in proc.stdout
    assert not built.path.exists() and not half.path.exists()
    assert {rel: (root / rel).read_text() for rel in keep} == keep


def test_a_run_whose_environment_cannot_be_built_stops_before_it_measures(tmp_path: Path) -> None:
    """numpy imports here (local), tensorflow needs its environment: a root it cannot be built
    in is exit 2 before numpy is measured, not failed records after; a dry run says so too and
    writes nothing."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    out = tmp_path / "run"
    task = ["run", "--framework", "numpy,tensorflow", "--benchmark", "gelu", "--dtype", "fp32",
            "--quick", "--out", str(out), "--no-history"]  # fmt: skip
    proc = cli(*task, "--envs-dir", str(blocker / "envs"))
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.startswith("dlsuite: error: --envs-dir / DLSUITE_ENVS_DIR: "), proc.stderr
    assert f"{blocker} is not a directory" in proc.stderr
    assert not out.exists()
    fresh = tmp_path / "new" / "envs"
    proc = cli(
        *task, "--dry-run", env={"DLSUITE_ENVS_DIR": str(fresh), "DLSUITE_INSTALLER": "pipp"}
    )
    assert proc.returncode == 2 and "DLSUITE_INSTALLER='pipp'" in proc.stderr, proc.stderr
    proc = cli(*task, "--dry-run", env={"DLSUITE_ENVS_DIR": str(fresh)})
    assert proc.returncode == 0, proc.stderr
    assert not (tmp_path / "new").exists()  # checked, not made


def test_with_packages_already_there_add_nothing_whatever_their_spelling(tmp_path: Path) -> None:
    """``--with "pytest>=7"`` said 'adding pytest>=7' and reinstalled and recompiled on every
    call (seconds, under the build lock): a requirement is now checked as pip reads it."""
    env = fake_built(tmp_path / "envs", "numpy")
    version = subprocess.run(
        [str(env.python), "-c", "import importlib.metadata as m; print(m.version('pytest'))"],
        capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    if not version:
        pytest.skip(f"{env.python} has no pytest to ask about")
    major = int(version.split(".")[0])
    assert envs.has_distribution(env, "pytest") and envs.has_distribution(env, "PyTest")
    assert envs.has_distribution(env, f"pytest>={major}") and envs.has_distribution(
        env, f"pytest=={version}"
    )
    assert not envs.has_distribution(env, f"pytest<{major}")
    assert not envs.has_distribution(env, "dlsuite-no-such-distribution")
    proc = cli("envs", "create", "numpy", "--with", f"pytest>={major},PyTest",
               "--envs-dir", str(tmp_path / "envs"))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(env.path) and "adding" not in proc.stderr, proc.stderr


def test_a_lock_removed_while_another_waits_on_it_is_taken_afresh(tmp_path: Path) -> None:
    """`envs prune` removes an environment's lock file while it holds it. A process already
    waiting on that file got the lock of a file no newcomer can see: the newcomer locked a new
    file of the same name, and both held "the" lock (both could build the environment)."""
    import threading
    import time

    path = tmp_path / "numpy-0123456789ab.lock"
    waiter_holds, let_go = threading.Event(), threading.Event()

    def waiter() -> None:
        with envs._locked(path) as held:
            assert held
            waiter_holds.set()
            let_go.wait(30)

    with envs._locked(path):
        thread = threading.Thread(target=waiter)
        thread.start()
        time.sleep(0.5)  # the waiter has opened the file and waits on it
        assert not waiter_holds.is_set()
        path.unlink()  # as prune does, holding it
    try:
        assert waiter_holds.wait(30)
        with envs._locked(path, wait=False) as held:  # a newcomer: the waiter holds this name
            assert not held
    finally:
        let_go.set()
        thread.join(30)
    with envs._locked(path, wait=False) as held:
        assert held
