"""The network level for real: the quick zoo on PyTorch, a user's ONNX file, skips, bad input."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.helpers import FAST_MEASURE, cli, export_torch_model, records

ZOO = {"mlp", "alexnet", "resnet18", "resnet50", "resnet101", "transformer"}


@pytest.fixture(scope="module")
def network_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    out = tmp_path_factory.mktemp("net") / "quick"
    proc = cli(
        "run",
        "--level",
        "network",
        "--framework",
        "pytorch",
        "--quick",
        "--device",
        "cpu",
        "--dtype",
        "fp32",
        "--config",
        str(FAST_MEASURE),
        "--out",
        str(out),
    )
    return out, proc


@pytest.mark.pytorch
@pytest.mark.slow
def test_quick_zoo_trains_and_infers_correctly(network_run: tuple[Path, Any]) -> None:
    out, proc = network_run
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    recs = records(out)
    assert all(r["status"] == "ok" for r in recs), [
        (r["task_id"], r.get("reason")) for r in recs if r["status"] != "ok"
    ]
    assert all(r["correctness"]["passed"] for r in recs)
    for mode in ("train", "infer"):
        nets = {r["benchmark"]["params"]["network"] for r in recs if r["benchmark"]["name"] == mode}
        assert nets == ZOO, (mode, nets)
    for r in recs:
        checks = {c["name"]: c for c in r["correctness"]["checks"]}
        if r["benchmark"]["name"] in ("train", "infer"):
            assert checks["logits.l2_rel_error_vs_onnxruntime"]["passed"]
        if r["benchmark"]["name"] == "train":
            assert [c["error"] < 1 for n, c in checks.items() if n.startswith("loss_falls")] == [
                True
            ]
            assert {"step_time", "throughput"} <= {m["name"] for m in r["metrics"]}
        if (
            r["benchmark"]["name"] in ("train", "infer")
            and r["benchmark"]["params"]["network"] == "mlp"
        ):
            assert any(n.startswith("grad[") and "central_fd" in n for n in checks)
    # one framework: each agreement point is checked against onnxruntime and float64 NumPy,
    # and there is no pair to make a matrix of
    agree = [r for r in recs if r["benchmark"]["name"] == "agreement"]
    assert {r["benchmark"]["params"]["network"] for r in agree} == {
        "mlp",
        "alexnet",
        "resnet18",
        "transformer",
    }
    for r in agree:
        names = {c["name"] for c in r["correctness"]["checks"]}
        assert {
            "logits.max_rel_error_vs_onnxruntime",
            "update.max_rel_error_vs_numpy_fp64",
        } <= names
    assert not [r for r in recs if r["benchmark"]["name"] == "agreement_matrix"]
    (digits,) = [r for r in recs if r["benchmark"]["name"] == "digits"]
    tta = next(m for m in digits["metrics"] if m["name"] == "time_to_accuracy")
    assert tta["n"] == 5 and tta["min"] <= tta["value"] <= tta["max"]
    assert min(digits["work"]["test_accuracy"]) >= 0.95
    assert cli("validate", str(out)).returncode == 0


@pytest.mark.pytorch
def test_user_model_from_another_tool(tmp_path: Path) -> None:
    path = tmp_path / "exported.onnx"
    export_torch_model(path)
    out = tmp_path / "run"
    proc = cli(
        "run",
        "--level",
        "network",
        "--quick",
        "--device",
        "cpu",
        "--dtype",
        "fp32",
        "--model",
        str(path),
        "--batch",
        "2,3",
        "--out",
        str(out),
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    recs = records(out)
    assert sorted((r["benchmark"]["name"], r["benchmark"]["params"]["batch"]) for r in recs) == [
        ("agreement", 2),
        ("agreement", 3),
        ("infer", 2),
        ("infer", 3),
        ("train", 2),
        ("train", 3),
    ]
    assert all(r["status"] == "ok" and r["correctness"]["passed"] for r in recs)
    assert all(r["benchmark"]["params"]["model"] == str(path.resolve()) for r in recs)
    # no lr given: the range check's rate was confirmed for as long as the timed run trains
    # (1.5x --quick's 1 s budget, at least 30 steps) before the run
    for r in recs:
        if r["benchmark"]["name"] == "train":
            check = r["work"]["lr_range_check"]
            (last,) = [t for t in check["tried"] if t["lr"] == check["chosen"]]
            assert last["confirmed"]["trains"], check
            assert last["confirmed"]["steps"] >= 30 and last["confirmed"]["seconds"] >= 1.5, check


def test_a_user_models_learning_rate_given_as_the_range_checks_failure_says(tmp_path: Path) -> None:
    """When no rate of the range check trains a user's model, the error says to give one in a
    --config size (there is no --lr flag); that config is taken and the rate recorded."""
    path = tmp_path / "exported.onnx"
    export_torch_model(path)
    config = tmp_path / "lr.toml"
    config.write_text(
        '[run]\nlevel = ["network"]\nbenchmarks = ["train"]\n\n[network.train]\n'
        f'sizes = [{{ network = "onnx", model = "{path}", batch = 2, lr = 0.001 }}]\n'
    )
    proc = cli("run", "--config", str(config), "--device", "cpu", "--dtype", "fp32",
               "--out", str(tmp_path / "run"), "--quick")  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    (rec,) = records(tmp_path / "run")
    assert rec["benchmark"]["params"]["lr"] == 0.001 and "lr_range_check" not in rec["work"]


def _model_with_op(path: Path, op: str) -> None:
    w = numpy_helper.from_array(
        np.random.default_rng(0).standard_normal((4, 6)).astype(np.float32), "w"
    )
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
        helper.make_node(op, ["h"], ["logits"], name="odd"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 6])],
        [w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))


@pytest.mark.pytorch
def test_unsupported_op_is_a_skip_record(tmp_path: Path) -> None:
    path = tmp_path / "softsign.onnx"
    _model_with_op(path, "Softsign")  # not in CORE_OPS (suite/onnx/ops.py)
    proc = cli(
        "run",
        "--level",
        "network",
        "--quick",
        "--device",
        "cpu",
        "--dtype",
        "fp32",
        "--benchmark",
        "infer",
        "--model",
        str(path),
        "--out",
        str(tmp_path / "r"),
    )
    assert proc.returncode == 0, proc.stderr
    (rec,) = records(tmp_path / "r")
    assert rec["status"] == "skipped"
    assert "unsupported op Softsign in node odd" in rec["reason"]


def _no_input_model(path: Path) -> None:
    c = numpy_helper.from_array(np.ones((1, 2), np.float32), "c")
    graph = helper.make_graph(
        [helper.make_node("Identity", ["c"], ["y"])],
        "g",
        [],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2])],
        [c],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))


def _assert_exit2(proc: Any, *needles: str) -> None:
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert (
        len(lines) == 1
        and lines[0].startswith("dlsuite: error:")
        and "Traceback" not in proc.stderr
    ), proc.stderr
    for n in needles:
        assert n in lines[0], (n, lines[0])


def test_bad_models_and_sizes(tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"\x00\x01 this is not a protobuf" * 10)
    exported = tmp_path / "ok.onnx"
    _model_with_op(exported, "Relu")
    truncated = tmp_path / "truncated.onnx"
    truncated.write_bytes(exported.read_bytes()[:60])
    empty = tmp_path / "noinput.onnx"
    _no_input_model(empty)
    base = ["run", "--level", "network", "--quick", "--out", str(tmp_path / "r")]
    _assert_exit2(cli(*base, "--model", str(tmp_path / "missing.onnx")), "--model", "missing.onnx")
    _assert_exit2(cli(*base, "--model", str(garbage)), "--model", "garbage.onnx")
    _assert_exit2(cli(*base, "--model", str(truncated)), "--model", "truncated.onnx")
    _assert_exit2(cli(*base, "--model", str(empty)), "--model", "no")
    _assert_exit2(cli(*base, "--batch", "0"), "--batch")
    _assert_exit2(cli(*base, "--network", "vgg16"), "vgg16", "resnet50")
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        "[network.train]\nsizes = [{network = 'resnet50', batch = 2, resolution = 16}]\n"
    )
    _assert_exit2(cli(*base, "--config", str(cfg)), "resolution")
    cfg.write_text("[network.infer]\nsizes = [{network = 'mlp', batch = 0}]\n")
    _assert_exit2(cli(*base, "--config", str(cfg)), "batch")
    assert not (tmp_path / "r" / "results.jsonl").exists()


def _export_transformer_with_a_mask(path: Path) -> None:
    """What a Hugging Face export looks like: token ids and an attention mask, batch and
    sequence dynamic, a masked mean through a classifier."""
    import torch

    class Classifier(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = torch.nn.Embedding(50, 16)
            self.head = torch.nn.Linear(16, 3)

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
            m = attention_mask.unsqueeze(-1).float()
            return self.head((self.emb(input_ids) * m).sum(1) / m.sum(1))

    axes = {0: "batch_size", 1: "sequence_length"}
    torch.onnx.export(
        Classifier().eval(),
        (torch.randint(0, 50, (2, 8)), torch.ones(2, 8, dtype=torch.int64)),
        str(path),
        dynamo=False,
        input_names=["input_ids", "attention_mask"],
        output_names=["logits"],
        dynamic_axes={"input_ids": axes, "attention_mask": axes, "logits": {0: "batch_size"}},
    )


@pytest.mark.pytorch
def test_a_transformer_export_with_a_mask_and_a_dynamic_sequence(tmp_path: Path) -> None:
    """Without --model-dims the dynamic sequence is named (exit 2, nothing run); with it the
    mask is bound to ones, every batch runs and the records say so."""
    path = tmp_path / "hf.onnx"
    _export_transformer_with_a_mask(path)
    common = ("run", "--level", "network", "--quick", "--device", "cpu", "--dtype", "fp32",
              "--model", str(path), "--batch", "1,3")  # fmt: skip
    proc = cli(*common, "--out", str(tmp_path / "no"))
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "--model-dims sequence_length=N" in proc.stderr
    assert not (tmp_path / "no" / "results.jsonl").exists()
    proc = cli(*common, "--model-dims", "sequence_length=12", "--out", str(tmp_path / "run"))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    recs = records(tmp_path / "run")
    assert sorted((r["benchmark"]["name"], r["benchmark"]["params"]["batch"]) for r in recs) == [
        ("agreement", 1), ("agreement", 3), ("infer", 1), ("infer", 3), ("train", 1), ("train", 3)
    ]  # fmt: skip
    for r in recs:
        assert r["status"] == "ok" and r["correctness"]["passed"], r["correctness"]
        assert r["benchmark"]["params"]["dims"] == "sequence_length=12"
        assert r["work"]["inputs_bound"] == {"attention_mask": "ones"}
