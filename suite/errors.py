"""One exception hierarchy. The CLI turns any SuiteError into one line and exit code 2."""

from __future__ import annotations


class SuiteError(Exception):
    """Base of every error the suite reports to a user (bad input, missing dependency...)."""

    exit_code = 2


class ConfigError(SuiteError):
    """Bad input: config file, CLI flag, parameter. The message names the field and the fix."""


class PlanError(ConfigError):
    """The requested combination of level/benchmark/framework cannot be planned."""


class AdapterError(SuiteError):
    """An adapter cannot be loaded or used (framework missing, unsupported feature)."""


class UnsupportedError(AdapterError):
    """A benchmark/dtype/device combination the adapter declares unsupported: recorded as skipped."""


class BackendError(SuiteError):
    """A backend (local, venv, docker, apptainer) cannot run a worker."""


class SchedulerError(SuiteError):
    """A scheduler (Slurm) refused or lost a job, or its commands are missing."""


class SchemaError(SuiteError):
    """A document does not validate against its JSON Schema."""


class OutputError(SuiteError):
    """The output (run) directory cannot be used."""
