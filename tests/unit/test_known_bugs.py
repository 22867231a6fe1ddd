"""A framework's own bug that gives wrong values: the collectives' value check says where the
wrong elements are and, when the adapter declares the bug (``known_bugs``), names it; the check
still fails, the summary says whose bug it is, and a failure nobody declared stays unexplained."""

from __future__ import annotations

import io
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from rich.console import Console

from suite import summary
from suite.adapters import ADAPTERS
from suite.adapters.base import Adapter
from suite.adapters.jax.adapter import JaxAdapter
from suite.adapters.known_bugs import GLOO_REDUCE_SCATTER
from suite.aggregate import merge_ranks
from suite.levels.distributed.run import _value_check
from suite.results import validate_record
from tests import synthetic

BUG = "now and then wrong at the end of rank 0's chunk: https://example.invalid/issues/1"


class Declares:
    """What ``_value_check`` asks of an adapter: the base class's ``known_bug``."""

    known_bugs = {"reduce_scatter": BUG}
    known_bug = Adapter.known_bug


def test_a_right_result_passes_with_no_detail() -> None:
    want = np.arange(8, dtype=np.float32)
    check = _value_check(Declares(), "reduce_scatter", want.copy(), want)  # type: ignore[arg-type]
    assert check.passed and check.error == 0 and check.detail is None


def test_wrong_elements_are_counted_and_located_and_the_declared_bug_named() -> None:
    want = np.arange(1000, dtype=np.float32)
    got = want.copy()
    got[700:] = 0.0  # the tail of the chunk, as jax-ml/jax#40830 describes
    got[0] = want[0]  # 0 == 0 there: still right
    check = _value_check(Declares(), "reduce_scatter", got, want)  # type: ignore[arg-type]
    assert not check.passed and check.error == 300
    assert check.detail == {"first_wrong": 700, "last_wrong": 999, "of": 1000, "known_bug": BUG}


def test_a_bug_declared_for_another_collective_is_not_named() -> None:
    want = np.ones(4, dtype=np.float32)
    check = _value_check(Declares(), "allgather", want * 2, want)  # type: ignore[arg-type]
    assert check.error == 4 and check.detail == {"first_wrong": 0, "last_wrong": 3, "of": 4}


def test_a_wrong_shape_counts_every_element_wrong() -> None:
    want = np.ones(6, dtype=np.float32)
    check = _value_check(Declares(), "reduce_scatter", np.ones(3, np.float32), want)  # type: ignore[arg-type]
    assert check.error == 6
    assert check.detail == {"shape": [3], "expected_shape": [6], "known_bug": BUG}


def test_the_adapters_on_gloos_reduce_scatter_declare_its_bug() -> None:
    """XLA:CPU and Horovod's gloo ops call gloo's ReduceScatterHalvingDoubling; PyTorch's gloo
    reduce-scatter is an allreduce per rank, TensorFlow's and MXNet's are their own."""
    declaring = {n for n in ADAPTERS.names() if ADAPTERS.load(n).known_bugs}
    assert declaring == {"jax", "horovod", "horovod-tensorflow"}
    for name in declaring:
        assert ADAPTERS.load(name).known_bugs == {"reduce_scatter": GLOO_REDUCE_SCATTER}
    assert "jax-ml/jax/issues/40830" in GLOO_REDUCE_SCATTER


def test_jax_declares_its_reduce_scatter_bug_on_cpus_only() -> None:
    cpu = SimpleNamespace(on_gpu=False, known_bugs=JaxAdapter.known_bugs)
    gpu = SimpleNamespace(on_gpu=True, known_bugs=JaxAdapter.known_bugs)
    assert JaxAdapter.known_bug(cpu, "reduce_scatter") == JaxAdapter.known_bugs["reduce_scatter"]  # type: ignore[arg-type]
    assert JaxAdapter.known_bug(gpu, "reduce_scatter") is None  # type: ignore[arg-type]
    assert JaxAdapter.known_bug(cpu, "allreduce") is None  # type: ignore[arg-type]


def _rank_records(details: list[dict[str, Any] | None]) -> list[dict[str, Any]]:
    recs = []
    for rank, detail in enumerate(details):
        rec = synthetic.collective_record("reduce_scatter", world_size=len(details), rank=rank)
        check = rec["correctness"]["checks"][0]
        if detail is not None:
            check.update(error=5.0, passed=False, detail=detail)
            rec["correctness"]["passed"] = False
        recs.append(rec)
    return recs


@pytest.mark.parametrize(
    ("details", "bugs"),
    [
        ([{"known_bug": BUG}, None], [BUG]),  # rank 0 wrong, named; rank 1 right
        ([{"known_bug": BUG}, {"first_wrong": 3}], []),  # rank 1's wrong values unexplained
        ([None, None], []),  # nothing failed
    ],
)
def test_the_merged_record_names_the_bug_only_when_it_explains_every_failure(
    details: list[dict[str, Any] | None], bugs: list[str]
) -> None:
    merged = merge_ranks(_rank_records(details), 2, "spawn")
    validate_record(merged)
    assert summary.known_bugs(merged) == bugs
    cell = summary.correctness_cell(merged).plain
    assert cell.startswith("pass" if details == [None, None] else "FAIL")
    assert ("known bug" in cell) == bool(bugs)


def test_the_summary_table_says_known_bug() -> None:
    merged = merge_ranks(_rank_records([{"known_bug": BUG}, None]), 2, "spawn")
    console = Console(width=200, file=io.StringIO())
    console.print(summary.table([merged]))
    text = console.file.getvalue()  # type: ignore[attr-defined]
    assert "FAIL" in text and "(known bug)" in text
