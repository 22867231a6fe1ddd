"""What the repository keeps: evidence under docs/results/ is committable."""

from __future__ import annotations

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
