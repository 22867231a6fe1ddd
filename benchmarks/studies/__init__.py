"""The studies: each runs the suite (or a part of it) over a grid too long for CI and writes,
or gives the tables of, one page of docs/. `make study NAME=... ARGS="..."` runs one
(``python -m benchmarks.studies NAME ...``); `make study` lists them with their pages.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Study:
    """One study (a module of this package): the page it writes or feeds, and what it is."""

    doc: str
    what: str


#: every study, by module name
STUDIES: dict[str, Study] = {
    "frameworks_cpu": Study(
        "docs/studies/frameworks-cpu.md",
        "every framework's operator and network levels, with bare loops",
    ),
    "mixed_precision_stability": Study(
        "docs/studies/mixed-precision-stability.md",
        "mixed-precision trainings over seeds and threads",
    ),
    "loader_sweep": Study(
        "docs/reference/training-level.md", "PyTorch's loader over 1, 2, 4 ... workers"
    ),
    "run_efficiency": Study(
        "docs/studies/run-efficiency-cpu.md", "where a run's wall time goes; the measuring share"
    ),
    "slurm_array": Study(
        "docs/guide/clusters.md", "a 1,000-task job array on a private local cluster"
    ),
    "history_store": Study("docs/guide/history.md", "the history store at a year of weekly runs"),
    "projection_tables": Study(
        "docs/guide/projection.md", "the projection's tables: measured, held out, published"
    ),
    "bucket_pair": Study(
        "docs/guide/projection.md", "DDP's bucket sizes timed in alternating steps of one run"
    ),
    "horovod_fusion": Study(
        "docs/guide/projection.md",
        "Horovod's fusion threshold as data_parallel's bucket, with a bare horovodrun loop",
    ),
    "jax_messages": Study(
        "docs/reference/frameworks.md",
        "JAX's data-parallel exchange on CPUs: per tensor or flat buffers, with a bare loop",
    ),
    "optimizer_gpu_check": Study(
        "docs/reference/training-level.md", "the optimizer benchmark on a lent GPU, every framework"
    ),
    "optimizer_differences": Study(
        "docs/studies/optimizer-differences.md",
        "how each framework's optimizers differ from the rules",
    ),
    "imagenet_scale": Study(
        "docs/reference/training-level.md",
        "planning and the first batch over an ImageNet-sized tree",
    ),
    "explain_study": Study(
        "docs/guide/explain.md",
        "the four levels at one network's shapes and the report explaining them",
    ),
}
