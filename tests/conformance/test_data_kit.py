"""The conformance kit's data items: every adapter declares, per dataset format, its own loader
or why it has none (a reason, not a word); each declared loader reads a small dataset (48
JPEGs of 4 classes, made in a temporary data dir, a packed format by its framework's own
writer) with every check of the ``loader`` benchmark passing; an undeclared format is declined
with exactly the declared reason. An adapter that does not run the training level (Horovod)
is left out, as the level is."""

from __future__ import annotations

from pathlib import Path

import pytest

from suite.adapters import ADAPTERS
from suite.adapters.base import Adapter
from suite.adapters.data_words import DATA_FORMATS
from suite.benchmark import Context
from suite.levels import execute, load_benchmark
from tests.conformance.test_adapters import ADAPTER_NAMES, skip_declared

NAMES = ADAPTER_NAMES
SMALL = {"dataset": "quick", "images": 48, "classes": 4, "batch": 8, "workers": 1,
         "cache": "warm", "transform": "train"}  # fmt: skip


def _runs_the_level(name: str) -> type[Adapter]:
    """The adapter's class; an adapter that does not run the training level (Horovod) ends
    the test as declared, with its level's reason (what its skipped records say)."""
    cls = ADAPTERS.load(name)
    if "training" not in cls.levels:
        skip_declared(cls.levels_reason or f"{name} does not run the training level")
    return cls


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("kit-data")


@pytest.mark.parametrize("name", NAMES)
def test_every_format_has_a_loader_or_a_reason(name: str) -> None:
    cls = _runs_the_level(name)
    if not cls.loaders and not cls.unsupported_loaders:  # no data words: every format declined
        skip_declared(cls.loader_declined(DATA_FORMATS[0]))
    for fmt in DATA_FORMATS:
        assert (fmt in cls.loaders) != (fmt in cls.unsupported_loaders), fmt
        text = cls.loaders.get(fmt) or cls.unsupported_loaders[fmt]
        assert len(text.split()) >= 5, (fmt, text)  # a sentence, not a word


@pytest.mark.parametrize("fmt", DATA_FORMATS)
@pytest.mark.parametrize("name", NAMES)
def test_declared_loaders_read_and_pass_the_rest_are_declined(name: str, fmt: str,
                                                              data_dir: Path) -> None:  # fmt: skip
    cls = _runs_the_level(name)
    adapter = cls()
    device = adapter.setup("cpu")
    task = {"benchmark": "loader", "level": "training", "dtype": "fp32", "seed": 0,
            "world_size": 1, "params": {**SMALL, "format": fmt},
            "data": {"dir": str(data_dir)}}  # fmt: skip
    bench = load_benchmark("training", "loader")
    params = bench.validate(task["params"])
    declined = bench.declined(Context(task, adapter, device, params))
    if fmt not in cls.loaders:
        # the adapter's own reason, then the frameworks that read the format (host side)
        assert declined.startswith(cls.loader_declined(fmt)), declined
        readers = ADAPTERS.names_where(lambda c: fmt in c.loaders and "training" in c.levels)
        if readers:
            assert f"{fmt} is read by: {', '.join(readers)}" in declined, declined
        if fmt in cls.unsupported_loaders:
            assert declined.startswith(cls.unsupported_loaders[fmt])
            return
        assert "does not implement the data words" in declined, declined
        skip_declared(declined)
    assert declined == ""
    out = execute(task, adapter, device)
    assert isinstance(out, dict)
    failed = [c for c in out["correctness"]["checks"] if not c["passed"]]
    assert not failed, failed
    assert out["pipeline"]["dataset"]["samples"] == 48
    assert out["pipeline"]["loader"], "the loader describes itself for the record"
