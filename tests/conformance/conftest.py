"""Adapter-specific conformance files (``test_<adapter>_specific.py``) are collected only where
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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    from suite.adapters import ADAPTERS

    keep, drop = [], []
    for item in items:
        callspec = getattr(item, "callspec", None)
        name = callspec.params.get("adapter") if callspec is not None else None
        sweep = getattr(item, "originalname", "") == OPERATOR_SWEEP
        if sweep and name and "operator" not in ADAPTERS.load(name).levels:
            drop.append(item)
            _LEFT_OUT[name] = _LEFT_OUT.get(name, 0) + 1
        else:
            keep.append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _LEFT_OUT:
        terminalreporter.write_line(
            f"dlsuite: {sum(_LEFT_OUT.values())} operator-sweep test(s) deselected for "
            f"{', '.join(_LEFT_OUT)}: "
            "it does not run the operator level (Adapter.levels)"
        )
