"""Backends: *where* a worker runs. Registry of ``module:Class`` entries, imported lazily."""

from __future__ import annotations

from suite.backends.base import Backend, WorkerResult
from suite.errors import BackendError
from suite.registry import Registry

BACKENDS: Registry[type[Backend]] = Registry("backend", error=BackendError)
BACKENDS.register("local", "suite.backends.local:LocalBackend")
BACKENDS.register("venv", "suite.backends.venv:VenvBackend")
BACKENDS.register("docker", "suite.backends.docker:DockerBackend")
BACKENDS.register("apptainer", "suite.backends.apptainer:ApptainerBackend")

__all__ = ["BACKENDS", "Backend", "WorkerResult"]
