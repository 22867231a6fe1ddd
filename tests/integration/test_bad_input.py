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
        (["run", "--timeout", "nan"], ["nan", "finite"]),
        (["run", "--timeout", "inf"], ["inf", "finite"]),
        (["run", "--level", "distributed", "--world-size", str(10**20)], ["--world-size", "65536"]),
        (["run", "--batch", str(10**20), "--level", "network"], ["--batch", "1048576"]),
        (["run", "--seed", str(2**40)], ["--seed", "32-bit"]),
        # control characters: Python's `$` matches before a final newline, so "x\n" passed
        # the anchored whitelists and split an #SBATCH line
        (
            ["run", "--scheduler", "slurm", "--site", "local", "--job-name", "x\n"],
            ["--job-name", "'\\n'"],
        ),
        (
            ["run", "--scheduler", "slurm", "--site", "local", "--partition", "debug\n"],
            ["--partition", "'\\n'"],
        ),
        (["run", "--framework", "pytorch\x1b[2J"], ["--framework", "'\\x1b'"]),
        (["run", "--network", "mlp\x07", "--level", "network"], ["--network", "'\\x07'"]),
        (["run", "--out", "runs/a\tb"], ["--out", "'\\t'"]),
    ],
)
def test_bad_flags(args: list[str], needles: list[str], tmp_path: Path) -> None:
    out = ["--out", str(tmp_path / "r")] if args[0] == "run" and "--out" not in args else []
    proc = cli(*args, *out)
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
        ("[operator.gemm]\nsizes = [{m = 8, n = 8, k = 8, q = 1}]", ["gemm.q", "unknown field"]),
        ("[run]\ntimeout = nan", ["run.timeout", "finite"]),
        ("[measure]\ntime_budget_s = inf", ["measure.time_budget_s", "finite"]),
        ('[run]\nout = "runs/x\\n"', ["run.out", "'\\n'"]),
        ('[run]\njob_name = "j\\n"\nscheduler = "slurm"\nsite = "local"', ["job_name"]),
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


def test_resume_without_out_is_refused_naming_the_newest_run_of_the_level(tmp_path: Path) -> None:
    """`make bench ARGS=--resume` after a Ctrl-C made a new run directory and resumed
    nothing, exit 0; it is one line naming --out and the newest run of the level here."""
    for name in ("20260101-000000-operator", "20260102-000000-operator", "20260103-000000-network"):
        (tmp_path / "runs" / name).mkdir(parents=True)
        (tmp_path / "runs" / name / "manifest.json").write_text("{}")
    proc = cli("run", "--quick", "--benchmark", "gemm", "--resume", cwd=tmp_path)
    line = assert_one_line_error(proc, "--resume", "--out DIR")
    assert "(the newest run of this level here: --out runs/20260102-000000-operator)" in line
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == [
        "20260101-000000-operator", "20260102-000000-operator", "20260103-000000-network",
    ]  # fmt: skip
    bare = cli("run", "--level", "training", "--resume", "--dry-run", cwd=tmp_path)
    assert "newest" not in assert_one_line_error(bare, "--resume", "--out DIR")
    given = cli("run", "--quick", "--benchmark", "gemm", "--resume", "--dry-run", cwd=tmp_path,
                env={"DLSUITE_OUT": str(tmp_path / "runs" / "20260102-000000-operator")})  # fmt: skip
    assert given.returncode == 0, given.stderr


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


