"""Where the suite keeps the datasets it makes: one setting, one precedence.

``--data-dir`` > ``DLSUITE_DATA_DIR`` > the config file's ``[run] data_dir`` > the site
profile's ``data_dir`` > ``~/.cache/dlsuite/data``. On a cluster the site profile names a
shared file system (Lustre, GPFS, NFS), so every node reads the same files; on a workstation
the default is the user's cache. Host side: no framework.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from suite.errors import ConfigError
from suite.safety import check_text
from suite.settings import setting

DATA_DIR_VAR = str(setting("data_dir").env)  # declared with the setting


def default_data_dir() -> Path:
    return Path.home() / ".cache" / "dlsuite" / "data"


@dataclass(frozen=True)
class DataDir:
    """The chosen directory and which layer chose it (``--data-dir``, the environment, the
    config file, the site profile or the default), for messages and records."""

    path: Path
    source: str


def resolve_data_dir(
    flag: str | None = None,
    *,
    config_value: str | None = None,
    site_value: str | None = None,
    env: dict[str, str] | None = None,
) -> DataDir:
    """The data directory by the suite's precedence (see the module). Nothing is created."""
    environ = os.environ if env is None else env
    layers = (
        ("--data-dir", flag),
        (DATA_DIR_VAR, environ.get(DATA_DIR_VAR) or None),
        ("the config file's [run] data_dir", config_value),
        ("the site profile's data_dir", site_value),
    )
    for source, value in layers:
        if value is None:
            continue
        check_text(value, source)
        if not value.strip():
            raise ConfigError(f"{source}: empty; give a directory for the datasets")
        return DataDir(Path(value).expanduser().absolute(), source)
    return DataDir(default_data_dir(), "the default")
