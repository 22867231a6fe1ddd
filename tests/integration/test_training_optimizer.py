"""The training level's optimizer benchmark through the real CLI: the quick size set on
PyTorch (this interpreter's torch), PyTorch's three implementations as separate records, every
record checked, the report's section drawn; bad input exits 2 with one line naming the field;
a hyperparameter a framework lacks is a skipped record decided on the host."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import FAST_MEASURE, cli, records
from tests.integration.test_bad_input import assert_one_line_error


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("torch", reason="the dev environment installs torch")
    out = tmp_path_factory.mktemp("optimizer") / "run"
    proc = cli(
        "run", "--level", "training", "--benchmark", "optimizer", "--framework", "pytorch",
        "--quick", "--backend", "local", "--dtype", "fp32,bf16", "--config", str(FAST_MEASURE),
        "--out", str(out), timeout=1200,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def test_quick_run_on_pytorch(quick_run: Path) -> None:
    recs = records(quick_run)
    ok = [r for r in recs if r["status"] == "ok"]
    skipped = [r for r in recs if r["status"] == "skipped"]
    assert not [r for r in recs if r["status"] not in ("ok", "skipped")]
    # the documented rule's check on every record (the timer check is the machine's)
    wrong = [
        (r["benchmark"]["params"], r["correctness"]["checks"][0])
        for r in ok
        if not r["correctness"]["checks"][0]["passed"]
    ]
    assert not wrong, wrong
    # every optimizer torch.optim has, each implementation a record of its own
    fp32 = [r for r in ok if r["dtype"] == "fp32"]
    by_impl = {
        (r["optimizer"]["name"], r["optimizer"]["implementation"])
        for r in fp32
        if r["optimizer"]["parameters"]["set"] == "zoo:mlp:quick"
    }
    for name in ("sgd", "momentum", "nesterov", "adam", "adamw", "amsgrad", "adagrad"):
        assert {(name, i) for i in ("forloop", "foreach", "fused")} <= by_impl, name
    assert {("rmsprop", "forloop"), ("rmsprop", "foreach")} <= by_impl
    assert ("rmsprop", "fused") not in by_impl
    for r in fp32:
        sec = r["optimizer"]
        assert sec["implemented_variant"] in sec["follows"]
        assert r["device"]["peak_bandwidth_gbps"] or r["device"]["peak_bandwidth_source"]
        assert sec["state"]["bytes_per_param"] >= sec["state"]["rule_bytes_per_param"]
    reasons = {r["benchmark"]["params"]["optimizer"]: r["reason"] for r in skipped}
    assert "no LAMB" in reasons["lamb"] and "no LARS" in reasons["lars"]
    # bf16 without master weights (torch.optim has none): skipped on the host, with why
    bf16 = [r for r in recs if r["dtype"] == "bf16"]
    assert bf16 and all(r["status"] == "skipped" for r in bf16)
    assert any("master weights" in r["reason"] for r in bf16)


def test_report_draws_the_optimizer_section(quick_run: Path) -> None:
    proc = cli("report", str(quick_run), "--format", "md")
    assert proc.returncode == 0, proc.stderr[-2000:]
    text = (quick_run / "report.md").read_text()
    section = text[text.index("## Training: optimizers") :]
    assert "### Step time against parameter count" in section
    assert "### Rule differences" in section
    assert "vs tensorflow's variant" in section  # distances to the other frameworks' rules
    assert "optimizer-adamw" in section  # the step-time curve (two parameter counts)
    assert (quick_run / "report_plots").is_dir()


def _config(tmp_path: Path, size: str) -> Path:
    path = tmp_path / "sizes.toml"
    path.write_text(f"[training.optimizer]\nsizes = [{size}]\n")
    return path


@pytest.mark.parametrize(
    ("size", "needles"),
    [
        ('{optimizer = "adamax"}', ["optimizer.optimizer", "adamax"]),
        ('{optimizer = "adam", hyper = {lr = -0.001}}', ["hyper", "lr", "positive"]),
        ('{optimizer = "adam", hyper = {momentum = 0.9}}', ["hyper.momentum", "adam"]),
        ('{optimizer = "adam", params = "flat:-3"}', ["optimizer.params"]),
    ],
)
def test_bad_input_exits_2_with_one_line(size: str, needles: list[str], tmp_path: Path) -> None:
    proc = cli(
        "run", "--level", "training", "--benchmark", "optimizer", "--framework", "pytorch",
        "--dtype", "fp32", "--config", str(_config(tmp_path, size)), "--out", str(tmp_path / "r"),
    )  # fmt: skip
    assert_one_line_error(proc, "[training.optimizer] sizes[0]", *needles)


def test_a_hyperparameter_a_framework_lacks_is_skipped_on_the_host(tmp_path: Path) -> None:
    """Keras' SGD has no dampening: TensorFlow's task is skipped with that reason before any
    environment is built or worker started (a name the suite does not know exits 2)."""
    out = tmp_path / "r"
    proc = cli(
        "run", "--level", "training", "--benchmark", "optimizer", "--framework", "tensorflow",
        "--backend", "venv", "--dtype", "fp32", "--config",
        str(_config(tmp_path, '{optimizer = "momentum", hyper = {dampening = 0.5}}')),
        "--out", str(out), "--envs-dir", str(tmp_path / "no-envs-here"),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    (rec,) = records(out)
    assert rec["status"] == "skipped" and "dampening" in rec["reason"]
    assert not (tmp_path / "no-envs-here").exists()  # no environment was made for it
