"""What the repository keeps: evidence under docs/results/ is committable; no file names a path
outside the repository."""

from __future__ import annotations

import re
import subprocess

from tests.helpers import ROOT


def ignored(path: str) -> bool:
    return subprocess.run(["git", "check-ignore", "-q", path], cwd=ROOT).returncode == 0


def test_result_records_under_docs_can_be_committed() -> None:
    # the H100 report's records were lost: `runs/` in .gitignore matched docs/results/*/runs
    for path in ("docs/results/some-gpu/runs/operator/results.jsonl",
                 "docs/results/some-gpu/runs/operator/telemetry/t-rank0.jsonl"):  # fmt: skip
        assert not ignored(path), f"{path} would be ignored by git"
    assert ignored("runs/20261124-operator/results.jsonl")  # a user's own runs stay out


# A path of the development machine rather than of the project: its checkouts and shared folders
# (under "work" at the top), a person's home (under "home" or "Users") or root's. The pattern and
# the examples below are spelled so that this file does not match itself.
OUTSIDE = re.compile(r"/(?:work)/|/(?:home|Users)/[\w.-]+/|(?<![\w.~-])/(?:root)/")
# (file, text at the match) that may name such a path: none names the development machine
ALLOWED = {("containers/install.sh", "/" + "root/.cache/pip")}  # root's pip cache inside the image


def test_the_pattern_finds_outside_paths() -> None:
    for outside in ("/" + "work/shared/x.sh", "cd /" + "home/ada/dlsuite", "/" + "root/.cache/x"):
        assert OUTSIDE.search(outside), outside
    for inside in ("containers/install-apptainer.sh", "~/.cache/dlsuite", "/path/to/dlsuite",
                   "/project/dlsuite/images", "framework/root/x"):  # fmt: skip
        assert not OUTSIDE.search(inside), inside


def test_no_file_names_a_path_outside_the_repository() -> None:
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, capture_output=True, check=True,
    ).stdout  # fmt: skip
    found = []
    for name in sorted({n for n in listed.decode().split("\0") if n}):
        path = ROOT / name
        if path.is_symlink() or not path.is_file():
            continue
        data = path.read_bytes()
        if b"\0" in data[:8192]:
            continue  # binary
        for number, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
            if any(
                not any(name == file and line.startswith(text, m.start()) for file, text in ALLOWED)
                for m in OUTSIDE.finditer(line)
            ):
                found.append(f"{name}:{number}: {line.strip()[:120]}")
    assert not found, "paths outside the repository:\n" + "\n".join(found)
