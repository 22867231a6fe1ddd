"""benchmarks/studies/explain_study.py: its command sequence rendered and compared as text, its config
files valid for the suite's own plan (one architecture and per-rank batch at every level), the
retry of operator sizes whose records failed a check, and bad input as one line, exit 2."""

from __future__ import annotations

import argparse
import json
import shlex
from pathlib import Path

import pytest

from benchmarks.studies import explain_study as E
from suite import plan
from suite.config import resolve


def _args(tmp_path: Path, *extra: str) -> list[str]:
    return ["--network", "resnet18", "--out", str(tmp_path / "s"), "--python", "py", *extra]


def test_the_command_sequence(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert E.main([*_args(tmp_path, "--quick"), "--print"]) == 0
    out = capsys.readouterr().out
    s = tmp_path / "s"
    fw = "--framework pytorch,tensorflow,jax --dtype fp32 --quick"
    expected = [
        f"py -m suite run --level operator --sizes from:resnet18,resolution=32,classes=10,width=4 --batch 4 {fw} --out {s}/operator",
        f"py -m suite run --level network --benchmark train,infer --config {s}/study-network.toml {fw} --out {s}/network",
        f"py -m suite run --level training --benchmark feed --config {s}/study-training.toml {fw} --out {s}/training",
        f"py -m suite run --level distributed --benchmark data_parallel --world-size 2 --config {s}/study-distributed.toml {fw} --out {s}/distributed",
        f"py -m suite run --level distributed --benchmark allreduce --world-size 2 {fw} --out {s}/collectives",
        f"py -m suite report {s}/operator {s}/network {s}/training {s}/distributed {s}/collectives --out {s}/report",
    ]  # fmt: skip
    commands = [line for line in out.splitlines() if line.startswith("py ")]
    assert commands == expected
    assert all(shlex.split(c) for c in commands)


def test_the_configs_put_one_architecture_at_every_level(tmp_path: Path) -> None:
    ns = argparse.Namespace(network="resnet18", fields="resolution=224,width=4,classes=100",
                            quick=True, batch=4, out=str(tmp_path), formats="folder,tfrecord",
                            workers=1, feed_steps=8, python="py", frameworks="pytorch",
                            dtype="fp32", device=None, world_size=2,
                            levels="operator,network,training,distributed,collectives")  # fmt: skip
    steps, configs = E.plan(ns)
    assert [s.name for s in steps] == ["operator", "network", "training", "distributed",
                                       "collectives"]  # fmt: skip
    assert "--sizes" in steps[0].argv
    sizes = steps[0].argv[steps[0].argv.index("--sizes") + 1]
    assert sizes == "from:resnet18,resolution=224,classes=100,width=4"
    for name, text in configs.items():
        (tmp_path / name).write_text(text)
    seen = {}
    for level, bench in (("network", "train"), ("training", "feed"),
                         ("distributed", "data_parallel")):  # fmt: skip
        cfg = resolve({"level": [level], "benchmarks": [bench], "frameworks": ["pytorch"],
                       "dtypes": ["fp32"], "quick": True, "backend": "local",
                       "config": str(tmp_path / f"study-{level}.toml")}, env={})  # fmt: skip
        tasks = plan.build(cfg)
        assert tasks, level
        seen[level] = tasks
    for t in seen["network"] + seen["distributed"]:
        p = t.params
        assert (p["resolution"], p["width"], p["batch"]) == (224, 4, 4), p
    assert {t.params["format"] for t in seen["training"]} == {"folder", "tfrecord"}
    assert all(t.params["width"] == 4 and t.params["batch"] == 4 for t in seen["training"])
    # data-parallel at 2 ranks and the 1-rank baseline of the same run
    assert sorted(t.world_size for t in seen["distributed"]) == [1, 2]


def test_failed_operator_records_are_measured_again(tmp_path: Path) -> None:
    run = tmp_path / "operator"
    run.mkdir()
    recs = [
        {"status": "ok", "correctness": {"passed": True},
         "benchmark": {"name": "conv2d", "params": {"batch": 1}}},
        {"status": "ok", "correctness": {"passed": False},
         "benchmark": {"name": "norm", "params": {"kind": "batch", "batch": 4}}},
        {"status": "ok", "correctness": {"passed": False},
         "benchmark": {"name": "norm", "params": {"kind": "batch", "batch": 4}}},
    ]  # fmt: skip
    (run / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    assert E.retry_config(run) == '[operator.norm]\nsizes = [{kind = "batch", batch = 4}]\n'
    (run / "results.jsonl").write_text(json.dumps(recs[0]) + "\n")
    assert E.retry_config(run) is None


def test_bad_input_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert E.main(["--network", "resnet51", "--out", str(tmp_path), "--print"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("explain_study: unknown network 'resnet51'") and "Traceback" not in err


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (["--levels", "operater"], "explain_study: --levels 'operater': unknown step 'operater'; "
         "choose from: operator, network, training, distributed, collectives"),
        (["--levels", ","], "explain_study: --levels ',': no step named"),
        (["--network", "mlp", "--levels", "training"], "explain_study: --levels training: the "
         "feed benchmark trains resnet18 and resnet50 only, not mlp"),
        # a misspelt framework ran the study up to its first step's plan
        (["--frameworks", "pytorch,tensorflw"], "explain_study: --frameworks "
         "'pytorch,tensorflw': unknown framework 'tensorflw'; use some of: "),
    ],
)  # fmt: skip
def test_a_misspelt_step_is_refused_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], expected: str
) -> None:
    """A misspelt --levels ran no step and then failed in `dlsuite report` with no run to
    report ("the following arguments are required: RUN_DIR"): now one line naming the step."""
    out = tmp_path / "s"
    assert E.main(["--out", str(out), "--python", "py", "--quick", *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith(expected) and err.count("\n") == 1, err
    assert not out.exists()


def test_frameworks_are_split_as_dlsuite_run_splits_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--frameworks pytorch,` (a trailing comma, which `dlsuite run --framework` takes) was
    refused as "unknown framework ''"; an empty list is still refused."""
    assert E.main(["--out", str(tmp_path / "s"), "--frameworks", "pytorch, numpy,", "--print"]) == 0
    assert "unknown framework" not in capsys.readouterr().err
    assert E.main(["--out", str(tmp_path / "s"), "--frameworks", " , ", "--print"]) == 2
    assert "no framework named" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (["--world-size", "1"], "explain_study: the collectives step: dlsuite: error: "
         "--world-size 1: collectives; they need at least 2 ranks"),
        (["--batch", "0"], "explain_study: the operator step: dlsuite: error: --batch 0: must "
         "be an integer from 1 to"),
    ],
)  # fmt: skip
def test_a_step_refusing_its_input_stops_the_study_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], expected: str
) -> None:
    """`--world-size 1` ran the operator, network, training and distributed steps (minutes),
    then the collectives step refused it (exit 2) and the study stopped without its report;
    `--batch 0` ran at the default batch. Every step is planned first (`dlsuite run
    --dry-run`, the suite's own checks): one line naming the step, exit 2, no run made."""
    import sys

    out = tmp_path / "s"
    argv = ["--network", "mlp", "--frameworks", "numpy", "--quick", "--out", str(out),
            "--python", sys.executable, *extra]  # fmt: skip
    assert E.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(expected) and err.count("\n") == 1, err
    assert "nothing was run" in err
    assert not [d for d in out.iterdir() if d.is_dir()]  # no step's run directory
