"""The guide's minimal adapter, built and run as the guide says it runs (docs/guide/adding-a-framework.md).

The adapter's code is read from the guide itself (the Python block of "A minimal adapter"), so the
page and this test cannot drift apart. It is installed next to a NumPy stand-in for its
hypothetical framework ``myfw`` (a package with its distribution's metadata, so
``installed_version`` finds it) and registered through the ``dlsuite.adapters`` entry-point group
(a ``.dist-info`` folder on ``PYTHONPATH``: what ``pip install`` of a third-party adapter leaves),
so nothing is written into the checkout. Then, as a contributor would:

* the whole conformance kit runs against it, unchanged, and passes: every case it declares
  (``matmul``, ``softmax`` at fp32) passes, and every other case is reported skipped with the
  reason the suite declines it for (the network and distributed cases: the missing vocabulary);
* ``dlsuite run --quick`` gives the records the guide promises.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.conformance.test_adapters import DECLARED
from tests.helpers import ROOT, cli, records

GUIDE = ROOT / "docs" / "guide" / "adding-a-framework.md"

#: the stand-in for the guide's ``myfw``: the calls the minimal adapter makes, on NumPy
STAND_IN = '''"""A NumPy stand-in for the hypothetical framework of docs/guide/adding-a-framework.md."""

import numpy as np


def tensor(x):
    return np.array(x, dtype=np.float32)


def to_host(t):
    return np.asarray(t)


def matmul(a, b):
    return a @ b


def softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def sync():
    return None
'''


def minimal_adapter_source() -> str:
    """The Python block of the guide's "A minimal adapter" section."""
    section = GUIDE.read_text().split("\n## A minimal adapter\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) == 1, "the section should hold exactly one Python block: the adapter"
    return str(blocks[0])


def _dist_info(root: Path, name: str, version: str, entry_points: str = "") -> None:
    info = root / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    if entry_points:
        (info / "entry_points.txt").write_text(entry_points)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The stand-in framework and the guide's adapter, installed in a folder; the environment
    that puts it on the path."""
    root = tmp_path_factory.mktemp("site")
    (root / "myfw").mkdir()
    (root / "myfw" / "__init__.py").write_text(STAND_IN)
    _dist_info(root, "myfw", "1.2.3")
    (root / "dlsuite_myfw").mkdir()
    (root / "dlsuite_myfw" / "__init__.py").write_text("")
    (root / "dlsuite_myfw" / "adapter.py").write_text(minimal_adapter_source())
    _dist_info(
        root,
        "dlsuite-myfw",
        "0.1.0",
        "[dlsuite.adapters]\nmyfw = dlsuite_myfw.adapter:MyFWAdapter\n",
    )
    path = os.pathsep.join(p for p in (str(root), str(ROOT), os.environ.get("PYTHONPATH")) if p)
    return {"PYTHONPATH": path}


def _outcomes(junit: Path) -> dict[str, tuple[str, str]]:
    """Test id -> (outcome, message) from pytest's JUnit XML."""
    out: dict[str, tuple[str, str]] = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        test_id = f"{case.get('classname')}::{case.get('name')}"
        outcome, message = "passed", ""
        for tag in ("failure", "error", "skipped"):
            found = case.find(tag)
            if found is not None:
                outcome, message = tag, found.get("message", "")
        out[test_id] = (outcome, message)
    return out


@pytest.mark.slow
def test_the_guides_minimal_adapter_passes_the_kit_with_the_rest_skipped_as_declared(
    installed: dict[str, str], tmp_path: Path
) -> None:
    junit = tmp_path / "kit.xml"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "tests/conformance", "-q", "-rs", "-n", "0",
         "-p", "no:cacheprovider", f"--junitxml={junit}"],
        cwd=ROOT, env={**os.environ, **installed, "DLSUITE_CONFORMANCE": "myfw"},
        capture_output=True, text=True, timeout=1800,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    outcomes = _outcomes(junit)
    failed = {t: m for t, (o, m) in outcomes.items() if o in ("failure", "error")}
    assert not failed, failed
    skipped = {t: m for t, (o, m) in outcomes.items() if o == "skipped"}
    passed = sorted(t for t, (o, _) in outcomes.items() if o == "passed")
    # every skip is a case the adapter does not declare, with the suite's reason for it
    assert all(DECLARED in m for m in skipped.values()), skipped
    network = "myfw does not implement the network words"
    for test_id, message in skipped.items():
        if "test_ops" in test_id or "test_corpus" in test_id:
            assert network in message, (test_id, message)
    for name in ("test_zoo_network_matches_onnxruntime_and_learns", "test_fp16_training",
                 "test_mixed_precision_training", "test_declared_onnx_ops_are_real"):  # fmt: skip
        hits = [t for t in outcomes if name in t]
        assert hits and all(network in skipped.get(t, "") for t in hits), (name, hits)
    distributed = [t for t in outcomes if "test_distributed_kit" in t]
    distributed.append(next(t for t in outcomes if "test_distributed_level_skips" in t))
    assert all("does not implement the distributed words" in skipped[t] for t in distributed)
    for kit, words in (("test_optimizer_kit::test_declared_optimizer_runs", "optimizer"),
                       ("test_optimizer_kit::test_every_optimizer_is", "optimizer"),
                       ("test_data_kit", "data")):  # fmt: skip
        hits = [t for t in outcomes if kit in t and "myfw" in t]
        reason = f"myfw does not implement the {words} words"
        assert hits and all(reason in skipped.get(t, "") for t in hits), (kit, hits)
    ops_cases = [t for t in outcomes if "test_ops" in t and "myfw" in t]
    assert len(ops_cases) > 50 and all(t in skipped for t in ops_cases)
    # what it declares runs and passes: gemm and softmax at fp32, the kit's own checks
    # (their forward cases; a backward case needs the word vjp, which the minimal adapter
    # leaves out: skipped with that reason)
    for word in ("gemm", "softmax"):
        hits = [t for t in outcomes if f"reference_at_every_supported_dtype[myfw-{word}-" in t]
        assert any(t in passed for t in hits), (word, hits)
        for t in hits:
            assert t in passed or "does not implement the word(s) vjp" in skipped.get(t, ""), t
    gelu = [t for t in outcomes if "reference_at_every_supported_dtype[myfw-gelu-" in t]
    assert gelu and all("does not implement the word(s) gelu" in skipped[t] for t in gelu)
    for name in ("test_declares_itself", "test_time_waits_for_the_work",
                 "test_unsupported_dtype_is_declared_with_its_reason",
                 "test_missing_word_is_declared_not_crashed"):  # fmt: skip
        assert any(name in t for t in passed), name
    # the kit's own count of what it ran for this adapter
    assert re.search(r"dlsuite: the kit's tests for myfw: \d+ \(", proc.stdout), proc.stdout[-2000:]


@pytest.mark.slow
def test_the_guides_minimal_adapter_runs_as_the_guide_says(
    installed: dict[str, str], tmp_path: Path
) -> None:
    out = tmp_path / "run"
    proc = cli(
        "run", "--quick", "--framework", "myfw", "--benchmark", "gemm,softmax,gelu",
        "--dtype", "fp32,bf16", "--backend", "local", "--out", str(out), env=installed,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    by_status: dict[tuple[str, str, str], list[dict[str, object]]] = {}
    for rec in records(out):
        key = (rec["benchmark"]["name"], rec["dtype"], rec["status"])
        by_status.setdefault(key, []).append(rec)
    for name in ("gemm", "softmax"):
        assert (name, "fp32", "ok") in by_status, sorted(by_status)
        assert all(r["correctness"]["passed"] for r in by_status[(name, "fp32", "ok")])
        bf16 = by_status[(name, "bf16", "skipped")]
        assert all("bf16 is not implemented yet" in str(r["reason"]) for r in bf16)
    gelu = by_status[("gelu", "fp32", "skipped")]
    assert all("does not implement the word(s) gelu" in str(r["reason"]) for r in gelu)
