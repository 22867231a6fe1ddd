"""The adapters' layout (docs/guide/adding-a-framework.md): a module per word group, so that no
adapter.py grows past what a reader takes in (500 lines); the optimizer words that only pass a
call to the handle written once, in the base class; every framework with the optimizer words
records what its documentation states in its own folder. Read from the files and the classes
(no framework is imported)."""

from __future__ import annotations

from pathlib import Path

from suite.adapters import ADAPTERS
from suite.adapters.optimizer_words import OptimizerWords
from suite.optimizers import documented
from tests.helpers import ROOT

ADAPTERS_DIR = ROOT / "suite" / "adapters"
#: the words written once over OptimizerHandle
DELEGATING = (
    "optimizer_set_gradients",
    "optimizer_set_lr",
    "optimizer_step",
    "optimizer_parameters",
    "optimizer_state_bytes",
)


def test_every_adapter_module_is_under_500_lines() -> None:
    sizes = {
        str(p.relative_to(ROOT)): len(p.read_text().splitlines())
        for p in sorted(ADAPTERS_DIR.glob("*/adapter*.py"))
    }
    assert sizes and all(n < 500 for n in sizes.values()), sizes


def test_the_optimizer_words_pass_to_the_handle_in_one_place() -> None:
    for name in ADAPTERS.names():
        cls = ADAPTERS.load(name)
        for word in DELEGATING:
            assert getattr(cls, word) is getattr(OptimizerWords, word), (
                f"{name} overrides {word}: the handle's method is the place for it"
            )


def test_every_framework_with_optimizers_records_them_in_its_folder() -> None:
    sources = documented.sources()
    for name in ADAPTERS.names():
        cls = ADAPTERS.load(name)
        if cls.optimizers and "training" in cls.levels:
            path = sources.get(name)
            assert path is not None and path.parent == ADAPTERS_DIR / name, (name, path)
    assert set(documented.frameworks()) == set(sources)
    assert all(isinstance(p, Path) and p.name == documented.FILENAME for p in sources.values())
