"""The JAX adapter leans on two private modules (``jax._src.xla_bridge``: whether the backends
have started; ``jax._src.lib.cuda_versions``: the CUDA and cuDNN versions): a JAX release that
moves them (the lent GPU machine has a newer one than this project's environment) still sets
up and reports the versions it cannot read as unknown, not an ImportError. Runs in JAX's
environment (the venv backend builds it)."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from suite import envs
from tests.helpers import ROOT

SCRIPT = r"""
import builtins, json
import jax, jax.numpy, jaxlib, optax  # JAX itself imports its private modules: first, as is
from suite.adapters.jax import adapter as A

real = builtins.__import__
def moved(name, globals=None, locals=None, fromlist=(), level=0):
    if name.startswith("jax._src") and set(fromlist or ()) & {"xla_bridge", "cuda_versions"}:
        raise ImportError(f"{name}: moved in this release")
    return real(name, globals, locals, fromlist, level)

builtins.__import__ = moved
ad = A.JaxAdapter()
info = ad.setup("cpu")
v = ad.versions()
print(json.dumps({"device": info.kind, "cuda": v.get("cuda"), "jax": v.get("jax")}))
"""


@pytest.mark.slow  # JAX's environment: built once, then cached
def test_a_jax_without_the_private_modules_still_sets_up() -> None:
    python = str(envs.ensure("jax").python)
    proc = subprocess.run([python, "-c", SCRIPT], capture_output=True, text=True, timeout=300,
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["device"] == "cpu" and out["cuda"] is None and out["jax"]
