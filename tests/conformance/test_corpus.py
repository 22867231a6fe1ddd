"""The kit's corpus: real architectures exported by ``torch.onnx`` from model libraries on PyPI
(tests/corpus.py: torchvision classifiers, HF transformers encoders and decoders, fixed- and
dynamic-batch exports, both exporters, one in training mode), run by every adapter of the
network level.

Each model must either run and agree with onnxruntime (an adapter that declares every op the
importer leaves) or be declined by the network level naming the op and node it lacks (then the
test is reported skipped with that reason), as any partial support in the kit; an adapter
without the network words needs no corpus (its cases are declined for that). Training (a falling loss, finite every step) is held to the same
rule in every adapter that maps the model and has a gradient for it.

By default the kit runs the corpus' CI subset (tests/corpus.py's ``CI_SUBSET``: a fixed-batch
CNN, a dynamic-batch CNN, a transformer, a CNN exported in training mode);
``DLSUITE_CORPUS_ALL=1`` (``make corpus``) runs every
export, and the kit's summary says how many tests it left out.

The corpus is exported once per machine (cached by the hash of tests/corpus.py and the library
versions) by an interpreter with PyTorch, torchvision, transformers and onnxscript, which
tests/corpus.py finds (``DLSUITE_CORPUS_PYTHON``, the interpreter running the kit, this
checkout's .venv); ``DLSUITE_CORPUS`` points at a folder made elsewhere. Where none is found,
the corpus tests are skipped with one line saying how to get one (``make venv``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest

from suite.adapters import Adapter
from suite.adapters.base import NetworkOptions
from suite.errors import UnsupportedError
from suite.levels.network.run import LR_CONFIRM_MIN_STEPS
from tests.conformance.test_adapters import (  # noqa: F401  (adapter: the kit's fixture)
    FAST,
    _network_task,
    adapter,
    network_words_reason,
    skip_declared,
)
from tests.corpus import (
    CI_SUBSET,
    NAMES,
    CorpusUnavailable,
    corpus_dir,
    load_manifest,
    whole_corpus,
)

LOGIT_TOLERANCE = 1e-4  # relative (Frobenius) error of the logits against onnxruntime, fp32
TRAIN_STEPS = 8


@pytest.fixture(scope="session")
def corpus() -> tuple[Path, dict[str, Any]]:
    # the kit's default runs CI_SUBSET (the conftest deselects the rest): only those are exported
    try:
        folder = corpus_dir(only=None if whole_corpus() else CI_SUBSET)
    except CorpusUnavailable as exc:
        pytest.skip(str(exc))
    return folder, load_manifest(folder)


def _corpus_for(ad: Adapter, request: pytest.FixtureRequest) -> tuple[Path, dict[str, Any]]:
    """The corpus, for an adapter with the network words; one without them has every corpus
    case declined by the level before any model is read (checked here on a zoo network)."""
    from suite.levels import execute as network_execute

    if "network" not in ad.words:
        with pytest.raises(UnsupportedError) as raised:
            network_execute(_network_task("infer", "mlp"), ad, ad.setup("cpu"))
        assert str(raised.value) == network_words_reason(ad), str(raised.value)
        skip_declared(str(raised.value))
    found: tuple[Path, dict[str, Any]] = request.getfixturevalue("corpus")
    return found


def _entry(corpus: tuple[Path, dict[str, Any]], name: str) -> dict[str, Any]:
    folder, manifest = corpus
    found = [e for e in manifest["entries"] if e["name"] == name]
    failed = [f for f in manifest["failed"] if name.startswith(f["architecture"] + "-")]
    assert found, f"{name} was not exported: {failed}"
    return found[0]


def _inputs(entry: dict[str, Any], batch: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    shape = (batch, *entry["input_shape"])
    x = (
        rng.integers(0, entry["high"], size=shape)
        if entry["input_kind"] == "int64"
        else rng.standard_normal(shape)
    )
    return x, rng.integers(0, entry["classes"], size=batch)


def _task(entry: dict[str, Any], path: Path, benchmark: str) -> dict[str, Any]:
    params = {"network": "onnx", "model": str(path), "batch": entry["batch"] or 3, "lr": 0.01}
    return {"benchmark": benchmark, "params": params, "dtype": "fp32", "seed": 0, "measure": FAST,
            "record_path": str(path.parent / "unused.jsonl")}  # fmt: skip


def _require_mapped(
    ad: Adapter, model: onnx.ModelProto, batch: int, path: Path, entry: dict[str, Any]
) -> None:
    """Return where the adapter maps the model; where it does not, the level must decline it
    naming the first op it lacks and its node, and the test is skipped with that reason."""
    from suite.levels import execute as network_execute
    from suite.levels.network.run import first_unmapped, unmapped_reason

    missing = first_unmapped(model, ad.onnx_ops, batch)
    if missing is None:
        return
    with pytest.raises(UnsupportedError) as raised:
        network_execute(_task(entry, path, "infer"), ad, ad.setup("cpu"))
    assert str(raised.value) == unmapped_reason(missing, ad.name)
    skip_declared(str(raised.value))


@pytest.mark.parametrize("name", NAMES)
def test_corpus_model_infers_like_onnxruntime(
    adapter: Adapter,  # noqa: F811
    request: pytest.FixtureRequest,
    name: str,
) -> None:
    from suite.levels.network.run import ort_logits
    from suite.onnx.zoo import InputSpec

    corpus = _corpus_for(adapter, request)
    entry = _entry(corpus, name)
    path = corpus[0] / entry["file"]
    model = onnx.load(str(path))
    batch = entry["batch"] or 3
    _require_mapped(adapter, model, batch, path, entry)
    if entry["exporter"].endswith("-train"):  # its batch norms and dropout in training mode
        from suite.onnx.importer import import_graph

        moded = import_graph(model).training_export
        ops = {n.name: n.op_type for n in model.graph.node}
        assert {ops[m] for m in moded} == {"BatchNormalization", "Dropout"}, moded
    x, _ = _inputs(entry, batch, seed=1)
    net = adapter.build_network(model, "fp32", NetworkOptions(channels_last=False))
    xt = (
        adapter.labels_from_numpy(x)
        if entry["input_kind"] == "int64"
        else adapter.from_numpy(x, "fp32")
    )
    got = adapter.to_numpy(adapter.forward(net, xt))
    spec = InputSpec("input", tuple(entry["input_shape"]), entry["input_kind"], entry["high"])
    ref = ort_logits(model, x, spec)
    assert got.shape == ref.shape
    err = float(np.linalg.norm(got - ref) / np.linalg.norm(ref))
    assert err < LOGIT_TOLERANCE, f"{name}: logits differ from onnxruntime by {err:.2e}"


#: adapters whose kit trains every corpus model through the level (the others infer it; the
#: conftest deselects their training tests with a line saying so): training each model also
#: runs the LR range check, a few fresh builds, which in JAX means as many XLA compilations
CORPUS_TRAINING = ("pytorch",)


@pytest.mark.parametrize("name", NAMES)
def test_corpus_model_trains_through_the_level(
    adapter: Adapter,  # noqa: F811
    request: pytest.FixtureRequest,
    name: str,
) -> None:
    """``--model FILE --benchmark train`` with no ``--lr``: the fixed batch of a fixed-batch
    export is the batch run, the LR range check picks a rate under which a fresh network's
    loss falls, and the record's checks pass (logits against onnxruntime, every loss finite,
    the loss falling)."""
    from suite.levels import execute as network_execute

    corpus = _corpus_for(adapter, request)
    entry = _entry(corpus, name)
    path = corpus[0] / entry["file"]
    model = onnx.load(str(path))
    batch = entry["batch"] or 3
    _require_mapped(adapter, model, batch, path, entry)
    task = _task(entry, path, "train")
    del task["params"]["lr"]
    from suite.levels.network.benchmarks import Train

    task["params"] = Train().validate(task["params"])
    assert task["params"]["lr"] is None
    out = network_execute(task, adapter, adapter.setup("cpu"))
    failed = [c for c in out["correctness"]["checks"] if not c["passed"]]
    assert not failed, (name, failed, out["work"])
    assert out["work"]["samples_per_step"] == batch
    if entry["exporter"].endswith("-train"):  # the record says the file was so exported
        moded = sum(n.op_type in ("BatchNormalization", "Dropout") for n in model.graph.node)
        assert out["work"]["model_training_export_nodes"] == moded > 0, out["work"]
    else:
        assert "model_training_export_nodes" not in out["work"]
    # the rate trained for the confirmation's length, every larger one confirmed did not
    tried = out["work"]["lr_range_check"]["tried"]
    confirmed = [t for t in tried if "confirmed" in t]
    assert confirmed[-1]["lr"] == out["work"]["lr_range_check"]["chosen"], tried
    assert confirmed[-1]["confirmed"]["trains"], tried
    assert not any(t["confirmed"]["trains"] for t in confirmed[:-1]), tried
    assert confirmed[-1]["confirmed"]["steps"] >= LR_CONFIRM_MIN_STEPS