def test_config_that_is_not_utf8(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_bytes(b"[run]\nlevel = '\xff\xfeoperator'\n")
    proc = cli("run", "--config", str(cfg), "--out", str(tmp_path / "r"))
    assert_one_line_error(proc, "--config", "UTF-8")


def test_env_nan_timeout(tmp_path: Path) -> None:
    proc = cli("run", "--out", str(tmp_path / "r"), env={"DLSUITE_TIMEOUT": "nan"})
    assert_one_line_error(proc, "DLSUITE_TIMEOUT nan", "finite")  # the variable, not --timeout
    assert not (tmp_path / "r" / "manifest.json").exists()  # no NaN written anywhere


@pytest.mark.parametrize(
    "content", [bytes(range(256)) * 8, b"\x89PNG\r\n\x1a\n\x00\x00", b"[1, 2]\n"]
)
def test_validate_on_a_file_that_is_not_records(content: bytes, tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    path.write_bytes(content)
    assert_one_line_error(cli("validate", str(path)), str(path))


def test_onnx_external_data_outside_its_folder(tmp_path: Path) -> None:
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    weight = numpy_helper.from_array(np.ones((4, 4), np.float32), "W")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
        [weight],
    )
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    (tmp_path / "secret.bin").write_bytes(b"\0" * 64)
    model = helper.make_model(graph)
    onnx.save_model(
        model, str(model_dir / "m.onnx"), save_as_external_data=True, location="w.bin",
        size_threshold=0,
    )  # fmt: skip
    evil = onnx.load(str(model_dir / "m.onnx"), load_external_data=False)
    for entry in evil.graph.initializer[0].external_data:
        if entry.key == "location":
            entry.value = "../secret.bin"
    onnx.save(evil, str(model_dir / "evil.onnx"))
    proc = cli("run", "--level", "network", "--model", str(model_dir / "evil.onnx"), "--dry-run")
    assert_one_line_error(proc, "--model", "external data", "folder")
    ok = cli("run", "--level", "network", "--model", str(model_dir / "m.onnx"), "--dry-run")
    assert ok.returncode == 0, ok.stderr
    # a data file left behind when the model was copied: named, not "refused"
    (model_dir / "w.bin").unlink()
    proc = cli("run", "--level", "network", "--model", str(model_dir / "m.onnx"), "--dry-run")
    assert_one_line_error(proc, "--model", "external data file 'w.bin' is not there", "beside")
    # a level that would run its own networks instead (the default, operator, included)
    proc = cli("run", "--level", "operator", "--model", str(model_dir / "evil.onnx"), "--dry-run")
    assert_one_line_error(
        proc,
        "--model",
        "the operator level would ignore it",
        "--level network or --level distributed",
    )


def test_a_model_for_a_level_that_would_ignore_it(tmp_path: Path) -> None:
    """--model with a level that runs its own networks (the default, operator, included) is
    refused before anything runs, not silently run without it; the network and distributed
    levels take it."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.ones((4, 3), np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3])], [w],
    )  # fmt: skip
    onnx.save(helper.make_model(graph), str(tmp_path / "m.onnx"))
    for level in ("operator", "training"):
        proc = cli("run", "--level", level, "--model", str(tmp_path / "m.onnx"), "--dry-run")
        assert_one_line_error(
            proc,
            "--model",
            f"the {level} level would ignore it",
            "--level network or --level distributed",
        )
    # the distributed level trains it in data_parallel (tests/integration/test_projection.py)
    ok = cli("run", "--level", "distributed", "--model", str(tmp_path / "m.onnx"), "--dry-run")
    assert ok.returncode == 0 and "(user model m.onnx, per-rank batch" in ok.stdout, ok.stderr


def test_a_config_sizes_user_model_is_read_when_planning(tmp_path: Path) -> None:
    """A config size naming a model file that is not there exits 2 naming the size, as
    --model does, not a failed record after the run started."""
    conf = tmp_path / "c.toml"
    conf.write_text(
        '[run]\nlevel = ["network"]\nbenchmarks = ["train"]\n\n[network.train]\n'
        f'sizes = [{{ network = "onnx", model = "{tmp_path / "gone.onnx"}", batch = 2 }}]\n'
    )
    proc = cli("run", "--config", str(conf), "--out", str(tmp_path / "run"), "--dry-run")
    assert_one_line_error(proc, "[network.train] sizes[0]", "gone.onnx: no such file")
