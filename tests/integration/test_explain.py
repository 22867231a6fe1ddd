"""The explanation across levels end to end on a user's ONNX model (a corpus export: BERT-tiny
from transformers, dynamic batch): the operator level at its shapes (``--sizes
from:MODEL.onnx``), the network level on the same file, and the report taking each step apart,
its Findings recomputed from the records. Real runs of PyTorch's adapter; the CI case of the
explanation (the study's full sweep is `make explain`, docs/guide/explain.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from suite.report import report_main
from suite.report.decompose import decompositions
from suite.report.findings import findings
from suite.report.load import load_runs
from tests.explain_check import check, records_by_id
from tests.helpers import FAST_MEASURE, cli, records

pytestmark = pytest.mark.pytorch

MODEL = "bert_tiny-torchscript-op17-dyn"


def test_a_user_onnx_model_is_taken_apart(tmp_path: Path) -> None:
    from tests.corpus import CI_SUBSET, corpus_dir

    assert MODEL in CI_SUBSET  # the kit exports (and caches) these: no export of its own
    model = corpus_dir(only=list(CI_SUBSET)) / f"{MODEL}.onnx"
    common = ["--framework", "pytorch", "--dtype", "fp32", "--device", "cpu", "--quick",
              "--batch", "2", "--config", str(FAST_MEASURE)]  # fmt: skip
    op, net = tmp_path / "operator", tmp_path / "network"
    proc = cli("run", "--level", "operator", "--sizes", f"from:{model}", *common, "--out", str(op),
               timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    ops = records(op)
    # its products, normalisations, attention softmax and GELU, both directions
    assert {r["benchmark"]["name"] for r in ops} == {"gemm", "norm", "softmax", "gelu"}
    assert {r["benchmark"]["params"].get("direction", "forward") for r in ops} == {
        "forward", "backward",
    }  # fmt: skip
    assert all(r["benchmark"]["source"].startswith(f"from {MODEL}.onnx b2") for r in ops)
    proc = cli("run", "--level", "network", "--benchmark", "train,infer", "--model", str(model),
               *common, "--out", str(net), timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

    runs = load_runs([op, net])
    decs = {d.mode: d for d in decompositions(runs)}
    assert set(decs) == {"train", "infer"}
    for d in decs.values():
        assert not d.missing and d.remainder is not None and d.estimated is not None
        kinds = {t.label.rsplit(", ", 1)[0] for t in d.terms}
        assert {"GEMM / linear", "attention (q k^T, softmax, p v)", "normalisation",
                "activation (GELU)"} <= kinds  # fmt: skip
    found = [f for f in findings(runs) if f.topic == "step"]
    assert len(found) == 2
    by_id = records_by_id(runs)
    for f in found:
        check(f, by_id)
    (md,) = report_main([op, net], "md", tmp_path / "report")
    text = md.read_text()
    assert text.index("## Findings") < text.index("## A step taken apart")
    assert f"{MODEL}.onnx b2" in text
