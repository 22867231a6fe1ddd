"""Adapter-specific conformance files (``test_<adapter>_specific.py``) are collected only where
the kit runs that adapter (see ``_selected`` in test_adapters.py): elsewhere they are left out of
the collection, not skipped, so a run's summary lists no skip for them."""

from __future__ import annotations

from pathlib import Path

from tests.conformance.test_adapters import ADAPTER_NAMES

collect_ignore = [
    p.name
    for p in Path(__file__).parent.glob("test_*_specific.py")
    if p.name[len("test_") : -len("_specific.py")] not in ADAPTER_NAMES
]
