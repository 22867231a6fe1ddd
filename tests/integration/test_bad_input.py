"""Bad input: one clear line naming the field and the fix, exit code 2, no traceback,
and nothing already measured is lost."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import cli


def assert_one_line_error(proc, *needles: str) -> str:  # type: ignore[no-untyped-def]
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    line = lines[0]
    assert line.startswith("dlsuite: error:"), line
    for needle in needles:
        assert needle in line, (needle, line)
    return line


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["run", "--level", "bogus"], ["bogus", "operator"]),
        (["run", "--framework", "caffe"], ["caffe", "pytorch"]),
        (["run", "--benchmark", "fft", "--quick"], ["fft", "gemm"]),
        (["run", "--dtype", "fp8"], ["fp8", "fp32"]),
        (["run", "--device", "tpu"], ["tpu", "cuda"]),
        (["run", "--backend", "k8s"], ["k8s", "local"]),
        (["run", "--timeout", "-5"], ["-5", "positive"]),
        (["run", "--frobnicate"], ["--frobnicate"]),
        (["run", "--config", "/nonexistent/x.toml"], ["/nonexistent/x.toml"]),
        (["frob"], ["frob"]),
    ],
)
def test_bad_flags(args: list[str], needles: list[str], tmp_path: Path) -> None:
    proc = cli(*args, "--out", str(tmp_path / "r")) if args[0] == "run" else cli(*args)
    assert_one_line_error(proc, *needles)
    assert not (tmp_path / "r" / "results.jsonl").exists()


@pytest.mark.parametrize(
    ("toml", "needles"),
    [
        ("[run\nlevel = 'operator'", ["TOML syntax error"]),
        ("[run]\nlevels = 'operator'", ["levels"]),
        ("[run]\ntimeout = 'soon'", ["run.timeout"]),
        ("[measure]\nmin_samples = 0", ["measure.min_samples"]),
        ("[operator.gemm]\nsizes = [{m = 0, n = 8, k = 8}]", ["sizes[0]", "gemm.m", "positive"]),
        ("[operator.gemm]\nsizes = [{m = -4, n = 8, k = 8}]", ["gemm.m", "positive"]),
        (
            "[operator.conv2d]\nsizes = [{batch = 1, in_channels = 1, height = 2, width = 2, out_channels = 1, kernel = 5}]",
            ["conv2d.kernel"],
        ),
        ("[operator.gemm]\nsizes = [{m = 8, n = 8, k = 8, q = 1}]", ["'q'"]),
    ],
)
def test_bad_config(toml: str, needles: list[str], tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(toml)
    proc = cli("run", "--config", str(cfg), "--out", str(tmp_path / "r"))
    line = assert_one_line_error(proc, *needles)
    assert str(cfg) in line or "--config" in line
    assert not (tmp_path / "r" / "results.jsonl").exists()


def test_unwritable_out(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    proc = cli("run", "--quick", "--benchmark", "gemm", "--out", str(blocker / "run"))
    assert_one_line_error(proc, "--out", "cannot write")


def test_existing_results_are_never_overwritten(tmp_path: Path) -> None:
    out = tmp_path / "r"
    out.mkdir()
    results = out / "results.jsonl"
    results.write_text('{"measured": "earlier"}\n')
    proc = cli("run", "--quick", "--benchmark", "gemm", "--out", str(out))
    assert_one_line_error(proc, "--resume")
    assert results.read_text() == '{"measured": "earlier"}\n'


def test_env_is_checked_too(tmp_path: Path) -> None:
    proc = cli("run", "--out", str(tmp_path / "r"), env={"DLSUITE_TIMEOUT": "soon"})
    assert_one_line_error(proc, "DLSUITE_TIMEOUT")
