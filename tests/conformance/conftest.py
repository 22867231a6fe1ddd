"""The kit's own numbers: the summary ends with one line per adapter saying how many tests it
got, per file (``--collect-only`` prints it too), so no document has to count them.

Adapter-specific conformance files (``test_<adapter>_specific.py``) are collected only where
the kit runs that adapter (see ``_selected`` in test_adapters.py): elsewhere they are left out of
the collection, not skipped, so a run's summary lists no skip for them. The operator sweep is
deselected, with a line in the summary, for adapters that do not run the operator level."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conformance.test_adapters import ADAPTER_NAMES

collect_ignore = [
    p.name
    for p in Path(__file__).parent.glob("test_*_specific.py")
    if p.name[len("test_") : -len("_specific.py")] not in ADAPTER_NAMES
]


# The operator sweep (every operator at every dtype) is left out for an adapter that does not
# run the operator level (``Adapter.levels``: Horovod's two, whose operator words are PyTorch's
# and TensorFlow's, swept in those frameworks' kits): no task of theirs ever calls those words.
# Their network words stay in: data-parallel training builds its network with them.
OPERATOR_SWEEP = "test_operator_matches_reference_at_every_supported_dtype"
_LEFT_OUT: dict[str, int] = {}  # adapter -> operator-sweep tests deselected
# Training every corpus model runs in the adapters of test_corpus.CORPUS_TRAINING (PyTorch); the
# others run the corpus' inference test (their training is tested on the zoo networks).
CORPUS_TRAIN = "test_corpus_model_trains_through_the_level"
_CORPUS_LEFT_OUT: dict[str, int] = {}
# Outside ``make corpus`` (DLSUITE_CORPUS_ALL=1), the corpus tests run tests/corpus.py's CI_SUBSET
_CORPUS_SUBSET_LEFT_OUT: list[int] = [0]
# adapter -> file -> tests collected for it (after the deselections above); "" for the kit's
# tests of no adapter
_COUNTS: dict[str, dict[str, int]] = {}


def kit_counts(items: list[pytest.Item]) -> dict[str, dict[str, int]]:
    """Adapter -> test file -> how many of ``items`` run for that adapter."""
    counts: dict[str, dict[str, int]] = {}
    for item in items:
        callspec = getattr(item, "callspec", None)
        params = callspec.params if callspec is not None else {}
        name = params.get("adapter", params.get("name"))
        owner = name if name in ADAPTER_NAMES else ""
        per_file = counts.setdefault(owner, {})
        per_file[item.path.name] = per_file.get(item.path.name, 0) + 1
    return counts


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    from suite.adapters import ADAPTERS
    from tests.conformance.test_corpus import CORPUS_TRAINING
    from tests.corpus import CI_SUBSET, whole_corpus

    whole = whole_corpus()
    keep, drop = [], []
    for item in items:
        callspec = getattr(item, "callspec", None)
        name = callspec.params.get("adapter") if callspec is not None else None
        sweep = getattr(item, "originalname", "") == OPERATOR_SWEEP
        corpus_train = getattr(item, "originalname", "") == CORPUS_TRAIN
        corpus = getattr(item, "originalname", "").startswith("test_corpus_") or (
            getattr(item, "originalname", "") == "test_declared_op_agrees_with_onnxruntime"
        )
        if sweep and name and "operator" not in ADAPTERS.load(name).levels:
            drop.append(item)
            _LEFT_OUT[name] = _LEFT_OUT.get(name, 0) + 1
        elif corpus and name and "network" not in ADAPTERS.load(name).levels:
            # Horovod's: their networks are PyTorch's and TensorFlow's, tested in those kits
            drop.append(item)
            _LEFT_OUT[name] = _LEFT_OUT.get(name, 0) + 1
        elif (
            getattr(item, "originalname", "").startswith("test_corpus_")
            and not whole
            and callspec is not None
            and callspec.params.get("name") not in CI_SUBSET
        ):
            drop.append(item)
            _CORPUS_SUBSET_LEFT_OUT[0] += 1
        elif corpus_train and name and name not in CORPUS_TRAINING:
            drop.append(item)
            _CORPUS_LEFT_OUT[name] = _CORPUS_LEFT_OUT.get(name, 0) + 1
        else:
            keep.append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
    _COUNTS.clear()
    _COUNTS.update(kit_counts(items))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for owner, per_file in sorted(_COUNTS.items()):
        files = ", ".join(f"{f} {n}" for f, n in sorted(per_file.items()))
        who = f"for {owner}" if owner else "of no adapter"
        terminalreporter.write_line(
            f"dlsuite: the kit's tests {who}: {sum(per_file.values())} ({files})"
        )
    if _CORPUS_LEFT_OUT:
        terminalreporter.write_line(
            f"dlsuite: {sum(_CORPUS_LEFT_OUT.values())} corpus training test(s) deselected for "
            f"{', '.join(_CORPUS_LEFT_OUT)}: the corpus trains in "
            "tests/conformance/test_corpus.py's CORPUS_TRAINING; these adapters infer it"
        )
    if _CORPUS_SUBSET_LEFT_OUT[0]:
        from tests.corpus import CI_SUBSET

        terminalreporter.write_line(
            f"dlsuite: {_CORPUS_SUBSET_LEFT_OUT[0]} corpus test(s) deselected: the kit runs the "
            f"corpus' CI subset ({', '.join(CI_SUBSET)}); `make corpus` "
            "(DLSUITE_CORPUS_ALL=1) runs every export"
        )
    if _LEFT_OUT:
        terminalreporter.write_line(
            f"dlsuite: {sum(_LEFT_OUT.values())} operator-sweep, op and corpus test(s) deselected "
            f"for {', '.join(_LEFT_OUT)}: "
            "it does not run the operator and network levels (Adapter.levels)"
        )
